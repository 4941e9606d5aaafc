"""The ledger's tables in SQLAlchemy 2 declarative style, shared by the Flask-SQLAlchemy and
FastAPI apps of this folder, and the rows every run starts from."""

from __future__ import annotations

import datetime
import os
import uuid
from decimal import Decimal

from sqlalchemy import ForeignKey, Numeric, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

HEALTHY_CUSTOMER = uuid.UUID("11111111-1111-4111-8111-111111111111")


def database_url() -> str:
    """``DATABASE_URL`` as a SQLAlchemy URL on the psycopg2 driver (``LEDGER_DRIVER`` picks
    another one)."""
    dsn = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:9/postgres")
    driver = os.environ.get("LEDGER_DRIVER", "psycopg2")
    return f"postgresql+{driver}://" + dsn.removeprefix("postgresql://")


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customer"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(100))


class Invoice(Base):
    __tablename__ = "invoice"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    customer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("customer.id"))
    amount: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    currency: Mapped[str] = mapped_column(String(3))
    due_at: Mapped[datetime.datetime]


class Payment(Base):
    __tablename__ = "payment"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    customer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("customer.id"))
    amount: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    reference: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime.datetime]


def create_and_seed() -> None:
    """Create the tables and a customer with two overdue invoices in EUR."""
    engine = create_engine(database_url())
    Base.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        session.add(Customer(id=HEALTHY_CUSTOMER, name="Ada"))
        session.flush()
        for number, amount in enumerate(("30.00", "12.50"), start=1):
            session.add(
                Invoice(
                    id=uuid.UUID(int=number),
                    customer_id=HEALTHY_CUSTOMER,
                    amount=Decimal(amount),
                    currency="EUR",
                    due_at=datetime.datetime(2025, number, 1),
                )
            )
    engine.dispose()


if __name__ == "__main__":
    create_and_seed()
