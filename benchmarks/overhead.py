"""What reproit-otel costs per request: ``python -m benchmarks.overhead [--quick]``.

The service (``benchmarks/_service.py``: Flask, one ``requests`` call to a loopback upstream,
one psycopg2 query against PostgreSQL) runs under gunicorn (one ``gthread`` worker, four
threads, keep-alive) in six server processes, one per shape:

=================  ===========================================================================
``bare``           Flask alone
``bare-again``     the same, a second time: the difference between the two is the method's
                   noise floor
``otel``           OpenTelemetry: Flask, requests and psycopg2 instrumentations,
                   ``BatchSpanProcessor`` with an exporter that drops the spans
``reproit-off``    plus reproit-otel installed, capture not configured
``reproit-on``     plus capture configured (an ingest, a key, an app id); healthy requests
``reproit-fail``   the same server configuration; every request fails (500), is captured and
                   uploaded to a local ``reproit-otel serve``
=================  ===========================================================================

One client drives one shape at a time over a persistent connection, in rounds; each round
visits every shape (in a rotated order), so slow drift of the machine is spread over all of
them. Each request is timed from its first byte sent to the last byte of the answer.

Reported per shape: p50 and p99 in microseconds (all rounds pooled), and the cost over its
predecessor as the pooled difference and as the median of the per-round p50 differences
(paired, so drift between rounds cancels). Writes ``overhead.json`` and ``overhead.png``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    RESULTS,
    Child,
    KeepAliveClient,
    Service,
    chart_path,
    command_line,
    machine,
    postgres,
    prepare_table,
    pyplot,
    summary,
    write_json,
)

API_KEY = "bench-key"

# (name, service shape, capture configured, failing requests, predecessor)
SHAPES: list[tuple[str, str, bool, bool, str | None]] = [
    ("bare", "bare", False, False, None),
    ("bare-again", "bare", False, False, "bare"),
    ("otel", "otel", False, False, "bare"),
    ("reproit-off", "reproit", False, False, "otel"),
    ("reproit-on", "reproit", True, False, "reproit-off"),
    ("reproit-fail", "reproit", True, True, "reproit-on"),
]


def _paired(per_round: dict[str, list[float]], shape: str, other: str) -> float:
    return round(
        statistics.median(a - b for a, b in zip(per_round[shape], per_round[other], strict=True)), 1
    )


def _settle_uploads(service: Service, timeout: float) -> None:
    """Give the failing shape's uploader time to send what it queued (for its counters)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sinks = service.get_json("/bench/stats").get("sinks") or [{}]
        if not sinks[0].get("queued"):
            return
        time.sleep(0.2)


