"""A Flask service for the pre-fork test, run by gunicorn with ``preload_app``.

OpenTelemetry and reproit-otel are installed once, in the gunicorn master, when this module
is imported; the workers inherit them through ``fork``. ``GET /fail`` calls the upstream
(``UPSTREAM``) ``/fail`` route and answers 502 with the worker's pid, so every response and
every captured operation says which worker handled it.
"""

from __future__ import annotations

import os
from typing import Any

import requests
from flask import Flask, jsonify
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel import bootstrap

UPSTREAM = os.environ["UPSTREAM"]

app = Flask("prefork")
provider = TracerProvider()
if bootstrap.install(provider) is None:
    raise SystemExit("reproit-otel did not install; check the REPROIT_* environment")
FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
RequestsInstrumentor().instrument(tracer_provider=provider)


@app.get("/fail")
def fail() -> Any:
    answer = requests.get(f"{UPSTREAM}/fail", timeout=5)
    return jsonify({"pid": os.getpid(), "upstream": answer.status_code}), 502
