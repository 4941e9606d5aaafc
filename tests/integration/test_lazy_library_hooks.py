"""``reproit_otel.install()`` imports no optional framework or credential library itself.

A fresh interpreter configures capture (the uploader pointed at a real loopback ingest),
installs reproit-otel, and only then imports Flask, Django's WSGI handler, PyJWT,
python-jose, Flask-Login and itsdangerous, the way an application does after start-up: the
hooks must be in place at that moment, and a failing request through a Flask app created after
install must reach the ingest. ``uninstall()`` drops the hooks still waiting, so a library
imported after it is left as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.upstream import Upstream

ROOT = Path(__file__).resolve().parents[2]

OPTIONAL = (
    "django",
    "django.http",
    "fastapi",
    "flask",
    "flask_login",
    "itsdangerous",
    "jose",
    "jwt",
    "starlette",
    "werkzeug",
)

SCRIPT = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
import reproit_otel

processor = reproit_otel.install()
OPTIONAL = json.loads(sys.argv[2])
report = {"at_install": [name for name in OPTIONAL if name in sys.modules]}

# What the application imports after start-up.
import flask
import flask_login
import itsdangerous
import jose.jwt
import jwt
import requests
from django.core.handlers.wsgi import WSGIHandler

from reproit_otel.instrumentation import credentials

original_call = flask.Flask._reproit_original_call
report["flask_call_wrapped"] = flask.Flask.__call__.__wrapped__ is original_call
report["django_wsgi_wrapped"] = "_reproit_original_call" in WSGIHandler.__dict__
report["django_asgi_imported"] = "django.core.handlers.asgi" in sys.modules
report["seams"] = credentials.installed_seams()
report["flask_error_receiver"] = [
    receiver.__qualname__ for receiver in flask.got_request_exception.receivers.values()
]

from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from reproit_otel.capture.uploader import Uploader
from tests.integration.pipeline_support import ServedWSGI

app = flask.Flask("late")

@app.get("/orders/<int:number>")
def order(number):
    rate = requests.get(sys.argv[1] + "/json", timeout=5).json()
    return flask.jsonify({"error": "pricing unavailable", "rate": rate["rate"]}), 502

FlaskInstrumentor().instrument_app(app)
RequestsInstrumentor().instrument()
import logging
logging.getLogger("werkzeug").disabled = True  # its access log line
served = ServedWSGI(app)
answer = requests.get(served.base + "/orders/7", timeout=10)
report["status"] = answer.status_code
[uploader] = [sink for sink in processor.sinks if isinstance(sink, Uploader)]
for _ in range(200):
    if uploader.stats()["captured_operations"] >= 1:
        break
    processor.force_flush(100)
report["flushed"] = uploader.flush(20)
served.stop()
print(json.dumps(report))
"""


def test_install_imports_no_optional_library_and_hooks_it_when_the_app_does() -> None:
    ingest, upstream = LoopbackIngest(), Upstream()
    try:
        env = {
            **os.environ,
            "REPROIT_ENDPOINT": ingest.url,
            "REPROIT_API_KEY": "k",
            "REPROIT_APP_ID": "late-imports",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, upstream.base, json.dumps(OPTIONAL)],
            cwd=ROOT,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stderr) == (0, "")
        report = json.loads(done.stdout)
        [received] = ingest.requests
        batch: dict[str, Any] = json.loads(received.body)
    finally:
        upstream.stop()
        ingest.stop()
    assert report == {
        "at_install": [],
        "flask_call_wrapped": True,
        "django_wsgi_wrapped": True,
        "django_asgi_imported": False,
        "seams": [
            "itsdangerous.serializer:Serializer.loads",
            "itsdangerous.timed:TimedSerializer.loads",
            "flask_login.login_manager:decode_cookie",
            "flask_login.login_manager:_create_identifier",
            "django.core.signing:Signer.unsign_object",
            "django.core.signing:Signer.unsign",
            "django.core.signing:TimestampSigner.unsign",
            "jwt.api_jwt:PyJWT.decode_complete",
            "jwt.api_jws:PyJWS.get_unverified_header",
            "jwt.api_jws:get_unverified_header",
            "jwt:get_unverified_header",
            "jose.jwt:decode",
            "jose.jwt:get_unverified_header",
            "jose.jwt:get_unverified_claims",
        ],
        "flask_error_receiver": ["_flask_exception"],
        "status": 502,
        "flushed": True,
    }
    upstream_host = upstream.base.removeprefix("http://")
    assert [_outline(event["event"]) for event in batch["events"]] == [
        ("operation-start", "GET /orders/7"),
        ("trigger", "GET /orders/7"),
        ("checkpoint", "determinism-envelope"),
        ("dependency", upstream_host),
        ("effect", "operation-return"),
        ("operation-end", "GET /orders/7"),
        ("observation", "backend-server-error:GET /orders/7"),
    ]
    assert batch["events"][-1]["event"]["failure"] == {
        "artifactIds": [],
        "authority": "runtime-diagnosis",
        "observation": "exception",
        "observationPoint": "GET /orders/7",
        "signature": "backend-server-error:GET /orders/7",
        "summary": "backend operation GET /orders/7 returned HTTP 502",
    }


def _outline(event: dict[str, Any]) -> tuple[str, str]:
    """An event's kind and what it is about (name, subject, or a failure's signature)."""
    about = event.get("name") or event.get("subject") or event["failure"]["signature"]
    return event["kind"], about


UNINSTALL_SCRIPT = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
from reproit_otel import _import_hooks, bootstrap

bootstrap.install()
report = {"waiting": _import_hooks.pending()}
bootstrap.uninstall()
report["after_uninstall"] = _import_hooks.pending()
report["finder_left"] = all(entry is not _import_hooks._FINDER for entry in sys.meta_path)
import flask
import jwt

report["flask_patched"] = "_reproit_original_call" in flask.Flask.__dict__
report["jwt_patched"] = hasattr(jwt.api_jwt.PyJWT.decode_complete, "__wrapped__")
report["flask_error_receivers"] = len(flask.got_request_exception.receivers)
print(json.dumps(report))
"""


def test_uninstall_drops_the_hooks_still_waiting_for_their_import() -> None:
    env = {
        **os.environ,
        "REPROIT_ENDPOINT": "http://127.0.0.1:9/v1/capture-batches",
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "late-imports",
    }
    done = subprocess.run(
        [sys.executable, "-c", UNINSTALL_SCRIPT],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == {
        "waiting": {
            "flask": 2,  # the middleware and the error receiver
            "starlette.applications": 1,
            "django.core.handlers.wsgi": 1,
            "django.core.handlers.asgi": 1,
            "itsdangerous.serializer": 1,
            "itsdangerous.timed": 1,
            "flask_login.login_manager": 1,
            "django.core.signing": 1,
            "django.contrib.auth": 1,
            "django.middleware.csrf": 1,
            "jwt.api_jwt": 1,
            "jwt.api_jws": 1,
            "jwt": 1,
            "jose.jwt": 1,
            "django.contrib.contenttypes.apps": 1,
            "django.core.signals": 1,
            "starlette.middleware.errors": 1,
        },
        "after_uninstall": {},
        "finder_left": True,
        "flask_patched": False,
        "jwt_patched": False,
        "flask_error_receivers": 0,
    }
