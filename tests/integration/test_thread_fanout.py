"""Calls a request makes on other threads belong to it: captured, complete, replayed.

A Flask app on gunicorn (``apps/fanout_threads.py``) runs under the real
``opentelemetry-instrument`` launcher. Its failing request prices three items on a
module-level ``ThreadPoolExecutor`` and asks for a discount on a ``threading.Thread`` it
starts: four ``requests`` calls, none on the request's own thread. OpenTelemetry's threading
instrumentation (in the ``otel`` extra) carries the request's context to those threads, so
each call is recorded as one of the request's exchanges and the capture's effects are
complete; without it the calls would belong to no request, and a failure that made no other
call would not even be uploaded. The warm capture follows healthy requests that started the
pool's threads. The replay, with the upstream stopped, serves every call from the recording:
reproduced as is, fixed with the fix.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
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
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))

STACK = Stack(
    name="basket-threads-flask",
    cwd=APPS,
    serve=(GUNICORN, "--bind", "127.0.0.1:{port}", "fanout_threads:app"),
    healthy=Request("GET", "/health"),
    failing=lambda ident, kind: Request("GET", f"/basket/{ident}?skus=a,b,c"),
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with run_stack(STACK, tmp_path_factory.mktemp("basket")) as result:
        yield result


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_calls_made_on_other_threads_are_the_requests_own(run: StackRun, kind: str) -> None:
    capture = run.captures[kind]
    assert capture.status == 500
    events = capture.capsule["events"]
    assert (events[-1]["status"], events[-1]["effectsComplete"]) == (500, True)
    urls = [exchange["request"]["url"].split("/", 3)[3] for exchange in exchanges(capture.capsule)]
    # The pool's three calls run at once: any order among them, the discount's last.
    assert sorted(urls[:3]) == ["query?sku=a", "query?sku=b", "query?sku=c"]
    assert urls[3:] == ["json"]


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_replay_reproduces_the_failure(run: StackRun, kind: str) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_fixed_code_replays_as_fixed_with_every_answer(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, BASKET_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    ident = run.captures[kind].request.path.split("/")[2].partition("?")[0]
    assert result["observedResult"]["status"] == 200
    assert '"prices":["sku=a","sku=b","sku=c"]' in result["observedResult"]["body"].replace(" ", "")
    assert ident in result["observedResult"]["body"]
