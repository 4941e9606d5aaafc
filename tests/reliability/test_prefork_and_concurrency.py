"""Captures survive pre-fork servers and concurrency.

* gunicorn with four pre-fork workers (the app, with OpenTelemetry and reproit-otel, is
  loaded once in the master): every worker captures and uploads its own failures;
* 64 concurrent requests, each making its own ``requests`` call and psycopg2 query: every
  captured operation holds exactly its own two exchanges.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import requests
from flask import Flask, jsonify

from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.upstream import Upstream, closed_port
from tests.reliability.harness import fetch, served

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.mark.skipif(
    not GUNICORN.exists() and shutil.which("gunicorn") is None,
    reason="gunicorn is not installed (pip install gunicorn)",
)
def test_four_prefork_workers_each_capture_and_upload(upstream: Upstream) -> None:
    ingest = LoopbackIngest()
    port = closed_port()
    process = subprocess.Popen(
        [
            str(GUNICORN if GUNICORN.exists() else shutil.which("gunicorn")),
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "4",
            "--preload",
            "--graceful-timeout",
            "5",
            "tests.reliability.prefork_app:app",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "UPSTREAM": upstream.base,
            "REPROIT_ENDPOINT": ingest.url,
            "REPROIT_API_KEY": "k",
            "REPROIT_APP_ID": "shop",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids: set[int] = set()
    received: list[Any] = []
    try:
        for _ in range(600):  # new connections until every worker has answered
            try:
                status, _, body = fetch(f"http://127.0.0.1:{port}", "GET", "/fail")
            except OSError:
                if process.poll() is not None:
                    break
                threading.Event().wait(0.05)
                continue
            assert status == 502
            pids.add(json.loads(body)["pid"])
            if len(pids) == 4:
                break
        for _ in range(200):
            received = ingest.wait_for(len(received) + 1, timeout=0.2)
            uploaded = {pid for pid in pids if any(b'"pid":%d' % pid in r.body for r in received)}
            if uploaded == pids:
                break
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        ingest.stop()
    assert len(pids) == 4, stderr[-3000:]
    assert process.pid not in pids
    assert all(b'"operation":"GET /fail"' in item.body for item in received)
    uploaded = {pid for pid in pids if any(b'"pid":%d' % pid in r.body for r in received)}
    assert uploaded == pids, stderr[-3000:]


class _Sink:
    def __init__(self) -> None:
        self.events: list[list[dict[str, Any]]] = []
        self.lock = threading.Lock()

    def submit(self, trace: Any) -> None:
        with self.lock:
            self.events.append(list(trace.events))


def _concurrent_app(upstream: str, dsn: str) -> Flask:
    app = Flask("concurrent")

    @app.get("/order/<int:number>")
    def order(number: int) -> Any:
        echoed = requests.get(f"{upstream}/query?n={number}", timeout=10).json()
        connection = psycopg2.connect(dsn)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT %s * 2 AS doubled", (number,))
                [(doubled,)] = cursor.fetchall()
        finally:
            connection.close()
        return jsonify({"query": echoed["query"], "doubled": doubled}), 500

    return app


@pytest.mark.postgres
def test_64_concurrent_requests_keep_their_own_http_and_sql_exchanges(
    upstream: Upstream, postgres_dsn: str
) -> None:
    sink = _Sink()
    with served(
        upstream.base, postgres_dsn, {}, app=_concurrent_app(upstream.base, postgres_dsn)
    ) as service:
        assert service.processor is not None
        service.processor.add_sink(sink)
        barrier = threading.Barrier(32)

        def one(number: int) -> int:
            if number < 32:
                barrier.wait(10)
            return fetch(service.base, "GET", f"/order/{number}")[0]

        with ThreadPoolExecutor(max_workers=64) as pool:
            statuses = list(pool.map(one, range(64)))
        for _ in range(500):
            with sink.lock:
                if len(sink.events) >= 64:
                    break
            threading.Event().wait(0.01)
    assert statuses == [500] * 64
    seen: dict[int, Any] = {}
    for events in sink.events:
        returned = events[-1]
        doubled = returned["output"]["doubled"]
        exchanges = [e["exchange"] for e in events if e["kind"] == "effect"]
        seen[doubled // 2] = (
            [
                json.loads(exchanges[0]["response"]["body"])["query"],
                exchanges[1]["request"]["values"],
                exchanges[1]["response"]["rows"],
            ],
            returned["effectsComplete"],
        )
    assert seen == {n: ([f"n={n}", [n], [{"doubled": 2 * n}]], True) for n in range(64)}
