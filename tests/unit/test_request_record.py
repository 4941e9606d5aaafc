"""The inbound request as recorded (wire/request_record.py, redaction/headers.py,
redaction/multipart.py) and as ``check`` sends it back (check.request.replay_request)."""

from __future__ import annotations

import base64
import gzip
import re
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from reproit_otel.check.request import (
    RequestOverrides,
    _decoded,
    parse_cookie_override,
    parse_header_override,
    replay_request,
)
from reproit_otel.redaction.headers import redact_header
from reproit_otel.redaction.multipart import redact_multipart
from reproit_otel.wire.request_record import (
    recorded_request,
    recorded_server,
    scrub_request_bytes,
)
from reproit_otel.wire.standins import identity, set_identity_key

KEY = b"r" * 32
SESSION = "k2j3l4m5n6b7v8c9x0z1a2s3d4f5g6h7"


@pytest.fixture(autouse=True)
def _capture_key() -> Iterator[None]:
    set_identity_key(KEY)
    yield
    set_identity_key(None)


def tag(secret: str, kind: str) -> str:
    return f"$reproit.{kind}.{len(secret)}.{identity(secret, KEY)}"


def test_secret_parts_of_headers_go_and_their_syntax_stays() -> None:
    assert redact_header("Cookie", f"theme=dark; sessionid={SESSION}; lang=fr") == (
        f"theme=dark; sessionid={tag(SESSION, 'alnum')}; lang=fr"
    )
    assert redact_header("Authorization", "Bearer abc.def-ghi") == (
        f"Bearer {tag('abc.def-ghi', 'token')}"
    )
    assert redact_header("X-Api-Key", "0123456789") == tag("0123456789", "digits")
    assert redact_header("Accept-Language", "fr-CH") == "fr-CH"


def test_a_multipart_secret_field_goes_and_every_other_byte_stays() -> None:
    head = b'--b\r\nContent-Disposition: form-data; name="%s"%s\r\n\r\n'
    body = (
        head % (b"password", b"")
        + b"hunter22\r\n"
        + head % (b"avatar", b'; filename="a.bin"')
        + b"\xff\x00password\r\n--b--\r\n"
    )
    expected = body.replace(b"hunter22", tag("hunter22", "alnum").encode())
    assert redact_multipart(body, "multipart/form-data; boundary=b") == expected


def test_the_recorded_request_keeps_order_and_bytes() -> None:
    data = "Grüße".encode("latin-1")
    value = recorded_request(
        [("Host", "a.example"), ("Content-Type", "text/plain"), ("Cookie", f"sid={SESSION}")],
        data,
        "text/plain",
        chunked=True,
    )
    assert value == {
        "headers": [
            ["Host", "a.example"],
            ["Content-Type", "text/plain"],
            ["Cookie", f"sid={tag(SESSION, 'alnum')}"],
        ],
        "body": data.decode("utf-8", "replace"),
        "bodyBase64": base64.b64encode(data).decode(),
        "chunked": True,
    }
    assert scrub_request_bytes({"request": value}, ["Grüße"]) == {
        "request": {k: v for k, v in value.items() if k != "bodyBase64"}
    }


@pytest.mark.parametrize(
    ("server", "kept"),
    [
        (("127.0.0.1", "8000"), ["127.0.0.1", 8000]),  # WSGI: SERVER_PORT is text
        (("10.0.0.5", 8443), ["10.0.0.5", 8443]),  # ASGI: scope["server"]
        (["shop.example", 0], ["shop.example", 0]),
        (None, None),  # an ASGI server may give none (a Unix socket)
        (("127.0.0.1", "http"), None),
        (("127.0.0.1", True), None),
        (("127.0.0.1", 70000), None),
        ((None, 80), None),
        (("127.0.0.1", 80, "extra"), None),
    ],
)
def test_the_server_address_is_kept_when_it_is_a_host_and_a_port(server: Any, kept: Any) -> None:
    recorded = recorded_request([("Host", "shop.example")], b"", None, server=server)
    assert recorded.get("server") == kept
    capsule = {"events": [{"kind": "start", "input": {"request": recorded}}]}
    assert recorded_server(capsule) == (None if kept is None else tuple(kept))


def test_a_capsule_without_a_recorded_server_gives_none() -> None:
    assert recorded_server({"events": [{"kind": "start", "input": {"body": {}}}]}) is None
    assert recorded_server({"events": "not a list"}) is None
    assert recorded_server({}) is None


