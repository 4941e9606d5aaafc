"""What serving recorded HTTP exchanges costs: ``python -m benchmarks.replay [--quick]``.

1. One real exchange is recorded from a loopback upstream twice: by reproit-otel's capture
   pipeline (``requests`` recorder) and by vcrpy (``record_mode="all"``). Each recording is
   then grown to N interactions that differ only in their query (``/rate?i=<k>``), so both
   tools hold exactly the same interactions.
2. **Per call**: for N in 1..10,000, N ``requests`` calls (one ``requests.Session``) are
   served by reproit's requests replay (``RequestsReplayInstrumentor`` + the N-exchange
   capsule) and by vcrpy (``use_cassette`` of the N-interaction cassette, ``record_mode``
   ``none``). Loading is timed apart from the calls. For context, the same calls against the
   live loopback upstream are timed up to 1,000. vcrpy looks every call up by comparing it
   with each stored interaction, so large cassettes are slow: a run stops after its time
   budget and reports the calls it made (the cheapest ones, which flatters vcrpy).
3. **Load**: the time ``REPROIT_REPLAY`` takes to read a capsule file into a replay session
   (``load_replay_file``) and to validate it (``load_capsule``), as the capsule grows.
4. **Whole workload** (:mod:`benchmarks._workload`): a ``requests.Session`` mixing GET with a
   query and POST with JSON, bodies of about 300 bytes and 8 KB, recorded by both tools and
   replayed with the upstream stopped; each run is timed whole, loading included, at 1, 10,
   100 and 1,000 calls, the two tools taking turns. ``workload`` holds the medians, the
   fastest runs and the ratios (vcrpy's time over reproit-otel's).

Writes ``replay.json`` and ``replay.png``.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
import requests.adapters

from benchmarks._common import RESULTS, Child, chart_path, command_line, machine, pyplot, write_json
from benchmarks._workload import measure

SIZES = (1, 10, 100, 1000, 10000)
QUICK_SIZES = (1, 10, 100)
WORKLOAD_SIZES = (1, 10, 100, 1000)
LIVE_LIMIT = 1000


def _recorded_capsule(base: str) -> dict[str, Any]:
    """A capsule of one real call recorded by the capture pipeline."""
    from tests.integration.requests_helpers import capsule_of, capturing

    with requests.Session() as session, capturing() as capture:
        _, events = capture.operation(lambda: session.get(f"{base}/rate?i=0").json())
    return capsule_of(events)


def _grown_capsule(template: dict[str, Any], size: int) -> dict[str, Any]:
    """``template`` (one effect) with ``size`` effects, the k-th for ``/rate?i=<k>``."""
    start, effect, end = template["events"]
    events = [copy.deepcopy(start)]
    for index in range(size):
        event = copy.deepcopy(effect)
        request = event["exchange"]["request"]
        request["url"] = request["url"].replace("?i=0", f"?i={index}")
        event["key"] = event["key"].replace("?i=0", f"?i={index}")
        event["sequence"] = start["sequence"] + 1 + index
        events.append(event)
    finish = copy.deepcopy(end)
    finish["sequence"] = start["sequence"] + 1 + size
    events.append(finish)
    return {**template, "events": events}


def _recorded_cassette(base: str, folder: Path) -> dict[str, Any]:
    """vcrpy's cassette (JSON serializer) of the same one real call."""
    import vcr

    path = folder / "one.json"
    recorder = vcr.VCR(serializer="json", record_mode="all")
    with requests.Session() as session, recorder.use_cassette(str(path)):
        session.get(f"{base}/rate?i=0").json()
    cassette: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return cassette


def _grown_cassette(template: dict[str, Any], size: int) -> dict[str, Any]:
    [interaction] = template["interactions"]
    grown = []
    for index in range(size):
        item = copy.deepcopy(interaction)
        item["request"]["uri"] = item["request"]["uri"].replace("?i=0", f"?i={index}")
        grown.append(item)
    return {**template, "interactions": grown}


def _calls(session: requests.Session, base: str, size: int, budget_s: float) -> tuple[int, float]:
    """Make calls 0..size-1 (or fewer, when ``budget_s`` runs out); (calls made, seconds)."""
    started = time.perf_counter()
    made = 0
    for index in range(size):
        response = session.get(f"{base}/rate?i={index}")
        if response.status_code != 200 or response.json()["rate"] != 1.5:
            raise RuntimeError(f"call {index} was not served as recorded: {response.status_code}")
        made += 1
        if time.perf_counter() - started > budget_s:
            break
    return made, time.perf_counter() - started


