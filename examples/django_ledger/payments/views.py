from __future__ import annotations

import json
import uuid
from decimal import Decimal

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_POST

from payments.models import Customer, Invoice, Payment


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@require_POST
def pay(request: HttpRequest, customer_id: uuid.UUID) -> HttpResponse:
    """Record a payment, then report the customer's overdue invoices."""
    amount = Decimal(str(json.loads(request.body)["amount"]))
    with transaction.atomic():
        customer, _ = Customer.objects.get_or_create(
            id=customer_id, defaults={"name": f"customer {customer_id}"}
        )
        Payment.objects.create(customer=customer, amount=amount, created_at=timezone.now())
    overdue = list(Invoice.objects.filter(customer=customer, due_at__lt=timezone.now()))
    total = sum((invoice.amount for invoice in overdue), Decimal(0))
    average = total / len(overdue)
    return JsonResponse({"paid": str(amount), "overdue": len(overdue), "average": str(average)})
