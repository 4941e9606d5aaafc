"""A dead uploader thread is replaced, and that is said once.

A real Flask service captured by reproit-otel (werkzeug on loopback, the span processor, the
uploader) loses its uploader thread to an exception raised into it from outside (what a
misbehaving library's ``PyThreadState_SetAsyncExc``, or a defect escaping the loop, does).
The failures the service has afterwards still reach the ingest.
"""

from __future__ import annotations

import ctypes
import json
import logging
import threading

import pytest
import requests
from flask import Flask

from reproit_otel.capture.uploader import Uploader
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.pytest_runs import RouteUpstream
from tests.reliability.harness import fetch, served

RESTARTED = (
    "reproit-otel: the uploader thread stopped unexpectedly; a new one was started "
    "(the operation it was sending may be lost, later ones are sent)"
)


def _app(upstream: str) -> Flask:
    app = Flask("dying")

    @app.get("/fail/<int:number>")
    def fail(number: int) -> tuple[str, int]:
        rate = requests.get(f"{upstream}/rate", timeout=5).json()["rate"]
        return f"failure {number} at rate {rate}", 500

    return app


def _kill(thread: threading.Thread) -> None:
    raised = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident or 0), ctypes.py_object(SystemExit)
    )
    assert raised == 1
    thread.join(30)
    assert not thread.is_alive()


# The killed thread's SystemExit is what the test does on purpose.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_failures_after_the_uploader_thread_died_are_still_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ingest = LoopbackIngest()
    upstream = RouteUpstream({"/rate": {"status": 200, "body": {"rate": 0.2}}})
    environ = {
        "REPROIT_ENDPOINT": ingest.url,
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
    }
    try:
        with served(upstream.base, "", environ, app=_app(upstream.base)) as service:
            [uploader] = [s for s in service.sinks() if isinstance(s, Uploader)]
            assert fetch(service.base, "GET", "/fail/1")[0] == 500
            ingest.wait_for(1)
            thread = uploader._thread
            assert thread is not None
            _kill(thread)
            with caplog.at_level(logging.WARNING, logger="reproit_otel"):
                for number in (2, 3):
                    assert fetch(service.base, "GET", f"/fail/{number}")[0] == 500
                received = ingest.wait_for(3)
                assert uploader.flush(20) is True
    finally:
        ingest.stop()
        upstream.stop()
    names = [json.loads(r.body)["events"][0]["event"]["name"] for r in received]
    assert names == ["GET /fail/1", "GET /fail/2", "GET /fail/3"]
    assert [r.getMessage() for r in caplog.records if r.name == "reproit_otel"] == [RESTARTED]
