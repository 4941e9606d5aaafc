"""SQLAlchemy engines keep ``effectsComplete`` honest, with and without its instrumentation.

A real Flask app behind a real WSGI server runs its requests through a SQLAlchemy engine on
the real PostgreSQL of the test session (psycopg2 or psycopg 3, recorded) or on SQLite (a driver
reproit-otel does not record). OpenTelemetry's SQLAlchemy instrumentation is on or off, and so
are its psycopg2 instrumentation and the pool's pre-ping. With psycopg2 a failing request is
complete (the ``connect`` and statement spans are covered by the recorded exchanges under or
beside them) and holds every statement, cold or warm; with SQLite it is incomplete and says
why. (The installed SQLAlchemy may be newer than the instrumentation declares support for;
``skip_dep_check`` turns it on anyway, as a user pinning both would see it.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy
from flask import Flask, jsonify
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from sqlalchemy import text

from reproit_otel.instrumentation import psycopg as pg3_recorder
from reproit_otel.instrumentation import psycopg2 as pg_recorder
from reproit_otel.instrumentation import sqlalchemy as sqlalchemy_hook
from reproit_otel.wire.trace import BackendTrace
from tests.integration.pipeline_support import Pipeline, ServedWSGI, pipeline
from tests.integration.test_pipeline_flask import fetch

pytestmark = pytest.mark.postgres

STATEMENT = "SELECT %(n)s + 1 AS next"


@dataclass(frozen=True)
class Setup:
    sqlalchemy_spans: bool
    psycopg2_spans: bool
    pre_ping: bool


SETUPS = {
    "bare": Setup(sqlalchemy_spans=False, psycopg2_spans=False, pre_ping=False),
    "psycopg2-spans": Setup(sqlalchemy_spans=False, psycopg2_spans=True, pre_ping=True),
    "sqlalchemy-spans": Setup(sqlalchemy_spans=True, psycopg2_spans=False, pre_ping=False),
    "both-pre-ping": Setup(sqlalchemy_spans=True, psycopg2_spans=True, pre_ping=True),
    "both": Setup(sqlalchemy_spans=True, psycopg2_spans=True, pre_ping=False),
}


def make_app(engine: sqlalchemy.engine.Engine) -> Flask:
    app = Flask("accounts")

    @app.get("/accounts/<int:number>")
    def account(number: int) -> Any:
        with engine.connect() as connection:
            row = connection.execute(text("SELECT :n + 1 AS next"), {"n": number}).one()
        status = 500 if number == 13 else 200
        return jsonify({"next": row.next}), status

    return app


@dataclass
class Served:
    active: Pipeline
    server: ServedWSGI
    driver: str = ""

    def failing_trace(self, healthy: int) -> BackendTrace:
        for number in range(healthy):
            status, _, body = fetch(self.server.base, "GET", f"/accounts/{number}")
            assert (status, json.loads(body)) == (200, {"next": number + 1})
        status, _, body = fetch(self.server.base, "GET", "/accounts/13")
        assert (status, json.loads(body)) == (500, {"next": 14})
        traces = self.active.sink.wait_for(healthy + 1)
        [trace] = [t for t in traces if t.operation == "GET /accounts/13"]
        return trace


def serve(url: str, setup: Setup, **engine_options: Any) -> Iterator[Served]:
    with pipeline() as active:
        pg_recorder.install_recorder()
        pg3_recorder.install_recorder()
        sqlalchemy_hook.install_recorder()
        if setup.psycopg2_spans:  # the driver's own spans, psycopg2 or psycopg 3
            Psycopg2Instrumentor().instrument(tracer_provider=active.provider)
            PsycopgInstrumentor().instrument(tracer_provider=active.provider)
        if setup.sqlalchemy_spans:
            SQLAlchemyInstrumentor().instrument(
                tracer_provider=active.provider, skip_dep_check=True
            )
        engine = sqlalchemy.create_engine(url, pool_pre_ping=setup.pre_ping, **engine_options)
        app = make_app(engine)
        FlaskInstrumentor().instrument_app(app, tracer_provider=active.provider)
        server = ServedWSGI(app)
        try:
            yield Served(active, server)
        finally:
            server.stop()
            FlaskInstrumentor().uninstrument_app(app)
            engine.dispose()
            if setup.sqlalchemy_spans:
                SQLAlchemyInstrumentor().uninstrument()
            if setup.psycopg2_spans:
                Psycopg2Instrumentor().uninstrument()
                PsycopgInstrumentor().uninstrument()
            sqlalchemy_hook.uninstall_recorder()
            pg3_recorder.uninstall_recorder()
            pg_recorder.uninstall_recorder()


def pg_texts(trace: BackendTrace) -> list[str]:
    return [
        event["exchange"]["request"]["text"]
        for event in trace.events
        if event["kind"] == "effect" and event["exchange"]["protocol"] == "pg"
    ]


@pytest.fixture(params=sorted(SETUPS))
def setup(request: pytest.FixtureRequest) -> Setup:
    return SETUPS[request.param]


@pytest.fixture(params=["psycopg2", "psycopg"])
def on_postgres(
    request: pytest.FixtureRequest, postgres_dsn: str, setup: Setup
) -> Iterator[Served]:
    url = f"postgresql+{request.param}://" + postgres_dsn.removeprefix("postgresql://")
    for served in serve(url, setup):
        served.driver = request.param
        yield served


@pytest.fixture
def on_sqlite(setup: Setup) -> Iterator[Served]:
    # The engine is disposed of from another thread than the server's.
    yield from serve("sqlite://", setup, connect_args={"check_same_thread": False})


def test_a_cold_failure_on_psycopg2_is_complete_with_the_dialect_set_up(
    on_postgres: Served, setup: Setup
) -> None:
    trace = on_postgres.failing_trace(healthy=0)
    returned = trace.events[-1]
    assert (returned["status"], returned["effectsComplete"]) == (500, True)
    texts = pg_texts(trace)
    # The first connection's dialect initialisation is recorded before the request's own
    # statement, which comes last.
    assert "select pg_catalog.version()" in texts, texts
    assert texts[-1] == STATEMENT
    assert on_postgres.active.processor.stats()["incomplete_reasons"] == {}


def test_a_warm_failure_on_psycopg2_is_complete(on_postgres: Served, setup: Setup) -> None:
    trace = on_postgres.failing_trace(healthy=3)
    returned = trace.events[-1]
    assert (returned["status"], returned["effectsComplete"]) == (500, True)
    # SQLAlchemy's pre-ping: "SELECT 1" on psycopg2, the empty statement ";" on psycopg 3.
    ping = [{"psycopg2": "SELECT 1", "psycopg": ";"}[on_postgres.driver]] if setup.pre_ping else []
    assert pg_texts(trace) == [*ping, STATEMENT]
    assert on_postgres.active.processor.stats()["incomplete_reasons"] == {}


def test_an_engine_on_an_unrecorded_driver_is_incomplete(on_sqlite: Served, setup: Setup) -> None:
    trace = on_sqlite.failing_trace(healthy=1)
    returned = trace.events[-1]
    assert (returned["status"], returned["effectsComplete"]) == (500, False)
    assert pg_texts(trace) == []
    reasons = on_sqlite.active.processor.stats()["incomplete_reasons"]
    expected = {
        "sqlalchemy: a sqlite3 connection (reproit-otel records the psycopg2 and psycopg "
        "drivers only)": 2
    }
    if setup.sqlalchemy_spans:
        # Neither the connect span nor the statement span has a recorded exchange.
        expected["sqlalchemy: connect"] = 2
        expected["sqlalchemy: SELECT"] = 2
    assert reasons == expected
