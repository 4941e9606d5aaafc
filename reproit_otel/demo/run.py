"""``reproit-otel demo``: a production failure captured, then reproduced with everything stopped.

Run from a clone of the repository (``scripts/demo`` sets up ``.venv`` and runs it). The demo
starts, each as a child process on a loopback port:

1. a throwaway PostgreSQL (``initdb`` in a temporary folder, see :mod:`.support`);
2. the local ingest, ``reproit-otel serve`` on SQLite in the work folder;
3. the shop's upstream services (``examples/shop/upstreams.py all``: pricing, the assistant's
   event stream, the tax line protocol);
4. the shop (``examples/shop/app.py``, the FastAPI one with ``--app fastapi``, or the async
   one, httpx and SQLAlchemy asyncio over psycopg 3, with ``--app fastapi-async``) under
   ``opentelemetry-instrument`` with ``OTEL_TRACES_EXPORTER=otlp,reproit``: its spans go to
   the ingest's OTLP receiver, its failures to the ingest's capture endpoint.

It then sends a few orders, one of them the planted bug (a gift card: HTTP 500), waits for
the occurrence to reach the ingest and shows it, stops every dependency (the shop, the
upstreams, PostgreSQL), pulls the capsule, stops the ingest, and replays the capsule with
``reproit-otel check CAPSULE --exec "opentelemetry-instrument python examples/shop/app.py"``
while nothing but the shop runs: the verdict is *reproduced*. Last, it fixes the planted bug
in a copy of the shop (one line, in the work folder) and replays the same capsule against the
copy: the verdict is *fixed*. Every child runs in its own process group and is stopped on
the way out, also on Ctrl-C or SIGTERM. The work folder (default: a new temporary folder) is
kept: the capsule, the checks' JSON verdicts (``verdict.json``, ``verdict-fixed.json``), the
fixed copy, the ingest database and each child's log (``logs/``). Every process the demo
starts carries ``REPROIT_DEMO_RUN=<work folder>`` in its environment.

Exit codes: 0 when the replay reproduced the failure and the fixed copy replayed as fixed, 1
when a verdict was anything else,
2 when a stage could not run (PostgreSQL missing, a child that did not start), 130 when
interrupted.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from reproit_otel.demo.support import (
    DemoError,
    Progress,
    Step,
    Supervisor,
    ThrowawayPostgres,
    free_port,
    wait_for_line,
)

__all__ = ["APPS", "DEMO_API_KEY", "DemoOptions", "find_examples", "run_demo"]

DEMO_API_KEY = "demo-key"
APP_ID = "shop"
APPS = {
    "flask": "shop/app.py",
    "fastapi": "shop_fastapi/app.py",
    "fastapi-async": "fastapi_async/app.py",
}
"""``--app`` choices: the shop's entry script under ``examples/``."""
FAILING_ORDER = {"sku": "gift-card", "quantity": 1, "country": "DE"}
TRAFFIC: tuple[tuple[str, str, dict[str, Any] | None], ...] = (
    ("POST", "/orders", {"sku": "mug", "quantity": 2, "country": "DE"}),
    ("POST", "/orders", {"sku": "tea", "quantity": 3, "country": "FR"}),
    ("GET", "/orders/1", None),
    ("POST", "/orders", {"sku": "mug", "quantity": 1, "country": "XX"}),
    ("POST", "/orders", FAILING_ORDER),
)
"""What the demo sends, in order; the last order is the planted bug."""
STAGES = 10
CHECK_TIMEOUT_S = 180.0
BUG_LINE = 'return f"-{discount_percent:d}%" if discount_percent != 0 else ""'
"""The planted bug, as it reads in both shops."""
FIXED_LINE = 'return f"-{discount_percent:d}%" if discount_percent else ""'
RUN_MARKER = "REPROIT_DEMO_RUN"
"""Set to the work folder in the environment of every process the demo starts."""
OCCURRENCE_TIMEOUT_S = 60.0
BOOT_TIMEOUT_S = 60.0

