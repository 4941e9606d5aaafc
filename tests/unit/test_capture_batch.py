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

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
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
    correlation_token,
    host_timezone,
    is_token,
    observed_at,
)
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.capsule import (
    CAPSULE_VERSIONS,
    CAPTURE_FORMAT,
    CAPTURE_VERSION,
    capsule_bytes,
    capsule_from_batch,
    capsule_text,
    load_capsule,
    validate_capsule,
)
from reproit_otel.wire.payload import capture_payload
from reproit_otel.wire.trace import BackendTrace, reset_sequence
from reproit_otel.wire.validate import (
    BatchValidationError,
    check_capture_batch,
    validate_capture_batch,
)
from tests.vectors import golden_cases, load_vector

RUNTIME = "python 3.11.4"
CASES = golden_cases("capture_payload.json")
# By what a case holds, not by its name: a capture run (steps and the batch posted) or a
# capsule-equivalent payload of given events (its canonical bytes).
BATCH_CASES = [case for case in CASES if "steps" in case["input"]]
PAYLOAD_CASES = [case for case in CASES if "canonical" in case["expect"]]


def test_every_capture_payload_case_has_an_adapter() -> None:
    assert len(BATCH_CASES) + len(PAYLOAD_CASES) == len(CASES)


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

    if "traceEvents" not in expect:
        # The reference could not even begin the trace (a long operation, decision D7 keeps
        # tracing it); it captured nothing.
        assert expect["posted"] == []
        return
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

    # The builder is pure and independent of the D5 gate: it must still give Node's bytes.
    result = build_capture_result(
        _queued(events), config=_settings(case), environment=_environment(case)
    )
    batch = result.batch
    assert (
        build_capture_batch(_queued(events), config=_settings(case), environment=_environment(case))
        == batch
    )
    assert validate_capture_batch(batch, portable=False) == []
    dropped, replaced = result.dropped_effects, result.replaced_values
    if replaced or not expect["posted"]:
        # Decision D3: the reference lost this operation or one of its events (a captured value
        # over 64 KiB); reproit-otel sends it with what had to be given up counted and flagged.
        assert dropped + replaced > 0
        partial = [c for c in batch["capabilities"] if c["completeness"] == "partial"]
        assert partial, batch["capabilities"]
        assert {c["capability"]: c["detail"] for c in partial} == result.partial
        return

    bodies = {posted["body"] for posted in expect["posted"]}
    assert len(bodies) == 1  # retries resend the same bytes
    expected = _with_d6_identities(bodies.pop())
    kept_events = events
    if dropped:
        # Decision D3: the reference posted the whole trace; the 48 KiB payload bound drops the
        # last effects and flags the capability they belong to.
        expected = _without_last_effects(expected, dropped, result.partial)
        effects = [e for e in events if e["kind"] == "effect"]
        gone = {id(e) for e in effects[len(effects) - dropped :]}
        kept_events = [e for e in events if id(e) not in gone]
    assert canonical_json(batch) == canonical_json(expected)
    if not dropped:
        assert validate_capture_batch(batch) == []
    capsule = capsule_from_batch(batch)
    assert capsule is not None
    assert capsule["events"] == _expected_capsule_events(kept_events)
    assert len(capsule_bytes(capsule)) <= 49152
    if _queued(events)["status"] is None and events[-1].get("status") is not None:
        # The CLI reads a return status as u16 or null: such a capsule only replays.
        with pytest.raises(CapsuleError, match=r"events\[\d+\]\.status"):
            validate_capsule(capsule)
        assert load_capsule(capsule_text(capsule), strict=False) == capsule
    else:
        assert validate_capsule(capsule) is capsule
        assert load_capsule(capsule_text(capsule)) == capsule


def _without_last_effects(
    batch: dict[str, Any], count: int, partial: Mapping[str, str]
) -> dict[str, Any]:
    """A posted reference batch with its last ``count`` effect carriers removed (decision D3)."""
    events = batch["events"]
    end = next(
        index
        for index, event in enumerate(events)
        if event["event"].get("subject") == "operation-return"
        or event["event"]["kind"] == "operation-end"
    )
    kept = events[: end - count] + events[end:]
    for index, event in enumerate(kept):
        event["sequence"] = index + 1
        event["id"] = f"evt_backend-python-otel_{index + 1}"
        event["causalParentIds"] = [kept[index - 1]["id"]] if index else []
    batch["events"] = kept
    batch["capabilities"] = [
        {
            "capability": c["capability"],
            "completeness": "partial",
            "detail": partial[c["capability"]],
        }
        if c["capability"] in partial
        else c
        for c in batch["capabilities"]
    ]
    return batch


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


