"""A Flask report page too heavy for one capture batch, with no reproit-otel code.

Run under ``opentelemetry-instrument``. ``PORT`` is the port to serve on, ``UPSTREAM`` the
base URL of an upstream answering ``GET /item?i=<n>`` with about 8 KB of JSON, and
``DATABASE_URL`` a PostgreSQL DSN.

``GET /report`` runs 1,000 statements on one connection (an ORM's N+1 access: one query per
line) and makes 300 HTTP calls, then answers 500 with a digest of everything it read: the
planted bug. ``GET /`` answers ``ok`` (the health check).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import psycopg2
import requests
from flask import Flask, jsonify
from werkzeug.serving import make_server

STATEMENTS = 1000
CALLS = 300

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://127.0.0.1:9/none")


@app.get("/")
def health() -> tuple[str, int]:
    return "ok", 200


@app.get("/report")
def report() -> Any:
    digest = hashlib.sha256()
    total = 0
    connection = psycopg2.connect(DATABASE_URL)
    try:
        with connection.cursor() as cursor:
            for line in range(STATEMENTS):
                cursor.execute("SELECT %s::int * 2, %s::text", (line, f"line {line}"))
                doubled, label = cursor.fetchone()
                total += doubled
                digest.update(label.encode())
        connection.rollback()
    finally:
        connection.close()
    with requests.Session() as session:
        for item in range(CALLS):
            answer = session.get(f"{UPSTREAM}/item", params={"i": item}, timeout=10)
            digest.update(answer.content)
            total += answer.json()["i"]
    # The planted bug: a report that read everything still answers 500.
    return jsonify({"error": "report failed", "total": total, "digest": digest.hexdigest()}), 500


if __name__ == "__main__":
    server = make_server("127.0.0.1", int(os.environ["PORT"]), app, threaded=True)
    print("listening", flush=True)
    server.serve_forever()
