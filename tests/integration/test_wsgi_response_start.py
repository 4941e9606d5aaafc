"""The WSGI middleware's contract with the server, step by step.

Each case runs a plain WSGI application under OpenTelemetry's WSGI middleware (so the real
span processor begins an operation) and reproit-otel's middleware outside it, and drives it
as a WSGI server does: call the application, iterate the body, close it. One log records, in
order, what the application did and what the server saw (``start_response``, ``write()``,
each chunk, ``close``), so the assertions pin when the response start and each chunk go out:
as the application gives them (capture keeps a bounded copy and finishes the operation when
the body ends), except on a trusted scan request, whose start is held until the body
completes or passes 64 KiB so that it can carry ``x-reproit-events``. The operation's
``return`` event shows what was finished (status, output). Byte identity through a real
server is checked by ``test_pipeline_flask.py``, streaming by ``test_streaming.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.instrumentation.wsgi import OpenTelemetryMiddleware
from opentelemetry.trace import SpanKind
from werkzeug.test import EnvironBuilder

from reproit_otel.capture.inbound import current_inbound
from reproit_otel.instrumentation.wsgi import ReproitWSGIMiddleware
from tests.integration.pipeline_support import Pipeline, pipeline

ROOT = Path(__file__).resolve().parents[2]
APPS = Path(__file__).resolve().parent / "apps"
JSON = [("Content-Type", "application/json")]
KIB40 = b"x" * 40_000

Log = list[Any]
App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@pytest.fixture
def active() -> Iterator[Pipeline]:
    with pipeline() as running:
        yield running


def in_server_span(active: Pipeline, app: App) -> App:
    """``app`` inside a server span that ends when the call returns (as Flask's
    instrumentation does), its body handed back as it is (OpenTelemetry's WSGI middleware
    would wrap it in a generator)."""
    tracer = active.provider.get_tracer(__name__)

    def spanned(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with tracer.start_as_current_span("GET /thing", kind=SpanKind.SERVER):
            return app(environ, start_response)

    return spanned


def serve(
    active: Pipeline, make: Callable[[Log], App], *, spanned: bool = False, **environ: Any
) -> Log:
    """Drive the wrapped application once as a WSGI server would; the shared log."""
    log: Log = []
    inner = make(log)
    if spanned:
        inner = in_server_span(active, inner)
    else:
        inner = OpenTelemetryMiddleware(inner, tracer_provider=active.provider)
    app = ReproitWSGIMiddleware(inner)
    built = EnvironBuilder(path="/thing", **environ).get_environ()

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> Any:
        log.append(("start", status, list(headers), exc_info is not None))
        return lambda data: log.append(("write", data))

    body = app(built, start_response)
    log.append("returned")
    try:
        for chunk in body:
            log.append(("chunk", chunk))
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
            log.append("closed")
    assert current_inbound() is None
    return log


def returned(active: Pipeline) -> dict[str, Any]:
    [trace] = active.sink.wait_for(1)
    event = trace.events[-1]
    return {key: event[key] for key in ("kind", "status", "output")}


def raised_error(active: Pipeline) -> tuple[int, str, str]:
    """Status, error type and message of the one captured operation's ``return``."""
    [trace] = active.sink.wait_for(1)
    event = trace.events[-1]
    error = event["output"]["error"]
    return event["status"], error["type"], error["message"]


def test_a_list_body_passes_the_start_on_and_finishes_as_the_call_returns(
    active: Pipeline,
) -> None:
    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("500 INTERNAL SERVER ERROR", JSON)
            log.append("app started")
            return [b'{"a":', b"1}"]

        return app

    assert serve(active, make, spanned=True) == [
        ("start", "500 INTERNAL SERVER ERROR", JSON, False),
        "app started",
        "returned",
        ("chunk", b'{"a":'),
        ("chunk", b"1}"),
    ]
    assert returned(active) == {"kind": "return", "status": 500, "output": {"a": 1}}


