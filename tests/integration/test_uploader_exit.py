"""At interpreter exit the uploader flushes once, bounded: a dead ingest never holds a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.loopback_ingest import HANG, LoopbackIngest, down_url

ROOT = Path(__file__).resolve().parents[2]

# Records one failure with a flush timer far in the future, then lets the interpreter exit:
# only the exit flush can send it.
SCRIPT = """
import sys
from reproit_otel.capture.uploader import Uploader, UploaderSettings
from reproit_otel.wire.batch import CaptureSettings
from tests.integration.capture_helpers import failing_trace

uploader = Uploader(UploaderSettings(
    endpoint=sys.argv[1], api_key="k", capture=CaptureSettings("orders-api"),
    flush_interval_ms=600000, request_timeout_ms=600000, retry_limit=5,
    exit_flush_timeout_s=float(sys.argv[2]),
))
assert uploader.record(failing_trace())
print("recorded", flush=True)
"""


def run_script(endpoint: str, bound: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, endpoint, str(bound)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,  # a hang fails the test here instead of blocking the suite
    )


def test_the_exit_flush_delivers_what_is_queued() -> None:
    ingest = LoopbackIngest()
    try:
        done = run_script(ingest.url, 10.0)
        assert (done.returncode, done.stdout, done.stderr) == (0, "recorded\n", "")
        [received] = ingest.requests
        assert json.loads(received.body)["projectId"] == "orders-api"
    finally:
        ingest.stop()


@pytest.mark.parametrize("state", ["hanging", "down"])
def test_a_dead_ingest_does_not_hold_the_process(state: str) -> None:
    ingest = LoopbackIngest(default=HANG)
    try:
        endpoint = ingest.url if state == "hanging" else down_url()
        done = run_script(endpoint, 1.0)
        assert (done.returncode, done.stdout) == (0, "recorded\n")
        if state == "hanging":
            assert len(ingest.requests) == 1  # the one attempt the bound allowed
    finally:
        ingest.stop()
