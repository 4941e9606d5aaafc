"""The request-fidelity app on Flask (``fidelity_logic.py``), for gunicorn.

Served as ``gunicorn fidelity_flask:app``.
"""

from __future__ import annotations

from typing import Any

from fidelity_logic import greet, items, read_body, served_at, sign_up
from flask import Flask, jsonify, request

app = Flask(__name__)


def _answer(result: tuple[int, dict[str, Any]]) -> Any:
    status, body = result
    return jsonify(body), status


@app.get("/")
def health() -> tuple[str, int]:
    return "ok", 200


@app.post("/body/<case>")
def body(case: str) -> Any:
    return _answer(read_body(case, request.get_data()))


@app.get("/greet")
def greeting() -> Any:
    return _answer(greet(request.headers.get("Accept-Language"), request.headers.get("X-Tenant")))


@app.post("/signup")
def signup() -> Any:
    return _answer(sign_up(request.get_json()))


@app.get("/items")
def shelf() -> Any:
    scheme, _, key = (request.headers.get("Authorization") or "").partition(" ")
    return _answer(items(key if scheme == "Bearer" else None))


@app.get("/server")
def server() -> Any:
    return _answer(served_at(request.environ["SERVER_NAME"], request.environ["SERVER_PORT"]))