# Settings a caller's shell may hold that must not leak into the demo's children.
_SCRUBBED = ("REPROIT_REPLAY", "REPROIT_DISABLED", "REPROIT_CI_CAPTURE", "PORT")


class Interrupted(Exception):
    """SIGTERM or SIGHUP reached the demo (SIGINT arrives as KeyboardInterrupt)."""


@dataclass
class DemoOptions:
    """What ``reproit-otel demo`` was asked for."""

    workdir: Path | None = None
    app: str = "flask"
    examples: Path | None = None


@dataclass
class _Run:
    options: DemoOptions
    progress: Progress
    workdir: Path
    examples: Path
    env: dict[str, str]
    supervisor: Supervisor
    postgres: ThrowawayPostgres | None = None
    ingest_url: str = ""
    upstreams: dict[str, str] = field(default_factory=dict)
    shop_port: int = 0
    occurrence: dict[str, Any] = field(default_factory=dict)
    capsule: Path | None = None


def find_examples(explicit: Path | None = None) -> Path:
    """The ``examples`` folder: ``explicit``, else the one of this source checkout."""
    if explicit is not None:
        candidates = [explicit]
    else:
        candidates = [Path.cwd() / "examples", Path(__file__).resolve().parents[2] / "examples"]
    for candidate in candidates:
        if (candidate / "shop" / "app.py").is_file():
            return candidate.resolve()
    raise DemoError(
        "the demo runs the example shop from a clone of the reproit-otel repository, and "
        "examples/shop/app.py was not found; run it from the clone (scripts/demo) or pass "
        "--examples PATH"
    )


def _launcher() -> str:
    beside = Path(sys.executable).with_name("opentelemetry-instrument")
    if beside.exists():
        return str(beside)
    raise DemoError(
        f"opentelemetry-instrument was not found next to {sys.executable}; install it with "
        "`pip install opentelemetry-distro opentelemetry-exporter-otlp-proto-http` and "
        "`opentelemetry-bootstrap -a install`"
    )


def _check_entry_points() -> None:
    from importlib.metadata import entry_points

    names = {entry.name for entry in entry_points(group="opentelemetry_traces_exporter")}
    if "reproit" not in names:
        raise DemoError(
            "the `reproit` OpenTelemetry exporter entry point is not installed, so "
            "opentelemetry-instrument cannot switch reproit-otel on; reinstall the package "
            "(scripts/bootstrap, or pip install -e .)"
        )


def _http(
    port: int, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        payload = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"content-type": "application/json"} if payload is not None else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _ingest_get(run: _Run, path: str) -> Any:
    from reproit_otel.cli.occurrences import IngestClient

    return IngestClient(run.ingest_url, DEMO_API_KEY).get_json(path)


# --- stages -------------------------------------------------------------------------------


def _start_postgres(run: _Run) -> None:
    with run.progress.step("Start a throwaway PostgreSQL") as step:
        run.postgres = ThrowawayPostgres(run.env)
        run.postgres.start()
        step.done(f"{run.postgres.dsn} (data in {run.postgres.root})")


def _start_ingest(run: _Run) -> None:
    with run.progress.step("Start the local ingest (reproit-otel serve, SQLite)") as step:
        database = run.workdir / "ingest.db"
        argv = [sys.executable, "-m", "reproit_otel", "serve", "--port", "0"]
        argv += ["--db", f"sqlite:///{database}", "--api-key", DEMO_API_KEY]
        process = run.supervisor.start("ingest", argv)
        prefix = "reproit-otel serve: listening on "
        [line] = wait_for_line(run.supervisor.log_path("ingest"), prefix, process=process)
        run.ingest_url = line[len(prefix) :].strip()
        step.done(f"{run.ingest_url}, database {database}")


