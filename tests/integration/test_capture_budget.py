"""A heavy operation's memory is bounded while it is recorded, not only at upload.

A Flask view served on loopback, recorded by the real span processor and ``requests``
recorder with a small capture budget (``REPROIT_CAPTURE_BUDGET``), makes twenty calls to a
real loopback upstream answering 10,000 bytes each, then fails. The operation keeps the
exchanges that fit the budget (by the body bytes each keeps: 8,193 of a body over the 8 KiB
bound) and only counts the rest; the real uploader then sends the bounded batch, ``partial``
with those counts, valid for the reference validator.

The event cap (``REPROIT_CAPTURE_MAX_EVENTS``) is met the same way: a view making more calls
than a small cap allows still finishes, its later calls counted by kind, and the uploader
built from the same configuration delivers it to a real ``reproit-otel serve``, ``partial``
with the exact count, where it is listed as an occurrence.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask, jsonify
from opentelemetry.instrumentation.flask import FlaskInstrumentor

from reproit_otel.capture.uploader import Uploader
from reproit_otel.config import read_config
from reproit_otel.wire.validate import validate_capture_batch
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.pipeline_support import ServedWSGI, pipeline
from tests.integration.served_ingest import ServedIngest
from tests.integration.test_uploader import environment, settings
from tests.integration.upstream import Upstream

BUDGET = 50_000
CALLS = 20
KEPT_PER_CALL = 8193  # a body over the 8 KiB bound keeps one byte more than fits
HELD = BUDGET // KEPT_PER_CALL  # 6 exchanges fit


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


def test_past_the_budget_exchanges_are_counted_not_held(upstream: Upstream) -> None:
    app = Flask("budget")

    @app.get("/heavy")
    def heavy() -> Any:
        sizes = [len(requests.get(f"{upstream.base}/big", timeout=5).content) for _ in range(CALLS)]
        return jsonify({"sizes": sizes}), 500

    environ = {"REPROIT_CAPTURE_BUDGET": str(BUDGET)}
    with pipeline(environ) as rig:
        FlaskInstrumentor().instrument_app(app, tracer_provider=rig.provider)
        server = ServedWSGI(app)
        try:
            answer = requests.get(f"{server.base}/heavy", timeout=30)
            [trace] = rig.sink.wait_for(1)
        finally:
            server.stop()
            FlaskInstrumentor().uninstrument_app(app)
    assert (answer.status_code, answer.json()) == (500, {"sizes": [10_000] * CALLS})
    assert trace.unheld_effects == {"call": CALLS - HELD}
    assert trace.capture_budget == BUDGET
    effects = [e for e in trace.events if e["kind"] == "effect"]
    assert [e["key"] for e in effects] == ["GET /big"] * HELD
    returned = trace.events[-1]
    assert (returned["kind"], returned["status"], returned["effectsComplete"]) == (
        "return",
        500,
        True,
    )

    ingest = LoopbackIngest()
    try:
        uploader = Uploader(settings(ingest.url, capture_budget=BUDGET), environment)
        assert uploader.record(trace) is True
        assert uploader.flush(10)
        [received] = ingest.wait_for(1)
        stats = uploader.stats()
        uploader.close()
    finally:
        ingest.stop()
    batch = json.loads(received.body)
    validate_capture_batch(batch)
    [network] = [c for c in batch["capabilities"] if c["capability"] == "network"]
    # The six kept fit the batch (a body over 8 KiB travels as its identity): only the
    # exchanges past the budget are missing, and counted.
    note = f"{CALLS - HELD} effect event(s) past the {BUDGET}-byte capture budget not kept"
    assert network == {"capability": "network", "completeness": "partial", "detail": note}
    stats_wanted = {"capture_dropped_effects": CALLS - HELD, "capture_over_budget": 1}
    assert {name: stats[name] for name in stats_wanted} == stats_wanted
    assert (stats["sent_batches"], stats["artifacts_sent"]) == (1, 0)


EVENT_CAP = 256  # the smallest cap the configuration takes
CAPPED_CALLS = 300
KEPT_CALLS = EVENT_CAP - 2  # the start and the return take two of the events
KEY = "cap-key"


def test_past_the_event_cap_exchanges_are_counted_and_the_failure_is_sent(
    upstream: Upstream, tmp_path: Path
) -> None:
    database = tmp_path / "ingest.db"
    ingest = ServedIngest(f"sqlite:///{database}", "--api-key", KEY)
    app = Flask("capped")

    @app.get("/many")
    def many() -> Any:
        with requests.Session() as session:
            rates = [
                session.get(f"{upstream.base}/json", timeout=5).json()["rate"]
                for _ in range(CAPPED_CALLS)
            ]
        return jsonify({"total": sum(rates)}), 500

    environ = {
        "REPROIT_CAPTURE_MAX_EVENTS": str(EVENT_CAP),
        "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
        "REPROIT_API_KEY": KEY,
        "REPROIT_APP_ID": "capped",
    }
    try:
        with pipeline(environ) as rig:
            FlaskInstrumentor().instrument_app(app, tracer_provider=rig.provider)
            server = ServedWSGI(app)
            try:
                answer = requests.get(f"{server.base}/many", timeout=60)
                [trace] = rig.sink.wait_for(1)
            finally:
                server.stop()
                FlaskInstrumentor().uninstrument_app(app)
        # The application's answer is its own, whatever the capture met.
        assert (answer.status_code, answer.json()) == (500, {"total": 1.5 * CAPPED_CALLS})
        assert (trace.capped_effects, trace.unheld_effects) == (
            {"call": CAPPED_CALLS - KEPT_CALLS},
            {},
        )
        events = trace.events
        assert len(events) == EVENT_CAP
        assert [e["key"] for e in events if e["kind"] == "effect"] == ["GET /json"] * KEPT_CALLS
        returned = events[-1]
        assert (returned["kind"], returned["status"], returned["effectsComplete"]) == (
            "return",
            500,
            True,
        )

        uploader = Uploader.from_config(read_config(environ), environment)
        assert uploader is not None
        assert uploader.record(trace) is True
        assert uploader.flush(20)
        stats = uploader.stats()
        uploader.close()
        listed = requests.get(
            f"{ingest.base_url}/v1/occurrences",
            headers={"authorization": f"Bearer {KEY}"},
            timeout=5,
        ).json()["occurrences"]
    finally:
        assert ingest.stop() == 0
    with sqlite3.connect(database) as connection:
        [(body,)] = list(connection.execute("SELECT body FROM reproit_batches"))
    batch = json.loads(body)
    validate_capture_batch(batch)
    assert len(listed) == 1
    sent = [e for e in batch["events"] if e["event"]["kind"] == "dependency"]
    # The 48 KiB bound drops some of the kept calls too: each reason has its own count.
    bounded = KEPT_CALLS - len(sent)
    assert bounded > 0
    note = (
        f"{bounded} effect event(s) dropped to fit the 49152-byte capture payload bound; "
        f"{CAPPED_CALLS - KEPT_CALLS} effect event(s) past the {EVENT_CAP}-event capture cap "
        "not kept"
    )
    [network] = [c for c in batch["capabilities"] if c["capability"] == "network"]
    assert network == {"capability": "network", "completeness": "partial", "detail": note}
    counted = {name: stats[name] for name in ("capture_dropped_effects", "capture_over_event_cap")}
    assert counted == {
        "capture_dropped_effects": CAPPED_CALLS - len(sent),
        "capture_over_event_cap": 1,
    }
    assert (stats["sent_batches"], stats["artifacts_sent"], stats["capture_over_budget"]) == (
        1,
        0,
        0,
    )
