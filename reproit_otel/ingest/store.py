"""Where the ingest keeps capture batches and the occurrences they group into.

Usage::

    store = open_store("sqlite:///var/lib/reproit/ingest.db")   # or "postgresql://..."
    result = store.record_batch(batch, body=canonical_text)      # RecordResult
    page = store.list_occurrences(operation="POST /orders", status=500, limit=50)
    facets = store.occurrence_facets()                           # what the filters offer
    occurrence = store.get_occurrence(result.occurrence_id)
    batch = store.latest_batch(result.occurrence_id)             # for the capsule projection
    store.close()

Two back ends share one schema and one set of statements:

* **SQLite** (``sqlite:///relative/path`` or ``sqlite:////absolute/path``; ``:memory:`` is
  refused because every request opens its own connection): one file for one machine.
  Write-ahead logging and ``BEGIN IMMEDIATE`` make concurrent writers from the server's
  thread pool queue up instead of failing.
* **PostgreSQL** (``postgresql://`` or ``postgres://`` libpq URLs, through psycopg2): a shared
  database behind any number of ingest instances. Every write is one transaction built from
  single-statement upserts (``INSERT ... ON CONFLICT``), so counts stay exact when several
  instances receive the same occurrence at once; schema creation is serialised with an
  advisory lock.

Grouping: an occurrence is the set of failures with the same project, operation, failure
signature and failure fingerprint (the exception's type and innermost application frame, else
the status; :mod:`reproit_otel.ingest.facts`); it keeps a total ``count``, how many carried a
capture batch and how many were OTLP server spans, first and last seen (ingest clock, epoch ms), the
last status, build and commit seen. A batch received again with the same ``batchId`` and the
same bytes (an uploader retry after a lost response) is stored once and counted once; batch
ids alone are not trusted to be unique, since two forked workers may number batches alike.
Old batch bodies are pruned by the rules of :mod:`reproit_otel.ingest.retention` (set
``store.retention``); the counts never change. Every batch an occurrence received is listed
(:meth:`Store.occurrence_batches`, numbered by its ``seq``) and each one whose body is kept can
be read back (:meth:`Store.batch_of`), not only the latest.

Migration: a database written before occurrences had a fingerprint (grouped by project and
signature alone) is regrouped when the store opens it (:meth:`Store._migrate`), in one
transaction: each stored batch goes to the occurrence of its own facts (read from its body, or
from its filed exception kind when retention pruned the body), the OTLP spans to the most
recently seen of the new occurrences of their old one, and every count is kept.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from reproit_otel.errors import ConfigurationError
from reproit_otel.ingest.artifact_store import (
    ARTIFACT_OWNER_SCHEMA,
    ARTIFACT_SCHEMA,
    ArtifactStore,
)
from reproit_otel.ingest.facts import (
    BatchFactError,
    FailureFacts,
    UnsignedBatchError,
    batch_facts,
)
from reproit_otel.ingest.failure_kinds import (
    FAILURE_KIND_INDEX,
    FAILURE_KIND_SCHEMA,
    FailureKindStore,
)
from reproit_otel.ingest.retention import Retention

_SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS reproit_occurrences (
        id TEXT PRIMARY KEY,
        project_id TEXT NOT NULL,
        signature TEXT NOT NULL,
        operation TEXT NOT NULL,
        oracle TEXT NOT NULL,
        status INTEGER,
        summary TEXT NOT NULL,
        count INTEGER NOT NULL,
        batch_count INTEGER NOT NULL,
        trace_count INTEGER NOT NULL,
        has_exchanges INTEGER NOT NULL,
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        build TEXT,
        commit_sha TEXT,
        fingerprint TEXT NOT NULL DEFAULT '')""",
    """CREATE TABLE IF NOT EXISTS reproit_batches (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        project_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        occurrence_id TEXT NOT NULL,
        received_ms INTEGER NOT NULL,
        body TEXT NOT NULL,
        body_sha256 TEXT NOT NULL,
        UNIQUE (project_id, batch_id, body_sha256))""",
    """CREATE TABLE IF NOT EXISTS reproit_spans (
        project_id TEXT NOT NULL,
        trace_id TEXT NOT NULL,
        span_id TEXT NOT NULL,
        occurrence_id TEXT NOT NULL,
        received_ms INTEGER NOT NULL,
        PRIMARY KEY (project_id, trace_id, span_id))""",
    ARTIFACT_SCHEMA,
    ARTIFACT_OWNER_SCHEMA,
    FAILURE_KIND_SCHEMA,
)

