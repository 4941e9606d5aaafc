"""The text scrubber's rule table: each rule on its own, their order, and the documented table."""

from __future__ import annotations

from pathlib import Path

import pytest

from reproit_otel.redaction.body import redact_text_body
from reproit_otel.redaction.core import placeholder
from reproit_otel.redaction.sql import redact_sql_values, redacted_originals, scrub_echoes
from reproit_otel.redaction.text import TEXT_RULES, scrub_text

DOCS = Path(__file__).resolve().parents[2] / "docs" / "recording.md"


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("Authorization: Bearer eyJhbGciOi.x.y", "Authorization: Bearer $reproit"),
        ("bearer abc.def rejected", "bearer $reproit rejected"),
        ("Basic YWRhOnB3 refused", "Basic $reproit refused"),
        ("basic checks failed", "basic checks failed"),  # prose, not a scheme
        ("postgresql://admin:pw123@db:5432/app", "postgresql://$reproit@db:5432/app"),
        ("clone https://ghp_tok@github.com/a", "clone https://$reproit@github.com/a"),
        ("{'password': 'hunter2', 'user': 'ada'}", "{'password': '$reproit', 'user': 'ada'}"),
        ('{"api_key": "sk_1", "n": 1}', '{"api_key": "$reproit", "n": 1}'),
        ('{"token":"a\\"b","m":1}', '{"token":"$reproit","m":1}'),
        ("{'pin': 1234}", "{'pin': $reproit}"),
        ("{'password': None}", "{'password': None}"),
        ("password=hunter2 host=db", "password=$reproit host=db"),
        ("User(token='t0k3n', id=7)", "User(token='$reproit', id=7)"),
        ("GET /v1?api_key=k1&page=2 failed", "GET /v1?api_key=$reproit&page=2 failed"),
        ("token: abc123 expired", "token: $reproit expired"),
        ("X-Api-Key: abc123", "X-Api-Key: $reproit"),
        ("error: timeout at 12:30", "error: timeout at 12:30"),
        ("Key (email)=(a@b.c) already exists.", "Key (email)=($reproit) already exists."),
        ("Key (id)=(42) already exists.", "Key (id)=(42) already exists."),
        ("the token is not valid", "the token is not valid"),
    ],
)
def test_each_rule(text: str, scrubbed: str) -> None:
    assert scrub_text(text) == scrubbed


def test_secret_values_come_first_and_scrubbing_twice_changes_nothing() -> None:
    text = "sk_live_12345 and {'password': 'sk_live_12345'}"
    once = scrub_text(text, ["sk_live_12345"])
    assert once == "$reproit and {'password': '$reproit'}"
    assert scrub_text(once, ["sk_live_12345"]) == once


def test_a_row_tuple_binds_its_items_to_the_columns() -> None:
    text = "INSERT INTO users (id, email, password_hash, name) VALUES %s"
    values = [{"$pg": "tuple", "v": [5, "zq@example.com", "Zqhash0001", "ada"]}]
    assert redact_sql_values(text, values) == [
        {
            "$pg": "tuple",
            "v": [5, placeholder("zq@example.com"), placeholder("Zqhash0001"), "ada"],
        }
    ]
    originals = redacted_originals(text, values)
    assert sorted(originals) == ["Zqhash0001", "zq@example.com"]
    echo = "DETAIL:  Failing row contains (5, zq@example.com, Zqhash0001, ada)."
    assert (
        scrub_echoes(echo, originals)
        == "DETAIL:  Failing row contains (5, $reproit, $reproit, ada)."
    )


def test_placeholders_hold_nothing_to_scrub_with() -> None:
    # Why the originals are needed: the redacted values give nothing to look for.
    text = "INSERT INTO users (email, password) VALUES (%s, %s)"
    redacted = redact_sql_values(text, ["zq@example.com", "Zqpass0001"])
    assert redacted_originals(text, redacted) == []
    assert redacted_originals(text, ["zq@example.com", "Zqpass0001"]) == [
        "zq@example.com",
        "Zqpass0001",
    ]


def test_a_multipart_password_part_is_redacted_byte_for_byte_elsewhere() -> None:
    body = (
        '--b1\r\nContent-Disposition: form-data; name="user"\r\n\r\nada\r\n'
        '--b1\r\nContent-Disposition: form-data; name="password"\r\n\r\nhunter2\r\n'
        "--b1--\r\n"
    )
    assert redact_text_body(body, "multipart/form-data; boundary=b1") == body.replace(
        "hunter2", "$reproit"
    )


def test_the_documented_table_lists_every_rule_in_order() -> None:
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("| Rule | Before | After |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    documented = [row.split("|")[1].strip() for row in rows]
    names = ["secret values", *(rule.name for rule in TEXT_RULES)]
    assert [row.split(" (")[0].replace("`", "") for row in documented] == names


def test_lines_reproit_otel_logs_pass_through_the_scrubber() -> None:
    import logging

    from reproit_otel._stderr import scrub_log_records
    from reproit_otel.capture.recording import register_secret_values

    register_secret_values(["Zqlogsecret0001"])
    scrub_log_records()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    for name in ("reproit_otel", "reproit_otel.ingest"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        try:
            logger.warning(
                "cannot reach %s with %s (%s)",
                "postgresql://admin:Zqdsnpw0002@db/app",
                {"api_key": "Zqapikey0003"},
                "Zqlogsecret0001",
            )
        finally:
            logger.removeHandler(handler)
    assert (
        seen
        == ["cannot reach postgresql://$reproit@db/app with {'api_key': '$reproit'} ($reproit)"] * 2
    )
