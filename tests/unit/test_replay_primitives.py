"""The pure replay helpers (PROTOCOL 7.2, 7.3, 7.6) against the reference and by rule.

``node-golden/replay_primitives.json`` runs case by case: each case names the reference
function (``urlPathAndQuery``, ``matches``, ``bodyDelta``, ``operationKey``, ``tryJson``) and
its arguments, an absent argument being JavaScript ``undefined``. The rule tests below pin the
WHATWG URL behaviour and the JavaScript equality rules the vectors only sample.
"""

from __future__ import annotations

from typing import Any

import pytest

from reproit_otel.wire._js import UNSET
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.matching import (
    body_delta,
    js_stringify,
    matches,
    operation_key,
    request_matches,
    try_json,
)
from reproit_otel.wire.urls import url_path_and_query
from tests.vectors import golden_cases

PRIMITIVE_CASES = golden_cases("replay_primitives.json")


def _call(arguments: dict[str, Any]) -> Any:
    def arg(name: str) -> Any:
        return arguments.get(name, UNSET)

    function = arguments["fn"]
    if function == "urlPathAndQuery":
        return url_path_and_query(arg("url"))
    if function == "matches":
        return matches(arg("recorded"), arg("live"))
    if function == "bodyDelta":
        return body_delta(arg("recorded"), arg("live"))
    if function == "operationKey":
        return operation_key(arg("protocol"), arg("request"))
    if function == "tryJson":
        return try_json(arg("text"), arg("contentType"))
    raise AssertionError(f"unknown reference function {function!r}")


@pytest.mark.parametrize("case", PRIMITIVE_CASES, ids=[c["name"] for c in PRIMITIVE_CASES])
def test_replay_primitive_golden(case: dict[str, Any]) -> None:
    result = _call(case["input"])
    expected = case["expect"]["result"]
    # canonical_json tells true from 1 and "1" from 1, as the reference's values differ.
    assert canonical_json(result) == canonical_json(expected)
    assert type(result) is type(expected) or not isinstance(expected, (bool, str))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:80", "/"),
        ("HTTP://H/A", "/A"),
        ("http://h/a/..", "/"),
        ("http://h/a/.", "/a/"),
        ("http://h/a/..?x", "/?x"),
        ("http://h/%2e%2E/x", "/x"),
        ("http://h/a/%2e./b", "/b"),
        ("http:\\\\h\\a\\b", "/a/b"),
        ("  http://h/x\t\n ", "/x"),
        ("http://h/x?", "/x"),
        ("http://h/x?#frag", "/x"),
        ("http://h/?a='b", "/?a=%27b"),
        ("foo://h/?a='b", "/?a='b"),
        ("http://h/ü?ü", "/%C3%BC?%C3%BC"),
        ("http://h/a`b{c}", "/a%60b%7Bc%7D"),
        ("http://h/\ud800", "/%EF%BF%BD"),
        ("http:///x", "/"),
        ("http://h:/p", "/p"),
        ("http://user:pw@h/p", "/p"),
        ("http://0x7f.1/x", "/x"),
        ("http://[::1]/a", "/a"),
        ("http://[1:2:3:4:5:6:1.2.3.4]/", "/"),
        ("http://münchen.de/p", "/p"),
        ("foo://h", ""),
        ("foo://h/a/../b", "/b"),
        ("foo:/a/b", "/a/b"),
        ("foo:///p", "/p"),
        ("mailto:a b", "a b"),
        ("data:text/plain,x?y", "text/plain,x?y"),
        ("file:", "/"),
        ("file:x", "/x"),
        ("file:///C|/x/../..", "/C:/"),
        ("file://localhost/a", "/a"),
        # Node's parser leaves a non-special path empty when ".." has nothing to remove.
        ("foo:/..", ""),
        ("foo:/a/..", "/"),
        ("foo:/a/../..", ""),
        ("foo:/../", "/"),
        ("http://xn--ls8h/p", "/p"),
        ("http://\u0915\u094d\u200d/p", "/p"),
        ("http://\u0660/p", "/p"),
        ("http://a\u0660/p", "/p"),
    ],
)
def test_url_path_and_query_parses(url: str, expected: str) -> None:
    assert url_path_and_query(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "relative/path",
        "/absolute/path",
        "http://h:99999/",
        "http://h:8x/",
        "http://1.2.3.4.5/",
        "http://999999999999/",
        "http://a.b.c.0x/",
        "http://[::1/a",
        "http://[1:2:3:4:5:6:7:1.2.3.4]/",
        "http://h@",
        "http://a b/",
        "http://%zz/",
        "http:",
        "foo://:80/",
        "http://\u00ad/x",
        "http://xn--/x",
        "http://a\u200db/x",
        "http://1\u0660/x",
        "http://\u0628a/x",
        "http://\u2488/x",
        "http://\u10a0/x",
    ],
)
def test_url_that_does_not_parse_is_its_own_key(url: str) -> None:
    assert url_path_and_query(url) == url


