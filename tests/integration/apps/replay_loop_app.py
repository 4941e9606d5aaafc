"""A Flask shop with a planted bug and no reproit-otel code, for the capture-to-check loop.

Run under ``opentelemetry-instrument``. ``PORT`` is the port to serve on, ``UPSTREAM`` the
base URL of the pricing upstream (``tests/integration/upstream.py``), ``DATABASE_URL`` a
PostgreSQL DSN. ``GET /`` answers ``ok`` without calling anything (the health check).

``GET /quote`` calls, in this order: ``GET /json`` (the rate), ``GET /sse`` streamed (every
chunk as it arrives), the statement ``SELECT %s::int + 1, %s::text`` and a statement on a
table that does not exist (its error is caught). The planted bug answers 500 with everything
it saw; with ``LOOP_FIXED=1`` the same calls end in 200. Variants for the replay:

* ``LOOP_OTHER_URL=1`` asks for ``/json?currency=USD`` instead (a call the capsule lacks);
* ``LOOP_UNPATCHED=1`` also calls ``http://10.255.255.1/ping`` with ``urllib.request``
  after the recorded calls. It refuses to do so unless the replay's network tripwire is
  installed, so that call can never leave the process;
* ``LOOP_ENVELOPE=1`` adds the clock and three ``random.random()`` values to the body.
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg2
import requests
from flask import Flask, jsonify
from werkzeug.serving import make_server

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://127.0.0.1:9/none")
UNREACHABLE = "http://10.255.255.1/ping"


def flag(name: str) -> bool:
    return os.environ.get(name) == "1"


@app.get("/")
def health() -> tuple[str, int]:
    return "ok", 200


def unpatched_call() -> str:
    if not getattr(socket.socket.connect, "__reproit_tripwire__", False):
        raise RuntimeError(f"refusing to call {UNREACHABLE} without the replay tripwire")
    try:
        urllib.request.urlopen(UNREACHABLE, timeout=2)
    except urllib.error.URLError as error:
        return f"{type(error.reason).__name__}: {error.reason}"
    return "reached"


@app.get("/quote")
def quote() -> Any:
    path = "/json?currency=USD" if flag("LOOP_OTHER_URL") else "/json"
    rate = requests.get(f"{UPSTREAM}{path}", timeout=5).json()
    with requests.get(f"{UPSTREAM}/sse", stream=True, timeout=5) as events:
        chunks = [chunk.decode() for chunk in events.iter_content(None)]
    connection = psycopg2.connect(DATABASE_URL)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::int + 1, %s::text", (41, "grüße"))
            row = list(cursor.fetchone())
            try:
                cursor.execute("SELECT total FROM ledger_that_does_not_exist")
                failure = None
            except psycopg2.Error as error:
                failure = {"class": type(error).__name__, "pgcode": error.pgcode}
        connection.rollback()
    finally:
        connection.close()
    seen: dict[str, Any] = {"rate": rate, "chunks": chunks, "row": row, "failure": failure}
    if flag("LOOP_UNPATCHED"):
        seen["unpatched"] = unpatched_call()
    if flag("LOOP_ENVELOPE"):
        seen["envelope"] = {
            "hour": datetime.datetime.now().strftime("%Y-%m-%d %H"),
            "utcHour": datetime.datetime.utcnow().strftime("%Y-%m-%d %H"),
            "today": datetime.date.today().isoformat(),
            "epochHour": int(time.time()) // 3600,
            "epochNsHour": time.time_ns() // 3_600_000_000_000,
            "random": [random.random() for _ in range(3)],
        }
    if flag("LOOP_FIXED"):
        return jsonify({"ok": True, **seen}), 200
    # The planted bug: the ledger's failure is taken for a pricing failure.
    return jsonify({"error": "pricing failed", **seen}), 500


if __name__ == "__main__":
    server = make_server("127.0.0.1", int(os.environ["PORT"]), app, threaded=True)
    print("listening", flush=True)
    server.serve_forever()
