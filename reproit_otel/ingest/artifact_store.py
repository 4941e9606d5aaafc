"""The ingest's artifacts: content-addressed bytes a capture batch names (heavy operations).

An artifact is stored once, under its id (``sha256:`` and the hex SHA-256 of its bytes), with
its media type: a second upload of the same bytes finds it there and stores nothing. Artifacts
are not per project: the same bytes have the same id wherever they come from, and a batch
names the one it needs. Only capsule artifacts are taken today, so the bytes are UTF-8 JSON and
kept as text (one column type for SQLite and PostgreSQL). Retention deletes the artifacts no
kept batch names (``retention.py``).

:class:`ArtifactStore` is mixed into :class:`~reproit_otel.ingest.store.Store`; it uses the
store's transactions and SQL dialect.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from reproit_otel.wire.artifacts import capsule_artifact_id

__all__ = ["ARTIFACT_SCHEMA", "ArtifactStore", "StoredArtifact"]

ARTIFACT_SCHEMA = """CREATE TABLE IF NOT EXISTS reproit_artifacts (
        id TEXT PRIMARY KEY,
        media_type TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        body TEXT NOT NULL,
        received_ms INTEGER NOT NULL)"""


@dataclass(frozen=True)
class StoredArtifact:
    """One stored artifact."""

    id: str
    media_type: str
    body: bytes


class ArtifactStore:
    """Storing and reading artifacts (see the module docstring)."""

    def _sql(self, statement: str) -> str:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def store_artifact(
        self, artifact_id: str, media_type: str, body: bytes, *, received_ms: int | None = None
    ) -> bool:
        """Store ``body`` (UTF-8 text) under ``artifact_id``; False when it was already stored.

        The caller has checked that the id is the body's SHA-256. Storing it again only
        records when it was received (retention's grace counts from then).
        """
        now = int(time.time() * 1000) if received_ms is None else received_ms
        with self._transaction() as cursor:
            # Sent again: its batch follows, so retention counts its grace from now.
            cursor.execute(
                self._sql("UPDATE reproit_artifacts SET received_ms = ? WHERE id = ?"),
                (now, artifact_id),
            )
            if cursor.rowcount:
                return False
            cursor.execute(
                self._sql(
                    "INSERT INTO reproit_artifacts (id, media_type, bytes, body, received_ms) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
                ),
                (artifact_id, media_type, len(body), body.decode("utf-8"), now),
            )
            return bool(cursor.rowcount)

    def get_artifact(self, artifact_id: str) -> StoredArtifact | None:
        """The artifact stored under ``artifact_id``, or ``None``."""
        with self._transaction() as cursor:
            cursor.execute(
                self._sql("SELECT media_type, body FROM reproit_artifacts WHERE id = ?"),
                (artifact_id,),
            )
            row = cursor.fetchone()
        if row is None:
            return None
        return StoredArtifact(artifact_id, str(row[0]), str(row[1]).encode("utf-8"))

    def whole_capsule(self, batch: Mapping[str, Any]) -> bytes | None:
        """The stored capsule artifact ``batch`` names (a heavy operation), or ``None``."""
        named = capsule_artifact_id(batch)
        if named is None:
            return None
        artifact = self.get_artifact(named)
        return None if artifact is None else artifact.body

    def artifact_count(self) -> int:
        """How many artifacts are stored."""
        with self._transaction() as cursor:
            cursor.execute(self._sql("SELECT COUNT(*) FROM reproit_artifacts"))
            row = cursor.fetchone()
        return int(row[0])
