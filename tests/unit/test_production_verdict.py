"""The production verdict table, with the ``REPROIT:REPLAY`` proof that replay was active."""

from __future__ import annotations

from typing import Any

import pytest

from reproit_otel.verdict import (
    OBSERVED_BODY_BYTES,
    Verdict,
    classify_production_run,
    observed_body,
    replay_markers,
)

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
