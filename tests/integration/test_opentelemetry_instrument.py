"""An unmodified Flask app under the real ``opentelemetry-instrument`` launcher.

The app (``apps/plain_flask.py``) holds no reproit-otel code. The launcher's configurator and
the ``reproit`` entry points install the span processor, the requests recorder and the Flask
middleware; ``REPROIT_DEBUG_DUMP`` makes the finished operation observable as a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.pipeline_support import _free_port, stable
from tests.integration.requests_helpers import sent_headers, upstream_headers
from tests.integration.upstream import Upstream

APP = Path(__file__).resolve().parent / "apps" / "plain_flask.py"
LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


class Launched:
    def __init__(self, upstream: Upstream, dump: Path, **env: str) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        environ = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("OTEL_", "REPROIT_")) or key == "REPROIT_STRICT_INTERNAL"
        }
        environ.update(
            PORT=str(self.port),
            UPSTREAM=upstream.base,
            REPROIT_DEBUG_DUMP=str(dump),
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
            OTEL_SERVICE_NAME="plain-flask",
            **env,
        )
        self.process = subprocess.Popen(
            [str(LAUNCHER), sys.executable, str(APP)],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                out, err = self.process.communicate(timeout=5)
                raise AssertionError(f"the app did not start:\n{out.decode()}\n{err.decode()}")
            time.sleep(0.1)

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"{self.base}{path}", timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def stop(self) -> str:
        """Interrupt the app (its exit hooks run, exporters flush); return its stdout."""
        self.process.send_signal(signal.SIGINT)
        out, _ = self.process.communicate(timeout=20)
        return out.decode()


def dumped(directory: Path, operation: str) -> list[list[Any]]:
    """The dumped event lists of ``operation`` (health checks are dumped too), once present."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [json.loads(path.read_text("utf-8")) for path in sorted(directory.glob("*.json"))]
        matching = [events for events in found if events[0]["operation"] == operation]
        if matching:
            return matching
        time.sleep(0.05)
    raise AssertionError(f"no dumped {operation!r} operation in {directory}")


def expected_quote_events(upstream: Upstream, port: int) -> list[dict[str, Any]]:
    host = upstream.base.removeprefix("http://")
    common = {
        "actionIndex": 0,
        "operation": "GET /quote",
        "traceId": "<trace>",
        "spanId": "<trace>:GET /quote",
    }

    def call(sequence: int, path: str, status: int, body: Any, **headers: str) -> dict[str, Any]:
        return {
            **common,
            "sequence": sequence,
            "kind": "effect",
            "effect": "call",
            "resource": host,
            "key": f"GET {path}",
            "exchange": {
                "protocol": "http",
                "request": {
                    "method": "GET",
                    "url": f"{upstream.base}{path}",
                    "headers": sent_headers(traceparent="<traceparent>"),
                },
                "response": {
                    "status": status,
                    "headers": upstream_headers(**headers),
                    "body": body,
                },
            },
        }

    json_type = {"content-type": "application/json"}
    return [
        {
            **common,
            "sequence": 0,
            "kind": "start",
            "input": {
                "headers": {
                    "accept-encoding": "identity",
                    "connection": "close",
                    "host": f"127.0.0.1:{port}",
                    "user-agent": f"Python-urllib/{sys.version_info[0]}.{sys.version_info[1]}",
                },
                "request": {
                    "headers": [
                        ["Accept-Encoding", "identity"],
                        ["Host", f"127.0.0.1:{port}"],
                        [
                            "User-Agent",
                            f"Python-urllib/{sys.version_info[0]}.{sys.version_info[1]}",
                        ],
                        ["Connection", "close"],
                    ],
                    "server": ["127.0.0.1", port],
                },
            },
        },
        call(
            1,
            "/json",
            200,
            '{"rate":1.5,"currency":"EUR"}',  # kept as read: keys not in canonical order
            **{"content-length": "29", "x-upstream": "json"},
            **json_type,
        ),
        call(2, "/fail", 500, {"error": "boom"}, **{"content-length": "16"}, **json_type),
        {
            **common,
            "sequence": 3,
            "kind": "return",
            "output": {"error": "pricing unavailable", "rate": 1.5},
            "status": 502,
            "success": False,
            "effectsComplete": True,
        },
    ]


@pytest.mark.parametrize("exporter", ["reproit", "console", "otlp,reproit"])
def test_a_plain_flask_app_under_the_launcher_records_its_failing_operation(
    exporter: str, upstream: Upstream, tmp_path: Path
) -> None:
    # "console" relies on the post_instrument hook alone; the OTLP exporter has no collector,
    # which must not matter to the application.
    app = Launched(upstream, tmp_path, OTEL_TRACES_EXPORTER=exporter)
    try:
        assert app.get("/quote") == (502, {"error": "pricing unavailable", "rate": 1.5})
        [events] = dumped(tmp_path, "GET /quote")
    finally:
        app.stop()
    assert stable(events) == expected_quote_events(upstream, app.port)


def test_the_reproit_sampler_records_traces_that_exporters_never_see(
    upstream: Upstream, tmp_path: Path
) -> None:
    app = Launched(
        upstream,
        tmp_path,
        OTEL_TRACES_EXPORTER="console",
        OTEL_TRACES_SAMPLER="reproit_parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG="0",
    )
    try:
        assert app.get("/quote")[0] == 502
        [events] = dumped(tmp_path, "GET /quote")
    finally:
        printed = app.stop()
    assert stable(events) == expected_quote_events(upstream, app.port)
    assert '"name"' not in printed  # the console exporter received no span at all
