"""CI capture building blocks: names, the capped trace, the override pipeline, spool, markers."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reproit_otel.capture import recording
from reproit_otel.capture.recording import ExchangeRecorder
from reproit_otel.ci.markers import RealStderr, capsule_marker, test_marker
from reproit_otel.ci.naming import (
    bound_name,
    ci_trace_context,
    exception_text,
    failure_text,
    test_operation,
)
from reproit_otel.ci.pipeline import CiRecordingPipeline, CiTrace, _set_active, current_test_trace
from reproit_otel.ci.spool import Spool, ci_capsule, ci_envelope, parse_spool_max
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.batch import CaptureEnvironment
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.trace import TraceContext, reset_sequence

EXCHANGE = {
    "protocol": "http",
    "request": {"method": "GET", "url": "http://api/rates?key=s3cr3t-value"},
    "response": {"status": 200, "body": {"rate": 0.2, "note": "s3cr3t-value"}},
}


def _trace(operation: str = "test:unit#t") -> CiTrace:
    context = TraceContext(trace_id="ci-1-1", capture_envelope=True)
    trace = CiTrace.begin(
        context, operation, input={"suite": "unit", "test": "t"}, wall_ms=lambda: 5
    )
    assert isinstance(trace, CiTrace)
    return trace


# --- names ---------------------------------------------------------------------------------


def test_names_are_trimmed_and_cut_to_120_code_points() -> None:
    assert bound_name("\n  spaced \t") == "spaced"
    assert bound_name(" " + "é" * 130) == "é" * 120
    assert bound_name("😀" * 121) == "😀" * 120  # code points, never half a pair
    assert test_operation(" unit ", "a#b ") == "test:unit#a#b"
    assert len(test_operation("s" * 300, "t" * 300)) == 5 + 120 + 1 + 120


def test_failure_text_is_str_of_the_exception_cut_to_2048() -> None:
    assert exception_text(ValueError("boom")) == "boom"
    assert exception_text(KeyError("k")) == "'k'"
    assert exception_text(AssertionError()) == ""
    assert exception_text(RuntimeError("x" * 3000)) == "x" * 2048
    assert failure_text("e" * 2047 + "😀") == "e" * 2047 + "😀"

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert exception_text(Unprintable()) == "<unprintable Unprintable>"


def test_ci_trace_contexts_count_traces() -> None:
    first = ci_trace_context(1700000000000, "abc")
    second = ci_trace_context(1700000000001, None)
    number = int(first.trace_id.rsplit("-", 1)[1])
    assert first == TraceContext(
        trace_id=f"ci-1700000000000-{number}",
        build="abc",
        capture_envelope=True,
    )
    assert second.trace_id == f"ci-1700000000001-{number + 1}"
    assert second.replay_seed is None


# --- the capped trace ----------------------------------------------------------------------


def test_effects_past_the_cap_are_dropped_and_the_return_always_fits() -> None:
    reset_sequence()
    trace = _trace()
    for index in range(300):
        trace.effect("emit", event=f"e{index}")
    trace.finish({"error": "late"}, UNSET, False, False)
    events = trace.events
    assert len(events) == 256
    assert [e["event"] for e in events[1:-1]] == [f"e{i}" for i in range(254)]
    assert events[-1]["output"] == {"error": "late"}
    assert events[-1]["sequence"] == 256
    assert trace.dropped_effects == 46


def test_a_long_operation_gets_a_shortened_span_id() -> None:
    operation = test_operation("s" * 200, "t" * 200)
    trace = _trace(operation)
    digest = hashlib.sha256(operation.encode()).hexdigest()[:24]
    assert trace.span_id == f"ci-1-1:sha256:{digest}"


# --- the pipeline and the override seam ------------------------------------------------------


class SpanPipeline:
    """A stand-in for the span processor's pipeline: records what it was asked."""

    def __init__(self) -> None:
        self.live = True
        self.started: list[str] = []
        self.incomplete: list[str] = []

    def start_exchange(self, library: str) -> ExchangeRecorder | None:
        self.started.append(library)
        return None

    def mark_incomplete(self, reason: str) -> None:
        self.incomplete.append(reason)

    def has_live_operations(self) -> bool:
        return self.live


@pytest.fixture
def pipelines() -> Iterator[tuple[SpanPipeline, CiRecordingPipeline]]:
    span = SpanPipeline()
    ci = CiRecordingPipeline(secret_values=["s3cr3t-value"])
    previous = recording.current_pipeline()
    recording.set_pipeline(span)
    recording.set_override_pipeline(ci)
    _set_active(ci)
    try:
        yield span, ci
    finally:
        _set_active(None)
        recording.clear_override_pipeline(ci)
        recording.clear_pipeline(span)
        if previous is not None:
            recording.set_pipeline(previous)


