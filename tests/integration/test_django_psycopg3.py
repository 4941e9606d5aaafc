"""Django's ORM on psycopg 3, recorded on the real PostgreSQL and replayed without it.

Django prefers psycopg 3 when it is installed, and its psycopg 3 backend asks more of a
connection than plain statements: it opens the connection with its own cursor class and an
adapters map of its own (``jsonb`` and ``inet`` loaded as text, ``timestamptz`` in its time
zone), sets the session time zone when the server's differs, builds a server-side cursor
class directly on the connection for ``QuerySet.iterator()``, and, when queries are logged,
reads the statement psycopg sent back from the cursor. The request here does all of that, on
a connection of its own or one from Django's psycopg_pool pool (``OPTIONS["pool"]``); its
replay, with the database out of reach, must show the application exactly what the recording
did, Python types included, and the same logged SQL.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from reproit_otel.instrumentation.psycopg import PsycopgReplayInstrumentor
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.replay import ReplaySession
from tests.integration.django_support import configure_django
from tests.integration.pg3_support import record
from tests.integration.pg_support import seen

pytestmark = pytest.mark.postgres

SHELF = uuid.UUID("7b4d3c6e-0000-4000-8000-000000000001")
AT = dt.datetime(2024, 3, 1, 9, 30, tzinfo=dt.timezone.utc)

_models: dict[str, Any] = {}


def _book_model() -> Any:
    if "Book" not in _models:
        from django.db import models

        class Book(models.Model):
            id = models.UUIDField(primary_key=True, default=uuid.uuid4)
            title = models.CharField(max_length=60)
            price = models.DecimalField(max_digits=8, decimal_places=2)
            shelved_at = models.DateTimeField()
            details = models.JSONField(null=True)
            source = models.GenericIPAddressField(null=True)

            class Meta:
                app_label = "django_pg3_tests"
                db_table = "django_pg3_books"

        _models["Book"] = Book
    return _models["Book"]


@pytest.fixture(scope="module")
def book(postgres_dsn: str) -> Iterator[Any]:
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS django_pg3_books (id uuid PRIMARY KEY, "
            "title varchar(60) NOT NULL, price numeric(8, 2) NOT NULL, "
            "shelved_at timestamptz NOT NULL, details jsonb, source inet)"
        )
        connection.execute("DELETE FROM django_pg3_books")
        for index in range(5):
            connection.execute(
                "INSERT INTO django_pg3_books VALUES (%s, %s, %s, %s, %s, %s)",
                [
                    uuid.UUID(int=index + 1),
                    f"volume {index}",
                    Decimal(f"1{index}.50"),
                    AT - dt.timedelta(days=index),
                    psycopg.types.json.Jsonb({"pages": 100 + index, "tags": ["a", "b"]}),
                    f"10.0.0.{index}",
                ],
            )
    configure_django(postgres_dsn)
    yield _book_model()


@contextmanager
def pooled(pool: bool) -> Iterator[None]:
    """Django's connection pool for the default database while the block runs."""
    from django.db import connections

    if not pool:
        yield
        return
    database = connections.settings["default"]
    saved = (database["CONN_MAX_AGE"], dict(database["OPTIONS"]))
    database["CONN_MAX_AGE"] = 0  # Django refuses persistent connections with a pool
    database["OPTIONS"]["pool"] = {"min_size": 1, "max_size": 2}
    try:
        yield
    finally:
        database["CONN_MAX_AGE"], database["OPTIONS"] = saved


def request(book: Any) -> Any:
    """One request: a transaction, a JSON insert, a server-side cursor, logged queries."""
    from django.db import connection, connections, reset_queries, transaction

    # A new connection wrapper, as in a new process (savepoint and cursor names count from 1),
    # whose connection opens inside the request.
    connections.close_all()
    if connections.all(initialized_only=True):
        del connections["default"]
    reset_queries()  # as Django does when a request starts
    connection.force_debug_cursor = True  # as DEBUG does: every statement is logged
    try:
        with transaction.atomic():
            made, created = book.objects.get_or_create(
                id=SHELF,
                defaults={
                    "title": "new arrival",
                    "price": Decimal("9.99"),
                    "shelved_at": AT,
                    "details": {"pages": 321, "signed": True},
                    "source": "192.0.2.7",
                },
            )
            listed = [
                (b.title, b.price, b.shelved_at, b.details, b.source)
                for b in book.objects.order_by("title").iterator(chunk_size=2)
            ]
            fetched = book.objects.get(id=SHELF)
            made.delete()
        logged = [query["sql"] for query in connection.queries]
        driver = (connection.Database.__name__, connection.pool is not None)
    finally:
        connection.force_debug_cursor = False
        connections.close_all()
        connection.close_pool()  # a pool lives as long as its process: the replay makes its own
    shown = [created, listed, fetched.details, fetched.shelved_at, fetched.source]
    return {"driver": driver, "seen": seen(shown), "logged": logged}


@pytest.mark.parametrize("pool", [False, True], ids=["connection", "pool"])
def test_a_django_request_on_psycopg_3_replays_as_recorded(book: Any, pool: bool) -> None:
    with pooled(pool):
        recorded = record("", lambda _dsn: request(book), otel=False)
    assert recorded.result["driver"] == ("psycopg", pool)
    # QuerySet.iterator() in a transaction: a server-side cursor, its rows fetched 2 by 2.
    iterated = [
        (exchange["response"]["command"], exchange["response"]["rowCount"])
        for exchange in recorded.exchanges
        if "ORDER BY" in exchange["request"]["text"]
    ]
    assert iterated == [("DECLARE", 6)]
    session = ReplaySession(recorded.capsule())
    activate(session)
    PsycopgReplayInstrumentor().instrument()
    try:
        with pooled(pool):
            replayed = request(book)
    finally:
        PsycopgReplayInstrumentor().uninstrument()
        deactivate()
    assert replayed == recorded.result
    assert not session.diverged, session.divergence_lines
    usage = session.usage.report()
    assert usage["consumed"] == usage["dataExchanges"] == 5 and usage["unused"] == 0, usage
