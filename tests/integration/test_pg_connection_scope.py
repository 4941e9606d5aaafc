"""Real SQLAlchemy and Django ORM code, recorded on the real PostgreSQL, replayed without it.

Each stack runs a request that reads, inserts a row keyed by a fresh ``uuid4`` with a
timestamp from the clock, uses a savepoint, and filters on the clock. Production and the
replay differ in pool state: the recording is made with a warm pool (the connection opened,
pinged, set up and used before the request) or a cold one (opened inside the request), and
the replay boots warm (a warm-up query before the request, in the before-request window) or
cold. In every combination the replay answers the request exactly as recorded, consumes every
recorded data statement, and never diverges; a real change of a parameter still diverges.
SQLAlchemy runs on psycopg2; Django on psycopg 3, which it picks when it is installed.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import psycopg2
import psycopg2.extras
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.errors import DivergedError
from reproit_otel.instrumentation import psycopg as pg3_recorder
from reproit_otel.instrumentation.psycopg import PsycopgReplayInstrumentor
from reproit_otel.instrumentation.psycopg2 import (
    Psycopg2ReplayInstrumentor,
    install_recorder,
    uninstall_recorder,
)
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.replay import ReplaySession
from tests.integration.django_support import configure_django
from tests.integration.pg_support import closed_port_dsn
from tests.integration.pipeline_support import ListSink

Connect = Callable[..., Any]


class App(Protocol):
    def before(self) -> None: ...

    def request(self) -> Any: ...

    def close(self) -> None: ...


AppFactory = Callable[[Connect, bool, bool], App]


def _connect_to(dsn: str) -> Connect:
    def connect(*args: Any, **kwargs: Any) -> Any:
        return psycopg2.connect(dsn, *args, **kwargs)

    return connect


def record(dsn: str, factory: AppFactory, warm: bool) -> tuple[Any, dict[str, Any]]:
    """Run the app against PostgreSQL: its warm-up outside the request, the request captured."""
    sink = ListSink()
    processor = ReproitSpanProcessor(read_config({}), [sink])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    install_recorder()
    pg3_recorder.install_recorder()  # Django picks psycopg 3 when it is installed
    try:
        app = factory(_connect_to(dsn), warm, False)
        try:
            app.before()
            with tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER):
                result = app.request()
        finally:
            app.close()
        [trace] = sink.wait_for(1)
    finally:
        pg3_recorder.uninstall_recorder()
        uninstall_recorder()
        provider.shutdown()
    capsule = {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": "POST /orders",
        "events": trace.events,
    }
    return result, capsule


def replay(
    capsule: dict[str, Any], factory: AppFactory, warm: bool, changed: bool = False
) -> tuple[Any, ReplaySession]:
    """Run the app with psycopg2 and psycopg 3 served from ``capsule``; boot calls before the
    request."""
    session = ReplaySession(capsule)
    session.usage.await_request()
    activate(session)
    Psycopg2ReplayInstrumentor().instrument()
    PsycopgReplayInstrumentor().instrument()
    try:
        app = factory(_connect_to(closed_port_dsn()), warm, changed)
        try:
            app.before()
            session.begin_request()
            result = app.request()
        finally:
            app.close()
    finally:
        PsycopgReplayInstrumentor().uninstrument()
        Psycopg2ReplayInstrumentor().uninstrument()
        deactivate()
    return result, session


# ---------------------------------------------------------------------------- SQLAlchemy


class SqlAlchemyApp:
    """An engine with ``pool_pre_ping``; the request runs in ``engine.begin()``."""

    def __init__(self, connect: Connect, warm: bool, changed: bool) -> None:
        import sqlalchemy

        self.sa = sqlalchemy
        self.warm = warm
        self.changed = changed
        self.engine = sqlalchemy.create_engine(
            "postgresql+psycopg2://", creator=connect, pool_pre_ping=True, pool_size=1
        )

    def before(self) -> None:
        if self.warm:
            with self.engine.connect() as connection:
                connection.execute(self.sa.text("SELECT count(*) FROM scope_items")).scalar()

    def request(self) -> Any:
        text = self.sa.text
        now = dt.datetime.now(dt.timezone.utc)
        days = 7 if self.changed else 30
        with self.engine.begin() as connection:
            price = connection.execute(
                text("SELECT price FROM scope_items WHERE sku = :sku"), {"sku": "pen"}
            ).scalar_one()
            order_id = uuid.uuid4()
            connection.execute(
                text("INSERT INTO scope_orders (id, sku, at) VALUES (:id, :sku, :at)"),
                {"id": order_id, "sku": "pen", "at": now},
            )
            with connection.begin_nested():
                connection.execute(
                    text("UPDATE scope_items SET sold = sold + 1 WHERE sku = :sku"), {"sku": "pen"}
                )
            recent = connection.execute(
                text("SELECT count(*) FROM scope_orders WHERE at > :since AND id = :id"),
                {"since": now - dt.timedelta(days=days), "id": order_id},
            ).scalar_one()
            connection.execute(text("DELETE FROM scope_orders WHERE id = :id"), {"id": order_id})
        # What the dialect learned when it first connected, warm or cold: the server's own.
        version = self.engine.dialect.server_version_info
        return {"price": str(price), "recent": recent, "server": version}

    def close(self) -> None:
        self.engine.dispose()


# ---------------------------------------------------------------------------- Django

_django_models: dict[str, Any] = {}


def _django_thing(dsn: str) -> Any:
    """The model of these tests, Django configured on first use."""
    if "Thing" in _django_models:
        return _django_models["Thing"]
    configure_django(dsn)
    from django.db import models
    from django.utils import timezone

    class Thing(models.Model):
        id = models.UUIDField(primary_key=True, default=uuid.uuid4)
        name = models.CharField(max_length=40)
        at = models.DateTimeField(default=timezone.now)

        class Meta:
            app_label = "scope_tests"
            db_table = "scope_things"

    _django_models["Thing"] = Thing
    return Thing


class DjangoApp:
    """The ORM on a persistent connection: ``transaction.atomic`` + ``get_or_create``."""

    thing: Any = None

    def __init__(self, connect: Connect, warm: bool, changed: bool) -> None:
        from django.db import connections

        self.connections = connections
        self.warm = warm
        self.changed = changed
        connections.close_all()

    def before(self) -> None:
        if self.warm:
            self.thing.objects.filter(name="warm-up").exists()

    def request(self) -> Any:
        from django.db import transaction
        from django.utils import timezone

        name = "gift" if self.changed else "pen"
        with transaction.atomic():
            made, created = self.thing.objects.get_or_create(name=name)
            recent = self.thing.objects.filter(
                at__gte=timezone.now() - dt.timedelta(days=30), id=made.id
            ).count()
            made.delete()
        return {"created": created, "recent": recent}

    def close(self) -> None:
        self.connections.close_all()


# ---------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def tables(postgres_dsn: str) -> Iterator[str]:
    connection = psycopg2.connect(postgres_dsn)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS scope_items "
            "(sku text PRIMARY KEY, price numeric, sold int);"
            "INSERT INTO scope_items VALUES ('pen', 1.50, 0) ON CONFLICT DO NOTHING;"
            "CREATE TABLE IF NOT EXISTS scope_orders (id uuid PRIMARY KEY, sku text, "
            "at timestamptz);"
            "CREATE TABLE IF NOT EXISTS scope_things (id uuid PRIMARY KEY, name varchar(40) "
            "NOT NULL, at timestamptz NOT NULL)"
        )
    connection.close()
    psycopg2.extras.register_uuid()
    DjangoApp.thing = _django_thing(postgres_dsn)
    yield postgres_dsn


STACKS = {"sqlalchemy": SqlAlchemyApp, "django": DjangoApp}
# Whether the pool was warmed by an earlier request when the capture was recorded, and when it
# is replayed: every combination.
pool_states = pytest.mark.parametrize(
    ("recorded_warm", "replayed_warm"),
    [(True, True), (True, False), (False, True), (False, False)],
    ids=["warm-warm", "warm-cold", "cold-warm", "cold-cold"],
)


@pytest.mark.parametrize("stack", sorted(STACKS))
@pool_states
def test_pool_state_never_makes_a_faithful_replay_diverge(
    tables: str, stack: str, recorded_warm: bool, replayed_warm: bool
) -> None:
    factory: Any = STACKS[stack]
    result, capsule = record(tables, factory, recorded_warm)
    replayed, session = replay(capsule, factory, replayed_warm)
    assert replayed == result
    assert not session.diverged, session.divergence_lines
    usage = session.usage.report()
    assert usage["unused"] == 0, usage
    assert usage["consumed"] == usage["dataExchanges"] > 0
    assert usage["beforeRequest"] == (1 if replayed_warm else 0)


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_a_real_change_of_a_parameter_still_diverges(tables: str, stack: str) -> None:
    factory: Any = STACKS[stack]
    _, capsule = record(tables, factory, True)
    with pytest.raises(DivergedError) as raised:
        replay(capsule, factory, False, changed=True)
    assert raised.value.line is not None and '"protocol":"pg"' in raised.value.line


def test_the_recorded_connection_scope_statements_are_the_ones_replay_answers(
    tables: str,
) -> None:
    _, capsule = record(tables, SqlAlchemyApp, False)
    texts = [
        event["exchange"]["request"]["text"]
        for event in capsule["events"]
        if event.get("kind") == "effect"
    ]
    # A cold pool opens the connection inside the request: the dialect's set-up is recorded.
    assert texts[:5] == [
        "SELECT t.oid, typarray\nFROM pg_type t JOIN pg_namespace ns\n    ON typnamespace = ns.oid"
        "\nWHERE typname = 'hstore';\n",
        "select pg_catalog.version()",
        "select current_schema()",
        "show transaction isolation level",
        "show standard_conforming_strings",
    ]
    _, session = replay(capsule, SqlAlchemyApp, False)
    usage = session.usage.report()
    # Those five, SAVEPOINT and RELEASE: each answered once, none consumed.
    assert (usage["ambientExchanges"], usage["ambient"], usage["unused"]) == (7, 7, 0)


def test_a_warm_connection_carries_what_it_learned_before_the_request(tables: str) -> None:
    result, capsule = record(tables, SqlAlchemyApp, True)
    effects = [event["exchange"] for event in capsule["events"] if event.get("kind") == "effect"]
    # The pre-ping opens the request on the warm connection; it carries the dialect's set-up.
    assert effects[0]["request"]["text"] == "SELECT 1"
    carried = [item["request"]["text"] for item in effects[0]["setup"]]
    assert carried == [
        "SELECT t.oid, typarray\nFROM pg_type t JOIN pg_namespace ns\n    ON typnamespace = ns.oid"
        "\nWHERE typname = 'hstore';\n",
        "select pg_catalog.version()",
        "select current_schema()",
        "show transaction isolation level",
        "show standard_conforming_strings",
    ]
    assert all("setup" not in exchange for exchange in effects[1:])
    # Capture marks the pre-ping (and only connection-scope statements) as connection scope.
    marked = [exchange["request"]["text"] for exchange in effects if "scope" in exchange]
    assert effects[0]["scope"] == "connection"
    assert marked == ["SELECT 1", "SAVEPOINT sa_savepoint_1", "RELEASE SAVEPOINT sa_savepoint_1"]
    real = effects[0]["setup"][1]["response"]["rows"][0]["version"]
    assert real.startswith("PostgreSQL ") and "reproit-otel" not in real
    replayed, session = replay(capsule, SqlAlchemyApp, False)
    assert replayed == result  # the dialect saw the recorded server version, not a default
    assert session.usage.report()["unused"] == 0


class TimeZoneApp:
    """A plain psycopg2 connection set to a time zone at boot (``warm``); the request reads it
    back, sets another and reads that."""

    def __init__(self, connect: Connect, warm: bool, changed: bool) -> None:
        self.connection = connect()
        self.warm = warm

    def before(self) -> None:
        if not self.warm:
            return
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT set_config('TimeZone', %s, false)", ["Asia/Tokyo"])
        self.connection.commit()

    def request(self) -> Any:
        seen = [self.connection.info.parameter_status("TimeZone")]
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT %s::int + 1", [41])
            seen.append(cursor.fetchone()[0])
            cursor.execute("SET TIME ZONE 'Europe/Lisbon'")
            seen.append(self.connection.get_parameter_status("TimeZone"))
            cursor.execute("SHOW TimeZone")
            seen.append(cursor.fetchone()[0])
        self.connection.rollback()
        return seen

    def close(self) -> None:
        self.connection.close()


def test_a_replayed_connection_reports_the_recorded_parameters_and_follows_set(
    tables: str,
) -> None:
    result, capsule = record(tables, TimeZoneApp, True)
    assert result == ["Asia/Tokyo", 42, "Europe/Lisbon", "Europe/Lisbon"]
    # The replay does not set the zone at boot: the stub reports what the recording tells.
    replayed, session = replay(capsule, TimeZoneApp, False)
    assert replayed == result
    assert not session.diverged and session.usage.report()["unused"] == 0


class PlainSelectOneApp:
    """A plain psycopg2 connection whose request's own first query is ``SELECT 1``."""

    def __init__(self, connect: Connect, warm: bool, changed: bool) -> None:
        self.connection = connect()
        self.changed = changed

    def before(self) -> None:
        return None

    def request(self) -> Any:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT 2" if self.changed else "SELECT 1")
            first = cursor.fetchall()
            cursor.execute("SELECT price FROM scope_items WHERE sku = %s", ["pen"])
            return [first, cursor.fetchall()]

    def close(self) -> None:
        self.connection.close()


