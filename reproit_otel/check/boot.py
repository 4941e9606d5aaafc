"""Why an application booted by ``reproit-otel check`` does not answer on ``$PORT``.

``check`` starts the application in a session of its own and waits for HTTP on the port it
put in ``PORT``. Waiting the whole boot timeout is wasted when the answer is already known:
the application exited, or it listens on a port of its own choosing (``app.run()`` on 5000,
``uvicorn`` on 8000) and will never listen on ``$PORT``. :func:`listening_ports` reads, on
Linux, which TCP ports the processes of that session listen on (``/proc``; elsewhere it finds
none and ``check`` waits the boot timeout), and :func:`boot_failure` words the reason with
what to change.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["boot_failure", "listening_ports"]

_LISTEN = "0A"


def _session_pids(session: int) -> list[int]:
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # gone meanwhile
        # The command name may hold spaces and parentheses: the fields follow the last ")".
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 3 and fields[3] == str(session):
            pids.append(int(entry.name))
    return pids


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def listening_ports(session: int) -> set[int]:
    """TCP ports the processes of session ``session`` listen on (empty where unknown)."""
    if not Path("/proc/net/tcp").exists():
        return set()
    inodes: set[str] = set()
    for pid in _session_pids(session):
        inodes |= _socket_inodes(pid)
    if not inodes:
        return set()
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            columns = row.split()
            if len(columns) > 9 and columns[3] == _LISTEN and columns[9] in inodes:
                ports.add(int(columns[1].rpartition(":")[2], 16))
    return ports


def boot_failure(port: int, exit_code: int | None, other_ports: set[int], waited: float) -> str:
    """The reason ``check`` gives when the application never answered on ``$PORT``."""
    if exit_code is not None:
        return (
            f"the application exited (code {exit_code}) before answering HTTP on $PORT "
            f"({port}); it must run a server listening on the port in the PORT environment "
            "variable (its last output lines are below)"
        )
    if other_ports:
        listed = ", ".join(str(other) for other in sorted(other_ports))
        return (
            f"the application listens on port {listed}, not on $PORT ({port}); it must take "
            "its port from the PORT environment variable, e.g. "
            "app.run(port=int(os.environ['PORT'])) or uvicorn --port $PORT"
        )
    return (
        f"the application did not answer HTTP on $PORT ({port}) within {waited:g} s; it must "
        "listen on the port in the PORT environment variable (raise --boot-timeout if it "
        "starts slowly)"
    )
