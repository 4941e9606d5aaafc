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
  the recorded data exchanges, so check says *inconclusive* (exit 3) and why;
* answers that look like success but came before the recorded work are not *fixed*: a login
  redirect (302), a CSRF-protected form rendered again (200) and the application started
  without one of its environment variables (200 "not configured") are *inconclusive*, naming
  the recorded calls never made and the likely reason;
* a fix that goes on past the old failure point and makes a query production never made is
  *fixed beyond the recording* (exit 0), naming that query;
* after a check that was redirected to the login page, ``reproit-otel doctor`` in the same
  folder points at ``check --header``/``--cookie``, until a later check is logged in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests.integration.served_ingest import cli_command
from tests.integration.stack_support import (
    Request,
    Stack,
    StackRun,
    clean_environ,
    dumped,
    run_stack,
)

APP = Path(__file__).resolve().parent / "apps" / "warm_pool_app.py"


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
    env={"SHOP_CURRENCY": "EUR"},
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


# The recorded data exchanges of the order, in order (the pre-ping and the savepoint are
# connection-scope, so not among them).
NEVER_MADE = [
    {"protocol": "pg", "text": "SELECT price FROM wp_items WHERE sku = %(sku)s", "position": 0},
    {
        "protocol": "pg",
        "text": "INSERT INTO wp_orders (id, ref, at) VALUES (%(id)s, %(ref)s, %(at)s)",
        "position": 1,
    },
    {
        "protocol": "pg",
        "text": "UPDATE wp_items SET sold = sold + 1 WHERE sku = 'pen'",
        "position": 2,
    },
    {
        "protocol": "pg",
        "text": "SELECT count(*) FROM wp_orders WHERE at > %(since)s",
        "position": 3,
    },
]
CREDENTIALS = (
    "the replayed request is not logged in as production's was: mint a credential on this "
    "machine and give it with `check --header 'Name: value'` or `--cookie 'name=value'`"
)


def _never_made(run: StackRun, kind: str) -> list[dict[str, Any]]:
    upstream = run.base_env["UPSTREAM"]
    return [
        *NEVER_MADE,
        {"protocol": "http", "method": "GET", "url": f"{upstream}/json", "position": 4},
    ]


def _inconclusive_reason(status: int, cause: str) -> str:
    return (
        f"the recorded request now answers HTTP {status}, but it used only 0 of the 5 recorded "
        "data exchanges, so it never reached the recorded failure point (never made: "
        "pg SELECT price FROM wp_items WHERE sku = %(sku)s; "
        "pg INSERT INTO wp_orders (id, ref, at) VALUES (%(id)s, %(ref)s, %(at)s); "
        "pg UPDATE wp_items SET sold = sold + 1 WHERE sku = 'pen' and 2 more); "
        f"likely: {cause}"
    )


@pytest.mark.parametrize(
    ("flags", "status", "cause"),
    [
        pytest.param(
            {"SHOP_LOGIN_REQUIRED": "1"},
            302,
            "it redirected to a login page (/login?next=/orders/{path}): " + CREDENTIALS,
            id="login-redirect",
        ),
        pytest.param(
            {"SHOP_CSRF": "1"},
            200,
            "the form was rendered again (HTTP 200 with none of the recorded data exchanges "
            "used): the application refused the replayed form, typically its CSRF token or its "
            "validation; a CSRF token bound to a session needs that session "
            "(`check --cookie 'name=value'`)",
            id="csrf-form-rendered-again",
        ),
        pytest.param(
            {"SHOP_CURRENCY": ""},
            200,
            "the answer reads like the application's own error page (\"Shop not configured "
            'SHOP_CURRENCY is not set."): a setting or environment variable production had and '
            "this run lacks is likely",
            id="missing-environment-variable",
        ),
    ],
)
def test_a_success_before_the_recorded_work_is_not_fixed(
    run: StackRun, flags: dict[str, str], status: int, cause: str
) -> None:
    code, result = run.check("warm", **flags)
    cause = cause.replace("{path}", run.captures["warm"].request.path.rsplit("/", 1)[1])
    assert (code, result["verdict"], result["observedResult"]["status"]) == (
        3,
        "inconclusive",
        status,
    ), dumped(result)
    assert (result["divergences"], result["qualifier"], result["firstNewCall"]) == ([], None, None)
    assert result["usage"]["consumedOrder"] == []
    assert result["unusedCalls"] == _never_made(run, "warm") == result["usage"]["unusedCalls"]
    assert result["likelyCause"] == cause
    assert result["reason"] == _inconclusive_reason(status, cause)