def _reference_capsule() -> dict[str, Any]:
    """What the reference records for PlainSelectOneApp: nothing is marked connection scope."""

    def effect(text: str, values: Any, rows: list[Any]) -> dict[str, Any]:
        request: dict[str, Any] = {"text": text}
        if values:
            request["values"] = values
        response = {"command": "SELECT", "rowCount": len(rows), "rows": rows}
        return {
            "kind": "effect",
            "effect": "read",
            "resource": "pg",
            "key": text,
            "exchange": {"protocol": "pg", "request": request, "response": response},
        }

    return {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": "POST /orders",
        "events": [
            effect("SELECT 1", None, [{"?column?": 7}]),
            effect("SELECT price FROM scope_items WHERE sku = %s", ["pen"], [{"price": 3}]),
        ],
    }


def test_a_recorded_plain_select_one_is_served_in_order_as_the_reference_serves_it() -> None:
    replayed, session = replay(_reference_capsule(), PlainSelectOneApp, False)
    # The recorded answer (7), not the pre-ping default (1): the exchange was consumed.
    assert replayed == [[(7,)], [(3,)]]
    assert not session.diverged
    assert session.usage.report()["consumed"] == 2
    assert session.usage.report()["ambient"] == 0


def test_a_divergence_names_a_recorded_plain_select_one_as_expected() -> None:
    with pytest.raises(DivergedError) as raised:
        replay(_reference_capsule(), PlainSelectOneApp, False, changed=True)
    assert raised.value.line == (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT 2"},'
        '"expected":{"text":"SELECT 1"},"consumed":0,"total":2}'
    )


def test_a_recorded_select_one_is_not_answered_twice() -> None:
    capsule = _reference_capsule()
    capsule["events"][1]["exchange"]["request"]["text"] = "SELECT 1"
    capsule["events"][1]["exchange"]["request"].pop("values")
    session = ReplaySession(capsule)
    activate(session)
    Psycopg2ReplayInstrumentor().instrument()
    PsycopgReplayInstrumentor().instrument()
    try:
        connection = psycopg2.connect(closed_port_dsn())
        with connection.cursor() as cursor:
            answers = []
            for _ in range(3):
                cursor.execute("SELECT 1")
                answers.append(cursor.fetchall())
        connection.close()
    finally:
        PsycopgReplayInstrumentor().uninstrument()
        Psycopg2ReplayInstrumentor().uninstrument()
        deactivate()
    # Both recorded exchanges in order; the third call has no recorded counterpart left, so
    # the connection-scope rule answers it (the pre-ping default) without a divergence.
    assert answers == [[(7,)], [(3,)], [(1,)]]
    assert not session.diverged
    report = session.usage.report()
    assert (report["consumed"], report["ambient"]) == (2, 1)