_POSTGRES_SCHEMA = tuple(
    statement.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY").replace(
        "INTEGER", "BIGINT"
    )
    for statement in _SQLITE_SCHEMA
)

_INDEXES = (
    "CREATE INDEX IF NOT EXISTS reproit_occurrences_seen "
    "ON reproit_occurrences (last_seen_ms DESC, id)",
    "CREATE INDEX IF NOT EXISTS reproit_batches_occurrence ON reproit_batches (occurrence_id, seq)",
    # The list filters (web page and API): each keeps "newest first" an index walk.
    "CREATE INDEX IF NOT EXISTS reproit_occurrences_operation "
    "ON reproit_occurrences (operation, last_seen_ms DESC, id)",
    "CREATE INDEX IF NOT EXISTS reproit_occurrences_status "
    "ON reproit_occurrences (status, last_seen_ms DESC, id)",
    FAILURE_KIND_INDEX,
    # An OTLP span finds the latest occurrence of its project and signature.
    "CREATE INDEX IF NOT EXISTS reproit_occurrences_signature "
    "ON reproit_occurrences (project_id, signature, last_seen_ms DESC)",
)

# A fixed key for pg_advisory_xact_lock: instances starting together create the schema once.
_SCHEMA_LOCK_KEY = 0x5E9_0017

_UPSERT_OCCURRENCE = """
INSERT INTO reproit_occurrences (id, project_id, signature, operation, oracle, status, summary,
    count, batch_count, trace_count, has_exchanges, first_seen_ms, last_seen_ms, build, commit_sha,
    fingerprint)
VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    count = reproit_occurrences.count + 1,
    batch_count = reproit_occurrences.batch_count + excluded.batch_count,
    trace_count = reproit_occurrences.trace_count + excluded.trace_count,
    has_exchanges = {greatest}(reproit_occurrences.has_exchanges, excluded.has_exchanges),
    first_seen_ms = {least}(reproit_occurrences.first_seen_ms, excluded.first_seen_ms),
    last_seen_ms = {greatest}(reproit_occurrences.last_seen_ms, excluded.last_seen_ms),
    operation = excluded.operation,
    summary = excluded.summary,
    status = COALESCE(excluded.status, reproit_occurrences.status),
    build = COALESCE(excluded.build, reproit_occurrences.build),
    commit_sha = COALESCE(excluded.commit_sha, reproit_occurrences.commit_sha)
"""

_OCCURRENCE_COLUMNS = (
    "id, project_id, signature, operation, oracle, status, summary, count, batch_count, "
    "trace_count, has_exchanges, first_seen_ms, last_seen_ms, build, commit_sha, fingerprint"
)

MAX_PAGE = 500


def _rfc3339(epoch_ms: int) -> str:
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


@dataclass(frozen=True)
class Occurrence:
    """One group of failures with the same project and signature."""

    id: str
    project_id: str
    signature: str
    operation: str
    oracle: str
    status: int | None
    summary: str
    count: int
    batch_count: int
    trace_count: int
    has_exchanges: bool
    first_seen_ms: int
    last_seen_ms: int
    build: str | None
    commit: str | None
    fingerprint: str = ""
    """The exception kind, else the status (``HTTP 500``), that sets the occurrence apart."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Occurrence:
        return cls(
            id=row[0],
            project_id=row[1],
            signature=row[2],
            operation=row[3],
            oracle=row[4],
            status=None if row[5] is None else int(row[5]),
            summary=row[6],
            count=int(row[7]),
            batch_count=int(row[8]),
            trace_count=int(row[9]),
            has_exchanges=bool(row[10]),
            first_seen_ms=int(row[11]),
            last_seen_ms=int(row[12]),
            build=row[13],
            commit=row[14],
            fingerprint=str(row[15] or ""),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON shape served by ``GET /v1/occurrences`` (camelCase, RFC 3339 times)."""
        return {
            "id": self.id,
            "projectId": self.project_id,
            "signature": self.signature,
            "operation": self.operation,
            "oracle": self.oracle,
            "status": self.status,
            "summary": self.summary,
            "count": self.count,
            "batches": self.batch_count,
            "traces": self.trace_count,
            "hasExchanges": self.has_exchanges,
            "capsuleAvailable": self.batch_count > 0,
            "firstSeen": _rfc3339(self.first_seen_ms),
            "lastSeen": _rfc3339(self.last_seen_ms),
            "build": self.build,
            "commit": self.commit,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True)
