"""The production verdict table, with the ``REPROIT:REPLAY`` proof that replay was active."""

from __future__ import annotations

from typing import Any

import pytest

from reproit_otel.check.judgement import (
    BEYOND_THE_RECORDING,
    CREDENTIAL_HINT,
    Verdict,
    classify_production_run,
    judge_evidence,
    replay_markers,
)
from reproit_otel.check.report import evidence_lines
from reproit_otel.check.request import OBSERVED_BODY_BYTES, observed_body

NEVER_LOADED = (
    "the application never loaded the capsule: it wrote no REPROIT:REPLAY line, so it ran "
    "without replay (is reproit-otel installed where it runs, and did opentelemetry-instrument "
    "set up? an exporter it cannot create stops it)"
)
DIVERGENCE = {"protocol": "socket", "got": {}, "expected": None, "consumed": 0, "total": 1}


@pytest.mark.parametrize(
    ("status", "divergences", "replayed", "failure", "expected"),
    [
        (500, [], True, "", (Verdict.REPRODUCED, "the recorded request answered HTTP 500 again")),
        (503, [], True, "", (Verdict.REPRODUCED, "the recorded request answered HTTP 503 again")),
        (200, [], True, "", (Verdict.FIXED, "the recorded request now answers HTTP 200")),
        (302, [], True, "", (Verdict.FIXED, "the recorded request now answers HTTP 302")),
        (404, [], True, "", (Verdict.INCONCLUSIVE, "the recorded request answered HTTP 404")),
        (None, [], True, "no boot", (Verdict.INCONCLUSIVE, "no boot")),
        (
            500,
            [DIVERGENCE],
            True,
            "",
            (Verdict.DIVERGED, "the application made a call the capsule does not hold"),
        ),
        # Divergence lines come only from a replaying process: they win even without the line.
        (
            200,
            [DIVERGENCE],
            False,
            "",
            (Verdict.DIVERGED, "the application made a call the capsule does not hold"),
        ),
        (500, [], False, "", (Verdict.INCONCLUSIVE, NEVER_LOADED)),
        (200, [], False, "", (Verdict.INCONCLUSIVE, NEVER_LOADED)),
        (None, [], False, "no boot", (Verdict.INCONCLUSIVE, NEVER_LOADED + "; also, no boot")),
    ],
)
def test_classify_production_run(
    status: int | None,
    divergences: list[dict[str, Any]],
    replayed: bool,
    failure: str,
    expected: tuple[Verdict, str],
) -> None:
    assert classify_production_run(status, divergences, replayed, failure) == expected


def test_replay_markers_are_read_from_each_process() -> None:
    lines = [
        "booting",
        'REPROIT:REPLAY {"capsule":"/tmp/c.json","exchanges":3}',
        "REPROIT:REPLAY not json",
        'REPROIT:REPLAY {"capsule":"/tmp/c.json","exchanges":3}',
        'xREPROIT:REPLAY {"capsule":"/tmp/c.json","exchanges":3}',
    ]
    assert replay_markers(lines) == [{"capsule": "/tmp/c.json", "exchanges": 3}] * 2