def test_a_json_text_with_a_secret_key_is_recorded_as_its_redacted_value() -> None:
    value = recorded_request([], b'{"b": 9.0, "password": "hunter22"}', "application/json")
    assert value["body"] == {
        "b": 9.0,
        "password": {
            "$reproit": {
                "redacted": True,
                "type": "string",
                "length": 8,
                "class": "alnum",
                "id": identity("hunter22", KEY),
            }
        },
    }
    plain = recorded_request([], b'{"b": 9.0, "a": 1}', "application/json")
    assert plain["body"] == '{"b": 9.0, "a": 1}'


def capsule(request_input: dict[str, Any], operation: str = "POST /login") -> dict[str, Any]:
    return {"operation": operation, "events": [{"kind": "start", "input": request_input}]}


def test_check_sends_the_recorded_lines_with_stand_ins_and_a_fresh_length() -> None:
    body = f"user=ada&password={tag('hunter22', 'alnum')}"
    sent = replay_request(
        capsule(
            {
                "body": {"user": "ada"},
                "request": {
                    "headers": [
                        ["Host", "shop.example"],
                        ["Transfer-Encoding", "chunked"],
                        ["Content-Type", "application/x-www-form-urlencoded"],
                        ["Cookie", f"theme=dark; sid={tag(SESSION, 'alnum')}"],
                        ["Expect", "100-continue"],
                    ],
                    "body": body,
                    "chunked": True,
                },
            }
        )
    )
    assert (sent.method, sent.target) == ("POST", "/login")
    assert sent.body is not None
    assert re.fullmatch(rb"user=ada&password=[A-Za-z0-9]{8}", sent.body)
    names = [name for name, _ in sent.headers]
    assert names == ["Host", "Content-Length", "Content-Type", "Cookie"]
    assert sent.header("Content-Length") == str(len(sent.body))
    cookie = sent.header("Cookie") or ""
    assert re.fullmatch(r"theme=dark; sid=[A-Za-z0-9]{32}", cookie)
    # One secret, one stand-in: the same identity in another capsule gives the same value.
    again = replay_request(
        capsule({"request": {"headers": [["Cookie", f"sid={tag(SESSION, 'alnum')}"]]}})
    )
    assert again.header("Cookie") == cookie.removeprefix("theme=dark; ")


def test_overrides_replace_or_add_headers_and_cookies() -> None:
    recorded = capsule(
        {
            "request": {
                "headers": [
                    ["host", "h"],
                    ["authorization", "Bearer $reproit"],
                    ["cookie", "a=1; sid=$reproit"],
                ]
            }
        },
        "GET /me",
    )
    overrides = RequestOverrides(
        headers=[parse_header_override("Authorization: Bearer minted"), ("X-Extra", "1")],
        cookies=[parse_cookie_override("sid=mine"), parse_cookie_override("b=2")],
    )
    sent = replay_request(recorded, overrides)
    assert sent.headers == [
        ("host", "h"),
        ("Authorization", "Bearer minted"),
        ("cookie", "a=1; sid=mine; b=2"),
        ("X-Extra", "1"),
    ]
    assert sent.body is None
    with pytest.raises(ValueError, match="Name: value"):
        parse_header_override("no colon")
    with pytest.raises(ValueError, match="name=value"):
        parse_cookie_override("a=1; b=2")


def test_an_old_capsule_sends_its_decoded_body_with_stand_ins() -> None:
    placeholder = {"$reproit": {"redacted": True, "type": "string", "length": 7}}
    sent = replay_request(
        capsule(
            {
                "body": {"email": placeholder, "n": 1},
                "headers": {"accept-language": "fr", "cookie": placeholder},
            }
        )
    )
    assert sent.body is not None
    assert re.fullmatch(rb'\{"email": "[A-Za-z0-9]{7}", "n": 1\}', sent.body)
    assert sent.headers == [
        ("accept-language", "fr"),
        ("content-type", "application/json"),
        ("Content-Length", str(len(sent.body))),
    ]


def test_an_answer_compressed_for_a_recorded_accept_encoding_is_observed_decoded() -> None:
    text = b'{"error": "boom"}'
    assert _decoded(gzip.compress(text), "gzip") == text
    assert _decoded(zlib.compress(text), "deflate") == text
    assert _decoded(text, None) == text
    assert _decoded(b"not gzip", "gzip") == b"not gzip"