class StoredBatch:
    """One batch an occurrence received: its number (``seq``), id, arrival and exception kind;
    ``kept`` is whether retention kept its body (only then can it be pulled)."""

    seq: int
    batch_id: str
    received_ms: int
    kept: bool
    kind: str | None

    def to_json(self) -> dict[str, Any]:
        """The JSON shape served by ``GET /v1/occurrences/{id}/batches``."""
        return {
            "batch": self.seq,
            "batchId": self.batch_id,
            "received": _rfc3339(self.received_ms),
            "kept": self.kept,
            "exception": self.kind,
        }


MAX_BATCHES_LISTED = 200
"""Batches listed per occurrence (the most recent)."""


@dataclass(frozen=True)
class RecordResult:
    """What storing one failure did: its occurrence, and whether it was already stored."""

    occurrence_id: str
    duplicate: bool


@dataclass(frozen=True)
class OccurrencePage:
    """One page of occurrences, most recently seen first."""

    items: list[Occurrence]
    total: int
    offset: int
    limit: int


@dataclass(frozen=True)
class OccurrenceFacets:
    """The values the occurrence filters can take, each with how many occurrences have it.

    ``operations`` is cut to the :data:`MAX_FACETS` most frequent (ties by name); ``truncated``
    says whether some were left out.
    """

    operations: list[tuple[str, int]]
    statuses: list[tuple[int | None, int]]
    projects: list[tuple[str, int]]
    truncated: bool


MAX_FACETS = 200