# --- tokens, clocks, host facts ---------------------------------------------------------------


def test_token_rule() -> None:
    assert is_token("cap-1753747200000-1:createOrder")
    assert is_token("a" * 128)
    assert is_token("v1.2_3:x-y")
    for bad in ("", "a" * 129, "GET /quote", "has space", "é", "a\n", 7, None):
        assert not is_token(bad), bad


def test_correlation_token_hashes_non_tokens() -> None:
    assert correlation_token("spanId", "cap-1-1:op") == "cap-1-1:op"
    assert correlation_token("spanId", "cap-1753747200000-1:GET /quote") == (
        "spanid:f3e1cd1702e860be3b604df923093e0b"
    )
    assert (
        correlation_token("traceId", "t r") == "traceid:" + hashlib.sha256(b"t r").hexdigest()[:32]
    )


def test_observed_at_is_rfc3339_utc_millis() -> None:
    assert observed_at(1753747200000) == "2025-07-29T00:00:00.000Z"
    assert observed_at(1753747200123) == "2025-07-29T00:00:00.123Z"
    assert observed_at(0) == "1970-01-01T00:00:00.000Z"


def test_host_timezone_prefers_tz_and_omits_the_unknowable() -> None:
    assert host_timezone({"TZ": "Europe/Berlin"}) == "Europe/Berlin"
    assert host_timezone({"TZ": ":UTC"}) == "UTC"
    assert host_timezone({"TZ": "/usr/share/zoneinfo/Asia/Tokyo"}) == "Asia/Tokyo"
    assert host_timezone({"TZ": "CET-1CEST,M3.5.0,M10.5.0/3"}) is None


def test_settings_resolve_commit_sources_in_order() -> None:
    resolve = CaptureSettings.resolve
    env = {"REPROIT_COMMIT": "c-repro", "GITHUB_SHA": "c-gh", "REPROIT_IMAGE_DIGEST": "sha256:ab"}
    assert resolve("app", commit="c-cfg", environ=env) == CaptureSettings(
        "app", None, "c-cfg", "sha256:ab"
    )
    assert resolve("app", environ=env).commit == "c-repro"
    assert resolve("app", commit="bad commit", environ={"GITHUB_SHA": "c-gh"}).commit == "c-gh"
    assert resolve("app", environ={"REPROIT_IMAGE_DIGEST": "has space"}) == CaptureSettings("app")


# --- decisions D3 and D5 on traces built here ---------------------------------------------------

NOW = 1753747200000
ENVIRONMENT = CaptureEnvironment(
    now_ms=NOW, batch_number=7, runtime=RUNTIME, os="linux", arch="x64", tz="UTC"
)
SETTINGS = CaptureSettings("app-demo", build="1.2.3")


def _capture_trace(
    effects: Callable[[BackendTrace], None], *, status: Any = 500, operation: str = "POST /orders"
) -> list[dict[str, Any]]:
    reset_sequence()
    trace = BackendTrace.begin(
        {
            "traceId": f"cap-{NOW}-1",
            "actor": None,
            "actionIndex": 0,
            "build": "1.2.3",
            "configContract": None,
            "captureEnvelope": True,
            "replaySeed": "00ff00ff00ff00ff",
        },
        operation,
        input={"body": {"sku": "widget"}},
        wall_ms=lambda: NOW,
        mono_ns=lambda: 0,
    )
    effects(trace)
    trace.finish({"error": "boom"}, status, False, True)
    return trace.events


def _call(trace: BackendTrace, body: str = "ok", path: str = "/tax") -> None:
    trace.effect(
        "call",
        resource="svc:8080",
        key=f"GET {path}",
        exchange={
            "protocol": "http",
            "request": {"method": "GET", "url": f"http://svc:8080{path}"},
            "response": {"status": 200, "body": body},
        },
    )


def test_capabilities_exchanges_recorded() -> None:
    case = next(
        c
        for c in load_vector("capture-behavior-v1.json")["capabilities"]["cases"]
        if c["name"] == "exchangesRecorded"
    )
    events = _capture_trace(lambda t: [_call(t) for _ in range(case["exchangeCount"])])
    assert capture_eligibility(events) == (True, None)  # batchSent
    batch = build_capture_batch(_queued(events), config=SETTINGS, environment=ENVIRONMENT)
    network = [c for c in batch["capabilities"] if c["capability"] == "network"]
    assert [c["completeness"] for c in network] == [case["expect"]["networkCapability"]]
    assert batch["capabilities"] == [
        {"capability": "http", "completeness": "complete"},
        {
            "capability": "network",
            "completeness": "complete",
            "detail": "outbound dependency exchanges recorded with responses",
        },
    ]
    assert batch["batchId"] == f"cb-python-otel-{NOW}-7"
    assert validate_capture_batch(batch) == []


