"""The ingest's artifacts: content-addressed bytes a capture batch names (heavy operations).

An artifact is stored once, under its id (``sha256:`` and the hex SHA-256 of its bytes), with
its media type: a second upload of the same bytes finds it there and stores nothing. Artifacts
are not per project: the same bytes have the same id wherever they come from, and a batch
names the one it needs. Only capsule artifacts are taken today, so the bytes are UTF-8 JSON and
kept as text (one column type for SQLite and PostgreSQL). Retention deletes the artifacts no
kept batch names in its ``artifacts`` field (``retention.py``).

Who uploaded an artifact is kept as a digest of the ingest key (``reproit_artifact_owners``),
so a quota holds per key and overall (:class:`ArtifactQuota`): an upload past either is not
stored. An artifact is bound to the batch that names it (:func:`binding_problem`): its capsule
must be that batch's own (same operation, oracle and trigger); :meth:`ArtifactStore.whole_capsule`
serves nothing else, so a batch naming another operation's artifact never pulls it.

:class:`ArtifactStore` is mixed into :class:`~reproit_otel.ingest.store.Store`; it uses the
store's transactions and SQL dialect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from reproit_otel.wire.artifacts import capsule_artifact_id
from reproit_otel.wire.capsule import capsule_from_batch

__all__ = [
    "ARTIFACT_OWNER_SCHEMA",
    "ARTIFACT_SCHEMA",
    "ArtifactQuota",
    "ArtifactStore",
    "StoredArtifact",
    "binding_problem",
]

ARTIFACT_SCHEMA = """CREATE TABLE IF NOT EXISTS reproit_artifacts (
        id TEXT PRIMARY KEY,
        media_type TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        body TEXT NOT NULL,
        received_ms INTEGER NOT NULL)"""

ARTIFACT_OWNER_SCHEMA = """CREATE TABLE IF NOT EXISTS reproit_artifact_owners (
        id TEXT NOT NULL,
        owner TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (id, owner))"""


@dataclass(frozen=True)
class ArtifactQuota:
    """Bytes of stored artifacts allowed in all and per uploading key."""

    total_bytes: int
    per_key_bytes: int


def _capsule_identity(capsule: Any) -> tuple[Any, Any, Any, Any] | None:
    """What binds a capsule to its batch: operation, oracle, and the start event's trace and
    input (the trigger)."""
    if not isinstance(capsule, Mapping):
        return None
    events = capsule.get("events")
    start = events[0] if isinstance(events, list) and events else None
    if not isinstance(start, Mapping):
        return None
    return (
        capsule.get("operation"),
        capsule.get("oracle"),
        start.get("traceId"),
        start.get("input"),
    )


def binding_problem(batch: Mapping[str, Any], artifact: bytes) -> str | None:
    """Why the capsule ``artifact`` is not the capsule of ``batch`` (``None``: it is).

    The batch's own projection (PROTOCOL 5.9) and the artifact must name the same operation
    and oracle and start from the same trigger.
    """
    own = _capsule_identity(capsule_from_batch(batch))
    if own is None:
        return "the batch names a capsule artifact but projects to no capsule of its own"
    try:
        theirs = _capsule_identity(json.loads(artifact.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        theirs = None
    if theirs is None:
        return "the named artifact is not a capsule"
    for index, what in enumerate(("operation", "oracle", "trace", "trigger input")):
        if own[index] != theirs[index]:
            return f"the named artifact is the capsule of another {what}: refused as not its own"
    return None


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
        self,
        artifact_id: str,
        media_type: str,
        body: bytes,
        *,
        received_ms: int | None = None,
        owner: str = "",
        quota: ArtifactQuota | None = None,
    ) -> bool | None:
        """Store ``body`` (UTF-8 text) under ``artifact_id``; False when it was already stored,
        ``None`` when it is not stored because ``owner`` (a key digest) or the store as a whole
        would pass ``quota``.

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
            if quota is not None and self._over_quota(cursor, owner, len(body), quota):
                return None
            cursor.execute(
                self._sql(
                    "INSERT INTO reproit_artifact_owners (id, owner, bytes) VALUES (?, ?, ?) "
                    "ON CONFLICT (id, owner) DO NOTHING"
                ),
                (artifact_id, owner, len(body)),
            )
            cursor.execute(
                self._sql(
                    "INSERT INTO reproit_artifacts (id, media_type, bytes, body, received_ms) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
                ),
                (artifact_id, media_type, len(body), body.decode("utf-8"), now),
            )
            return bool(cursor.rowcount)

    def _over_quota(self, cursor: Any, owner: str, size: int, quota: ArtifactQuota) -> bool:
        cursor.execute(self._sql("SELECT COALESCE(SUM(bytes), 0) FROM reproit_artifacts"))
        if int(cursor.fetchone()[0]) + size > quota.total_bytes:
            return True
        cursor.execute(
            self._sql(
                "SELECT COALESCE(SUM(o.bytes), 0) FROM reproit_artifact_owners o "
                "JOIN reproit_artifacts a ON a.id = o.id WHERE o.owner = ?"
            ),
            (owner,),
        )
        return int(cursor.fetchone()[0]) + size > quota.per_key_bytes

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
        """The stored capsule artifact ``batch`` names (a heavy operation), or ``None``: also
        when that artifact is not the batch's own capsule (:func:`binding_problem`)."""
        named = capsule_artifact_id(batch)
        if named is None:
            return None
        artifact = self.get_artifact(named)
        if artifact is None or binding_problem(batch, artifact.body) is not None:
            return None
        return artifact.body

    def artifact_count(self) -> int:
        """How many artifacts are stored."""
        with self._transaction() as cursor:
            cursor.execute(self._sql("SELECT COUNT(*) FROM reproit_artifacts"))
            row = cursor.fetchone()
        return int(row[0])