def run(rounds: int, per_round: int, warmup: int, out: Path, quick: bool) -> dict[str, Any]:
    started = time.monotonic()
    upstream = Child("benchmarks._upstream")
    services: dict[str, Service] = {}
    ingest = None
    with postgres() as dsn, tempfile.TemporaryDirectory(prefix="reproit-bench-") as scratch:
        try:
            from tests.integration.served_ingest import ServedIngest

            prepare_table(dsn)
            ingest = ServedIngest(f"sqlite:///{Path(scratch) / 'ingest.db'}", "--api-key", API_KEY)
            base = {"BENCH_UPSTREAM": f"http://127.0.0.1:{upstream.port}", "BENCH_PG_DSN": dsn}
            capture = {
                "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
                "REPROIT_API_KEY": API_KEY,
                "REPROIT_APP_ID": "bench",
            }
            for name, shape, captured, _, _ in SHAPES:
                services[name] = Service(shape, {**base, **(capture if captured else {})})
            clients = {name: KeepAliveClient(service.port) for name, service in services.items()}
            paths = {
                name: "/order?fail=1&id=" if failing else "/order?id="
                for name, _, _, failing, _ in SHAPES
            }
            expected = {name: 500 if failing else 200 for name, _, _, failing, _ in SHAPES}
            for name, client in clients.items():  # connections, caches, first-call imports
                for index in range(warmup):
                    client.get(f"{paths[name]}{index % 100 + 1}")
            timings: dict[str, list[float]] = {name: [] for name in clients}
            per_round_p50: dict[str, list[float]] = {name: [] for name in clients}
            unexpected: dict[str, int] = dict.fromkeys(clients, 0)
            order = [name for name, *_ in SHAPES]
            for number in range(rounds):
                shift = number % len(order)
                for name in order[shift:] + order[:shift]:
                    client = clients[name]
                    batch: list[float] = []
                    for index in range(per_round):
                        status, elapsed = client.get(f"{paths[name]}{index % 100 + 1}")
                        if status != expected[name]:
                            unexpected[name] += 1
                        batch.append(elapsed)
                    timings[name].extend(batch)
                    per_round_p50[name].append(statistics.median(batch))
            for client in clients.values():
                client.close()
            _settle_uploads(services["reproit-fail"], timeout=10.0)
            server_stats = {
                name: service.get_json("/bench/stats") for name, service in services.items()
            }
        finally:
            for service in services.values():
                service.stop()
            if ingest is not None:
                ingest.stop()
            upstream.stop()

    figures = {name: summary(values) for name, values in timings.items()}
    costs: dict[str, dict[str, Any]] = {}
    for name, _, _, _, predecessor in SHAPES:
        if predecessor is None:
            continue
        costs[name] = {
            "over": predecessor,
            "p50_us": round(figures[name]["p50_us"] - figures[predecessor]["p50_us"], 1),
            "p99_us": round(figures[name]["p99_us"] - figures[predecessor]["p99_us"], 1),
            "paired_p50_us": _paired(per_round_p50, name, predecessor),
        }
    capture_over_otel = {
        "p50_us": round(figures["reproit-on"]["p50_us"] - figures["otel"]["p50_us"], 1),
        "p99_us": round(figures["reproit-on"]["p99_us"] - figures["otel"]["p99_us"], 1),
        "paired_p50_us": _paired(per_round_p50, "reproit-on", "otel"),
    }
    fail_stats = server_stats["reproit-fail"]
    document: dict[str, Any] = {
        "benchmark": "overhead",
        "quick": quick,
        "command": command_line("overhead", quick),
        "machine": machine(),
        "method": {
            "server": "gunicorn, 1 gthread worker, 4 threads, keep-alive",
            "client": "one persistent http.client connection per shape, sequential requests",
            "rounds": rounds,
            "requests_per_round": per_round,
            "warmup_requests": warmup,
            "request": "1 requests GET to a loopback upstream + 1 psycopg2 SELECT",
        },
        "shapes": figures,
        "noise_floor": costs["bare-again"],
        "cost_over_predecessor": {k: v for k, v in costs.items() if k != "bare-again"},
        "capture_on_over_otel": capture_over_otel,
        "targets": {
            "capture_on_over_otel_p50_us_at_most": 50,
            "met": capture_over_otel["paired_p50_us"] <= 50,
        },
        "unexpected_statuses": unexpected,
        "failing_shape_uploads": fail_stats.get("sinks"),
        "internal_errors": {name: s.get("internal_errors", {}) for name, s in server_stats.items()},
        "seconds": round(time.monotonic() - started, 1),
    }
    write_json(out, "overhead", document)
    _chart(document, chart_path(out, "overhead"))
    return document


def _chart(document: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    names = list(document["shapes"])
    p50 = [document["shapes"][name]["p50_us"] for name in names]
    p99 = [document["shapes"][name]["p99_us"] for name in names]
    figure, axis = plt.subplots(figsize=(9, 4.5))
    positions = range(len(names))
    axis.bar([x - 0.2 for x in positions], p50, width=0.4, label="p50")
    axis.bar([x + 0.2 for x in positions], p99, width=0.4, label="p99")
    for x, value in zip(positions, p50, strict=True):
        axis.annotate(f"{value:.0f}", (x - 0.2, value), ha="center", va="bottom", fontsize=8)
    axis.set_xticks(list(positions), names)
    axis.set_ylabel("µs per request")
    info = document["machine"]
    axis.set_title(f"Per-request latency by shape ({info['nproc']} CPU, Python {info['python']})")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--per-round", type=int, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 12)
    per_round = args.per_round or (20 if args.quick else 300)
    warmup = 10 if args.quick else 200
    document = run(rounds, per_round, warmup, args.out, args.quick)
    print(f"{'shape':<14}{'p50 µs':>10}{'p99 µs':>10}{'Δp50':>10}{'Δp99':>10}{'paired Δp50':>13}")
    for name, figures in document["shapes"].items():
        cost = document["cost_over_predecessor"].get(name) or (
            document["noise_floor"] if name == "bare-again" else None
        )
        extra = (
            f"{cost['p50_us']:>10.1f}{cost['p99_us']:>10.1f}{cost['paired_p50_us']:>13.1f}"
            if cost
            else ""
        )
        print(f"{name:<14}{figures['p50_us']:>10.1f}{figures['p99_us']:>10.1f}{extra}")
    print(f"capture on over OpenTelemetry: {document['capture_on_over_otel']}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
