"""A FastAPI ledger on a synchronous SQLAlchemy session, with a planted bug and no
reproit-otel code.

Run under ``opentelemetry-instrument``: ``uvicorn fastapi_app:app --port PORT``. The
endpoint is a plain ``def``, so FastAPI runs it (and its session) in its thread pool.
"""

from __future__ import annotations

import datetime
import os
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any

import requests
from fastapi import Depends, FastAPI
from fastapi.responses import PlainTextResponse
from models import Customer, Invoice, Payment, database_url
from pydantic import BaseModel
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")

engine = create_engine(database_url(), pool_pre_ping=True)
app = FastAPI()


def session() -> Iterator[Session]:
    with Session(engine) as opened:
        yield opened


class PaymentIn(BaseModel):
    amount: Decimal
    reference: str


@app.get("/", response_class=PlainTextResponse)
def health() -> str:
    return "ok"


@app.post("/customers/{customer_id}/payments")
def pay(
    customer_id: uuid.UUID,
    given: PaymentIn,
    db: Annotated[Session, Depends(session)],
    currency: str = "EUR",
) -> Any:
    if os.environ.get("LEDGER_OTHER_CURRENCY") == "1":
        currency = "USD"
    with db.begin():
        if db.get(Customer, customer_id) is None:
            db.add(Customer(id=customer_id, name=f"customer {customer_id}"))
            db.flush()
        db.add(
            Payment(
                id=uuid.uuid4(),
                customer_id=customer_id,
                amount=given.amount,
                reference=given.reference,
                created_at=datetime.datetime.now(),
            )
        )
    overdue = db.scalars(
        select(Invoice)
        .where(
            Invoice.customer_id == customer_id,
            Invoice.due_at < datetime.datetime.now(),
            Invoice.currency == currency,
        )
        .order_by(Invoice.due_at)
    ).all()
    rate = requests.get(f"{UPSTREAM}/json", timeout=5).json()["rate"]
    total = sum((invoice.amount for invoice in overdue), Decimal(0))
    if os.environ.get("LEDGER_FIXED") == "1":
        average = total / len(overdue) if overdue else Decimal(0)
    else:
        average = total / len(overdue)  # the planted bug: no overdue invoice divides by zero
    return {
        "customer": str(customer_id),
        "overdue": len(overdue),
        "average": str(average),
        "rate": rate,
    }