class _Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Store(ArtifactStore, FailureKindStore, Retention):
    """The shared logic; a subclass supplies connections and the SQL dialect."""

    greatest = "MAX"
    least = "MIN"

    def _sql(self, statement: str) -> str:
        return statement

    @contextmanager
    def _transaction(self) -> Iterator[_Cursor]:
        raise NotImplementedError
        yield  # pragma: no cover

    def close(self) -> None:
        """Release the connections."""

    def _upsert(
        self,
        cursor: _Cursor,
        facts: FailureFacts,
        *,
        received_ms: int,
        batch: bool,
        occurrence_id: str | None = None,
    ) -> None:
        statement = _UPSERT_OCCURRENCE.format(greatest=self.greatest, least=self.least)
        cursor.execute(
            self._sql(statement),
            (
                facts.occurrence_id if occurrence_id is None else occurrence_id,
                facts.project_id,
                facts.signature,
                facts.operation,
                facts.oracle,
                facts.status,
                facts.summary,
                1 if batch else 0,
                0 if batch else 1,
                1 if facts.has_exchanges else 0,
                received_ms,
                received_ms,
                facts.build,
                facts.commit,
                facts.fingerprint,
            ),
        )

    def _span_occurrence(self, cursor: _Cursor, facts: FailureFacts) -> str:
        """The occurrence a failing span counts on: the most recently seen one of its project
        and signature (a span carries no exception to tell them apart), else its own."""
        cursor.execute(
            self._sql(
                "SELECT id FROM reproit_occurrences WHERE project_id = ? AND signature = ? "
                "ORDER BY last_seen_ms DESC, id LIMIT 1"
            ),
            (facts.project_id, facts.signature),
        )
        row = cursor.fetchone()
        return facts.occurrence_id if row is None else str(row[0])

    def record_batch(
        self,
        batch: Mapping[str, Any],
        facts: FailureFacts,
        *,
        body: str,
        received_ms: int | None = None,
    ) -> RecordResult:
        """Store a validated batch (``body`` is its JSON text) and count it on its occurrence."""
        now = int(time.time() * 1000) if received_ms is None else received_ms
        batch_id = str(batch.get("batchId"))
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "INSERT INTO reproit_batches (project_id, batch_id, occurrence_id, "
                    "received_ms, body, body_sha256) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (project_id, batch_id, body_sha256) DO NOTHING"
                ),
                (facts.project_id, batch_id, facts.occurrence_id, now, body, digest),
            )
            if cursor.rowcount == 0:
                cursor.execute(
                    self._sql(
                        "SELECT occurrence_id FROM reproit_batches "
                        "WHERE project_id = ? AND batch_id = ? AND body_sha256 = ?"
                    ),
                    (facts.project_id, batch_id, digest),
                )
                row = cursor.fetchone()
                return RecordResult(occurrence_id=str(row[0]), duplicate=True)
            self._upsert(cursor, facts, received_ms=now, batch=True)
            if facts.exception_kind is not None:
                self._file_kind(
                    cursor,
                    project_id=facts.project_id,
                    batch_id=batch_id,
                    digest=digest,
                    occurrence_id=facts.occurrence_id,
                    kind=facts.exception_kind,
                    received_ms=now,
                )
            self._prune(cursor, now_ms=now, occurrence_id=facts.occurrence_id)
        return RecordResult(occurrence_id=facts.occurrence_id, duplicate=False)

    def record_server_span(
        self,
        facts: FailureFacts,
        *,
        trace_id: str,
        span_id: str,
        received_ms: int | None = None,
    ) -> RecordResult:
        """Count a failing OTLP server span on its occurrence (once per trace and span id)."""
        return self.record_server_spans([(facts, trace_id, span_id)], received_ms=received_ms)[0]

    def record_server_spans(
        self,
        spans: Sequence[tuple[FailureFacts, str, str]],
        *,
        received_ms: int | None = None,
    ) -> list[RecordResult]:
        """:meth:`record_server_span` for many ``(facts, trace_id, span_id)`` in one transaction
        (an OTLP export carries many spans)."""
        now = int(time.time() * 1000) if received_ms is None else received_ms
        results: list[RecordResult] = []
        with self._transaction() as cursor:
            for facts, trace_id, span_id in spans:
                cursor.execute(
                    self._sql(
                        "SELECT occurrence_id FROM reproit_spans "
                        "WHERE project_id = ? AND trace_id = ? AND span_id = ?"
                    ),
                    (facts.project_id, trace_id, span_id),
                )
                seen = cursor.fetchone()
                if seen is not None:
                    results.append(RecordResult(occurrence_id=str(seen[0]), duplicate=True))
                    continue
                occurrence_id = self._span_occurrence(cursor, facts)
                cursor.execute(
                    self._sql(
                        "INSERT INTO reproit_spans (project_id, trace_id, span_id, "
                        "occurrence_id, received_ms) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (project_id, trace_id, span_id) DO NOTHING"
                    ),
                    (facts.project_id, trace_id, span_id, occurrence_id, now),
                )
                duplicate = cursor.rowcount == 0
                if not duplicate:
                    self._upsert(
                        cursor, facts, received_ms=now, batch=False, occurrence_id=occurrence_id
                    )
                results.append(RecordResult(occurrence_id=occurrence_id, duplicate=duplicate))
        return results

    def list_occurrences(
        self,
        *,
        operation: str | None = None,
        status: int | None = None,
        project_id: str | None = None,
        exception_kind: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> OccurrencePage:
        """Occurrences matching the filters, most recently seen first (``exception_kind``: only
        those with a failure of that kind, ``failure_kinds.py``)."""
        limit = max(1, min(MAX_PAGE, limit))
        offset = max(0, offset)
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("operation", operation),
            ("status", status),
            ("project_id", project_id),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if exception_kind is not None:
            clauses.append("id IN (SELECT occurrence_id FROM reproit_batch_kinds WHERE kind = ?)")
            params.append(exception_kind)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._transaction() as cursor:
            cursor.execute(self._sql(f"SELECT COUNT(*) FROM reproit_occurrences{where}"), params)
            total = int(cursor.fetchone()[0])
            cursor.execute(
                self._sql(
                    f"SELECT {_OCCURRENCE_COLUMNS} FROM reproit_occurrences{where} "
                    "ORDER BY last_seen_ms DESC, id LIMIT ? OFFSET ?"
                ),
                [*params, limit, offset],
            )
            rows = cursor.fetchall()
        items = [Occurrence.from_row(row) for row in rows]
        return OccurrencePage(items=items, total=total, offset=offset, limit=limit)

    def occurrence_facets(self) -> OccurrenceFacets:
        """Distinct operations, statuses and projects of the stored occurrences, with counts."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "SELECT operation, COUNT(*) AS n FROM reproit_occurrences GROUP BY operation "
                    "ORDER BY n DESC, operation LIMIT ?"
                ),
                (MAX_FACETS + 1,),
            )
            operations = [(str(row[0]), int(row[1])) for row in cursor.fetchall()]
            cursor.execute(
                "SELECT status, COUNT(*) FROM reproit_occurrences GROUP BY status ORDER BY status"
            )
            statuses = [
                (None if row[0] is None else int(row[0]), int(row[1])) for row in cursor.fetchall()
            ]
            cursor.execute(
                self._sql(
                    "SELECT project_id, COUNT(*) AS n FROM reproit_occurrences "
                    "GROUP BY project_id ORDER BY n DESC, project_id LIMIT ?"
                ),
                (MAX_FACETS,),
            )
            projects = [(str(row[0]), int(row[1])) for row in cursor.fetchall()]
        return OccurrenceFacets(
            operations=operations[:MAX_FACETS],
            statuses=statuses,
            projects=projects,
            truncated=len(operations) > MAX_FACETS,
        )

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        """One occurrence by id, or ``None``."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(f"SELECT {_OCCURRENCE_COLUMNS} FROM reproit_occurrences WHERE id = ?"),
                (occurrence_id,),
            )
            row = cursor.fetchone()
        return None if row is None else Occurrence.from_row(row)

    def latest_batch(self, occurrence_id: str) -> dict[str, Any] | None:
        """The most recently received batch of an occurrence whose body is kept (see
        :mod:`reproit_otel.ingest.retention`), parsed, or ``None``."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "SELECT body FROM reproit_batches WHERE occurrence_id = ? AND body <> '' "
                    "ORDER BY seq DESC LIMIT 1"
                ),
                (occurrence_id,),
            )
            row = cursor.fetchone()
        if row is None:
            return None
        parsed: dict[str, Any] = json.loads(row[0])
        return parsed

    def occurrence_batches(
        self, occurrence_id: str, *, limit: int = MAX_BATCHES_LISTED
    ) -> list[StoredBatch]:
        """The batches an occurrence received, most recent first (at most ``limit``)."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "SELECT b.seq, b.batch_id, b.received_ms, b.body <> '', k.kind "
                    "FROM reproit_batches b LEFT JOIN reproit_batch_kinds k ON k.batch_seq = b.seq "
                    "WHERE b.occurrence_id = ? ORDER BY b.seq DESC LIMIT ?"
                ),
                (occurrence_id, max(1, limit)),
            )
            rows = cursor.fetchall()
        return [
            StoredBatch(int(row[0]), str(row[1]), int(row[2]), bool(row[3]), row[4]) for row in rows
        ]

    def batch_of(self, occurrence_id: str, seq: int) -> tuple[bool, dict[str, Any] | None]:
        """Batch ``seq`` of an occurrence: ``(False, None)`` when the occurrence has no such
        batch, ``(True, None)`` when retention pruned its body, else ``(True, batch)``."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql("SELECT body FROM reproit_batches WHERE occurrence_id = ? AND seq = ?"),
                (occurrence_id, seq),
            )
            row = cursor.fetchone()
        if row is None:
            return False, None
        if not row[0]:
            return True, None
        parsed: dict[str, Any] = json.loads(row[0])
        return True, parsed

    # -- migration ---------------------------------------------------------------------------

    def _has_fingerprints(self, cursor: _Cursor) -> bool:
        raise NotImplementedError

    def _migrate(self, cursor: _Cursor) -> None:
        """Regroup a database written before occurrences had a fingerprint (see the module
        docstring). Runs inside the transaction that created the schema."""
        if self._has_fingerprints(cursor):
            return
        cursor.execute(
            "ALTER TABLE reproit_occurrences ADD COLUMN fingerprint TEXT NOT NULL DEFAULT ''"
        )
        cursor.execute(self._sql(f"SELECT {_OCCURRENCE_COLUMNS} FROM reproit_occurrences"))
        old = {str(row[0]): Occurrence.from_row(row) for row in cursor.fetchall()}
        cursor.execute("SELECT batch_seq, kind FROM reproit_batch_kinds")
        kinds = {int(row[0]): str(row[1]) for row in cursor.fetchall()}
        groups: dict[str, _Group] = {}
        moved: list[tuple[int, str]] = []
        after = -1
        while True:  # the batches in chunks: their bodies are not all held at once
            cursor.execute(
                self._sql(
                    "SELECT seq, occurrence_id, received_ms, body FROM reproit_batches "
                    "WHERE seq > ? ORDER BY seq LIMIT 200"
                ),
                (after,),
            )
            rows = cursor.fetchall()
            if not rows:
                break
            for seq, occurrence_id, received_ms, body in rows:
                after = int(seq)
                previous = old.get(str(occurrence_id))
                facts = _migrated_facts(previous, body, kinds.get(int(seq)))
                if facts is None:
                    continue  # a batch of no occurrence: left as it is
                group = groups.setdefault(facts.occurrence_id, _Group(facts, str(occurrence_id)))
                group.add_batch(facts, int(received_ms))
                moved.append((int(seq), facts.occurrence_id))
        cursor.execute("SELECT project_id, trace_id, span_id, occurrence_id FROM reproit_spans")
        spans = cursor.fetchall()
        latest: dict[str, _Group] = {}
        for group in groups.values():
            current = latest.get(group.origin)
            if current is None or group.last_seen_ms > current.last_seen_ms:
                latest[group.origin] = group
        for occurrence in old.values():
            if occurrence.id not in latest:  # only spans, or every batch unreadable
                facts = _facts_of(occurrence, None)
                group = _Group(facts, occurrence.id)
                groups[facts.occurrence_id] = group
                latest[occurrence.id] = group
            placed = sum(g.batch_count for g in groups.values() if g.origin == occurrence.id)
            latest[occurrence.id].take_rest(occurrence, placed)
        cursor.execute("DELETE FROM reproit_occurrences")
        for group in groups.values():
            self._insert_group(cursor, group)
        for seq, occurrence_id in moved:
            cursor.execute(
                self._sql("UPDATE reproit_batches SET occurrence_id = ? WHERE seq = ?"),
                (occurrence_id, seq),
            )
            cursor.execute(
                self._sql("UPDATE reproit_batch_kinds SET occurrence_id = ? WHERE batch_seq = ?"),
                (occurrence_id, seq),
            )
        for project_id, trace_id, span_id, occurrence_id in spans:
            target = latest.get(str(occurrence_id))
            if target is None:
                continue  # a span of no occurrence: left as it is
            cursor.execute(
                self._sql(
                    "UPDATE reproit_spans SET occurrence_id = ? "
                    "WHERE project_id = ? AND trace_id = ? AND span_id = ?"
                ),
                (target.facts.occurrence_id, project_id, trace_id, span_id),
            )

    def _insert_group(self, cursor: _Cursor, group: _Group) -> None:
        facts = group.facts
        cursor.execute(
            self._sql(
                "INSERT INTO reproit_occurrences (id, project_id, signature, operation, oracle, "
                "status, summary, count, batch_count, trace_count, has_exchanges, first_seen_ms, "
                "last_seen_ms, build, commit_sha, fingerprint) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                facts.occurrence_id,
                facts.project_id,
                facts.signature,
                facts.operation,
                facts.oracle,
                facts.status,
                facts.summary,
                group.batch_count + group.trace_count + group.other_count,
                group.batch_count,
                group.trace_count,
                1 if group.has_exchanges else 0,
                group.first_seen_ms,
                group.last_seen_ms,
                facts.build,
                facts.commit,
                facts.fingerprint,
            ),
        )


def _facts_of(occurrence: Occurrence, kind: str | None) -> FailureFacts:
    return FailureFacts(
        project_id=occurrence.project_id,
        signature=occurrence.signature,
        operation=occurrence.operation,
        summary=occurrence.summary,
        status=occurrence.status,
        build=occurrence.build,
        commit=occurrence.commit,
        has_exchanges=occurrence.has_exchanges,
        exception_kind=kind,
    )


def _migrated_facts(
    occurrence: Occurrence | None, body: Any, kind: str | None
) -> FailureFacts | None:
    """The facts a stored batch is regrouped by: its body's, else (pruned, unreadable) its old
    occurrence's with its filed exception kind."""
    if isinstance(body, str) and body:
        try:
            parsed = json.loads(body)
            if isinstance(parsed, dict):
                return batch_facts(parsed)
        except (ValueError, UnsignedBatchError, BatchFactError):
            pass
    return None if occurrence is None else _facts_of(occurrence, kind)


