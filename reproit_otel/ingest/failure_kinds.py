"""Failures of one occurrence told apart by their exception (the ingest's sub-groups).

An occurrence groups failures by signature (``backend-server-error:GET /coupon``): the same
operation failing. Two different bugs can fail the same operation, so each stored batch whose
return carries an exception is also filed under its *kind*: the exception's type and
innermost application frame (``ValueError @ coupon.py in apply_coupon``, see
:func:`reproit_otel.wire.exception.exception_kind`). The page lists an occurrence's kinds,
filters the list by kind and shows the latest batch of a kind.

:class:`FailureKindStore` is mixed into :class:`~reproit_otel.ingest.store.Store`; it uses the
store's transactions and SQL dialect. Its table is new with this feature: batches stored
before it simply have no kind.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

__all__ = ["FAILURE_KIND_INDEX", "FAILURE_KIND_SCHEMA", "FailureKind", "FailureKindStore"]

FAILURE_KIND_SCHEMA = """CREATE TABLE IF NOT EXISTS reproit_batch_kinds (
        batch_seq INTEGER PRIMARY KEY,
        occurrence_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        received_ms INTEGER NOT NULL)"""

FAILURE_KIND_INDEX = (
    "CREATE INDEX IF NOT EXISTS reproit_batch_kinds_occurrence "
    "ON reproit_batch_kinds (occurrence_id, kind)"
)

MAX_KINDS_SHOWN = 20
"""Kinds listed per occurrence (the most frequent)."""


@dataclass(frozen=True)
class FailureKind:
    """One exception kind of an occurrence: how many batches carried it, and when last."""

    kind: str
    count: int
    last_seen_ms: int


class FailureKindStore:
    """Filing batches under their exception kind and reading the kinds back."""

    def _sql(self, statement: str) -> str:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _file_kind(
        self,
        cursor: Any,
        *,
        project_id: str,
        batch_id: str,
        digest: str,
        occurrence_id: str,
        kind: str,
        received_ms: int,
    ) -> None:
        """File the batch just inserted (in this transaction) under ``kind``."""
        cursor.execute(
            self._sql(
                "SELECT seq FROM reproit_batches "
                "WHERE project_id = ? AND batch_id = ? AND body_sha256 = ?"
            ),
            (project_id, batch_id, digest),
        )
        row = cursor.fetchone()
        if row is None:
            return
        cursor.execute(
            self._sql(
                "INSERT INTO reproit_batch_kinds (batch_seq, occurrence_id, kind, received_ms) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (batch_seq) DO NOTHING"
            ),
            (int(row[0]), occurrence_id, kind, received_ms),
        )

    def failure_kinds(self, occurrence_id: str) -> list[FailureKind]:
        """The exception kinds of an occurrence, most frequent first."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "SELECT kind, COUNT(*) AS n, MAX(received_ms) FROM reproit_batch_kinds "
                    "WHERE occurrence_id = ? GROUP BY kind ORDER BY n DESC, kind LIMIT ?"
                ),
                (occurrence_id, MAX_KINDS_SHOWN),
            )
            rows = cursor.fetchall()
        return [FailureKind(str(row[0]), int(row[1]), int(row[2])) for row in rows]

    def kinds_of(self, occurrence_ids: Sequence[str]) -> dict[str, list[str]]:
        """The exception kinds of each of ``occurrence_ids`` (for a list page), most frequent
        first."""
        if not occurrence_ids:
            return {}
        marks = ", ".join("?" for _ in occurrence_ids)
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "SELECT occurrence_id, kind, COUNT(*) AS n FROM reproit_batch_kinds "
                    f"WHERE occurrence_id IN ({marks}) GROUP BY occurrence_id, kind "
                    "ORDER BY occurrence_id, n DESC, kind"
                ),
                list(occurrence_ids),
            )
            rows = cursor.fetchall()
        found: dict[str, list[str]] = {}
        for row in rows:
            found.setdefault(str(row[0]), []).append(str(row[1]))
        return found

    def kind_facets(self, limit: int = 200) -> list[tuple[str, int]]:
        """Every exception kind with how many occurrences have it, most common first."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "SELECT kind, COUNT(DISTINCT occurrence_id) AS n FROM reproit_batch_kinds "
                    "GROUP BY kind ORDER BY n DESC, kind LIMIT ?"
                ),
                (limit,),
            )
            rows = cursor.fetchall()
        return [(str(row[0]), int(row[1])) for row in rows]

    def latest_batch_of_kind(self, occurrence_id: str, kind: str) -> dict[str, Any] | None:
        """The most recently received batch of an occurrence filed under ``kind`` whose body
        retention kept, or ``None``."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql(
                    "SELECT b.body FROM reproit_batches b JOIN reproit_batch_kinds k "
                    "ON b.seq = k.batch_seq WHERE k.occurrence_id = ? AND k.kind = ? "
                    "AND b.body <> '' ORDER BY b.seq DESC LIMIT 1"  # '': pruned (retention)
                ),
                (occurrence_id, kind),
            )
            row = cursor.fetchone()
        if row is None:
            return None
        parsed: dict[str, Any] = json.loads(row[0])
        return parsed
