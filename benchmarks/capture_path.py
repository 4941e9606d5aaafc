"""What capture costs in process, without a WSGI server: ``python -m benchmarks.capture_path``.

The overhead benchmark measures requests through gunicorn and a socket, where the machine's
noise is several times the cost of capture. This one calls the same Flask service
(``benchmarks/_service.py``: one ``requests`` call to a loopback upstream, one psycopg2 query)
as a WSGI application directly, in one fresh process per shape, so only the work inside the
process is timed. Shapes alternate over several passes; each pass runs 5 rounds of N requests
(after 300 warm-up requests) and keeps the median of each round.

Reported per shape: the smallest and the median of the round medians (µs per request), and
the cost of ``reproit-on`` (capture configured, healthy requests) and ``reproit-off`` over
``otel``; then the same figures for the request thread's CPU time (``time.thread_time_ns``),
which leaves out the waits on the upstream and PostgreSQL and so moves less with the machine's
other work. With ``--gc`` the child also reports how often the cyclic garbage collector ran and
its mean time per request, and how many objects per request only the cyclic collector frees
(reference cycles). With ``--baseline DIR`` it interleaves ``otel`` and ``reproit-on``
children of this checkout with those of another one (a commit to compare with, checked out
with its own ``.venv``), rotating the order every pass, and prints the cost of capture in
each, paired per pass. Prints only; writes nothing. ``benchmarks/capture_scaling.py`` runs the
same child with a larger payload and with sentry-sdk in place of OpenTelemetry.

``--child SHAPE N`` is the child's own entry point.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import PYTHON, ROOT, in_process_environment

SHAPES = ("otel", "reproit-off", "reproit-on")


def in_process_driver(
    shape: str, payload: str = "small", *, failing: bool = False
) -> Callable[[int], None]:
    """Set this process up as ``shape`` and give back ``one(index)``: one ``GET /order``
    through the benchmark service as a WSGI call (no server, no socket to the app).

    ``shape`` is one of :data:`SHAPES` or ``bare`` or ``sentry`` (``_service.py``);
    ``payload`` is ``small`` (29 bytes, one row) or ``large`` (64 KiB, 1,000 rows). With
    ``failing`` every request asks for ``fail=1`` and must answer 500 (reproit-otel captures
    it). Call it before anything imports the service (the shape is read from the
    environment); a second call in the same process gives another driver of the same service.
    For ``reproit-on`` an endpoint already in ``REPROIT_ENDPOINT`` is kept; without one,
    uploads go to a closed loopback port.
    """
    if payload not in ("small", "large"):
        raise SystemExit(f"unknown payload {payload!r}: expected small or large")
    extra = "&payload=large" if payload == "large" else ""
    extra += "&fail=1" if failing else ""
    expected = "500" if failing else "200"
    if shape == "reproit-on":
        os.environ.setdefault("REPROIT_ENDPOINT", "http://127.0.0.1:9/v1/capture-batches")
        os.environ.update({"REPROIT_API_KEY": "bench-key", "REPROIT_APP_ID": "bench"})
    os.environ["BENCH_SHAPE"] = shape if shape in ("bare", "otel", "sentry") else "reproit"
    from werkzeug.test import EnvironBuilder

    from benchmarks._service import app

    base = EnvironBuilder(path="/order", headers=[("User-Agent", "bench")]).get_environ()

    def one(index: int) -> None:
        environ = dict(base, QUERY_STRING=f"id={index % 100 + 1}{extra}")
        environ["wsgi.input"] = io.BytesIO(b"")
        statuses: list[str] = []

        def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
            statuses.append(status)
            return lambda data: None

        body = app(environ, start_response)
        b"".join(body)
        close = getattr(body, "close", None)
        if close is not None:
            close()
        if not statuses or not statuses[0].startswith(expected):
            raise SystemExit(f"unexpected answer {statuses!r}")

    return one


def _child(shape: str, count: int, gc_stats: bool, payload: str = "small") -> dict[str, Any]:
    one = in_process_driver(shape, payload)
    for index in range(300):
        one(index)
    collections = [0, 0, 0]
    paused = [0.0, 0.0]

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            paused[1] = time.perf_counter()
        else:
            collections[info["generation"]] += 1
            paused[0] += time.perf_counter() - paused[1]

    if gc_stats:
        import gc

        gc.callbacks.append(watch)
    rounds = []
    cpu_rounds = []
    for _ in range(5):
        timings = []
        cpu = []
        for index in range(count):
            started = time.perf_counter_ns()
            cpu_started = time.thread_time_ns()
            one(index)
            cpu.append((time.thread_time_ns() - cpu_started) / 1000)
            timings.append((time.perf_counter_ns() - started) / 1000)
        rounds.append(statistics.median(timings))
        cpu_rounds.append(statistics.median(cpu))
    result: dict[str, Any] = {
        "shape": shape,
        "round_medians_us": rounds,
        "cpu_round_medians_us": cpu_rounds,
    }
    if gc_stats:
        import gc

        gc.callbacks.remove(watch)
        result["gc_collections"] = collections
        result["gc_us_per_request"] = round(paused[0] / (5 * count) * 1e6, 1)
        result["cyclic_objects_per_request"] = _cyclic_garbage(one, count)
    return result


def _cyclic_garbage(one: Callable[[int], None], count: int) -> float:
    """Objects the cyclic collector frees per request: with the collector off, everything
    not freed by reference counting stays until one full collection finds it."""
    import gc

    gc.collect()
    gc.disable()
    try:
        for index in range(count):
            one(index)
        found = gc.collect()
    finally:
        gc.enable()
    return round(found / count, 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000, help="per round")
    parser.add_argument("--gc", action="store_true", help="report garbage collector activity")
    parser.add_argument("--child", nargs=2, metavar=("SHAPE", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--payload", default="small", help=argparse.SUPPRESS)
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="another checkout (with its own .venv) to interleave with this one",
    )
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]), args.gc, args.payload)))
        return
    if args.baseline:
        _against_baseline(Path(args.baseline).resolve(), args.passes, args.requests)
        return

    def gc_note(document: dict[str, Any]) -> str:
        if not args.gc:
            return ""
        return f"  gc runs {document['gc_collections']}, {document['gc_us_per_request']} µs/request"

    run_passes(
        ["benchmarks.capture_path", *(["--gc"] if args.gc else [])],
        args.passes,
        args.requests,
        gc_note,
    )


def run_passes(
    child: list[str], passes: int, requests: int, note: Callable[[dict[str, Any]], str]
) -> None:
    """Run ``python -m CHILD... --child SHAPE N`` for every shape, ``passes`` times in turn;
    print each child's round medians (and ``note(document)``), then :func:`report_costs`."""
    module, *options = child
    results: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    cpu_results: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    with in_process_environment() as env:
        for number in range(passes):
            for shape in SHAPES:
                command = [PYTHON, "-m", module, "--child", shape, str(requests), *options]
                output = subprocess.run(
                    command, cwd=ROOT, env=env, check=True, capture_output=True, text=True
                ).stdout
                document = json.loads(output.strip().splitlines()[-1])
                results[shape].extend(document["round_medians_us"])
                cpu_results[shape].extend(document["cpu_round_medians_us"])
                rounds = " ".join(f"{value:.0f}" for value in document["round_medians_us"])
                cpu = " ".join(f"{value:.0f}" for value in document["cpu_round_medians_us"])
                print(f"pass {number + 1} {shape:<12} {rounds}  cpu {cpu}{note(document)}")
    report_costs(results, "", "")
    report_costs(cpu_results, "cpu ", ", thread CPU")


