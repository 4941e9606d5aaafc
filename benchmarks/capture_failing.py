"""What a failing request costs, and what uploading failures does to the other requests:
``python -m benchmarks.capture_failing``.

The in-process driver of ``benchmarks/capture_path.py`` (the benchmark Flask service called as
a WSGI application: one ``requests`` call, one psycopg2 query), with uploads going to a
loopback stand-in ingest (``benchmarks/_ingest.py``, its own process, answering 202). Three
kinds of child process take turns over several passes, so each sees the same machine:

``cost otel`` / ``cost reproit-on``
    Healthy and failing (``fail=1``, answered 500) requests interleaved one for one (the
    order within a pair alternates), 5 rounds of N pairs after 300 warm-up requests. Per
    round, the median over the pairs of *failing minus healthy* request-thread CPU
    (``time.thread_time_ns``). What a failing operation costs reproit-otel's request thread
    is reproit-on's figure minus otel's (the app's own 500 path costs both), per pass.

``load on`` / ``load off``
    The same load in both: every ``--fail-every``-th request fails and is captured, timed
    from call to return (wall). ``on``: the uploader flushes every 100 ms to the ingest, so
    batches are built and posted while requests run. ``off``: the flush interval is an hour,
    so the request thread does exactly the same work (the failing operation is queued, the
    oldest pushed out past 64) but the uploader thread never builds or sends. A ticker thread
    sleeps 1 ms at a time and records how late it wakes. Reported: request p50/p99/max, the
    ticker's p99/max lateness, and the garbage collector's full (gen-2) runs and longest
    pause (a collection holds the interpreter whichever thread triggered it).

``drain``
    64 failing operations are queued with the uploader idle; then the main thread asks the
    uploader to send them all and waits (releasing the interpreter) while the ticker runs,
    with ``sys.setswitchinterval(0.001)``: the uploader thread is the only one with work,
    so the ticker's longest lateness bounds the longest stretch the uploader holds the
    interpreter without letting another thread in.

Prints only; writes nothing. No figure is checked by any test.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from benchmarks._common import PYTHON, ROOT, Child, in_process_environment, percentile

TICK_S = 0.001


class Collections:
    """The garbage collector's runs while it is entered: count of full (gen-2) runs and the
    longest pause of any run (ms), so a long stretch can be told apart from a collection."""

    def __init__(self) -> None:
        self.full = 0
        self.longest_ms = 0.0
        self._started = 0.0

    def _watch(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.longest_ms = max(self.longest_ms, (time.perf_counter() - self._started) * 1e3)
        self.full += info["generation"] == 2

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._watch)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._watch)


class Ticker:
    """A thread that sleeps :data:`TICK_S` at a time and keeps how late each wake-up was (µs)."""

    def __init__(self) -> None:
        self.late_us: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-ticker", daemon=True)

    def _run(self) -> None:
        before = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(TICK_S)
            now = time.perf_counter()
            self.late_us.append((now - before - TICK_S) * 1e6)
            before = now

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict[str, float]:
        ordered = sorted(self.late_us)
        return {
            "ticks": len(ordered),
            "p99_late_us": round(percentile(ordered, 0.99), 1),
            "max_late_us": round(ordered[-1], 1) if ordered else float("nan"),
        }


def _uploader() -> Any:
    from benchmarks import _service

    for sink in _service._processor.sinks:
        if callable(getattr(sink, "flush", None)) and callable(getattr(sink, "stats", None)):
            return sink
    raise SystemExit("no uploader among the span processor's sinks")


def _cost_child(shape: str, count: int) -> dict[str, Any]:
    from benchmarks.capture_path import in_process_driver

    healthy = in_process_driver(shape)
    failing = in_process_driver(shape, failing=True)
    for index in range(150):
        healthy(index)
        failing(index)
    rounds: list[float] = []
    healthy_rounds: list[float] = []
    for _ in range(5):
        differences = []
        healthy_cpu = []
        for index in range(count):
            pair = (healthy, failing) if index % 2 == 0 else (failing, healthy)
            spent = {}
            for one in pair:
                started = time.thread_time_ns()
                one(index)
                spent[one is failing] = (time.thread_time_ns() - started) / 1000
            differences.append(spent[True] - spent[False])
            healthy_cpu.append(spent[False])
        rounds.append(statistics.median(differences))
        healthy_rounds.append(statistics.median(healthy_cpu))
    return {"fail_minus_healthy_us": rounds, "healthy_us": healthy_rounds}


def _load_child(count: int, fail_every: int) -> dict[str, Any]:
    from benchmarks.capture_path import in_process_driver

    healthy = in_process_driver("reproit-on")
    failing = in_process_driver("reproit-on", failing=True)
    for index in range(300):
        (failing if index % fail_every == 0 else healthy)(index)
    uploader = _uploader()
    uploader.flush(timeout=30)
    sent_before = uploader.stats()["sent_batches"]
    timings = []
    with Collections() as collections, Ticker() as ticker:
        for index in range(count):
            one = failing if index % fail_every == 0 else healthy
            started = time.perf_counter_ns()
            one(index)
            timings.append((time.perf_counter_ns() - started) / 1000)
    ordered = sorted(timings)
    return {
        "p50_us": round(percentile(ordered, 0.50), 1),
        "p99_us": round(percentile(ordered, 0.99), 1),
        "max_us": round(ordered[-1], 1),
        "sent_batches": uploader.stats()["sent_batches"] - sent_before,
        "gen2_runs": collections.full,
        "longest_gc_ms": round(collections.longest_ms, 1),
        **ticker.figures(),
    }


def _drain_child() -> dict[str, Any]:
    from benchmarks.capture_path import in_process_driver

    failing = in_process_driver("reproit-on", failing=True)
    uploader = _uploader()
    for index in range(64):
        failing(index)
    sys.setswitchinterval(0.001)
    with Ticker() as idle:
        time.sleep(0.2)
    started = time.perf_counter()
    with Collections() as collections, Ticker() as ticker:
        time.sleep(0.05)
        if not uploader.flush(timeout=60):
            raise SystemExit("the uploader did not send the 64 batches within 60 s")
    seconds = time.perf_counter() - started - 0.05
    stats = uploader.stats()
    return {
        "sent_batches": stats["sent_batches"],
        "drain_ms": round(seconds * 1e3, 1),
        "longest_gc_ms": round(collections.longest_ms, 1),
        "idle": idle.figures(),
        "draining": ticker.figures(),
    }


def _run(env: dict[str, str], *args: str) -> dict[str, Any]:
    command = [PYTHON, "-m", "benchmarks.capture_failing", "--child", *args]
    output = subprocess.run(
        command, cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    document: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return document


def _child(args: argparse.Namespace) -> dict[str, Any]:
    kind = args.child[0]
    if kind == "cost":
        return _cost_child(args.child[1], args.requests)
    if kind == "load":
        return _load_child(args.requests * 4, args.fail_every)
    if kind == "drain":
        return _drain_child()
    raise SystemExit(f"unknown child {kind!r}: expected cost, load or drain")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="pairs per round")
    parser.add_argument("--fail-every", type=int, default=4, help="under load, 1 in N fails")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fail_every < 1:
        raise SystemExit(f"--fail-every must be 1 or more, not {args.fail_every}")
    if args.child:
        print(json.dumps(_child(args)))
        return
    ingest = Child("benchmarks._ingest", "healthy")
    endpoint = f"http://127.0.0.1:{ingest.port}/v1/capture-batches"
    cost: dict[str, list[float]] = {"otel": [], "reproit-on": []}
    net: list[float] = []
    load: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    drains: list[dict[str, Any]] = []
    try:
        with in_process_environment() as base:
            env = {**base, "REPROIT_ENDPOINT": endpoint}
            for number in range(args.passes):
                medians = {}
                for shape, rounds_of_shape in cost.items():
                    document = _run(env, "cost", shape, "--requests", str(args.requests))
                    rounds_of_shape.extend(document["fail_minus_healthy_us"])
                    medians[shape] = statistics.median(document["fail_minus_healthy_us"])
                    rounds = " ".join(f"{v:+.0f}" for v in document["fail_minus_healthy_us"])
                    print(f"pass {number + 1} cost {shape:<11} failing - healthy cpu {rounds}")
                net.append(medians["reproit-on"] - medians["otel"])
                for mode, interval in (("on", "100"), ("off", "3600000")):
                    document = _run(
                        {**env, "REPROIT_FLUSH_INTERVAL_MS": interval},
                        *("load", mode, "--requests", str(args.requests)),
                        *("--fail-every", str(args.fail_every)),
                    )
                    load[mode].append(document)
                    print(f"pass {number + 1} load uploads {mode:<4} {json.dumps(document)}")
                document = _run({**env, "REPROIT_FLUSH_INTERVAL_MS": "3600000"}, "drain")
                drains.append(document)
                print(f"pass {number + 1} drain {json.dumps(document)}")
    finally:
        ingest.stop()
    _report(cost, net, load, drains)


def _report(
    cost: dict[str, list[float]],
    net: list[float],
    load: dict[str, list[dict[str, Any]]],
    drains: list[dict[str, Any]],
) -> None:
    print()
    for shape, values in cost.items():
        print(f"{shape} failing minus healthy, thread CPU: {statistics.median(values):+.0f} µs")
    print(
        f"failing over healthy, reproit-otel's part (reproit-on minus otel, per pass):"
        f" {statistics.median(net):+.0f} µs (per pass: "
        + " ".join(f"{value:+.0f}" for value in net)
        + ")"
    )
    print(
        f"{'uploads':<9}{'p50 µs':>9}{'p99 µs':>9}{'max µs':>9}{'tick p99':>10}{'tick max':>10}",
        end="",
    )
    print(f"{'gen-2 runs':>12}{'longest gc ms':>15}")
    for mode, documents in load.items():
        figures = [
            statistics.median(d[key] for d in documents)
            for key in ("p50_us", "p99_us", "max_us", "p99_late_us", "max_late_us")
        ]
        print(f"{mode:<9}" + "".join(f"{v:>9.0f}" for v in figures[:3]), end="")
        print("".join(f"{v:>10.0f}" for v in figures[3:]), end="")
        full = sum(d["gen2_runs"] for d in documents)
        print(f"{full:>12}{max(d['longest_gc_ms'] for d in documents):>15.1f}")
    p99 = [on["p99_us"] - off["p99_us"] for on, off in zip(load["on"], load["off"], strict=True)]
    sent = statistics.median(d["sent_batches"] for d in load["on"])
    print(
        f"request p99, uploads on minus off: {statistics.median(p99):+.0f} µs (per pass: "
        + " ".join(f"{value:+.0f}" for value in p99)
        + f"); batches sent per on run: {sent:.0f}"
    )
    longest = max(d["draining"]["max_late_us"] for d in drains)
    idle = max(d["idle"]["max_late_us"] for d in drains)
    drain_ms = statistics.median(d["drain_ms"] for d in drains)
    print(
        f"uploader draining 64 batches: {drain_ms:.0f} ms; longest ticker lateness"
        f" {longest:.0f} µs (idle process: {idle:.0f} µs); longest gc pause"
        f" {max(d['longest_gc_ms'] for d in drains):.1f} ms"
    )


if __name__ == "__main__":
    main()
