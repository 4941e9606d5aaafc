"""The request window and honest verdicts, through the real CLI on a real warm-pool app.

``apps/warm_pool_app.py`` (Flask, SQLAlchemy with ``pool_pre_ping``, psycopg2, requests; no
reproit-otel code) warms up at boot with a query and an upstream call, then its
``POST /orders/<ref>`` reads, inserts a row keyed by a fresh ``uuid4`` at the clock's time,
uses a savepoint, filters on the clock, calls the upstream and fails. It is captured under
``opentelemetry-instrument`` cold (first request) and warm (after healthy requests), then
PostgreSQL and the upstream are stopped and ``reproit-otel check`` replays each capture:

* the boot's warm-up calls are before-request calls: answered, counted and listed, never
  consuming the request's exchanges, and the replay is *reproduced* with every recorded
  data exchange used;
* the fixed code is *fixed*;
* a variant that answers 500 before touching anything is not *reproduced*: it used none of
  the recorded data exchanges, so check says *inconclusive* (exit 3) and why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from pathlib import Path

import psycopg2
import pytest

from tests.integration.stack_support import Request, Stack, StackRun, run_stack

APP = Path(__file__).resolve().parent / "apps" / "warm_pool_app.py"

pytestmark = pytest.mark.skipif(
    not any(e.name == "reproit" for e in entry_points(group="opentelemetry_traces_exporter")),
    reason="the reproit entry points are not installed (pip install -e .)",
)


def _prepare(env: Mapping[str, str]) -> None:
    connection = psycopg2.connect(env["DATABASE_URL"])
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE wp_items (sku text PRIMARY KEY, price numeric, sold int);"
            "INSERT INTO wp_items VALUES ('pen', 1.50, 0);"
            "CREATE TABLE wp_orders (id uuid PRIMARY KEY, ref text, at timestamptz)"
        )
    connection.close()


STACK = Stack(
    name="warm-pool",
    cwd=APP.parent,
    serve=(sys.executable, "-u", str(APP), "{port}"),
    healthy=Request("GET", "/"),
    failing=lambda identifier, kind: Request("POST", f"/orders/{kind}-{identifier[:8]}"),
    prepare=_prepare,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with run_stack(STACK, tmp_path_factory.mktemp("warm-pool")) as result:
        yield result


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_boot_calls_are_answered_before_the_request_and_the_failure_reproduces(
    run: StackRun, kind: str
) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), result
    usage = result["usage"]
    # The price read, the insert, the update, the 30-day count and the upstream call; the
    # savepoint, its release, the pre-ping and the dialect's set-up are connection-scope.
    assert (usage["dataExchanges"], usage["consumed"], usage["unused"]) == (5, 5, 0), usage
    assert usage["ambient"] >= 2  # at least the savepoint and its release
    calls = usage["beforeRequestCalls"]
    assert {"protocol": "pg", "text": "SELECT count(*) FROM wp_items"} in calls, calls
    assert [call["protocol"] for call in calls].count("http") == 1, calls
    assert usage["beforeRequest"] == len(calls)
    assert "calls before the request" not in result["_stderr"]  # --json prints no summary


def test_the_warm_capture_carries_the_connection_set_up_it_did_not_see(run: StackRun) -> None:
    effects = [
        event["exchange"]
        for event in run.captures["warm"].capsule["events"]
        if event.get("kind") == "effect"
    ]
    # The request began with the pool's pre-ping on a connection the boot's warm-up set up.
    assert effects[0]["request"]["text"] == "SELECT 1"
    carried = [item["request"]["text"] for item in effects[0]["setup"]]
    assert "select pg_catalog.version()" in carried, carried
    assert "show standard_conforming_strings" in carried, carried


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_fixed_code_is_fixed(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, SHOP_FIXED="1")
    assert (code, result["verdict"], result["observedResult"]["status"]) == (0, "fixed", 201)
    assert result["usage"]["unused"] == 0


def test_a_500_that_used_none_of_the_recording_is_a_different_failure(run: StackRun) -> None:
    code, result = run.check("warm", SHOP_EARLY_FAILURE="1")
    usage = result["usage"]
    assert (code, result["verdict"], result["observedResult"]["status"]) == (
        3,
        "inconclusive",
        500,
    )
    assert (usage["consumed"], usage["unused"]) == (0, usage["dataExchanges"])
    assert result["reason"] == (
        f"the recorded request answered HTTP 500 again, but it used only 0 of the "
        f"{usage['dataExchanges']} recorded data exchanges: it failed before reaching the "
        "recorded failure, so this is a different failure (see usage in --json; a boot or "
        "configuration problem of the replay is likely)"
    )
