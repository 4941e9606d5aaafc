"""Flask-SQLAlchemy and FastAPI on SQLAlchemy 2.1 and 2.0, zero code, captured and replayed.

The apps in ``apps/sqlalchemy_ledger`` have no reproit-otel code. They run under the real
``opentelemetry-instrument`` (Flask or FastAPI, psycopg2, requests and SQLAlchemy
instrumentations installed) on a real PostgreSQL and send their failures to a real
``reproit-otel serve``. On SQLAlchemy 2.0 OpenTelemetry's SQLAlchemy instrumentation is active
(its ``connect`` and statement spans are around every call); on 2.1, which it does not declare
support for, the launcher leaves it out. Each stack is captured cold and warm (Flask-SQLAlchemy
pre-pings every checkout), then replayed with PostgreSQL and the upstream stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
import sqlalchemy

from tests.integration.served_ingest import ServedIngest
from tests.integration.sqlalchemy_overlay import pg8000_path, sqlalchemy_20_path
from tests.integration.stack_support import (
    KEY,
    LAUNCHER,
    Request,
    Stack,
    StackRun,
    clean_environ,
    dumped,
    exchanges,
    run_stack,
    serving,
    start_input,
)
from tests.integration.upstream import Upstream
from tests.pgserver import ThrowawayPostgres

APP = Path(__file__).resolve().parent / "apps" / "sqlalchemy_ledger"
PYTHON = sys.executable
UVICORN = str(Path(sys.executable).with_name("uvicorn"))
HEALTHY_CUSTOMER = "11111111-1111-4111-8111-111111111111"
BODY = {"amount": "12.50", "reference": "r-1"}


def create_tables(env: Mapping[str, str]) -> None:
    subprocess.run([PYTHON, "models.py"], cwd=APP, env=dict(env), check=True, timeout=120)


def payment(customer: str, kind: str = "cold") -> Request:
    return Request(
        "POST",
        f"/customers/{customer}/payments?currency=EUR",
        json.dumps(BODY).encode(),
        "application/json",
    )


# The environment's own SQLAlchemy, and 2.0 beside it (an overlay) when the environment holds
# 2.1; the oldest cell of scripts/matrix holds 2.0.0 itself, which is then the 2.0 tested.
OWN = ".".join(sqlalchemy.__version__.split(".")[:2])
VERSIONS = ["2.0", "2.1"] if OWN == "2.1" else [OWN]


def overlay_env(version: str, *extra: Path) -> dict[str, str]:
    folders = [*extra, *([sqlalchemy_20_path()] if version != OWN else [])]
    return {"PYTHONPATH": os.pathsep.join(map(str, folders))} if folders else {}


SERVERS = {
    "flask-sqlalchemy": (PYTHON, "flask_app.py", "--port", "{port}"),
    "fastapi": (UVICORN, "--port", "{port}", "fastapi_app:app"),
}


@pytest.fixture(
    scope="module",
    params=[(server, version) for server in sorted(SERVERS) for version in VERSIONS],
    ids=lambda param: f"{param[0]}-sqlalchemy-{param[1]}",
)
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackRun]:
    server, version = request.param
    stack = Stack(
        name=f"{server}-{version}",
        cwd=APP,
        serve=SERVERS[server],
        healthy=payment(HEALTHY_CUSTOMER),
        failing=payment,
        prepare=create_tables,
        env=overlay_env(version),
    )
    with run_stack(stack, tmp_path_factory.mktemp(stack.name)) as result:
        yield result


@pytest.mark.parametrize("version", VERSIONS)
def test_the_launcher_instruments_sqlalchemy_2_0_and_leaves_2_1_alone(version: str) -> None:
    probe = (
        "import sqlalchemy; from sqlalchemy.engine.base import Engine; "
        "print(sqlalchemy.__version__.rsplit('.', 1)[0], hasattr(Engine.connect, '__wrapped__'))"
    )
    done = subprocess.run(
        [str(LAUNCHER), PYTHON, "-c", probe],
        env=clean_environ(
            OTEL_TRACES_EXPORTER="none",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
            **overlay_env(version),
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == [version, str(version == "2.0")]


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_failure_is_captured_complete_with_its_statements(run: StackRun, kind: str) -> None:
    capture = run.captures[kind]
    assert capture.status == 500
    assert capture.capsule["operation"] == f"POST {capture.request.path.partition('?')[0]}"
    given = start_input(capture.capsule)
    assert (given["body"], given["query"]) == (BODY, {"currency": "EUR"})
    returned = capture.capsule["events"][-1]
    assert (returned["status"], returned["effectsComplete"]) == (500, True)
    texts = [exchange["request"].get("text", "") for exchange in exchanges(capture.capsule)]
    assert any(text.startswith("INSERT INTO payment") for text in texts), texts
    assert any("invoice.due_at <" in text for text in texts), texts
    # The pool pings every checkout; a cold start also sets the dialect up first.
    assert "SELECT 1" in texts
    if kind == "cold":
        assert "select pg_catalog.version()" in texts


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_replay_reproduces_the_failure(run: StackRun, kind: str) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_fixed_code_replays_as_fixed(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, LEDGER_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    answer = json.loads(result["observedResult"]["body"])
    assert (answer["overdue"], answer["average"], answer["rate"]) == (0, "0", 1.5)


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_a_changed_query_parameter_diverges(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, LEDGER_OTHER_CURRENCY="1")
    assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
    [divergence] = result["divergences"]
    assert divergence["protocol"] == "pg"
    assert "USD" in json.dumps(divergence["got"]), divergence


@pytest.mark.parametrize("version", VERSIONS)
def test_an_engine_on_pg8000_makes_every_capture_incomplete(version: str, tmp_path: Path) -> None:
    """pg8000 is a PostgreSQL driver reproit-otel does not record: the failure is seen, its
    effects are incomplete, and nothing is uploaded."""
    postgres = ThrowawayPostgres()
    ingest = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", "--api-key", KEY)
    upstream = Upstream()
    dump = tmp_path / "dump"
    try:
        postgres.start()
        create_tables(clean_environ(DATABASE_URL=postgres.dsn))
        env = {
            "DATABASE_URL": postgres.dsn,
            "UPSTREAM": upstream.base,
            "LEDGER_DRIVER": "pg8000",
            "OTEL_TRACES_EXPORTER": "reproit",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
            "REPROIT_API_KEY": KEY,
            "REPROIT_APP_ID": "pg8000",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
            "REPROIT_DEBUG_DUMP": str(dump),
            **overlay_env(version, pg8000_path()),
        }
        failing = payment("2b7e3c1a-5d4f-4e6a-8b9c-0d1e2f3a4b5c")
        stack = Stack("pg8000", APP, SERVERS["flask-sqlalchemy"], failing, payment)
        with serving(stack, env) as port:
            assert failing.send(port).status_code == 500
            operation = f"POST {failing.path.partition('?')[0]}"
            deadline = time.monotonic() + 30
            dumped: list[list[dict[str, object]]] = []
            while not dumped and time.monotonic() < deadline:
                dumped = [
                    events
                    for path in dump.glob("*.json")
                    if (events := json.loads(path.read_text(encoding="utf-8")))[0]["operation"]
                    == operation
                ]
                time.sleep(0.1)
        [events] = dumped
        returned = events[-1]
        assert (returned["status"], returned["effectsComplete"]) == (500, False)
        # The rates call is recorded; not one of the statements pg8000 ran is.
        recorded = [e["exchange"]["protocol"] for e in events if e["kind"] == "effect"]
        assert recorded == ["http"]
        # The application has exited, its uploader with it: nothing reached the ingest.
        listed = httpx.get(
            f"{ingest.base_url}/v1/occurrences", headers={"authorization": f"Bearer {KEY}"}
        ).json()
        assert listed["occurrences"] == []
    finally:
        upstream.stop()
        if postgres.data.exists():
            postgres.stop()
        ingest.stop()


@pytest.fixture(scope="module")
def booted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    """The Flask ledger reading its catalogue and a row at import, before its first request."""
    stack = Stack(
        name="flask-sqlalchemy-boot-check",
        cwd=APP,
        serve=SERVERS["flask-sqlalchemy"],
        healthy=payment(HEALTHY_CUSTOMER),
        failing=payment,
        prepare=create_tables,
        env={"LEDGER_BOOT_CHECK": "1"},
    )
    with run_stack(stack, tmp_path_factory.mktemp(stack.name)) as result:
        yield result


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_reads_at_boot_get_empty_results_with_their_columns(booted: StackRun, kind: str) -> None:
    """Replay answers the boot's reads (none of them in the capsule) with no rows and the
    columns they name: SQLAlchemy's inspector takes the first one, so the app boots with its
    database stopped and the recorded request fails as it did, then passes with the fix."""
    code, result = booted.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500
    code, result = booted.check(kind, LEDGER_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
