"""The one rule for the envelope fields replay pins (capsule load, pinning and the ingest)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from reproit_otel.errors import CapsuleError
from reproit_otel.replay.envelope import pin_envelope
from reproit_otel.wire.assessment import MAX_OBSERVED_AT_MS, envelope_problem
from reproit_otel.wire.capsule import validate_capsule

GOOD = {"observedAtMs": 1_753_617_600_000, "replaySeed": "00ff00ff00ff00ff", "tz": "UTC"}
TZ_PROBLEM = (
    "tz must be absent or 1 to 255 printable ASCII characters without spaces "
    "(a zone name such as Europe/Paris); got "
)


@pytest.mark.parametrize(
    ("attributes", "complete", "problem"),
    [
        (GOOD, True, None),
        ({**GOOD, "tz": "America/Argentina/Buenos_Aires"}, True, None),
        ({**GOOD, "tz": "<+0330>-3:30"}, True, None),
        ({**GOOD, "replaySeed": 7}, True, None),
        ({"tz": "Europe/Paris"}, False, None),
        ({}, False, None),
        ({"observedAtMs": 1.5e12}, False, None),
        (
            {"observedAtMs": 1.5e12},
            True,
            "observedAtMs must be an integer of at least 0 and at "
            f"most {MAX_OBSERVED_AT_MS} (the end of year 9999)",
        ),
        (
            {},
            True,
            "observedAtMs must be an integer of at least 0 and at most "
            f"{MAX_OBSERVED_AT_MS} (the end of year 9999)",
        ),
        (
            {**GOOD, "observedAtMs": MAX_OBSERVED_AT_MS + 1},
            True,
            "observedAtMs must be an "
            f"integer of at least 0 and at most {MAX_OBSERVED_AT_MS} (the end of year 9999)",
        ),
        (
            {"observedAtMs": float("nan")},
            False,
            "observedAtMs must be an integer of at least 0 "
            f"and at most {MAX_OBSERVED_AT_MS} (the end of year 9999)",
        ),
        ({**GOOD, "tz": "UTC\x00x"}, True, TZ_PROBLEM + "'UTC\\x00x'"),
        ({**GOOD, "tz": "Europe/Paris\n"}, False, TZ_PROBLEM + "'Europe/Paris\\n'"),
        ({**GOOD, "tz": "Etc/GMT +1"}, True, TZ_PROBLEM + "'Etc/GMT +1'"),
        ({**GOOD, "tz": ""}, True, TZ_PROBLEM + "''"),
        ({**GOOD, "tz": None}, True, TZ_PROBLEM + "None"),
        ({**GOOD, "tz": "Zürich"}, True, TZ_PROBLEM + "'Zürich'"),
        (
            {**GOOD, "replaySeed": "xyz"},
            True,
            "replaySeed must be hex digits (PROTOCOL 7.7), such as 00ff00ff00ff00ff",
        ),
        (
            {**GOOD, "replaySeed": ""},
            True,
            "replaySeed must be a non-empty string of at most 128 bytes",
        ),
        (
            {**GOOD, "replaySeed": -1},
            True,
            "replaySeed must be a non-empty string or an unsigned integer",
        ),
        ([], False, "the attributes must be an object"),
    ],
)
def test_envelope_problem(attributes: Any, complete: bool, problem: str | None) -> None:
    assert envelope_problem(attributes, complete=complete) == problem


def test_a_capsule_with_an_envelope_replay_cannot_pin_is_refused_at_load() -> None:
    capsule = {
        "format": "reproit-backend-capture",
        "version": 2,
        "events": [],
        "envelope": {**GOOD, "tz": "UTC\x00x"},
    }
    with pytest.raises(CapsuleError) as raised:
        validate_capsule(capsule, strict=False)
    assert str(raised.value) == (f"capsule envelope: {TZ_PROBLEM}'UTC\\x00x'; replay cannot pin it")


def test_pinning_refuses_such_an_envelope_and_pins_nothing() -> None:
    before = os.environ.get("TZ")
    with pytest.raises(CapsuleError) as raised:
        pin_envelope({**GOOD, "tz": "UTC\x00x"})
    assert str(raised.value) == (f"capsule envelope: {TZ_PROBLEM}'UTC\\x00x'; replay cannot pin it")
    assert os.environ.get("TZ") == before
