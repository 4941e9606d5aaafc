"""A customer with two overdue invoices in EUR (the healthy requests pay for it)."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal
from typing import Any

from django.db import migrations

HEALTHY_CUSTOMER = uuid.UUID("11111111-1111-4111-8111-111111111111")


def seed(apps: Any, schema_editor: Any) -> None:
    customer_model = apps.get_model("ledger", "Customer")
    invoice_model = apps.get_model("ledger", "Invoice")
    customer = customer_model.objects.create(id=HEALTHY_CUSTOMER, name="Ada")
    for number, amount in enumerate(("30.00", "12.50"), start=1):
        invoice_model.objects.create(
            id=uuid.UUID(int=number),
            customer=customer,
            amount=Decimal(amount),
            currency="EUR",
            due_at=datetime.datetime(2025, number, 1, tzinfo=datetime.timezone.utc),
        )


class Migration(migrations.Migration):
    dependencies = (("ledger", "0001_initial"),)
    operations = (migrations.RunPython(seed, migrations.RunPython.noop),)
