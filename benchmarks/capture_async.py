"""What capture costs an async service, in process: ``python -m benchmarks.capture_async``.

The async shape of the capture benchmarks: the FastAPI service of
``benchmarks/_service_async.py`` (one ``httpx.AsyncClient`` call to a loopback upstream, one
psycopg 3 ``AsyncConnection`` query) is called as an ASGI application directly, on one event
loop, in one fresh process per shape, so only the work inside the process is timed. Shapes
alternate over several passes; each pass runs 5 rounds of N requests (after 200 warm-up
requests) and keeps the median of each round.

Reported per shape: the smallest and the median of the round medians (µs per request), and
the cost of ``reproit-on`` (capture configured, healthy requests) and ``reproit-off`` over
``otel``; then the same figures for the thread's CPU time (``time.thread_time_ns``), which
leaves out the waits on the upstream and PostgreSQL. With ``--failing`` every request answers
500 and, with capture on, is captured (uploads go to a closed loopback port). Prints only;
writes nothing.

``--child SHAPE N`` is the child's own entry point.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.capture_path import run_passes

WARM_UP = 200
ROUNDS = 5

Message = dict[str, Any]


def _driver(shape: str, *, failing: bool) -> tuple[Callable[[int], Awaitable[None]], Any]:
    """Set this process up as ``shape``; give back ``one(index)``, one ``GET /order`` through
    the service as an ASGI call, and the service module."""
    if shape == "reproit-on":
        os.environ.setdefault("REPROIT_ENDPOINT", "http://127.0.0.1:9/v1/capture-batches")
        os.environ.update({"REPROIT_API_KEY": "bench-key", "REPROIT_APP_ID": "bench"})
    os.environ["BENCH_SHAPE"] = shape if shape in ("bare", "otel") else "reproit"
    from benchmarks import _service_async as service

    expected = 500 if failing else 200
    extra = "&fail=1" if failing else ""
    scope_base: Message = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/order",
        "raw_path": b"/order",
        "root_path": "",
        "headers": [(b"host", b"bench"), (b"user-agent", b"bench")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
    }

    async def one(index: int) -> None:
        scope = dict(scope_base, query_string=f"id={index % 100 + 1}{extra}".encode())
        requested = [False]
        statuses: list[int] = []

        async def receive() -> Message:
            if requested[0]:
                return {"type": "http.disconnect"}
            requested[0] = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await service.app(scope, receive, send)
        if statuses != [expected]:
            raise SystemExit(f"unexpected answer {statuses!r}")

    return one, service


async def _measure(shape: str, count: int, failing: bool) -> dict[str, Any]:
    one, service = _driver(shape, failing=failing)
    for index in range(WARM_UP):
        await one(index)
    rounds = []
    cpu_rounds = []
    for _ in range(ROUNDS):
        timings = []
        cpu = []
        for index in range(count):
            started = time.perf_counter_ns()
            cpu_started = time.thread_time_ns()
            await one(index)
            cpu.append((time.thread_time_ns() - cpu_started) / 1000)
            timings.append((time.perf_counter_ns() - started) / 1000)
        rounds.append(statistics.median(timings))
        cpu_rounds.append(statistics.median(cpu))
    result: dict[str, Any] = {
        "shape": shape,
        "round_medians_us": rounds,
        "cpu_round_medians_us": cpu_rounds,
    }
    if service.processor is not None:
        stats = service.processor.stats()
        result["incomplete_reasons"] = stats.get("incomplete_reasons", {})
    await service.close()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--requests", type=int, default=500, help="per round")
    parser.add_argument("--failing", action="store_true", help="every request answers 500")
    parser.add_argument("--child", nargs=2, metavar=("SHAPE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        measured = asyncio.run(_measure(args.child[0], int(args.child[1]), args.failing))
        print(json.dumps(measured))
        return

    def incomplete(document: dict[str, Any]) -> str:
        reasons = document.get("incomplete_reasons")
        return f"  incomplete {json.dumps(reasons)}" if reasons else ""

    run_passes(
        ["benchmarks.capture_async", *(["--failing"] if args.failing else [])],
        args.passes,
        args.requests,
        incomplete,
    )


if __name__ == "__main__":
    main()