def test_observed_body_keeps_the_first_8_kib_as_text() -> None:
    assert observed_body(b'{"error":"x"}') == {"body": '{"error":"x"}', "bodyBytes": 13}
    big = "é".encode() * OBSERVED_BODY_BYTES  # 2 bytes each: the cut splits no character
    assert observed_body(big) == {
        "body": "é" * (OBSERVED_BODY_BYTES // 2),
        "bodyBytes": 2 * OBSERVED_BODY_BYTES,
    }
    assert observed_body(b"ab\xff") == {"body": "ab\ufffd", "bodyBytes": 3}


# --- FIXED needs evidence (judge_evidence) -----------------------------------------------------

CAPSULE = {
    "events": [
        {"kind": "start"},
        {
            "kind": "effect",
            "exchange": {
                "protocol": "http",
                "request": {"method": "GET", "url": "http://rates.internal:8080/rates"},
            },
        },
        {"kind": "return", "status": 500},
    ]
}
UNUSED = [{"protocol": "pg", "text": "SELECT 1 FROM items", "position": 1}]


def _usage(order: list[int], total: int = 2, unused: list[dict[str, Any]] | None = None) -> Any:
    return {
        "dataExchanges": total,
        "consumed": len(order),
        "unused": total - len(order),
        "consumedOrder": order,
        "unusedCalls": unused or [],
    }


def _judge(verdict: Verdict, reason: str, **given: Any) -> Any:
    options: dict[str, Any] = {
        "status": 200,
        "location": None,
        "observed": {},
        "usage": _usage([0, 1]),
        "divergences": [],
        "capsule": CAPSULE,
        "recorded": None,
        "replayed": None,
    }
    options.update(given)
    return judge_evidence(verdict, reason, **options)


def test_a_fixed_that_used_every_exchange_in_order_stays_fixed() -> None:
    judged = _judge(Verdict.FIXED, "the recorded request now answers HTTP 200")
    assert (judged.verdict, judged.reason, judged.qualifier) == (
        Verdict.FIXED,
        "the recorded request now answers HTTP 200, after using all 2 recorded data exchanges "
        "in order",
        None,
    )


def test_a_fixed_without_a_usage_line_is_inconclusive() -> None:
    judged = _judge(Verdict.FIXED, "the recorded request now answers HTTP 200", usage=None)
    assert judged.verdict is Verdict.INCONCLUSIVE
    assert "wrote no REPROIT:REPLAY-USAGE line" in judged.reason


def test_a_fixed_that_used_every_exchange_in_another_order_is_fixed() -> None:
    # Concurrent calls to different dependencies finish in any order; each dependency's calls
    # are still served in their own recorded sequence, so the failure point was reached.
    judged = _judge(
        Verdict.FIXED, "the recorded request now answers HTTP 200", usage=_usage([1, 0])
    )
    assert (judged.verdict, judged.reason) == (
        Verdict.FIXED,
        "the recorded request now answers HTTP 200, after using all 2 recorded data exchanges, "
        "in another order than recorded ([1, 0]: calls to different dependencies, as "
        "concurrent calls make them)",
    )


def test_a_fixed_that_raised_the_recorded_exception_again_is_inconclusive() -> None:
    error = {"type": "builtins.KeyError", "frames": [{"file": "app.py", "function": "view"}]}
    judged = _judge(
        Verdict.FIXED, "the recorded request now answers HTTP 200", recorded=error, replayed=error
    )
    assert judged.verdict is Verdict.INCONCLUSIVE
    assert judged.reason.endswith("the recorded failure is still there")


@pytest.mark.parametrize(
    ("status", "location", "body", "cause"),
    [
        (
            302,
            "/accounts/login/?next=/orders",
            "",
            "it redirected to a login page (/accounts/login/?next=/orders): " + CREDENTIAL_HINT,
        ),
        (303, "/thanks", "", "it redirected to /thanks before doing the recorded work"),
        (
            200,
            None,
            "<html><p>Oops: the service is unavailable</p></html>",
            "the answer reads like the application's own error page (\"Oops: the service is "
            'unavailable"): a setting or environment variable production had and this run '
            "lacks is likely",
        ),
        (
            200,
            None,
            "all good",
            "it answered before reaching the recorded failure point; compare its body and "
            "output with production's",
        ),
    ],
)
def test_a_success_short_of_the_failure_point_names_the_likely_cause(
    status: int, location: str | None, body: str, cause: str
) -> None:
    judged = _judge(
        Verdict.FIXED,
        f"the recorded request now answers HTTP {status}",
        status=status,
        location=location,
        observed={"body": body},
        usage=_usage([0], unused=UNUSED),
    )
    assert (judged.verdict, judged.likely_cause, judged.unused_calls) == (
        Verdict.INCONCLUSIVE,
        cause,
        UNUSED,
    )
    assert judged.reason == (
        f"the recorded request now answers HTTP {status}, but it used only 1 of the 2 "
        "recorded data exchanges, so it never reached the recorded failure point (never made: "
        f"pg SELECT 1 FROM items); likely: {cause}"
    )


def test_a_401_or_403_points_at_header_and_cookie() -> None:
    judged = _judge(Verdict.INCONCLUSIVE, "the recorded request answered HTTP 403", status=403)
    assert judged.reason == (
        "the recorded request answered HTTP 403: the application refused the request (HTTP "
        f"403): {CREDENTIAL_HINT}"
    )


def _divergence(consumed: int, got: dict[str, Any]) -> dict[str, Any]:
    return {"protocol": got.pop("protocol"), "got": got, "expected": None, "consumed": consumed}


def test_a_divergence_after_the_failure_point_is_fixed_beyond_the_recording() -> None:
    divergence = _divergence(2, {"protocol": "pg", "text": "SELECT count(*) FROM favorites"})
    judged = _judge(
        Verdict.DIVERGED, "the application made a call", status=500, divergences=[divergence]
    )
    assert (judged.verdict, judged.qualifier, judged.first_new_call) == (
        Verdict.FIXED,
        BEYOND_THE_RECORDING,
        {"protocol": "pg", "text": "SELECT count(*) FROM favorites"},
    )


def test_a_divergence_before_the_failure_point_stays_diverged_and_names_a_new_host() -> None:
    divergence = _divergence(1, {"protocol": "http", "method": "GET", "url": "http://x:1/r"})
    judged = _judge(
        Verdict.DIVERGED,
        "the application made a call the capsule does not hold",
        status=500,
        divergences=[divergence],
        usage=_usage([0]),
    )
    assert (judged.verdict, judged.qualifier, judged.reason) == (
        Verdict.DIVERGED,
        None,
        "the application made a call the capsule does not hold: its first call went to x:1, "
        "a host the recording never called (another configuration of the upstream's address "
        "is likely)",
    )


def test_the_text_names_the_qualifier_the_first_new_call_and_the_calls_never_made() -> None:
    beyond = evidence_lines(
        BEYOND_THE_RECORDING,
        {"protocol": "pg", "text": "SELECT count(*) FROM favorites"},
        [],
        None,
    )
    assert beyond == [
        "qualifier:   beyond the recording",
        "first new call (production never made it): pg SELECT count(*) FROM favorites",
    ]
    short = evidence_lines(
        None,
        None,
        [
            {"protocol": "pg", "text": "SELECT 1 FROM items", "position": 0},
            {"protocol": "http", "method": "GET", "url": "http://rates/r", "position": 1},
        ],
        "it redirected to a login page (/login)",
    )
    assert short == [
        "recorded calls the replay never made:",
        "  0: pg SELECT 1 FROM items",
        "  1: http GET http://rates/r",
        "likely cause: it redirected to a login page (/login)",
    ]
