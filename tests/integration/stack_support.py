"""Real application stacks captured under ``opentelemetry-instrument`` and replayed by the CLI.

A :class:`Stack` is an unmodified application (``tests/integration/apps/``) with the command
that serves it on a port. :func:`run_stack` does what a user's production and laptop do:

1. a real PostgreSQL, a real rates upstream and a real ``reproit-otel serve``;
2. the application under the real ``opentelemetry-instrument`` launcher, uploading failures
   to the ingest, once *cold* (the failing request is the first one after boot) and once
   *warm* (several healthy requests first, so pools and connections are in use);
3. everything stopped: the application, the upstream and PostgreSQL;

and :meth:`StackRun.check` then runs ``reproit-otel check <occurrence> --exec <boot>`` (the
real CLI, pulling the capsule from the ingest) against the stopped world.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.upstream import Upstream
from tests.pgserver import ThrowawayPostgres

LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")
KEY = "stack-key"
CHECK_TIMEOUT_S = 180
HEALTHY_REQUESTS = 4
BOOT_TIMEOUT_S = 60


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without OTEL_*/REPROIT_* settings, plus ``extra``."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "REPROIT_")) or key == "REPROIT_STRICT_INTERNAL"
    }
    environ.update(extra)
    return environ


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Request:
    """One HTTP request to the application."""

    method: str
    path: str
    body: bytes | None = None
    content_type: str | None = None

    def send(self, port: int) -> httpx.Response:
        headers = {"content-type": self.content_type} if self.content_type else {}
        return httpx.request(
            self.method,
            f"http://127.0.0.1:{port}{self.path}",
            content=self.body,
            headers=headers,
            timeout=30,
        )


@dataclass(frozen=True)
class Stack:
    """An application and how to serve it.

    ``serve`` is the command line (``{port}`` is replaced) that serves the application, run
    under ``opentelemetry-instrument`` in ``cwd``; the same line with ``$PORT`` is the boot
    command given to ``reproit-otel check``. ``prepare`` runs once against the live database
    (migrations, tables); ``healthy`` is a request that answers 2xx; ``failing`` gives the
    failing request of a capture (``failing(identifier, kind)``: each capture fails on its own
    path; ``kind`` is ``"cold"`` or ``"warm"``).
    """

    name: str
    cwd: Path
    serve: tuple[str, ...]
    healthy: Request
    failing: Callable[[str, str], Request]
    prepare: Callable[[Mapping[str, str]], None] = field(default=lambda env: None)
    env: Mapping[str, str] = field(default_factory=dict)

    def boot_command(self) -> str:
        parts = [str(LAUNCHER), *(part.replace("{port}", "$PORT") for part in self.serve)]
        return " ".join(part if "$PORT" in part else shlex.quote(part) for part in parts)


@dataclass
class Capture:
    """One captured failure: its occurrence, capsule and the live answer."""

    occurrence: str
    capsule: dict[str, Any]
    request: Request
    status: int
    body: bytes


@dataclass
class StackRun:
    stack: Stack
    ingest: ServedIngest
    workdir: Path
    base_env: dict[str, str]
    captures: dict[str, Capture]

    def check(self, kind: str, **flags: str) -> tuple[int, dict[str, Any]]:
        """``reproit-otel check`` of capture ``kind`` ("cold"/"warm") with ``flags`` set."""
        done = subprocess.run(
            [
                *cli_command(
                    "check",
                    self.captures[kind].occurrence,
                    "--exec",
                    f"cd {shlex.quote(str(self.stack.cwd))} && {self.stack.boot_command()}",
                    "--json",
                    "--ingest",
                    self.ingest.base_url,
                    "--api-key",
                    KEY,
                    "--boot-timeout",
                    str(BOOT_TIMEOUT_S),
                )
            ],
            cwd=self.workdir,
            env=clean_environ(
                **{
                    **self.base_env,
                    "OTEL_TRACES_EXPORTER": "none",
                    "OTEL_METRICS_EXPORTER": "none",
                    "OTEL_LOGS_EXPORTER": "none",
                    **flags,  # may override a setting of the capture (or empty it)
                }
            ),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
        try:
            result: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            message = f"check gave no JSON (exit {done.returncode}):\n{done.stderr}"
            raise AssertionError(message) from None
        result["_stderr"] = done.stderr
        return done.returncode, result


def wait_for_occurrence(ingest: ServedIngest, operation: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = httpx.get(
            f"{ingest.base_url}/v1/occurrences",
            params={"operation": operation},
            headers={"authorization": f"Bearer {KEY}"},
        ).json()["occurrences"]
        ready = [row for row in rows if row["capsuleAvailable"] and row["operation"] == operation]
        if ready:
            identifier: str = ready[0]["id"]
            return identifier
        time.sleep(0.1)
    raise AssertionError(f"no occurrence of {operation!r} reached the ingest: {ingest.lines}")


@contextmanager
def serving(stack: Stack, env: Mapping[str, str]) -> Iterator[int]:
    """The application under ``opentelemetry-instrument`` on a free port, until the block ends."""
    port = free_port()
    command = [str(LAUNCHER), *(part.replace("{port}", str(port)) for part in stack.serve)]
    # The server's log goes to a file: a pipe nobody reads could fill up and stall it.
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            command, cwd=stack.cwd, env=clean_environ(**env), stdout=log, stderr=log, text=True
        )
        try:
            deadline = time.monotonic() + BOOT_TIMEOUT_S
            while not answers(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    process.wait(timeout=30)
                    log.seek(0)
                    raise AssertionError(f"{stack.name} did not start:\n{log.read()}")
                time.sleep(0.1)
            yield port
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)


@contextmanager
def run_stack(stack: Stack, workdir: Path) -> Iterator[StackRun]:
    """Capture a cold and a warm failure of ``stack``, then stop every dependency."""
    ingest = ServedIngest(f"sqlite:///{workdir / 'ingest.db'}", "--api-key", KEY)
    upstream = Upstream()
    postgres = ThrowawayPostgres()
    try:
        postgres.start()
        base_env = {"UPSTREAM": upstream.base, "DATABASE_URL": postgres.dsn, **stack.env}
        stack.prepare(clean_environ(**base_env))
        capture_env = {
            **base_env,
            "OTEL_SERVICE_NAME": stack.name,
            "OTEL_TRACES_EXPORTER": "reproit",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
            "REPROIT_API_KEY": KEY,
            "REPROIT_APP_ID": stack.name,
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
        captures: dict[str, Capture] = {}
        for kind, healthy in (("cold", 0), ("warm", HEALTHY_REQUESTS)):
            request = stack.failing(str(uuid.uuid4()), kind)
            with serving(stack, capture_env) as port:
                for _ in range(healthy):
                    answer = stack.healthy.send(port)
                    assert answer.status_code == 200, answer.text
                live = request.send(port)
                operation = f"{request.method} {request.path.partition('?')[0]}"
                occurrence = wait_for_occurrence(ingest, operation)
            capsule = httpx.get(
                f"{ingest.base_url}/v1/occurrences/{occurrence}/capsule",
                headers={"authorization": f"Bearer {KEY}"},
            ).json()
            captures[kind] = Capture(occurrence, capsule, request, live.status_code, live.content)
        upstream_port = int(upstream.base.rsplit(":", 1)[1])
        upstream.stop()
        postgres.stop()
        assert not answers(upstream_port) and not answers(postgres.port)
        yield StackRun(stack, ingest, workdir, base_env, captures)
    finally:
        upstream.stop()
        if postgres.data.exists():
            postgres.stop()
        ingest.stop()


def exchanges(capsule: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The recorded exchanges of a capsule, in order."""
    return [event["exchange"] for event in capsule["events"] if event["kind"] == "effect"]


def start_input(capsule: Mapping[str, Any]) -> dict[str, Any]:
    """The ``start`` event's input."""
    start = next(event for event in capsule["events"] if event["kind"] == "start")
    value: dict[str, Any] = start["input"]
    return value


def dumped(result: Mapping[str, Any]) -> str:
    """A check result for an assertion message: verdict, reason, divergences whole, stderr."""
    shown = {key: result.get(key) for key in ("verdict", "reason", "divergences")}
    return json.dumps(shown, indent=1, ensure_ascii=False) + "\n" + str(result.get("_stderr"))
