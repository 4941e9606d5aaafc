"""The ``matching`` and ``divergence`` groups of ``capture-behavior-v1.json``.

``matching``: a recorded request and a live one, and whether replay serves the recording for
the live call (``cases`` for HTTP, ``pgCases`` for ``pg``). Each case runs through the pure
matcher and through a one-exchange replay session.

``divergence``: a capsule made of ``capsuleExchanges`` and one live call; the session must
diverge, write a line that starts with the marker, and report the expected request and
counts the case names.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from reproit_otel.errors import DivergedError
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.matching import request_matches
from reproit_otel.wire.replay import ReplaySession, serve_http, serve_pg
from tests.vectors import load_vector

BEHAVIOR = load_vector("capture-behavior-v1.json")
MATCHING = BEHAVIOR["matching"]
DIVERGENCE = BEHAVIOR["divergence"]


def _capsule(exchanges: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": "GET /behavior",
        "oracle": "backend-server-error",
        "events": [
            {"kind": "effect", "sequence": n, "effect": "call", "exchange": exchange}
            for n, exchange in enumerate(exchanges, start=1)
        ],
    }


@pytest.mark.parametrize("case", MATCHING["cases"], ids=[c["name"] for c in MATCHING["cases"]])
def test_matching_http(case: dict[str, Any]) -> None:
    expected = case["expect"]["matches"]
    assert request_matches("http", case["recorded"], case["live"]) is expected
    exchange = {
        "protocol": "http",
        "request": case["recorded"],
        "response": {"status": 200, "body": "served"},
    }
    session = ReplaySession(_capsule([exchange]))
    served = serve_http(session, case["live"])
    assert (served.status, session.consumed, session.diverged) == (
        (200, 1, False) if expected else (599, 0, True)
    )


@pytest.mark.parametrize("case", MATCHING["pgCases"], ids=[c["name"] for c in MATCHING["pgCases"]])
def test_matching_pg(case: dict[str, Any]) -> None:
    expected = case["expect"]["matches"]
    assert request_matches("pg", case["recorded"], case["live"]) is expected
    exchange = {
        "protocol": "pg",
        "request": case["recorded"],
        "response": {"command": "SELECT", "rowCount": 0, "rows": []},
    }
    session = ReplaySession(_capsule([exchange]))
    live = case["live"]
    if expected:
        assert serve_pg(session, live["text"], live.get("values", UNSET))["command"] == "SELECT"
    else:
        with pytest.raises(DivergedError):
            serve_pg(session, live["text"], live.get("values", UNSET))
    assert session.diverged is not expected


@pytest.mark.parametrize("case", DIVERGENCE["cases"], ids=[c["name"] for c in DIVERGENCE["cases"]])
def test_divergence_behavior(case: dict[str, Any]) -> None:
    marker = DIVERGENCE["markerPrefix"]
    lines: list[str] = []
    session = ReplaySession(_capsule(case["capsuleExchanges"]), on_divergence=lines.append)
    live = dict(case["live"])
    protocol = live.pop("protocol")
    assert protocol == "http"
    served = serve_http(session, live)
    expect = case["expect"]
    assert served.status == 599
    assert session.diverged is expect["diverged"]
    assert len(lines) == 1
    assert lines[0].startswith(marker)
    report = json.loads(lines[0][len(marker) :])
    assert list(report)[:5] == ["protocol", "got", "expected", "consumed", "total"]
    for field in DIVERGENCE["reportFields"]["required"]:
        assert field in report
    assert report["protocol"] == protocol
    if "consumed" in expect:
        assert (report["consumed"], report["total"]) == (expect["consumed"], expect["total"])
        assert (session.consumed, session.total) == (expect["consumed"], expect["total"])
    if "expectedRequest" in expect:
        assert report["expected"] == expect["expectedRequest"]