class _Group:
    """One occurrence as the migration rebuilds it."""

    def __init__(self, facts: FailureFacts, origin: str) -> None:
        self.facts = facts
        self.origin = origin
        self.batch_count = 0
        self.trace_count = 0
        self.other_count = 0
        self.has_exchanges = facts.has_exchanges
        self.first_seen_ms: int | None = None
        self.last_seen_ms = -1

    def add_batch(self, facts: FailureFacts, received_ms: int) -> None:
        self.batch_count += 1
        self.has_exchanges = self.has_exchanges or facts.has_exchanges
        if self.first_seen_ms is None or received_ms < self.first_seen_ms:
            self.first_seen_ms = received_ms
        if received_ms >= self.last_seen_ms:
            self.last_seen_ms = received_ms
            self.facts = facts  # the latest batch's status, build and commit

    def take_rest(self, occurrence: Occurrence, placed: int) -> None:
        """Count on this group what the old occurrence counted beyond the ``placed`` batches
        regrouped from it: its spans and any other count; keep its first and last seen."""
        self.trace_count += occurrence.trace_count
        self.batch_count += max(0, occurrence.batch_count - placed)
        self.other_count += max(
            0, occurrence.count - occurrence.batch_count - occurrence.trace_count
        )
        if self.first_seen_ms is None:
            self.first_seen_ms = occurrence.first_seen_ms
        self.last_seen_ms = max(self.last_seen_ms, occurrence.last_seen_ms)


