"""The uvicorn server the ingest runs in, announcing the address it really listens on.

``IngestServer(config).run()`` blocks until SIGINT/SIGTERM (or ``should_exit``), then finishes
in-flight requests and returns, so the caller can close the store and exit with status 0
(uvicorn alone re-raises the signal after its shutdown, which would kill the process before
the store is closed). Once the sockets are bound it prints
``reproit-otel serve: listening on http://HOST:PORT`` on stderr, with the port the system
picked when ``--port 0`` was asked, so scripts and tests can wait for that line instead of
polling a guessed port. ``started`` tells afterwards whether it ever listened.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

LISTENING_PREFIX = "reproit-otel serve: listening on "


class IngestServer(uvicorn.Server):
    """uvicorn's server plus the listening line."""

    started_address: tuple[str, int] | None = None
    app_state: Any = None  # the application's ``state``: its public URL is set once listening

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Stop on SIGINT/SIGTERM, restore the previous handlers, and return normally."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        for server in getattr(self, "servers", []):
            for bound in server.sockets or ():
                address = bound.getsockname()
                if isinstance(address, tuple) and len(address) >= 2:
                    self.started_address = (str(address[0]), int(address[1]))
                    break
            if self.started_address:
                break
        if self.started_address:
            host, port = self.started_address
            shown = f"[{host}]" if ":" in host else host
            listening = f"http://{shown}:{port}"
            state = self.app_state
            if state is not None and getattr(state, "public_url", None) is None:
                state.public_url = listening  # what the page's replay line names by default
            # One write: print() writes the text and the newline apart, and the retention
            # thread may log a line in between.
            sys.stderr.write(f"{LISTENING_PREFIX}{listening}\n")
            sys.stderr.flush()
