"""Sample pytest projects run in a real subprocess, and a loopback upstream they call.

:class:`SampleProject` writes a small project (test files, a ``pytest.ini`` pinning the
rootdir) into a temporary folder and runs ``python -m pytest`` there with a clean environment:
every ``REPROIT_*`` variable of the outer run is removed except ``REPROIT_STRICT_INTERNAL``,
then the given ones are applied. A run returns its exit code, its stdout and the ``REPROIT:``
lines of its standard error (where the plugin writes its markers). :meth:`SampleProject.check`
runs ``python -m reproit_otel check CAPSULE --exec "python -m pytest ..."`` the same way.

:class:`RouteUpstream` answers ``GET <path>`` from a routes table the test can change between
runs, and counts the calls. ``node_headers=True`` makes it answer the way a Node ``http``
server does by default (chunked, ``connection: keep-alive``, ``keep-alive: timeout=5``, no
``date``), so exchanges recorded from it compare with the Node reference.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


@dataclass
class Run:
    """One finished subprocess."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def markers(self) -> list[str]:
        """Every standard error line that starts with ``REPROIT:``, in order."""
        return [line for line in self.stderr.splitlines() if line.startswith("REPROIT:")]


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The outer environment without ``REPROIT_*``/``GITHUB_SHA``, plus ``extra``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("REPROIT_") and name not in ("GITHUB_SHA", "PYTEST_ADDOPTS")
    }
    env["REPROIT_STRICT_INTERNAL"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


@dataclass
class SampleProject:
    """A throwaway pytest project in ``root``."""

    root: Path
    files: dict[str, str] = field(default_factory=dict)

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def setup(self, ini: str = "") -> SampleProject:
        self.write("pytest.ini", "[pytest]\n" + ini)
        for name, text in self.files.items():
            self.write(name, text)
        return self

    def pytest(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
        done = subprocess.run(
            [*PYTEST, *args],
            cwd=self.root,
            env=clean_env(env),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        return Run(
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "surrogateescape"),
        )

    def check(
        self,
        capsule: Path,
        *args: str,
        env: dict[str, str] | None = None,
        json_out: bool = False,
        prefix: tuple[str, ...] = (),
    ) -> Run:
        """``check CAPSULE --exec "[prefix...] python -m pytest ... args"``."""
        command = shlex.join([*prefix, *PYTEST, *args])
        argv = [sys.executable, "-m", "reproit_otel", "check", str(capsule), "--exec", command]
        if json_out:
            argv.append("--json")
        done = subprocess.run(
            argv, cwd=self.root, env=clean_env(env), capture_output=True, timeout=180, check=False
        )
        return Run(
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
        )

    def spool(self, directory: str = ".reproit/ci-spool") -> list[str]:
        """The sorted names in the spool directory (empty when it does not exist)."""
        path = self.root / directory
        return sorted(os.listdir(path)) if path.is_dir() else []

    def capsules(self, directory: str = ".reproit/ci-spool") -> dict[str, dict[str, Any]]:
        """Every spooled capsule by operation."""
        found = {}
        for name in self.spool(directory):
            if name.startswith("capsule-"):
                capsule = json.loads((self.root / directory / name).read_text("utf-8"))
                found[capsule["operation"]] = capsule
        return found


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        upstream = self.server.owner
        with upstream.lock:
            upstream.calls.append(self.path)
            route = upstream.routes.get(self.path)
        if route is None:
            route = {"status": 404, "body": "no route", "contentType": "text/plain"}
        body = route.get("body")
        text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        data = text.encode("utf-8")
        self.send_response_only(int(route.get("status", 200)))
        self.send_header("content-type", route.get("contentType", "application/json"))
        if upstream.node_headers:
            self.send_header("connection", "keep-alive")
            self.send_header("keep-alive", "timeout=5")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            chunk = f"{len(data):x}\r\n".encode() + data + b"\r\n" if data else b""
            self.wfile.write(chunk + b"0\r\n\r\n")
        else:
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: RouteUpstream


class RouteUpstream:
    """A loopback HTTP upstream answering ``GET`` from :attr:`routes`; :meth:`stop` closes it."""

    def __init__(
        self,
        routes: dict[str, dict[str, Any]] | None = None,
        *,
        port: int = 0,
        node_headers: bool = False,
    ) -> None:
        self.routes: dict[str, dict[str, Any]] = dict(routes or {})
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.node_headers = node_headers
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self.port: int = self._server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