def _start_upstreams(run: _Run) -> None:
    with run.progress.step("Start the upstreams: pricing, assistant (SSE), tax (TCP)") as step:
        script = run.examples / "shop" / "upstreams.py"
        process = run.supervisor.start(
            "upstreams", [sys.executable, "-u", str(script), "all", "--port", "0"]
        )
        lines = wait_for_line(run.supervisor.log_path("upstreams"), "", process=process, count=3)
        for line in lines:
            name, _, address = line.partition(" listening on ")
            run.upstreams[name] = address.strip()
        step.done(", ".join(f"{name} {address}" for name, address in run.upstreams.items()))


def _app_env(run: _Run) -> dict[str, str]:
    assert run.postgres is not None
    return {
        "SHOP_DATABASE_URL": run.postgres.dsn,
        "PRICING_URL": run.upstreams["pricing"],
        "ASSISTANT_URL": run.upstreams["assistant"],
        "TAX_ADDRESS": run.upstreams["tax"],
    }


def _start_shop(run: _Run) -> None:
    title = f"Start the shop ({run.options.app}) under opentelemetry-instrument"
    with run.progress.step(title) as step:
        app = run.examples / APPS[run.options.app]
        initialised = subprocess.run(
            [sys.executable, str(app), "--init-db"],
            env={**run.env, **_app_env(run)},
            capture_output=True,
            timeout=60,
            check=False,
        )
        if initialised.returncode != 0:
            raise DemoError(
                "the shop could not create its tables:\n"
                + initialised.stderr.decode("utf-8", "replace")[-2000:]
            )
        run.shop_port = free_port()
        capture_env = {
            **_app_env(run),
            "PORT": str(run.shop_port),
            "OTEL_SERVICE_NAME": APP_ID,
            "OTEL_TRACES_EXPORTER": "otlp,reproit",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{run.ingest_url}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"authorization=Bearer {DEMO_API_KEY}",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "REPROIT_ENDPOINT": f"{run.ingest_url}/v1/capture-batches",
            "REPROIT_API_KEY": DEMO_API_KEY,
            "REPROIT_APP_ID": APP_ID,
            "REPROIT_BUILD": "demo",
            "REPROIT_FLUSH_INTERVAL_MS": "200",
        }
        process = run.supervisor.start(
            "shop", [_launcher(), sys.executable, "-u", str(app)], env=capture_env
        )
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError, http.client.HTTPException):
                if _http(run.shop_port, "GET", "/")[0] == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                log = run.supervisor.log_path("shop")
                tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
                raise DemoError(f"the shop did not start; the end of {log}:\n{tail}")
            time.sleep(0.1)
        step.note("environment: OTEL_TRACES_EXPORTER=otlp,reproit REPROIT_ENDPOINT=... ")
        step.note("             REPROIT_API_KEY=... REPROIT_APP_ID=shop (no code change)")
        step.done(f"http://127.0.0.1:{run.shop_port}")


def _send_traffic(run: _Run) -> None:
    with run.progress.step("Send traffic, including the failing order") as step:
        for method, path, body in TRAFFIC:
            status, answer = _http(run.shop_port, method, path, body)
            shown = f" {json.dumps(body)}" if body is not None else ""
            summary = answer.decode("utf-8", "replace").strip().replace("\n", " ")
            if len(summary) > 70:
                summary = summary[:67] + "..."
            step.note(f"{method} {path}{shown} -> {status} {summary}")
            if body == FAILING_ORDER and status != 500:
                raise DemoError(f"the failing order answered {status}, not 500")
        step.done("the gift card order failed with HTTP 500, as planted")


def _wait_for_occurrence(run: _Run) -> None:
    with run.progress.step("Wait for the failure to reach the ingest") as step:
        deadline = time.monotonic() + OCCURRENCE_TIMEOUT_S
        while True:
            page = _ingest_get(run, "/v1/occurrences?status=500")
            found = [row for row in page.get("occurrences", []) if row.get("capsuleAvailable")]
            if found:
                break
            if time.monotonic() > deadline:
                raise DemoError(
                    "no capture reached the ingest within "
                    f"{OCCURRENCE_TIMEOUT_S:g} s; see {run.supervisor.log_path('shop')}"
                )
            time.sleep(0.2)
        run.occurrence = _ingest_get(run, f"/v1/occurrences/{found[0]['id']}")
        for key in ("id", "operation", "status", "summary", "count", "batches", "traces"):
            step.note(f"{key:<10} {run.occurrence.get(key)}")
        step.done(f"occurrence {run.occurrence['id']}")


