"""The ``invoke`` exchange shapes, bounds, secret scrubbing and fixture keys (pure parts)."""

from __future__ import annotations

import hashlib

from reproit_otel.redaction.core import placeholder, scrub_keys_and_values
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.invoke import (
    failure_response,
    fixture_key,
    invoke_request,
    read_outcome,
    success_response,
)


def test_request_and_responses() -> None:
    assert invoke_request("imap", "fetch", {"uid": 7}) == {
        "tool": "imap",
        "op": "fetch",
        "input": {"uid": 7},
    }
    assert success_response([0.5]) == {"ok": True, "data": [0.5]}
    assert failure_response(code="NotFound", status=404, message="gone") == {
        "ok": False,
        "error": {"code": "NotFound", "status": 404, "message": "gone", "cause": None},
    }
    assert failure_response(
        code=None, status=502, message="m", cause_message="c", cause_status=None
    ) == {
        "ok": False,
        "error": {
            "code": None,
            "status": 502,
            "message": "m",
            "cause": {"message": "c", "status": None},
        },
    }


def test_values_over_the_budget_are_kept_by_identity() -> None:
    big = {"text": "é" * 5000}
    data = canonical_json(big).encode()
    digest = hashlib.sha256(data).hexdigest()
    assert invoke_request("embed", "vector", big) == {
        "tool": "embed",
        "op": "vector",
        "inputBytes": len(data),
        "inputSha256": digest,
        "truncated": True,
    }
    assert success_response(big) == {
        "ok": True,
        "dataBytes": len(data),
        "dataSha256": digest,
        "truncated": True,
    }
    exactly = "x" * (8192 - 2)
    assert success_response(exactly) == {"ok": True, "data": exactly}


def test_messages_are_cut_to_1024_code_points() -> None:
    response = failure_response(code=None, status=500, message="€" * 2000, cause_message="a" * 1025)
    assert response["error"]["message"] == "€" * 1024
    assert response["error"]["cause"] == {"message": "a" * 1024, "status": None}


def test_read_outcome() -> None:
    assert read_outcome({"ok": True, "data": None}) == {"kind": "data", "data": None, "error": None}
    assert read_outcome({"ok": True, "dataBytes": 1, "truncated": True}) == {
        "kind": "truncated",
        "data": None,
        "error": None,
    }
    assert read_outcome(failure_response(code="C", status=409, message="m", cause_status=500)) == {
        "kind": "error",
        "data": None,
        "error": {
            "code": "C",
            "status": 409,
            "message": "m",
            "cause": {"message": None, "status": 500},
        },
    }
    assert read_outcome({"ok": False, "error": {"status": "404"}}) == {
        "kind": "error",
        "data": None,
        "error": {
            "code": None,
            "status": None,
            "message": "recorded tool call error",
            "cause": None,
        },
    }
    assert read_outcome([1])["kind"] == "invalid"
    assert read_outcome({"ok": "yes"})["kind"] == "invalid"


def test_scrub_keys_and_values() -> None:
    value = {"user-s3cr3t": ["pass s3cr3t", ("s3cr3t",)], "n": 1, "short": "abc"}
    assert scrub_keys_and_values(value, ["s3cr3t", "abc"]) == {
        "user-$reproit": ["pass $reproit", ["$reproit"]],
        "n": 1,
        "short": "abc",
    }
    assert scrub_keys_and_values(value, []) is value


def test_fixture_key_ignores_key_order_and_placeholder_details() -> None:
    key = fixture_key("imap", "login", {"user": "ada", "password": placeholder("old")})
    assert key == fixture_key("imap", "login", {"password": placeholder("longer"), "user": "ada"})
    assert key != fixture_key("imap", "login", {"user": "bob", "password": placeholder("old")})
    text = canonical_json(
        {"tool": "imap", "op": "login", "input": {"user": "ada", "password": {"$reproit": True}}}
    )
    assert key == hashlib.sha256(text.encode()).hexdigest()[:24]
