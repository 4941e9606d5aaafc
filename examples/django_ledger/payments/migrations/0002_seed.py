"""A customer with two overdue invoices, so that paying for it works."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal
from typing import Any

from django.db import migrations

ADA = uuid.UUID("11111111-1111-4111-8111-111111111111")


def seed(apps: Any, schema_editor: Any) -> None:
    customer = apps.get_model("payments", "Customer").objects.create(id=ADA, name="Ada")
    invoices = apps.get_model("payments", "Invoice").objects
    for month, amount in ((1, "30.00"), (2, "12.50")):
        invoices.create(
            customer=customer,
            amount=Decimal(amount),
            due_at=datetime.datetime(2025, month, 1, tzinfo=datetime.timezone.utc),
        )


class Migration(migrations.Migration):
    dependencies = (("payments", "0001_initial"),)
    operations = (migrations.RunPython(seed, migrations.RunPython.noop),)
