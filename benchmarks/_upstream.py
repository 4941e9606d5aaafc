"""The upstream the benchmark service calls: ``python -m benchmarks._upstream``.

HTTP/1.1 with keep-alive on a loopback port the system picks; prints ``listening <port>``.
``GET /rate`` answers 200 with a small JSON body (29 bytes), ``GET /rate?size=large`` with a
64 KiB one; anything else answers 404.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BODY = b'{"rate":1.5,"currency":"EUR"}'
# 64 KiB of JSON with the same ``rate``: the payload-size shape of the capture benchmarks.
_PAD = b'{"rate":1.5,"currency":"EUR","pad":"'
LARGE_BODY = _PAD + b"x" * (65536 - len(_PAD) - 2) + b'"}'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes

    def do_GET(self) -> None:
        if self.path.startswith("/rate"):
            status, body = 200, LARGE_BODY if "size=large" in self.path else BODY
        else:
            status, body = 404, b"{}"
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
