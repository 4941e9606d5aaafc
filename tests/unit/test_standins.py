"""Stand-ins and keyed identities (reproit_otel.wire.standins), as properties and examples."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reproit_otel.wire import standins
from reproit_otel.wire.matching import matches
from reproit_otel.wire.standins import (
    identity,
    materialize,
    set_identity_key,
    standin,
    string_class,
    text_placeholder,
    text_standins,
)

KEY = b"k" * 32


@pytest.fixture(autouse=True)
def _no_key() -> Iterator[None]:
    set_identity_key(None)
    yield
    set_identity_key(None)


def _body(value: str) -> dict[str, Any]:
    set_identity_key(KEY)
    fields = standins.placeholder_fields(value)
    return {"redacted": True, "type": "string", "length": len(value), **fields}


@pytest.mark.parametrize(
    ("text", "kind", "shape"),
    [
        ("ada.lovelace@example.org", "email", r"[a-z]+@[a-z]+\.[a-z]{2}"),
        ("a@b.c", "email", r"[a-z]@[a-z]\.[a-z]"),
        ("0123", "digits", r"[0-9]{4}"),
        ("deadbeef00", "hex", r"[0-9a-f]{10}"),
        ("Hunter2", "alnum", r"[A-Za-z0-9]{7}"),
        ("eyJhbGciOi.eyJzdWIi.c2ln-_", "token", r"[A-Za-z0-9_-]{26}"),
        ("Zk9+q/Wm=", "base64", r"[A-Za-z0-9+/]{9}"),
        (
            "123e4567-e89b-12d3-a456-426614174000",
            "uuid",
            r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
        ),
        ("correct horse", "text", r"[a-z]{13}"),
    ],
)
def test_a_string_stand_in_keeps_the_class_and_length(text: str, kind: str, shape: str) -> None:
    assert string_class(text) == kind
    made = standin(_body(text))
    assert isinstance(made, str)
    assert re.fullmatch(shape, made), made
    assert len(made) == len(text)
    assert made != text


def test_every_type_gets_a_value_of_that_type() -> None:
    made = materialize(
        {
            "n": {"$reproit": {"redacted": True, "type": "integer", "length": None}},
            "x": {"$reproit": {"redacted": True, "type": "number", "length": None}},
            "b": {"$reproit": {"redacted": True, "type": "boolean", "length": None}},
            "z": {"$reproit": {"redacted": True, "type": "null", "length": None}},
            "a": {"$reproit": {"redacted": True, "type": "array", "length": 3}},
            "o": {"$reproit": {"redacted": True, "type": "object", "length": None}},
            "s": {"$reproit": {"redacted": True, "type": "string", "length": 5}},
            "plain": [1, "two", None, {"three": 3.0}],
        }
    )
    assert type(made["n"]) is int
    assert type(made["x"]) is float and not made["x"].is_integer()
    assert type(made["b"]) is bool
    assert made["z"] is None
    assert [type(item) for item in made["a"]] == [str, str, str]
    assert made["o"] == {}
    assert re.fullmatch(r"[A-Za-z0-9]{5}", made["s"])
    assert made["plain"] == [1, "two", None, {"three": 3.0}]


def test_text_placeholders_become_stand_ins_in_their_syntax() -> None:
    set_identity_key(KEY)
    session = text_placeholder("s3ss10nkeyabcdefghij")
    bearer = text_placeholder("tok_ABCdef123")
    set_identity_key(None)
    header = f"theme=dark; sessionid={session}; csrftoken=$reproit"
    out = text_standins(header)
    match = re.fullmatch(
        r"theme=dark; sessionid=([A-Za-z0-9]{20}); csrftoken=([A-Za-z0-9]{24})", out
    )
    assert match, out
    assert re.fullmatch(r"Bearer [A-Za-z0-9_-]{13}", text_standins(f"Bearer {bearer}"))


def test_the_same_identity_gives_the_same_stand_in_in_every_form() -> None:
    """A secret in a JSON field, a SQL parameter and a cookie becomes one stand-in."""
    secret = "9f2c1d7e0b6a4c3d"
    set_identity_key(KEY)
    field = {
        "$reproit": {
            "redacted": True,
            "type": "string",
            "length": 16,
            **standins.placeholder_fields(secret),
        }
    }
    cookie = "sid=" + text_placeholder(secret)
    set_identity_key(None)
    made = materialize({"body": {"token": field}, "params": [field], "cookie": cookie})
    assert made["body"]["token"] == made["params"][0]
    assert made["cookie"] == "sid=" + made["params"][0]


def test_without_a_key_there_is_no_identity() -> None:
    assert standins.placeholder_fields("hunter22") == {}
    assert text_placeholder("hunter22") == "$reproit"


def test_the_identity_is_keyed() -> None:
    """Nothing in a placeholder can confirm a guess without the process key."""
    assert identity("hunter22", KEY) != identity("hunter22", b"q" * 32)
    set_identity_key(KEY)
    body = json.dumps(standins.placeholder_fields("hunter22"))
    assert "hunter22" not in body
    assert identity("hunter22", b"") not in body


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200)
@given(_JSON)
def test_a_value_without_placeholders_comes_back_equal(value: Any) -> None:
    if "$reproit" in json.dumps(value):
        return
    assert materialize(value) == value


_WITHIN = {
    "email": r"[a-z]+@[a-z]+\.[a-z]+",
    "uuid": r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
    "digits": r"[0-9]+",
    "hex": r"[0-9a-f]+",
    "alnum": r"[A-Za-z0-9]+",
    "base64": r"[A-Za-z0-9+/]+",
    "token": r"[A-Za-z0-9_-]+",
    "text": r"[a-z]+",
}


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=80), st.binary(min_size=1, max_size=32))
def test_every_string_secret_gets_a_stand_in_of_its_length_and_class(
    secret: str, key: bytes
) -> None:
    set_identity_key(key)
    fields = standins.placeholder_fields(secret)
    tagged = text_placeholder(secret)
    set_identity_key(None)
    made = standin({"redacted": True, "type": "string", "length": len(secret), **fields})
    assert len(made) == len(secret)
    assert re.fullmatch(_WITHIN[string_class(secret)], made), (secret, made)
    assert "$reproit" not in made
    assert materialize(
        {"v": {"$reproit": {"redacted": True, "type": "string", "length": len(secret), **fields}}}
    ) == {"v": made}
    assert text_standins(tagged) == made


def test_the_matcher_compares_tagged_text_placeholders_without_their_tags() -> None:
    """Replay redacts the live call to the bare ``$reproit``; the recording carries a tag."""
    set_identity_key(KEY)
    recorded = "user=ada&password=" + text_placeholder("hunter22")
    set_identity_key(None)
    assert matches({"body": recorded}, {"body": "user=ada&password=$reproit"})
    assert not matches({"body": recorded}, {"body": "user=bob&password=$reproit"})
    assert not matches({"body": "user=ada"}, {"body": "user=ada&password=$reproit"})


def test_a_whole_authorization_value_is_keyed_by_its_credential() -> None:
    """An outbound ``Authorization`` header is redacted whole; it links with the token."""
    set_identity_key(KEY)
    assert standins.placeholder_fields("Bearer tok_ABCdef123")["id"] == identity(
        "tok_ABCdef123", KEY
    )
    assert text_placeholder("tok_ABCdef123").endswith(identity("tok_ABCdef123", KEY))
