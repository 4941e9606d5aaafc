"""A small IMAP-like mailbox on a loopback port, for the invoke-boundary tests.

One command per line, tagged like IMAP; the server greets first (``* OK mailbox ready``)::

    a1 LOGIN <user> <password>   a1 OK [AUTH <password>] logged in as <user>
                                 (echoes the password, so a test can prove it is scrubbed)
    a2 FETCH <folder> <uid>      * <uid> FETCH (SUBJECT "<subject>")  then  a2 OK done
                                 a2 NO [NONEXISTENT] no such message   (unknown uid)
                                 a2 BAD internal server fault          (uid 500)
    a3 LOGOUT                    a3 OK bye (the connection closes)

:meth:`Mailbox.stop` closes the listening socket: a later connection is refused.
"""

from __future__ import annotations

import socket
import socketserver
import threading

MESSAGES = {
    ("INBOX", 1): "Quarterly report",
    ("INBOX", 2): "Urgent: server down",
    ("Archive", 1): "Grüße aus Köln",
}


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.wfile.write(b"* OK mailbox ready\r\n")
        for raw in self.rfile:
            line = raw.decode("utf-8").rstrip("\r\n")
            tag, _, rest = line.partition(" ")
            command, _, args = rest.partition(" ")
            self.server.commands.append(line)  # type: ignore[attr-defined]
            if command == "LOGIN":
                user, _, password = args.partition(" ")
                self._send(f"{tag} OK [AUTH {password}] logged in as {user}")
            elif command == "FETCH":
                folder, _, uid = args.partition(" ")
                if uid == "500":
                    self._send(f"{tag} BAD internal server fault")
                    continue
                subject = MESSAGES.get((folder, int(uid)))
                if subject is None:
                    self._send(f"{tag} NO [NONEXISTENT] no such message")
                    continue
                self._send(f'* {uid} FETCH (SUBJECT "{subject}")')
                self._send(f"{tag} OK done")
            elif command == "LOGOUT":
                self._send(f"{tag} OK bye")
                return
            else:
                self._send(f"{tag} BAD unknown command")

    def _send(self, line: str) -> None:
        self.wfile.write(line.encode("utf-8") + b"\r\n")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class Mailbox:
    """The mailbox server, started on 127.0.0.1 at construction."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.commands = []  # type: ignore[attr-defined]
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def commands(self) -> list[str]:
        """Every command line received so far."""
        return list(self._server.commands)  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def is_down(self) -> bool:
        """True when a connection to the address is refused."""
        host, port = self.address.split(":")
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            return True
        return False
