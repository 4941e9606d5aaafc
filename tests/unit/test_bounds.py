"""Exchange bounds (PROTOCOL 4.2 to 4.5) against the reference and as properties.

``node-golden/bounded_body.json`` runs ``bounded_body`` case by case and
``node-golden/headers.json`` runs ``bounded_headers`` and then ``redact`` of its result (what
an exchange holds once attached to an operation); both compare canonical strings exactly.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reproit_otel.redaction.core import placeholder, redact
from reproit_otel.wire._js import UNSET
from reproit_otel.wire._jsparse import js_json_parse
from reproit_otel.wire.bounds import (
    MAX_BODY_BYTES,
    MAX_HEADERS,
    MAX_PG_ROWS,
    MAX_STREAM_CHUNKS,
    BodyCollector,
    StreamBoundaries,
    bounded_body,
    bounded_headers,
    bounded_rows,
    is_event_stream,
    js_lower,
)
from reproit_otel.wire.canonical import canonical_json
from tests.vectors import golden_cases

BODY_CASES = golden_cases("bounded_body.json")
HEADER_CASES = golden_cases("headers.json")


def _golden_body(case_input: dict[str, Any]) -> Any:
    """The body argument of a ``bounded_body.json`` case (exactly one form is present)."""
    forms = {"body", "bodyParts", "bodyBase64", "bodyValue"} & set(case_input)
    assert len(forms) == 1, forms
    if "bodyParts" in case_input:
        return "".join(unit * count for unit, count in case_input["bodyParts"])
    if "bodyBase64" in case_input:
        return base64.b64decode(case_input["bodyBase64"])
    return case_input.get("body", case_input.get("bodyValue"))


@pytest.mark.parametrize("case", BODY_CASES, ids=[c["name"] for c in BODY_CASES])
def test_bounded_body_golden(case: dict[str, Any]) -> None:
    body = _golden_body(case["input"])
    result = bounded_body(body, case["input"].get("contentType", UNSET))
    assert canonical_json(result) == case["expect"]["canonical"]


@pytest.mark.parametrize("case", HEADER_CASES, ids=[c["name"] for c in HEADER_CASES])
def test_headers_golden(case: dict[str, Any]) -> None:
    case_input = case["input"]
    if "headersJson" in case_input:
        headers = json.loads(case_input["headersJson"])
    else:
        headers = case_input["headers"]
    bounded = bounded_headers(headers)
    assert canonical_json(bounded) == case["expect"]["boundedCanonical"]
    assert canonical_json(redact(bounded)) == case["expect"]["recordedCanonical"]


# --------------------------------------------------------------------------------- bodies


def test_body_limits() -> None:
    assert (MAX_BODY_BYTES, MAX_HEADERS, MAX_PG_ROWS, MAX_STREAM_CHUNKS) == (8192, 32, 64, 128)


@pytest.mark.parametrize("body", [None, UNSET, "", b"", bytearray(), memoryview(b"")])
def test_absent_or_empty_body_contributes_nothing(body: Any) -> None:
    assert bounded_body(body, "text/plain") == {}


def test_body_at_the_limit_is_inline_and_one_byte_more_is_identity() -> None:
    at_limit = "é" * (MAX_BODY_BYTES // 2)
    assert bounded_body(at_limit) == {"body": at_limit}
    over = at_limit + "x"
    data = over.encode("utf-8")
    assert bounded_body(over) == {
        "bodyBytes": MAX_BODY_BYTES + 1,
        "bodySha256": hashlib.sha256(data).hexdigest(),
        "truncated": True,
    }
    assert bounded_body(memoryview(data)) == bounded_body(bytearray(data)) == bounded_body(over)


def test_binary_body_at_the_limit_decodes_lossily_inline() -> None:
    # The budget is the raw byte count; each invalid byte then decodes to U+FFFD.
    assert bounded_body(b"\xff" * MAX_BODY_BYTES) == {"body": "\ufffd" * MAX_BODY_BYTES}
    assert bounded_body(b"\xffa") == {"body": "\ufffda"}


def test_lone_surrogate_in_a_text_body_becomes_replacement_character() -> None:
    assert bounded_body("a\ud800b") == {"body": "a\ufffdb"}
    assert bounded_body("\ud83d\ude00") == {"body": "😀"}


def test_identity_objects_pass_through_unchanged() -> None:
    identity = {"bodyBytes": 9000, "bodySha256": "ab" * 32, "truncated": True}
    assert bounded_body(identity, "application/json") is identity
    assert bounded_body({"truncated": 1}) == {"body": "[object Object]"}
    assert bounded_body({"truncated": "true"}) == {"body": "[object Object]"}


@pytest.mark.parametrize(
    ("value", "content_type", "expected"),
    [
        (1.5, "application/json", {"body": 1.5}),
        (1.0, "text/plain", {"body": "1"}),
        (True, "application/json", {"body": True}),
        (["a", None, 2], "text/plain", {"body": "a,,2"}),
        (0, UNSET, {"body": "0"}),
    ],
)
def test_other_values_are_named_as_javascript_names_them(
    value: Any, content_type: Any, expected: dict[str, Any]
) -> None:
    assert bounded_body(value, content_type) == expected


@pytest.mark.parametrize(
    ("text", "content_type", "expected"),
    [
        ('{"a":[1,2.5]}', "application/json; charset=utf-8", {"a": [1, 2.5]}),
        ("null", "application/json", None),
        ('"s"', "application/problem+json, application/json", "s"),
        ('{"a":1}', "application/vnd.x+json", '{"a":1}'),
        ('{"a":1}', "APPLICATION/JSON", '{"a":1}'),
        ('{"a":1}', None, '{"a":1}'),
        ('{"a":1}', UNSET, '{"a":1}'),
        ("NaN", "application/json", "NaN"),
        ("[Infinity]", "application/json", "[Infinity]"),
        ("\ufeff{}", "application/json", "\ufeff{}"),
        ("\u00a0{}", "application/json", "\u00a0{}"),
        (" \t\r\n{} \n", "application/json", {}),
        ("[1,]", "application/json", "[1,]"),
        ('"\t"', "application/json", '"\t"'),
    ],
)
def test_declared_json_parses_by_json_parse_rules(
    text: str, content_type: Any, expected: Any
) -> None:
    assert bounded_body(text, content_type) == {"body": expected}


def test_deep_json_body_parses_without_recursion() -> None:
    depth = MAX_BODY_BYTES // 2
    text = "[" * depth + "]" * depth
    result = bounded_body(text, "application/json")
    assert canonical_json(result) == '{"body":' + text + "}"


def test_json_numbers_are_read_as_javascript_doubles() -> None:
    assert js_json_parse("12345678901234567890") == 12345678901234567890.0
    assert js_json_parse("9007199254740993") == 9007199254740992
    assert js_json_parse("1" * 5000) == float("inf")
    assert canonical_json(js_json_parse("[-0, 1e400, 1E2]")) == "[0,null,100]"
    assert js_json_parse('{"a":1,"a":2,"b":3}') == {"a": 2, "b": 3}


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "[",
        "]",
        "{",
        '{"a"}',
        '{"a":}',
        "[1 2]",
        "01",
        "1.",
        ".5",
        "-",
        "+1",
        "tru",
        "[]]",
        '{"a":1,}',
        '"\\x"',
        "[NaN]",
        "-Infinity",
    ],
)
def test_json_parse_rejects_what_json_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        js_json_parse(text)
    deep = "[" * 3000 + "[0," + text + "]" + "]" * 3000  # the iterative path agrees
    with pytest.raises(ValueError):
        js_json_parse(deep)


def test_deep_parse_keeps_the_same_grammar() -> None:
    depth = 3000
    text = '{"a":' * depth + '[1,-0.5e1,"x\\u00e9",true,false,null,{}]' + "}" * depth
    expected = '{"a":' * depth + '[1,-5,"xé",true,false,null,{}]' + "}" * depth
    assert canonical_json(js_json_parse(text)) == expected


_valid_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        _valid_text,
        st.integers(0, 3).flatmap(
            lambda width: st.integers(MAX_BODY_BYTES // 4 - 8, MAX_BODY_BYTES + 8).map(
                lambda count: ["a", "é", "€", "😀"][width] * (count // (width + 1))
            )
        ),
    ),
    st.sampled_from(["text/plain", "application/json", UNSET]),
)
def test_an_inline_text_body_is_never_over_the_budget(body: str, content_type: Any) -> None:
    result = bounded_body(body, content_type)
    data = body.encode("utf-8", "replace") if body else b""
    if "body" in result:
        assert len(body.encode("utf-8", "surrogatepass")) <= MAX_BODY_BYTES
        if isinstance(result["body"], str):
            assert len(result["body"].encode("utf-8")) <= MAX_BODY_BYTES
    elif result:
        assert result["truncated"] is True
        assert result["bodyBytes"] > MAX_BODY_BYTES
    else:
        assert data == b""


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=MAX_BODY_BYTES + 64))
def test_a_byte_body_is_inline_only_within_the_budget(data: bytes) -> None:
    result = bounded_body(data, "text/plain")
    if not data:
        assert result == {}
    elif len(data) <= MAX_BODY_BYTES:
        assert result == {"body": data.decode("utf-8", "replace")}
    else:
        assert result == {
            "bodyBytes": len(data),
            "bodySha256": hashlib.sha256(data).hexdigest(),
            "truncated": True,
        }


@pytest.mark.parametrize("split", [1, 7, 4096, MAX_BODY_BYTES])
@pytest.mark.parametrize("size", [0, 5, MAX_BODY_BYTES, MAX_BODY_BYTES + 1, 3 * MAX_BODY_BYTES])
def test_body_collector_agrees_with_bounding_the_whole_body(size: int, split: int) -> None:
    data = bytes(index % 251 for index in range(size))
    collector = BodyCollector()
    for start in range(0, size, split):
        collector.add(data[start : start + split])
    assert collector.size == size
    assert bounded_body(collector.result(), "text/plain") == bounded_body(data, "text/plain")


def test_body_collector_text_chunks_and_empty() -> None:
    collector = BodyCollector()
    assert collector.result() is None
    collector.add("é")
    collector.add(b"")
    collector.add(memoryview(b"!"))
    assert collector.result() == "é!".encode()


# -------------------------------------------------------------------------------- headers


def test_headers_accept_pairs_none_values_lists_and_bytes() -> None:
    pairs = [
        ("X-B", None),
        ("x-a", ["1", None, UNSET, 2.0, ["p", "q"]]),
        (b"X-Raw", b"caf\xe9"),
        ("X-B", "later"),
        (7, True),
    ]
    assert bounded_headers(pairs) == {
        "headers": {"7": "true", "x-a": "1, , , 2, p,q", "x-b": "later", "x-raw": "café"}
    }
    assert bounded_headers(None) == bounded_headers(UNSET) == bounded_headers([]) == {}


def test_header_cap_counts_collisions_and_keeps_sorted_first() -> None:
    headers = [(f"X-H{i:02d}", str(i)) for i in reversed(range(40))] + [("x-h00", "dup")]
    table = bounded_headers(headers)["headers"]
    assert list(table) == [f"x-h{i:02d}" for i in range(31)]
    assert table["x-h00"] == "dup"  # stable sort: the pair given later wins


def test_secret_headers_become_placeholder_objects_once_redacted() -> None:
    bounded = bounded_headers({"Authorization": "Bearer x", "Accept": "*/*"})
    assert redact(bounded) == {
        "headers": {"accept": "*/*", "authorization": placeholder("Bearer x")}
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Content-Type", "content-type"),
        ("İ", "i\u0307"),
        ("ΑΣ", "ας"),
        ("ΑΣ Β", "ας β"),
        ("Σ", "σ"),
        ("ẞ", "ß"),
        ("\ud800X", "\ud800x"),
        ("\U00010570", "\U00010597"),  # Unicode 14, newer than some interpreters' tables
        ("\U00010d50", "\U00010d70"),  # Unicode 16
        ("\ua7cb", "\u0264"),
    ],
)
def test_js_lower_matches_to_lower_case(name: str, expected: str) -> None:
    assert js_lower(name) == expected


# ------------------------------------------------------------------------ rows and streams


def test_bounded_rows() -> None:
    rows = [(i,) for i in range(MAX_PG_ROWS + 1)]
    assert bounded_rows(rows) == (rows[:MAX_PG_ROWS], True)
    assert bounded_rows(rows[:MAX_PG_ROWS]) == (rows[:MAX_PG_ROWS], False)
    assert bounded_rows([]) == ([], False)


def _boundaries(*sizes: int) -> StreamBoundaries:
    collector = StreamBoundaries()
    for size in sizes:
        collector.add(size)
    return collector


def test_stream_boundaries_rules() -> None:
    assert _boundaries().result(True) is None
    assert _boundaries().result(False) is None
    assert _boundaries(5).result(False) is None
    assert _boundaries(5).result(True) == {"chunks": [5]}
    assert _boundaries(5, 6).result(False) == {"chunks": [5, 6]}
    many = _boundaries(*range(1, MAX_STREAM_CHUNKS + 3))
    assert many.result(False) == {
        "chunks": list(range(1, MAX_STREAM_CHUNKS + 1)),
        "truncated": True,
    }
    assert many.dropped == 2
    assert many.chunks == list(range(1, MAX_STREAM_CHUNKS + 1))
    exact = _boundaries(*([1] * MAX_STREAM_CHUNKS))
    assert exact.result(False) == {"chunks": [1] * MAX_STREAM_CHUNKS}


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/event-stream", True),
        ("text/event-stream; charset=utf-8", True),
        ("Text/Event-Stream", False),
        (None, False),
        (UNSET, False),
    ],
)
def test_is_event_stream(content_type: Any, expected: bool) -> None:
    assert is_event_stream(content_type) is expected
