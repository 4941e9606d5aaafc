"""A mail-triage service whose dependencies sit behind invoke boundaries.

* :class:`MailClient` talks the line protocol of ``tests/integration/mailbox.py`` over a raw
  socket; its password is read with ``reproit_otel.secrets.get("MAILBOX_PASSWORD")``.
  ``fetch`` is an invoke boundary: ``NO`` answers raise :class:`MailError` with status 404
  (recorded), ``BAD`` answers raise :class:`ProtocolFault` without a status (not recorded).
* :func:`embed` and :func:`embed_async` are a local "embedding model" (a hash of the text).
* :func:`make_app` is a Flask app: ``GET /triage/<folder>/<uid>`` fetches the message, embeds
  its subject and answers 500 for urgent mail (the failure a capture keeps), 200 otherwise.

Run as a script (``reproit-otel check --exec``) it installs reproit-otel and serves on
``$PORT``, with ``$MAILBOX`` the mailbox address.
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Any

from flask import Flask, jsonify

from reproit_otel import secrets
from reproit_otel.errors import ToolCallError
from reproit_otel.instrumentation.invoke import boundary


class MailError(Exception):
    """The mailbox refused a command (``NO``): an HTTP-style status says why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ProtocolFault(Exception):
    """The mailbox answered ``BAD``: nothing says why."""


class MailClient:
    """One connection per call to the mailbox at ``address`` (``host:port``)."""

    def __init__(self, address: str, user: str = "ada") -> None:
        self.address = address
        self.user = user

    def _exchange(self, stream: Any, tag: str, command: str) -> list[str]:
        stream.write(f"{tag} {command}\r\n".encode())
        stream.flush()
        lines: list[str] = []
        while True:
            line = stream.readline().decode("utf-8").rstrip("\r\n")
            lines.append(line)
            if line.startswith(f"{tag} "):
                return lines

    @boundary("mailbox", "fetch")
    def fetch(self, folder: str, uid: int) -> dict[str, Any]:
        password = secrets.get("MAILBOX_PASSWORD") or ""
        host, port = self.address.split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            stream = sock.makefile("rwb")
            stream.readline()
            login = self._exchange(stream, "a1", f"LOGIN {self.user} {password}")[-1]
            answer = self._exchange(stream, "a2", f"FETCH {folder} {uid}")
            self._exchange(stream, "a3", "LOGOUT")
        final = answer[-1]
        if " NO " in final:
            raise MailError(final.split(" NO ", 1)[1], 404) from ToolCallError(
                final, status=404, code="NONEXISTENT"
            )
        if " BAD " in final:
            raise ProtocolFault(final)
        subject = answer[0].split('SUBJECT "', 1)[1].rstrip('")')
        return {"folder": folder, "uid": uid, "subject": subject, "session": login}


@boundary("embedding", "embed", output=list)
def embed(text: str, dims: int = 4) -> tuple[float, ...]:
    """A deterministic stand-in for a local embedding model."""
    digest = hashlib.sha256(text.encode()).digest()
    return tuple(round(byte / 255, 6) for byte in digest[:dims])


@boundary("embedding", "embed_async", output=list)
async def embed_async(text: str, dims: int = 4) -> list[float]:
    """:func:`embed` as a coroutine function."""
    return list(embed.__wrapped__(text, dims))  # type: ignore[attr-defined]


def make_app(client: MailClient) -> Flask:
    app = Flask("triage")

    @app.get("/triage/<folder>/<int:uid>")
    def triage(folder: str, uid: int) -> Any:
        message = client.fetch(folder, uid)
        vector = embed(message["subject"])
        body = {"subject": message["subject"], "vector": vector}
        if message["subject"].startswith("Urgent"):
            return jsonify({"error": "cannot triage urgent mail", **body}), 500
        return jsonify(body)

    return app


if __name__ == "__main__":
    from werkzeug.serving import make_server

    from reproit_otel.bootstrap import install

    install()
    app = make_app(MailClient(os.environ.get("MAILBOX", "127.0.0.1:9")))
    server = make_server("127.0.0.1", int(os.environ["PORT"]), app, threaded=True)
    print("listening", flush=True)
    server.serve_forever()
