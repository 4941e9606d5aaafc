"""What healthy capture costs, measured so that the machine's drift cancels:
``python -m benchmarks.capture_paired [--quick] [--json PATH]``.

The service is ``benchmarks/_service.py`` called as a WSGI application in process (the driver
of ``benchmarks/capture_path.py``): one ``requests`` call to a loopback upstream, one psycopg2
query, answered 200. Two payloads: ``small`` (a 29-byte JSON answer, one row with
``fetchone``) and ``large`` (64 KiB of JSON, 1,000 rows with ``fetchall``). Every request is
timed twice: the request thread's CPU (``time.thread_time_ns``, which leaves out the waits on
the upstream and PostgreSQL) and wall time (``time.perf_counter_ns``).

**Paired, in one process.** OpenTelemetry, reproit-otel with capture configured, and the
floor (``benchmarks/_floor.py``, a minimal stand-in that keeps the request's references in a
list and drops it when the status is below 500) are all installed in one process; before each
request one of three *arms* is switched on:

``off``      capture switched off (the span processor's ``capture`` flag, which every server
             span consults when it starts; the WSGI middleware and the recorders then pass
             through, as with capture not configured) and the floor off;
``reproit``  capture on, the floor off;
``floor``    capture off, the floor on.

The arms run in triples, each triple a fresh random order of the three (seeded); a small and
a large triple make a round, in random order. The cost of an arm is the mean over the triples of
*arm minus off*, trimmed of the 5 % most extreme differences at each end (a collector pause or
a preemption inside one request moves a plain mean of 600 by tens of µs), with its 90 %
confidence interval (Yuen's, from the winsorized variance); the plain mean and its Student's t
interval are printed beside it. Neighbouring requests see the same machine, so a drift of the
machine's speed over seconds falls on every arm alike. The cost at the large payload minus
the cost at the small one is paired the same way (the i-th triples of both payloads ran
together). A check counts the operations the span processor began: exactly one per
``reproit`` request, none for the others.

**Interleaved processes.** Six long-lived processes, one per shape: ``bare`` (Flask alone),
``otel`` (OpenTelemetry: Flask, requests and psycopg2 instrumentations, spans dropped),
``reproit-off`` (plus reproit-otel installed, capture not configured), ``reproit-on`` (capture
configured), ``floor`` (``otel`` plus the floor, on) and ``sentry`` (sentry-sdk with tracing,
instead of OpenTelemetry). They run short blocks of requests in turn, the order rotating every
round; per round and payload each shape's block median is compared with ``otel``'s (``bare``'s
for ``otel`` and ``sentry``) of the same round, and the cost is the mean of those differences
over the rounds. Each process has an offset of its own (its memory layout, what shares a cache
with it) that rounds cannot average out, so the rounds are spread over several *generations*
of fresh processes (4 by default) and the 90 % interval is taken over the generations' means
(over the rounds with fewer than 3 generations). This measures what the paired run cannot:
OpenTelemetry over the bare service, capture not configured over OpenTelemetry, and
sentry-sdk.

**Per hook, a diagnostic pass.** After the measured passes the paired process profiles
(``cProfile``, timed by the thread's CPU clock) small-payload requests with capture on and
off, alternating, and adds up per part of reproit-otel, by source file (span hooks:
``capture/processor.py``; exchange hand-over: ``capture/recording.py``,
``capture/operation.py``, ``wire/``; psycopg2 recorder; WSGI middleware:
``instrumentation/wsgi.py``, ``capture/inbound.py``; the requests recorder's body tap,
``_requests_reads.py`` and ``_requests_body.py``, apart from the rest of the requests
recorder), the time spent in its
own functions and in the builtins and other libraries' functions they call directly (not what
those call in turn), capture on minus capture off. The profiler costs every call it sees, so
these figures are larger than the paired cost; their shares say where the paired cost goes,
and the table also gives each share of the paired figure.

Prints a table; ``--json PATH`` also writes every figure. No figure is checked anywhere.

``--child-paired`` and ``--child SHAPE`` are the children's own entry points.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import PYTHON, ROOT, in_process_environment, machine

ARMS = ("off", "reproit", "floor")
PAYLOADS = ("small", "large")
SHAPES = ("bare", "otel", "reproit-off", "reproit-on", "floor", "sentry")
# What each interleaved shape is compared with, round by round.
BASELINE = {
    "otel": "bare",
    "reproit-off": "otel",
    "reproit-on": "otel",
    "floor": "otel",
    "sentry": "bare",
}
# The parts of reproit-otel the diagnostic pass adds up, by source file (first match wins).
PARTS = (
    ("span hooks", ("capture/processor.py",)),
    ("exchange hand-over", ("capture/recording.py", "capture/operation.py", "wire/")),
    ("psycopg2 recorder", ("instrumentation/_pg_", "instrumentation/psycopg2.py")),
    ("WSGI middleware", ("instrumentation/wsgi.py", "capture/inbound.py")),
    (
        "requests body tap",
        ("instrumentation/_requests_reads.py", "instrumentation/_requests_body.py"),
    ),
    ("requests recorder", ("instrumentation/requests.py", "instrumentation/_requests_")),
)
OTHER = "other reproit-otel code"
TRIM = 0.05  # the fraction of paired differences left out at each end of the trimmed mean
_PACKAGE = os.sep + "reproit_otel" + os.sep


# -- statistics ----------------------------------------------------------------------------


def _t90(df: int) -> float:
    """The one-sided 95 % quantile of Student's t with ``df`` degrees of freedom (a two-sided
    90 % interval), by the Cornish-Fisher expansion (within 0.01 of the table from df 4)."""
    z = 1.6448536269514722
    if df <= 0:
        return math.inf
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values: Sequence[float]) -> dict[str, float]:
    """Mean of ``values`` with its 90 % confidence interval (Student's t), and the same for
    the mean trimmed of its :data:`TRIM` most extreme fraction at each end (Yuen's interval,
    from the winsorized variance), which one collector pause or one slow request in a few
    hundred cannot move. Rounded to 0.1 µs."""
    n = len(values)
    mean = statistics.fmean(values)
    half = _t90(n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else math.inf
    ordered = sorted(values)
    cut = int(TRIM * n)
    kept = ordered[cut : n - cut]
    trimmed = statistics.fmean(kept)
    winsorized = [ordered[cut]] * cut + kept + [ordered[n - cut - 1]] * cut
    h = len(kept)
    spread = statistics.stdev(winsorized) if n > 1 else math.inf
    trimmed_half = _t90(h - 1) * spread * math.sqrt((n - 1) / (h * (h - 1))) if h > 1 else math.inf
    return {
        "mean": round(mean, 1),
        "low": round(mean - half, 1),
        "high": round(mean + half, 1),
        "trimmed": round(trimmed, 1),
        "trimmed_low": round(trimmed - trimmed_half, 1),
        "trimmed_high": round(trimmed + trimmed_half, 1),
        "n": n,
    }


def _shown(figure: dict[str, float]) -> str:
    """The trimmed mean and its interval first (the figure), then the plain mean."""
    return (
        f"{figure['trimmed']:+.1f} µs (90 % CI {figure['trimmed_low']:+.1f} to"
        f" {figure['trimmed_high']:+.1f}; untrimmed mean {figure['mean']:+.1f},"
        f" {figure['low']:+.1f} to {figure['high']:+.1f})"
    )


def _ratio(
    top: dict[str, float], bottom: dict[str, float], kind: str = "trimmed"
) -> dict[str, float | None]:
    """``top / bottom`` of the ``kind`` estimate (``trimmed`` or ``mean``) and the widest
    ratio their two intervals allow (None where the bottom interval reaches zero)."""
    prefix = "trimmed_" if kind == "trimmed" else ""
    middle, bottom_low, bottom_high = bottom[kind], bottom[prefix + "low"], bottom[prefix + "high"]
    if middle <= 0:
        return {"ratio": None, "low": None, "high": None}
    low = top[prefix + "low"] / bottom_high if bottom_high > 0 else None
    high = top[prefix + "high"] / bottom_low if bottom_low > 0 else None
    return {
        "ratio": round(top[kind] / middle, 2),
        "low": None if low is None else round(low, 2),
        "high": None if high is None else round(high, 2),
    }


# -- the children --------------------------------------------------------------------------


def _drivers(shape: str, *, floor: bool = False) -> dict[str, Callable[[int], None]]:
    """This process set up as ``shape`` (capture_path's shapes, or ``floor``: ``otel`` with
    the floor on): one driver per payload. ``floor`` also installs the floor, switched off
    (the paired process)."""
    from benchmarks.capture_path import in_process_driver

    base = "otel" if shape == "floor" else shape
    drivers = {payload: in_process_driver(base, payload) for payload in PAYLOADS}
    if floor or shape == "floor":
        from benchmarks import _floor

        _floor.install()  # before the first request: the service connects on its first
        _floor.state.active = shape == "floor"
    return drivers


def _timed(one: Callable[[int], None], index: int) -> tuple[float, float]:
    """(request-thread CPU µs, wall µs) of one request."""
    wall = time.perf_counter_ns()
    cpu = time.thread_time_ns()
    one(index)
    cpu = time.thread_time_ns() - cpu
    wall = time.perf_counter_ns() - wall
    return cpu / 1000, wall / 1000


def _switch(processor: Any, arm: str) -> None:
    from benchmarks import _floor

    processor.capture = arm == "reproit"
    _floor.state.active = arm == "floor"


def _child_paired(pairs: int, warmup: int, profiled: int, seed: int) -> dict[str, Any]:
    """The paired process: ``pairs`` triples per payload, then the diagnostic pass."""
    drivers = _drivers("reproit-on", floor=True)
    from benchmarks import _service

    processor = _service._processor
    order = random.Random(seed)
    index = 0
    for number in range(warmup):
        for payload in PAYLOADS:
            _switch(processor, ARMS[number % len(ARMS)])
            drivers[payload](index)
            index += 1
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        payload: {arm: {"cpu": [], "wall": []} for arm in ARMS} for payload in PAYLOADS
    }
    began = processor.stats().get("capture_operations", 0)
    for _ in range(pairs):
        for payload in order.sample(PAYLOADS, len(PAYLOADS)):
            for arm in order.sample(ARMS, len(ARMS)):
                _switch(processor, arm)
                cpu, wall = _timed(drivers[payload], index)
                index += 1
                samples[payload][arm]["cpu"].append(cpu)
                samples[payload][arm]["wall"].append(wall)
    began = processor.stats().get("capture_operations", 0) - began
    if began != pairs * len(PAYLOADS):
        raise SystemExit(
            f"capture began {began} operations for {pairs * len(PAYLOADS)} requests with "
            "capture switched on: the span processor no longer consults its capture flag "
            "per request"
        )
    breakdown = _profile(processor, drivers["small"], profiled, index)
    _switch(processor, "off")
    return {"samples": samples, "operations_begun": began, "breakdown": breakdown}


def _part(path: str) -> str | None:
    """The part of reproit-otel a source file belongs to (None: not reproit-otel's)."""
    at = path.rfind(_PACKAGE)
    if at < 0:
        return None
    inside = path[at + len(_PACKAGE) :].replace(os.sep, "/")
    for name, prefixes in PARTS:
        if inside.startswith(prefixes):
            return name
    return OTHER


def _attributed(profile: cProfile.Profile, requests: int) -> dict[str, dict[str, float]]:
    """µs and calls per request in each part: its functions' own time, and the time of
    builtins and other libraries' functions they call directly (not what those call)."""
    import pstats

    table: dict[str, dict[str, float]] = {}

    def add(part: str, seconds: float, calls: int) -> None:
        entry = table.setdefault(part, {"us": 0.0, "calls": 0.0})
        entry["us"] += seconds * 1e6 / requests
        entry["calls"] += calls / requests

    raw: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, calls, own, _, callers) in raw.items():
        part = _part(filename)
        if part is not None:
            add(part, own, calls)
            continue
        for (caller_file, _, _), (_, caller_calls, caller_own, _) in callers.items():
            caller_part = _part(caller_file)
            if caller_part is not None:
                add(caller_part, caller_own, caller_calls)
    return table


def _profile(
    processor: Any, one: Callable[[int], None], requests: int, index: int
) -> dict[str, Any]:
    """Capture on and off alternating, each profiled by its own profiler; per part, on minus
    off."""
    # Timed by the thread's CPU clock: a wait on the upstream or PostgreSQL inside a call
    # (the cursor's own execute, the adapter's send) counts for nothing either way.
    profiles = {arm: cProfile.Profile(time.thread_time) for arm in ("reproit", "off")}
    for number in range(2 * requests):
        arm = "reproit" if number % 2 == 0 else "off"
        _switch(processor, arm)
        profile = profiles[arm]
        profile.enable()
        one(index + number)
        profile.disable()
    on = _attributed(profiles["reproit"], requests)
    off = _attributed(profiles["off"], requests)
    parts: dict[str, dict[str, float]] = {}
    for name in [part for part, _ in PARTS] + [OTHER]:
        mine, theirs = on.get(name, {}), off.get(name, {})
        parts[name] = {
            "us": round(mine.get("us", 0.0) - theirs.get("us", 0.0), 1),
            "calls_on": round(mine.get("calls", 0.0), 1),
            "calls_off": round(theirs.get("calls", 0.0), 1),
        }
    return {"requests": requests, "payload": "small", "parts": parts}


def _child_shape(shape: str, warmup: int) -> None:
    """An interleaved process: warm up, say ``ready``, then run the blocks asked on stdin
    (``<payload> <count> <first index>``), answering each with its median CPU and wall µs."""
    drivers = _drivers(shape)
    for number in range(warmup):
        for payload in PAYLOADS:
            drivers[payload](number)
    print("ready", flush=True)
    for line in sys.stdin:
        payload, count, first = line.split()
        cpu: list[float] = []
        wall: list[float] = []
        for index in range(int(first), int(first) + int(count)):
            spent, waited = _timed(drivers[payload], index)
            cpu.append(spent)
            wall.append(waited)
        answer = {"cpu": statistics.median(cpu), "wall": statistics.median(wall)}
        print(json.dumps(answer), flush=True)


# -- the parent ----------------------------------------------------------------------------


def _paired(env: dict[str, str], pairs: int, warmup: int, profiled: int) -> dict[str, Any]:
    command = [PYTHON, "-m", "benchmarks.capture_paired", "--child-paired"]
    command += [str(pairs), str(warmup), str(profiled)]
    output = subprocess.run(
        command, cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    document: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    samples = document["samples"]
    figures: dict[str, Any] = {}
    for payload in PAYLOADS:
        arms = samples[payload]
        entry: dict[str, Any] = {}
        for metric in ("cpu", "wall"):
            off = arms["off"][metric]
            entry[metric] = {
                "request_off_us": round(statistics.fmean(off), 1),
                **{
                    arm: mean_ci(
                        [mine - base for mine, base in zip(arms[arm][metric], off, strict=True)]
                    )
                    for arm in ("reproit", "floor")
                },
            }
            entry[metric]["reproit_over_floor"] = _ratio(
                entry[metric]["reproit"], entry[metric]["floor"]
            )
            entry[metric]["reproit_over_floor_untrimmed"] = _ratio(
                entry[metric]["reproit"], entry[metric]["floor"], "mean"
            )
        figures[payload] = entry
    growth = {}
    for arm in ("reproit", "floor"):
        # Large minus small, triple by triple (the i-th triple of each payload ran together).
        differences = [
            (large - large_off) - (small - small_off)
            for large, large_off, small, small_off in zip(
                samples["large"][arm]["cpu"],
                samples["large"]["off"]["cpu"],
                samples["small"][arm]["cpu"],
                samples["small"]["off"]["cpu"],
                strict=True,
            )
        ]
        growth[arm] = mean_ci(differences)
    return {
        "pairs": pairs,
        "operations_begun": document["operations_begun"],
        "payloads": figures,
        "large_minus_small_cpu": growth,
        "breakdown": document["breakdown"],
    }


class _Shape:
    """One interleaved process, driven block by block over its stdin."""

    def __init__(self, shape: str, env: dict[str, str], warmup: int) -> None:
        self.shape = shape
        self.process = subprocess.Popen(
            [PYTHON, "-m", "benchmarks.capture_paired", "--child", shape, str(warmup)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.shape} process ended ({self.process.wait()})")
        return line

    def ready(self) -> None:
        if self._line().strip() != "ready":
            raise SystemExit(f"the {self.shape} process did not start")

    def block(self, payload: str, count: int, first: int) -> dict[str, float]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{payload} {count} {first}\n")
        self.process.stdin.flush()
        answer: dict[str, float] = json.loads(self._line())
        return answer

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def _interleaved(
    env: dict[str, str], rounds: int, block: int, warmup: int, generations: int
) -> dict[str, Any]:
    """``rounds`` rounds of blocks, spread over ``generations`` fresh sets of processes (each
    process has its own offset: its memory layout, what shares a cache with it)."""
    means: dict[str, dict[str, dict[str, list[float]]]] = {
        payload: {shape: {"cpu": [], "wall": []} for shape in SHAPES} for payload in PAYLOADS
    }
    first = 0
    number = 0
    for generation in range(generations):
        children = [_Shape(shape, env, warmup) for shape in SHAPES]
        try:
            for child in children:
                child.ready()
            for _ in range(rounds // generations + (generation < rounds % generations)):
                turn = number % len(children)
                for payload in PAYLOADS if number % 2 == 0 else PAYLOADS[::-1]:
                    for child in children[turn:] + children[:turn]:
                        answer = child.block(payload, block, first)
                        for metric in ("cpu", "wall"):
                            means[payload][child.shape][metric].append(answer[metric])
                    first += block
                number += 1
        finally:
            for child in children:
                child.stop()
    sizes = [rounds // generations + (g < rounds % generations) for g in range(generations)]
    by_generation = generations >= 3

    def cost(differences: list[float]) -> dict[str, float]:
        if not by_generation:
            return mean_ci(differences)
        # The interval over the generations' means: rounds of one set of processes share
        # its offsets, so they are not independent of one another.
        grouped, at = [], 0
        for size in sizes:
            grouped.append(statistics.fmean(differences[at : at + size]))
            at += size
        return mean_ci(grouped)

    figures: dict[str, Any] = {}
    for payload in PAYLOADS:
        entry: dict[str, Any] = {}
        for metric in ("cpu", "wall"):
            shapes = means[payload]
            costs: dict[str, Any] = {
                "request_us": {
                    shape: round(statistics.fmean(shapes[shape][metric]), 1) for shape in SHAPES
                }
            }
            for shape, base in BASELINE.items():
                costs[shape] = cost(
                    [
                        mine - theirs
                        for mine, theirs in zip(
                            shapes[shape][metric], shapes[base][metric], strict=True
                        )
                    ]
                )
            costs["reproit_on_over_floor"] = _ratio(costs["reproit-on"], costs["floor"], "mean")
            entry[metric] = costs
        figures[payload] = entry
    return {
        "rounds": rounds,
        "generations": generations,
        "interval_over": "generations" if by_generation else "rounds",
        "block": block,
        "payloads": figures,
    }


def _report(document: dict[str, Any]) -> None:
    paired, spread = document["paired"], document["interleaved"]
    print(f"\npaired in one process: {paired['pairs']} triples per payload")
    for payload in PAYLOADS:
        for metric, label in (("cpu", "request-thread CPU"), ("wall", "wall time")):
            figures = paired["payloads"][payload][metric]
            otel = spread["payloads"][payload][metric]["otel"]
            reproit, floor = figures["reproit"], figures["floor"]
            ratio = figures["reproit_over_floor"]
            request = figures["request_off_us"]
            print(f"  {payload} payload, {label} (request with capture off: {request:.0f} µs)")
            print(f"    reproit-on costs {_shown(reproit)}")
            print(f"    the floor costs  {_shown(floor)}")
            shown_ratio = "n/a" if ratio["ratio"] is None else f"{ratio['ratio']:.2f}"
            print(
                f"    ratio reproit/floor {shown_ratio}"
                f" (intervals allow {ratio['low']} to {ratio['high']})"
            )
            share = 100 * reproit["trimmed"] / request
            of_otel = 100 * reproit["trimmed"] / otel["mean"] if otel["mean"] > 0 else math.nan
            print(
                f"    reproit-on is {share:.1f} % of the request and {of_otel:.0f} % of"
                f" OpenTelemetry's own cost over bare ({otel['mean']:+.0f} µs, interleaved)"
            )
    for arm, figure in paired["large_minus_small_cpu"].items():
        print(f"  {arm}: cost at the large payload minus at the small, CPU: {_shown(figure)}")
    print(
        f"\ninterleaved processes: {spread['rounds']} rounds of blocks of {spread['block']}"
        f" requests per shape and payload, {spread['generations']} sets of processes"
        f" (intervals over the {spread['interval_over']})"
    )
    header = f"  {'shape':<12}{'over':<6}"
    for payload in PAYLOADS:
        header += f"{payload + ' CPU µs':>14}{'cost, 90 % CI':>26}"
    print(header)
    for shape in SHAPES:
        row = f"  {shape:<12}{BASELINE.get(shape, ''):<6}"
        for payload in PAYLOADS:
            costs = spread["payloads"][payload]["cpu"]
            row += f"{costs['request_us'][shape]:>14.0f}"
            if shape in BASELINE:
                cost = costs[shape]
                interval = f"{cost['mean']:+.0f} ({cost['low']:+.0f}..{cost['high']:+.0f})"
                row += f"{interval:>26}"
            else:
                row += f"{'':>26}"
        print(row)
    for payload in PAYLOADS:
        costs = spread["payloads"][payload]["cpu"]
        off = costs["reproit-off"]
        noise = "below noise" if off["low"] <= 0 <= off["high"] else "not below noise"
        ratio = costs["reproit_on_over_floor"]["ratio"]
        print(
            f"  {payload}: capture not configured over otel {_shown(off)}: {noise};"
            f" reproit-on/floor {ratio}"
        )
    breakdown = paired["breakdown"]
    print(
        f"\nper hook (diagnostic pass, cProfile, {breakdown['requests']} requests each way,"
        " small payload; capture on minus off):"
    )
    paired_cost = paired["payloads"]["small"]["cpu"]["reproit"]["trimmed"]
    total = sum(part["us"] for part in breakdown["parts"].values())
    print(
        f"  {'part':<26}{'profiled µs':>12}{'share':>8}{'of paired µs':>14}"
        f"{'calls on':>10}{'calls off':>10}"
    )
    for name, part in breakdown["parts"].items():
        share = part["us"] / total if total > 0 else math.nan
        print(
            f"  {name:<26}{part['us']:>12.1f}{100 * share:>7.0f}%{share * paired_cost:>14.1f}"
            f"{part['calls_on']:>10.1f}{part['calls_off']:>10.1f}"
        )
    print(f"  {'total':<26}{total:>12.1f}{'100%':>8}{paired_cost:>14.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests")
    parser.add_argument("--pairs", type=int, help="triples per payload in the paired process")
    parser.add_argument("--rounds", type=int, help="rounds of the interleaved processes")
    parser.add_argument("--block", type=int, help="requests per block, interleaved processes")
    parser.add_argument(
        "--generations", type=int, help="fresh sets of interleaved processes the rounds share"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument("--child-paired", nargs=3, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, metavar=("SHAPE", "WARMUP"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_paired:
        pairs, warmup, profiled = args.child_paired
        print(json.dumps(_child_paired(pairs, warmup, profiled, seed=30)))
        return
    if args.child:
        _child_shape(args.child[0], int(args.child[1]))
        return
    pairs = args.pairs or (20 if args.quick else 1200)
    rounds = args.rounds or (3 if args.quick else 16)
    block = args.block or (5 if args.quick else 40)
    generations = args.generations or (1 if args.quick else 4)
    warmup = 20 if args.quick else 300
    profiled = 10 if args.quick else 300
    started = time.monotonic()
    load = os.getloadavg()[0]
    with in_process_environment() as env:
        paired = _paired(env, pairs, warmup, profiled)
        interleaved = _interleaved(env, rounds, block, warmup, min(generations, rounds))
    document = {
        "benchmark": "capture_paired",
        "quick": args.quick,
        "machine": machine(),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
        "seconds": round(time.monotonic() - started, 1),
        "paired": paired,
        "interleaved": interleaved,
    }
    _report(document)
    print(
        f"\nload average {document['load_average'][0]} before, "
        f"{document['load_average'][1]} after; {document['seconds']} s"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
