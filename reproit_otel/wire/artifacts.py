"""Heavy operations: the whole capsule as a content-addressed artifact beside its batch.

A failing operation may hold more than one batch can carry: the 48 KiB payload bound of
decision D3 keeps about ten exchanges with 8 KiB bodies. Up to the capture budget
(``REPROIT_CAPTURE_BUDGET``, default 4 MiB) such an operation still travels whole:

1. :func:`capsule_artifact` projects the operation's complete batch (built with the budget as
   its payload bound) to the capsule a pull would give (PROTOCOL 5.9) and encodes it as the
   capsule file is encoded (5.10). Its id is ``sha256:`` and the 64 hex digits of SHA-256 of
   those bytes.
2. The uploader sends those bytes to the ingest (``PUT /v1/artifacts/<id>``) before the batch.
3. :func:`naming_artifact` turns the bounded batch (what D3 kept) into the batch that names
   the artifact: listed in ``artifacts`` (kind ``request-trace``, media type
   :data:`CAPSULE_MEDIA_TYPE`, its byte count, exportable, redacted at source, collected by the
   flight recorder), in the failure observation's ``artifactIds``, and each capability whose
   effects were left out of the batch is ``complete`` again with a ``detail`` naming the
   artifact. The batch stays within every reference limit.

An ingest reads the capsule of such a batch from the artifact (:func:`capsule_artifact_id`
finds it); one that takes no artifacts never receives the reference, and the batch it gets is
the bounded one, ``partial`` with its counts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from reproit_otel.wire.capsule import capsule_bytes, capsule_from_batch

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "CAPSULE_MEDIA_TYPE",
    "artifact_id",
    "capsule_artifact",
    "capsule_artifact_id",
    "naming_artifact",
]

CAPSULE_MEDIA_TYPE: Final = "application/vnd.reproit.backend-capture+json"
"""Media type of an artifact holding a whole ``reproit-backend-capture`` capsule."""

ARTIFACT_ID_PATTERN: Final = re.compile(r"sha256:[0-9a-f]{64}")
"""What an artifact id looks like (the reference validator's rule)."""


def artifact_id(data: bytes) -> str:
    """The content address of ``data``: ``sha256:`` and 64 lowercase hex digits."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def capsule_artifact(complete_batch: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]] | None:
    """``(bytes, descriptor)`` of the capsule artifact of a whole operation's batch.

    ``descriptor`` is the entry of the batch's ``artifacts`` list. ``None`` when the batch
    projects to no capsule.
    """
    capsule = capsule_from_batch(complete_batch)
    if capsule is None:
        return None
    data = capsule_bytes(capsule)
    descriptor = {
        "id": artifact_id(data),
        "kind": "request-trace",
        "mediaType": CAPSULE_MEDIA_TYPE,
        "bytes": len(data),
        "policy": "exportable",
        "redaction": "redacted-at-source",
        "collection": "flight-recorder",
    }
    return data, descriptor


def naming_artifact(
    batch: Mapping[str, Any], descriptor: Mapping[str, Any], completed: Mapping[str, str]
) -> dict[str, Any]:
    """``batch`` naming the capsule artifact ``descriptor``.

    ``completed`` maps each capability the bound made ``partial`` (and the artifact makes
    whole) to the partial detail it had; those become ``complete`` with a detail saying where
    the rest is. Other fields are shared with ``batch``, which is left unchanged.
    """
    identifier = descriptor["id"]
    capabilities = []
    for entry in batch.get("capabilities") or []:
        name = entry.get("capability")
        if name in completed and entry.get("completeness") == "partial":
            capabilities.append(
                {
                    "capability": name,
                    "completeness": "complete",
                    "detail": f"effects past the batch bound are in artifact {identifier}",
                }
            )
        else:
            capabilities.append(entry)
    events = []
    for captured in batch.get("events") or []:
        body = captured.get("event") if isinstance(captured, Mapping) else None
        if isinstance(body, Mapping) and body.get("kind") == "observation":
            failure = dict(body.get("failure") or {})
            failure["artifactIds"] = [*failure.get("artifactIds", []), identifier]
            events.append({**captured, "event": {**body, "failure": failure}})
        else:
            events.append(captured)
    return {
        **batch,
        "capabilities": capabilities,
        "events": events,
        "artifacts": [*batch.get("artifacts", []), dict(descriptor)],
    }


def capsule_artifact_id(batch: Mapping[str, Any]) -> str | None:
    """The id of the capsule artifact ``batch`` names, or ``None``."""
    for artifact in batch.get("artifacts") or []:
        if (
            isinstance(artifact, Mapping)
            and artifact.get("mediaType") == CAPSULE_MEDIA_TYPE
            and isinstance(artifact.get("id"), str)
            and ARTIFACT_ID_PATTERN.fullmatch(artifact["id"])
        ):
            return str(artifact["id"])
    return None