def test_url_of_non_strings_is_their_string() -> None:
    assert url_path_and_query(UNSET) == ""
    assert url_path_and_query(None) == ""
    assert url_path_and_query(5) == "5"


@pytest.mark.parametrize(
    ("recorded", "live", "expected"),
    [
        (1, True, False),
        (True, 1, False),
        (1, 1.0, True),
        ("1", 1, False),
        (2**53, 2**53 + 1, True),  # both parse to one double in the reference
        ({"0": "a", "length": 2}, ["a", "b"], True),
        ({"x": 1}, [1], False),
        ({"a": {"$reproit": 1}}, {}, True),
        ({"a": {"$reproit": ""}}, {"a": 1}, False),
        ([1], {"0": 1}, False),
        ({}, None, False),
        ({}, "x", False),
        ({"constructor": None}, {}, True),
        ({"constructor": 1}, {}, False),
        ({"__proto__": {}}, {}, True),
        (float("nan"), float("nan"), False),
    ],
)
def test_matches_follows_javascript(recorded: Any, live: Any, expected: bool) -> None:
    assert matches(recorded, live) is expected


def test_matches_deep_nesting_without_recursion() -> None:
    recorded: Any = 1
    live: Any = 1
    for _ in range(5000):
        recorded, live = [recorded], [live]
    assert matches(recorded, live) is True


def test_body_delta_examples_of_the_protocol() -> None:
    assert body_delta("abc", "abd") == {"kind": "byte", "offset": 2}
    assert body_delta("abc", "abcd") == {"kind": "byte", "offset": 3}
    assert body_delta({"messages": [1, 2]}, {"messages": [1, 2, 3]}) == {
        "kind": "message",
        "firstDifferingMessage": 2,
        "recordedMessages": 2,
        "liveMessages": 3,
    }
    assert body_delta({"messages": [1, 2], "x": 1}, {"messages": [1, 2], "x": 2}) == {
        "kind": "byte",
        "offset": 22,
    }
    assert body_delta({"a": "€1"}, {"a": "€2"}) == {"kind": "byte", "offset": 9}
    assert body_delta(UNSET, "x") is None
    assert body_delta("x", UNSET) is None


def test_js_stringify_lists_integer_keys_first() -> None:
    assert js_stringify({"b": 1, "10": 2, "2": 3, "01": 4}) == '{"2":3,"10":2,"b":1,"01":4}'


def test_operation_key_and_request_matches() -> None:
    assert operation_key("http", {"method": "GET", "url": "http://a/x?q=1#f"}) == "GET /x?q=1"
    assert operation_key("pg", {"text": "SELECT 1"}) == "SELECT 1"
    assert operation_key("pg", None) == ""
    recorded = {"method": "GET", "url": "http://svc/p", "body": {"a": 1}}
    assert (
        request_matches(
            "http", recorded, {"method": "GET", "url": "http://other:1/p", "body": {"a": 1, "b": 2}}
        )
        is True
    )
    assert request_matches("pg", {"text": "S", "values": [1]}, {"text": "S", "values": [1.0]})


def test_try_json_follows_json_parse() -> None:
    assert try_json('{"a":1}', "application/json") == {"a": 1}
    assert try_json("NaN", "application/json") == "NaN"
    assert try_json("{bad", "application/json") == "{bad"
    assert try_json('{"a":1}', "application/vnd.x+json") == '{"a":1}'
    assert try_json("null", "application/json") is None
