"""A call recorded through a library outside the tested versions makes its operation incomplete.

A Flask app behind a real WSGI server calls a real loopback upstream with requests, on the
real capture pipeline. Installing an out-of-range urllib3 next to the in-range one this suite
needs is impractical, so only the version lookup is faked: ``importlib.metadata.version``
answers ``1.25.11`` for urllib3 (what ``pip install urllib3==1.25.11`` would make it answer);
the calls themselves go through the installed urllib3. ``test_doctor_versions.py`` shows
the same release named by ``doctor`` and at start-up.
"""

from __future__ import annotations

import importlib.metadata
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import requests
from flask import Flask, jsonify
from opentelemetry.instrumentation.flask import FlaskInstrumentor

from reproit_otel.wire.batch import capture_eligibility
from tests.integration.pipeline_support import Pipeline, ServedWSGI, pipeline
from tests.integration.upstream import Upstream

REASON = "urllib3 1.25.11 is outside the tested versions (urllib3>=1.26,<3, docs/versions.md)"


def make_app(upstream: str) -> Flask:
    app = Flask("quotes")

    @app.get("/quote")
    def quote() -> Any:
        rate = requests.get(f"{upstream}/json", timeout=5).json()["rate"]
        return jsonify({"error": "quote failed", "rate": rate}), 500

    @app.get("/boom")
    def boom() -> Any:
        return jsonify({"error": "no call made"}), 500

    return app


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@contextmanager
def served(upstream: Upstream, fake_urllib3: str | None) -> Iterator[tuple[Pipeline, ServedWSGI]]:
    real = importlib.metadata.version

    def version(distribution: str) -> str:
        if fake_urllib3 is not None and distribution == "urllib3":
            return fake_urllib3
        return real(distribution)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importlib.metadata, "version", version)
        with pipeline() as active:
            app = make_app(upstream.base)
            FlaskInstrumentor().instrument_app(app, tracer_provider=active.provider)
            server = ServedWSGI(app)
            try:
                yield active, server
            finally:
                server.stop()
                FlaskInstrumentor().uninstrument_app(app)


def _get(base: str, path: str) -> int:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_a_call_through_an_out_of_range_urllib3_makes_the_operation_incomplete(
    upstream: Upstream,
) -> None:
    with served(upstream, "1.25.11") as (active, server):
        assert _get(server.base, "/quote") == 500
        [trace] = active.sink.wait_for(1)
        # The call is still recorded; the operation says it cannot be trusted whole (D4).
        kinds = [(event["kind"], event.get("effect")) for event in trace.events]
        assert kinds == [("start", None), ("effect", "call"), ("return", None)]
        assert trace.events[-1]["effectsComplete"] is False
        assert capture_eligibility(trace.events) == (False, "effects-incomplete")
        assert active.processor.stats()["incomplete_reasons"] == {REASON: 1}

        # An operation that makes no requests call is not touched by it.
        assert _get(server.base, "/boom") == 500
        _, healthy = active.sink.wait_for(2)
        assert healthy.events[-1]["effectsComplete"] is True
        assert active.processor.stats()["incomplete_reasons"] == {REASON: 1}


def test_the_same_call_through_an_in_range_urllib3_is_complete(upstream: Upstream) -> None:
    with served(upstream, None) as (active, server):
        assert _get(server.base, "/quote") == 500
        [trace] = active.sink.wait_for(1)
        assert trace.events[-1]["effectsComplete"] is True
        assert capture_eligibility(trace.events) == (True, None)
        assert active.processor.stats()["incomplete_reasons"] == {}
