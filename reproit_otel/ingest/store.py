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

Grouping: an occurrence is the set of failures with the same project and failure signature
(:mod:`reproit_otel.ingest.facts`); it keeps a total ``count``, how many carried a capture
batch and how many were OTLP server spans, first and last seen (ingest clock, epoch ms), the
last status, build and commit seen. A batch received again with the same ``batchId`` and the
same bytes (an uploader retry after a lost response) is stored once and counted once; batch
ids alone are not trusted to be unique, since two forked workers may number batches alike.
Old batch bodies are pruned by the rules of :mod:`reproit_otel.ingest.retention` (set
``store.retention``); the counts never change.
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
from reproit_otel.ingest.facts import FailureFacts
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
        commit_sha TEXT)""",
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
)

# A fixed key for pg_advisory_xact_lock: instances starting together create the schema once.
_SCHEMA_LOCK_KEY = 0x5E9_0017

_UPSERT_OCCURRENCE = """
INSERT INTO reproit_occurrences (id, project_id, signature, operation, oracle, status, summary,
    count, batch_count, trace_count, has_exchanges, first_seen_ms, last_seen_ms, build, commit_sha)
VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)
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
    "trace_count, has_exchanges, first_seen_ms, last_seen_ms, build, commit_sha"
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
        }


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
        self, cursor: _Cursor, facts: FailureFacts, *, received_ms: int, batch: bool
    ) -> None:
        statement = _UPSERT_OCCURRENCE.format(greatest=self.greatest, least=self.least)
        cursor.execute(
            self._sql(statement),
            (
                facts.occurrence_id,
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
            ),
        )

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
        now = int(time.time() * 1000) if received_ms is None else received_ms
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "INSERT INTO reproit_spans (project_id, trace_id, span_id, occurrence_id, "
                    "received_ms) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (project_id, trace_id, span_id) DO NOTHING"
                ),
                (facts.project_id, trace_id, span_id, facts.occurrence_id, now),
            )
            if cursor.rowcount == 0:
                return RecordResult(occurrence_id=facts.occurrence_id, duplicate=True)
            self._upsert(cursor, facts, received_ms=now, batch=False)
        return RecordResult(occurrence_id=facts.occurrence_id, duplicate=False)

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
                        "INSERT INTO reproit_spans (project_id, trace_id, span_id, "
                        "occurrence_id, received_ms) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (project_id, trace_id, span_id) DO NOTHING"
                    ),
                    (facts.project_id, trace_id, span_id, facts.occurrence_id, now),
                )
                duplicate = cursor.rowcount == 0
                if not duplicate:
                    self._upsert(cursor, facts, received_ms=now, batch=False)
                results.append(RecordResult(occurrence_id=facts.occurrence_id, duplicate=duplicate))
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


class SQLiteStore(Store):
    """The store in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._transaction() as cursor:
            for statement in (*_SQLITE_SCHEMA, *_INDEXES):
                cursor.execute(statement)

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
