"""Checking a ``capture-batch-v1`` the way the ReproIt ingest does (PROTOCOL section 5.8).

:func:`validate_capture_batch` returns every problem it finds as a :class:`BatchProblem`
(``rule``, ``field``, ``message``); an empty list means the batch is accepted.
:func:`check_capture_batch` raises :class:`BatchValidationError` for the first one instead. An
ingest endpoint answers ``400`` with the rule and the field.

Two layers, in this order:

The schema (always)
    Every object is closed (rule ``unknown-field``): the batch, the emitter, the deployment,
    the policy, each capability, captured event, event kind, captured value, failure and
    artifact. Required fields (``missing-field``), JSON types (``field-type``), enumerations
    (``enum``), protocol tokens (``token``: 1 to 128 of ``A-Z a-z 0-9 - _ . :``), text bounds
    (``text-size``: 16 KiB; ``empty-text``), ``version`` 1 (``version``), ``observedAt`` as RFC
    3339 or a legacy epoch-millisecond string (``observed-at``), counts (``event-count``
    1..5000, ``artifact-count`` ≤ 256, ``capability-count`` ≤ 128), emitter ``parentId`` ≠ ``id``
    (``emitter-parent``), a deployment with an identity (``deployment-identity``), capability
    kinds unique with a ``detail`` unless complete (``capability-duplicate``,
    ``capability-detail``), unique event ids (``event-id``), strictly increasing non-zero
    sequences (``event-sequence``), causal parents (``causal-parents``: at most 32, unique, not
    the event itself, and naming only earlier events of the batch), whole events ≤ 128 KiB
    (``event-size``), captured values and checkpoint attributes ≤ 64 KiB (``value-size``),
    replayable values that are safe to store (``redaction``), connection ``setup`` answers
    replay can serve (``connection-setup``, :mod:`reproit_otel.wire.connection_setup`), and
    artifact references (``artifact``).

The portable assessment (``portable=True``, the default; run when the schema holds)
    What ``capture-validate`` demands of a reproducible failure: a failure observation
    (``no-failure-observation``); an observation with authority other than ``source-claim``
    and a non-empty signature (``no-runtime-oracle``); each trigger with its capability
    complete and a value that is not structural (``trigger-capability``,
    ``trigger-not-replayable``); each distinct state access and dependency with a replayable
    value and ``database`` / ``network`` complete (``state-not-replayable``,
    ``state-capability``, ``dependency-not-replayable``, ``dependency-capability``); no
    ``effect`` event standing for a read/write/delete/call/return/publish/consume/connect/
    disconnect boundary (``ambiguous-effect``); a valid ``determinism-envelope`` checkpoint
    (``determinism-envelope``: ``observedAtMs`` integer ≥ 0, ``replaySeed`` a non-empty string
    of at most 128 bytes or an unsigned integer, ``tz`` absent or not blank); and no ``defect``
    events (``defect-event``).

Field paths read like ``events[3].event.value.redaction``.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .assessment import assess_capture_batch
from .batch_vocabulary import (
    ARTIFACT_KINDS,
    ARTIFACT_POLICIES,
    AUTHORITIES,
    CAPABILITIES,
    COLLECTION_METHODS,
    COMPLETENESS,
    CONSENT_CLASSES,
    DEFECT_KINDS,
    DEPENDENCY_OPERATIONS,
    EMITTER_KINDS,
    ENVIRONMENT_KINDS,
    OBSERVATION_KINDS,
    OUTCOMES,
    REDACTIONS,
    STATE_KINDS,
    STATE_OPERATIONS,
    TRIGGER_KINDS,
    BatchProblem,
    BatchValidationError,
)
from .canonical import canonical_json_bytes
from .connection_setup import setup_problem

__all__ = [
    "BatchProblem",
    "BatchValidationError",
    "check_capture_batch",
    "validate_capture_batch",
]


_TOKEN = re.compile(r"[A-Za-z0-9._:-]{1,128}", re.ASCII)
_SHA256_ID = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))",
    re.ASCII,
)
_LEGACY_MS = re.compile(r"0|[1-9][0-9]{0,14}", re.ASCII)
_MAX_LEGACY_MS: Final = 253402300799999
_MAX_TOKEN_BYTES: Final = 128
_MAX_TEXT_BYTES: Final = 16 * 1024
_MAX_VALUE_BYTES: Final = 64 * 1024
_MAX_EVENT_BYTES: Final = 128 * 1024
_MAX_EVENTS: Final = 5000
_MAX_ARTIFACTS: Final = 256
_MAX_CAPABILITIES: Final = 128
_MAX_PARENTS: Final = 32
_U64_MAX: Final = 2**64 - 1
_I32: Final = (-(2**31), 2**31 - 1)

_MAX_ARTIFACT_BYTES: Final = 8 * 1024**3
_MAX_TOTAL_ARTIFACT_BYTES: Final = 32 * 1024**3


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _json_length(value: Any) -> int:
    return len(canonical_json_bytes(value))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_u64(value: object) -> bool:
    return _is_int(value) and 0 <= value <= _U64_MAX  # type: ignore[operator]


class _Checker:
    """Collects problems while walking one batch."""

    def __init__(self) -> None:
        self.problems: list[BatchProblem] = []
        self.artifact_ids: set[str] = set()

    def fail(self, rule: str, where: str, message: str) -> None:
        self.problems.append(BatchProblem(rule, where, message))

    # -- building blocks ---------------------------------------------------------------------

    def closed(
        self,
        value: object,
        where: str,
        required: Sequence[str],
        optional: Sequence[str] = (),
    ) -> Mapping[str, Any] | None:
        """``value`` as an object with exactly the given fields, else None (problems noted)."""
        if not isinstance(value, Mapping):
            self.fail("field-type", where, "must be a JSON object")
            return None
        allowed = set(required) | set(optional)
        for name in value:
            if name not in allowed:
                self.fail("unknown-field", f"{where}.{name}", "is not a field of this object")
        for name in required:
            if name not in value:
                self.fail("missing-field", f"{where}.{name}", "is required")
        return value

    def string(self, obj: Mapping[str, Any], name: str, where: str) -> str | None:
        if name not in obj:
            return None
        value = obj[name]
        if not isinstance(value, str):
            self.fail("field-type", f"{where}.{name}", "must be a string")
            return None
        return value

    def optional_string(self, obj: Mapping[str, Any], name: str, where: str) -> str | None:
        if obj.get(name) is None:
            return None
        return self.string(obj, name, where)

    def token(
        self, obj: Mapping[str, Any], name: str, where: str, *, optional: bool = False
    ) -> None:
        value = (
            self.optional_string(obj, name, where) if optional else self.string(obj, name, where)
        )
        if value is not None and _TOKEN.fullmatch(value) is None:
            self.fail(
                "token",
                f"{where}.{name}",
                "must be 1 to 128 characters of A-Z a-z 0-9 - _ . :",
            )

    def text(
        self,
        obj: Mapping[str, Any],
        name: str,
        where: str,
        *,
        optional: bool = False,
        non_empty: bool = False,
        maximum: int = _MAX_TEXT_BYTES,
    ) -> str | None:
        value = (
            self.optional_string(obj, name, where) if optional else self.string(obj, name, where)
        )
        if value is None:
            return None
        if _utf8_length(value) > maximum:
            self.fail("text-size", f"{where}.{name}", f"must be at most {maximum} bytes")
        if non_empty and not value:
            self.fail("empty-text", f"{where}.{name}", "must not be empty")
        return value

    def enum(
        self, obj: Mapping[str, Any], name: str, where: str, allowed: Any, *, optional: bool = False
    ) -> str | None:
        if name not in obj or (optional and obj[name] is None):
            return None
        value = obj[name]
        if not isinstance(value, str) or value not in allowed:
            self.fail(
                "enum", f"{where}.{name}", f"{value!r} is not one of {', '.join(sorted(allowed))}"
            )
            return None
        return value

    def unsigned(
        self, obj: Mapping[str, Any], name: str, where: str, *, optional: bool = False
    ) -> int | None:
        if name not in obj or (optional and obj[name] is None):
            return None
        value = obj[name]
        if not _is_u64(value):
            self.fail("field-type", f"{where}.{name}", "must be an unsigned integer")
            return None
        return int(value)

    def array(self, obj: Mapping[str, Any], name: str, where: str) -> list[Any]:
        """A list field that defaults to empty when absent."""
        if name not in obj:
            return []
        value = obj[name]
        if not isinstance(value, list):
            self.fail("field-type", f"{where}.{name}", "must be an array")
            return []
        return value

    # -- the batch ---------------------------------------------------------------------------

    def batch(self, batch: object) -> None:
        top = self.closed(
            batch,
            "batch",
            (
                "version",
                "batchId",
                "projectId",
                "sessionId",
                "emitter",
                "observedAt",
                "policy",
                "events",
            ),
            ("deployment", "capabilities", "artifacts"),
        )
        if top is None:
            return
        where = "batch"
        if "version" in top and (not _is_int(top["version"]) or top["version"] != 1):
            self.fail(
                "version", "batch.version", f"{top['version']!r} is not supported; expected 1"
            )
        for name in ("batchId", "projectId", "sessionId"):
            self.token(top, name, where)
        self.observed_at(top)
        events = self.array(top, "events", where) if "events" in top else []
        artifacts = self.array(top, "artifacts", where)
        capabilities = self.array(top, "capabilities", where)
        if "events" in top and not 1 <= len(events) <= _MAX_EVENTS:
            self.fail("event-count", "batch.events", f"must hold 1 to {_MAX_EVENTS} events")
        if len(artifacts) > _MAX_ARTIFACTS:
            self.fail("artifact-count", "batch.artifacts", f"must hold at most {_MAX_ARTIFACTS}")
        if len(capabilities) > _MAX_CAPABILITIES:
            self.fail(
                "capability-count", "batch.capabilities", f"must hold at most {_MAX_CAPABILITIES}"
            )
        if "emitter" in top:
            self.emitter(top["emitter"])
        if top.get("deployment") is not None:
            self.deployment(top["deployment"])
        if "policy" in top:
            policy = self.closed(top["policy"], "batch.policy", ("consent", "retentionClass"))
            if policy is not None:
                self.enum(policy, "consent", "batch.policy", CONSENT_CLASSES)
                self.token(policy, "retentionClass", "batch.policy")
        seen_capabilities: set[str] = set()
        for index, capability in enumerate(capabilities):
            self.capability(capability, f"batch.capabilities[{index}]", seen_capabilities)
        total_bytes = 0
        for index, artifact in enumerate(artifacts):
            total_bytes += self.artifact(artifact, f"batch.artifacts[{index}]")
        if total_bytes > _MAX_TOTAL_ARTIFACT_BYTES:
            self.fail("artifact", "batch.artifacts", "the artifacts exceed 32 GiB together")
        self.events(events)

    def observed_at(self, top: Mapping[str, Any]) -> None:
        value = self.string(top, "observedAt", "batch")
        if value is None:
            return
        if not value or _utf8_length(value) > _MAX_TOKEN_BYTES or not _timestamp(value):
            self.fail(
                "observed-at",
                "batch.observedAt",
                "must be an RFC 3339 timestamp (or a legacy epoch-millisecond string) "
                "of at most 128 bytes",
            )

    def emitter(self, value: object) -> None:
        where = "batch.emitter"
        emitter = self.closed(value, where, ("id", "kind", "component"), ("runtime", "parentId"))
        if emitter is None:
            return
        self.token(emitter, "id", where)
        self.token(emitter, "component", where)
        self.enum(emitter, "kind", where, EMITTER_KINDS)
        self.token(emitter, "runtime", where, optional=True)
        self.token(emitter, "parentId", where, optional=True)
        if emitter.get("parentId") is not None and emitter.get("parentId") == emitter.get("id"):
            self.fail("emitter-parent", f"{where}.parentId", "must differ from the emitter id")

    def deployment(self, value: object) -> None:
        where = "batch.deployment"
        deployment = self.closed(value, where, (), ("version", "commit"))
        if deployment is None:
            return
        if deployment.get("version") is None and deployment.get("commit") is None:
            self.fail("deployment-identity", where, "needs a version or a commit")
        self.token(deployment, "version", where, optional=True)
        self.token(deployment, "commit", where, optional=True)

    def capability(self, value: object, where: str, seen: set[str]) -> None:
        entry = self.closed(value, where, ("capability", "completeness"), ("detail",))
        if entry is None:
            return
        kind = self.enum(entry, "capability", where, CAPABILITIES)
        completeness = self.enum(entry, "completeness", where, COMPLETENESS)
        detail = self.text(entry, "detail", where, optional=True)
        if kind is not None:
            if kind in seen:
                self.fail("capability-duplicate", f"{where}.capability", f"{kind} is listed twice")
            seen.add(kind)
        if completeness is not None and completeness != "complete" and not detail:
            self.fail(
                "capability-detail",
                f"{where}.detail",
                f"a {completeness} capability needs a detail",
            )

    def artifact(self, value: object, where: str) -> int:
        artifact = self.closed(
            value,
            where,
            ("id", "kind", "mediaType", "bytes", "policy", "redaction", "collection"),
            ("encryptionKeyId", "name"),
        )
        if artifact is None:
            return 0
        artifact_id = self.string(artifact, "id", where)
        if artifact_id is not None:
            if _SHA256_ID.fullmatch(artifact_id) is None:
                self.fail("artifact", f"{where}.id", "must be sha256: and 64 lowercase hex digits")
            elif artifact_id in self.artifact_ids:
                self.fail("artifact", f"{where}.id", "is listed twice")
            self.artifact_ids.add(artifact_id)
        self.enum(artifact, "kind", where, ARTIFACT_KINDS)
        policy = self.enum(artifact, "policy", where, ARTIFACT_POLICIES)
        redaction = self.enum(artifact, "redaction", where, REDACTIONS | {"unredacted-restricted"})
        self.enum(artifact, "collection", where, COLLECTION_METHODS)
        media = self.text(artifact, "mediaType", where, maximum=_MAX_TOKEN_BYTES, non_empty=True)
        if media and not all("!" <= char <= "~" for char in media):
            self.fail("artifact", f"{where}.mediaType", "must be printable ASCII without spaces")
        self.token(artifact, "encryptionKeyId", where, optional=True)
        self.text(artifact, "name", where, optional=True)
        if redaction == "unredacted-restricted" and policy == "exportable":
            self.fail("artifact", f"{where}.redaction", "unredacted evidence cannot be exportable")
        size = self.unsigned(artifact, "bytes", where) or 0
        if size > _MAX_ARTIFACT_BYTES:
            self.fail("artifact", f"{where}.bytes", "must be at most 8 GiB")
        return size

    # -- events ------------------------------------------------------------------------------

    def events(self, events: list[Any]) -> None:
        batch_ids: set[str] = {
            e["id"] for e in events if isinstance(e, Mapping) and isinstance(e.get("id"), str)
        }
        earlier: set[str] = set()
        last_sequence: int | None = None
        for index, value in enumerate(events):
            where = f"batch.events[{index}]"
            event = self.closed(
                value,
                where,
                ("id", "sequence", "monotonicNs", "event"),
                (
                    "wallTime",
                    "processId",
                    "threadId",
                    "actor",
                    "causalParentIds",
                    "traceId",
                    "spanId",
                ),
            )
            if event is None:
                continue
            self.token(event, "id", where)
            event_id = event.get("id")
            if isinstance(event_id, str) and event_id in earlier:
                self.fail("event-id", f"{where}.id", f"{event_id} is used by an earlier event")
            sequence = self.unsigned(event, "sequence", where)
            if sequence is not None:
                if sequence == 0:
                    self.fail("event-sequence", f"{where}.sequence", "must not be 0")
                elif last_sequence is not None and sequence <= last_sequence:
                    self.fail("event-sequence", f"{where}.sequence", "must increase strictly")
                last_sequence = sequence
            self.unsigned(event, "monotonicNs", where)
            for name in ("processId", "threadId"):
                if self.unsigned(event, name, where, optional=True) == 0:
                    self.fail("event-sequence", f"{where}.{name}", "must not be 0")
            self.text(event, "wallTime", where, optional=True, maximum=_MAX_TOKEN_BYTES)
            for name in ("actor", "traceId", "spanId"):
                self.token(event, name, where, optional=True)
            parents = self.array(event, "causalParentIds", where)
            self.parents(parents, event_id, where, batch_ids, earlier)
            if "event" in event:
                self.event_kind(event["event"], f"{where}.event")
            if _json_length(event) > _MAX_EVENT_BYTES:
                self.fail("event-size", where, "the event exceeds 128 KiB")
            if isinstance(event_id, str):
                earlier.add(event_id)

    def parents(
        self,
        parents: list[Any],
        event_id: object,
        where: str,
        batch_ids: set[str],
        earlier: set[str],
    ) -> None:
        field = f"{where}.causalParentIds"
        if len(parents) > _MAX_PARENTS:
            self.fail("causal-parents", field, f"at most {_MAX_PARENTS} parents")
        seen: set[str] = set()
        for position, parent in enumerate(parents):
            at = f"{field}[{position}]"
            if not isinstance(parent, str) or _TOKEN.fullmatch(parent) is None:
                self.fail("token", at, "must be 1 to 128 characters of A-Z a-z 0-9 - _ . :")
                continue
            if parent == event_id:
                self.fail("causal-parents", at, "an event cannot be its own parent")
            elif parent in seen:
                self.fail("causal-parents", at, f"{parent} is listed twice")
            elif parent in batch_ids and parent not in earlier:
                self.fail("causal-parents", at, f"{parent} is not an earlier event of the batch")
            seen.add(parent)

    def value(self, value: object, where: str) -> None:
        """A captured value (structural, replayable, artifact or environment-bound)."""
        if not isinstance(value, Mapping):
            self.fail("field-type", where, "must be a captured value object")
            return
        representation = value.get("representation")
        shapes: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
            "structural": (("representation", "shape"), ()),
            "replayable": (("representation", "value", "redaction"), ()),
            "artifact": (("representation", "artifact_id", "policy"), ()),
            "environment-bound": (("representation", "reference"), ()),
        }
        if not isinstance(representation, str) or representation not in shapes:
            self.fail(
                "enum",
                f"{where}.representation",
                f"{representation!r} is not one of {', '.join(sorted(shapes))}",
            )
            return
        required, optional = shapes[representation]
        self.closed(value, where, required, optional)
        if representation == "structural" and "shape" in value:
            if _json_length(value["shape"]) > _MAX_VALUE_BYTES:
                self.fail("value-size", f"{where}.shape", "exceeds 64 KiB")
        elif representation == "replayable":
            redaction = value.get("redaction")
            if "redaction" in value and redaction not in REDACTIONS:
                self.fail(
                    "redaction",
                    f"{where}.redaction",
                    f"{redaction!r} is not safe to store; expected one of "
                    + ", ".join(sorted(REDACTIONS)),
                )
            if "value" in value and _json_length(value["value"]) > _MAX_VALUE_BYTES:
                self.fail("value-size", f"{where}.value", "exceeds 64 KiB")
            self.connection_setup(value.get("value"), f"{where}.value")
        elif representation == "artifact":
            artifact_id = value.get("artifact_id")
            if "artifact_id" in value and artifact_id not in self.artifact_ids:
                self.fail("artifact", f"{where}.artifact_id", "names no artifact of the batch")
            policy = self.enum(value, "policy", where, ARTIFACT_POLICIES)
            if policy == "environment-bound":
                self.fail(
                    "artifact",
                    f"{where}.policy",
                    "an environment-bound artifact cannot be referenced",
                )
        else:
            self.text(value, "reference", where)

    def connection_setup(self, recorded: object, where: str) -> None:
        """A recorded exchange's connection ``setup`` answers, which replay serves as they are."""
        exchange = recorded.get("exchange") if isinstance(recorded, Mapping) else None
        problem = setup_problem(exchange) if isinstance(exchange, Mapping) else None
        if problem is not None:
            self.fail("connection-setup", f"{where}.exchange.{problem[0]}", problem[1])

    def optional_value(self, body: Mapping[str, Any], where: str) -> None:
        if body.get("value") is not None:
            self.value(body["value"], f"{where}.value")

    def event_kind(self, value: object, where: str) -> None:
        if not isinstance(value, Mapping):
            self.fail("field-type", where, "must be a JSON object")
            return
        kind = value.get("kind")
        handler = _KINDS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            self.fail("enum", f"{where}.kind", f"{kind!r} is not a capture event kind")
            return
        required, optional, check = handler
        body = self.closed(value, where, ("kind", *required), optional)
        if body is not None:
            check(self, body, where)


