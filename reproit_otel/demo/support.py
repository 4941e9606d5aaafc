"""The parts ``reproit-otel demo`` is built from: a step printer, child processes, PostgreSQL.

:class:`Progress`
    Prints one numbered line per stage. On a terminal the running stage shows a spinner and
    its elapsed time, redrawn in place; elsewhere (a log, a pipe) each stage prints a start
    line and an end line, so the output stays readable in CI. Notes print indented under
    their stage.
:class:`Supervisor`
    Starts every child process in its own session (its own process group), with standard
    output and error in a log file, and stops it with SIGTERM, then SIGKILL, sent to the
    whole group, so nothing a child started outlives the demo. :meth:`Supervisor.stop_all`
    is safe to call more than once and in any state.
:class:`ThrowawayPostgres`
    ``initdb`` and ``pg_ctl`` on a temporary data folder, trusted on loopback only, on a free
    port. The tools are found on ``PATH`` or under ``/usr/lib/postgresql/*/bin`` (Debian);
    when running as root they run as the ``postgres`` system user through ``runuser``, since
    PostgreSQL refuses to run as root. A missing installation is a :class:`DemoError` naming
    the command that installs it.

Nothing here imports OpenTelemetry; the demo process itself is never instrumented.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

__all__ = [
    "DemoError",
    "Progress",
    "Step",
    "Supervisor",
    "ThrowawayPostgres",
    "free_port",
    "wait_for_line",
]

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_DEBIAN_POSTGRES = Path("/usr/lib/postgresql")


class DemoError(Exception):
    """A stage could not run; the message says what happened and what to do next."""


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Step:
    """One running stage of :class:`Progress` (use :meth:`Progress.step`)."""

    def __init__(self, progress: Progress, number: int, title: str) -> None:
        self._progress = progress
        self.number = number
        self.title = title
        self.started = time.monotonic()
        self.outcome: str | None = None

    def note(self, text: str) -> None:
        """Print ``text`` indented under the stage (each line of it)."""
        self._progress.note(text)

    def done(self, outcome: str) -> None:
        """Say what the stage achieved; shown on its final line."""
        self.outcome = outcome


class Progress:
    """Numbered stages with a spinner on a terminal, plain lines elsewhere."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stdout
        self.live = self.stream.isatty()
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._current: Step | None = None
        self._stop = threading.Event()

    def _prefix(self, step: Step) -> str:
        return f"[{step.number}/{self.total}]"

    def _draw(self, frame: str) -> None:
        step = self._current
        if step is None:
            return
        elapsed = time.monotonic() - step.started
        self.stream.write(f"\r\x1b[2K{self._prefix(step)} {step.title} {frame} {elapsed:4.1f}s")
        self.stream.flush()

    def _spin(self) -> None:
        for frame in itertools.cycle(_SPINNER):
            if self._stop.wait(0.1):
                return
            with self._lock:
                self._draw(frame)

    def note(self, text: str) -> None:
        """Print an indented line under the running stage."""
        with self._lock:
            if self.live:
                self.stream.write("\r\x1b[2K")
            for line in text.splitlines() or [""]:
                self.stream.write(f"      {line}\n")
            self.stream.flush()

    def say(self, text: str = "") -> None:
        """Print a line outside any stage."""
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[Step]:
        """Run one stage: ``with progress.step("Start PostgreSQL") as step: ...``."""
        step = Step(self, next(self._counter), title)
        spinner: threading.Thread | None = None
        with self._lock:
            self._current = step
            if self.live:
                self._draw(_SPINNER[0])
            else:
                self.stream.write(f"{self._prefix(step)} {title} ...\n")
                self.stream.flush()
        if self.live:
            self._stop.clear()
            spinner = threading.Thread(target=self._spin, daemon=True)
            spinner.start()
        mark = "✗"
        try:
            yield step
            mark = "✓"
        finally:
            self._stop.set()
            if spinner is not None:
                spinner.join()
            elapsed = time.monotonic() - step.started
            with self._lock:
                self._current = None
                outcome = f": {step.outcome}" if step.outcome and mark == "✓" else ""
                clear = "\r\x1b[2K" if self.live else ""
                self.stream.write(
                    f"{clear}{self._prefix(step)} {mark} {title}{outcome} ({elapsed:.1f} s)\n"
                )
                self.stream.flush()


