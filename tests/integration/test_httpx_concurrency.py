"""Concurrent httpx calls of one request, captured zero-code and replayed whatever their timing.

A FastAPI app on uvicorn (``apps/prices_gather_async.py``) runs under the real
``opentelemetry-instrument`` launcher. Its failing request starts a task of its own and
gathers three ``POST /echo`` calls made at one call site (different bodies) and three streams
of one URL (read partly, fully, abandoned). The real loopback upstream answers the three posts
in the reverse of the order they were made in the cold capture and in that order in the warm
one; the streams end in yet another order (the abandoned one first). Both captures must record
the calls in the order they were made, and the replay, where every answer comes at once, must
serve each call its own answer: reproduced as is, fixed with the fix (each call's own answer in
the output), diverged when one body changes. The warm capture follows healthy requests that
leave a background task calling the upstream after their response: it never joins the failing
request's exchanges.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack_support import (
    Request,
    Stack,
    StackRun,
    dumped,
    exchanges,
    run_stack,
)
from tests.integration.upstream import SLOW_CHUNKS

APPS = Path(__file__).resolve().parent / "apps"
UVICORN = str(Path(sys.executable).with_name("uvicorn"))


# The cold capture's upstream answers the posts last-made first; the warm one's in order.
ORDERS = {"cold": "slow-first", "warm": "fast-first"}


def failing(ident: str, kind: str) -> Request:
    return Request("POST", f"/prices/{ident}?order={ORDERS[kind]}")


STACK = Stack(
    name="prices-gather-fastapi",
    cwd=APPS,
    serve=(UVICORN, "--port", "{port}", "prices_gather_async:app"),
    healthy=Request("GET", "/health"),
    failing=failing,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with run_stack(STACK, tmp_path_factory.mktemp("prices")) as result:
        yield result


def ident_of(run: StackRun, kind: str) -> str:
    return run.captures[kind].request.path.split("/")[2].partition("?")[0]


def calls(capsule: dict[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """Each recorded call as (method, path and query, request body, response body)."""
    return [
        (
            exchange["request"]["method"],
            exchange["request"]["url"].split("/", 3)[3],
            exchange["request"].get("body"),
            exchange["response"].get("body"),
        )
        for exchange in exchanges(capsule)
    ]


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_calls_are_recorded_in_the_order_they_were_made(run: StackRun, kind: str) -> None:
    capture = run.captures[kind]
    assert capture.status == 500
    events = capture.capsule["events"]
    assert (events[-1]["status"], events[-1]["effectsComplete"]) == (500, True)
    ident = ident_of(run, kind)
    lines = b"".join(SLOW_CHUNKS).decode()
    assert calls(capture.capsule) == [
        ("GET", f"query?audit={ident}", None, json.dumps({"query": f"audit={ident}"})),
        ("POST", "echo", {"sku": "a"}, {"sku": "a"}),
        ("POST", "echo", {"sku": "b"}, {"sku": "b"}),
        ("POST", "echo", {"sku": "c"}, {"sku": "c"}),
        ("GET", "slow", None, SLOW_CHUNKS[0].decode()),
        ("GET", "slow", None, lines),
        ("GET", "slow", None, None),
    ]
    streams = [e["response"].get("stream") for e in exchanges(capture.capsule)][4:]
    # One piece read is the whole recorded body: no boundaries to keep.
    assert streams == [None, {"chunks": [len(chunk) for chunk in SLOW_CHUNKS]}, None]


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_replay_reproduces_the_failure(run: StackRun, kind: str) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_each_call_gets_its_own_answer_in_the_fixed_replay(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, PRICES_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    ident = ident_of(run, kind)
    assert json.loads(result["observedResult"]["body"]) == {
        "ident": ident,
        "prices": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}],
        "first": "one",
        "lines": ["one", "two", "three"],
        "unread": 200,
        "audited": f"audit={ident}",
        "per_sku": 3.0,
    }


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_a_changed_body_at_the_shared_call_site_diverges(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, PRICES_OTHER_SKU="1")
    assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
    [divergence] = result["divergences"]
    assert (divergence["protocol"], divergence["got"]["method"], divergence["got"]["body"]) == (
        "http",
        "POST",
        {"sku": "d"},
    ), divergence
