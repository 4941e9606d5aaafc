"""An ingest that refuses, hangs or fails never blocks or changes a request.

The reliability service runs with reproit-otel capturing and uploading to an ingest in each
bad state. Every response and application exception must be exactly what the service gives
without reproit-otel, and the uploader's counters must say what happened to each capture.
Nothing here measures time: a blocked request would show up as a request that does not
complete while the ingest still holds an upload unanswered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from reproit_otel.capture.uploader import Uploader
from tests.integration.loopback_ingest import HANG, LoopbackIngest, down_url
from tests.integration.upstream import Upstream
from tests.reliability.harness import Served, exercise, fetch, served

pytestmark = pytest.mark.postgres

# Each exercise() run makes two capturable failures (/fail 502 and /refused 503), four
# healthy requests and one failure without any recorded exchange (/raise).
FAILURES_PER_RUN = 2
INELIGIBLE_PER_RUN = {"not-a-failure": 4, "no-exchanges": 1}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def expected(upstream: Upstream, postgres_dsn: str) -> tuple[list[Any], list[tuple[str, str]]]:
    with served(upstream.base, postgres_dsn) as service:
        return exercise(service.base), list(service.seen)


def _environ(endpoint: str, **extra: str) -> dict[str, str]:
    return {
        "REPROIT_ENDPOINT": endpoint,
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
        "REPROIT_RETRY_LIMIT": "1",
        "REPROIT_REQUEST_TIMEOUT_MS": "2000",
        **extra,
    }


def _uploader(service: Served) -> Uploader:
    [sink] = [s for s in service.sinks() if isinstance(s, Uploader)]
    return sink


def _stats_once_captured(uploader: Uploader, captured: int) -> dict[str, Any]:
    """The uploader's counters once it has taken ``captured`` operations (waiting at most 30 s).

    The last request's operation reaches the uploader when its server span ends, which may
    come just after the response reached the client; an ingest that hangs leaves no flush to
    wait on.
    """
    deadline = time.monotonic() + 30.0
    stats = uploader.stats()
    while stats["captured_operations"] < captured and time.monotonic() < deadline:
        time.sleep(0.02)
        stats = uploader.stats()
    return stats


def _counters(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: stats[k] for k in ("captured_operations", "sent_batches", "failed_batches")}


@pytest.mark.parametrize(
    ("answer", "attempts_per_batch"),
    [(None, 0), (500, 2), (503, 2), (429, 1), (400, 1)],
    ids=["refused", "500", "503", "429", "400"],
)
def test_an_ingest_that_fails_changes_no_request_and_counts_every_capture(
    answer: int | None,
    attempts_per_batch: int,
    upstream: Upstream,
    postgres_dsn: str,
    expected: tuple[list[Any], list[tuple[str, str]]],
) -> None:
    ingest = LoopbackIngest(default=answer) if answer is not None else None
    endpoint = ingest.url if ingest is not None else down_url()
    try:
        with served(upstream.base, postgres_dsn, _environ(endpoint)) as service:
            runs = [exercise(service.base) for _ in range(3)]
            uploader = _uploader(service)
            assert uploader.flush(30) is True
            stats = uploader.stats()
            seen = list(service.seen)
        received = ingest.requests if ingest is not None else []
    finally:
        if ingest is not None:
            ingest.stop()
    answers, exceptions = expected
    assert runs == [answers] * 3
    assert seen == exceptions * 3
    captured = 3 * FAILURES_PER_RUN
    assert stats == {
        "captured_operations": captured,
        "dropped_operations": captured,
        "sent_batches": 0,
        "failed_batches": captured,
        "capture_dropped_effects": 0,
        "capture_replaced_values": 0,
        "artifacts_sent": 0,
        "artifacts_refused": 0,
        "artifacts_failed": 0,
        "capture_over_budget": 0,
        "capture_over_event_cap": 0,
        "ineligible": {reason: 3 * n for reason, n in INELIGIBLE_PER_RUN.items()},
        "queued": 0,
    }
    assert len(received) == captured * attempts_per_batch


def test_requests_complete_while_the_ingest_holds_an_upload_unanswered(
    upstream: Upstream,
    postgres_dsn: str,
    expected: tuple[list[Any], list[tuple[str, str]]],
) -> None:
    ingest = LoopbackIngest(default=HANG)
    try:
        environ = _environ(ingest.url, REPROIT_REQUEST_TIMEOUT_MS="60000")
        with served(upstream.base, postgres_dsn, environ) as service:
            first = exercise(service.base)
            # The uploader thread is now inside a POST the ingest will not answer.
            hanging = ingest.wait_for(1)
            assert len(hanging) >= 1
            later = [exercise(service.base) for _ in range(3)]
            uploader = _uploader(service)
            stats = _stats_once_captured(uploader, 4 * FAILURES_PER_RUN)
            # Still unanswered: the ingest only lets go when it stops (below).
            assert not ingest._stopping.is_set()
            seen = list(service.seen)
    finally:
        ingest.stop()
    answers, exceptions = expected
    assert [first, *later] == [answers] * 4
    assert seen == exceptions * 4
    assert _counters(stats) == {
        "captured_operations": 4 * FAILURES_PER_RUN,
        "sent_batches": 0,
        "failed_batches": 0,
    }
    assert stats["queued"] + stats["dropped_operations"] + 1 == 4 * FAILURES_PER_RUN


def test_a_full_queue_drops_the_oldest_and_keeps_serving(
    upstream: Upstream,
    postgres_dsn: str,
) -> None:
    """More failures than the queue holds while nothing can be sent: the app never notices."""
    ingest = LoopbackIngest(default=HANG)
    try:
        environ = _environ(ingest.url, REPROIT_REQUEST_TIMEOUT_MS="60000")
        with served(upstream.base, postgres_dsn, environ) as service:
            statuses = [fetch(service.base, "GET", "/fail")[0] for _ in range(80)]
            stats = _stats_once_captured(_uploader(service), 80)
    finally:
        ingest.stop()
    assert statuses == [502] * 80
    assert stats["captured_operations"] == 80
    # The queue holds 64 and pushes out the oldest; one more may be inside the hanging POST.
    assert stats["queued"] == 64
    assert stats["queued"] + stats["dropped_operations"] in (79, 80)