class Supervisor:
    """Child processes of the demo, each in its own process group, all stopped at the end."""

    def __init__(self, logs: Path, env: Mapping[str, str]) -> None:
        self.logs = logs
        self.env = dict(env)
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._stop_signals: dict[str, signal.Signals] = {}

    def log_path(self, name: str) -> Path:
        """Where the output of child ``name`` goes."""
        return self.logs / f"{name}.log"

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stdout: Path | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as child ``name``; its output is appended to ``logs/<name>.log``.

        ``stdout`` sends standard output to its own file instead. ``stop_signal`` is the first
        signal :meth:`stop` sends (SIGINT for a child that cleans up its own children on
        KeyboardInterrupt).
        """
        self.logs.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as files:
            log = files.enter_context(open(self.log_path(name), "ab"))
            out = files.enter_context(open(stdout, "wb")) if stdout is not None else log
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=log,
                env={**self.env, **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        self.children[name] = process
        self._stop_signals[name] = stop_signal
        return process

    def stop(self, name: str, timeout: float = 5.0) -> int | None:
        """Stop child ``name`` and everything in its process group; returns its exit code."""
        process = self.children.pop(name, None)
        first = self._stop_signals.pop(name, signal.SIGTERM)
        if process is None:
            return None
        for sig in dict.fromkeys((first, signal.SIGTERM, signal.SIGKILL)):
            if process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout)
        # The leader may be gone while members of its group are not (a child it forked).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        return process.wait()

    def stop_all(self) -> None:
        """Stop every child still known, most recently started first."""
        for name in reversed(list(self.children)):
            self.stop(name)


def wait_for_line(
    log: Path,
    prefix: str,
    *,
    process: subprocess.Popen[bytes] | None = None,
    timeout: float = 30.0,
    count: int = 1,
) -> list[str]:
    """The first ``count`` lines of ``log`` starting with ``prefix``, waiting for them.

    Raises :class:`DemoError` (with the end of the log) when ``process`` exits first or the
    lines do not come within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        found = [line for line in text.splitlines() if line.startswith(prefix)]
        if len(found) >= count:
            return found[:count]
        exited = process is not None and process.poll() is not None
        if exited or time.monotonic() > deadline:
            tail = "\n".join(text.splitlines()[-15:])
            why = "exited" if exited else f"did not say {prefix!r} within {timeout:g} s"
            raise DemoError(f"{log.stem} {why}; the end of {log}:\n{tail}")
        time.sleep(0.05)


def _find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for version in sorted(_DEBIAN_POSTGRES.glob("*/bin"), key=_version_key, reverse=True):
        candidate = version / name
        if candidate.exists():
            return str(candidate)
    return None


def _version_key(path: Path) -> tuple[int, ...]:
    parts = path.parent.name.split(".")
    return tuple(int(part) if part.isdigit() else 0 for part in parts)


class ThrowawayPostgres:
    """A PostgreSQL server in a temporary folder, for one demo run."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        initdb, pg_ctl = _find_tool("initdb"), _find_tool("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise DemoError(
                "PostgreSQL's initdb and pg_ctl were not found on PATH or under "
                "/usr/lib/postgresql/*/bin; install them with `apt-get install postgresql` "
                "(or your system's PostgreSQL server package) and run the demo again"
            )
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.as_user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise DemoError(
                    "PostgreSQL refuses to run as root and there is no `postgres` system user; "
                    "install the server with `apt-get install postgresql`, which creates it"
                ) from None
            if shutil.which("runuser") is None:
                raise DemoError("running as root needs `runuser` (apt-get install util-linux)")
            self.as_user = "postgres"
        self.port = free_port()
        self.root: Path | None = None
        self.running = False

    @property
    def user(self) -> str:
        """The database superuser initdb created (the system user that ran it)."""
        return self.as_user or pwd.getpwuid(os.geteuid()).pw_name

    @property
    def dsn(self) -> str:
        """libpq URL of the server."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def log(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    def _run(self, *argv: str, timeout: float = 120.0) -> None:
        command = list(argv)
        if self.as_user:
            command = ["runuser", "-u", self.as_user, "--", *command]
        # Its own process group, so an interruption stops runuser's child (initdb) as well.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        if process.returncode != 0:
            text = output.decode("utf-8", "replace").strip()
            raise DemoError(f"`{' '.join(argv[:2])} ...` failed ({process.returncode}):\n{text}")

    def start(self) -> None:
        """initdb, then start the server and wait until it accepts connections."""
        self.root = Path(tempfile.mkdtemp(prefix="reproit-demo-pg-"))
        if self.as_user:
            shutil.chown(self.root, user=self.as_user)
        self._run(
            self.initdb, "-D", str(self.data), "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8"
        )
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.running = True  # from here on, stop() has something to stop
        self._run(
            self.pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start"
        )

    def stop(self, *, fast: bool = True) -> None:
        """Stop the server (``fast`` lets it close cleanly; else ``immediate``). Idempotent."""
        if self.root is None:
            return
        if self.running:
            self.running = False
            try:
                self._run(
                    self.pg_ctl,
                    "-D",
                    str(self.data),
                    "-m",
                    "fast" if fast else "immediate",
                    "-w",
                    "stop",
                    timeout=60.0,
                )
            except (DemoError, subprocess.TimeoutExpired):
                self._kill_postmaster()

    def remove(self) -> None:
        """Delete the data folder (after :meth:`stop`)."""
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def _kill_postmaster(self) -> None:
        pid_file = self.data / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, signal.SIGQUIT)