def test_capabilities_no_exchanges_is_decision_d5() -> None:
    case = next(
        c
        for c in load_vector("capture-behavior-v1.json")["capabilities"]["cases"]
        if c["name"] == "noExchanges"
    )
    assert case["expect"] == {"networkCapability": None, "batchSent": False}
    events = _capture_trace(lambda t: t.effect("emit", resource="audit", key="x"))
    assert capture_eligibility(events) == (False, "no-exchanges")
    batch = build_capture_batch(_queued(events), config=SETTINGS, environment=ENVIRONMENT)
    assert [c["capability"] for c in batch["capabilities"]] == ["http"]


def test_eligibility_reasons() -> None:
    with_call = _capture_trace(_call)
    assert capture_eligibility(with_call) == (True, None)
    assert capture_eligibility(with_call[:-1]) == (False, "unfinished")
    assert capture_eligibility(_capture_trace(_call, status=404)) == (False, "not-a-failure")
    assert capture_eligibility(_capture_trace(_call, status="500")) == (False, "not-a-failure")
    incomplete = [*with_call[:-1], {**with_call[-1], "effectsComplete": False}]
    assert capture_eligibility(incomplete) == (False, "effects-incomplete")
    unseeded = [{k: v for k, v in e.items() if k != "replaySeed"} for e in with_call]
    assert capture_eligibility(unseeded) == (False, "no-replay-seed")
    bare = _capture_trace(lambda t: t.effect("read", resource="pg", key="SELECT 1"))
    assert capture_eligibility(bare) == (False, "effect-without-exchange")
    marked = _capture_trace(lambda t: (_call(t), t.oracle("agent-response-content")), status=200)
    assert capture_eligibility(marked) == (True, None)


def test_d3_payload_bound_drops_trailing_effects_and_marks_partial() -> None:
    big = "x" * 8000
    events = _capture_trace(lambda t: [_call(t, big, f"/p{i}") for i in range(9)])
    assert capture_eligibility(events) == (True, None)
    result = build_capture_result(_queued(events), config=SETTINGS, environment=ENVIRONMENT)
    batch = result.batch
    kept = [e for e in batch["events"] if e["event"]["kind"] == "dependency"]
    assert result.dropped_effects == 9 - len(kept) > 0
    assert result.replaced_values == 0
    assert [e["event"]["value"]["value"]["key"] for e in kept] == [
        f"GET /p{i}" for i in range(len(kept))
    ]
    detail = (
        f"{result.dropped_effects} effect event(s) dropped to fit the 49152-byte capture "
        "payload bound"
    )
    assert batch["capabilities"][-1] == {
        "capability": "network",
        "completeness": "partial",
        "detail": detail,
    }
    assert validate_capture_batch(batch, portable=False) == []
    assert [p.rule for p in validate_capture_batch(batch)] == ["dependency-capability"]
    capsule = capsule_from_batch(batch)
    assert capsule is not None
    assert len(capsule_bytes(capsule)) <= 49152
    assert capsule["events"][1:-1] == [e for e in events if e["kind"] == "effect"][: len(kept)]


def test_d3_oversized_value_is_sent_as_identity_and_keeps_the_effects() -> None:
    blob = {"blob": "y" * 70000, "sku": "widget"}
    reset_sequence()
    trace = BackendTrace.begin(
        {"traceId": "cap-1-1", "captureEnvelope": True, "replaySeed": "00ff00ff00ff00ff"},
        "op",
        input=blob,
        wall_ms=lambda: NOW,
        mono_ns=lambda: 0,
    )
    _call(trace)
    trace.finish(None, 500, False, True)
    result = build_capture_result(_queued(trace.events), config=SETTINGS, environment=ENVIRONMENT)
    trigger = result.batch["events"][1]["event"]
    raw = canonical_json("y" * 70000).encode()
    # Only the member over 64 KiB gives way, before the 48 KiB bound looks: the rest of the
    # input and every effect are kept, and the capsule replays.
    assert trigger["value"] == {
        "representation": "replayable",
        "value": {
            "blob": {
                "bodyBytes": len(raw),
                "bodySha256": hashlib.sha256(raw).hexdigest(),
                "truncated": True,
            },
            "sku": "widget",
        },
        "redaction": "redacted-at-source",
    }
    assert (result.dropped_effects, result.replaced_values) == (0, 1)
    assert result.partial == {"http": "1 captured value(s) over 65536 bytes sent as identity only"}
    assert {c["capability"]: c["completeness"] for c in result.batch["capabilities"]} == {
        "http": "partial",
        "network": "complete",
    }
    assert validate_capture_batch(result.batch, portable=False) == []
    # A partial capability is valid, not portable (docs/compatibility.md).
    assert [p.rule for p in validate_capture_batch(result.batch)] == ["trigger-capability"]
    capsule = capsule_from_batch(result.batch)
    assert capsule is not None
    assert [e["kind"] for e in capsule["events"]] == ["start", "effect", "return"]
    assert capsule["events"][0]["input"] == trigger["value"]["value"]
    assert capsule["events"][1] == trace.events[1]
    assert validate_capsule(capsule) is capsule


