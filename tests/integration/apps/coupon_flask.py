"""The coupon app on Flask (``coupon_logic.py``); serves on ``PORT``, asks ``UPSTREAM``."""

from __future__ import annotations

import os
from typing import Any

from coupon_logic import quote
from flask import Flask, jsonify, request
from werkzeug.serving import make_server

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")


@app.get("/")
def health() -> tuple[str, int]:
    return "ok", 200


@app.get("/coupon")
def coupon() -> Any:
    return jsonify(quote(UPSTREAM, request.args.get("code", "")))  # VIEW


if __name__ == "__main__":
    make_server("127.0.0.1", int(os.environ["PORT"]), app, threaded=True).serve_forever()
