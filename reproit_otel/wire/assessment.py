"""The portable assessment ``capture-validate`` makes of a schema-valid batch (PROTOCOL 5.8).

:func:`assess_capture_batch` lists what keeps a ``capture-batch-v1`` from being reproduced
anywhere but where it was captured; see :mod:`reproit_otel.wire.validate` for the rules. The
batch must already satisfy the schema (the function indexes it without checking).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .batch_vocabulary import AMBIGUOUS_EFFECTS, STATE_KINDS, TRIGGER_KINDS, BatchProblem

__all__ = ["assess_capture_batch"]

_MAX_SEED_BYTES: Final = 128
_U64_MAX: Final = 2**64 - 1


def _is_u64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U64_MAX


def _envelope_problem(attributes: object) -> str | None:
    if not isinstance(attributes, Mapping):
        return "the attributes must be an object"
    observed = attributes.get("observedAtMs")
    if not _is_u64(observed):
        return "observedAtMs must be an integer of at least 0"
    seed = attributes.get("replaySeed")
    if isinstance(seed, str):
        if not seed or len(seed.encode("utf-8", "surrogatepass")) > _MAX_SEED_BYTES:
            return "replaySeed must be a non-empty string of at most 128 bytes"
    elif not _is_u64(seed):
        return "replaySeed must be a non-empty string or an unsigned integer"
    tz = attributes.get("tz")
    if "tz" in attributes and not (isinstance(tz, str) and tz.strip()):
        return "tz must be absent or a non-blank string"
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
    envelope_problem: tuple[int, str] | None = None
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
            problem = _envelope_problem(body.get("attributes"))
            if problem is None:
                envelope_ok = True
            elif envelope_problem is None:
                envelope_problem = (index, problem)
        elif kind == "defect":
            problems.append(
                BatchProblem("defect-event", where, "the batch reports a capture defect")
            )
    if not has_trigger:
        problems.append(
            BatchProblem("no-trigger", "batch.events", "no event says what started the failure")
        )
    if not envelope_ok:
        if envelope_problem is None:
            problems.append(
                BatchProblem(
                    "determinism-envelope", "batch.events", "no determinism-envelope checkpoint"
                )
            )
        else:
            index, message = envelope_problem
            problems.append(
                BatchProblem(
                    "determinism-envelope", f"batch.events[{index}].event.attributes", message
                )
            )
    return problems
