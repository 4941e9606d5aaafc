"""A Flask service with no reproit-otel code, run under ``opentelemetry-instrument`` by tests.

``PORT`` is the port to serve on, ``UPSTREAM`` the base URL of the upstream it calls.
``GET /quote`` calls the upstream twice (``/json``, then ``/fail``) and answers 502 with a
JSON body when the second call fails; ``GET /health`` answers 200.
"""

from __future__ import annotations

import os

import requests
from flask import Flask, jsonify
from werkzeug.serving import make_server

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")


@app.get("/health")
def health() -> tuple[str, int]:
    return "ok", 200


@app.get("/quote")
def quote() -> object:
    rate = requests.get(f"{UPSTREAM}/json", timeout=5).json()
    failed = requests.get(f"{UPSTREAM}/fail", timeout=5)
    if failed.status_code >= 500:
        return jsonify({"error": "pricing unavailable", "rate": rate["rate"]}), 502
    return jsonify({"ok": True})


if __name__ == "__main__":
    server = make_server("127.0.0.1", int(os.environ["PORT"]), app, threaded=True)
    print("listening", flush=True)
    server.serve_forever()
