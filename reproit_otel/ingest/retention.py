"""Retention: old batch bodies are let go, every occurrence's counts stay exact.

A busy service failing the same way all day sends thousands of batches for one occurrence;
only the latest is ever served as its capsule. :class:`Retention` (mixed into
:class:`~reproit_otel.ingest.store.Store`) prunes the *body* of every batch that is

* not among the ``retain_batches`` most recent of its occurrence (``0`` keeps every one), or
* received more than ``retain_days`` days ago (``0`` keeps them however old).

Artifacts (a heavy operation's whole capsule, ``artifact_store.py``) follow the batches that
name them: :meth:`Retention.prune_artifacts` deletes every artifact that no kept batch names
in its ``artifacts`` field, the artifact reference (an id merely mentioned elsewhere in a
batch, in a body or a message, keeps nothing). The uploader sends an artifact just before
the batch naming it, so an artifact is only deleted once it was received (or sent again)
more than :data:`ARTIFACT_GRACE_MS` ago.

A pruned batch keeps its row (project, batch id, SHA-256 of the body, when it arrived): the
counts of its occurrence never change, and a retried upload of it is still recognised as the
same batch and not counted twice. Only its body is emptied. An occurrence whose every body is
pruned still lists with its counts; its capsule is gone (the API answers ``410``).

:meth:`Retention.prune_batches` runs the rules over the whole store, then
:meth:`Retention.prune_artifacts`; ``reproit-otel serve`` calls them at start and every
:data:`PRUNE_INTERVAL_S`, and the batch count rule is also applied to an occurrence each time
it receives a batch. A store that keeps every batch (both rules ``0``) keeps every artifact.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Final

from reproit_otel.wire.artifacts import ARTIFACT_ID_PATTERN

__all__ = [
    "ARTIFACT_GRACE_MS",
    "DEFAULT_RETAIN_BATCHES",
    "DEFAULT_RETAIN_DAYS",
    "PRUNE_INTERVAL_S",
    "Retention",
    "RetentionRules",
    "prune_periodically",
]

DEFAULT_RETAIN_BATCHES: Final = 20
"""Batch bodies kept per occurrence by default."""
DEFAULT_RETAIN_DAYS: Final = 30.0
"""Days a batch body is kept by default."""
PRUNE_INTERVAL_S: Final = 600.0
"""How often ``reproit-otel serve`` applies the rules to the whole store."""
ARTIFACT_GRACE_MS: Final = 3_600_000
"""An artifact received (or sent again) less than this long ago is never pruned: its batch may
still be on its way."""

_DAY_MS: Final = 86_400_000


def _referenced(body: str) -> set[str]:
    """The artifact ids a stored batch body names in its ``artifacts`` field."""
    try:
        batch = json.loads(body)
    except (ValueError, RecursionError):
        return set()
    artifacts = batch.get("artifacts") if isinstance(batch, dict) else None
    if not isinstance(artifacts, list):
        return set()
    return {
        entry["id"]
        for entry in artifacts
        if isinstance(entry, dict)
        and isinstance(entry.get("id"), str)
        and ARTIFACT_ID_PATTERN.fullmatch(entry["id"])
    }


_DELETE_CHUNK: Final = 200
_log = logging.getLogger("reproit_otel.ingest")

# The batches to prune: ranked newest first within each occurrence, among those with a body.
_PRUNABLE = """
SELECT seq FROM (
    SELECT seq, received_ms,
           ROW_NUMBER() OVER (PARTITION BY occurrence_id ORDER BY seq DESC) AS newest
    FROM reproit_batches WHERE body <> '' {scope}
) ranked
WHERE (? > 0 AND newest > ?) OR received_ms < ?
"""


@dataclass(frozen=True)
class RetentionRules:
    """How many batch bodies per occurrence, and for how many days, are kept (0: no limit)."""

    retain_batches: int = DEFAULT_RETAIN_BATCHES
    retain_days: float = DEFAULT_RETAIN_DAYS


class Retention:
    """Pruning of batch bodies (see the module docstring)."""

    retention: RetentionRules = RetentionRules(0, 0)  # the store keeps everything until told

    def _sql(self, statement: str) -> str:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _prune(self, cursor: Any, *, now_ms: int, occurrence_id: str | None) -> int:
        rules = self.retention
        if rules.retain_batches <= 0 and rules.retain_days <= 0:
            return 0
        cutoff = now_ms - int(rules.retain_days * _DAY_MS) if rules.retain_days > 0 else -1
        scope = "" if occurrence_id is None else "AND occurrence_id = ?"
        params: list[Any] = [] if occurrence_id is None else [occurrence_id]
        params += [rules.retain_batches, rules.retain_batches, cutoff]
        cursor.execute(
            self._sql(
                "UPDATE reproit_batches SET body = '' WHERE seq IN ("
                + _PRUNABLE.format(scope=scope)
                + ")"
            ),
            params,
        )
        return int(cursor.rowcount)

    def prune_batches(self, *, now_ms: int | None = None) -> int:
        """Apply the retention rules to every occurrence; how many bodies were pruned."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._transaction() as cursor:
            return self._prune(cursor, now_ms=now, occurrence_id=None)

    def prune_artifacts(self, *, now_ms: int | None = None) -> int:
        """Delete the artifacts no kept batch names (past the grace); how many were deleted.

        Nothing is deleted while the rules keep every batch.
        """
        rules = self.retention
        if rules.retain_batches <= 0 and rules.retain_days <= 0:
            return 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        settled = now - ARTIFACT_GRACE_MS
        with self._transaction() as cursor:
            cursor.execute(
                self._sql("SELECT id FROM reproit_artifacts WHERE received_ms < ?"), (settled,)
            )
            candidates = {str(row[0]) for row in cursor.fetchall()}
            if not candidates:
                return 0
            cursor.execute(
                self._sql("SELECT body FROM reproit_batches WHERE body <> '' AND body LIKE ?"),
                ("%sha256:%",),
            )
            for (body,) in cursor.fetchall():
                candidates.difference_update(_referenced(str(body)))
                if not candidates:
                    return 0
            doomed = sorted(candidates)
            deleted = 0
            for start in range(0, len(doomed), _DELETE_CHUNK):
                chunk = doomed[start : start + _DELETE_CHUNK]
                marks = ", ".join("?" for _ in chunk)
                cursor.execute(
                    self._sql(
                        f"DELETE FROM reproit_artifacts WHERE id IN ({marks}) AND received_ms < ?"
                    ),
                    (*chunk, settled),
                )
                deleted += int(cursor.rowcount)
            cursor.execute(
                self._sql(
                    "DELETE FROM reproit_artifact_owners WHERE id NOT IN "
                    "(SELECT id FROM reproit_artifacts)"
                )
            )
            return deleted


def prune_periodically(store: Retention, stop: threading.Event) -> threading.Thread:
    """A daemon thread applying the rules at once and every :data:`PRUNE_INTERVAL_S` until
    ``stop`` is set; a failure is logged and tried again next time."""

    def run() -> None:
        while True:
            try:
                pruned = store.prune_batches()
                deleted = store.prune_artifacts()
            except Exception as error:  # a locked or unreachable database: next round
                _log.warning("reproit-otel serve: pruning old batches failed: %s", error)
            else:
                if pruned:
                    _log.info("reproit-otel serve: pruned the bodies of %d old batch(es)", pruned)
                if deleted:
                    _log.info(
                        "reproit-otel serve: deleted %d artifact(s) no kept batch names", deleted
                    )
            if stop.wait(PRUNE_INTERVAL_S):
                return

    thread = threading.Thread(target=run, name="reproit-ingest-retention", daemon=True)
    thread.start()
    return thread