def _subject(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.text(body, "subject", where, non_empty=True)
    checker.optional_value(body, where)


def _check_name(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.text(body, "name", where, non_empty=True)
    if body.get("kind") == "operation-end":
        checker.enum(body, "outcome", where, OUTCOMES)


def _check_trigger(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.enum(body, "trigger", where, TRIGGER_KINDS)
    _subject(checker, body, where)


def _check_state(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.enum(body, "state", where, STATE_KINDS)
    checker.enum(body, "operation", where, STATE_OPERATIONS)
    _subject(checker, body, where)


def _check_environment(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.enum(body, "environment", where, ENVIRONMENT_KINDS)
    _subject(checker, body, where)


def _check_dependency(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.token(body, "system", where)
    checker.enum(body, "operation", where, DEPENDENCY_OPERATIONS)
    _subject(checker, body, where)


def _check_effect(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.token(body, "effect", where)
    _subject(checker, body, where)


def _check_input(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.token(body, "name", where)
    if "value" in body:
        checker.value(body["value"], f"{where}.value")


def _check_checkpoint(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.token(body, "name", where)
    if _json_length(body.get("attributes")) > _MAX_VALUE_BYTES:
        checker.fail("value-size", f"{where}.attributes", "exceeds 64 KiB")


def _check_observation(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    at = f"{where}.failure"
    failure = (
        checker.closed(
            body.get("failure"),
            at,
            ("observation", "authority", "summary"),
            ("signature", "observationPoint", "artifactIds"),
        )
        if "failure" in body
        else None
    )
    if failure is None:
        return
    checker.enum(failure, "observation", at, OBSERVATION_KINDS)
    checker.enum(failure, "authority", at, AUTHORITIES)
    checker.text(failure, "summary", at, non_empty=True)
    checker.text(failure, "signature", at, optional=True)
    checker.text(failure, "observationPoint", at, optional=True)
    artifact_ids = checker.array(failure, "artifactIds", at)
    if len(artifact_ids) > _MAX_ARTIFACTS:
        checker.fail("artifact-count", f"{at}.artifactIds", f"at most {_MAX_ARTIFACTS}")
    seen: set[object] = set()
    for position, artifact_id in enumerate(artifact_ids):
        if artifact_id not in checker.artifact_ids or artifact_id in seen:
            checker.fail(
                "artifact",
                f"{at}.artifactIds[{position}]",
                "names no artifact of the batch, or twice",
            )
        if isinstance(artifact_id, str):
            seen.add(artifact_id)


def _check_defect(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    checker.enum(body, "defect", where, DEFECT_KINDS)
    checker.text(body, "detail", where, non_empty=True)
    if body.get("artifact_id") is not None and body["artifact_id"] not in checker.artifact_ids:
        checker.fail("artifact", f"{where}.artifact_id", "names no artifact of the batch")


def _check_process_start(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    at = f"{where}.process"
    process = (
        checker.closed(
            body.get("process"),
            at,
            ("processId", "executable"),
            ("parentProcessId", "executableHash"),
        )
        if "process" in body
        else None
    )
    if process is not None:
        pid = checker.unsigned(process, "processId", at)
        parent = checker.unsigned(process, "parentProcessId", at, optional=True)
        if pid == 0 or (parent is not None and parent == pid):
            checker.fail(
                "field-type", f"{at}.processId", "must be non-zero and differ from the parent"
            )
        checker.text(process, "executable", at, non_empty=True)
        digest = checker.optional_string(process, "executableHash", at)
        if digest is not None and _SHA256_ID.fullmatch(digest) is None:
            checker.fail("artifact", f"{at}.executableHash", "must be sha256: and 64 lowercase hex")
    for name in ("arguments", "working_directory"):
        if body.get(name) is not None:
            checker.value(body[name], f"{where}.{name}")


def _check_process_exit(checker: _Checker, body: Mapping[str, Any], where: str) -> None:
    if checker.unsigned(body, "process_id", where) == 0:
        checker.fail("field-type", f"{where}.process_id", "must not be 0")
    code = body.get("exit_code")
    if code is not None and not (_is_int(code) and _I32[0] <= code <= _I32[1]):
        checker.fail("field-type", f"{where}.exit_code", "must be a 32-bit integer")
    checker.token(body, "signal", where, optional=True)
    if body.get("exit_code") is None and body.get("signal") is None:
        checker.fail(
            "missing-field", f"{where}.exit_code", "an exit needs an exit code or a signal"
        )


_Check = Callable[[_Checker, Mapping[str, Any], str], None]
_KINDS: Final[Mapping[str, tuple[tuple[str, ...], tuple[str, ...], _Check]]] = {
    "process-start": (("process",), ("arguments", "working_directory"), _check_process_start),
    "process-exit": (("process_id",), ("exit_code", "signal"), _check_process_exit),
    "operation-start": (("name",), (), _check_name),
    "operation-end": (("name", "outcome"), (), _check_name),
    "trigger": (("trigger", "subject"), ("value",), _check_trigger),
    "input": (("name", "value"), (), _check_input),
    "state-access": (("state", "operation", "subject"), ("value",), _check_state),
    "environment-read": (("environment", "subject"), ("value",), _check_environment),
    "dependency": (("system", "operation", "subject"), ("value",), _check_dependency),
    "effect": (("effect", "subject"), ("value",), _check_effect),
    "checkpoint": (("name",), ("attributes",), _check_checkpoint),
    "observation": (("failure",), (), _check_observation),
    "defect": (("defect", "detail"), ("artifact_id",), _check_defect),
}


def _timestamp(value: str) -> bool:
    if _LEGACY_MS.fullmatch(value):
        return int(value) <= _MAX_LEGACY_MS
    match = _RFC3339.fullmatch(value)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return False
    if hour > 23 or minute > 59 or second > 60:
        return False
    if match.group(9) is not None:
        return int(match.group(9)) <= 23 and int(match.group(10)) <= 59
    return True


def validate_capture_batch(batch: object, *, portable: bool = True) -> list[BatchProblem]:
    """Every reason the ingest would refuse ``batch`` (a parsed JSON value); ``[]`` accepts it.

    ``portable`` adds the portable assessment (module docstring) when the schema holds.
    """
    checker = _Checker()
    checker.batch(batch)
    if checker.problems or not portable:
        return checker.problems
    assert isinstance(batch, Mapping)
    return assess_capture_batch(batch)


def check_capture_batch(batch: object, *, portable: bool = True) -> None:
    """Raise :class:`BatchValidationError` for the first problem :func:`validate_capture_batch`
    finds."""
    problems = validate_capture_batch(batch, portable=portable)
    if problems:
        raise BatchValidationError(problems[0])
