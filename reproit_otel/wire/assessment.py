"""The portable assessment ``capture-validate`` makes of a schema-valid batch (PROTOCOL 5.8).

:func:`assess_capture_batch` lists what keeps a ``capture-batch-v1`` from being reproduced
anywhere but where it was captured; see :mod:`reproit_otel.wire.validate` for the rules. The
batch must already satisfy the schema (the function indexes it without checking).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .batch_vocabulary import AMBIGUOUS_EFFECTS, STATE_KINDS, TRIGGER_KINDS, BatchProblem
from .rng import parse_seed

__all__ = ["MAX_OBSERVED_AT_MS", "assess_capture_batch", "envelope_problem"]

_MAX_SEED_BYTES: Final = 128
_TZ: Final = re.compile(r"[\x21-\x7e]{1,255}")

MAX_OBSERVED_AT_MS: Final = 253_402_300_799_999
"""The last millisecond of year 9999 (UTC): the latest instant replay can pin the clock to."""
_U64_MAX: Final = 2**64 - 1


def _is_u64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U64_MAX


def _arming_number(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 <= value <= MAX_OBSERVED_AT_MS  # NaN and infinities fail both comparisons
    )


def envelope_problem(attributes: object, *, complete: bool = True) -> str | None:
    """What keeps a determinism envelope from arming a replay, or ``None`` when it can.

    The one rule for the fields replay pins (``replay/envelope.py``): ``observedAtMs`` an
    integer from 0 to the end of year 9999 in epoch milliseconds (a capsule may also hold a
    finite number in that range), ``replaySeed`` a non-empty string of at most 128 bytes that
    parses as a replay seed (hex digits, PROTOCOL 7.7) or an unsigned 64-bit integer, ``tz``
    absent or 1 to 255 printable ASCII characters with no space (``TZ`` syntax: a zone name
    such as ``Europe/Paris`` or a POSIX rule; never a NUL or a control character, which
    ``time.tzset`` cannot take). ``complete`` demands ``observedAtMs`` and ``replaySeed``
    (a capture batch's checkpoint, PROTOCOL 5.8); a capsule's envelope may leave any field
    out, and replay pins only what it holds.
    """
    if not isinstance(attributes, Mapping):
        return "the attributes must be an object"
    if complete or "observedAtMs" in attributes:
        observed = attributes.get("observedAtMs")
        whole = _is_u64(observed) and observed <= MAX_OBSERVED_AT_MS  # type: ignore[operator]
        if not (whole or (not complete and _arming_number(observed))):
            return (
                "observedAtMs must be an integer of at least 0 and at most "
                f"{MAX_OBSERVED_AT_MS} (the end of year 9999)"
            )
    if complete or "replaySeed" in attributes:
        seed = attributes.get("replaySeed")
        if isinstance(seed, str):
            if not seed or len(seed.encode("utf-8", "surrogatepass")) > _MAX_SEED_BYTES:
                return "replaySeed must be a non-empty string of at most 128 bytes"
            try:
                parse_seed(seed)
            except ValueError:
                return "replaySeed must be hex digits (PROTOCOL 7.7), such as 00ff00ff00ff00ff"
        elif not _is_u64(seed):
            return "replaySeed must be a non-empty string or an unsigned integer"
    if "tz" in attributes:
        tz = attributes.get("tz")
        if not (isinstance(tz, str) and _TZ.fullmatch(tz)):
            shown = repr(tz)[:80]
            return (
                f"tz must be absent or 1 to 255 printable ASCII characters without spaces "
                f"(a zone name such as Europe/Paris); got {shown}"
            )
    return None


def assess_capture_batch(batch: Mapping[str, Any]) -> list[BatchProblem]:
    """The portable-assessment problems of a schema-valid batch; ``[]`` when reproducible."""
    problems: list[BatchProblem] = []
    completeness = {
        entry["capability"]: entry["completeness"] for entry in batch.get("capabilities") or []
    }
    events: list[Mapping[str, Any]] = batch["events"]
    observations = [
        (index, e["event"]["failure"])
        for index, e in enumerate(events)
        if e["event"]["kind"] == "observation"
    ]
    if not observations:
        problems.append(
            BatchProblem("no-failure-observation", "batch.events", "the batch observes no failure")
        )
    elif not any(
        failure["authority"] != "source-claim" and failure.get("signature")
        for _, failure in observations
    ):
        index = observations[0][0]
        problems.append(
            BatchProblem(
                "no-runtime-oracle",
                f"batch.events[{index}].event.failure",
                "no observation has a runtime authority and a non-empty signature",
            )
        )
    seen: set[str] = set()
    envelope_ok = False
    envelope_failure: tuple[int, str] | None = None
    has_trigger = False
    for index, captured in enumerate(events):
        body = captured["event"]
        kind = body["kind"]
        where = f"batch.events[{index}].event"
        value = body.get("value")
        structural = isinstance(value, Mapping) and value.get("representation") == "structural"
        if kind == "trigger":
            has_trigger = True
            key = f"trigger:{body['trigger']}:{body['subject']}"
            if key in seen:
                continue
            seen.add(key)
            capability = TRIGGER_KINDS[body["trigger"]]
            if completeness.get(capability) != "complete":
                problems.append(
                    BatchProblem(
                        "trigger-capability",
                        where,
                        f"a {body['trigger']} trigger needs the {capability} capability complete",
                    )
                )
            elif structural:
                problems.append(
                    BatchProblem(
                        "trigger-not-replayable",
                        f"{where}.value",
                        "the trigger value is structural only",
                    )
                )
        elif kind in ("state-access", "dependency"):
            label = "state" if kind == "state-access" else "dependency"
            discriminator = body["state"] if kind == "state-access" else body["system"]
            key = f"{label}:{discriminator}:{body['subject']}"
            if key in seen:
                continue
            seen.add(key)
            capability = STATE_KINDS[body["state"]] if kind == "state-access" else "network"
            if value is None or structural:
                problems.append(
                    BatchProblem(
                        f"{label}-not-replayable",
                        f"{where}.value",
                        f"the {label} needs a replayable value",
                    )
                )
            elif completeness.get(capability) != "complete":
                problems.append(
                    BatchProblem(
                        f"{label}-capability",
                        where,
                        f"a {label} needs the {capability} capability complete",
                    )
                )
        elif kind == "effect" and body["effect"] in AMBIGUOUS_EFFECTS:
            problems.append(
                BatchProblem(
                    "ambiguous-effect",
                    f"{where}.effect",
                    f"an effect {body['effect']!r} is an unresolved boundary; record it as "
                    "a state-access or dependency event",
                )
            )
        elif kind == "checkpoint" and body["name"] == "determinism-envelope":
            # Every envelope checkpoint must arm: replay pins the first one it finds.
            problem = envelope_problem(body.get("attributes"))
            if problem is None:
                envelope_ok = True
            elif envelope_failure is None:
                envelope_failure = (index, problem)
        elif kind == "defect":
            problems.append(
                BatchProblem("defect-event", where, "the batch reports a capture defect")
            )
    if not has_trigger:
        problems.append(
            BatchProblem("no-trigger", "batch.events", "no event says what started the failure")
        )
    if envelope_failure is not None or not envelope_ok:
        if envelope_failure is None:
            problems.append(
                BatchProblem(
                    "determinism-envelope", "batch.events", "no determinism-envelope checkpoint"
                )
            )
        else:
            index, message = envelope_failure
            problems.append(
                BatchProblem(
                    "determinism-envelope", f"batch.events[{index}].event.attributes", message
                )
            )
    return problems
