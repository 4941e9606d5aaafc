"""A pre-fork WSGI service for the gunicorn test: the uploader is created in the master.

With ``preload_app`` this module is imported once, before gunicorn forks its workers, so the
one :class:`Uploader` below crosses ``fork`` in every worker. Each worker reports a failure as
soon as it is initialised (``post_worker_init`` in ``gunicorn_conf.py``), with its pid in the
trace id, so the test can see that every worker delivered.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from reproit_otel.capture.uploader import Uploader, UploaderSettings
from reproit_otel.wire.batch import CaptureSettings
from tests.integration.capture_helpers import failing_trace

uploader = Uploader(
    UploaderSettings(
        endpoint=os.environ["REPROIT_TEST_ENDPOINT"],
        api_key="k",
        capture=CaptureSettings("orders-api"),
        flush_interval_ms=100,
    )
)


def report_failure() -> None:
    uploader.record(failing_trace("POST /orders", trace_id=f"cap-{os.getpid()}-1"))


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("content-type", "text/plain")])
    return [b"ok"]