def _answers(address: str) -> bool:
    host, _, port = address.removeprefix("http://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def _stop_dependencies(run: _Run) -> None:
    with run.progress.step("Stop the shop and every dependency") as step:
        for name in ("shop", "upstreams"):
            run.supervisor.stop(name)
        assert run.postgres is not None
        run.postgres.stop()
        addresses = {**run.upstreams, "postgres": f"127.0.0.1:{run.postgres.port}"}
        still = [name for name, address in addresses.items() if _answers(address)]
        if still:
            raise DemoError(f"still answering after being stopped: {', '.join(still)}")
        step.done("nothing answers on " + ", ".join(addresses.values()))


def _pull_capsule(run: _Run) -> None:
    with run.progress.step("Pull the capsule, stop the ingest") as step:
        from reproit_otel.cli.occurrences import IngestClient

        client = IngestClient(run.ingest_url, DEMO_API_KEY)
        body = client.get(f"/v1/occurrences/{run.occurrence['id']}/capsule")
        run.capsule = run.workdir / "capsule.json"
        run.capsule.write_bytes(body)
        run.supervisor.stop("ingest")
        capsule = json.loads(body)
        for event in capsule.get("events", []):
            if event.get("kind") == "effect" and isinstance(event.get("exchange"), dict):
                step.note(_describe_exchange(event["exchange"]))
        step.note(f"reproit-otel pull {run.occurrence['id']} -o {run.capsule}")
        step.done(f"{run.capsule} ({len(body)} bytes)")


def _describe_exchange(exchange: dict[str, Any]) -> str:
    request = exchange.get("request") or {}
    response = exchange.get("response") or {}
    protocol = exchange.get("protocol")
    if protocol == "http":
        stream = response.get("stream")
        chunks = f", {len(stream.get('chunks', []))} chunks" if isinstance(stream, dict) else ""
        target = f"{request.get('method')} {request.get('url')}"
        return f"http    {target} -> {response.get('status')}{chunks}"
    if protocol == "pg":
        text = " ".join(str(request.get("text", "")).split())
        return f"pg      {text[:60]}{'...' if len(text) > 60 else ''}"
    if protocol == "invoke":
        outcome = "ok" if response.get("ok") else "error"
        called = f"{request.get('tool')}.{request.get('op')}({json.dumps(request.get('input'))})"
        return f"invoke  {called} -> {outcome}"
    return f"{protocol}"


def _check(run: _Run, name: str, app: Path) -> dict[str, Any]:
    """Run ``reproit-otel check --json`` on the capsule with ``app`` as the boot command."""
    assert run.capsule is not None
    command = f"{shlex.quote(_launcher())} {shlex.quote(sys.executable)} {shlex.quote(str(app))}"
    # The replayed shop exports no telemetry: nothing may call out while it replays.
    replay_env = {
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    output = run.workdir / f"{name}.json"
    argv = [sys.executable, "-m", "reproit_otel", "check", str(run.capsule), "--exec", command]
    process = run.supervisor.start(
        name,
        [*argv, "--json"],
        env=replay_env,
        cwd=run.examples.parent,
        stdout=output,
        stop_signal=signal.SIGINT,  # check stops the application it booted on SIGINT
    )
    try:
        process.wait(CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DemoError(f"reproit-otel check did not finish within {CHECK_TIMEOUT_S:g} s") from None
    finally:
        run.supervisor.stop(name)
    try:
        result: dict[str, Any] = json.loads(output.read_bytes())
    except ValueError:
        log = run.supervisor.log_path(name)
        raise DemoError(
            f"reproit-otel check gave no verdict (exit {process.returncode}); see {log}"
        ) from None
    return result


def _show_verdict(step: Step, result: dict[str, Any]) -> str:
    verdict = str(result.get("verdict"))
    for divergence in result.get("divergences") or []:
        step.note(f"divergence: {json.dumps(divergence)[:200]}")
    step.done(f"{verdict.upper()}: {result.get('reason')}")
    return verdict


def _replay(run: _Run) -> str:
    shown_app = Path(run.examples.name) / APPS[run.options.app]
    with run.progress.step("Replay with reproit-otel check, every dependency stopped") as step:
        step.note("OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none")
        step.note(
            f'reproit-otel check {run.capsule} --exec "opentelemetry-instrument python {shown_app}"'
        )
        result = _check(run, "verdict", run.examples / APPS[run.options.app])
        return _show_verdict(step, result)


def _replay_fixed(run: _Run) -> str:
    source = run.examples / APPS[run.options.app]
    with run.progress.step("Fix the bug (one line) and replay again") as step:
        text = source.read_text(encoding="utf-8")
        if BUG_LINE not in text:
            raise DemoError(f"{source} no longer holds the planted bug ({BUG_LINE.strip()!r})")
        fixed = run.workdir / "fixed" / source.name
        fixed.parent.mkdir(exist_ok=True)
        fixed.write_text(text.replace(BUG_LINE, FIXED_LINE), encoding="utf-8")
        step.note(f"- {BUG_LINE.strip()}")
        step.note(f"+ {FIXED_LINE.strip()}")
        result = _check(run, "verdict-fixed", fixed)
        return _show_verdict(step, result)


def _summary(run: _Run, reproduced: str, fixed: str) -> int:
    progress = run.progress
    progress.say()
    progress.say(
        f"Verdict: {reproduced.upper()} with the shop as it is, {fixed.upper()} with the fix."
    )
    progress.say(f"Files left in {run.workdir}:")
    for path in sorted(run.workdir.rglob("*")):
        if path.is_file():
            progress.say(f"  {path}")
    return 0 if (reproduced, fixed) == ("reproduced", "fixed") else 1


# --- the whole run ------------------------------------------------------------------------


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig in previous:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in handled}
    for sig in handled:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_demo(options: DemoOptions, progress: Progress | None = None) -> int:
    """Run every stage; returns the exit code (see the module docstring)."""
    progress = progress or Progress(STAGES)
    try:
        examples = find_examples(options.examples)
        _check_entry_points()
    except DemoError as error:
        print(f"reproit-otel demo: {error}", file=sys.stderr)
        return 2
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="reproit-demo-"))
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in _SCRUBBED}
    env = {k: v for k, v in env.items() if not k.startswith(("OTEL_", "REPROIT_ENDPOINT"))}
    env[RUN_MARKER] = str(workdir)  # marks every process of this run (tests look for it)
    run = _Run(
        options=options,
        progress=progress,
        workdir=workdir,
        examples=examples,
        env=env,
        supervisor=Supervisor(workdir / "logs", env),
    )
    progress.say(f"reproit-otel demo: work folder {workdir}")
    code = 2
    try:
        with _signals_raise():
            _start_postgres(run)
            _start_ingest(run)
            _start_upstreams(run)
            _start_shop(run)
            _send_traffic(run)
            _wait_for_occurrence(run)
            _stop_dependencies(run)
            _pull_capsule(run)
            reproduced = _replay(run)
            fixed = _replay_fixed(run)
            code = _summary(run, reproduced, fixed)
    except DemoError as error:
        print(f"reproit-otel demo: {error}", file=sys.stderr)
        code = 2
    except (KeyboardInterrupt, Interrupted):
        print("\nreproit-otel demo: interrupted; stopping everything it started", file=sys.stderr)
        code = 130
    finally:
        with _signals_ignored():
            run.supervisor.stop_all()
            if run.postgres is not None:
                run.postgres.stop(fast=False)
                run.postgres.remove()
    return code
