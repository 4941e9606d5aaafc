"""The capture-batch side of the wire layer against the shared vectors.

* ``node-golden/capture_payload.json`` ``batch.*``: each case's trace is replayed through the
  wire :class:`BackendTrace` with the pinned clock, eligibility is decided and the batch is
  built with the pinned environment. Node's posted body must equal ours once the decision D6
  identities are substituted (emitter, event id prefix, batch id prefix, envelope ``runtime``
  instead of ``node``). What the ingest stub saw beyond the first body (retries, stats of
  sending) is the uploader's business and is covered by its own tests. Where a decision changes
  the reference result the test asserts our behaviour and names it: D5 (a failure without any
  exchange is not captured) and D3 (nothing oversized is lost silently).
* ``capturePayload.*``: the 48 KiB payload helper.
* ``capture-batch-v1.json``: the protocol fixture passes :func:`validate_capture_batch`;
  mutations of it are refused with the rule and the field.
* ``capture-behavior-v1.json`` groups ``envelope``, ``triggerTokens``, ``capabilities``
  (``noExchanges`` is decision D5) and ``encoding``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from reproit_otel.errors import CapsuleError, TraceError
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.batch import (
    EMITTER,
    CaptureEnvironment,
    CaptureSettings,
    build_capture_batch,
    build_capture_result,
    capture_eligibility,
    is_token,
)
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.capsule import (
    capsule_from_batch,
    capsule_text,
    load_capsule,
    validate_capsule,
)
from reproit_otel.wire.payload import capture_payload
from reproit_otel.wire.trace import BackendTrace, reset_sequence
from reproit_otel.wire.validate import (
    validate_capture_batch,
)
from tests.vectors import golden_cases

RUNTIME = "python 3.11.4"
CASES = golden_cases("capture_payload.json")
BATCH_CASES = [case for case in CASES if case["name"].startswith("batch.")]
PAYLOAD_CASES = [case for case in CASES if case["name"].startswith("capturePayload.")]


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["name"] for case in cases]


# --- replaying a case -------------------------------------------------------------------------


def _config_usable(config: Mapping[str, Any]) -> bool:
    """Section 5.1: what makes ``Capture.create`` return a capture (the endpoint is the stub)."""
    api_key = config.get("apiKey")
    return (
        isinstance(api_key, str)
        and bool(api_key.strip())
        and is_token(config.get("appId"))
        and (config.get("build") is None or is_token(config.get("build")))
        and (config.get("commit") is None or is_token(config.get("commit")))
    )


def _context(case: dict[str, Any]) -> dict[str, Any]:
    env = case["input"]["environment"]
    seed_bytes = bytes.fromhex(env["randomBytesHex"])
    seed = (seed_bytes * 8)[:8].hex()
    context = {
        "traceId": f"cap-{env['nowMs']}-1",
        "actor": None,
        "actionIndex": 0,
        "build": case["input"]["config"].get("build"),
        "configContract": None,
        "captureEnvelope": True,
        "replaySeed": seed,
    }
    context.update(case["input"].get("contextOverrides", {}))
    return context


def _step(trace: BackendTrace, step: Mapping[str, Any]) -> dict[str, Any]:
    op = step["op"]
    try:
        if op == "effect":
            opts = step.get("opts", {})
            trace.effect(
                step["kind"],
                resource=opts.get("resource", UNSET),
                key=opts.get("key", UNSET),
                tenant=opts.get("tenant", UNSET),
                event=opts.get("event", UNSET),
                detail=opts.get("detail", UNSET),
                exchange=opts.get("exchange", UNSET),
            )
        elif op == "oracle":
            trace.oracle(step["id"], step.get("detail", UNSET))
        elif op == "finish":
            trace.finish(
                step.get("output", UNSET),
                step.get("status", UNSET),
                step.get("success", UNSET),
                step.get("effectsComplete", UNSET),
            )
        elif op == "repeat":
            results = [_step(trace, step["step"]) for _ in range(step["count"])]
            errors: dict[str, int] = {}
            for result in results:
                if "error" in result:
                    errors[result["error"]] = errors.get(result["error"], 0) + 1
            return {
                "repeat": step["count"],
                "ok": len(results) - sum(errors.values()),
                "errors": errors,
            }
        else:
            raise AssertionError(f"unknown step {op}")
    except TraceError as error:
        return {"error": error.code}
    return {"ok": True}


def _trace(case: dict[str, Any]) -> tuple[BackendTrace, list[dict[str, Any]]]:
    env = case["input"]["environment"]
    reset_sequence()
    begin = case["input"].get("begin", {})
    trace = BackendTrace.begin(
        _context(case),
        case["input"]["operation"],
        span_id=begin.get("spanId", UNSET),
        tenant=begin.get("tenant", UNSET),
        idempotency_key=begin.get("idempotencyKey", UNSET),
        input=begin.get("input", UNSET),
        selections=begin.get("selections", UNSET),
        wall_ms=lambda: env["nowMs"],
        mono_ns=lambda: int(env["hrtimeNs"]),
    )
    steps = [_step(trace, step) for step in case["input"]["steps"]]
    return trace, steps


def _settings(case: dict[str, Any]) -> CaptureSettings:
    config = case["input"]["config"]
    return CaptureSettings.resolve(
        config["appId"],
        build=config.get("build"),
        commit=config.get("commit"),
        environ=case["input"].get("env", {}),
    )


def _environment(case: dict[str, Any]) -> CaptureEnvironment:
    env = case["input"]["environment"]
    return CaptureEnvironment(
        now_ms=env["nowMs"],
        batch_number=1,
        runtime=RUNTIME,
        os=env["os"],
        arch=env["arch"],
        tz=env["tz"],
    )


def _queued(events: list[dict[str, Any]]) -> dict[str, Any]:
    returned = next(e for e in reversed(events) if e["kind"] == "return")
    status = returned.get("status")
    valid = isinstance(status, int) and not isinstance(status, bool) and 0 <= status <= 0xFFFF
    return {
        "operation": events[0]["operation"],
        "status": status if valid else None,
        "events": events,
    }


def _with_d6_identities(node_body: str) -> dict[str, Any]:
    """Node's posted batch with the decision D6 identities of reproit-otel substituted."""
    batch = json.loads(node_body)
    batch["emitter"] = dict(EMITTER)
    batch["batchId"] = batch["batchId"].replace("cb-node-", "cb-python-otel-", 1)

    def our_id(event_id: str) -> str:
        return event_id.replace("evt_backend-node_", "evt_backend-python-otel_", 1)

    for event in batch["events"]:
        event["id"] = our_id(event["id"])
        event["causalParentIds"] = [our_id(parent) for parent in event["causalParentIds"]]
        body = event["event"]
        if body["kind"] == "checkpoint" and body["name"] == "determinism-envelope":
            body["attributes"].pop("node", None)
            body["attributes"]["runtime"] = RUNTIME
    return batch