def test_a_generator_body_goes_out_chunk_by_chunk_and_keeps_its_output(
    active: Pipeline,
) -> None:
    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("503 SERVICE UNAVAILABLE", JSON)

            def body() -> Iterator[bytes]:
                try:
                    for part in (b'{"b":', b"[1,2]}"):
                        log.append(("app yields", part))
                        yield part
                finally:
                    log.append("app body closed")

            return body()

        return app

    assert serve(active, make) == [
        ("start", "503 SERVICE UNAVAILABLE", JSON, False),
        "returned",
        ("app yields", b'{"b":'),
        ("chunk", b'{"b":'),
        ("app yields", b"[1,2]}"),
        ("chunk", b"[1,2]}"),
        "app body closed",
        "closed",
    ]
    assert returned(active) == {"kind": "return", "status": 503, "output": {"b": [1, 2]}}


def test_a_body_past_64_kib_streams_and_finishes_without_output(active: Pipeline) -> None:
    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("500 INTERNAL SERVER ERROR", JSON)

            def body() -> Iterator[bytes]:
                for number in range(3):
                    log.append(("app yields", number))
                    yield KIB40

            return body()

        return app

    assert serve(active, make) == [
        ("start", "500 INTERNAL SERVER ERROR", JSON, False),
        "returned",
        ("app yields", 0),
        ("chunk", KIB40),
        ("app yields", 1),
        ("chunk", KIB40),
        ("app yields", 2),
        ("chunk", KIB40),
        "closed",
    ]
    assert returned(active) == {"kind": "return", "status": 500, "output": None}


def test_a_list_body_past_64_kib_finishes_without_output(active: Pipeline) -> None:
    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("500 INTERNAL SERVER ERROR", JSON)
            return (KIB40, KIB40)

        return app

    assert serve(active, make, spanned=True) == [
        ("start", "500 INTERNAL SERVER ERROR", JSON, False),
        "returned",
        ("chunk", KIB40),
        ("chunk", KIB40),
    ]
    assert returned(active) == {"kind": "return", "status": 500, "output": None}


def test_legacy_write_goes_out_as_it_is_called(active: Pipeline) -> None:
    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            write = start_response("500 INTERNAL SERVER ERROR", JSON)
            log.append("app writes")
            write(b'{"c":')
            write(b"3}")
            return [b""]

        return app

    assert serve(active, make) == [
        ("start", "500 INTERNAL SERVER ERROR", JSON, False),
        "app writes",
        ("write", b'{"c":'),
        ("write", b"3}"),
        "returned",
        ("chunk", b""),
        "closed",
    ]
    assert returned(active) == {"kind": "return", "status": 500, "output": None}


def test_an_error_page_start_goes_on_with_its_exc_info(active: Pipeline) -> None:
    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("200 OK", JSON)
            try:
                raise KeyError("missing")
            except KeyError:
                start_response("502 BAD GATEWAY", [("Content-Type", "text/plain")], sys.exc_info())
            return [b"gateway"]

        return app

    assert serve(active, make) == [
        ("start", "200 OK", JSON, False),
        ("start", "502 BAD GATEWAY", [("Content-Type", "text/plain")], True),
        "returned",
        ("chunk", b"gateway"),
        "closed",
    ]
    assert returned(active) == {"kind": "return", "status": 502, "output": None}


def test_an_exception_while_iterating_finishes_with_500_and_is_raised_unchanged(
    active: Pipeline,
) -> None:
    failure = ValueError("half way")

    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("200 OK", JSON)

            def body() -> Iterator[bytes]:
                yield b"{"
                raise failure

            return body()

        return app

    with pytest.raises(ValueError) as raised:
        serve(active, make)
    assert raised.value is failure
    assert raised_error(active) == (500, "builtins.ValueError", "half way")


def test_an_exception_from_the_call_finishes_with_500_and_is_raised_unchanged(
    active: Pipeline,
) -> None:
    failure = LookupError("no such thing")

    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            raise failure

        return app

    with pytest.raises(LookupError) as raised:
        serve(active, make)
    assert raised.value is failure
    assert raised_error(active) == (500, "builtins.LookupError", "no such thing")


def test_with_capture_off_the_start_passes_straight_through(active: Pipeline) -> None:
    active.processor.capture = False

    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("500 INTERNAL SERVER ERROR", JSON)
            log.append("app started")

            def body() -> Iterator[bytes]:
                log.append("app yields")
                yield b"{}"

            return body()

        return app

    assert serve(active, make) == [
        ("start", "500 INTERNAL SERVER ERROR", JSON, False),
        "app started",
        "returned",
        "app yields",
        ("chunk", b"{}"),
        "closed",
    ]
    assert active.sink.traces == []


