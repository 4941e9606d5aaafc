"""A garbage collection inside reproit-otel never hangs a request or a worker.

The collector runs finalizers on whichever thread allocates, inside reproit-otel's own locked
sections too; an abandoned streamed response is finalized that way. These tests run the
service of ``gc_app.py`` in processes of their own, so a hang ends in a thread dump and a
failed test, never in a hanging test run:

* the reduction: an abandoned stream, moved to the old generation, collected while a large
  failure is being built, under several collector thresholds; every request answers and every
  failure is captured;
* the capture end-to-end shapes (streams read partly and abandoned, closed late, never read;
  a named cursor dropped unfetched; a span the application's own finalizer ends; failing and
  healthy requests mixed) with
  ``gc.set_threshold(1, 1, 1)`` and 16 client threads: every response is byte for byte the
  one the service gives with reproit-otel disabled;
* the same shapes under gunicorn's threaded workers (2 workers x 16 threads) with 32
  concurrent clients, each request bounded in time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.upstream import Upstream, closed_port
from tests.reliability import gc_run

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")
SHAPES = [
    "/partial",
    "/late-close",
    "/unread",
    "/cursor",
    "/dropped-span",
    "/fail",
    "/order/3",
    "/abandon",
]


def _child_environ(dsn: str, **extra: str) -> dict[str, str]:
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("REPROIT_", "OTEL_")) or name == "REPROIT_STRICT_INTERNAL"
    }
    environ.update({"PG_DSN": dsn, "OTEL_SDK_DISABLED": "false"}, **extra)
    return environ


def _run(args: list[str], environ: dict[str, str], hard_timeout: float) -> dict[str, Any]:
    """One ``gc_run`` process; its JSON result, or a failure carrying its thread dump."""
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "tests.reliability.gc_run", *args],
            cwd=ROOT,
            env=environ,
            capture_output=True,
            text=True,
            timeout=hard_timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr if isinstance(expired.stderr, str) else ""
        raise AssertionError(f"gc_run outlived {hard_timeout} s:\n{stderr[-20000:]}") from None
    assert completed.returncode == 0, (
        f"gc_run exited with {completed.returncode}"
        f"{' (a request hung)' if completed.returncode == gc_run.HUNG else ''}:\n"
        + _without_access_log(completed.stderr)[-20000:]
    )
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def _without_access_log(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if '"GET /' not in line)


def _dumps(directory: Path) -> list[list[dict[str, Any]]]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]


@pytest.mark.postgres
def test_a_stream_collected_while_a_failure_is_built_never_hangs_the_request(
    postgres_dsn: str, tmp_path: Path
) -> None:
    result = _run(
        [
            "--paths",
            "/abandon",
            "--repeat",
            "10",
            "--timeout",
            "5",
            "--watchdog",
            "100",
            "--thresholds",
            "50,1,1",
            "100,1,1",
            "300,1,1",
            "700,1,1",
            "2000,1,1",
        ],
        _child_environ(postgres_dsn, REPROIT_DEBUG_DUMP=str(tmp_path)),
        hard_timeout=150,
    )
    answers = result["answers"]
    assert len(answers) == 50
    assert {(status, body) for _, status, _, body in answers} == {(500, answers[0][3])}
    body = json.loads(answers[0][3])
    assert body["echoed"] == [300, 300, 300]
    assert result["dumps"] == 50  # every failure was captured
    for events in _dumps(tmp_path):
        effects = [e for e in events if e["kind"] == "effect"]
        # The abandoned stream's exchange is finished at the first hook after the collector
        # reached it: among the calls (with exactly the bytes the view read), or after the
        # response (then it is left out).
        assert [e["key"] for e in effects if e["key"] != "GET /big"] == ["POST /echo"] * 3
        for effect in effects:
            if effect["key"] == "GET /big":
                assert effect["exchange"]["response"]["body"] == body["first"]
        returned = events[-1]
        assert (returned["kind"], returned["status"], returned["output"]) == ("return", 500, body)


def _shapes_run(dsn: str, environ: dict[str, str]) -> list[Any]:
    result = _run(
        f"--paths {','.join(SHAPES)} --repeat 6 --clients 16 --timeout 30 --watchdog 200 "
        "--thresholds 1,1,1".split(),
        _child_environ(dsn, **environ),
        hard_timeout=260,
    )
    answers: list[Any] = result["answers"]
    return answers


@pytest.mark.postgres
def test_every_capture_shape_answers_byte_for_byte_with_the_collector_everywhere(
    postgres_dsn: str, tmp_path: Path
) -> None:
    without = _shapes_run(postgres_dsn, {"REPROIT_DISABLED": "1"})
    with_capture = _shapes_run(postgres_dsn, {"REPROIT_DEBUG_DUMP": str(tmp_path)})
    assert len(without) == len(SHAPES) * 6
    assert with_capture == without
    failures = [events[-1] for events in _dumps(tmp_path) if events[0]["operation"] == "GET /fail"]
    assert [(e["status"], e["output"]["error"]) for e in failures] == [(500, "out of stock")] * 6


@pytest.mark.postgres
def test_work_handed_over_in_an_idle_worker_is_settled_without_another_request(
    postgres_dsn: str,
) -> None:
    # Capture configured (an ingest that is never reached: the request is healthy).
    capture = {"REPROIT_ENDPOINT": f"http://127.0.0.1:{closed_port()}/v1/capture-batches"}
    capture.update(REPROIT_API_KEY="k", REPROIT_APP_ID="shop")
    completed = subprocess.run(
        [sys.executable, "-m", "tests.reliability.idle_run", "--bound", "10"],
        cwd=ROOT,
        env=_child_environ(postgres_dsn, **capture),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-20000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result == {
        "status": 200,
        "handed_over": 1,  # the abandoned stream's finish, left by its finalizer
        "settled": True,
        "settled_by": "reproit-otel-uploader",
        "incomplete_reasons": {
            "1 exchange(s) unfinished at the response": 1,
            "after the response: an exchange finished after the response": 1,
        },
    }


# --- gunicorn's threaded workers ----------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class _Gunicorn:
    """``gc_app`` under gunicorn gthread (2 workers x 16 threads) on a loopback port."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.port = closed_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [
                str(GUNICORN if GUNICORN.exists() else shutil.which("gunicorn")),
                "--bind",
                f"127.0.0.1:{self.port}",
                "--worker-class",
                "gthread",
                "--workers",
                "2",
                "--threads",
                "16",
                "--graceful-timeout",
                "5",
                "tests.reliability.gc_app:app",
            ],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                gc_run._fetch(self.base, "/unread", 10)
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"gunicorn did not start:\n{self.stop()}") from None
                time.sleep(0.1)

    def dump_threads(self) -> None:
        """Every worker writes every thread's stack to its stderr (``gc_app`` registers it)."""
        for worker in _children(self.process.pid):
            os.kill(worker, signal.SIGUSR2)
        time.sleep(1)

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        try:
            _, stderr = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate(timeout=30)
        return _without_access_log(stderr or "")


