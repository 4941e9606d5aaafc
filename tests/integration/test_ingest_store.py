"""The ingest store on SQLite and on the session's PostgreSQL: grouping, dedupe, listing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reproit_otel.errors import ConfigurationError
from reproit_otel.ingest.facts import batch_facts, server_span_facts
from reproit_otel.ingest.store import Occurrence, Store, open_store
from reproit_otel.wire.canonical import canonical_json
from tests.integration.capture_helpers import built_batch
from tests.pgserver import fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ingest.db'}"
    return fresh_database(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


def _record(store: Store, received_ms: int, **options: object) -> str:
    batch = built_batch(**options)  # type: ignore[arg-type]
    result = store.record_batch(
        batch, batch_facts(batch), body=canonical_json(batch), received_ms=received_ms
    )
    assert result.duplicate is False
    return result.occurrence_id


def test_batches_with_one_signature_group_into_one_occurrence(store: Store) -> None:
    first = _record(store, 1000, batch_number=1)
    second = _record(store, 3000, batch_number=2, build="1.2.4", commit="def456")
    assert first == second
    assert store.get_occurrence(first) == Occurrence(
        id=first,
        project_id="orders-api",
        signature="backend-server-error:POST /orders",
        operation="POST /orders",
        oracle="backend-server-error",
        status=500,
        summary="backend operation POST /orders returned HTTP 500",
        count=2,
        batch_count=2,
        trace_count=0,
        has_exchanges=True,
        first_seen_ms=1000,
        last_seen_ms=3000,
        build="1.2.4",
        commit="def456",
        fingerprint="HTTP 500",
    )
    latest = store.latest_batch(first)
    assert latest is not None
    assert latest["batchId"] == "cb-python-otel-1700000000500-2"


def test_the_same_batch_twice_is_counted_once(store: Store) -> None:
    batch = built_batch()
    facts = batch_facts(batch)
    body = canonical_json(batch)
    first = store.record_batch(batch, facts, body=body, received_ms=10)
    again = store.record_batch(batch, facts, body=body, received_ms=20)
    assert (again.occurrence_id, again.duplicate) == (first.occurrence_id, True)
    occurrence = store.get_occurrence(first.occurrence_id)
    assert occurrence is not None
    assert (occurrence.count, occurrence.last_seen_ms) == (1, 10)


def test_equal_batch_ids_with_different_bytes_are_two_failures(store: Store) -> None:
    # Two forked workers may number their batches alike within one millisecond.
    first = built_batch(trace_id="cap-1-1")
    second = built_batch(trace_id="cap-2-1")
    assert first["batchId"] == second["batchId"]
    for batch in (first, second):
        store.record_batch(batch, batch_facts(batch), body=canonical_json(batch), received_ms=5)
    occurrence = store.get_occurrence(batch_facts(first).occurrence_id)
    assert occurrence is not None
    assert occurrence.count == 2


def test_server_spans_count_on_the_same_occurrence_without_a_capsule(store: Store) -> None:
    facts = server_span_facts(
        project_id="orders-api", operation="GET /quote", status=503, build=None, commit=None
    )
    result = store.record_server_span(facts, trace_id="ab" * 16, span_id="cd" * 8, received_ms=7)
    again = store.record_server_span(facts, trace_id="ab" * 16, span_id="cd" * 8, received_ms=8)
    assert again.duplicate is True
    occurrence = store.get_occurrence(result.occurrence_id)
    assert occurrence is not None
    assert occurrence.to_json() == {
        "id": result.occurrence_id,
        "projectId": "orders-api",
        "signature": "backend-server-error:GET /quote",
        "operation": "GET /quote",
        "oracle": "backend-server-error",
        "status": 503,
        "summary": "backend operation GET /quote returned HTTP 503",
        "count": 1,
        "batches": 0,
        "traces": 1,
        "hasExchanges": False,
        "capsuleAvailable": False,
        "firstSeen": "1970-01-01T00:00:00.007Z",
        "lastSeen": "1970-01-01T00:00:00.007Z",
        "build": None,
        "commit": None,
        "fingerprint": "HTTP 503",
    }
    assert store.latest_batch(result.occurrence_id) is None


def test_listing_filters_and_pages_most_recent_first(store: Store) -> None:
    orders = _record(store, 100, batch_number=1)
    refunds = _record(store, 200, operation="POST /refunds", batch_number=2)
    quotes = _record(store, 300, operation="GET /quote", status=503, batch_number=3)
    page = store.list_occurrences()
    assert [item.id for item in page.items] == [quotes, refunds, orders]
    assert page.total == 3
    assert [item.id for item in store.list_occurrences(status=503).items] == [quotes]
    assert [item.id for item in store.list_occurrences(operation="POST /orders").items] == [orders]
    second = store.list_occurrences(limit=2, offset=2)
    assert ([item.id for item in second.items], second.total) == ([orders], 3)
    assert store.list_occurrences(project_id="elsewhere").items == []
    assert store.get_occurrence("occ_missing") is None


def test_concurrent_writers_lose_no_count(store_url: str) -> None:
    # Several ingest instances on one database: separate stores, many threads each.
    stores = [open_store(store_url) for _ in range(2)]
    errors: list[BaseException] = []

    def writer(store: Store, worker: int) -> None:
        try:
            for index in range(10):
                batch = built_batch(batch_number=worker * 100 + index)
                store.record_batch(batch, batch_facts(batch), body=canonical_json(batch))
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [
        threading.Thread(target=writer, args=(stores[worker % 2], worker)) for worker in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    occurrence = stores[0].get_occurrence(batch_facts(built_batch()).occurrence_id)
    assert occurrence is not None
    assert (occurrence.count, occurrence.batch_count) == (60, 60)
    for opened in stores:
        opened.close()


@pytest.mark.parametrize(
    "url", ["sqlite:///", "sqlite:///:memory:", "mysql://localhost/db", "ingest.db"]
)
def test_unusable_db_urls_are_refused_with_the_expected_forms(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        open_store(url)
    assert "sqlite:///path" in str(raised.value)