def _reproit(path: Path, base: str, size: int) -> dict[str, Any]:
    from reproit_otel.instrumentation.requests import RequestsReplayInstrumentor
    from reproit_otel.replay.session import activate, deactivate, load_replay_file

    loaded = time.perf_counter()
    session = load_replay_file(path)
    load_s = time.perf_counter() - loaded
    instrumentor = RequestsReplayInstrumentor()
    instrumentor.instrument(secret_values=())
    activate(session)
    try:
        with requests.Session() as http:
            made, seconds = _calls(http, base, size, float("inf"))
    finally:
        deactivate()
        instrumentor.uninstrument()
    if session.consumed != size or session.diverged:
        raise RuntimeError(
            f"reproit served {session.consumed} of {size} (diverged: {session.diverged})"
        )
    return {
        "calls": made,
        "per_call_us": round(seconds / made * 1e6, 1),
        "load_ms": round(load_s * 1e3, 2),
    }


def _vcrpy(path: Path, base: str, size: int, budget_s: float) -> dict[str, Any]:
    import vcr

    player = vcr.VCR(serializer="json", record_mode="none")
    loaded = time.perf_counter()
    with player.use_cassette(str(path)) as cassette:
        load_s = time.perf_counter() - loaded
        with requests.Session() as http:
            made, seconds = _calls(http, base, size, budget_s)
        if cassette.play_count != made:
            raise RuntimeError(f"vcrpy played {cassette.play_count} of {made}")
    result: dict[str, Any] = {
        "calls": made,
        "per_call_us": round(seconds / made * 1e6, 1),
        "load_ms": round(load_s * 1e3, 2),
    }
    if made < size:
        result["stopped"] = f"time budget of {budget_s:g} s after {made} of {size} calls"
    return result


class _CannedAdapter(requests.adapters.HTTPAdapter):
    """Answers every request with the recorded body without any lookup: what ``requests``
    itself costs per call, the floor under any replay that serves ``requests``."""

    def send(self, request: Any, *args: Any, **kwargs: Any) -> requests.Response:
        response = requests.Response()
        response.status_code = 200
        response._content = b'{"rate":1.5,"currency":"EUR"}'
        response.headers["content-type"] = "application/json"
        response.url = request.url
        response.request = request
        return response


def _floor(base: str, size: int) -> dict[str, Any]:
    with requests.Session() as http:
        http.mount("http://", _CannedAdapter())
        made, seconds = _calls(http, base, size, float("inf"))
    return {"calls": made, "per_call_us": round(seconds / made * 1e6, 1)}


def _live(base: str, size: int) -> dict[str, Any]:
    with requests.Session() as http:
        made, seconds = _calls(http, base, min(size, LIVE_LIMIT), float("inf"))
    return {"calls": made, "per_call_us": round(seconds / made * 1e6, 1)}