def _doctor_on_last_check(run: StackRun) -> list[tuple[str, str]]:
    """``reproit-otel doctor --json`` where ``check`` ran: its ``last check`` findings."""
    done = subprocess.run(
        [*cli_command("doctor", "--json")],
        cwd=run.workdir,
        env=clean_environ(**run.base_env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    findings = json.loads(done.stdout)
    return [(f["level"], f["message"]) for f in findings if f["topic"] == "last check"]


def test_doctor_points_at_the_overrides_while_the_last_check_was_not_logged_in(
    run: StackRun,
) -> None:
    code, result = run.check("warm", SHOP_LOGIN_REQUIRED="1")
    assert (code, result["observedResult"]["status"]) == (3, 302), dumped(result)
    capsule = str(Path(".reproit") / "capsules" / f"{run.captures['warm'].occurrence}.json")
    path = run.captures["warm"].request.path.rsplit("/", 1)[1]
    assert _doctor_on_last_check(run) == [
        (
            "warning",
            f"the last check of {capsule} (POST /orders/{path}) was inconclusive: it "
            f"redirected to a login page (/login?next=/orders/{path}), so the replayed request "
            "was not logged in as production's; fix: mint a credential on this machine and run "
            f"`reproit-otel check {capsule} --exec ... --header 'Name: value'` (or `--cookie "
            "'name=value'`)",
        )
    ]
    # The next check that is logged in replaces it: doctor has nothing more to say.
    code, result = run.check("warm", SHOP_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    assert _doctor_on_last_check(run) == []


def test_a_fix_that_goes_past_the_old_failure_point_is_fixed_beyond_the_recording(
    run: StackRun,
) -> None:
    code, result = run.check("warm", SHOP_FIXED_MORE="1")
    new_call = {"protocol": "pg", "text": "SELECT count(*) FROM wp_orders WHERE ref = %(ref)s"}
    assert (code, result["verdict"], result["qualifier"], result["firstNewCall"]) == (
        0,
        "fixed",
        "beyond the recording",
        new_call,
    ), dumped(result)
    usage = result["usage"]
    assert (usage["consumedOrder"], usage["unusedCalls"]) == ([0, 1, 2, 3, 4], [])
    # The new query got the divergence answer, never the (stopped) database.
    assert [d["got"]["text"] for d in result["divergences"]] == [new_call["text"]]
    assert result["divergences"][0]["consumed"] == 5
    assert result["reason"] == (
        "the replay used all 5 recorded data exchanges in order and did not fail at the "
        "recorded failure point; then it made 1 call(s) production never made, answered by "
        "the divergence rule (never live), first: pg SELECT count(*) FROM wp_orders WHERE "
        "ref = %(ref)s"
    )


def test_a_divergence_before_the_failure_point_stays_diverged(run: StackRun) -> None:
    # The fix that goes further, but its first query reads another item than production's.
    code, result = run.check("warm", SHOP_FIXED_MORE="1", SHOP_SKU="pencil")
    assert (code, result["verdict"], result["qualifier"]) == (3, "diverged", None), dumped(result)
    first = result["divergences"][0]
    assert (first["got"]["values"], first["consumed"]) == ({"sku": "pencil"}, 0)
    assert result["reason"] == "the application made a call the capsule does not hold"
