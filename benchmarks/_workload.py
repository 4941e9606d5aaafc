"""The mixed replay workload: reproit-otel against vcrpy, whole workload, load included.

One ``requests.Session`` makes N calls in a repeating pattern: ``GET /items?page=<k>`` (about
300 bytes of JSON), ``POST /quote`` with a JSON body (about 300 bytes back) and
``GET /catalog?i=<k>`` (about 8 KB of JSON); every answer is read with ``json()``. Bodies are
JSON as services write it (keys in their own order, spaces, floats such as ``9.0``).

Both tools record the same N calls from a live loopback upstream (reproit-otel through its
capture pipeline, vcrpy with ``record_mode="all"``); the upstream is then stopped, and the
whole workload is timed as a user runs it: load the recording, make the N calls, let go.
:func:`measure` returns the seconds of each, the median of fresh runs taken in turns.
"""

from __future__ import annotations

import functools
import gc
import json
import statistics
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

__all__ = ["measure", "workload"]

_SMALL = {"total": 9.0, "currency": "EUR", "lines": [{"sku": "tea", "qty": 2, "price": 4.5}]}


def _small(page: int) -> bytes:
    body = {**_SMALL, "page": page, "note": "n" * 160}
    return json.dumps(body).encode()


def _large(item: int) -> bytes:
    body = {"item": item, "price": 12.0, "tags": ["a", "b"], "text": "t" * 7800}
    return json.dumps(body).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if parts.path == "/items":
            self._answer(_small(int(query["page"][0])))
        else:
            self._answer(_large(int(query["i"][0])))

    def do_POST(self) -> None:
        sent = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self._answer(_small(int(sent["sku"])))


def workload(base: str, size: int) -> float:
    """Make the ``size`` calls against ``base``; a checksum of what ``json()`` gave."""
    checksum = 0.0
    with requests.Session() as session:
        for index in range(size):
            step = index % 3
            if step == 0:
                answer = session.get(f"{base}/items", params={"page": index})
                checksum += answer.json()["total"]
            elif step == 1:
                answer = session.post(f"{base}/quote", json={"sku": index, "qty": 2})
                checksum += answer.json()["lines"][0]["price"]
            else:
                answer = session.get(f"{base}/catalog", params={"i": index})
                checksum += answer.json()["price"]
    return checksum


def _record_reproit(base: str, size: int, path: Path) -> float:
    from tests.integration.requests_helpers import capsule_of, capturing

    with capturing() as capture:
        checksum, events = capture.operation(lambda: workload(base, size))
    path.write_text(json.dumps(capsule_of(events)), encoding="utf-8")
    return checksum


def _record_vcrpy(base: str, size: int, path: Path) -> float:
    import vcr

    path.unlink(missing_ok=True)  # "all" would add to an existing cassette
    recorder = vcr.VCR(serializer="json", record_mode="all")
    with recorder.use_cassette(str(path)):
        return workload(base, size)


def _replay_reproit(path: Path, base: str, size: int) -> tuple[float, float]:
    from reproit_otel.instrumentation.requests import RequestsReplayInstrumentor
    from reproit_otel.replay.session import activate, deactivate, load_replay_file

    started = time.perf_counter()
    session = load_replay_file(path)
    instrumentor = RequestsReplayInstrumentor()
    # As the replay bootstrap does it (reproit_otel.replay): no package metadata scan.
    instrumentor.instrument(secret_values=(), skip_dep_check=True)
    activate(session)
    try:
        checksum = workload(base, size)
    finally:
        deactivate()
        instrumentor.uninstrument()
    seconds = time.perf_counter() - started
    if session.diverged or session.consumed != size:
        raise RuntimeError(f"reproit served {session.consumed} of {size}")
    return seconds, checksum


def _replay_vcrpy(path: Path, base: str, size: int) -> tuple[float, float]:
    import vcr

    player = vcr.VCR(serializer="json", record_mode="none")
    started = time.perf_counter()
    with player.use_cassette(str(path)) as cassette:
        checksum = workload(base, size)
    seconds = time.perf_counter() - started
    if cassette.play_count != size:
        raise RuntimeError(f"vcrpy played {cassette.play_count} of {size}")
    return seconds, checksum


def _interleaved(
    runs: tuple[Callable[[], tuple[float, float]], ...], repeats: int, expected: float
) -> list[list[float]]:
    """The seconds of each run, the runs taking turns so both see the same machine."""
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for index, run in enumerate(runs):
            gc.collect()  # no run pays for the garbage of the one before
            seconds, checksum = run()
            if checksum != expected:
                raise RuntimeError("a replay handed the application other values than production")
            times[index].append(seconds)
    return times


def measure(sizes: tuple[int, ...], folder: Path) -> list[dict[str, Any]]:
    """For each size: the whole-workload seconds of reproit-otel and vcrpy, and their ratio."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    recorded: dict[int, tuple[Path, Path, float]] = {}
    try:
        for size in (2, *sizes):  # 2: an untimed warm-up of both tools
            capsule, cassette = folder / f"work-{size}.capsule", folder / f"work-{size}.cassette"
            live = _record_reproit(base, size, capsule)
            if _record_vcrpy(base, size, cassette) != live:
                raise RuntimeError("the upstream answered the two recordings differently")
            recorded[size] = (capsule, cassette, live)
    finally:
        server.shutdown()  # stopped: every replayed call must be served from the recording
        server.server_close()
    rows = []
    for size in (2, *sizes):
        capsule, cassette, live = recorded[size]
        repeats = 1 if size == 2 else max(5, min(51, 1000 // size))
        reproit, vcrpy = _interleaved(
            (
                functools.partial(_replay_reproit, capsule, base, size),
                functools.partial(_replay_vcrpy, cassette, base, size),
            ),
            repeats,
            live,
        )
        if size == 2:
            continue
        # The median is the figure; the fastest run of each says what the tool costs when the
        # machine is quiet (a shared machine slows some runs of either tool).
        median_reproit, median_vcrpy = statistics.median(reproit), statistics.median(vcrpy)
        rows.append(
            {
                "calls": size,
                "repeats": repeats,
                "reproit_ms": round(median_reproit * 1e3, 3),
                "vcrpy_ms": round(median_vcrpy * 1e3, 3),
                "vcrpy_over_reproit": round(median_vcrpy / median_reproit, 2),
                "fastest_reproit_ms": round(min(reproit) * 1e3, 3),
                "fastest_vcrpy_ms": round(min(vcrpy) * 1e3, 3),
                "fastest_vcrpy_over_reproit": round(min(vcrpy) / min(reproit), 2),
            }
        )
    return rows
