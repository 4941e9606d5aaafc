"""gunicorn settings for the pre-fork upload test."""

from __future__ import annotations

from typing import Any

bind = "127.0.0.1:0"
workers = 4
preload_app = True
graceful_timeout = 5


def post_worker_init(worker: Any) -> None:
    from tests.integration.gunicorn_app import report_failure

    report_failure()
