"""The ``command`` of a pg exchange as the reference records it, and the psycopg2 status and
row count replay shows from it (PROTOCOL 4.4; ``instrumentation/_pg_common.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from reproit_otel.instrumentation._pg_common import command_word, driver_rowcount, status_message


@pytest.mark.parametrize(
    ("status", "word"),
    [
        ("SELECT 3", "SELECT"),
        ("INSERT 0 1", "INSERT"),
        ("UPDATE 0", "UPDATE"),
        ("CREATE TABLE", "CREATE"),
        ("DECLARE CURSOR", "DECLARE"),
        ("BEGIN", "BEGIN"),
        ("", None),
        ("42", None),
        (None, None),
    ],
)
def test_the_command_is_the_leading_word_of_the_status(status: Any, word: str | None) -> None:
    assert command_word(status) == word


@pytest.mark.parametrize(
    ("command", "count", "status"),
    [
        ("SELECT", 3, "SELECT 3"),
        ("INSERT", 1, "INSERT 0 1"),
        ("DELETE", 0, "DELETE 0"),
        ("MOVE", 2, "MOVE 2"),
        ("CREATE", 0, "CREATE"),  # a capture without `status` (another SDK): the word alone
        ("INSERT 0 1", 3, "INSERT 0 1"),  # a whole status (older capsules, defaults) as is
        (None, 0, None),
        ("SELECT", None, "SELECT"),
    ],
)
def test_replay_rebuilds_the_status_from_the_word_and_the_count(
    command: Any, count: Any, status: Any
) -> None:
    assert status_message(command, count) == status


@pytest.mark.parametrize(
    ("command", "count", "has_result", "rowcount"),
    [
        ("SELECT", 3, True, 3),
        ("SHOW", 1, True, 1),
        ("UPDATE", 2, False, 2),
        ("INSERT", 3, False, 3),
        ("CREATE", 0, False, -1),  # psycopg2 knows no count for DDL
        ("BEGIN", 0, False, -1),
        ("CREATE TABLE", -1, False, -1),  # an older capsule's -1 stays -1
        ("SELECT", None, True, -1),
    ],
)
def test_replay_shows_psycopg2s_rowcount(
    command: Any, count: Any, has_result: bool, rowcount: int
) -> None:
    assert driver_rowcount(command, count, has_result) == rowcount
