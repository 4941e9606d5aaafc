"""Redaction (PROTOCOL section 3, decision D8) against the reference and as properties.

``node-golden/redaction.json`` runs case by case: ``value.*`` cases compare
``canonical_json(redact(JSON.parse(input.json)))`` with ``expect.canonical`` byte for byte;
``field.*`` cases check the key-folding predicate through ``redact({field: "v"})``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reproit_otel.redaction.core import (
    MIN_SECRET_LENGTH,
    PLACEHOLDER_KEY,
    SECRET_PARTS,
    TEXT_PLACEHOLDER,
    is_secret_key,
    placeholder,
    redact,
    redact_url,
    scrub_secret_values,
    scrub_value,
)
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.canonical import canonical_json
from tests.unit.reference_json import parse_reference_json
from tests.vectors import D13_NAMES, D13_PARTS, d13_secret, golden_cases, with_d13

REDACTION_CASES = golden_cases("redaction.json")
# By what a case holds, not by its name: a JSON value to redact, or a field name to judge.
VALUE_CASES = [c for c in REDACTION_CASES if "json" in c["input"]]
FIELD_CASES = [c for c in REDACTION_CASES if "field" in c["input"]]


def test_every_golden_case_has_an_adapter() -> None:
    assert len(VALUE_CASES) + len(FIELD_CASES) == len(REDACTION_CASES)


@pytest.mark.parametrize("case", VALUE_CASES, ids=[c["name"] for c in VALUE_CASES])
def test_redaction_golden_value(case: dict[str, Any]) -> None:
    value = parse_reference_json(case["input"]["json"])
    expected = case["expect"]["canonical"]
    # Decision D13: a name the documented list adds is redacted where the reference shows it.
    ours, changed = with_d13(parse_reference_json(expected), placeholder)
    assert canonical_json(redact(value)) == (canonical_json(ours) if changed else expected)


@pytest.mark.parametrize("case", FIELD_CASES, ids=[c["name"] for c in FIELD_CASES])
def test_redaction_golden_field(case: dict[str, Any]) -> None:
    field = case["input"]["field"]
    # Decision D13: the names of the documented list are secret whatever the reference says.
    secret = case["expect"]["secret"] or d13_secret(field)
    assert is_secret_key(field) is secret
    expected = {field: placeholder("v")} if secret else {field: "v"}
    assert redact({field: "v"}) == expected


# --------------------------------------------------------------------------- placeholder


def _stub(kind: str, length: int | None = None) -> dict[str, Any]:
    return {PLACEHOLDER_KEY: {"redacted": True, "type": kind, "length": length}}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hunter2", _stub("string", 7)),
        ("😀😀", _stub("string", 2)),
        ("\ud83d\ude00", _stub("string", 1)),  # a surrogate pair held as two code points
        ("\ud800x", _stub("string", 2)),  # a lone surrogate counts once
        ("", _stub("string", 0)),
        (42, _stub("integer")),
        (1.0, _stub("integer")),
        (-0.0, _stub("integer")),
        (1e300, _stub("integer")),
        (10**400, _stub("number")),  # JavaScript reads it as Infinity
        (1.5, _stub("number")),
        (math.nan, _stub("number")),
        (math.inf, _stub("number")),
        (True, _stub("boolean")),
        (False, _stub("boolean")),
        (None, _stub("null")),
        (UNSET, _stub("null")),
        (["a", "b"], _stub("array", 2)),
        (("a",), _stub("array", 1)),
        ({"k": 1}, _stub("object")),
        (object(), _stub("null")),
    ],
)
def test_placeholder_names_type_and_length_only(value: Any, expected: dict[str, Any]) -> None:
    assert placeholder(value) == expected


def test_placeholder_canonical_key_order() -> None:
    assert canonical_json(placeholder("abc")) == (
        '{"$reproit":{"length":3,"redacted":true,"type":"string"}}'
    )


# ------------------------------------------------------------------------------ redact


def test_secret_parts_are_the_fourteen_capture_fragments() -> None:
    assert SECRET_PARTS == (
        "password",
        "passwd",
        "secret",
        "token",
        "authorization",
        "cookie",
        "email",
        "phone",
        "apikey",
        "publishablekey",
        "privatekey",
        "accesskey",
        "signingkey",
        "idempotencykey",
    )


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("X-Api-Key", True),
        ("private.key", True),
        ("SET-COOKIE", True),
        ("monkey", False),
        ("auth", False),
        (123, False),
        (None, False),
    ],
)
def test_is_secret_key_folds_the_name(name: Any, secret: bool) -> None:
    assert is_secret_key(name) is secret


def test_a_placeholder_under_a_secret_key_is_replaced_like_any_value() -> None:
    # Section 3.2 (decision D1): a secret key's value is replaced whatever it is; a placeholder
    # that came in as data there becomes the placeholder of an object. Elsewhere it is walked
    # as is.
    earlier = dict(placeholder("hunter2"))
    value = {"password": earlier, "note": earlier, "rows": [{"token": earlier}]}
    assert redact(value) == {
        "password": _stub("object"),
        "note": earlier,
        "rows": [{"token": _stub("object")}],
    }


def test_a_placeholder_this_process_made_keeps_its_type_and_length() -> None:
    # An earlier rule of the capture (a text body, a form, a SQL parameter) already replaced
    # the secret: placing it again would lose what the placeholder says of it.
    made = placeholder("hunter2")
    assert redact({"password": made, "rows": [{"token": made}]}) == {
        "password": _stub("string", 7),
        "rows": [{"token": _stub("string", 7)}],
    }
    assert canonical_json(redact({"apiKey": {"$reproit": True}})) == (
        '{"apiKey":{"$reproit":{"length":null,"redacted":true,"type":"object"}}}'
    )


def test_redact_keeps_shape_and_turns_unset_into_null() -> None:
    value = {
        "order": {
            "id": "o-1",
            "token": "t0psecret",
            "lines": ({"sku": "ACME", "apiKey": "k"}, UNSET, None),
            "prices": None,
            "missing": UNSET,
        },
        1: "one",
        "password": UNSET,
    }
    assert redact(value) == {
        "order": {
            "id": "o-1",
            "token": _stub("string", 9),
            "lines": [{"sku": "ACME", "apiKey": _stub("string", 1)}, None, None],
            "prices": None,
            "missing": None,
        },
        "1": "one",
        "password": _stub("null"),
    }


def test_redact_does_not_touch_its_input() -> None:
    value = {"a": [{"token": "t"}]}
    snapshot = json.dumps(value)
    redact(value)
    assert json.dumps(value) == snapshot


@pytest.mark.parametrize("value", [None, True, 3, 1.5, "text", UNSET])
def test_redact_scalars(value: Any) -> None:
    assert redact(value) == (None if value is UNSET else value)


def test_two_thousand_levels_redact_without_recursion() -> None:
    depth = 2000
    value: Any = {"password": "x", "keep": [1]}
    for _ in range(depth - 1):
        value = {"inner": [value], "email": {"deep": [value]}}
    inner = '{"keep":[1],"password":{"$reproit":{"length":1,"redacted":true,"type":"string"}}}'
    email = '{"$reproit":{"length":null,"redacted":true,"type":"object"}}'
    expected = inner
    for _ in range(depth - 1):
        expected = '{"email":' + email + ',"inner":[' + expected + "]}"
    assert canonical_json(redact(value)) == expected


def test_two_thousand_nested_arrays_redact() -> None:
    value: Any = [{"token": 1}]
    for _ in range(1999):
        value = [value]
    stub = '{"token":{"$reproit":{"length":null,"redacted":true,"type":"integer"}}}'
    assert canonical_json(redact(value)) == "[" * 2000 + stub + "]" * 2000


# ----------------------------------------------------------------------- property: no leak

MARKER = "~leak~"
_plain_text = st.text(alphabet=st.characters(blacklist_characters="~"), max_size=6)
_secret_names = st.sampled_from(
    ["password", "X-Api-Key", "user_email", "Set-Cookie", "Idempotency-Key", "tokenizer"]
)
_plain_names = _plain_text.filter(lambda name: not is_secret_key(name))
_leaf_secret = st.one_of(
    st.just(MARKER),
    st.just([MARKER, MARKER]),
    st.just({"inner": MARKER, "password": MARKER}),
    st.integers(),
    st.none(),
)


def _trees(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(_plain_names, children, max_size=4)
            | st.dictionaries(_secret_names, _leaf_secret, min_size=1, max_size=2).flatmap(
                lambda secrets: st.dictionaries(_plain_names, children, max_size=3).map(
                    lambda plain: {**plain, **secrets}
                )
            )
        ),
        max_leaves=30,
    )


_values = _trees(st.none() | st.booleans() | st.integers() | _plain_text)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_no_value_under_a_secret_key_survives_redact(value: Any) -> None:
    redacted = redact(value)
    assert MARKER not in canonical_json(redacted)
    # Walk both trees: secret keys hold exactly the placeholder of the original value, and
    # every other key and element keeps its place.
    pending = [(value, redacted)]
    while pending:
        original, result = pending.pop()
        if isinstance(original, dict):
            assert list(result) == list(original)
            for key, child in original.items():
                if is_secret_key(key):
                    assert result[key] == placeholder(child)
                else:
                    pending.append((child, result[key]))
        elif isinstance(original, list):
            assert len(result) == len(original)
            pending.extend(zip(original, result, strict=True))
        else:
            assert result == original


# --------------------------------------------------------------------------- D8: URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.example/x?token=abc&page=2", "https://api.example/x?token=$reproit&page=2"),
        (
            "/p?q=1&api_key=k&x=&Password=p#frag",
            "/p?q=1&api_key=$reproit&x=&Password=$reproit#frag",
        ),
        ("POST /p?token=abc", "POST /p?token=$reproit"),
        ("/p?api%5Fkey=k&a+token=t", "/p?api%5Fkey=$reproit&a+token=$reproit"),
        ("/p?token=&token&token=a=b", "/p?token=&token&token=$reproit"),
        ("/p?user[password]=s&&", "/p?user[password]=$reproit&&"),
        ("/p#frag?token=abc", "/p#frag?token=$reproit"),
        ("/p?page=1#token=abc", "/p?page=1#token=$reproit"),
        ("/p", "/p"),
        ("/p?", "/p?"),
        ("https://h/p?q=%E2%82%AC&secret=%E2%82%AC", "https://h/p?q=%E2%82%AC&secret=$reproit"),
        ("/p?token=$reproit", "/p?token=$reproit"),
    ],
)
def test_redact_url_replaces_secret_query_values_only(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_url(expected) == expected  # stable: redacting twice changes nothing


def test_text_placeholder_is_the_placeholder_key_text() -> None:
    assert TEXT_PLACEHOLDER == "$reproit" == PLACEHOLDER_KEY


# ------------------------------------------------------------------- D8: secret values


def test_scrub_secret_values_longest_first_and_ignores_short_values() -> None:
    secrets = ["abc", "", "sk_live", "sk_live_1234", "hunter2"]
    text = "key sk_live_1234 then sk_live and hunter2hunter2 abc"
    assert scrub_secret_values(text, secrets) == (
        "key $reproit then $reproit and $reproit$reproit abc"
    )


def test_scrub_secret_values_without_usable_secrets_returns_the_text() -> None:
    assert scrub_secret_values("a.b.c", ["a", "bc", ""]) == "a.b.c"
    assert scrub_secret_values("a.b.c", []) == "a.b.c"
    assert MIN_SECRET_LENGTH == 4


def test_scrub_secret_values_treats_secrets_literally() -> None:
    assert scrub_secret_values("x a.*b y aXXb", ["a.*b"]) == "x $reproit y aXXb"
    assert scrub_secret_values("\\1\\1 ok", ["\\1\\1"]) == "$reproit ok"


def test_scrub_value_scrubs_every_string_but_not_keys() -> None:
    value = {
        "s3cr3tvalue": "Bearer s3cr3tvalue",
        "list": ["s3cr3tvalue", 1, None, True, ("xs3cr3tvaluex",)],
        "n": 7,
    }
    assert scrub_value(value, ["s3cr3tvalue"]) == {
        "s3cr3tvalue": "Bearer $reproit",
        "list": ["$reproit", 1, None, True, ["x$reproitx"]],
        "n": 7,
    }
    assert scrub_value(value, []) is value


def test_scrub_value_deep_nesting() -> None:
    value: Any = "the-secret"
    for _ in range(2000):
        value = {"k": [value]}
    expected = '"$reproit"'
    for _ in range(2000):
        expected = '{"k":[' + expected + "]}"
    assert canonical_json(scrub_value(value, ["the-secret"])) == expected


_no_nul = st.characters(blacklist_characters="\x00")


@given(
    st.text(alphabet=_no_nul, max_size=30),
    st.lists(st.text(alphabet=_no_nul, min_size=4, max_size=6), max_size=3),
)
def test_scrubbed_text_never_contains_a_secret_value(text: str, secrets: list[str]) -> None:
    planted = text + "".join(secrets) + text
    scrubbed = scrub_secret_values(planted, secrets)
    for secret in secrets:
        if secret not in TEXT_PLACEHOLDER and all(
            secret not in other for other in secrets if len(other) > len(secret)
        ):
            assert secret not in scrubbed.replace(TEXT_PLACEHOLDER, "\x00")


# ------------------------------------------------------------------ decision D13 by rule


def _documented_names() -> tuple[list[str], list[str]]:
    """The fragments and whole names docs/recording.md adds to the wire's 14."""
    text = " ".join((Path(__file__).parents[2] / "docs" / "recording.md").read_text().split())
    parts = text.split("or one of the fragments services use beyond them, ", 1)[1]
    parts, names = parts.split("; or when it *is* one of the short names ", 1)
    names = names.split(" (as fragments", 1)[0]
    return re.findall(r"`([a-z]+)`", parts), re.findall(r"`([a-z]+)`", names)


