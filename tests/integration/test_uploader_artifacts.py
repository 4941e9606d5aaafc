"""An operation too big for one batch reaches a real ``reproit-otel serve`` whole, as an artifact.

The uploader sends the whole capsule (``PUT /v1/artifacts/<id>``) before the bounded batch that
names it; the ingest checks the bytes against the id, stores them once, and serves them as the
occurrence's capsule. Past the budget, or to an ingest with no artifact route, the bounded
batch goes as it is, ``partial``, and the loss is counted.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.capture.uploader import HEAVY_QUEUE_LIMIT, Uploader
from reproit_otel.wire.artifacts import CAPSULE_MEDIA_TYPE
from reproit_otel.wire.capsule import capsule_bytes, capsule_from_batch, validate_capsule
from reproit_otel.wire.trace import BackendTrace, TraceContext
from reproit_otel.wire.validate import validate_capture_batch
from tests.integration.capture_helpers import SEED, built_batch, failing_trace, http_exchange
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.served_ingest import ServedIngest
from tests.integration.test_uploader import environment, settings

KEY = "artifact-key"
CALLS = 40
BODY = "x" * 6000  # 40 exchanges of 6 KB: far past the 48 KiB batch bound


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServedIngest, Path]]:
    database = tmp_path / "ingest.db"
    ingest = ServedIngest(f"sqlite:///{database}", "--api-key", KEY)
    try:
        yield ingest, database
    finally:
        assert ingest.stop() == 0


def _rows(database: Path, sql: str) -> list[Any]:
    with sqlite3.connect(database) as connection:
        return list(connection.execute(sql))


def _auth() -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}"}


def _only_occurrence(base_url: str) -> str:
    [row] = httpx.get(f"{base_url}/v1/occurrences", headers=_auth()).json()["occurrences"]
    identifier: str = row["id"]
    return identifier


def test_a_heavy_operation_is_uploaded_whole_and_pulled_whole(
    served: tuple[ServedIngest, Path],
) -> None:
    ingest, database = served
    uploader = Uploader(
        settings(
            f"{ingest.base_url}/v1/capture-batches", api_key=KEY, capture_budget=4 * 1024 * 1024
        ),
        environment,
    )
    uploader.record(failing_trace(calls=CALLS, body=BODY))
    assert uploader.flush(20) is True
    stats = uploader.stats()
    uploader.close()
    assert (stats["sent_batches"], stats["artifacts_sent"], stats["capture_dropped_effects"]) == (
        1,
        1,
        0,
    )

    [(body,)] = _rows(database, "SELECT body FROM reproit_batches")
    batch = json.loads(body)
    assert validate_capture_batch(batch) == []  # the reference validator, portable included
    assert len(body.encode()) < 64 * 1024
    [artifact] = batch["artifacts"]
    [(stored_id, media_type, size, text)] = _rows(
        database, "SELECT id, media_type, bytes, body FROM reproit_artifacts"
    )
    data = text.encode()
    assert artifact == {
        "id": stored_id,
        "kind": "request-trace",
        "mediaType": CAPSULE_MEDIA_TYPE,
        "bytes": len(data),
        "policy": "exportable",
        "redaction": "redacted-at-source",
        "collection": "flight-recorder",
    }
    assert (media_type, size) == (CAPSULE_MEDIA_TYPE, len(data))
    assert stored_id == "sha256:" + hashlib.sha256(data).hexdigest()
    [observation] = [e for e in batch["events"] if e["event"]["kind"] == "observation"]
    assert observation["event"]["failure"]["artifactIds"] == [stored_id]
    network = next(c for c in batch["capabilities"] if c["capability"] == "network")
    assert network == {
        "capability": "network",
        "completeness": "complete",
        "detail": f"effects past the batch bound are in artifact {stored_id}",
    }

    occurrence = _only_occurrence(ingest.base_url)
    pulled = httpx.get(f"{ingest.base_url}/v1/occurrences/{occurrence}/capsule", headers=_auth())
    assert pulled.content == data
    capsule = validate_capsule(pulled.json())
    calls = [e["exchange"]["request"]["url"] for e in capsule["events"] if e["kind"] == "effect"]
    assert calls == [f"http://payments:8080/charge/{index}" for index in range(CALLS)]


def test_an_artifact_is_stored_once_and_an_altered_one_is_refused(
    served: tuple[ServedIngest, Path],
) -> None:
    ingest, database = served
    capsule = capsule_from_batch(built_batch("GET /x"))
    assert capsule is not None
    data = capsule_bytes(capsule)
    identifier = "sha256:" + hashlib.sha256(data).hexdigest()
    url = f"{ingest.base_url}/v1/artifacts/{identifier}"
    headers = {**_auth(), "content-type": CAPSULE_MEDIA_TYPE}
    first = httpx.put(url, content=data, headers=headers)
    second = httpx.put(url, content=data, headers=headers)
    assert (first.status_code, first.json()) == (
        201,
        {"stored": True, "id": identifier, "bytes": len(data)},
    )
    assert (second.status_code, second.json()) == (
        200,
        {"stored": False, "id": identifier, "bytes": len(data)},
    )
    assert _rows(database, "SELECT COUNT(*) FROM reproit_artifacts") == [(1,)]

    altered = data.replace(b"GET /x", b"GET /y")
    refused = httpx.put(url, content=altered, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["error"]["rule"] == "artifact-hash"
    unkeyed = httpx.put(url, content=data, headers={"content-type": CAPSULE_MEDIA_TYPE})
    assert unkeyed.status_code == 401
    other_type = httpx.put(url, content=data, headers={**_auth(), "content-type": "text/plain"})
    assert other_type.status_code == 415
    assert _rows(database, "SELECT COUNT(*) FROM reproit_artifacts") == [(1,)]


def _partial_network(batch: dict[str, Any], dropped: int) -> None:
    network = next(c for c in batch["capabilities"] if c["capability"] == "network")
    assert network == {
        "capability": "network",
        "completeness": "partial",
        "detail": f"{dropped} effect event(s) dropped to fit the 49152-byte capture payload bound",
    }
    assert batch["artifacts"] == []


def test_an_ingest_without_artifacts_gets_the_bounded_batch_and_the_loss_is_counted() -> None:
    ingest = LoopbackIngest()  # answers POST only: a PUT gets 501
    try:
        uploader = Uploader(settings(ingest.url, capture_budget=4 * 1024 * 1024), environment)
        uploader.record(failing_trace(calls=CALLS, body=BODY))
        assert uploader.flush(20) is True
        stats = uploader.stats()
        uploader.close()
    finally:
        ingest.stop()
    [batch_request] = ingest.requests  # the refused PUT is not kept: only POSTs are
    batch = json.loads(batch_request.body)
    dropped = stats["capture_dropped_effects"]
    assert dropped > 0
    assert (stats["artifacts_refused"], stats["artifacts_sent"], stats["sent_batches"]) == (1, 0, 1)
    _partial_network(batch, dropped)


def test_past_the_budget_the_batch_is_honestly_partial(served: tuple[ServedIngest, Path]) -> None:
    ingest, database = served
    uploader = Uploader(
        settings(f"{ingest.base_url}/v1/capture-batches", api_key=KEY, capture_budget=100_000),
        environment,
    )
    uploader.record(failing_trace(calls=CALLS, body=BODY))
    assert uploader.flush(20) is True
    stats = uploader.stats()
    uploader.close()
    assert (stats["capture_over_budget"], stats["artifacts_sent"]) == (1, 0)
    [(body,)] = _rows(database, "SELECT body FROM reproit_batches")
    _partial_network(json.loads(body), stats["capture_dropped_effects"])
    assert _rows(database, "SELECT COUNT(*) FROM reproit_artifacts") == [(0,)]


def test_the_page_lists_every_exchange_a_page_at_a_time(
    served: tuple[ServedIngest, Path],
) -> None:
    ingest, _ = served
    uploader = Uploader(
        settings(
            f"{ingest.base_url}/v1/capture-batches", api_key=KEY, capture_budget=4 * 1024 * 1024
        ),
        environment,
    )
    uploader.record(failing_trace(calls=150, body="y" * 1000))
    assert uploader.flush(20) is True
    assert uploader.stats()["artifacts_sent"] == 1
    uploader.close()
    occurrence = _only_occurrence(ingest.base_url)
    url = f"{ingest.base_url}/occurrences/{occurrence}"
    first = httpx.get(url, headers=_auth()).text
    second = httpx.get(url, params={"page": "2"}, headers=_auth()).text
    numbers = re.compile(r'<span class="n">#(\d+)</span>')
    assert [int(n) for n in numbers.findall(first)] == list(range(1, 101))
    assert [int(n) for n in numbers.findall(second)] == list(range(101, 151))
    assert "exchanges 101 to 150 of 150" in second
    assert "/charge/149" in second
    # The download is the whole capsule too.
    download = httpx.get(f"{url}/capsule", headers=_auth())
    pulled = httpx.get(f"{ingest.base_url}/v1/occurrences/{occurrence}/capsule", headers=_auth())
    assert download.content == pulled.content
    assert len(validate_capsule(download.json())["events"]) == 152


def _heavy_trace(calls: int) -> BackendTrace:
    context = TraceContext(trace_id="cap-heavy", capture_envelope=True, replay_seed=SEED)
    trace = BackendTrace.begin(context, "GET /report", input=None, max_events=calls + 2)
    for index in range(calls):
        trace.effect(
            "call",
            resource="payments:8080",
            key=f"GET /item/{index}",
            exchange=http_exchange(f"/item/{index}", body="ok"),
        )
    trace.finish({"error": "report failed"}, 500, False, True)
    return trace


def test_at_most_a_few_heavy_operations_wait_in_the_queue() -> None:
    ingest = LoopbackIngest()
    try:
        uploader = Uploader(
            settings(ingest.url, capture_budget=4 * 1024 * 1024, flush_interval_ms=600_000),
            environment,
        )
        for _ in range(HEAVY_QUEUE_LIMIT + 2):
            assert uploader.record(_heavy_trace(300)) is True
        uploader.record(failing_trace(calls=1))  # an ordinary one is not counted among them
        stats = uploader.stats()
        uploader.close(timeout=0)
    finally:
        ingest.stop()
    assert (stats["queued"], stats["dropped_operations"]) == (HEAVY_QUEUE_LIMIT + 1, 2)
