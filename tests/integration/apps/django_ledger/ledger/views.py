from __future__ import annotations

import json
import os
import uuid
from decimal import Decimal

import requests
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from ledger.models import Customer, Invoice, Payment

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def _fields(request: HttpRequest) -> dict[str, str]:
    if request.content_type == "application/json":
        return dict(json.loads(request.body))
    return request.POST.dict()


def pay(request: HttpRequest, customer_id: uuid.UUID) -> HttpResponse:
    if request.method != "POST":
        return JsonResponse({"error": "POST only"}, status=405)
    fields = _fields(request)
    currency = request.GET.get("currency", "EUR")
    if os.environ.get("LEDGER_OTHER_CURRENCY") == "1":
        currency = "USD"
    with transaction.atomic():
        customer, _ = Customer.objects.get_or_create(
            id=customer_id, defaults={"name": f"customer {customer_id}"}
        )
        payment = Payment.objects.create(
            customer=customer,
            amount=Decimal(str(fields["amount"])),
            reference=fields["reference"],
            created_at=timezone.now(),
        )
    overdue = list(
        Invoice.objects.filter(
            customer=customer, due_at__lt=timezone.now(), currency=currency
        ).order_by("due_at")
    )
    rate = requests.get(f"{UPSTREAM}/json", timeout=5).json()["rate"]
    total = sum((invoice.amount for invoice in overdue), Decimal(0))
    if os.environ.get("LEDGER_FIXED") == "1":
        average = total / len(overdue) if overdue else Decimal(0)
    else:
        average = total / len(overdue)  # the planted bug: no overdue invoice divides by zero
    return JsonResponse(
        {
            "customer": str(customer.id),
            "paid": str(payment.amount),
            "overdue": len(overdue),
            "average": str(average),
            "rate": rate,
        }
    )
