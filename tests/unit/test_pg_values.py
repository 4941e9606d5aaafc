"""The pg value encoding and the statement rules shared by the psycopg2 recorder and replay."""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import json
import math
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg2.extras import DateTimeTZRange, NumericRange

from reproit_otel.instrumentation._pg_common import callproc_text, effect_key, effect_kind
from reproit_otel.instrumentation._pg_values import (
    UnsupportedValue,
    column_keys,
    decode_value,
    encode_params,
    encode_value,
)
from reproit_otel.wire.canonical import canonical_json

PLUS_2 = dt.timezone(dt.timedelta(hours=2))

CASES: list[tuple[Any, Any]] = [
    (None, None),
    (True, True),
    (7, 7),
    (2**53, 2**53),
    (2**53 + 1, {"$pg": "int", "v": "9007199254740993"}),
    (1.5, 1.5),
    (2.0, {"$pg": "float", "v": "2.0"}),
    (-0.0, {"$pg": "float", "v": "-0.0"}),
    (math.inf, {"$pg": "float", "v": "inf"}),
    (decimal.Decimal("1.50"), {"$pg": "decimal", "v": "1.50"}),
    (decimal.Decimal("-Infinity"), {"$pg": "decimal", "v": "-Infinity"}),
    ("text", "text"),
    (b"\x00\xff", {"$pg": "bytes", "v": "AP8="}),
    (memoryview(b"ab"), {"$pg": "memoryview", "v": "YWI="}),
    (bytearray(b"ab"), {"$pg": "bytearray", "v": "YWI="}),
    (dt.date(2024, 1, 31), {"$pg": "date", "v": "2024-01-31"}),
    (dt.time(10, 11, 12, 5), {"$pg": "time", "v": "10:11:12.000005"}),
    (dt.time(10, 11, tzinfo=PLUS_2), {"$pg": "time", "v": "10:11:00+02:00"}),
    (dt.datetime(2024, 1, 31, 10), {"$pg": "datetime", "v": "2024-01-31T10:00:00"}),
    (
        dt.datetime(2024, 1, 31, 10, tzinfo=dt.timezone.utc),
        {"$pg": "datetime", "v": "2024-01-31T10:00:00+00:00"},
    ),
    (dt.timedelta(days=-1, seconds=5), {"$pg": "timedelta", "v": [-1, 5, 0]}),
    (
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        {"$pg": "uuid", "v": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
    ),
    ([1, None, [2.0]], [1, None, [{"$pg": "float", "v": "2.0"}]]),
    ((1, "a"), {"$pg": "tuple", "v": [1, "a"]}),
    ({"a": {"b": 1.0}}, {"a": {"b": {"$pg": "float", "v": "1.0"}}}),
    ({"$pg": 1}, {"$pg": "map", "v": [["$pg", 1]]}),
    ({1: "x"}, {"$pg": "map", "v": [[1, "x"]]}),
    (
        ipaddress.ip_interface("10.0.0.1/24"),
        {"$pg": "ip", "type": "IPv4Interface", "v": "10.0.0.1/24"},
    ),
    (NumericRange(1, 5), {"$pg": "range", "type": "NumericRange", "v": [1, 5, "[)"]}),
    (NumericRange(empty=True), {"$pg": "range", "type": "NumericRange", "v": None}),
    (
        DateTimeTZRange(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), None, "(]"),
        {
            "$pg": "range",
            "type": "DateTimeTZRange",
            "v": [{"$pg": "datetime", "v": "2024-01-01T00:00:00+00:00"}, None, "(]"],
        },
    ),
]


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_typed(v) for v in value])
    if isinstance(value, memoryview):
        return ("memoryview", value.tobytes())
    if isinstance(value, (dt.datetime, dt.time)):
        return (type(value).__name__, value.isoformat(), repr(value.tzinfo))
    return (type(value).__name__, str(value))


def _case_id(value: Any) -> str:
    """A test id that is the same in every run (a memoryview's repr holds its address)."""
    if isinstance(value, memoryview):
        return f"memoryview({bytes(value)!r})"[:40]
    return repr(value)[:40]


@pytest.mark.parametrize(("value", "encoded"), CASES, ids=[_case_id(c[0]) for c in CASES])
def test_encoding_and_its_inverse(value: Any, encoded: Any) -> None:
    assert encode_value(value) == encoded
    # What replay decodes is what the capsule file holds: the canonical JSON, parsed.
    stored = json.loads(canonical_json(encoded))
    assert _typed(decode_value(stored)) == _typed(value)


def test_unknown_types_are_refused() -> None:
    class Point:
        pass

    with pytest.raises(UnsupportedValue):
        encode_value(Point())


def test_redaction_placeholders_come_back_as_they_are() -> None:
    placeholder = {"$reproit": {"redacted": True, "type": "string", "length": 3}}
    assert decode_value(placeholder) == placeholder


def test_parameters() -> None:
    assert encode_params((1, "a")) == [1, "a"]
    assert encode_params({"id": decimal.Decimal("2")}) == {"id": {"$pg": "decimal", "v": "2"}}
    assert encode_params([(1, 2)]) == [{"$pg": "tuple", "v": [1, 2]}]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_any_json_value_round_trips_with_its_types(value: Any) -> None:
    stored = json.loads(canonical_json(encode_value(value)))
    decoded = decode_value(stored)
    assert _typed(decoded) == _typed(value)


def test_statement_rules() -> None:
    assert [
        effect_kind(t)
        for t in (
            "  select 1",
            "SHOW x",
            "WITH a AS (SELECT 1) SELECT 1",
            "DELETE FROM t",
            "\n\tSeLeCt",
        )
    ] == ["read", "read", "write", "write", "read"]
    assert effect_key("x" * 300) == "x" * 256
    assert effect_key("x" * 255 + "😀") == "x" * 255 + "\ud83d"
    assert effect_key("x" * 254 + "😀") == "x" * 254 + "😀"
    assert callproc_text("f", (1, 2)) == "SELECT * FROM f(%s,%s)"
    assert callproc_text("f", {"a": 1}) == "SELECT * FROM f(a:=%(a)s)"
    assert callproc_text("f", None) == "SELECT * FROM f()"
    assert column_keys(["a", "b", "a", "a"]) == ["a", "b", "a#2", "a#3"]
