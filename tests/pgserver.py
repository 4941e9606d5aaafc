"""A throwaway PostgreSQL cluster for the test session.

``.ci/run`` starts one and exports ``REPROIT_TEST_PG_DSN``; without it, the test session
starts its own cluster with ``initdb``/``pg_ctl`` on a free loopback port (as the
``postgres`` system user when the tests run as root, since PostgreSQL refuses to run as
root) and stops it at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

_DEBIAN_BIN = Path("/usr/lib/postgresql")


def _find_tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for version_dir in sorted(_DEBIAN_BIN.glob("*"), reverse=True):
        candidate = version_dir / "bin" / name
        if candidate.exists():
            return str(candidate)
    raise RuntimeError(
        f"PostgreSQL's {name} was not found; install it with `apt-get install postgresql`"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayPostgres:
    """A PostgreSQL server in a temporary folder, trusted on loopback only."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="reproit-pg-"))
        self.data = self.root / "data"
        self.as_user: str | None = "postgres" if os.geteuid() == 0 else None

    @property
    def dsn(self) -> str:
        user = self.as_user or os.environ.get("USER", "postgres")
        return f"postgresql://{user}@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        command = list(argv)
        if self.as_user:
            command = ["runuser", "-u", self.as_user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if self.as_user:
            shutil.chown(self.root, user=self.as_user)
        self._run(
            _find_tool("initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            _find_tool("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        try:
            self._run(_find_tool("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def fresh_database(dsn: str) -> str:
    """A new, empty database on the server at ``dsn``; its DSN (so every test starts empty)."""
    import psycopg2

    name = f"reproit_{uuid.uuid4().hex[:12]}"
    connection = psycopg2.connect(dsn)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    connection.close()
    return dsn.rsplit("/", 1)[0] + f"/{name}"
