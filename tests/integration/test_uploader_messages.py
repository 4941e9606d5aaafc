"""What the uploader tells the operator when a batch does not arrive: the cause and the fix.

Against real loopback servers (a refused key, a closed port, a hanging ingest), the warning
is asserted as its exact line; it is logged once per cause and then rate-limited, and reaches
stderr when the root logger's only handler is OpenTelemetry's (checked in a subprocess whose
logging is set up that way).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from reproit_otel.capture.uploader import Uploader
from reproit_otel.delivery import describe_error
from tests.integration.capture_helpers import failing_trace
from tests.integration.loopback_ingest import HANG, LoopbackIngest, down_url
from tests.integration.test_uploader import environment, settings

REPO = Path(__file__).resolve().parents[2]
KEY_FIX = (
    "fix: set REPROIT_API_KEY to a key the ingest accepts (reproit-otel serve --api-key KEY, "
    "or REPROIT_INGEST_API_KEYS where it runs)"
)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "reproit_otel" and record.levelno == logging.WARNING
    ]


def _upload(endpoint: str, count: int, **overrides: int) -> None:
    uploader = Uploader(settings(endpoint, **overrides), environment)
    for number in range(count):
        uploader.record(failing_trace(trace_id=f"cap-1-{number}"))
        assert uploader.flush(20) is True
    uploader.close()


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_names_the_variable_and_the_ingest_flags(
    caplog: pytest.LogCaptureFixture, status: int
) -> None:
    ingest = LoopbackIngest(default=status)
    try:
        with caplog.at_level(logging.WARNING, logger="reproit_otel"):
            _upload(ingest.url, 2)
    finally:
        ingest.stop()
    target = ingest.url.replace("localhost", "127.0.0.1")
    assert _warnings(caplog) == [
        f"reproit-otel: the ingest at {target} refused the API key (HTTP {status}): capture "
        f"batches are dropped; {KEY_FIX}"
    ]


def test_a_closed_port_is_named_once_then_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    endpoint = down_url()
    with caplog.at_level(logging.WARNING, logger="reproit_otel"):
        _upload(endpoint, 3, retry_limit=0)
    assert _warnings(caplog) == [
        f"reproit-otel: nothing listens at {endpoint} (connection refused): capture batches "
        "are dropped; fix: start the ingest (reproit-otel serve) or correct REPROIT_ENDPOINT"
    ]


def test_a_hanging_ingest_is_named_a_timeout(caplog: pytest.LogCaptureFixture) -> None:
    ingest = LoopbackIngest(default=HANG)
    try:
        with caplog.at_level(logging.WARNING, logger="reproit_otel"):
            _upload(ingest.url, 1, retry_limit=0, request_timeout_ms=300)
    finally:
        ingest.stop()
    target = ingest.url.replace("localhost", "127.0.0.1")
    assert _warnings(caplog) == [
        f"reproit-otel: no answer from {target} within 300 ms (timeout): capture batches are "
        "dropped; fix: check that REPROIT_ENDPOINT is the ingest's address and that it is "
        "reachable from here, or raise REPROIT_REQUEST_TIMEOUT_MS"
    ]


def test_a_host_name_that_does_not_resolve_is_named_a_dns_failure() -> None:
    # The resolver's own error, as getaddrinfo raises it (no name server is asked here).
    error = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    delivery = describe_error(error, "https://ingest.example.invalid/v1/capture-batches", 5000)
    assert (delivery.cause, delivery.line()) == (
        "unreachable-dns",
        "the host name 'ingest.example.invalid' of https://ingest.example.invalid:443"
        "/v1/capture-batches does not resolve (DNS: Name or service not known): capture "
        "batches are dropped; fix: correct the host in REPROIT_ENDPOINT",
    )


_ONLY_OTEL_HANDLER = """\
import logging
import sys

from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler

from reproit_otel._stderr import ensure_visible
from reproit_otel.capture.uploader import Uploader
from tests.integration.capture_helpers import failing_trace
from tests.integration.loopback_ingest import LoopbackIngest, down_url
from tests.integration.test_uploader import environment, settings

# What OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED leaves: one handler, OpenTelemetry's.
root = logging.getLogger()
root.handlers[:] = [LoggingHandler(logger_provider=LoggerProvider())]
ensure_visible()

refusing = LoopbackIngest(default=401)
for endpoint in (down_url(), refusing.url, down_url()):
    uploader = Uploader(settings(endpoint, retry_limit=0), environment)
    for number in range(2):
        uploader.record(failing_trace(trace_id=f"cap-1-{number}"))
        uploader.flush(20)
    uploader.close()
refusing.stop()
print(refusing.url)
"""


def test_warnings_reach_stderr_when_only_opentelemetry_handles_logs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "REPROIT_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", _ONLY_OTEL_HANDLER],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    target = done.stdout.strip().replace("localhost", "127.0.0.1")
    lines = done.stderr.splitlines()
    # One line per cause and uploader: the second batch of each is not repeated.
    assert len(lines) == 3, lines
    assert lines[0].startswith("reproit-otel: nothing listens at http://127.0.0.1:")
    assert lines[0].endswith(
        "(connection refused): capture batches are dropped; fix: start the ingest "
        "(reproit-otel serve) or correct REPROIT_ENDPOINT"
    )
    assert lines[1] == (
        f"reproit-otel: the ingest at {target} refused the API key (HTTP 401): capture "
        f"batches are dropped; {KEY_FIX}"
    )
    assert lines[2].startswith("reproit-otel: nothing listens at http://127.0.0.1:")
