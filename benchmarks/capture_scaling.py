"""Capture against payload size, against sentry-sdk, and the collector's work per request:
``python -m benchmarks.capture_scaling``.

The in-process driver of ``benchmarks/capture_path.py`` (the benchmark Flask service called
as a WSGI application: one ``requests`` call, one psycopg2 query) runs in one fresh process
per shape and payload:

``otel``        OpenTelemetry alone (Flask, requests, psycopg2 instrumentations);
``reproit-on``  the same with reproit-otel capture configured, healthy requests;
``sentry``      sentry-sdk with tracing on instead of OpenTelemetry (no psycopg2 span: the
                SDK has no psycopg2 integration), envelopes dropped;

each with the ``small`` payload (a 29-byte JSON answer, one row) and the ``large`` one (a
64 KiB JSON answer, 1,000 rows fetched with ``fetchall``). The processes take turns over
several passes so every shape sees the same machine; each runs 5 rounds of N requests after
300 warm-up requests and reports the median of each round, wall time and request-thread CPU
time (``time.thread_time_ns``).

Reported: per shape and payload, the median round of request-thread CPU; the cost over
``otel`` of the same payload (median of the per-pass differences, so drift cancels); how much
each stack's cost grows from the small to the large payload; and per 10,000 requests, the
garbage collector's gen-0 and gen-2 collections, with the objects per request that only the
cyclic collector frees. Prints only; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from typing import Any

from benchmarks._common import PYTHON, ROOT, in_process_environment

STACKS = ("otel", "reproit-on", "sentry")
PAYLOADS = ("small", "large")


def _run_child(env: dict[str, str], stack: str, payload: str, count: int) -> dict[str, Any]:
    command = [PYTHON, "-m", "benchmarks.capture_path", "--child", stack, str(count)]
    command += ["--gc", "--payload", payload]
    output = subprocess.run(
        command, cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    document: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return document


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--requests", type=int, default=600, help="per round")
    args = parser.parse_args(argv)
    keys = [(stack, payload) for payload in PAYLOADS for stack in STACKS]
    cpu: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    wall: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    pass_medians: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    collections: dict[tuple[str, str], list[int]] = {key: [0, 0, 0] for key in keys}
    cyclic: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    with in_process_environment() as env:
        for number in range(args.passes):
            for key in keys:
                document = _run_child(env, *key, args.requests)
                cpu[key].extend(document["cpu_round_medians_us"])
                wall[key].extend(document["round_medians_us"])
                pass_medians[key].append(statistics.median(document["cpu_round_medians_us"]))
                for generation, runs in enumerate(document["gc_collections"]):
                    collections[key][generation] += runs
                cyclic[key].append(document["cyclic_objects_per_request"])
                rounds = " ".join(f"{value:.0f}" for value in document["cpu_round_medians_us"])
                print(
                    f"pass {number + 1} {key[0]:<11}{key[1]:<6} cpu {rounds}"
                    f"  gc {document['gc_collections']}"
                    f"  cyclic objects/request {document['cyclic_objects_per_request']}"
                )
    timed = args.passes * 5 * args.requests
    print(f"\n{'shape':<18}{'cpu µs':>8}{'wall µs':>9}{'Δcpu/otel':>11}", end="")
    print(f"{'gen0/10k':>10}{'gen1/10k':>10}{'gen2/10k':>10}{'cyclic/req':>12}")
    for key in keys:
        over = [
            mine - base
            for mine, base in zip(pass_medians[key], pass_medians[("otel", key[1])], strict=True)
        ]
        per_10k = [runs * 10_000 / timed for runs in collections[key]]
        print(
            f"{key[0] + ' ' + key[1]:<18}{statistics.median(cpu[key]):>8.0f}"
            f"{statistics.median(wall[key]):>9.0f}{statistics.median(over):>+11.0f}"
            f"{per_10k[0]:>10.1f}{per_10k[1]:>10.1f}{per_10k[2]:>10.1f}"
            f"{statistics.median(cyclic[key]):>12.2f}"
        )
    print()
    for stack in STACKS[1:]:
        growth = [
            (large - large_otel) - (small - small_otel)
            for large, large_otel, small, small_otel in zip(
                pass_medians[(stack, "large")],
                pass_medians[("otel", "large")],
                pass_medians[(stack, "small")],
                pass_medians[("otel", "small")],
                strict=True,
            )
        ]
        print(
            f"{stack} over otel, large payload minus small payload, thread CPU:"
            f" {statistics.median(growth):+.0f} µs (per pass: "
            + " ".join(f"{value:+.0f}" for value in growth)
            + ")"
        )


if __name__ == "__main__":
    main()
