"""The exception value of a failing operation (``wire/exception.py``) and its comparison."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from typing import Any

import pytest

from reproit_otel._local_log import LocalFallbackHandler
from reproit_otel.check.exceptions import judge_exception, recorded_exception, replayed_exception
from reproit_otel.failures import exception_marker_line
from reproit_otel.redaction.text import scrub_text
from reproit_otel.wire.exception import (
    MAX_EXCEPTION_BYTES,
    MAX_FRAMES,
    MAX_MESSAGE,
    FrameRoots,
    describe_exception,
    error_of_output,
    exception_from_stacktrace,
    exception_record,
    output_with_error,
    same_failure,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOTS = FrameRoots(os.path.dirname(HERE), [os.path.dirname(os.__file__)])


def divide(value: int) -> float:
    return value / 0  # DIVIDE


def line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            if marker in line and "line_of(" not in line:
                return number
    raise AssertionError(marker)


def caught(function: Any, *args: Any) -> BaseException:
    try:
        function(*args)
    except BaseException as error:
        return error
    raise AssertionError("no exception")


def test_a_record_names_type_message_and_frames_relative_to_the_root() -> None:
    record = exception_record(caught(divide, 1), ROOTS)
    assert record == {
        "type": "builtins.ZeroDivisionError",
        "message": "division by zero",
        "frames": [
            {
                "file": "unit/test_exception_record.py",
                "line": line_of("function(*args)"),
                "function": "caught",
            },
            {
                "file": "unit/test_exception_record.py",
                "line": line_of("# DIVIDE"),
                "function": "divide",
            },
        ],
    }


def test_library_frames_are_marked_and_named_inside_their_folder() -> None:
    error = caught(json.loads, "{")
    record = exception_record(error, ROOTS)
    assert record["type"] == "json.decoder.JSONDecodeError"
    assert [frame.get("library", False) for frame in record["frames"]][:1] == [False]
    library = [frame for frame in record["frames"] if frame.get("library")]
    assert library and all(frame["file"].startswith("json/") for frame in library)


def test_chained_causes_are_kept_and_named() -> None:
    def outer() -> None:
        try:
            divide(2)
        except ZeroDivisionError as error:
            raise ValueError("wrapped") from error

    record = exception_record(caught(outer), ROOTS)
    assert (record["type"], record["cause"]["type"], record["cause"]["chained"]) == (
        "builtins.ValueError",
        "builtins.ZeroDivisionError",
        "cause",
    )

    def implicit() -> None:
        try:
            divide(3)
        except ZeroDivisionError:
            {}["missing"]

    assert exception_record(caught(implicit), ROOTS)["cause"]["chained"] == "context"


def test_secrets_and_secret_query_values_are_scrubbed_from_the_message() -> None:
    error = RuntimeError(
        "key sk_live_12345678 rejected at http://x/p?token=abc&page=2 password=pw1"
    )
    record = exception_record(error, ROOTS, ("sk_live_12345678",))
    assert (
        record["message"]
        == "key $reproit rejected at http://x/p?token=$reproit&page=2 password=$reproit"
    )
    assert scrub_text("no pairs here", ()) == "no pairs here"


def test_locals_are_never_read() -> None:
    class Loud:
        def __repr__(self) -> str:
            raise AssertionError("a local was read")

        __str__ = __repr__

    def failing() -> None:
        secret_local = Loud()  # noqa: F841
        raise KeyError("k")

    assert exception_record(caught(failing), ROOTS)["message"] == "'k'"


def test_bounds_frames_message_and_bytes() -> None:
    def deep(depth: int) -> None:
        if depth == 0:
            raise RuntimeError("x" * (MAX_MESSAGE * 3))
        deep(depth - 1)

    record = exception_record(caught(deep, MAX_FRAMES + 20), ROOTS)
    assert len(record["frames"]) == MAX_FRAMES
    assert record["framesOmitted"] == 22  # caught(), deep() x 69, kept 48
    assert len(record["message"]) == MAX_MESSAGE
    assert record["frames"][-1]["function"].endswith("deep")
    long_names = RuntimeError("y" * 900)
    chain: BaseException = long_names
    for _ in range(2):
        try:
            raise chain
        except RuntimeError as error:
            try:
                raise RuntimeError("z" * 900) from error
            except RuntimeError as wrapped:
                chain = wrapped
    assert len(json.dumps(exception_record(chain, ROOTS)).encode()) <= MAX_EXCEPTION_BYTES


def test_an_opentelemetry_exception_event_gives_the_same_shape() -> None:
    error = caught(divide, 4)
    text = "".join(traceback.format_exception(error))
    record = exception_from_stacktrace("ZeroDivisionError", "division by zero", text, ROOTS)
    assert record == exception_record(error, ROOTS)
    qualified = exception_from_stacktrace(
        "JSONDecodeError", "bad", "Traceback...\njson.decoder.JSONDecodeError: bad\n", ROOTS
    )
    assert qualified == {"type": "json.decoder.JSONDecodeError", "message": "bad", "frames": []}


def test_the_output_carries_the_error_and_a_json_body_beside_it() -> None:
    error = {"type": "builtins.KeyError", "message": "'a'", "frames": []}
    assert output_with_error(None, error) == {"error": error}
    assert output_with_error({"detail": "x"}, error) == {"error": error, "body": {"detail": "x"}}
    assert error_of_output({"error": error, "body": 1}) == error
    assert error_of_output({"error": "test failed"}) is None  # a CI capsule's failure text
    assert error_of_output({"error": {"type": "x"}}) is None


def frame(file: str, line: int, function: str, library: bool = False) -> dict[str, Any]:
    made: dict[str, Any] = {"file": file, "line": line, "function": function}
    if library:
        made["library"] = True
    return made


RECORDED = {
    "type": "builtins.ZeroDivisionError",
    "message": "division by zero",
    "frames": [
        frame("flask/app.py", 1, "Flask.wsgi_app", True),
        frame("app.py", 88, "apply_coupon"),
    ],
}


@pytest.mark.parametrize(
    ("replayed", "same"),
    [
        (RECORDED, True),
        ({**RECORDED, "frames": [frame("app.py", 90, "apply_coupon")]}, True),  # moved line
        ({**RECORDED, "frames": [frame("/srv/app/app.py", 88, "apply_coupon")]}, True),
        ({**RECORDED, "frames": [frame("app.py", 88, "other")]}, False),
        ({**RECORDED, "type": "builtins.KeyError"}, False),
        ({**RECORDED, "frames": [frame("lib.py", 3, "f", True)]}, False),
    ],
)
def test_the_same_failure_is_the_same_type_from_the_same_application_frame(
    replayed: dict[str, Any], same: bool
) -> None:
    assert same_failure(RECORDED, replayed) is same


def test_the_verdict_line_and_the_judgement() -> None:
    assert describe_exception(RECORDED) == (
        "ZeroDivisionError: division by zero  (app.py:88 in apply_coupon)"
    )
    other = {**RECORDED, "type": "builtins.KeyError", "message": "'x'"}
    assert judge_exception("reproduced", RECORDED, RECORDED) == (
        True,
        "the replayed request raised the recorded exception again (same type, same innermost "
        "application frame)",
    )
    assert judge_exception("reproduced", RECORDED, other) == (
        False,
        "a different failure: the replay raised KeyError: 'x'  (app.py:88 in apply_coupon); the "
        "recording raised ZeroDivisionError: division by zero  (app.py:88 in apply_coupon)",
    )
    assert judge_exception("reproduced", None, other) is None  # an older capsule
    assert judge_exception("fixed", RECORDED, None) is None


def test_markers_are_read_for_the_replayed_operation_only() -> None:
    lines = [
        exception_marker_line("GET /", {**RECORDED, "type": "builtins.OSError"}),
        "an application line",
        exception_marker_line("GET /coupon", RECORDED),
    ]
    assert lines[2].startswith('REPROIT:EXCEPTION {"operation":"GET /coupon","exception":{"type":')
    assert replayed_exception(lines, "GET /coupon") == RECORDED
    assert replayed_exception(lines, "POST /other") is None
    events = [{"kind": "start"}, {"kind": "return", "output": {"error": RECORDED}}]
    assert recorded_exception(events) == RECORDED


def test_the_fallback_handler_prints_only_what_no_local_handler_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class ExportingHandler(logging.Handler):  # stands in for OpenTelemetry's LoggingHandler
        def emit(self, record: logging.LogRecord) -> None:
            pass

    ExportingHandler.__module__ = "opentelemetry.sdk._logs"
    logger = logging.getLogger("reproit_test.fallback.child")
    parent = logging.getLogger("reproit_test.fallback")
    parent.propagate = False
    exporting, fallback = ExportingHandler(), LocalFallbackHandler()
    parent.addHandler(exporting)
    parent.addHandler(fallback)
    try:
        logger.warning("shown %s", 1)
        logger.info("below the level")
        local = logging.StreamHandler(sys.stdout)
        parent.addHandler(local)
        logger.warning("already shown by the local handler")
        parent.removeHandler(local)
    finally:
        parent.removeHandler(exporting)
        parent.removeHandler(fallback)
        parent.propagate = True
    captured = capsys.readouterr()
    assert captured.err == "shown 1\n"
    assert captured.out == "already shown by the local handler\n"


def test_the_fallback_handler_prints_what_filtered_or_remote_handlers_do_not_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class AdminEmailHandler(logging.Handler):  # Django's mail_admins handler, by its name
        def emit(self, record: logging.LogRecord) -> None:
            pass

    AdminEmailHandler.__module__ = "django.utils.log"
    console = logging.StreamHandler(sys.stdout)  # Django's console: only when DEBUG is on
    console.addFilter(lambda record: False)
    logger = logging.getLogger("reproit_test.django.request")
    django = logging.getLogger("reproit_test.django")
    root_like = logging.getLogger("reproit_test")
    root_like.propagate = False
    fallback = LocalFallbackHandler()
    for handler in (console, AdminEmailHandler(), logging.NullHandler()):
        django.addHandler(handler)
    root_like.addHandler(fallback)
    try:
        logger.error("Internal Server Error: /coupon")
        console.filters.clear()
        logger.error("shown by the console now")
    finally:
        for handler in list(django.handlers):
            django.removeHandler(handler)
        root_like.removeHandler(fallback)
        root_like.propagate = True
    captured = capsys.readouterr()
    assert captured.err == "Internal Server Error: /coupon\n"
    assert captured.out == "shown by the console now\n"


# -- the span processor: the exception reaches the return event ------------------------------


def _failing_request(rig: Any, note: BaseException | None = None) -> dict[str, Any]:
    from tests.unit.test_processor import record

    with pytest.raises(ZeroDivisionError), rig.server("GET /coupon", status=500):
        with rig.client():
            record()
        if note is not None:
            rig.processor.note_exception(note)
        divide(5)
    returned: dict[str, Any] = rig.returned()
    return returned


def test_without_a_hook_the_server_span_exception_event_gives_the_exception() -> None:
    from tests.unit.test_processor import Rig

    rig = Rig()
    try:
        error = error_of_output(_failing_request(rig)["output"])
    finally:
        rig.provider.shutdown()
    assert error is not None
    assert (error["type"], error["message"]) == ("builtins.ZeroDivisionError", "division by zero")
    # Frames are named relative to the working directory, the application root by default.
    assert error["frames"][-1] == {
        "file": os.path.relpath(__file__),
        "line": line_of("# DIVIDE"),
        "function": "divide",
    }


def test_a_hook_noted_exception_wins_over_the_span_event() -> None:
    from tests.unit.test_processor import Rig

    rig = Rig()
    try:
        returned = _failing_request(rig, note=caught(json.loads, "{"))
    finally:
        rig.provider.shutdown()
    error = error_of_output(returned["output"])
    assert error is not None and error["type"] == "json.decoder.JSONDecodeError"
    assert (returned["status"], returned["success"]) == (500, False)


def test_the_side_by_side_view_aligns_fields_and_marks_the_different_ones() -> None:
    from reproit_otel.check.report import side_by_side

    rows = side_by_side(
        "sent", {"text": "SELECT 2", "values": [1]}, "expected", {"text": "SELECT 1"}, width=20
    )
    assert rows[2:] == [
        '  "text": "SELECT 2"   | "text": "SELECT 1"',
        '  "values": [          |',
        "    1                  |",
        "  ]                    |",
    ]
    nothing = side_by_side("sent", {"method": "GET"}, "expected", None, width=20)
    assert nothing[2:] == [  # a long line wraps in its column
        "  {                    | (nothing of this kin",
        '    "method": "GET"    |   d left in the reco',
        "  }                    |   rding)",
    ]


def test_the_timeline_draws_each_exchange_from_the_previous_step_to_its_completion() -> None:
    from reproit_otel.ingest.webfailure import timeline_section

    def effect(mono_ns: int, exchange: dict[str, Any]) -> dict[str, Any]:
        raw = {"kind": "effect", "monoNs": mono_ns, "exchange": exchange}
        return {"kind": "dependency", "value": {"representation": "replayable", "value": raw}}

    http = {
        "protocol": "http",
        "request": {"method": "GET", "url": "http://a/x"},
        "response": {"status": 200},
    }
    sql = {
        "protocol": "pg",
        "request": {"text": "SELECT 1"},
        "response": {"error": {"pgcode": "42P01"}},
    }
    html = timeline_section(
        [effect(2_000_000, http), effect(8_000_000, sql)], {"kind": "return", "monoNs": 10_000_000}
    )
    assert '<rect class="bar" x="0.000%" y="4" width="20.000%" height="14">' in html
    assert '<rect class="bar failed" x="20.000%" y="26" width="60.000%" height="14">' in html
    assert "<code>GET http://a/x</code>" in html and "<code>SELECT 1</code>" in html
    assert "over the request's 10.0 ms" in html
    assert timeline_section([], {"kind": "return", "monoNs": 5}) == ""
