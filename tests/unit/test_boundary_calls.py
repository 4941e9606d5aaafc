"""What one boundary call hands the recording pipeline, and how a capsule serves it.

A small in-memory pipeline (implementing :class:`reproit_otel.capture.recording.RecordingPipeline`)
stands in for the span processor so each finished or failed exchange can be asserted whole;
the capsule side uses the real :class:`~reproit_otel.wire.replay.ReplaySession`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from reproit_otel.capture import recording
from reproit_otel.errors import ConfigurationError, MissingFixtureError, ToolCallError
from reproit_otel.instrumentation.invoke import boundary, use_tracer_provider
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.replay import ReplaySession


class ListPipeline:
    """Records what recorders report, as ``("finish", ...)`` / ``("fail", reason)`` tuples."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def start_exchange(self, library: str) -> recording.ExchangeRecorder | None:
        return recording.ExchangeRecorder(self, object(), library)

    def mark_incomplete(self, reason: str) -> None:
        self.calls.append(("incomplete", reason))

    def has_live_operations(self) -> bool:
        return True

    def exchange_finished(
        self, handle: object, effect: str, resource: str | None, key: str | None, exchange: Any
    ) -> None:
        self.calls.append(("finish", effect, resource, key, exchange))

    def exchange_failed(self, handle: object, reason: str) -> None:
        self.calls.append(("fail", reason))


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> Iterator[ListPipeline]:
    monkeypatch.delenv("REPROIT_TOOLS", raising=False)
    monkeypatch.delenv("REPROIT_SECRET_VALUES", raising=False)
    active = ListPipeline()
    previous = recording.current_pipeline()
    recording.set_pipeline(active)
    try:
        yield active
    finally:
        recording.clear_pipeline(active)
        if previous is not None:
            recording.set_pipeline(previous)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        use_tracer_provider(None)
        provider.shutdown()


class Unavailable(Exception):
    status = 503


@boundary("kv", "get")
def kv_get(key: str, *, fail: str = "") -> dict[str, Any]:
    if fail == "status":
        raise Unavailable("kv is down")
    if fail == "plain":
        raise ConnectionResetError("reset by peer")
    if fail == "config":
        raise ConfigurationError("REPROIT_SOMETHING is unusable")
    return {"key": key, "value": [1, 2]}


