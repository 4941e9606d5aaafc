"""Canonical JSON (PROTOCOL 1.1, decision D1) against the reference and as a property.

``node-golden/canonical.json`` runs case by case: ``canonical_json(JSON.parse(input.json))``
must equal ``expect.canonical`` byte for byte. Hypothesis then checks that the output always
parses back to the value it came from (compared as JavaScript compares values), and that
2000 levels of nesting encode without recursion.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reproit_otel.wire import _js, canonical
from reproit_otel.wire._js import UNSET, well_formed
from reproit_otel.wire.canonical import canonical_json, canonical_json_bytes, ordered_json
from tests.unit.reference_json import deep_recursion, parse_reference_json
from tests.vectors import golden_cases

CANONICAL_CASES = golden_cases("canonical.json")


@pytest.mark.parametrize("case", CANONICAL_CASES, ids=[c["name"] for c in CANONICAL_CASES])
def test_canonical_golden(case: dict[str, Any]) -> None:
    value = parse_reference_json(case["input"]["json"])
    assert canonical_json(value) == case["expect"]["canonical"]


# ------------------------------------------------------------------ round trip property

_MAX_SAFE = 2**53 - 1
_any_char = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None)
_texts = st.text(alphabet=_any_char, max_size=12)
_keys = st.text(max_size=8)  # no surrogates: a split pair would merge into a duplicate key
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-_MAX_SAFE, max_value=_MAX_SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _texts
)
_json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_keys, children, max_size=5),
    max_leaves=40,
)


def _same_js_value(expected: Any, actual: Any) -> bool:
    """Equality as JavaScript sees JSON values: numbers by value (1.0 is 1, -0 is 0), strings
    as UTF-16 (a surrogate pair held as two code points is the astral character), booleans
    never equal to numbers."""
    pending = [(expected, actual)]
    while pending:
        left, right = pending.pop()
        if isinstance(left, bool) or isinstance(right, bool):
            if left is not right:
                return False
        elif isinstance(left, (int, float)):
            if not isinstance(right, (int, float)) or float(left) != float(right):
                return False
        elif isinstance(left, str):
            if not isinstance(right, str) or well_formed(left) != well_formed(right):
                return False
        elif isinstance(left, list):
            if not isinstance(right, list) or len(left) != len(right):
                return False
            pending.extend(zip(left, right, strict=True))
        elif isinstance(left, dict):
            if not isinstance(right, dict) or set(left) != set(right):
                return False
            pending.extend((left[key], right[key]) for key in left)
        elif left is not None or right is not None:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_canonical_output_parses_back_to_the_same_value(value: Any) -> None:
    text = canonical_json(value)
    assert _same_js_value(value, json.loads(text))
    # The bytes on the wire are that text as UTF-8, and insertion-order JSON holds the same value.
    assert canonical_json_bytes(value) == text.encode("utf-8")
    assert _same_js_value(value, json.loads(ordered_json(value)))


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_print_the_shortest_round_trip_form(number: float) -> None:
    text = canonical_json(number)
    assert float(json.loads(text)) == number
    assert "e+0" not in text and "e-0" not in text and not text.endswith(".0")


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_encode_as_null(number: float) -> None:
    assert canonical_json([number]) == "[null]"


# ------------------------------------------------------------------------- deep nesting

DEPTH = 2000


def test_two_thousand_nested_arrays_encode_without_recursion() -> None:
    value: Any = []
    for _ in range(DEPTH - 1):
        value = [value]
    expected = "[" * DEPTH + "]" * DEPTH
    assert canonical_json(value) == expected
    assert ordered_json(value) == expected


def test_two_thousand_nested_objects_encode_without_recursion() -> None:
    value: Any = {"z": 1}
    for _ in range(DEPTH - 1):
        value = {"b": value, "a": None}
    expected = '{"a":null,"b":' * (DEPTH - 1) + '{"z":1}' + "}" * (DEPTH - 1)
    assert canonical_json(value) == expected
    with deep_recursion():
        assert json.loads(expected) is not None


# --- the recursive walk writes what the stack walk writes ----------------------------------------

_KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["0", "1", "10", "01", "4294967294", "4294967295", "-1", "\ud800", "é", "😀"]),
    st.integers(-3, 20),
)
_LEAVES = st.one_of(
    st.none(),
    st.just(UNSET),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\ud800", 'a"b\\c\n\x00\x1f\x7f', "😀\udfff"]),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_KEYS, children, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES, st.booleans())
def test_the_recursive_walk_writes_the_stack_walks_text(value: Any, sort: bool) -> None:
    assert canonical._fast(value, sort, 0) == canonical._encode_stack(value, sort)


def test_values_deeper_than_the_recursive_walk_go_to_the_stack_walk() -> None:
    value: Any = "leaf"
    for _ in range(canonical._FAST_DEPTH + 5):
        value = {"k": [value]}
    with pytest.raises(canonical._Unfit):
        canonical._fast(value, True, 0)
    assert canonical_json(value) == canonical._encode_stack(value, True)
    assert ordered_json(value).count("[") == canonical._FAST_DEPTH + 5


def test_other_mapping_types_go_to_the_stack_walk() -> None:
    from collections import OrderedDict
    from types import MappingProxyType

    value = {"a": OrderedDict(b=1), "c": MappingProxyType({"d": [2]})}
    with pytest.raises(canonical._Unfit):
        canonical._fast(value, False, 0)
    assert ordered_json(value) == '{"a":{"b":1},"c":{"d":[2]}}'


@settings(max_examples=2000, deadline=None)
@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=1e-5, max_value=1e17),
        st.floats(min_value=-1e17, max_value=-1e-5),
        st.integers(-(2**60), 2**60).map(float),
        st.sampled_from([1e-4, -1e-4, 1e16, -1e16, 9999999999999998.0, 0.1 + 0.2, 5e-324]),
    )
)
def test_numbers_printed_through_repr_are_the_long_way_text(number: float) -> None:
    assert _js.js_number_to_string(number) == _js._number_text(number)


def test_keys_that_may_be_array_indexes_still_come_first() -> None:
    value = {"b": 1, "10": 2, "a": 3, "2": 4, "": 5, "02": 6}
    assert ordered_json(value) == '{"2":4,"10":2,"b":1,"a":3,"":5,"02":6}'
