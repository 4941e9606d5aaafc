"""What an unhealthy ingest does to the application: ``python -m benchmarks.outage [--quick]``.

The benchmark service (``benchmarks/_service.py`` with reproit-otel capturing, under
gunicorn) answers every request with a failure (500), so every request is captured and
queued for upload. Four server processes differ only in the ingest their uploads go to:

``healthy``   a loopback ingest that answers 202
``down``      a loopback port where nothing listens (connections are refused)
``hanging``   a loopback ingest that reads the batch and never answers
``500``       a loopback ingest that answers 500 (retried, then given up)

1. **Latency**: one keep-alive client drives the four servers in alternating rounds;
   p50 and p99 per state, and each state's p99 relative to the healthy one.
2. **Memory**: 20,000 failing requests to the ``hanging`` and the ``down`` servers, with the
   worker's RSS sampled every 1,000 requests. The upload queue holds 64 operations and drops
   the oldest beyond that, so memory should stop growing once it is full.

Writes ``outage.json`` and ``outage.png``.
"""

from __future__ import annotations

import argparse
import statistics
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
    free_port,
    machine,
    postgres,
    prepare_table,
    pyplot,
    summary,
    write_json,
)

STATES = ("healthy", "down", "hanging", "500")
MEMORY_STATES = ("hanging", "down")
STAND_IN_MODE = {"healthy": "healthy", "hanging": "hang", "500": "500"}


def _ingest_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1/capture-batches"