def test_d13_vector_rule_is_the_documented_list_and_the_code_follows_it() -> None:
    parts, names = _documented_names()
    assert tuple(parts) == D13_PARTS
    assert frozenset(names) == D13_NAMES
    # The spec's D13 examples are secret by the rule, and the code redacts each of them.
    for name in ("pwd", "passcode", "bearer", "jwt", "sessionId", "session_id", "credential"):
        assert d13_secret(name) and is_secret_key(name), name
    for name in ("credentials", "otp", "pin", "cvv", "cvc", "PHPSESSID", "x-csrf-token"):
        assert is_secret_key(name), name
    # Names neither the reference nor D13 makes secret stay visible.
    for name in ("session", "ssn", "spinner", "footprint", "signing", "username"):
        assert not d13_secret(name) and not is_secret_key(name), name


def test_d13_turns_a_name_the_reference_pins_visible_into_its_placeholder() -> None:
    # What a held-out reference vector pinning a D13 name as visible is compared with.
    reference = {"user": "ada", "pwd": "hunter2", "rows": [{"otp": 123456, "pin": None}]}
    expected, changed = with_d13(reference, placeholder)
    assert changed
    assert expected == {
        "user": "ada",
        "pwd": _stub("string", 7),
        "rows": [{"otp": _stub("integer"), "pin": _stub("null")}],
    }
    assert redact(reference) == expected
    assert with_d13({"user": "ada", "token": _stub("string", 3)}, placeholder) == (
        {"user": "ada", "token": _stub("string", 3)},
        False,
    )
