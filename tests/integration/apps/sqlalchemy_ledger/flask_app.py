"""A Flask-SQLAlchemy ledger with a planted bug and no reproit-otel code.

Run under ``opentelemetry-instrument``: ``python flask_app.py --port PORT``. The engine pings
every connection it checks out (``pool_pre_ping=True``). Environment and variants as in
``README.md`` of this folder.
"""

from __future__ import annotations

import argparse
import datetime
import os
import uuid
from decimal import Decimal
from typing import Any

import requests
import sqlalchemy
from flask import Flask, jsonify, request
from flask_sqlalchemy import SQLAlchemy
from models import Base, Customer, Invoice, Payment, database_url
from sqlalchemy import select
from werkzeug.serving import make_server

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")

app = Flask(__name__)
app.config["SQLALCHEMY_DATABASE_URI"] = database_url()
app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"pool_pre_ping": True}
# The models are declared on their own base (models.py); the session maps them as they are, so
# Flask-SQLAlchemy 3.0 (which cannot take a DeclarativeBase as its model class) serves too.
db = SQLAlchemy(app)

if os.environ.get("LEDGER_BOOT_CHECK") == "1":
    # Checked at import, before the first request, the way Flask-AppBuilder's security manager
    # checks its tables: the inspector reads the first column of its catalogue query, then the
    # ORM reads a row.
    with app.app_context():
        tables = sqlalchemy.inspect(db.engine).get_table_names()
        if "payment" not in tables:
            Base.metadata.create_all(db.engine)
        FIRST_CUSTOMER = db.session.scalars(select(Customer.name).limit(1)).first()
        db.session.remove()


@app.get("/")
def health() -> tuple[str, int]:
    return "ok", 200


@app.post("/customers/<uuid:customer_id>/payments")
def pay(customer_id: uuid.UUID) -> Any:
    fields = request.get_json()
    currency = request.args.get("currency", "EUR")
    if os.environ.get("LEDGER_OTHER_CURRENCY") == "1":
        currency = "USD"
    customer = db.session.get(Customer, customer_id)
    if customer is None:
        customer = Customer(id=customer_id, name=f"customer {customer_id}")
        db.session.add(customer)
    payment = Payment(
        id=uuid.uuid4(),
        customer_id=customer_id,
        amount=Decimal(fields["amount"]),
        reference=fields["reference"],
        created_at=datetime.datetime.now(),
    )
    db.session.add(payment)
    db.session.commit()
    overdue = db.session.scalars(
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
    body = {"customer": str(customer_id), "overdue": len(overdue), "average": str(average)}
    return jsonify({**body, "rate": rate})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    server = make_server("127.0.0.1", parser.parse_args().port, app, threaded=True)
    server.serve_forever()
