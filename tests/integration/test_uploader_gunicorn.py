"""Four gunicorn workers forked from one preloaded app all deliver their captures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.loopback_ingest import LoopbackIngest

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")


@pytest.mark.skipif(
    not GUNICORN.exists() and shutil.which("gunicorn") is None,
    reason="gunicorn is not installed (pip install gunicorn)",
)
def test_every_worker_uploads_after_fork() -> None:
    ingest = LoopbackIngest()
    process = subprocess.Popen(
        [
            str(GUNICORN if GUNICORN.exists() else shutil.which("gunicorn")),
            "-c",
            "tests/integration/gunicorn_conf.py",
            "tests.integration.gunicorn_app:app",
        ],
        cwd=ROOT,
        env={**os.environ, "REPROIT_TEST_ENDPOINT": ingest.url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        received = ingest.wait_for(4, timeout=60)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        ingest.stop()
    sessions = {json.loads(item.body)["sessionId"] for item in received}
    worker_pids = {session.split("-")[1] for session in sessions}
    assert len(worker_pids) == 4, stderr
    assert str(process.pid) not in worker_pids  # the master records nothing
    assert process.returncode == 0