def test_d3_an_oversized_response_part_fails_closed_in_replay() -> None:
    rows = [{"n": index, "text": "r" * 2000} for index in range(40)]
    exchange = {
        "protocol": "pg",
        "request": {"text": "SELECT n, text FROM t"},
        "response": {"command": "SELECT 40", "rowCount": 40, "rows": rows},
    }
    reset_sequence()
    trace = BackendTrace.begin(
        {"traceId": "cap-1-1", "captureEnvelope": True, "replaySeed": "00ff00ff00ff00ff"},
        "op",
        input={"q": 1},
        wall_ms=lambda: NOW,
        mono_ns=lambda: 0,
    )
    trace.effect("read", resource="pg", key="SELECT n, text FROM t", exchange=exchange)
    _call(trace)
    trace.finish(None, 500, False, True)
    result = build_capture_result(_queued(trace.events), config=SETTINGS, environment=ENVIRONMENT)
    assert (result.dropped_effects, result.replaced_values) == (0, 1)
    # The value was in a pg exchange: the database capability is the incomplete one.
    assert result.partial == {
        "database": "1 captured value(s) over 65536 bytes sent as identity only"
    }
    assert result.batch["capabilities"] == [
        {"capability": "http", "completeness": "complete"},
        {
            "capability": "database",
            "completeness": "partial",
            "detail": "1 captured value(s) over 65536 bytes sent as identity only",
        },
        {
            "capability": "network",
            "completeness": "complete",
            "detail": "outbound dependency exchanges recorded with responses",
        },
    ]
    assert [p.rule for p in validate_capture_batch(result.batch)] == ["state-capability"]
    capsule = capsule_from_batch(result.batch)
    assert capsule is not None
    read = capsule["events"][1]["exchange"]
    raw = canonical_json(rows).encode()
    assert read["response"] == {
        "command": "SELECT 40",
        "rowCount": 40,
        "rows": {
            "bodyBytes": len(raw),
            "bodySha256": hashlib.sha256(raw).hexdigest(),
            "truncated": True,
        },
        "truncated": True,
    }
    assert read["request"] == exchange["request"]
    assert capsule["events"][2] == trace.events[2]  # the call after it is kept


def test_d3_an_event_over_64_kib_marks_its_own_capability_partial() -> None:
    # Each part under 64 KiB, the call's event over it: the event's value gives way at batch
    # level, and the call's capability (network) is the incomplete one, not http.
    reset_sequence()
    trace = BackendTrace.begin(
        {"traceId": "cap-1-1", "captureEnvelope": True, "replaySeed": "00ff00ff00ff00ff"},
        "op",
        input={"q": 1},
        wall_ms=lambda: NOW,
        mono_ns=lambda: 0,
    )
    trace.effect(
        "call",
        resource="svc:8080",
        key="POST /big",
        exchange={
            "protocol": "http",
            "request": {"method": "POST", "url": "http://svc:8080/big", "body": "q" * 40000},
            "response": {"status": 200, "body": "r" * 40000},
        },
    )
    trace.effect("read", resource="pg", key="SELECT 1", exchange=_PG_SELECT)
    trace.finish(None, 500, False, True)
    result = build_capture_result(
        _queued(trace.events),
        config=SETTINGS,
        environment=ENVIRONMENT,
        payload_limit=1 << 20,
    )
    assert (result.dropped_effects, result.replaced_values) == (0, 1)
    assert result.partial == {
        "network": "1 captured value(s) over 65536 bytes sent as identity only"
    }
    assert {c["capability"]: c["completeness"] for c in result.batch["capabilities"]} == {
        "http": "complete",
        "database": "complete",
        "network": "partial",
    }


_PG_SELECT = {
    "protocol": "pg",
    "request": {"text": "SELECT 1"},
    "response": {"command": "SELECT", "rowCount": 1, "rows": [{"?column?": 1}]},
}


