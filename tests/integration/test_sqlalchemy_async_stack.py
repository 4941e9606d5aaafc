"""SQLAlchemy asyncio over psycopg 3 with httpx, zero code: captured, then replayed.

An unmodified FastAPI app on uvicorn (``apps/orders_sqlalchemy_async.py``) gathers an
``httpx.AsyncClient`` call and a query through ``create_async_engine("postgresql+psycopg://
...")`` in one request, under the real ``opentelemetry-instrument`` launcher with the
OpenTelemetry FastAPI, httpx, psycopg and SQLAlchemy instrumentations, cold (the engine's
first connection is the failing request's) and warm (the pool already used). Then the
upstream and PostgreSQL are stopped and ``reproit-otel check`` replays each occurrence:
reproduced as is, fixed with the fix, diverged on an extra query.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.integration.stack_support import (
    Request,
    Stack,
    StackRun,
    dumped,
    exchanges,
    run_stack,
)

APPS = Path(__file__).resolve().parent / "apps"
UVICORN = str(Path(sys.executable).with_name("uvicorn"))


def create_tables(env: Mapping[str, str]) -> None:
    subprocess.run(
        [sys.executable, "orders_sqlalchemy_async.py", "--init-db"],
        cwd=APPS,
        env=dict(env),
        check=True,
        timeout=120,
    )


STACK = Stack(
    name="orders-sqlalchemy-async",
    cwd=APPS,
    serve=(UVICORN, "--port", "{port}", "orders_sqlalchemy_async:app"),
    healthy=Request("GET", "/items/1"),
    failing=lambda ident, kind: Request("POST", f"/orders/{ident}"),
    prepare=create_tables,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with run_stack(STACK, tmp_path_factory.mktemp("orders-async")) as result:
        yield result


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_failure_is_captured_complete(run: StackRun, kind: str) -> None:
    capture = run.captures[kind]
    assert capture.status == 500
    events = capture.capsule["events"]
    assert (events[-1]["status"], events[-1]["effectsComplete"]) == (500, True)
    ident = capture.request.path.rsplit("/", 1)[1]
    data = [
        (
            e["protocol"],
            e["request"].get("method") or e["request"]["text"],
            e["request"].get("values"),
        )
        for e in exchanges(capture.capsule)
        if e.get("scope") != "connection"
    ]
    assert data == [
        ("http", "GET", None),
        ("pg", "SELECT price FROM async_items WHERE id = %(id)s", {"id": 1}),
        (
            "pg",
            "INSERT INTO async_orders (ident, total) VALUES (%(ident)s, %(total)s)",
            {"ident": ident, "total": 3.75},
        ),
    ], data


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_replay_reproduces_the_failure(run: StackRun, kind: str) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_fixed_code_replays_as_fixed(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, ORDERS_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    ident = run.captures[kind].request.path.rsplit("/", 1)[1]
    assert json.loads(result["observedResult"]["body"]) == {"ident": ident, "total": 3.75}


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_an_extra_query_diverges(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, ORDERS_EXTRA_QUERY="1")
    assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
    [divergence] = result["divergences"]
    assert (divergence["protocol"], divergence["got"]["text"]) == (
        "pg",
        "SELECT count(*) FROM async_orders",
    ), divergence
