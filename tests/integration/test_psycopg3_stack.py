"""A psycopg 3 service, zero code: captured under ``opentelemetry-instrument``, then replayed.

An unmodified Flask app on gunicorn reaches PostgreSQL through a ``psycopg_pool`` pool whose
connections make ``dict_row`` rows (and check each connection as it is handed out), and its
upstream with a sync ``httpx.Client``. It runs under the real launcher with the OpenTelemetry
psycopg and httpx instrumentations active and sends its 500s to a real ``reproit-otel
serve``, cold (the failing request first) and warm (healthy requests first, so the pool's
connection is in use). Every statement and call of the failing request is in the capsule, so
the capture is complete and uploaded. Then PostgreSQL and the upstream are stopped and
``reproit-otel check`` replays each occurrence: reproduced as is, fixed with the fix, diverged
when the program makes one more query.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import psycopg
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
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))

pytestmark = pytest.mark.postgres


def create_table(env: Mapping[str, str]) -> None:
    sys.path.insert(0, str(APPS))
    try:
        from orders_psycopg3_flask import SCHEMA
    finally:
        sys.path.remove(str(APPS))
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(SCHEMA)


STACK = Stack(
    name="orders-psycopg3-flask",
    cwd=APPS,
    serve=(GUNICORN, "--bind", "127.0.0.1:{port}", "orders_psycopg3_flask:app"),
    healthy=Request("GET", "/orders"),
    failing=lambda ident, kind: Request("POST", f"/orders/{kind}-{ident}"),
    prepare=create_table,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with run_stack(STACK, tmp_path_factory.mktemp("psycopg3")) as result:
        yield result


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_failure_is_captured_with_every_statement_and_call(run: StackRun, kind: str) -> None:
    capture = run.captures[kind]
    assert capture.status == 500
    events = capture.capsule["events"]
    assert events[-1]["status"] == 500
    assert events[-1]["effectsComplete"] is True
    ident = capture.request.path.rsplit("/", 1)[1]
    recorded = exchanges(capture.capsule)
    check, insert, select, rate = recorded
    assert check == {
        "protocol": "pg",
        "request": {"text": ""},
        "response": {"command": None, "rowCount": 0, "rows": [], "columns": None},
        "scope": "connection",
    }
    assert insert == {
        "protocol": "pg",
        "request": {
            "text": "INSERT INTO orders (ident, qty, price) VALUES (%s, %s, %s)",
            "values": [ident, 3, {"$pg": "decimal", "v": "9.90"}],
        },
        "response": {"command": "INSERT", "rowCount": 1, "rows": [], "columns": None},
    }
    assert select["request"] == {
        "text": "SELECT ident, qty, price, placed FROM orders WHERE ident = %s",
        "values": [ident],
    }
    [row] = select["response"]["rows"]
    assert (row["ident"], row["qty"], row["price"], row["placed"]["$pg"]) == (
        ident,
        3,
        {"$pg": "decimal", "v": "9.90"},
        "datetime",
    )
    assert [column[:6] for column in select["response"]["columns"]] == [
        ["ident", 25, None, -1, None, None],
        ["qty", 23, None, 4, None, None],
        ["price", 1700, None, 10, 10, 2],
        ["placed", 1184, None, 8, None, None],
    ]
    assert (rate["protocol"], rate["request"]["method"], rate["response"]["status"]) == (
        "http",
        "GET",
        200,
    )
    assert rate["request"]["url"].endswith("/json")


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_replay_reproduces_the_failure(run: StackRun, kind: str) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_fixed_code_replays_as_fixed(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, ORDERS_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    ident = run.captures[kind].request.path.rsplit("/", 1)[1]
    assert json.loads(result["observedResult"]["body"]) == {
        "ident": ident,
        "qty": 3,
        "per_unit": "9.90",
    }


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_an_extra_query_diverges(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, ORDERS_AUDIT="1")
    assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
    [divergence] = result["divergences"]
    assert divergence["protocol"] == "pg"
    assert divergence["got"]["text"] == "SELECT count(*) AS n FROM orders", divergence
