"""A payment service that handles secrets and can drift, for ``reproit-otel check``.

``GET /pay`` reads a token with ``reproit_otel.secrets.get(TOKEN_NAME)`` and sends it as a
secret query parameter of a ``requests`` call to the upstream. A PIN the application holds
itself (reproit-otel knows nothing of its value) goes under secret-named keys: the JSON body
of that call, an argument of an invoke boundary and a named parameter of a psycopg2
statement. A configured secret value (``note``) rides in free text beside a visible marker.
Every call's failure is caught, and the request answers 500.

With ``drift`` set, each of the three calls differs from the recorded one (another query
value, another argument, another column), so a replay of a capture made without it reports
three DIVERGENCE lines that echo calls full of secrets.

Run as a script (``reproit-otel check --exec``) it installs reproit-otel and serves on
``$PORT``; ``$UPSTREAM``, ``$DSN``, ``$DRIFT_APP_NOTE``, ``$DRIFT_APP_PIN`` and
``$DRIFT_APP_DRIFT`` give the rest.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg2
import requests
from flask import Flask, jsonify

from reproit_otel import secrets
from reproit_otel.instrumentation.invoke import boundary

TOKEN_NAME = "DRIFT_APP_TOKEN"
MARKER = "visible-marker-d41f"


@boundary("ledger", "authorize")
def authorize(amount: int, memo: str, password: str) -> dict[str, Any]:
    return {"authorized": amount, "memo": memo}


def make_app(upstream: str, dsn: str, note: str, pin: str, drift: str = "") -> Flask:
    app = Flask("drift")

    @app.get("/pay")
    def pay() -> Any:
        token = secrets.get(TOKEN_NAME) or ""
        seen: list[Any] = []
        answer = requests.post(
            f"{upstream}/echo",
            params={"access_token": token, "page": f"1{drift}"},
            json={"password": pin, "note": f"{MARKER} {note} {drift}"},
            timeout=5,
        )
        seen.append(answer.status_code)
        try:
            seen.append(authorize(7, f"{MARKER} {note} {drift}", pin))
        except Exception as error:
            seen.append(type(error).__name__)
        try:
            connection = psycopg2.connect(dsn)
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"SELECT %(password)s = %(password)s AS ok, %(note)s AS note{drift}",
                        {"password": pin, "note": f"{MARKER} {note}"},
                    )
                    seen.append(list(cursor.fetchone()))
            finally:
                connection.close()
        except Exception as error:
            seen.append(type(error).__name__)
        return jsonify({"error": "payment failed", "seen": seen}), 500

    return app


if __name__ == "__main__":
    from werkzeug.serving import make_server

    from reproit_otel.bootstrap import install

    install()
    service = make_app(
        os.environ.get("UPSTREAM", "http://127.0.0.1:9"),
        os.environ.get("DSN", "host=127.0.0.1 port=9"),
        os.environ.get("DRIFT_APP_NOTE", ""),
        os.environ.get("DRIFT_APP_PIN", ""),
        os.environ.get("DRIFT_APP_DRIFT", ""),
    )
    server = make_server("127.0.0.1", int(os.environ["PORT"]), service, threaded=True)
    print("listening", flush=True)
    server.serve_forever()