def _against_baseline(baseline: Path, passes: int, requests: int) -> None:
    """Interleave ``otel`` and ``reproit-on`` children of this checkout and of ``baseline``
    (run with its own ``.venv``), rotating the order every pass, and report the cost of
    capture over ``otel`` in each (request thread CPU), paired per pass."""
    python = baseline / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{baseline}: no .venv/bin/python (run scripts/bootstrap there first)")
    trees = {"this": (PYTHON, ROOT), "baseline": (str(python), baseline)}
    runs = [(tree, shape) for tree in trees for shape in ("otel", "reproit-on")]
    cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    with in_process_environment() as env:
        for number in range(passes):
            turn = number % len(runs)
            for tree, shape in runs[turn:] + runs[:turn]:
                python_path, root = trees[tree]
                command = [python_path, "-m", "benchmarks.capture_path"]
                command += ["--child", shape, str(requests)]
                output = subprocess.run(
                    command, cwd=root, env=env, check=True, capture_output=True, text=True
                ).stdout
                rounds = json.loads(output.strip().splitlines()[-1])["cpu_round_medians_us"]
                cpu[(tree, shape)].append(statistics.median(rounds))
                shown = " ".join(f"{value:.0f}" for value in rounds)
                print(f"pass {number + 1} {tree:<9}{shape:<11} cpu {shown}")
    costs: dict[str, list[float]] = {}
    for tree in trees:
        costs[tree] = [
            on - off for on, off in zip(cpu[(tree, "reproit-on")], cpu[(tree, "otel")], strict=True)
        ]
        per_pass = " ".join(f"{value:+.0f}" for value in costs[tree])
        print(
            f"{tree}: reproit-on over otel, thread CPU: {statistics.median(costs[tree]):+.0f} µs"
            f" (median of passes; per pass {per_pass})"
        )
    change = [mine - theirs for mine, theirs in zip(costs["this"], costs["baseline"], strict=True)]
    print(
        f"this minus baseline: {statistics.median(change):+.0f} µs"
        f" (per pass {' '.join(f'{value:+.0f}' for value in change)})"
    )


def report_costs(results: dict[str, list[float]], column: str, label: str) -> None:
    """Smallest and median round median per shape, and the cost of reproit over ``otel``."""
    print(f"{'shape':<12}{column + 'min µs':>12}{column + 'median µs':>15}")
    for shape, values in results.items():
        print(f"{shape:<12}{min(values):>12.0f}{statistics.median(values):>15.0f}")
    for shape in ("reproit-off", "reproit-on"):
        low = min(results[shape]) - min(results["otel"])
        middle = statistics.median(results[shape]) - statistics.median(results["otel"])
        print(f"{shape} over otel{label}: {low:+.0f} µs (min), {middle:+.0f} µs (median)")


if __name__ == "__main__":
    main()
