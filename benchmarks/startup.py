"""What ``reproit_otel.install()`` costs at start-up: ``python -m benchmarks.startup``.

Each sample is a fresh interpreter (``python -c``) that imports the OpenTelemetry SDK, sets a
``TracerProvider`` and, for the ``reproit`` shape, imports ``reproit_otel`` and calls
``install()`` with capture configured (an endpoint on a closed loopback port: nothing is
sent). The child times that with ``time.perf_counter`` and reports its CPU time, how many
modules ``sys.modules`` holds afterwards and which optional frameworks and credential
libraries (Django, Flask, Starlette, PyJWT, python-jose, Flask-Login, itsdangerous) were
imported by then. Shapes alternate, so the machine's drift spreads over all of them.

``--baseline DIR`` adds the shape ``baseline``: the same as ``reproit`` with the
``reproit_otel`` package of another checkout (run in ``DIR``, so its package is the one
imported; say ``git archive <commit> reproit_otel | tar -x -C DIR``), with this virtualenv.

Prints the median and the smallest wall and CPU milliseconds per shape and the module counts.
Prints only; writes nothing. ``--quick`` takes two samples per shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from benchmarks._common import PYTHON, ROOT, clean_environment

OPTIONAL = ("django", "flask", "starlette", "jwt", "jose", "flask_login", "itsdangerous")

CHILD = """
import json, sys, time
started, cpu = time.perf_counter(), time.process_time()
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
if sys.argv[1] != "otel":
    import reproit_otel
    assert reproit_otel.install() is not None
wall, cpu = time.perf_counter() - started, time.process_time() - cpu
optional = [name for name in json.loads(sys.argv[2]) if name in sys.modules]
print(json.dumps({"ms": wall * 1e3, "cpu_ms": cpu * 1e3, "modules": len(sys.modules),
                  "optional": optional}))
"""


def _sample(shape: str, env: dict[str, str], baseline: Path | None) -> dict[str, Any]:
    # `python -c` puts the working directory first on sys.path: its reproit_otel is imported.
    output = subprocess.run(
        [PYTHON, "-c", CHILD, shape, json.dumps(OPTIONAL)],
        cwd=baseline if shape == "baseline" and baseline is not None else ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    document: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return document


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--samples", type=int, default=15, help="fresh processes per shape")
    parser.add_argument("--quick", action="store_true", help="two samples per shape")
    parser.add_argument("--baseline", metavar="DIR", help="a checkout whose package to compare")
    args = parser.parse_args(argv)
    baseline = Path(args.baseline).resolve() if args.baseline else None
    if baseline is not None and not (baseline / "reproit_otel" / "__init__.py").exists():
        raise SystemExit(f"{baseline}: no reproit_otel package there")
    shapes = ["otel", "reproit", *(["baseline"] if baseline is not None else [])]
    samples = 2 if args.quick else args.samples
    env = {
        **clean_environment(),
        "REPROIT_ENDPOINT": "http://127.0.0.1:9/v1/capture-batches",
        "REPROIT_API_KEY": "benchmark",
        "REPROIT_APP_ID": "startup",
    }
    env.pop("PYTHONPATH", None)
    results: dict[str, list[dict[str, Any]]] = {shape: [] for shape in shapes}
    for _ in range(samples):
        for shape in shapes:
            results[shape].append(_sample(shape, env, baseline))
    print(f"{'shape':<10} {'median ms':>9} {'min ms':>7} {'cpu med':>7} {'modules':>7}  optional")
    for shape, documents in results.items():
        wall = [d["ms"] for d in documents]
        cpu = [d["cpu_ms"] for d in documents]
        modules = statistics.median(d["modules"] for d in documents)
        optional = ",".join(documents[-1]["optional"]) or "-"
        print(
            f"{shape:<10} {statistics.median(wall):>9.1f} {min(wall):>7.1f} "
            f"{statistics.median(cpu):>7.1f} {modules:>7.0f}  {optional}"
        )
    otel = statistics.median(d["ms"] for d in results["otel"])
    for shape in shapes[1:]:
        cost = statistics.median(d["ms"] for d in results[shape]) - otel
        print(f"{shape} over otel: {cost:+.1f} ms")


if __name__ == "__main__":
    main()
