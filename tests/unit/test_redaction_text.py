"""Redaction beyond key names: service secret names, URLs in all their places, text bodies,
SQL parameters by the column they bind to, and error texts that echo a redacted value."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reproit_otel.check.request import recorded_request
from reproit_otel.redaction.body import redact_text_body
from reproit_otel.redaction.core import (
    SERVICE_SECRET_PARTS,
    is_secret_key,
    placeholder,
    redact,
    redact_form,
    redact_url,
    redact_urls_in_text,
)
from reproit_otel.redaction.sql import (
    redact_sql_values,
    redacted_originals,
    scrub_echoes,
    secret_bindings,
)

FORM = "application/x-www-form-urlencoded"


# ------------------------------------------------------------------------ secret names


@pytest.mark.parametrize(
    "name",
    [
        "pwd",
        "db_pwd",
        "passphrase",
        "jwt",
        "id_jwt",
        "session_id",
        "sessionid",
        "PHPSESSID",
        "private_key",
        "credentials",
        "client_credentials",
        "x-auth-key",
        "Ocp-Apim-Subscription-Key",
        "X-Amz-Signature",
        "X-CSRF-Token",
        "xsrf",
        "connection_string",
        "otp",
        "sig",
        "PIN",
        "cvv",
    ],
)
def test_names_services_use_for_secrets_are_secret(name: str) -> None:
    assert is_secret_key(name) is True
    assert redact({name: "v4lue"}) == {name: placeholder("v4lue")}


@pytest.mark.parametrize(
    "name",
    # The reference pins the first five as not secret; the rest are ordinary words that hold
    # a short secret name inside them.
    ["session", "ssn", "authorisation", "access", "user", "footprint", "spinner", "design"],
)
def test_ordinary_names_stay_visible(name: str) -> None:
    assert is_secret_key(name) is False


def test_every_service_part_is_its_own_folded_form() -> None:
    for part in SERVICE_SECRET_PARTS:
        assert part == part.lower() and part.isalnum()
        assert is_secret_key(part.upper())


# -------------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://app.example/cb#access_token=eyJh.eyJz.c2ln&token_type=bearer&state=s1",
            "https://app.example/cb#access_token=$reproit&token_type=$reproit&state=s1",
        ),
        ("https://ghp_a1b2c3d4e5@github.com/o/r.git", "https://$reproit@github.com/o/r.git"),
        ("https://ada:hunter2@db.example:5432/x", "https://ada:$reproit@db.example:5432/x"),
        ("https://ada:@h/", "https://ada:@h/"),
        ("https://h/p?page=2#section-3", "https://h/p?page=2#section-3"),
        ("mailto:ada@example.com", "mailto:ada@example.com"),
        ("https://h/p?next=a@b", "https://h/p?next=a@b"),
    ],
)
def test_redact_url_covers_fragments_and_user_info(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_url(expected) == expected


def test_urls_inside_a_transport_error_message_are_redacted() -> None:
    message = (
        "HTTPSConnectionPool(host='api.example', port=443): Max retries exceeded with url: "
        '/v1/rates?page=2&api_key=sk_live_51Hx (Caused by NameResolutionError("https://'
        'ghp_tok3n@api.example/v1?sig=abcd1234: Failed to resolve"))'
    )
    assert redact_urls_in_text(message) == (
        "HTTPSConnectionPool(host='api.example', port=443): Max retries exceeded with url: "
        '/v1/rates?page=2&api_key=$reproit (Caused by NameResolutionError("https://'
        '$reproit@api.example/v1?sig=$reproit: Failed to resolve"))'
    )


def test_redact_form_replaces_secret_fields_only() -> None:
    form = "grant_type=password&username=ada&password=hunter%32&client_secret=cs_1&scope=a+b"
    assert redact_form(form) == (
        "grant_type=password&username=ada&password=$reproit&client_secret=$reproit&scope=a+b"
    )


# ------------------------------------------------------------------------ text bodies


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (
            "access_token=gho_16C7e42F292c6912E7710c838347Ae178B4a&token_type=bearer",
            "application/x-www-form-urlencoded; charset=utf-8",
            "access_token=$reproit&token_type=$reproit",
        ),
        (
            '{"user": "ada", "password": "hunter2"}',
            "text/plain",
            {"user": "ada", "password": placeholder("hunter2")},
        ),
        ('[{"jwt": "e.y.j"}]', None, [{"jwt": placeholder("e.y.j")}]),
        ('{"user":  "ada"}', "text/plain", '{"user":  "ada"}'),
        ("password=hunter2", "text/plain", "password=$reproit"),  # the text rules apply
        (
            "<p>Authorization: Bearer e.y.j</p>",
            "text/html",
            "<p>Authorization: Bearer $reproit</p>",
        ),
        ("{not json", "text/plain", "{not json"),
        ({"password": "parsed already"}, "application/json", {"password": "parsed already"}),
        (None, FORM, None),
    ],
)
def test_text_bodies_are_redacted_by_the_names_inside(
    body: Any, content_type: str | None, expected: Any
) -> None:
    assert redact_text_body(body, content_type) == expected


# ------------------------------------------------------------------------------- SQL


def _p(value: Any) -> Any:
    return placeholder(value)


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        (
            "INSERT INTO users (email, password_hash, name) VALUES (%s, %s, %s)",
            ["ada@example.com", "bcrypt$2b$12", "Ada"],
            [_p("ada@example.com"), _p("bcrypt$2b$12"), "Ada"],
        ),
        (
            "insert into t (name, pwd) values (%s, crypt(%s, gen_salt('bf'))), (%s, %s) "
            "returning id",
            ["a", "p1", "b", "p2"],
            ["a", _p("p1"), "b", _p("p2")],
        ),
        ("UPDATE t SET token = %s WHERE id = %s", ["tok_1234", 7], [_p("tok_1234"), 7]),
        (
            "SELECT * FROM keys k WHERE k.api_key = %s AND k.owner IN (%s, %s)",
            ["ak_1", 1, 2],
            [_p("ak_1"), 1, 2],
        ),
        ('SELECT 1 WHERE "Session_Id" IN (%s, %s)', ["s1", "s2"], [_p("s1"), _p("s2")]),
        ("SELECT 1 WHERE secret = ANY(%s)", [["a", "b"]], [_p(["a", "b"])]),
        ("SELECT 1 WHERE %s = u.passphrase", ["open sesame"], [_p("open sesame")]),
        (
            "SELECT '%s is 100%%', name FROM t WHERE -- %s\n password LIKE %s AND id = %s",
            ["x", "y", "pw", 3],
            ["x", "y", _p("pw"), 3],
        ),
        (
            "SELECT 1 WHERE password = %(p1)s AND id = %(id)s",
            {"p1": "hunter2", "id": 4},
            {"p1": _p("hunter2"), "id": 4},
        ),
        ("SELECT name FROM t WHERE id = %s", [5], [5]),
        ("SELECT 1 WHERE token = %s", [_p("already")], [_p("already")]),
        ("SELECT 1 WHERE token = %s", None, None),
    ],
)
def test_sql_parameters_are_redacted_by_the_column_they_bind(
    text: str, values: Any, expected: Any
) -> None:
    assert redact_sql_values(text, values) == expected


def test_bindings_are_read_once_per_statement() -> None:
    text = "UPDATE accounts SET credentials = %s, note = %s WHERE id = %s"
    assert secret_bindings(text).positions == frozenset({0})
    assert secret_bindings(text) is secret_bindings(text)


def test_error_texts_lose_the_values_the_request_redacted() -> None:
    text = "INSERT INTO users (email, password) VALUES (%s, %s)"
    values = ["ada@example.com", "hunter22"]
    originals = redacted_originals(text, values)
    assert originals == ["ada@example.com", "hunter22"]
    message = (
        'duplicate key value violates unique constraint "users_email_key"\n'
        "DETAIL:  Key (email)=(ada@example.com) already exists.\n"
    )
    assert scrub_echoes(message, originals) == (
        'duplicate key value violates unique constraint "users_email_key"\n'
        "DETAIL:  Key (email)=($reproit) already exists.\n"
    )
    failing = "Failing row contains (1, ada@example.com, hunter22, null)."
    assert scrub_echoes(failing, originals) == "Failing row contains (1, $reproit, $reproit, null)."


def test_a_key_detail_on_a_secret_column_is_scrubbed_without_the_value() -> None:
    # The value came from a subquery, not a parameter: the column name alone decides.
    detail = 'DETAIL:  Key (api_key)=(ak_live_9) is not present in table "keys".'
    assert scrub_echoes(detail, []) == (
        'DETAIL:  Key (api_key)=($reproit) is not present in table "keys".'
    )
    assert scrub_echoes("Key (id)=(42) already exists.", []) == "Key (id)=(42) already exists."


# ------------------------------------------------------------- check's recorded request


def test_check_sends_a_redacted_query_value_and_field_as_stand_ins_of_their_shape() -> None:
    capsule = {
        "operation": "POST /login/$reproit",
        "events": [
            {
                "kind": "start",
                "input": {
                    "query": {
                        "access_token": placeholder("Zq-secret"),
                        "tags": ["a", placeholder("b")],
                        "page": "2",
                        "n": 3,
                    },
                    "body": {"password": placeholder("hunter2")},
                },
            }
        ],
    }
    method, target, body = recorded_request(capsule)
    assert method == "POST"
    assert re.fullmatch(
        r"/login/\$reproit\?access_token=[A-Za-z0-9]{9}&tags=a&tags=[A-Za-z0-9]&page=2&n=3",
        target,
    ), target
    assert body is not None
    assert re.fullmatch(rb'\{"password": "[A-Za-z0-9]{7}"\}', body), body