def test_the_running_test_wins_over_the_span_pipeline(
    pipelines: tuple[SpanPipeline, CiRecordingPipeline],
) -> None:
    span, ci = pipelines
    # Between tests: the installed pipeline is asked, as without an override.
    assert recording.start_exchange("requests") is None
    recording.mark_incomplete("copy_expert")
    assert (span.started, span.incomplete) == (["requests"], ["copy_expert"])
    assert current_test_trace() is None

    trace = _trace()
    ci.attach(trace)
    assert current_test_trace() is trace
    assert recording.recording_enabled()
    recorder = recording.start_exchange("requests")
    assert recorder is not None
    recorder.finish("call", resource="api", key="GET /rates?key=s3cr3t-value", exchange=EXCHANGE)
    recording.mark_incomplete("ignored in CI")
    assert (span.started, span.incomplete) == (["requests"], ["copy_expert"])
    effect = trace.events[-1]
    assert {k: effect[k] for k in ("effect", "resource", "key", "exchange")} == {
        "effect": "call",
        "resource": "api",
        "key": "GET /rates?key=$reproit",
        "exchange": {
            "protocol": "http",
            "request": {"method": "GET", "url": "http://api/rates?key=$reproit"},
            "response": {"status": 200, "body": {"rate": 0.2, "note": "$reproit"}},
        },
    }

    assert ci.detach() is trace
    span.live = False
    assert not recording.recording_enabled()
    # A streamed body finished after the test ended is counted, not recorded.
    late = ExchangeRecorder(ci, trace, "requests")
    trace.finish(None, UNSET, True, False)
    late.finish("call", resource=None, key=None, exchange=EXCHANGE)
    assert trace.failed_exchanges == 1


def test_without_an_override_the_installed_pipeline_is_used() -> None:
    span = SpanPipeline()
    recording.set_pipeline(span)
    try:
        assert recording.recording_enabled()
        assert recording.start_exchange("psycopg2") is None
        assert span.started == ["psycopg2"]
    finally:
        recording.clear_pipeline(span)


# --- spool -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "cap"),
    [
        (None, 16777216),
        ("", 4096),
        ("100", 4096),
        ("8192", 8192),
        (" 1e6 ", 1000000),
        ("0x2000", 8192),
        ("999999999", 67108864),
        ("1.5", 16777216),
        ("lots", 16777216),
    ],
)
def test_spool_cap_parsing(raw: str | None, cap: int) -> None:
    assert parse_spool_max(raw) == cap


ENVIRONMENT = CaptureEnvironment(
    now_ms=99, batch_number=0, runtime="python 3.11.7", os="linux", arch="x64", tz=None
)


def test_the_capsule_and_its_envelope() -> None:
    reset_sequence()
    trace = _trace()
    trace.finish({"error": "boom"}, UNSET, False, False)
    events = trace.events
    envelope = ci_envelope(events, environment=ENVIRONMENT, replay_seed="00ff00ff00ff00ff")
    assert envelope == {
        "observedAtMs": 5,
        "runtime": "python 3.11.7",
        "os": "linux",
        "arch": "x64",
        "replaySeed": "00ff00ff00ff00ff",
    }
    assert ci_envelope([], environment=ENVIRONMENT, replay_seed="a" * 16)["observedAtMs"] == 99
    assert ci_capsule("test:unit#t", events, envelope) == {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": "test:unit#t",
        "oracle": "backend-authored-invariant",
        "envelope": envelope,
        "events": events,
    }
    assert "status" not in events[-1]


def test_spool_writes_canonical_capsules_and_counts_drops(tmp_path: Path) -> None:
    capsule: dict[str, Any] = {"format": "reproit-backend-capture", "operation": "test:é#t"}
    spool = Spool(str(tmp_path / "spool"), 4096)
    path = spool.write(capsule)
    body = canonical_json(capsule).encode()
    name = f"capsule-{hashlib.sha256(body).hexdigest()[:12]}.json"
    assert path == os.path.join(str(tmp_path / "spool"), name)
    assert (tmp_path / "spool" / name).read_bytes() == body  # no BOM, no newline

    (tmp_path / "spool" / "dropped.count").write_text("garbage")
    (tmp_path / "spool" / "big.json").write_bytes(b"x" * (4096 - len(body)))
    assert spool.write({"another": 1}) is None
    assert (tmp_path / "spool" / "dropped.count").read_bytes() == b"1\n"
    assert spool.write({"another": 2}) is None
    assert (tmp_path / "spool" / "dropped.count").read_bytes() == b"2\n"
    assert spool.stats.to_json() == {
        "spooledCapsules": 1,
        "droppedCapsules": 2,
        "failedCaptures": 0,
        "droppedEffects": 0,
    }


def test_a_spool_that_cannot_be_written_counts_a_failed_capture(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    spool = Spool(str(blocker / "spool"), 4096)
    assert spool.write({"a": 1}) is None
    assert spool.stats.failed_captures == 1


def test_the_spool_path_keeps_the_directory_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = Spool("./spool/", 1 << 20).write({"a": 1})
    assert path is not None and path.startswith("spool/capsule-")


# --- markers ---------------------------------------------------------------------------------


def test_marker_lines_are_insertion_order_json_with_raw_utf8() -> None:
    assert capsule_marker("spool/capsule-0.json", "test:käse#grüße 😀 </script>") == (
        'REPROIT:CI-CAPSULE {"file":"spool/capsule-0.json",'
        '"operation":"test:käse#grüße 😀 </script>"}'
    )
    assert test_marker("test:u#t", None) == (
        'REPROIT:CI-TEST {"operation":"test:u#t","status":"passed"}'
    )
    assert test_marker("test:u#t", 'said "no"\n\ud83d') == (
        'REPROIT:CI-TEST {"operation":"test:u#t","status":"failed",'
        '"failure":"said \\"no\\"\\n\\ud83d"}'
    )


def test_real_stderr_writes_whole_lines_to_its_descriptor() -> None:
    read_fd, write_fd = os.pipe()
    try:
        RealStderr(write_fd).write_line("REPROIT:CI-TEST {}")
        RealStderr(write_fd).write_line("é\n")
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as reader:
            assert reader.read() == "REPROIT:CI-TEST {}\né\n".encode()
    except BaseException:
        os.close(write_fd)
        raise
