"""Retention prunes old batch bodies and keeps every occurrence's counts exact.

On SQLite and on PostgreSQL: the newest ``retain_batches`` bodies of an occurrence are kept,
older ones and those past ``retain_days`` are emptied, the counts never move, a retried
upload of a pruned batch is still a duplicate, and an occurrence whose bodies are all gone
answers ``410`` for its capsule. End to end, ``reproit-otel serve --retain-batches 1`` keeps
one body per occurrence in its SQLite file.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.ingest.facts import batch_facts
from reproit_otel.ingest.retention import RetentionRules
from reproit_otel.ingest.store import Store, open_store
from reproit_otel.wire.artifacts import capsule_artifact, naming_artifact
from reproit_otel.wire.canonical import canonical_json
from tests.integration.capture_helpers import built_batch
from tests.integration.served_ingest import ServedIngest
from tests.pgserver import fresh_database

DAY_MS = 86_400_000
NOW_MS = 1_800_000_000_000


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ingest.db'}"
    else:
        url = fresh_database(request.getfixturevalue("postgres_dsn"))
    opened = open_store(url)
    yield opened
    opened.close()


def _record(store: Store, number: int, received_ms: int, operation: str = "POST /orders") -> str:
    return _record_batch(store, built_batch(operation, batch_number=number), received_ms)


def _record_batch(store: Store, batch: dict[str, Any], received_ms: int) -> str:
    result = store.record_batch(
        batch, batch_facts(batch), body=canonical_json(batch), received_ms=received_ms
    )
    return result.occurrence_id


def _kept_batch_ids(store: Store, occurrence_id: str) -> list[str]:
    with store._transaction() as cursor:
        cursor.execute(
            store._sql(
                "SELECT batch_id FROM reproit_batches WHERE occurrence_id = ? AND body <> '' "
                "ORDER BY seq"
            ),
            (occurrence_id,),
        )
        return [str(row[0]) for row in cursor.fetchall()]


def test_the_newest_bodies_are_kept_and_the_counts_never_move(store: Store) -> None:
    store.retention = RetentionRules(retain_batches=2, retain_days=0)
    first = built_batch("POST /orders", batch_number=1)
    occurrence = _record_batch(store, first, NOW_MS)
    for number in range(2, 6):
        _record(store, number, NOW_MS + number)
    assert _kept_batch_ids(store, occurrence) == [
        f"cb-python-otel-1700000000500-{n}" for n in (4, 5)
    ]
    found = store.get_occurrence(occurrence)
    assert found is not None and (found.count, found.batch_count) == (5, 5)
    latest = store.latest_batch(occurrence)
    assert latest is not None and latest["batchId"] == "cb-python-otel-1700000000500-5"

    # A retried upload of a pruned batch is the same batch: not stored, not counted again.
    result = store.record_batch(first, batch_facts(first), body=canonical_json(first))
    assert result.duplicate is True
    found = store.get_occurrence(occurrence)
    assert found is not None and found.count == 5


def test_bodies_past_the_days_go_and_the_capsule_answers_410(store: Store) -> None:
    occurrence = _record(store, 1, NOW_MS - 40 * DAY_MS, "POST /old")
    recent = _record(store, 2, NOW_MS - 1 * DAY_MS, "POST /recent")
    store.retention = RetentionRules(retain_batches=0, retain_days=30)
    assert store.prune_batches(now_ms=NOW_MS) == 1
    assert store.prune_batches(now_ms=NOW_MS) == 0  # nothing left to prune
    assert store.latest_batch(occurrence) is None
    assert store.latest_batch(recent) is not None
    old = store.get_occurrence(occurrence)
    assert old is not None and (old.count, old.batch_count) == (1, 1)


def test_serve_keeps_one_body_per_occurrence(tmp_path: Path) -> None:
    database = tmp_path / "ingest.db"
    served = ServedIngest(f"sqlite:///{database}", "--api-key", "k", "--retain-batches", "1")
    headers = {"authorization": "Bearer k", "content-type": "application/json"}
    try:
        for number in (1, 2, 3):
            body = canonical_json(built_batch("POST /orders", batch_number=number)).encode()
            sent = httpx.post(
                f"{served.base_url}/v1/capture-batches", content=body, headers=headers
            )
            assert sent.status_code == 202
        occurrence = sent.json()["occurrenceId"]
        shown = httpx.get(f"{served.base_url}/v1/occurrences/{occurrence}", headers=headers)
        assert (shown.json()["count"], shown.json()["batches"]) == (3, 3)
        capsule = httpx.get(
            f"{served.base_url}/v1/occurrences/{occurrence}/capsule", headers=headers
        )
        assert capsule.status_code == 200
    finally:
        assert served.stop() == 0
    with sqlite3.connect(database) as connection:
        rows = connection.execute(
            "SELECT batch_id, body <> '' FROM reproit_batches ORDER BY seq"
        ).fetchall()
    assert rows == [
        ("cb-python-otel-1700000000500-1", 0),
        ("cb-python-otel-1700000000500-2", 0),
        ("cb-python-otel-1700000000500-3", 1),
    ]


def test_a_fully_pruned_occurrence_answers_410(tmp_path: Path) -> None:
    database = tmp_path / "ingest.db"
    seeded = open_store(f"sqlite:///{database}")
    occurrence = _record(seeded, 1, 1_000)  # received in 1970: past any retention
    seeded.close()
    served = ServedIngest(f"sqlite:///{database}", "--api-key", "k", "--retain-days", "30")
    try:
        capsule = httpx.get(
            f"{served.base_url}/v1/occurrences/{occurrence}/capsule",
            headers={"authorization": "Bearer k"},
        )
    finally:
        assert served.stop() == 0
    assert (capsule.status_code, capsule.json()) == (
        410,
        {
            "error": {
                "rule": "retention",
                "field": "id",
                "message": f"the batches of occurrence {occurrence} were pruned by the ingest's "
                "retention (--retain-batches, --retain-days); its counts are kept, its capsule "
                "is not",
            }
        },
    )


# --- artifacts follow the batches that name them ------------------------------------------------

HOUR_MS = 3_600_000


def _artifact(operation: str, number: int) -> tuple[bytes, dict[str, Any]]:
    """The capsule artifact (bytes, descriptor) of batch ``number`` of ``operation`` (the
    batch :func:`_naming` gives names it as its own)."""
    made = capsule_artifact(built_batch(operation, batch_number=number))
    assert made is not None
    return made


def _naming(operation: str, number: int, descriptor: dict[str, Any]) -> dict[str, Any]:
    return naming_artifact(built_batch(operation, batch_number=number), descriptor, {})


def _artifact_ids(store: Store) -> set[str]:
    with store._transaction() as cursor:
        cursor.execute(store._sql("SELECT id FROM reproit_artifacts"))
        return {str(row[0]) for row in cursor.fetchall()}


def test_artifacts_no_kept_batch_names_are_pruned_and_named_ones_never(store: Store) -> None:
    store.retention = RetentionRules(retain_batches=1, retain_days=0)
    old = NOW_MS - 2 * HOUR_MS
    (a_data, a), (b_data, b), (c_data, c), (d_data, d), (e_data, e) = (
        _artifact(operation, number)
        for operation, number in [
            ("POST /orders", 1),
            ("POST /orders", 2),
            ("GET /c", 4),
            ("POST /other", 3),
            ("GET /e", 5),
        ]
    )
    for data, descriptor, received in [
        (a_data, a, old),
        (b_data, b, NOW_MS - 40 * DAY_MS),  # old, but named by a kept batch
        (c_data, c, old),  # named by nothing
        (d_data, d, old),
        (e_data, e, NOW_MS - 60_000),  # named by nothing yet: its batch may be on its way
    ]:
        assert store.store_artifact(
            descriptor["id"], descriptor["mediaType"], data, received_ms=received
        )
    orders = _record_batch(store, _naming("POST /orders", 1, a), old)
    _record_batch(store, _naming("POST /orders", 2, b), old + 1)  # prunes batch 1's body
    other = _record_batch(store, _naming("POST /other", 3, d), old + 2)

    assert store.prune_artifacts(now_ms=NOW_MS) == 2
    assert _artifact_ids(store) == {b["id"], d["id"], e["id"]}
    assert store.prune_artifacts(now_ms=NOW_MS) == 0
    for occurrence, (count, batches) in [(orders, (2, 2)), (other, (1, 1))]:
        found = store.get_occurrence(occurrence)
        assert found is not None and (found.count, found.batch_count) == (count, batches)
    latest = store.latest_batch(orders)
    assert latest is not None and store.whole_capsule(latest) == b_data

    # Sent again, an old artifact's grace starts over; a store keeping every batch keeps all.
    assert store.store_artifact(c["id"], c["mediaType"], c_data, received_ms=old) is True
    assert store.store_artifact(c["id"], c["mediaType"], c_data, received_ms=NOW_MS) is False
    assert store.prune_artifacts(now_ms=NOW_MS) == 0
    store.retention = RetentionRules(retain_batches=0, retain_days=0)
    assert store.prune_artifacts(now_ms=NOW_MS + 2 * HOUR_MS) == 0
    assert _artifact_ids(store) == {b["id"], c["id"], d["id"], e["id"]}


def test_serve_deletes_the_artifacts_of_pruned_batches(tmp_path: Path) -> None:
    database = tmp_path / "ingest.db"
    headers = {"authorization": "Bearer k"}
    (a_data, a), (b_data, b), (c_data, c) = (
        _artifact(operation, number)
        for operation, number in [("POST /orders", 1), ("POST /orders", 2), ("GET /c", 3)]
    )

    def put(data: bytes, descriptor: dict[str, Any]) -> None:
        sent = httpx.put(
            f"{served.base_url}/v1/artifacts/{descriptor['id']}",
            content=data,
            headers={**headers, "content-type": descriptor["mediaType"]},
        )
        assert sent.status_code in (200, 201), sent.text

    def post(batch: dict[str, Any]) -> str:
        sent = httpx.post(
            f"{served.base_url}/v1/capture-batches",
            content=canonical_json(batch).encode(),
            headers={**headers, "content-type": "application/json"},
        )
        assert sent.status_code == 202, sent.text
        return str(sent.json()["occurrenceId"])

    flags = ("--api-key", "k", "--retain-batches", "1")
    served = ServedIngest(f"sqlite:///{database}", *flags)
    try:
        put(a_data, a)
        occurrence = post(_naming("POST /orders", 1, a))
        put(b_data, b)
        post(_naming("POST /orders", 2, b))  # batch 1's body goes: nothing names `a` now
        put(c_data, c)  # its batch never came
    finally:
        assert served.stop() == 0
    with sqlite3.connect(database) as connection:  # two hours pass
        connection.execute(
            f"UPDATE reproit_artifacts SET received_ms = received_ms - {2 * HOUR_MS}"
        )

    served = ServedIngest(f"sqlite:///{database}", *flags)
    try:
        line = "reproit-otel serve: deleted 2 artifact(s) no kept batch names"
        deadline = time.monotonic() + 20
        while line not in served.lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line in served.lines, served.lines
        shown = httpx.get(f"{served.base_url}/v1/occurrences/{occurrence}", headers=headers)
        capsule = httpx.get(
            f"{served.base_url}/v1/occurrences/{occurrence}/capsule", headers=headers
        )
    finally:
        assert served.stop() == 0
    assert (shown.json()["count"], shown.json()["batches"]) == (2, 2)
    assert (capsule.status_code, capsule.content) == (200, b_data)
    with sqlite3.connect(database) as connection:
        kept = {row[0] for row in connection.execute("SELECT id FROM reproit_artifacts")}
    assert kept == {b["id"]}
