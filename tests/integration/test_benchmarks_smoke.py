"""Every benchmark runs in its quick mode and writes its JSON and its chart.

No figure is asserted: timings belong in ``docs/performance.md``, not in tests. What is
checked is that each benchmark completes, that its JSON has the documented shape, and that
its chart is a PNG.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What every benchmark's JSON says of the machine it ran on.
MACHINE_FIELDS = {"nproc", "cpu_model", "python", "implementation", "platform"}

needs_gunicorn = pytest.mark.skipif(
    not Path(sys.executable).with_name("gunicorn").exists() and shutil.which("gunicorn") is None,
    reason="the overhead and outage benchmarks serve with gunicorn (pip install gunicorn)",
)


def _benchmark(
    name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m benchmarks.<name> <args>``; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _run(name: str, out: Path, postgres_dsn: str | None = None) -> dict[str, Any]:
    env = {**os.environ}
    if postgres_dsn is not None:
        env["REPROIT_TEST_PG_DSN"] = postgres_dsn
    _benchmark(name, "--quick", "--out", str(out), env=env, timeout=600)
    assert sorted(path.name for path in out.iterdir()) == [f"{name}.json", f"{name}.png"]
    assert (out / f"{name}.png").read_bytes()[:8] == PNG_SIGNATURE
    document: dict[str, Any] = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    assert (document["benchmark"], document["quick"]) == (name, True)
    assert set(document["machine"]) == MACHINE_FIELDS
    return document


@needs_gunicorn
@pytest.mark.postgres
def test_overhead_quick(tmp_path: Path, postgres_dsn: str) -> None:
    document = _run("overhead", tmp_path, postgres_dsn)
    shapes = ["bare", "bare-again", "otel", "reproit-off", "reproit-on", "reproit-fail"]
    assert list(document["shapes"]) == shapes
    assert all(set(document["shapes"][s]) >= {"p50_us", "p99_us"} for s in shapes)
    assert list(document["cost_over_predecessor"]) == shapes[2:]
    assert document["unexpected_statuses"] == dict.fromkeys(shapes, 0)
    assert document["internal_errors"] == {s: {} for s in shapes}


def test_replay_quick(tmp_path: Path) -> None:
    document = _run("replay", tmp_path)
    assert [row["calls"] for row in document["results"]] == [1, 10, 100]
    for row in document["results"]:
        assert set(row) >= {"reproit", "vcrpy", "live", "requests_floor", "load"}
    assert [row["calls"] for row in document["workload"]] == [1, 10, 100]
    for row in document["workload"]:
        assert set(row) == {
            "calls",
            "repeats",
            "reproit_ms",
            "vcrpy_ms",
            "vcrpy_over_reproit",
            "fastest_reproit_ms",
            "fastest_vcrpy_ms",
            "fastest_vcrpy_over_reproit",
        }
    assert set(document["targets"]) >= {"workload_min_ratio", "workload_met"}


@needs_gunicorn
@pytest.mark.postgres
def test_outage_quick(tmp_path: Path, postgres_dsn: str) -> None:
    document = _run("outage", tmp_path, postgres_dsn)
    states = ["healthy", "down", "hanging", "500"]
    assert list(document["latency"]) == states
    assert document["unexpected_statuses"] == dict.fromkeys(states, 0)
    assert list(document["memory"]) == ["hanging", "down"]
    for result in document["memory"].values():
        assert result["unexpected_statuses"] == 0
        assert [s["requests"] for s in result["samples"]] == list(range(0, 401, 100))


def test_capture_path_smoke() -> None:
    # The in-process benchmark prints a table instead of writing files: check that it runs
    # every shape and reports reproit's cost over OpenTelemetry (no figure is asserted).
    done = _benchmark("capture_path", "--passes", "1", "--requests", "20")
    for shape in ("otel", "reproit-off", "reproit-on"):
        assert any(line.startswith(shape + " ") for line in done.stdout.splitlines()), shape
    assert "reproit-on over otel:" in done.stdout
    assert "reproit-on over otel, thread CPU:" in done.stdout


def test_capture_async_smoke() -> None:
    # The async shape (FastAPI as ASGI, httpx.AsyncClient, psycopg 3 async) prints the same
    # table as capture_path: every shape runs and reproit's cost is reported (no figure).
    done = _benchmark("capture_async", "--passes", "1", "--requests", "20")
    lines = done.stdout.splitlines()
    for shape in ("otel", "reproit-off", "reproit-on"):
        assert any(line.split()[2:3] == [shape] for line in lines), shape
        assert any(line.startswith(shape + " ") for line in lines), shape
    assert "reproit-on over otel:" in done.stdout
    assert "reproit-on over otel, thread CPU:" in done.stdout


def test_capture_path_against_a_baseline_smoke() -> None:
    # This checkout as its own baseline: both trees' children run and each cost is reported,
    # with the paired difference (no figure is asserted).
    done = _benchmark("capture_path", "--baseline", str(ROOT), "--passes", "1", "--requests", "20")
    lines = done.stdout.splitlines()
    for tree in ("this", "baseline"):
        for shape in ("otel", "reproit-on"):
            assert any(line.split()[2:4] == [tree, shape] for line in lines), (tree, shape)
        assert any(line.startswith(f"{tree}: reproit-on over otel, thread CPU:") for line in lines)
    assert any(line.startswith("this minus baseline:") for line in lines)


def test_capture_calls_smoke() -> None:
    # Calls and bytecode instructions per request by module, capture off and on: every hook
    # of the healthy path shows up in both tables, capture on runs more than capture off, and
    # the floor's counts are printed beside them (counts, not timings).
    done = _benchmark("capture_calls", "--requests", "20", "--functions", "5")
    tables: list[dict[str, list[float]]] = []
    for line in done.stdout.splitlines():
        fields = line.split()
        if line.startswith(("calls per request", "bytecode instructions per request")):
            tables.append({})
        elif tables and len(fields) == 3 and fields[0].endswith((".py", "total")):
            tables[-1][fields[0]] = [float(fields[1]), float(fields[2])]
    assert len(tables) == 2, done.stdout
    for rows in tables:
        for module in (
            "capture/processor.py",
            "capture/operation.py",
            "instrumentation/wsgi.py",
            "instrumentation/_pg_record.py",
        ):
            assert module in rows, module
        off, on = rows["total"]
        assert on > off > 0
    floor = [line for line in done.stdout.splitlines() if line.startswith("the floor ")]
    assert len(floor) == 2 and all(float(line.split()[-1]) > 0 for line in floor), floor
    assert "functions running the most calls" in done.stdout
    assert "functions running the most bytecode instructions" in done.stdout


@pytest.mark.postgres
def test_capture_scaling_smoke(postgres_dsn: str) -> None:
    # Every stack runs with both payloads, and the collector's counts are reported for each
    # (no figure is asserted).
    env = {**os.environ, "REPROIT_TEST_PG_DSN": postgres_dsn}
    done = _benchmark("capture_scaling", "--passes", "1", "--requests", "20", env=env)
    rows = {}
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) == 9 and fields[1] in ("small", "large"):
            rows[(fields[0], fields[1])] = fields[2:]
    stacks = ("otel", "reproit-on", "sentry")
    assert sorted(rows) == sorted((s, p) for s in stacks for p in ("small", "large"))
    assert rows[("otel", "small")][2] == rows[("otel", "large")][2] == "+0"
    for stack in ("reproit-on", "sentry"):
        assert f"{stack} over otel, large payload minus small payload, thread CPU:" in done.stdout


@pytest.mark.postgres
def test_capture_failing_smoke(postgres_dsn: str) -> None:
    # Failing against healthy in both stacks, the load with uploads on and off, and the
    # uploader draining its queue all run, and every upload reached the loopback ingest
    # (no figure is asserted).
    env = {**os.environ, "REPROIT_TEST_PG_DSN": postgres_dsn}
    done = _benchmark("capture_failing", "--passes", "1", "--requests", "20", env=env)
    lines = done.stdout.splitlines()
    for shape in ("otel", "reproit-on"):
        assert any(line.startswith(f"{shape} failing minus healthy, thread CPU:") for line in lines)
    assert any(line.startswith("failing over healthy, reproit-otel's part") for line in lines)
    rows = {line.split()[0] for line in lines if line.split()[:1] in (["on"], ["off"])}
    assert rows == {"on", "off"}
    drains = [json.loads(line.split(" drain ", 1)[1]) for line in lines if " drain " in line]
    assert [drain["sent_batches"] for drain in drains] == [64]
    loads = [json.loads(line.split(" off ", 1)[1]) for line in lines if "uploads off " in line]
    assert [load["sent_batches"] for load in loads] == [0]
    assert any(line.startswith("request p99, uploads on minus off:") for line in lines)


@pytest.mark.postgres
def test_capture_paired_quick(tmp_path: Path, postgres_dsn: str) -> None:
    # Paired arms in one process, the interleaved processes and the per-hook pass all run and
    # report every figure, and capture began exactly one operation per request it was
    # switched on for (no figure is asserted).
    env = {**os.environ, "REPROIT_TEST_PG_DSN": postgres_dsn}
    out = tmp_path / "capture_paired.json"
    done = _benchmark("capture_paired", "--quick", "--json", str(out), env=env)
    document: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert (document["benchmark"], document["quick"]) == ("capture_paired", True)
    assert set(document["machine"]) == MACHINE_FIELDS
    estimate = {"mean", "low", "high", "trimmed", "trimmed_low", "trimmed_high", "n"}
    ratio = {"ratio", "low", "high"}
    paired = document["paired"]
    assert paired["operations_begun"] == 2 * paired["pairs"] == 40
    for payload in ("small", "large"):
        for metric in ("cpu", "wall"):
            figures = paired["payloads"][payload][metric]
            assert set(figures) == {
                "request_off_us",
                "reproit",
                "floor",
                "reproit_over_floor",
                "reproit_over_floor_untrimmed",
            }
            assert set(figures["reproit"]) == set(figures["floor"]) == estimate
            assert figures["reproit"]["n"] == figures["floor"]["n"] == 20
            assert set(figures["reproit_over_floor"]) == ratio
            spread = document["interleaved"]["payloads"][payload][metric]
            shapes = ["bare", "otel", "reproit-off", "reproit-on", "floor", "sentry"]
            assert list(spread["request_us"]) == shapes
            for shape in shapes[1:]:
                assert set(spread[shape]) == estimate
                assert spread[shape]["n"] == 3
    interleaved = document["interleaved"]
    assert (interleaved["rounds"], interleaved["generations"]) == (3, 1)
    assert interleaved["interval_over"] == "rounds"
    assert set(paired["large_minus_small_cpu"]) == {"reproit", "floor"}
    parts = paired["breakdown"]["parts"]
    assert list(parts) == [
        "span hooks",
        "exchange hand-over",
        "psycopg2 recorder",
        "WSGI middleware",
        "requests body tap",
        "requests recorder",
        "other reproit-otel code",
    ]
    for name in ("span hooks", "exchange hand-over", "psycopg2 recorder", "WSGI middleware"):
        # every hook of the healthy path does more with capture on
        assert parts[name]["calls_on"] > parts[name]["calls_off"], name
    assert parts["requests recorder"]["calls_on"] > parts["requests recorder"]["calls_off"]
    lines = done.stdout.splitlines()
    assert sum(line.strip().startswith("reproit-on costs ") for line in lines) == 4
    assert sum(line.strip().startswith("the floor costs ") for line in lines) == 4
    assert sum(line.strip().startswith("ratio reproit/floor ") for line in lines) == 4
    for payload in ("small", "large"):
        assert any(
            line.strip().startswith(f"{payload}: capture not configured over otel ")
            for line in lines
        )


def test_startup_smoke() -> None:
    # Fresh processes per shape, this checkout as its own baseline: every shape reports its
    # figures and no optional library was imported by install() (no figure is asserted).
    done = _benchmark("startup", "--quick", "--baseline", str(ROOT))
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[1:4]}
    assert sorted(rows) == ["baseline", "otel", "reproit"]
    assert [row[-1] for row in rows.values()] == ["-", "-", "-"]
    assert [line.split(":")[0] for line in done.stdout.splitlines()[4:]] == [
        "reproit over otel",
        "baseline over otel",
    ]