def test_without_a_server_span_the_start_passes_straight_through(active: Pipeline) -> None:
    log: Log = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("500 INTERNAL SERVER ERROR", JSON)
        log.append("app started")
        return iter([b"{}"])

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> Any:
        log.append(("start", status))
        return lambda data: None

    body = ReproitWSGIMiddleware(app)(EnvironBuilder(path="/x").get_environ(), start_response)
    assert (log, list(body)) == ([("start", "500 INTERNAL SERVER ERROR"), "app started"], [b"{}"])
    assert active.sink.traces == []


def test_the_request_body_is_read_into_the_input_and_handed_on(active: Pipeline) -> None:
    seen: list[bytes] = []

    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            seen.append(environ["wsgi.input"].read())
            environ["HTTP_X_CHANGED"] = "later"  # the input is the request as it came in
            start_response("500 INTERNAL SERVER ERROR", JSON)
            return [b"{}"]

        return app

    serve(
        active,
        make,
        method="POST",
        data=b"a=1&a=2&b=",
        content_type="application/x-www-form-urlencoded",
        query_string="q=%C3%A9",
        headers=[("X-Note", "n")],
    )
    [trace] = active.sink.wait_for(1)
    start = trace.events[0]
    assert seen == [b"a=1&a=2&b="]
    assert (start["operation"], start["input"]) == (
        "POST /thing",
        {
            "body": {"a": ["1", "2"], "b": ""},
            "query": {"q": "é"},
            "headers": {
                "content-length": "10",
                "content-type": "application/x-www-form-urlencoded",
                "host": "localhost",
                "x-note": "n",
            },
            "request": {
                "headers": [
                    ["Host", "localhost"],
                    ["Content-Type", "application/x-www-form-urlencoded"],
                    ["Content-Length", "10"],
                    ["X-Note", "n"],
                ],
                "body": "a=1&a=2&b=",
                "server": ["localhost", 80],
            },
        },
    )


def test_a_django_response_in_memory_is_finished_when_the_handler_returns() -> None:
    """Django's patched ``WSGIHandler`` (``apps/django_bodies.py``, a process of its own):
    an ``HttpResponse`` keeps its body in memory, so the operation finishes and the start
    goes out before the handler returns, and the server gets the response itself; a
    streaming response's start goes out at once and its body chunk by chunk."""
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(APPS), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "django_bodies",
    }
    done = subprocess.run(
        [sys.executable, str(APPS / "django_bodies.py")],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ise = "500 Internal Server Error"
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        {
            "route": "memory",
            "log": [["start", ise], ["returned", "HttpResponse"], ["body", 7]],
            "output": {"d": 4},
        },
        {
            "route": "json",
            "log": [["start", "502 Bad Gateway"], ["returned", "JsonResponse"], ["body", 10]],
            "output": {"e": [5]},
        },
        {
            "route": "big",
            "log": [["start", ise], ["returned", "HttpResponse"], ["body", 70_000]],
            "output": None,
        },
        {
            "route": "stream",
            "log": [
                ["start", "503 Service Unavailable"],
                ["returned", "_WSGIRequest"],
                ["body", 7],
            ],
            "output": {"f": 6},
        },
    ]


SCAN = {"REPROIT_SCAN": "1", "REPROIT_SCAN_TOKEN": "scan-token"}
SCAN_HEADERS = [
    ("x-reproit-trace", "rpt-a-1-1"),
    ("x-reproit-actor", "a"),
    ("x-reproit-scan-token", "scan-token"),
]


def test_a_scan_request_holds_the_start_for_its_events_header() -> None:
    def make(log: Log) -> App:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            start_response("200 OK", JSON)

            def body() -> Iterator[bytes]:
                for part in (b'{"g":', b"7}"):
                    log.append(("app yields", part))
                    yield part

            return body()

        return app

    with pipeline(SCAN) as scanning:
        log = serve(scanning, make, headers=SCAN_HEADERS)
    [start] = [entry for entry in log if entry[0] == "start"]
    names = [name for name, _ in start[2]]
    assert names == ["Content-Type", "x-reproit-events"]
    assert [entry if entry[0] != "start" else "start" for entry in log] == [
        "returned",
        ("app yields", b'{"g":'),
        ("app yields", b"7}"),
        "start",
        ("chunk", b'{"g":'),
        ("chunk", b"7}"),
        "closed",
    ]