def _memory(service: Service, requests: int, every: int) -> dict[str, Any]:
    client = KeepAliveClient(service.port)
    samples = [{"requests": 0, "rss_kib": service.get_json("/bench/stats")["rss_kib"]}]
    failures = 0
    try:
        for index in range(1, requests + 1):
            status, _ = client.get(f"/order?fail=1&id={index % 100 + 1}")
            failures += status != 500
            if index % every == 0:
                samples.append(
                    {"requests": index, "rss_kib": service.get_json("/bench/stats")["rss_kib"]}
                )
    finally:
        client.close()
    stats = service.get_json("/bench/stats")
    quarter = samples[len(samples) // 4]["rss_kib"]
    return {
        "samples": samples,
        "unexpected_statuses": failures,
        "growth_after_first_quarter_kib": samples[-1]["rss_kib"] - quarter,
        "uploader": (stats.get("sinks") or [None])[0],
    }


def run(
    *,
    rounds: int,
    per_round: int,
    warmup: int,
    memory_requests: int,
    every: int,
    out: Path,
    quick: bool,
) -> dict[str, Any]:
    started = time.monotonic()
    upstream = Child("benchmarks._upstream")
    stand_ins: dict[str, Child] = {}
    services: dict[str, Service] = {}
    with postgres() as dsn:
        try:
            prepare_table(dsn)
            urls: dict[str, str] = {"down": _ingest_url(free_port())}
            for state, mode in STAND_IN_MODE.items():
                stand_ins[state] = Child("benchmarks._ingest", mode)
                urls[state] = _ingest_url(stand_ins[state].port)
            base = {"BENCH_UPSTREAM": f"http://127.0.0.1:{upstream.port}", "BENCH_PG_DSN": dsn}
            for state in STATES:
                services[state] = Service(
                    "reproit",
                    {
                        **base,
                        "REPROIT_ENDPOINT": urls[state],
                        "REPROIT_API_KEY": "bench-key",
                        "REPROIT_APP_ID": "bench",
                    },
                )
            clients = {state: KeepAliveClient(services[state].port) for state in STATES}
            for client in clients.values():
                for index in range(warmup):
                    client.get(f"/order?fail=1&id={index % 100 + 1}")
            timings: dict[str, list[float]] = {state: [] for state in STATES}
            per_round_p99: dict[str, list[float]] = {state: [] for state in STATES}
            unexpected = dict.fromkeys(STATES, 0)
            order = list(STATES)
            for number in range(rounds):
                shift = number % len(order)
                for state in order[shift:] + order[:shift]:
                    batch = []
                    for index in range(per_round):
                        status, elapsed = clients[state].get(f"/order?fail=1&id={index % 100 + 1}")
                        unexpected[state] += status != 500
                        batch.append(elapsed)
                    timings[state].extend(batch)
                    batch.sort()
                    per_round_p99[state].append(batch[int(len(batch) * 0.99) - 1])
            for client in clients.values():
                client.close()
            uploads = {
                state: (services[state].get_json("/bench/stats").get("sinks") or [None])[0]
                for state in STATES
            }
            memory = {
                state: _memory(services[state], memory_requests, every) for state in MEMORY_STATES
            }
        finally:
            for service in services.values():
                service.stop()
            for child in stand_ins.values():
                child.stop()
            upstream.stop()

    figures = {state: summary(values) for state, values in timings.items()}
    healthy = figures["healthy"]
    relative = {
        state: {
            "p50_ratio": round(figures[state]["p50_us"] / healthy["p50_us"], 3),
            "p99_ratio": round(figures[state]["p99_us"] / healthy["p99_us"], 3),
            "paired_p99_ratio": round(
                statistics.median(
                    a / b
                    for a, b in zip(per_round_p99[state], per_round_p99["healthy"], strict=True)
                ),
                3,
            ),
        }
        for state in STATES
        if state != "healthy"
    }
    worst = max(value["p99_ratio"] for value in relative.values())
    document: dict[str, Any] = {
        "benchmark": "outage",
        "quick": quick,
        "command": command_line("outage", quick),
        "machine": machine(),
        "method": {
            "server": "gunicorn, 1 gthread worker, 4 threads, keep-alive; every request fails",
            "rounds": rounds,
            "requests_per_round": per_round,
            "warmup_requests": warmup,
            "memory_requests": memory_requests,
            "uploader": "defaults: flush 3000 ms, request timeout 5000 ms, 2 retries, queue 64",
        },
        "latency": figures,
        "relative_to_healthy": relative,
        "unexpected_statuses": unexpected,
        "uploads": uploads,
        "memory": memory,
        "targets": {
            "p99_within_of_healthy": 0.05,
            "worst_p99_ratio": worst,
            "met": worst <= 1.05,
        },
        "seconds": round(time.monotonic() - started, 1),
    }
    write_json(out, "outage", document)
    _chart(document, chart_path(out, "outage"))
    return document


def _chart(document: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    names = list(document["latency"])
    positions = range(len(names))
    left.bar(
        [x - 0.2 for x in positions],
        [document["latency"][n]["p50_us"] for n in names],
        width=0.4,
        label="p50",
    )
    left.bar(
        [x + 0.2 for x in positions],
        [document["latency"][n]["p99_us"] for n in names],
        width=0.4,
        label="p99",
    )
    left.set_xticks(list(positions), names)
    left.set_ylabel("µs per failing request")
    left.set_title("Latency by ingest state")
    left.legend()
    for state, result in document["memory"].items():
        samples = result["samples"]
        right.plot(
            [s["requests"] for s in samples],
            [s["rss_kib"] / 1024 for s in samples],
            "o-",
            label=f"ingest {state}",
        )
    right.set_xlabel("failing requests served")
    right.set_ylabel("worker RSS (MiB)")
    right.set_title("Memory while uploads cannot be delivered")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    parser.add_argument("--memory-requests", type=int, default=None)
    args = parser.parse_args(argv)
    quick = args.quick
    memory_requests = args.memory_requests or (400 if quick else 20000)
    document = run(
        rounds=2 if quick else 10,
        per_round=20 if quick else 300,
        warmup=10 if quick else 200,
        memory_requests=memory_requests,
        every=100 if quick else 1000,
        out=args.out,
        quick=quick,
    )
    print(f"{'ingest':<10}{'p50 µs':>10}{'p99 µs':>10}")
    for state, figures in document["latency"].items():
        print(f"{state:<10}{figures['p50_us']:>10.1f}{figures['p99_us']:>10.1f}")
    print(f"relative to healthy: {document['relative_to_healthy']}")
    for state, result in document["memory"].items():
        print(
            f"memory, ingest {state}: +{result['growth_after_first_quarter_kib']} KiB "
            f"after the first quarter; uploader {result['uploader']}"
        )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