def _has_exchange(events: list[dict[str, Any]]) -> bool:
    return any(e["kind"] == "effect" and isinstance(e.get("exchange"), dict) for e in events)


def _expected_capsule_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Section 5.9 spelled out for a batch built from ``events``: start, exchanges, return."""
    returned = next(e for e in reversed(events) if e["kind"] == "return")
    start = {
        "traceId": events[0]["traceId"],
        "spanId": f"{events[0]['traceId']}:{events[0]['operation']}",
        "actionIndex": 0,
        "operation": events[0]["operation"],
    }
    for name in (
        "traceId",
        "spanId",
        "actionIndex",
        "operation",
        "build",
        "configContract",
        "actor",
        "tenant",
        "idempotencyKey",
        "selections",
    ):
        if name in returned:
            start[name] = returned[name]
    start.update(sequence=returned["sequence"] - 1, kind="start", input=events[0]["input"])
    effects = [e for e in events if e["kind"] == "effect" and "exchange" in e]
    return [start, *effects, returned]


@pytest.mark.parametrize("case", BATCH_CASES, ids=_ids(BATCH_CASES))
def test_batch_case(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if expect.get("captureCreated") is False:
        # The configuration is refused before any trace runs (the uploader owns Capture.create).
        assert not _config_usable(case["input"]["config"])
        assert expect["posted"] == []
        return
    assert _config_usable(case["input"]["config"])

    trace, steps = _trace(case)
    assert steps == expect["steps"]
    events = trace.events
    assert canonical_json(events) == canonical_json(expect["traceEvents"])

    node_captured = expect["stats"]["capturedOperations"] == 1
    eligible, reason = capture_eligibility(events)
    if node_captured and not _has_exchange(events):
        # Decision D5: a failure that recorded no exchange of any kind sends no batch.
        assert (eligible, reason) == (False, "no-exchanges")
    else:
        assert eligible == node_captured, reason
    if not node_captured:
        assert expect["posted"] == []
        return

    result = build_capture_result(
        _queued(events), config=_settings(case), environment=_environment(case)
    )
    batch = result.batch
    assert (
        build_capture_batch(_queued(events), config=_settings(case), environment=_environment(case))
        == batch
    )
    assert validate_capture_batch(batch, portable=False) == []

    if expect["posted"]:
        bodies = {posted["body"] for posted in expect["posted"]}
        assert len(bodies) == 1  # retries resend the same bytes
        assert canonical_json(batch) == canonical_json(_with_d6_identities(bodies.pop()))
        assert (result.dropped_effects, result.replaced_values) == (0, 0)
        assert validate_capture_batch(batch) == []
        capsule = capsule_from_batch(batch)
        assert capsule is not None
        assert capsule["events"] == _expected_capsule_events(events)
        if _queued(events)["status"] is None and events[-1].get("status") is not None:
            # The CLI reads a return status as u16 or null: such a capsule only replays.
            with pytest.raises(CapsuleError, match=r"events\[\d+\]\.status"):
                validate_capsule(capsule)
            assert load_capsule(capsule_text(capsule), strict=False) == capsule
        else:
            assert validate_capsule(capsule) is capsule
            assert load_capsule(capsule_text(capsule)) == capsule
    else:
        # Decision D3: the reference lost this operation (a captured value over 64 KiB aborted
        # its batch); reproit-otel sends it with what had to be given up counted and flagged.
        assert result.dropped_effects + result.replaced_values > 0
        partial = [c for c in batch["capabilities"] if c["completeness"] == "partial"]
        assert partial, batch["capabilities"]
        assert all(c["detail"] for c in partial)


# --- capturePayload ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", PAYLOAD_CASES, ids=_ids(PAYLOAD_CASES))
def test_capture_payload_case(case: dict[str, Any]) -> None:
    payload, dropped = capture_payload(case["input"])
    expect = case["expect"]
    if "result" in expect:
        assert expect["result"] is None
        assert payload is None
        return
    assert payload is not None
    if payload["version"] == 2:
        # Decision D3: reproit-otel stamps version 2 when events carry exchanges or at/monoNs;
        # the reference always wrote 1. Same length, so the bound decided the same drops.
        expected = json.loads(expect["canonical"])
        expected["version"] = 2
        assert canonical_json(payload) == canonical_json(expected)
    else:
        assert canonical_json(payload) == expect["canonical"]
    assert len(canonical_json(payload).encode()) == expect["bytes"]
    assert dropped == expect["droppedEffects"]