def test_capture_payload_size_arithmetic_matches_serialization() -> None:
    events = _capture_trace(
        lambda t: [_call(t, "z" * (3000 + 97 * i), f"/q{i}") for i in range(40)]
    )
    envelope = {"observedAtMs": NOW, "replaySeed": "00ff00ff00ff00ff", "tz": "Europe/Berlin"}
    payload, dropped = capture_payload(_queued(events), envelope=envelope)
    assert payload is not None and dropped > 0
    size = len(canonical_json(payload).encode())
    assert size <= 49152
    assert payload["version"] == 2
    assert payload["envelope"] == envelope
    # One more effect would not have fitted.
    effects = [e for e in events if e["kind"] == "effect"]
    wider = {
        **payload,
        "events": [*payload["events"][:-1], effects[len(effects) - dropped], payload["events"][-1]],
    }
    assert len(canonical_json(wider).encode()) > 49152


# --- envelope, trigger tokens, encoding -------------------------------------------------------


def test_envelope_vector_fields() -> None:
    group = load_vector("capture-behavior-v1.json")["envelope"]
    events = _capture_trace(_call)
    for environment, settings in (
        (ENVIRONMENT, CaptureSettings("app-demo", image_digest="sha256:abc")),
        (CaptureEnvironment(now_ms=NOW, batch_number=1, runtime=RUNTIME), CaptureSettings("app")),
    ):
        batch = build_capture_batch(_queued(events), config=settings, environment=environment)
        checkpoints = [e["event"] for e in batch["events"] if e["event"]["kind"] == "checkpoint"]
        assert [c["name"] for c in checkpoints] == [group["checkpointName"]]
        attributes = checkpoints[0]["attributes"]
        assert set(group["required"]) <= set(attributes)
        assert set(attributes) <= set(group["required"]) | set(group["optional"])
        assert None not in attributes.values()
        assert "deployment" not in batch
    assert attributes == {"observedAtMs": NOW, "replaySeed": "00ff00ff00ff00ff", "runtime": RUNTIME}
    assert group["deployment"]["commitSources"] == ["config", "REPROIT_COMMIT", "GITHUB_SHA"]


def _fixture() -> dict[str, Any]:
    return copy.deepcopy(load_vector("capture-batch-v1.json"))


def test_trigger_tokens() -> None:
    group = load_vector("capture-behavior-v1.json")["triggerTokens"]
    events = _capture_trace(_call)
    batch = build_capture_batch(_queued(events), config=SETTINGS, environment=ENVIRONMENT)
    triggers = [e["event"]["trigger"] for e in batch["events"] if e["event"]["kind"] == "trigger"]
    assert triggers == [group["bySdkKind"]["backend"]]
    for token in group["allowed"]:
        fixture = _fixture()
        fixture["events"][1]["event"]["trigger"] = token
        assert validate_capture_batch(fixture, portable=False) == [], token
    for token in group["rejected"]:
        fixture = _fixture()
        fixture["events"][1]["event"]["trigger"] = token
        assert [(p.rule, p.field) for p in validate_capture_batch(fixture)] == [
            ("enum", "batch.events[1].event.trigger")
        ], token


def test_encoding_capsule_files_are_utf8_without_bom(tmp_path: Any) -> None:
    group = load_vector("capture-behavior-v1.json")["encoding"]
    events = _capture_trace(lambda t: _call(t, "prix: 12 €"))
    capsule = capsule_from_batch(
        build_capture_batch(_queued(events), config=SETTINGS, environment=ENVIRONMENT)
    )
    assert capsule is not None
    data = capsule_bytes(capsule)
    assert group["byteOrderMark"] == "forbidden"
    assert data[0] == int(group["firstByteMustBe"], 16)
    assert not data.startswith(b"\xef\xbb\xbf")
    assert "€".encode() in data
    path = tmp_path / "capsule.json"
    path.write_bytes(data)
    assert load_capsule(path) == capsule
    path.write_bytes(b"\xef\xbb\xbf" + data)
    with pytest.raises(CapsuleError, match="byte order mark"):
        load_capsule(path)


# --- the capture-batch-v1 fixture through the validator ---------------------------------------


def test_fixture_passes_the_validator() -> None:
    fixture = _fixture()
    assert validate_capture_batch(fixture) == []
    check_capture_batch(fixture)


