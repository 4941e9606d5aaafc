"""Hermetic replay sessions (PROTOCOL 7.1, 7.2, 7.4, 7.5) against the reference.

Each ``node-golden/divergence.json`` case loads one capsule (an object, or exact file text),
then makes its calls in order against one session: ``{"http": probe}`` through
:func:`serve_http`, ``{"pg": {"text", "values"?}}`` through :func:`serve_pg`. Every call must
serve what the reference served and produce exactly the divergence text the reference wrote
to stderr during that call; the session state after the last call must agree too.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from reproit_otel.errors import CapsuleError, DivergedError, RecordedPgError
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.replay import (
    ReplaySession,
    live_redactor,
    serve_http,
    serve_pg,
    split_chunks,
)
from tests.vectors import golden_cases

DIVERGENCE_CASES = golden_cases("divergence.json")


def _session(case_input: dict[str, Any], lines: list[str]) -> ReplaySession:
    if "capsuleText" in case_input:
        return ReplaySession.from_text(case_input["capsuleText"], on_divergence=lines.append)
    return ReplaySession(case_input["capsule"], on_divergence=lines.append)


def _serve(session: ReplaySession, call: dict[str, Any]) -> dict[str, Any]:
    if "http" in call:
        served = serve_http(session, call["http"])
        result: dict[str, Any] = {
            "status": served.status,
            "headers": served.headers,
            "bodyText": served.body_text,
        }
        if served.chunks is not None:
            result["chunksBase64"] = [base64.b64encode(c).decode("ascii") for c in served.chunks]
            result["chunkLengths"] = [len(c) for c in served.chunks]
        return result
    query = call["pg"]
    try:
        rows = serve_pg(session, query["text"], query.get("values", UNSET))
    except DivergedError as error:
        return {"error": {"message": str(error)}}
    except RecordedPgError as error:
        recorded: dict[str, Any] = {"message": error.message}
        if error.code is not None:
            recorded["code"] = error.code
        return {"error": recorded}
    return {"result": dict(rows)}


@pytest.mark.parametrize("case", DIVERGENCE_CASES, ids=[c["name"] for c in DIVERGENCE_CASES])
def test_divergence_golden(case: dict[str, Any]) -> None:
    expect = case["expect"]
    lines: list[str] = []
    if "loadError" in expect:
        with pytest.raises(CapsuleError) as raised:
            _session(case["input"], lines)
        assert str(raised.value) == expect["loadError"]["message"]
        return
    session = _session(case["input"], lines)
    for call, expected in zip(case["input"]["calls"], expect["results"], strict=True):
        before = len(lines)
        result = _serve(session, call)
        result["stderr"] = "".join(line + "\n" for line in lines[before:])
        assert result == expected
        # Whole-value equality above ignores key order; the served headers keep the recording's.
        if "headers" in expected:
            assert list(result["headers"]) == list(expected["headers"])
    assert (session.diverged, session.consumed, session.total) == (
        expect["diverged"],
        expect["consumed"],
        expect["total"],
    )
    assert session.divergence_lines == lines


def _capsule(*exchanges: dict[str, Any], version: Any = 2) -> dict[str, Any]:
    return {
        "format": "reproit-backend-capture",
        "version": version,
        "operation": "GET /x",
        "oracle": "backend-server-error",
        "events": [{"kind": "effect", "effect": "call", "exchange": e} for e in exchanges],
    }


@pytest.mark.parametrize(
    ("capsule", "message"),
    [
        (
            {"format": "other", "version": 1},
            "REPROIT_REPLAY file is not a reproit-backend-capture payload",
        ),
        ([], "REPROIT_REPLAY file is not a reproit-backend-capture payload"),
        (_capsule(version=3), "unsupported capture version 3"),
        (_capsule(version=0), "unsupported capture version 0"),
        (_capsule(version=1.5), "unsupported capture version 1.5"),
        (_capsule(version="2"), "unsupported capture version 2"),
        (_capsule(version=True), "unsupported capture version true"),
        ({"format": "reproit-backend-capture"}, "unsupported capture version undefined"),
    ],
)
def test_capsule_checks(capsule: Any, message: str) -> None:
    with pytest.raises(CapsuleError) as raised:
        ReplaySession(capsule)
    assert str(raised.value) == message


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "capsule.json"
    exchange = {
        "protocol": "http",
        "request": {"method": "GET", "url": "http://svc/v"},
        "response": {"status": 0, "body": None},
    }
    path.write_text(json.dumps(_capsule(exchange, version=2.0)), encoding="utf-8")
    session = ReplaySession.load(path)
    served = serve_http(session, {"method": "GET", "url": "http://127.0.0.1:9/v"})
    assert (served.status, served.headers, served.body_text, served.chunks) == (0, {}, "null", None)
    with pytest.raises(CapsuleError):
        ReplaySession.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{nope", encoding="utf-8")
    with pytest.raises(CapsuleError):
        ReplaySession.load(tmp_path / "bad.json")


def test_split_chunks_keeps_the_count() -> None:
    assert split_chunks("hello", [2, 0, -1, 100]) == [b"he", b"", b"", b"llo"]
    assert split_chunks("héllo", [2, 1.0, "2", 9]) == [b"h\xc3", b"\xa9", b"", b"llo"]


def test_truncated_stream_fails_closed_with_the_flag_in_the_line() -> None:
    exchange = {
        "protocol": "http",
        "request": {"method": "GET", "url": "http://llm/s"},
        "response": {"status": 200, "body": "abc", "stream": {"chunks": [1], "truncated": True}},
    }
    lines: list[str] = []
    session = ReplaySession(_capsule(exchange), on_divergence=lines.append)
    served = serve_http(session, {"method": "GET", "url": "http://llm/s"})
    assert (served.status, served.body_text) == (599, '{"reproit":"truncated-stream-boundaries"}')
    assert lines == [
        'REPROIT:DIVERGENCE {"protocol":"http","got":{"method":"GET","url":"http://llm/s",'
        '"streamBoundariesTruncated":true},"expected":null,"consumed":1,"total":1}'
    ]


def test_pg_divergence_error_carries_the_line() -> None:
    exchange = {
        "protocol": "pg",
        "request": {"text": "SELECT 1", "values": [1]},
        "response": {"command": "SELECT", "rowCount": 1, "rows": [{"x": 1}]},
    }
    session = ReplaySession(_capsule(exchange))
    with pytest.raises(DivergedError) as raised:
        serve_pg(session, "SELECT 2")
    assert raised.value.line == (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT 2"},'
        '"expected":{"text":"SELECT 1","values":[1]},"consumed":0,"total":1}'
    )
    assert serve_pg(session, "SELECT 1", (1,)) == {
        "command": "SELECT",
        "rowCount": 1,
        "rows": [{"x": 1}],
    }
    assert (session.diverged, session.consumed, session.total) == (True, 1, 1)


def test_live_redactor_runs_before_matching_and_reporting() -> None:
    exchange = {
        "protocol": "http",
        "request": {"method": "GET", "url": "http://svc/p?token=REDACTED"},
        "response": {"status": 200, "body": "ok"},
    }

    def redact(protocol: str, probe: dict[str, Any]) -> dict[str, Any]:
        assert protocol == "http"
        return {**probe, "url": probe["url"].replace("s3cret", "REDACTED")}

    session = ReplaySession(_capsule(exchange, exchange), live_redactor=redact)
    assert (
        serve_http(session, {"method": "GET", "url": "http://x/p?token=s3cret"}).body_text == "ok"
    )
    serve_http(session, {"method": "POST", "url": "http://x/p?token=s3cret"})
    assert "s3cret" not in session.divergence_lines[0]
    assert '"url":"http://x/p?token=REDACTED"' in session.divergence_lines[0]


def test_default_live_redactor_matches_a_redacted_capture() -> None:
    placeholder = {"$reproit": {"redacted": True, "type": "string", "length": 6}}
    http_exchange = {
        "protocol": "http",
        "request": {
            "method": "POST",
            "url": "http://svc/p?api_key=$reproit&q=1",
            "body": {"password": placeholder, "note": "key $reproit"},
        },
        "response": {"status": 200, "body": "ok"},
    }
    pg_exchange = {
        "protocol": "pg",
        "request": {"text": "SELECT '$reproit'", "values": ["$reproit"]},
        "response": {"command": "SELECT", "rowCount": 0, "rows": []},
    }
    secrets = ["hunter22"]
    session = ReplaySession(
        _capsule(http_exchange, pg_exchange), live_redactor=live_redactor(lambda: secrets)
    )
    probe = {
        "method": "POST",
        "url": "http://127.0.0.1:5000/p?api_key=abc123&q=1",
        "body": {"password": "hunter", "note": "key hunter22"},
    }
    assert serve_http(session, probe).body_text == "ok"
    assert serve_pg(session, "SELECT 'hunter22'", ["hunter22"])["command"] == "SELECT"
    serve_http(session, {**probe, "body": {"password": "hunter22", "note": "other"}})
    assert session.divergence_lines == [
        'REPROIT:DIVERGENCE {"protocol":"http","got":{"method":"POST",'
        '"url":"http://127.0.0.1:5000/p?api_key=$reproit&q=1","body":{"password":'
        '{"$reproit":{"redacted":true,"type":"string","length":8}},"note":"other"}},'
        '"expected":null,"consumed":2,"total":2}'
    ]


def test_default_live_redactor_redacts_named_pg_parameters_by_key() -> None:
    placeholder = {"$reproit": {"redacted": True, "type": "string", "length": 6}}
    pg_exchange = {
        "protocol": "pg",
        "request": {"text": "SELECT %(password)s", "values": {"password": placeholder}},
        "response": {"command": "SELECT", "rowCount": 0, "rows": []},
    }
    session = ReplaySession(_capsule(pg_exchange), live_redactor=live_redactor())
    with pytest.raises(DivergedError) as raised:
        serve_pg(session, "SELECT %(password)s, 1", {"password": "hunter22"})
    assert raised.value.line == (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT %(password)s, 1",'
        '"values":{"password":{"$reproit":{"redacted":true,"type":"string","length":8}}}},'
        '"expected":{"text":"SELECT %(password)s","values":{"password":{"$reproit":'
        '{"redacted":true,"type":"string","length":6}}}},"consumed":0,"total":1}'
    )
    assert serve_pg(session, "SELECT %(password)s", {"password": "hunter"})["command"] == "SELECT"
