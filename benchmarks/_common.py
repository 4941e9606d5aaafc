"""What every benchmark shares: processes on loopback, a keep-alive client, figures, output.

* :func:`machine` describes the host (CPU count and model, Python, platform) for the report;
* :class:`Child` runs a helper subprocess that prints ``listening <port>`` when ready;
* :class:`Service` runs ``benchmarks/_service.py`` under gunicorn (one ``gthread`` worker,
  keep-alive) in one of the shapes ``_service.py`` knows (its log is discarded unless
  ``BENCH_VERBOSE=1``);
* :class:`KeepAliveClient` sends requests over one persistent HTTP/1.1 connection and times
  each from the first byte written to the last byte read;
* :func:`postgres` yields a DSN: ``REPROIT_TEST_PG_DSN`` or a throwaway cluster;
  :func:`in_process_environment` yields the environment of an in-process benchmark child
  (upstream and PostgreSQL running);
* :func:`percentile`, :func:`summary` turn timings into figures; :func:`write_json` and
  :func:`write_chart` save them under the output directory.

Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PYTHON = sys.executable


def machine() -> dict[str, Any]:
    """The facts a reader needs to compare figures with their own machine."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "nproc": usable,
        "cpu_model": model,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_http(port: int, path: str, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"the process on port {port} exited with {process.returncode} "
                "(rerun with BENCH_VERBOSE=1 to see its log)"
            )
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", path)
            connection.getresponse().read()
            connection.close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answered on 127.0.0.1:{port}{path} within {timeout:g} s")


class Child:
    """``python -m <module> <args>`` that prints ``listening <port>`` once it serves."""

    def __init__(self, module: str, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [PYTHON, "-m", module, *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if len(line) != 2 or line[0] != "listening":
            self.stop()
            raise RuntimeError(f"{module} did not start (said {line!r})")
        self.port = int(line[1])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def clean_environment() -> dict[str, str]:
    """This process's environment without any ``REPROIT_*`` or ``OTEL_*`` setting, and with
    internal guards in production mode (they swallow, as they would for a user)."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("REPROIT_", "OTEL_"))
    }
    return {**kept, "REPROIT_STRICT_INTERNAL": "0"}


def gunicorn() -> str:
    """The gunicorn launcher of this environment (the benchmarks' WSGI server)."""
    local = Path(PYTHON).with_name("gunicorn")
    found = str(local) if local.exists() else shutil.which("gunicorn")
    if found is None:
        raise SystemExit("gunicorn is not installed: pip install gunicorn")
    return found


class Service:
    """The benchmark Flask service in ``shape``, under gunicorn on a loopback port."""

    def __init__(self, shape: str, env: Mapping[str, str], *, threads: int = 4) -> None:
        self.shape = shape
        self.port = free_port()
        self.process: subprocess.Popen[bytes] = subprocess.Popen(
            [
                gunicorn(),
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                "1",
                "--worker-class",
                "gthread",
                "--threads",
                str(threads),
                "--keep-alive",
                "120",
                "--graceful-timeout",
                "5",
                "--log-level",
                "warning",
                "benchmarks._service:app",
            ],
            cwd=ROOT,
            env={**clean_environment(), **env, "BENCH_SHAPE": shape},
            stdout=subprocess.DEVNULL,
            # The service logs every undeliverable upload; BENCH_VERBOSE=1 shows its log.
            stderr=None if os.environ.get("BENCH_VERBOSE") == "1" else subprocess.DEVNULL,
        )
        _wait_http(self.port, "/health", 60, self.process)

    def get_json(self, path: str) -> Any:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", path)
            return json.loads(connection.getresponse().read())
        finally:
            connection.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class KeepAliveClient:
    """One persistent HTTP/1.1 connection; :meth:`get` returns (status, µs)."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def get(self, path: str) -> tuple[int, float]:
        started = time.perf_counter_ns()
        self.connection.request("GET", path)
        response = self.connection.getresponse()
        response.read()
        elapsed = (time.perf_counter_ns() - started) / 1000
        if response.will_close:  # the server dropped keep-alive: reconnect for the next one
            self.connection.close()
        return response.status, elapsed

    def close(self) -> None:
        self.connection.close()


@contextmanager
def postgres() -> Iterator[str]:
    """A PostgreSQL DSN: ``REPROIT_TEST_PG_DSN`` if set, else a throwaway cluster."""
    dsn = os.environ.get("REPROIT_TEST_PG_DSN")
    if dsn:
        yield dsn
        return
    from tests.pgserver import ThrowawayPostgres

    server = ThrowawayPostgres()
    server.start()
    try:
        yield server.dsn
    finally:
        server.stop()


@contextmanager
def in_process_environment() -> Iterator[dict[str, str]]:
    """The environment of a child that runs the benchmark service in process: a loopback
    upstream and PostgreSQL (with its table) for the time of the ``with`` block."""
    upstream = Child("benchmarks._upstream")
    try:
        with postgres() as dsn:
            prepare_table(dsn)
            yield {
                **clean_environment(),
                "BENCH_UPSTREAM": f"http://127.0.0.1:{upstream.port}",
                "BENCH_PG_DSN": dsn,
            }
    finally:
        upstream.stop()


def prepare_table(dsn: str) -> None:
    """The one table the service queries (recreated, 100 rows)."""
    import psycopg2

    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_items")
            cursor.execute("CREATE TABLE bench_items (id int PRIMARY KEY, name text, price float8)")
            cursor.execute(
                "INSERT INTO bench_items SELECT g, 'item ' || g, g * 1.5 "
                "FROM generate_series(1, 100) AS g"
            )
    finally:
        connection.close()


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return float(sorted_values[index])


def summary(values: Sequence[float]) -> dict[str, float]:
    """count, p50, p90, p99, mean and max of ``values`` (µs), rounded to 0.1."""
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50_us": round(percentile(ordered, 0.50), 1),
        "p90_us": round(percentile(ordered, 0.90), 1),
        "p99_us": round(percentile(ordered, 0.99), 1),
        "mean_us": round(sum(ordered) / len(ordered), 1) if ordered else float("nan"),
        "max_us": round(ordered[-1], 1) if ordered else float("nan"),
    }


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def write_json(out: Path, name: str, document: Mapping[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def pyplot() -> Any:
    """matplotlib's pyplot with the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_path(out: Path, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return out / f"{name}.png"


def command_line(script: str, quick: bool) -> str:
    return f".venv/bin/python -m benchmarks.{script}" + (" --quick" if quick else "")


def dropping_provider() -> Any:
    """A global OpenTelemetry ``TracerProvider`` whose batches go to an exporter that receives
    them like a real one and sends them nowhere (the benchmarks' OpenTelemetry shape)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class DropExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    trace.set_tracer_provider(provider)
    return provider