def _median(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The result with the median per-call cost."""
    return sorted(results, key=lambda result: float(result["per_call_us"]))[len(results) // 2]


def _load_times(path: Path, repeats: int) -> dict[str, float]:
    from reproit_otel.replay.session import load_replay_file
    from reproit_otel.wire.capsule import load_capsule

    replay: list[float] = []
    validate: list[float] = []
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter()
        session = load_replay_file(path)
        replay.append(time.perf_counter() - started)
        del session
        gc.collect()
        started = time.perf_counter()
        capsule = load_capsule(path)
        validate.append(time.perf_counter() - started)
        del capsule
    return {
        "replay_session_ms": round(statistics.median(replay) * 1e3, 3),
        "validate_ms": round(statistics.median(validate) * 1e3, 3),
    }


def run(
    sizes: tuple[int, ...], budget_s: float, repeats: int, out: Path, quick: bool
) -> dict[str, Any]:
    started = time.monotonic()
    upstream = Child("benchmarks._upstream")
    base = f"http://127.0.0.1:{upstream.port}"
    rows: list[dict[str, Any]] = []
    workload_rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="reproit-bench-") as scratch:
            folder = Path(scratch)
            capsule = _recorded_capsule(base)
            cassette = _recorded_cassette(base, folder)
            # One untimed pass of each tool, so first-call imports and caches are not timed.
            warm = folder / "warm-capsule.json"
            warm.write_text(json.dumps(_grown_capsule(capsule, 2)), encoding="utf-8")
            _reproit(warm, base, 2)
            warm = folder / "warm-cassette.json"
            warm.write_text(json.dumps(_grown_cassette(cassette, 2)), encoding="utf-8")
            _vcrpy(warm, base, 2, budget_s)
            workload_rows = measure(tuple(s for s in WORKLOAD_SIZES if s in sizes), folder)
            for row in workload_rows:
                print(
                    f"{row['calls']:>6} calls, whole workload: reproit {row['reproit_ms']:>9.2f} "
                    f"ms, vcrpy {row['vcrpy_ms']:>10.2f} ms, "
                    f"vcrpy/reproit {row['vcrpy_over_reproit']:.2f} "
                    f"(fastest runs {row['fastest_vcrpy_over_reproit']:.2f})",
                    flush=True,
                )
            for size in sizes:
                capsule_path = folder / f"capsule-{size}.json"
                capsule_path.write_text(json.dumps(_grown_capsule(capsule, size)), encoding="utf-8")
                cassette_path = folder / f"cassette-{size}.json"
                cassette_path.write_text(
                    json.dumps(_grown_cassette(cassette, size)), encoding="utf-8"
                )
                # Small sizes are repeated (each time from a fresh load) and the median kept.
                repeat = max(1, 300 // size)
                reproit = _median([_reproit(capsule_path, base, size) for _ in range(repeat)])
                vcrpy = _median(
                    [_vcrpy(cassette_path, base, size, budget_s) for _ in range(repeat)]
                )
                floor = _median([_floor(base, size) for _ in range(repeat)])
                live = _median([_live(base, size) for _ in range(repeat)])
                above = (vcrpy["per_call_us"] - floor["per_call_us"]) / max(
                    1.0, reproit["per_call_us"] - floor["per_call_us"]
                )
                rows.append(
                    {
                        "calls": size,
                        "capsule_bytes": capsule_path.stat().st_size,
                        "reproit": reproit,
                        "vcrpy": vcrpy,
                        "live": live,
                        "repeats": repeat,
                        "requests_floor": floor,
                        "vcrpy_over_reproit_above_floor": round(above, 2),
                        "vcrpy_over_reproit": round(
                            vcrpy["per_call_us"] / reproit["per_call_us"], 2
                        ),
                        "load": _load_times(capsule_path, repeats),
                    }
                )
                gc.collect()
                print(
                    f"{size:>6} calls: reproit {reproit['per_call_us']:>8.1f} µs/call, "
                    f"vcrpy {vcrpy['per_call_us']:>9.1f} µs/call, "
                    f"capsule load {rows[-1]['load']['replay_session_ms']:.2f} ms",
                    flush=True,
                )
    finally:
        upstream.stop()
    ratios = [row["vcrpy_over_reproit"] for row in rows]
    per_exchange = [
        row["load"]["replay_session_ms"] * 1e3 / row["calls"] for row in rows if row["calls"] >= 100
    ]
    document: dict[str, Any] = {
        "benchmark": "replay",
        "quick": quick,
        "command": command_line("replay", quick),
        "machine": machine(),
        "method": {
            "sizes": list(sizes),
            "vcrpy_budget_s": budget_s,
            "load_repeats": repeats,
            "interaction": "GET /rate?i=<k> -> 200 application/json (29 bytes)",
        },
        "results": rows,
        "workload": workload_rows,
        "load_us_per_exchange": [round(value, 2) for value in per_exchange],
        "targets": {
            "vcrpy_over_reproit_at_least": 3,
            "min_ratio": min(ratios),
            "met": min(ratios) >= 3,
            "load_linear": bool(per_exchange) and max(per_exchange) <= 2 * min(per_exchange),
            "workload_min_ratio": min(row["vcrpy_over_reproit"] for row in workload_rows),
            "workload_min_fastest_ratio": min(
                row["fastest_vcrpy_over_reproit"] for row in workload_rows
            ),
            "workload_met": all(row["vcrpy_over_reproit"] >= 3 for row in workload_rows),
        },
        "seconds": round(time.monotonic() - started, 1),
    }
    write_json(out, "replay", document)
    _chart(document, chart_path(out, "replay"))
    return document


def _chart(document: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = document["results"]
    calls = [row["calls"] for row in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.plot(calls, [row["reproit"]["per_call_us"] for row in rows], "o-", label="reproit replay")
    left.plot(calls, [row["vcrpy"]["per_call_us"] for row in rows], "s-", label="vcrpy")
    left.plot(calls, [row["live"]["per_call_us"] for row in rows], "^--", label="live loopback")
    left.plot(
        calls,
        [row["requests_floor"]["per_call_us"] for row in rows],
        "x:",
        label="requests alone (canned adapter)",
    )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("recorded calls served")
    left.set_ylabel("µs per call")
    left.set_title("Per-call cost")
    left.legend()
    right.plot(
        calls, [row["load"]["replay_session_ms"] for row in rows], "o-", label="replay session"
    )
    right.plot(calls, [row["load"]["validate_ms"] for row in rows], "s-", label="validate")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("exchanges in the capsule")
    right.set_ylabel("ms")
    right.set_title("Capsule load time")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    parser.add_argument("--vcrpy-budget", type=float, default=None, help="seconds per size")
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    budget = args.vcrpy_budget or (5.0 if args.quick else 45.0)
    run(sizes, budget, 1 if args.quick else 5, args.out, args.quick)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
