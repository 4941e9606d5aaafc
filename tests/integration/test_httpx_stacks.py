"""httpx services, zero code: captured under ``opentelemetry-instrument``, then replayed.

Two unmodified services call a real loopback upstream with httpx: a FastAPI app on uvicorn
with ``httpx.AsyncClient`` (three calls gathered in one request, one of them streamed) and a
Flask app on gunicorn with a sync ``httpx.Client``. Each runs under the real launcher with the
OpenTelemetry httpx instrumentation active and sends its 500s to a real
``reproit-otel serve``, cold and warm (the pooled client already used). Then the upstream is
stopped and ``reproit-otel check`` replays each occurrence: reproduced as is, fixed with the
fix, diverged when the currency of a call changes.
"""

from __future__ import annotations

import json
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
from tests.integration.upstream import SLOW_CHUNKS

APPS = Path(__file__).resolve().parent / "apps"
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
UVICORN = str(Path(sys.executable).with_name("uvicorn"))


def quote(ident: str, kind: str) -> Request:
    return Request("POST", f"/quotes/{ident}")


def stack(name: str, serve: tuple[str, ...]) -> Stack:
    return Stack(name=name, cwd=APPS, serve=serve, healthy=Request("GET", "/rates"), failing=quote)


STACKS = {
    "fastapi-async": stack(
        "quotes-httpx-fastapi", (UVICORN, "--port", "{port}", "quotes_httpx_async:app")
    ),
    "flask-sync": stack(
        "quotes-httpx-flask", (GUNICORN, "--bind", "127.0.0.1:{port}", "quotes_httpx_sync:app")
    ),
}


@pytest.fixture(scope="module", params=sorted(STACKS))
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackRun]:
    name: str = request.param
    with run_stack(STACKS[name], tmp_path_factory.mktemp(name)) as result:
        yield result


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_failure_is_captured_with_every_httpx_call(run: StackRun, kind: str) -> None:
    capture = run.captures[kind]
    assert capture.status == 500
    events = capture.capsule["events"]
    assert events[-1]["status"] == 500
    assert events[-1]["effectsComplete"] is True
    seen = sorted(
        (exchange["request"]["method"], exchange["request"]["url"].split("/", 3)[3])
        for exchange in exchanges(capture.capsule)
    )
    assert seen == [("GET", "json"), ("GET", "query?c=EUR"), ("GET", "slow")]
    [slow] = [e for e in exchanges(capture.capsule) if e["request"]["url"].endswith("/slow")]
    assert slow["response"]["body"] == b"".join(SLOW_CHUNKS).decode()
    assert slow["response"]["stream"] == {"chunks": [len(chunk) for chunk in SLOW_CHUNKS]}


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_replay_reproduces_the_failure(run: StackRun, kind: str) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_fixed_code_replays_as_fixed(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, QUOTES_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    answer = json.loads(result["observedResult"]["body"])
    assert (answer["lines"], answer["query"], answer["per_line"]) == (
        ["one", "two", "three"],
        "c=EUR",
        1.5,
    )


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_a_changed_call_diverges(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, QUOTES_OTHER_CURRENCY="1")
    assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
    [divergence] = result["divergences"]
    assert divergence["protocol"] == "http"
    assert divergence["got"]["url"].endswith("/query?c=USD"), divergence