class SQLiteStore(Store):
    """The store in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._transaction() as cursor:
            for statement in (*_SQLITE_SCHEMA, *_INDEXES):
                cursor.execute(statement)
            self._migrate(cursor)

    def _has_fingerprints(self, cursor: _Cursor) -> bool:
        cursor.execute("PRAGMA table_info(reproit_occurrences)")
        return any(row[1] == "fingerprint" for row in cursor.fetchall())

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA busy_timeout=30000")
        return connection

    @contextmanager
    def _transaction(self) -> Iterator[_Cursor]:
        connection = self._connect()
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection.cursor()
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        finally:
            connection.close()


class PostgresStore(Store):
    """The store in a PostgreSQL database shared by several ingest instances."""

    greatest = "GREATEST"
    least = "LEAST"

    def __init__(self, dsn: str, *, max_connections: int = 8) -> None:
        try:
            from psycopg2.pool import ThreadedConnectionPool
        except ImportError as error:  # pragma: no cover - depends on the installation
            raise ConfigurationError(
                "a postgresql:// store needs psycopg2; install it with "
                "`pip install 'reproit-otel[psycopg2]'`"
            ) from error
        self._pool = ThreadedConnectionPool(1, max_connections, dsn)
        self._closed = False
        self._lock = threading.Lock()
        with self._transaction() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            for statement in (*_POSTGRES_SCHEMA, *_INDEXES):
                cursor.execute(statement)
            self._migrate(cursor)

    def _has_fingerprints(self, cursor: _Cursor) -> bool:
        cursor.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'reproit_occurrences' AND column_name = 'fingerprint'"
        )
        return cursor.fetchone() is not None

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    @contextmanager
    def _transaction(self) -> Iterator[_Cursor]:
        connection = self._pool.getconn()
        try:
            with connection, connection.cursor() as cursor:
                yield cursor
        finally:
            self._pool.putconn(connection)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.closeall()


def open_store(url: str) -> Store:
    """Open the store a ``--db`` URL names; raises :class:`ConfigurationError` for others."""
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not path or path == ":memory:":
            raise ConfigurationError(f"--db {url!r} names no file; use sqlite:///path/to/ingest.db")
        return SQLiteStore(Path(path))
    raise ConfigurationError(
        f"unsupported --db {url!r}: expected sqlite:///path/to/file.db or "
        "postgresql://user@host:port/database"
    )
