"""Replay serves stand-ins, not placeholders, and takes them back when the application sends
them on (reproit_otel.wire.standins: served_response, StandinIndex, same_identities; the
replay session applying them once, at load)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from reproit_otel.errors import DivergedError
from reproit_otel.wire import standins
from reproit_otel.wire.matching import matches
from reproit_otel.wire.replay import ReplaySession, serve_http, serve_pg
from reproit_otel.wire.standins import (
    MIN_INDEXED_LENGTH,
    StandinIndex,
    same_identities,
    served_response,
    set_identity_key,
    text_placeholder,
    text_standins,
)

KEY = b"s" * 32
SESSION_KEY = "q0w9e8r7t6y5u4i3o2p1a0s9d8f7g6h5"
API_TOKEN = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"


@pytest.fixture(autouse=True)
def _no_key() -> Iterator[None]:
    set_identity_key(None)
    yield
    set_identity_key(None)


def _placeholder(secret: str) -> dict[str, Any]:
    """The placeholder object a capture (with its identity key) records for ``secret``."""
    set_identity_key(KEY)
    fields = standins.placeholder_fields(secret)
    set_identity_key(None)
    return {"$reproit": {"redacted": True, "type": "string", "length": len(secret), **fields}}


def _token(secret: str) -> str:
    """The tagged text placeholder a capture records for ``secret`` in a header or a form."""
    set_identity_key(KEY)
    token = text_placeholder(secret)
    set_identity_key(None)
    return token


def _capsule(*exchanges: dict[str, Any], headers: list[list[str]] | None = None) -> dict[str, Any]:
    start = {
        "kind": "start",
        "operation": "GET /notes",
        "input": {"request": {"headers": headers or []}},
    }
    effects = [{"kind": "effect", "exchange": exchange} for exchange in exchanges]
    return {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": "GET /notes",
        "events": [start, *effects],
    }


SESSION_SELECT = (
    'SELECT "session_key", "session_data" FROM "django_session" WHERE "session_key" = %s'
)


def _session_row_exchange() -> dict[str, Any]:
    return {
        "protocol": "pg",
        "request": {"text": SESSION_SELECT, "values": [_placeholder(SESSION_KEY)]},
        "response": {
            "command": "SELECT",
            "rowCount": 1,
            "rows": [{"session_key": _placeholder(SESSION_KEY), "session_data": "e30:1"}],
        },
    }


def test_a_served_row_carries_the_stand_in_of_the_cookie_with_the_same_secret() -> None:
    cookie = f"sessionid={_token(SESSION_KEY)}"
    session = ReplaySession(_capsule(_session_row_exchange(), headers=[["Cookie", cookie]]))
    # What check sends in the Cookie header (check/request.py: text_standins of the header).
    sent_key = text_standins(cookie).removeprefix("sessionid=")
    assert len(sent_key) == len(SESSION_KEY) and sent_key != SESSION_KEY

    served = serve_pg(session, SESSION_SELECT, [sent_key])

    assert served["rows"] == [{"session_key": sent_key, "session_data": "e30:1"}]


def test_served_http_bodies_and_headers_carry_stand_ins() -> None:
    exchange = {
        "protocol": "http",
        "request": {"method": "POST", "url": "http://auth.local/tokens"},
        "response": {
            "status": 201,
            "headers": {
                "content-type": "application/json",
                "set-cookie": f"sid={_token(SESSION_KEY)}; Path=/",
                "x-api-token": _placeholder(API_TOKEN),
            },
            "body": {"token": _placeholder(API_TOKEN), "user": "ada"},
        },
    }
    session = ReplaySession(_capsule(exchange))
    token_standin = text_standins(_token(API_TOKEN))

    served = serve_http(session, {"method": "POST", "url": "http://auth.local/tokens"})

    assert served.status == 201
    assert json.loads(served.body) == {"token": token_standin, "user": "ada"}
    assert served.headers == {
        "content-type": "application/json",
        "set-cookie": f"sid={text_standins(_token(SESSION_KEY))}; Path=/",
        "x-api-token": token_standin,
    }
    assert "$reproit" not in served.body.decode() + json.dumps(served.headers)


def test_a_recorded_error_keeps_its_message_and_everything_else_is_materialized() -> None:
    recorded = {
        "ok": False,
        "data": {"key": _placeholder(API_TOKEN), "n": 1},
        "error": {"message": "duplicate key ($reproit)", "code": "23505"},
    }

    served = served_response(recorded)

    assert served == {
        "ok": False,
        "data": {"key": text_standins(_token(API_TOKEN)), "n": 1},
        "error": {"message": "duplicate key ($reproit)", "code": "23505"},
    }
    assert recorded["data"]["key"] == _placeholder(API_TOKEN)  # the capsule is not changed


def test_a_stand_in_sent_on_matches_where_the_capture_scrubbed_the_secret_bare() -> None:
    # The token reached an upstream in a URL path, which only the value scrub could redact:
    # the recording holds the bare "$reproit" there.
    forward = {
        "protocol": "http",
        "request": {"method": "GET", "url": "http://upstream.local/keys/$reproit"},
        "response": {"status": 200, "body": "ok"},
    }
    session = ReplaySession(
        _capsule(forward, headers=[["Authorization", f"Token {_token(API_TOKEN)}"]])
    )
    sent = text_standins(_token(API_TOKEN))

    served = serve_http(session, {"method": "GET", "url": f"http://upstream.local/keys/{sent}"})

    assert (served.status, served.body, session.diverged) == (200, b"ok", False)


def test_a_value_that_is_not_a_stand_in_still_diverges() -> None:
    forward = {
        "protocol": "http",
        "request": {"method": "GET", "url": "http://upstream.local/keys/$reproit"},
        "response": {"status": 200, "body": "ok"},
    }
    session = ReplaySession(
        _capsule(forward, headers=[["Authorization", f"Token {_token(API_TOKEN)}"]])
    )

    served = serve_http(session, {"method": "GET", "url": "http://upstream.local/keys/other-key-1"})

    assert (served.status, session.diverged) == (599, True)


def test_a_stand_in_as_a_sql_parameter_matches_the_placeholder_of_its_identity() -> None:
    text = "UPDATE authtoken_token SET used = now() WHERE key = '$reproit'"
    exchange = {
        "protocol": "pg",
        "request": {"text": text},
        "response": {"command": "UPDATE", "rowCount": 1, "rows": []},
    }
    session = ReplaySession(_capsule(exchange, _session_row_exchange()))
    sent = text_standins(_token(SESSION_KEY))

    # Inline in the statement text: written back as its tagged placeholder, which equals the
    # bare one the capture's value scrub left.
    assert serve_pg(session, text.replace("$reproit", sent))["rowCount"] == 1
    assert serve_pg(session, SESSION_SELECT, [sent])["rowCount"] == 1


def test_the_index_writes_back_every_stand_in_it_hands_out() -> None:
    capsule = _capsule(
        _session_row_exchange(),
        headers=[["Authorization", f"Bearer {_token(API_TOKEN)}"], ["Cookie", "sid=$reproit"]],
    )
    index = StandinIndex(capsule)
    session_standin = text_standins(_token(SESSION_KEY))
    token_standin = text_standins(_token(API_TOKEN))
    bare_standin = text_standins("$reproit")

    assert len(index) == 3
    assert index.placeholders(
        {"a": [f"x {session_standin} y", token_standin], bare_standin: bare_standin, "n": 3}
    ) == {
        "a": [f"x {_token(SESSION_KEY)} y", _token(API_TOKEN)],
        bare_standin: "$reproit",
        "n": 3,
    }


def test_short_stand_ins_are_not_written_back() -> None:
    short = "abc1"
    assert len(short) < MIN_INDEXED_LENGTH
    index = StandinIndex(_capsule(headers=[["X-Pin", _token(short)]]))

    assert len(index) == 0
    made = text_standins(_token(short))
    assert index.placeholders(f"pin {made}") == f"pin {made}"


@pytest.mark.parametrize(
    ("want", "got", "same"),
    [
        ("k=$reproit", "k=$reproit.alnum.32.aaaaaaaaaaaaaaaaaaaaaaaa", True),
        ("k=$reproit.alnum.32.aaaaaaaaaaaaaaaaaaaaaaaa", "k=$reproit", True),
        (
            "k=$reproit.alnum.32.aaaaaaaaaaaaaaaaaaaaaaaa",
            "k=$reproit.alnum.32.aaaaaaaaaaaaaaaaaaaaaaaa",
            True,
        ),
        (
            "k=$reproit.alnum.32.aaaaaaaaaaaaaaaaaaaaaaaa",
            "k=$reproit.alnum.32.bbbbbbbbbbbbbbbbbbbbbbbb",
            False,
        ),
        (
            "a=$reproit&b=$reproit.hex.4.aaaaaaaaaaaaaaaaaaaaaaaa",
            "a=$reproit.hex.4.bbbbbbbbbbbbbbbbbbbbbbbb&b=$reproit.hex.4.aaaaaaaaaaaaaaaaaaaaaaaa",
            True,
        ),
        ("k=$reproit", "k=other", False),
    ],
)
def test_text_placeholders_agree_unless_two_identities_differ(
    want: str, got: str, same: bool
) -> None:
    assert same_identities(want, got) is same
    assert matches(want, got) is same


def test_a_capsule_without_placeholders_is_served_as_recorded() -> None:
    exchange = {
        "protocol": "pg",
        "request": {"text": "SELECT 1"},
        "response": {"command": "SELECT", "rowCount": 1, "rows": [{"?column?": 1}]},
    }
    session = ReplaySession(_capsule(exchange))

    assert len(session.standins) == 0
    assert serve_pg(session, "SELECT 1")["rows"] == [{"?column?": 1}]
    with pytest.raises(DivergedError):
        serve_pg(session, "SELECT 2")
