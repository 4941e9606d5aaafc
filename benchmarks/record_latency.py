"""How long ``Uploader.record`` takes on the request path, per state of the ingest.

Run: ``python -m benchmarks.record_latency`` from the repository root. For each state
(healthy, down, hanging, answering 500, answering 429) it records the same failing operation
many times while the uploader thread is busy sending (and retrying) in the background, and
prints the median and 99th percentile of the time ``record`` took. The numbers should not
depend on the state: nothing on the request path waits for the network.
"""

from __future__ import annotations

import statistics
import time

from reproit_otel.capture.uploader import Uploader, UploaderSettings
from reproit_otel.wire.batch import CaptureSettings
from tests.integration.capture_helpers import failing_trace
from tests.integration.loopback_ingest import HANG, LoopbackIngest, down_url

RECORDS = 2000


def measure(endpoint: str) -> tuple[float, float]:
    uploader = Uploader(
        UploaderSettings(
            endpoint=endpoint,
            api_key="k",
            capture=CaptureSettings("bench"),
            flush_interval_ms=100,
            request_timeout_ms=1000,
            retry_limit=5,
            exit_flush_timeout_s=0.1,
        )
    )
    trace = failing_trace()
    timings = []
    for _ in range(RECORDS):
        started = time.perf_counter_ns()
        uploader.record(trace)
        timings.append((time.perf_counter_ns() - started) / 1000)
    uploader.close(timeout=0.1)
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.99)]


def main() -> None:
    states: list[tuple[str, LoopbackIngest | None]] = [
        ("healthy", LoopbackIngest()),
        ("down", None),
        ("hanging", LoopbackIngest(default=HANG)),
        ("500", LoopbackIngest(default=500)),
        ("429", LoopbackIngest(default=429)),
    ]
    print(f"{'ingest':<10}{'median µs':>12}{'p99 µs':>12}")
    for name, server in states:
        endpoint = server.url if server is not None else down_url()
        median, p99 = measure(endpoint)
        print(f"{name:<10}{median:>12.1f}{p99:>12.1f}")
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