def _gunicorn_answers(environ: dict[str, str]) -> list[Any]:
    server = _Gunicorn(environ)
    wanted = [path for _ in range(10) for path in SHAPES]
    try:
        with ThreadPoolExecutor(max_workers=32) as pool:
            futures = [pool.submit(gc_run._fetch, server.base, path, 30) for path in wanted]
            answers = []
            for path, future in zip(wanted, futures, strict=True):
                try:
                    answers.append(future.result())
                except OSError as error:
                    server.dump_threads()
                    raise AssertionError(
                        f"{path} did not answer within 30 s ({error!r}); the workers' threads:"
                        f"\n{server.stop()[-20000:]}"
                    ) from None
    finally:
        if server.process.poll() is None:
            server.stop()
    return answers


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.mark.postgres
@pytest.mark.skipif(
    not GUNICORN.exists() and shutil.which("gunicorn") is None,
    reason="gunicorn is not installed (pip install gunicorn)",
)
def test_gunicorn_threaded_workers_answer_every_request_as_without_capture(
    upstream: Upstream, postgres_dsn: str, tmp_path: Path
) -> None:
    common = {"UPSTREAM": upstream.base, "GC_THRESHOLD": "50,1,1"}
    without = _gunicorn_answers(_child_environ(postgres_dsn, REPROIT_DISABLED="1", **common))
    ingest = LoopbackIngest()
    try:
        capture = {"REPROIT_ENDPOINT": ingest.url, "REPROIT_API_KEY": "k"}
        capture.update(REPROIT_APP_ID="shop", REPROIT_FLUSH_INTERVAL_MS="100")
        with_capture = _gunicorn_answers(_child_environ(postgres_dsn, **capture, **common))
        # Stopped by now: each worker flushed what it queued at its exit.
        received = ingest.wait_for(20, timeout=5)
    finally:
        ingest.stop()
    assert len(without) == len(SHAPES) * 10
    assert [answer[:2] for answer in without] == [
        [path, 500 if path in ("/fail", "/abandon") else 200] for path in SHAPES * 10
    ]
    assert _comparable(with_capture) == _comparable(without)
    # Every /fail was uploaded (the workers flushed at their exit), and only failures were.
    operations = Counter(_operation_of(item.body) for item in received)
    assert operations["GET /fail"] == 10
    assert set(operations) <= {"GET /fail", "GET /abandon"}


def _operation_of(batch: bytes) -> str | None:
    for name in ("GET /fail", "GET /abandon"):
        if f'"operation":"{name}"'.encode() in batch:
            return name
    return None


def _comparable(answers: list[Any]) -> list[Any]:
    """Answers without the headers gunicorn sets itself: ``server`` (its version) and
    ``connection`` (keep-alive or close, as busy as the worker is at that moment)."""
    return [
        [path, status, [h for h in headers if h[0] not in ("server", "connection")], body]
        for path, status, headers, body in answers
    ]