def _invoke(request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    return {"protocol": "invoke", "request": request, "response": response}


def test_a_result_is_recorded_as_a_call_effect_and_the_span_is_a_client_span(
    pipeline: ListPipeline, spans: InMemorySpanExporter
) -> None:
    assert kv_get("user:1") == {"key": "user:1", "value": [1, 2]}
    assert pipeline.calls == [
        (
            "finish",
            "call",
            "kv",
            "get",
            _invoke(
                {"tool": "kv", "op": "get", "input": {"key": "user:1", "fail": ""}},
                {"ok": True, "data": {"key": "user:1", "value": [1, 2]}},
            ),
        )
    ]
    [span] = spans.get_finished_spans()
    assert (span.name, span.kind, dict(span.attributes or {})) == (
        "kv get",
        SpanKind.CLIENT,
        {"reproit.tool": "kv", "reproit.op": "get"},
    )
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "reproit_otel.boundary"


def test_an_error_with_a_status_is_recorded_and_re_raised_unchanged(
    pipeline: ListPipeline,
) -> None:
    with pytest.raises(Unavailable) as raised:
        kv_get("user:1", fail="status")
    assert str(raised.value) == "kv is down"
    assert pipeline.calls == [
        (
            "finish",
            "call",
            "kv",
            "get",
            _invoke(
                {"tool": "kv", "op": "get", "input": {"key": "user:1", "fail": "status"}},
                {
                    "ok": False,
                    "error": {
                        "code": "Unavailable",
                        "status": 503,
                        "message": "kv is down",
                        "cause": None,
                    },
                },
            ),
        )
    ]


@pytest.mark.parametrize(
    ("fail", "error", "reason"),
    [
        ("plain", ConnectionResetError, "ConnectionResetError without a status is not recorded"),
        ("config", ConfigurationError, "ConfigurationError without a status is not recorded"),
    ],
)
def test_errors_without_a_status_make_the_exchange_fail(
    pipeline: ListPipeline, fail: str, error: type[Exception], reason: str
) -> None:
    with pytest.raises(error):
        kv_get("user:1", fail=fail)
    assert pipeline.calls == [("fail", f"invoke: kv.get: {reason}")]


def test_a_result_with_no_json_form_is_returned_as_it_is_and_not_recorded(
    pipeline: ListPipeline,
) -> None:
    class Handle:
        pass

    handle = Handle()

    @boundary("kv", "connect")
    def connect() -> Handle:
        return handle

    assert connect() is handle
    assert pipeline.calls == [("fail", "invoke: kv.connect: the result (Handle) has no JSON form")]


def test_the_value_returned_is_the_json_round_trip(pipeline: ListPipeline) -> None:
    @boundary("kv", "scan")
    def scan() -> dict[str, Any]:
        return {"b": (1, 2.0), "a": {3}}

    assert scan() == {"a": [3], "b": [1, 2]}


def test_configured_and_read_secrets_are_scrubbed_from_keys_and_values(
    pipeline: ListPipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reproit_otel import secrets

    monkeypatch.setenv("REPROIT_SECRET_VALUES", "configured-9f8e")
    monkeypatch.setenv("KV_TOKEN_FOR_TEST", "kv-token-3c2b1a")

    @boundary("kv", "auth")
    def auth(user: str) -> dict[str, Any]:
        token = secrets.get("KV_TOKEN_FOR_TEST")
        return {f"session-{token}": f"{user} with {token}"}

    assert auth("configured-9f8e") == {
        "session-kv-token-3c2b1a": "configured-9f8e with kv-token-3c2b1a"
    }
    assert pipeline.calls == [
        (
            "finish",
            "call",
            "kv",
            "auth",
            _invoke(
                {"tool": "kv", "op": "auth", "input": {"user": "$reproit"}},
                {"ok": True, "data": {"session-$reproit": "$reproit with $reproit"}},
            ),
        )
    ]


def test_the_context_manager_runs_sync_and_async_calls_in_its_span(
    pipeline: ListPipeline, spans: InMemorySpanExporter
) -> None:
    def lookup(name: str) -> str:
        return name.upper()

    async def lookup_async(name: str) -> str:
        await asyncio.sleep(0)
        return name.lower()

    with boundary("dns", "resolve") as call:
        assert call.run(lookup, "a") == "A"

    async def main() -> str:
        async with boundary("dns", "resolve") as call:
            result: str = await call.run(lookup_async, name="B")
            return result

    assert asyncio.run(main()) == "b"
    assert [c[4]["request"] for c in pipeline.calls] == [
        {"tool": "dns", "op": "resolve", "input": {"name": "a"}},
        {"tool": "dns", "op": "resolve", "input": {"name": "B"}},
    ]
    assert [s.name for s in spans.get_finished_spans()] == ["dns resolve", "dns resolve"]


def test_generators_cannot_be_boundaries() -> None:
    def numbers() -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match="cannot wrap the generator"):
        boundary("t", "o")(numbers)


def test_an_unknown_tools_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPROIT_TOOLS", "playback")
    with pytest.raises(ConfigurationError) as error:
        kv_get("x")
    assert str(error.value) == (
        "REPROIT_TOOLS='playback' is not a mode; expected one of: off, record, replay"
    )


# -- capsule replay ----------------------------------------------------------------------------


def _capsule(*exchanges: dict[str, Any]) -> dict[str, Any]:
    events = [{"kind": "effect", "effect": "call", "exchange": e} for e in exchanges]
    return {"format": "reproit-backend-capture", "version": 2, "events": events}


@pytest.fixture
def replaying(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    lines: list[str] = []
    monkeypatch.delenv("REPROIT_SECRET_VALUES", raising=False)
    session = ReplaySession(
        _capsule(
            _invoke(
                {"tool": "kv", "op": "get", "input": {"key": "a", "fail": ""}},
                {"ok": True, "data": {"key": "a", "value": [9]}},
            ),
            _invoke(
                {"tool": "kv", "op": "get", "input": {"key": "b", "fail": ""}},
                {
                    "ok": False,
                    "error": {
                        "code": "Unavailable",
                        "status": 503,
                        "message": "kv is down",
                        "cause": {"message": "socket closed", "status": None},
                    },
                },
            ),
            _invoke(
                {
                    "tool": "kv",
                    "op": "get",
                    "inputBytes": 9000,
                    "inputSha256": "0",
                    "truncated": True,
                },
                {"ok": True, "data": 1},
            ),
            _invoke(
                {"tool": "kv", "op": "get", "input": {"key": "big", "fail": ""}},
                {"ok": True, "dataBytes": 9000, "dataSha256": "0", "truncated": True},
            ),
        ),
        on_divergence=lines.append,
    )
    activate(session)
    try:
        yield lines
    finally:
        deactivate()


def test_a_capsule_serves_values_and_recorded_errors_without_running_the_call(
    replaying: list[str],
) -> None:
    with pytest.raises(ToolCallError) as raised:
        kv_get("b")
    error = raised.value
    assert (error.message, error.code, error.status, error.cause_message, error.cause_status) == (
        "kv is down",
        "Unavailable",
        503,
        "socket closed",
        None,
    )
    assert kv_get("a") == {"key": "a", "value": [9]}
    assert replaying == []


def test_a_capsule_miss_is_a_divergence_never_a_live_call(replaying: list[str]) -> None:
    kv_get("a")
    with pytest.raises(MissingFixtureError) as raised:
        kv_get("a")
    line = (
        'REPROIT:DIVERGENCE {"protocol":"invoke","got":{"tool":"kv","op":"get",'
        '"input":{"fail":"","key":"a"}},"expected":{"tool":"kv","op":"get","input":'
        '{"key":"b","fail":""}},"consumed":1,"total":4}'
    )
    assert (raised.value.line, replaying) == (line, [line])
    assert str(raised.value) == (
        "reproit: invoke boundary kv.get has no recorded outcome for this input "
        "(the capsule holds no matching invoke exchange)"
    )


def test_a_truncated_outcome_fails_closed(replaying: list[str]) -> None:
    with pytest.raises(MissingFixtureError) as raised:
        kv_get("big")
    assert raised.value.line == (
        'REPROIT:DIVERGENCE {"protocol":"invoke","got":{"tool":"kv","op":"get",'
        '"input":{"fail":"","key":"big"},"truncated":true},"expected":{"tool":"kv","op":"get",'
        '"input":{"key":"a","fail":""}},"consumed":1,"total":4}'
    )
