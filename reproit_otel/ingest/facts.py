"""What the ingest learns from a stored failure: the facts an occurrence is grouped and listed by.

A ``capture-batch-v1`` (PROTOCOL section 5.5) is read for:

* ``operation``: the name of the first ``operation-start`` event;
* ``signature`` and ``summary``: from the first ``observation`` event's ``failure``;
* ``oracle``: the signature up to its first ``:`` (section 5.9);
* ``status``: the ``status`` of the raw return event carried by the ``operation-return``
  effect, when it is an integer;
* ``build`` / ``commit``: the batch ``deployment``;
* ``has_exchanges``: whether any ``dependency`` or ``state-access`` event carries a
  replayable value with an ``exchange`` (a capsule can then replay the operation);
* ``exception_kind``: the exception the raw return event's output carries
  (``wire/exception.py``), as its type and innermost application frame (file and function,
  never the line: ``TypeError @ shop/views.py in create_order``);
* ``fingerprint``: what tells failures of one operation apart: the ``exception_kind`` when
  there is one, else the status (``HTTP 500``; ``no status`` without one).

An occurrence is the group of every failure with the same project (the application),
operation, signature and fingerprint (:attr:`FailureFacts.occurrence_id`): three different
exceptions on ``POST /api/articles`` are three occurrences, while the same exception raised
again from an edited line of the same function stays one.

A failing OTLP server span (``POST /v1/traces``) gives the same facts without exchanges and
without an exception: its signature is ``backend-server-error:<operation>`` and its
fingerprint its status. The store counts it on the most recently seen occurrence of the same
project and signature when there is one
(:meth:`~reproit_otel.ingest.store.Store.record_server_spans`), so a span and the capture
batch of one failure land together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reproit_otel.wire.exception import error_of_output, exception_kind

SERVER_ERROR_ORACLE = "backend-server-error"
_MAX_KIND = 512


class UnsignedBatchError(ValueError):
    """The batch carries no signed failure observation, so it names no occurrence."""


class BatchFactError(ValueError):
    """A batch field the ingest reads is out of its range (refused with ``rule`` and ``field``)."""

    def __init__(self, rule: str, field: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.field = field


@dataclass(frozen=True)
class FailureFacts:
    """One failure, as the store groups it."""

    project_id: str
    signature: str
    operation: str
    summary: str
    status: int | None
    build: str | None
    commit: str | None
    has_exchanges: bool
    exception_kind: str | None = None

    @property
    def oracle(self) -> str:
        """The oracle id: the signature up to its first ``:``."""
        return self.signature.split(":", 1)[0]

    @property
    def fingerprint(self) -> str:
        """The exception kind, else the status (``HTTP 500``), else ``no status``."""
        return failure_fingerprint(self.exception_kind, self.status)

    @property
    def occurrence_id(self) -> str:
        """A stable id for the (project, operation, signature, fingerprint) group, equal on
        every ingest instance."""
        return occurrence_id_of(self.project_id, self.operation, self.signature, self.fingerprint)


def failure_fingerprint(exception_kind: str | None, status: int | None) -> str:
    """What tells failures of one operation apart (see :attr:`FailureFacts.fingerprint`)."""
    if exception_kind:
        return exception_kind
    return "no status" if status is None else f"HTTP {status}"


def occurrence_id_of(project_id: str, operation: str, signature: str, fingerprint: str) -> str:
    """The id of the occurrence of a project, operation, signature and fingerprint."""
    key = "\0".join((project_id, operation, signature, fingerprint))
    return f"occ_{hashlib.sha256(key.encode()).hexdigest()[:20]}"


def _event_body(event: Any) -> Mapping[str, Any]:
    if isinstance(event, Mapping):
        body = event.get("event")
        if isinstance(body, Mapping):
            return body
    return {}


def _replayable(body: Mapping[str, Any]) -> Any:
    value = body.get("value")
    if isinstance(value, Mapping) and value.get("representation") == "replayable":
        return value.get("value")
    return None


def _token_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def batch_facts(batch: Mapping[str, Any]) -> FailureFacts:
    """Read the occurrence facts of a validated capture batch.

    Raises :class:`UnsignedBatchError` when the batch has no operation-start or no observation
    with a non-empty signature.
    """
    operation: str | None = None
    signature: str | None = None
    summary = ""
    status: int | None = None
    has_exchanges = False
    failure_kind: str | None = None
    events = batch.get("events")
    for event in events if isinstance(events, list) else []:
        body = _event_body(event)
        kind = body.get("kind")
        if kind == "operation-start" and operation is None:
            name = body.get("name")
            operation = name if isinstance(name, str) else None
        elif kind == "observation" and signature is None:
            failure = body.get("failure")
            if isinstance(failure, Mapping):
                found = failure.get("signature")
                if isinstance(found, str) and found:
                    signature = found
                    summary = str(failure.get("summary") or "")
        elif kind in ("dependency", "state-access"):
            raw = _replayable(body)
            if isinstance(raw, Mapping) and isinstance(raw.get("exchange"), Mapping):
                has_exchanges = True
        elif kind == "effect" and body.get("subject") == "operation-return" and status is None:
            raw = _replayable(body)
            if isinstance(raw, Mapping):
                found_status = raw.get("status")
                if isinstance(found_status, int) and not isinstance(found_status, bool):
                    if not 0 <= found_status <= 65535:
                        raise BatchFactError(
                            "status",
                            "events",
                            f"the operation-return status {found_status} is no HTTP status: "
                            "send an integer from 0 to 65535",
                        )
                    status = found_status
                error = error_of_output(raw.get("output"))
                if error is not None:
                    failure_kind = exception_kind(error)[:_MAX_KIND]
    if operation is None:
        raise UnsignedBatchError("the batch has no operation-start event")
    if signature is None:
        raise UnsignedBatchError("the batch has no failure observation with a signature")
    deployment = batch.get("deployment")
    deployment = deployment if isinstance(deployment, Mapping) else {}
    return FailureFacts(
        project_id=str(batch.get("projectId")),
        signature=signature,
        operation=operation,
        summary=summary,
        status=status,
        build=_token_or_none(deployment.get("version")),
        commit=_token_or_none(deployment.get("commit")),
        has_exchanges=has_exchanges,
        exception_kind=failure_kind,
    )


def server_span_facts(
    *,
    project_id: str,
    operation: str,
    status: int,
    build: str | None,
    commit: str | None,
) -> FailureFacts:
    """The facts of a failing server span received over OTLP (no exchanges)."""
    return FailureFacts(
        project_id=project_id,
        signature=f"{SERVER_ERROR_ORACLE}:{operation}",
        operation=operation,
        summary=f"backend operation {operation} returned HTTP {status}",
        status=status,
        build=build,
        commit=commit,
        has_exchanges=False,
    )
