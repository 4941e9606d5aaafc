"""``reproit-otel serve`` as a real subprocess on a loopback port the system picked."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from reproit_otel.ingest.server import LISTENING_PREFIX

_SCRIPT = Path(sys.executable).with_name("reproit-otel")


def cli_command(*args: str) -> list[str]:
    """The ``reproit-otel`` console script of this environment, or ``python -m reproit_otel``."""
    if _SCRIPT.exists():
        return [str(_SCRIPT), *args]
    return [sys.executable, "-m", "reproit_otel", *args]


class ServedIngest:
    """Starts ``reproit-otel serve --port 0`` and collects its stderr lines."""

    def __init__(self, db_url: str, *extra: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            cli_command("serve", "--port", "0", "--db", db_url, *extra),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.base_url = self._wait_listening()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _wait_listening(self, timeout: float = 30.0) -> str:
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                self.stop()
                raise RuntimeError(f"reproit-otel serve did not start: {self.lines}") from None
            if line is None:
                raise RuntimeError(f"reproit-otel serve exited: {self.lines}")
            if line.startswith(LISTENING_PREFIX):
                return line[len(LISTENING_PREFIX) :]

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait for a clean exit; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout)
        if self.process.stderr is not None and not self._reader.is_alive():
            self.process.stderr.close()  # else the pipe is left to the garbage collector
        return code
