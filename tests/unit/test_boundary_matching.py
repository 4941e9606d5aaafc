"""Operation keys, request matching and sessions for the ``invoke`` protocol."""

from __future__ import annotations

from typing import Any

from reproit_otel.redaction.core import placeholder
from reproit_otel.wire.matching import operation_key, request_matches, wildcards_as_one
from reproit_otel.wire.replay import ReplaySession


def _request(**input_value: Any) -> dict[str, Any]:
    return {"tool": "imap", "op": "fetch", "input": input_value}


def test_key_is_tool_op_and_canonical_input() -> None:
    key = operation_key("invoke", {"tool": "imap", "op": "fetch", "input": {"b": 2, "a": [1.0]}})
    assert key == 'imap fetch {"a":[1],"b":2}'


def test_key_order_does_not_matter_and_one_field_changes_the_key() -> None:
    assert operation_key("invoke", _request(a=1, b=2)) == operation_key(
        "invoke", _request(b=2, a=1)
    )
    assert operation_key("invoke", _request(a=1, b=2)) != operation_key(
        "invoke", _request(a=1, b=3)
    )


def test_placeholders_share_one_key_whatever_they_describe() -> None:
    short = _request(user="ada", password=placeholder("abcd"))
    long = _request(user="ada", password=placeholder("a much longer secret"))
    assert operation_key("invoke", short) == operation_key("invoke", long)
    assert (
        operation_key("invoke", short) == 'imap fetch {"password":{"$reproit":true},"user":"ada"}'
    )


def test_identity_only_input_keys_on_its_digest() -> None:
    request = {"tool": "t", "op": "o", "inputBytes": 9000, "inputSha256": "ab", "truncated": True}
    assert operation_key("invoke", request) == "t o sha256:ab"
    assert request_matches("invoke", request, {"tool": "t", "op": "o", "inputSha256": "ab"})
    assert not request_matches("invoke", request, {"tool": "t", "op": "o", "inputSha256": "cd"})


def test_request_matches_wildcards_recorded_placeholders() -> None:
    recorded = _request(user="ada", password=placeholder("old"))
    assert request_matches("invoke", recorded, _request(user="ada", password="new"))
    assert not request_matches("invoke", recorded, _request(user="bob", password="new"))
    assert not request_matches(
        "invoke", recorded, {"tool": "imap", "op": "list", "input": {"user": "ada"}}
    )
    assert not request_matches("invoke", recorded, {"tool": "imap", "op": "fetch"})


def test_wildcards_as_one_copies_deep_values() -> None:
    value = {"a": [{"$reproit": {"redacted": True}}, {"b": {"$reproit": 0}}]}
    assert wildcards_as_one(value) == {"a": [{"$reproit": True}, {"b": {"$reproit": 0}}]}
    assert wildcards_as_one(placeholder(1)) == {"$reproit": True}
    assert wildcards_as_one(3) == 3


def _capsule(*requests: dict[str, Any]) -> dict[str, Any]:
    events = [
        {
            "kind": "effect",
            "effect": "call",
            "exchange": {"protocol": "invoke", "request": r, "response": {"ok": True, "data": i}},
        }
        for i, r in enumerate(requests)
    ]
    return {"format": "reproit-backend-capture", "version": 2, "events": events}


def test_session_serves_calls_of_one_op_in_any_input_order() -> None:
    session = ReplaySession(_capsule(_request(uid=1), _request(uid=2)))
    second = session.match("invoke", _request(uid=2))
    first = session.match("invoke", _request(uid=1))
    assert (first["response"], second["response"]) == (
        {"ok": True, "data": 0},
        {"ok": True, "data": 1},
    )
    assert session.match("invoke", _request(uid=1)) is None
    assert session.divergence_lines == [
        'REPROIT:DIVERGENCE {"protocol":"invoke","got":{"tool":"imap","op":"fetch",'
        '"input":{"uid":1}},"expected":null,"consumed":2,"total":2}'
    ]