def _mutate(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set (or with ``...`` delete) the value at a dotted path such as ``events.2.event.x``."""

    def apply(batch: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = batch
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if value is ...:
            del target[key]
        else:
            target[key] = value

    return apply


MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("unknown top-level field", _mutate("extra", 1), "unknown-field", "batch.extra"),
    ("unknown emitter field", _mutate("emitter.name", "x"), "unknown-field", "batch.emitter.name"),
    ("unknown event field", _mutate("events.0.note", "x"), "unknown-field", "batch.events[0].note"),
    (
        "unknown event-kind field",
        _mutate("events.0.event.extra", True),
        "unknown-field",
        "batch.events[0].event.extra",
    ),
    (
        "unknown captured-value field",
        _mutate("events.1.event.value.extra", 1),
        "unknown-field",
        "batch.events[1].event.value.extra",
    ),
    (
        "unknown failure field",
        _mutate("events.4.event.failure.extra", 1),
        "unknown-field",
        "batch.events[4].event.failure.extra",
    ),
    ("unknown policy field", _mutate("policy.x", 1), "unknown-field", "batch.policy.x"),
    ("missing batchId", _mutate("batchId", ...), "missing-field", "batch.batchId"),
    ("bad batch id token", _mutate("batchId", "cb conformance"), "token", "batch.batchId"),
    ("bad trace id token", _mutate("events.0.traceId", "t/1"), "token", "batch.events[0].traceId"),
    (
        "bad parent token",
        _mutate("events.1.causalParentIds", ["a b"]),
        "token",
        "batch.events[1].causalParentIds[0]",
    ),
    ("version 2", _mutate("version", 2), "version", "batch.version"),
    ("observedAt garbage", _mutate("observedAt", "yesterday"), "observed-at", "batch.observedAt"),
    ("observedAt leading zero", _mutate("observedAt", "0123"), "observed-at", "batch.observedAt"),
    (
        "observedAt bad day",
        _mutate("observedAt", "2026-02-30T00:00:00Z"),
        "observed-at",
        "batch.observedAt",
    ),
    ("no events", _mutate("events", []), "event-count", "batch.events"),
    ("emitter kind", _mutate("emitter.kind", "sdk"), "enum", "batch.emitter.kind"),
    (
        "emitter parent",
        _mutate("emitter.parentId", "orders-api"),
        "emitter-parent",
        "batch.emitter.parentId",
    ),
    ("empty deployment", _mutate("deployment", {}), "deployment-identity", "batch.deployment"),
    ("consent", _mutate("policy.consent", "telemetry"), "enum", "batch.policy.consent"),
    (
        "capability kind",
        _mutate("capabilities.0.capability", "web"),
        "enum",
        "batch.capabilities[0].capability",
    ),
    (
        "partial without detail",
        _mutate("capabilities.0.completeness", "partial"),
        "capability-detail",
        "batch.capabilities[0].detail",
    ),
    ("duplicate id", _mutate("events.2.id", "evt_orders-api_1"), "event-id", "batch.events[2].id"),
    (
        "sequence zero",
        _mutate("events.0.sequence", 0),
        "event-sequence",
        "batch.events[0].sequence",
    ),
    (
        "sequence not increasing",
        _mutate("events.2.sequence", 2),
        "event-sequence",
        "batch.events[2].sequence",
    ),
    (
        "parent is later",
        _mutate("events.1.causalParentIds", ["evt_orders-api_3"]),
        "causal-parents",
        "batch.events[1].causalParentIds[0]",
    ),
    (
        "parent is self",
        _mutate("events.1.causalParentIds", ["evt_orders-api_2"]),
        "causal-parents",
        "batch.events[1].causalParentIds[0]",
    ),
    (
        "unsafe redaction",
        _mutate("events.1.event.value.redaction", "unredacted-restricted"),
        "redaction",
        "batch.events[1].event.value.redaction",
    ),
    (
        "huge value",
        _mutate("events.1.event.value.value", "v" * 70000),
        "value-size",
        "batch.events[1].event.value.value",
    ),
    (
        "empty summary",
        _mutate("events.4.event.failure.summary", ""),
        "empty-text",
        "batch.events[4].event.failure.summary",
    ),
    (
        "outcome",
        _mutate("events.3.event.outcome", "crashed"),
        "enum",
        "batch.events[3].event.outcome",
    ),
    (
        "broken envelope seed",
        _mutate("events.2.event.attributes.replaySeed", ""),
        "determinism-envelope",
        "batch.events[2].event.attributes",
    ),
    (
        "broken envelope time",
        _mutate("events.2.event.attributes.observedAtMs", -1),
        "determinism-envelope",
        "batch.events[2].event.attributes",
    ),
    (
        "blank envelope tz",
        _mutate("events.2.event.attributes.tz", " "),
        "determinism-envelope",
        "batch.events[2].event.attributes",
    ),
    (
        "no envelope",
        _mutate("events.2.event.name", "other-checkpoint"),
        "determinism-envelope",
        "batch.events",
    ),
    (
        "structural trigger",
        _mutate(
            "events.1.event.value", {"representation": "structural", "shape": {"type": "object"}}
        ),
        "trigger-not-replayable",
        "batch.events[1].event.value",
    ),
    (
        "incomplete http",
        _mutate(
            "capabilities.0", {"capability": "http", "completeness": "partial", "detail": "sampled"}
        ),
        "trigger-capability",
        "batch.events[1].event",
    ),
    (
        "source claim",
        _mutate("events.4.event.failure.authority", "source-claim"),
        "no-runtime-oracle",
        "batch.events[4].event.failure",
    ),
    (
        "no observation",
        _mutate("events.4.event", {"kind": "operation-start", "name": "again"}),
        "no-failure-observation",
        "batch.events",
    ),
    (
        "ambiguous effect",
        _mutate("events.3.event", {"kind": "effect", "effect": "call", "subject": "svc"}),
        "ambiguous-effect",
        "batch.events[3].event.effect",
    ),
    (
        "defect event",
        _mutate("events.3.event", {"kind": "defect", "defect": "dropped", "detail": "2 events"}),
        "defect-event",
        "batch.events[3].event",
    ),
]


@pytest.mark.parametrize(
    ("mutation", "rule", "field"),
    [(m[1], m[2], m[3]) for m in MUTATIONS],
    ids=[m[0] for m in MUTATIONS],
)
def test_fixture_mutations_are_refused(
    mutation: Callable[[dict[str, Any]], None], rule: str, field: str
) -> None:
    fixture = _fixture()
    mutation(fixture)
    problems = validate_capture_batch(fixture)
    assert [(p.rule, p.field) for p in problems] == [(rule, field)], problems
    with pytest.raises(BatchValidationError) as raised:
        check_capture_batch(fixture)
    assert (raised.value.rule, raised.value.field) == (rule, field)


def test_validator_accepts_legacy_observed_at_and_optional_fields() -> None:
    fixture = _fixture()
    fixture["observedAt"] = "1753617600000"
    fixture["emitter"]["parentId"] = "host-1"
    fixture["events"][0].update(wallTime="2026-07-27T12:00:00Z", processId=7, actor="u:1")
    assert validate_capture_batch(fixture) == []


def test_validator_refuses_what_is_not_an_object() -> None:
    assert [(p.rule, p.field) for p in validate_capture_batch([])] == [("field-type", "batch")]


# --- capsules ----------------------------------------------------------------------------------


def test_capsule_constants() -> None:
    assert (CAPTURE_FORMAT, CAPTURE_VERSION, CAPSULE_VERSIONS) == (
        "reproit-backend-capture",
        1,
        (1, 2),
    )


def _server_error_batch() -> dict[str, Any]:
    return build_capture_batch(
        _queued(_capture_trace(_call)), config=SETTINGS, environment=ENVIRONMENT
    )


def test_capsule_from_batch_needs_start_trigger_and_signed_observation() -> None:
    batch = _server_error_batch()
    for kind in ("operation-start", "trigger", "observation"):
        pruned = {**batch, "events": [e for e in batch["events"] if e["event"]["kind"] != kind]}
        assert capsule_from_batch(pruned) is None, kind
    unsigned = copy.deepcopy(batch)
    del unsigned["events"][-1]["event"]["failure"]["signature"]
    assert capsule_from_batch(unsigned) is None


def test_capsule_from_batch_synthesizes_a_server_error_return() -> None:
    batch = _server_error_batch()
    carrierless = {
        **batch,
        "events": [e for e in batch["events"] if e["event"].get("subject") != "operation-return"],
    }
    capsule = capsule_from_batch(carrierless)
    assert capsule is not None
    effect = next(e for e in _capture_trace(_call) if e["kind"] == "effect")
    common = {
        "traceId": f"cap-{NOW}-1",
        "spanId": f"cap-{NOW}-1:POST /orders",
        "actionIndex": 0,
        "operation": "POST /orders",
        "build": "1.2.3",
    }
    assert capsule == {
        "format": CAPTURE_FORMAT,
        "version": 2,
        "operation": "POST /orders",
        "oracle": "backend-server-error",
        "events": [
            {**common, "sequence": 1, "kind": "start", "input": {"body": {"sku": "widget"}}},
            effect,
            {
                **common,
                "sequence": 3,
                "kind": "return",
                "status": 500,
                "success": False,
                "effectsComplete": True,
            },
        ],
        "envelope": {
            "observedAtMs": NOW,
            "tz": "UTC",
            "runtime": RUNTIME,
            "os": "linux",
            "arch": "x64",
            "replaySeed": "00ff00ff00ff00ff",
        },
    }
    marked = copy.deepcopy(carrierless)
    marked["events"][-1]["event"]["failure"]["signature"] = "agent-response-content:POST /orders"
    assert capsule_from_batch(marked) is None


@pytest.mark.parametrize(
    ("capsule", "message"),
    [
        ([], "JSON object"),
        ({"format": "x", "version": 1, "events": []}, '"format" is "x"'),
        ({"version": 1, "events": []}, 'no "format" field'),
        ({"format": CAPTURE_FORMAT, "version": 3, "events": []}, '"version" is 3,'),
        ({"format": CAPTURE_FORMAT, "version": True, "events": []}, '"version" is true,'),
        ({"format": CAPTURE_FORMAT, "events": []}, 'no "version" field'),
        ({"format": CAPTURE_FORMAT, "version": 1}, 'no "events" field'),
        ({"format": CAPTURE_FORMAT, "version": 1, "events": {}}, '"events" is an object'),
        (
            {"format": CAPTURE_FORMAT, "version": 1, "operation": "o", "oracle": "x", "events": []},
            "no events",
        ),
        (
            {
                "format": CAPTURE_FORMAT,
                "version": 1,
                "operation": "o",
                "oracle": "x",
                "events": [
                    {
                        "kind": "finish",
                        "sequence": 1,
                        "traceId": "t",
                        "spanId": "s",
                        "operation": "o",
                    }
                ],
            },
            r"events\[0\]\.kind",
        ),
        (
            {
                "format": CAPTURE_FORMAT,
                "version": 1,
                "operation": "o",
                "oracle": "x",
                "events": [
                    {
                        "kind": "start",
                        "sequence": -1,
                        "traceId": "t",
                        "spanId": "s",
                        "operation": "o",
                    }
                ],
            },
            r"events\[0\]\.sequence",
        ),
        (
            {
                "format": CAPTURE_FORMAT,
                "version": 1,
                "operation": "o",
                "oracle": "x",
                "events": [{"kind": "start", "sequence": 1, "spanId": "s", "operation": "o"}],
            },
            r"events\[0\]\.traceId",
        ),
        (
            {
                "format": CAPTURE_FORMAT,
                "version": 1,
                "operation": "o",
                "oracle": "x",
                "events": [
                    {
                        "kind": "start",
                        "sequence": 1,
                        "traceId": "t",
                        "spanId": "s",
                        "operation": "o",
                        "output": 1,
                    }
                ],
            },
            "output",
        ),
        (
            {
                "format": CAPTURE_FORMAT,
                "version": 1,
                "operation": "o",
                "oracle": "x",
                "events": [
                    {
                        "kind": "effect",
                        "effect": "poke",
                        "sequence": 1,
                        "traceId": "t",
                        "spanId": "s",
                        "operation": "o",
                    }
                ],
            },
            r"events\[0\]\.effect",
        ),
    ],
)
def test_validate_capsule_refusals(capsule: Any, message: str) -> None:
    with pytest.raises(CapsuleError, match=message):
        validate_capsule(capsule)


def test_replay_strength_accepts_minimal_events() -> None:
    capsule = {
        "format": CAPTURE_FORMAT,
        "version": 2,
        "operation": "o",
        "oracle": "backend-server-error",
        "events": [{"kind": "effect", "exchange": {"protocol": "http"}}],
    }
    assert validate_capsule(capsule, strict=False) is capsule
    with pytest.raises(CapsuleError):
        validate_capsule(capsule)
    with pytest.raises(CapsuleError, match="not JSON"):
        load_capsule("{")


def test_d3_drops_only_remove_effect_carriers() -> None:
    """Without the bound the batch is the reference's; with it, only the last effects go."""
    events = _capture_trace(lambda t: [_call(t, "x" * 8000, f"/p{i}") for i in range(9)])
    bounded = build_capture_result(_queued(events), config=SETTINGS, environment=ENVIRONMENT)
    unbounded = build_capture_result(
        _queued(events), config=SETTINGS, environment=ENVIRONMENT, payload_limit=10**9
    )
    assert unbounded.dropped_effects == 0
    assert bounded.dropped_effects > 0
    assert bounded.batch == _without_last_effects(
        copy.deepcopy(unbounded.batch), bounded.dropped_effects, bounded.partial
    )
