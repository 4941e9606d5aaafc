"""psycopg2 replay's fail-closed paths, spans and completeness, against the real server."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import uuid
from typing import Any

import psycopg2
import psycopg2.extras
import pytest
from psycopg2 import sql

from reproit_otel.errors import DivergedError
from reproit_otel.instrumentation import _pg_offline
from reproit_otel.wire.standins import standin, text_standins
from tests.integration.pg_support import record, replay

pytestmark = pytest.mark.postgres


def _select(text: str, values: Any = None) -> Any:
    def app(connect: Any) -> Any:
        with connect().cursor() as cur:
            cur.execute(text, values)
            return cur.fetchall()

    return app


def test_a_different_statement_diverges_with_the_exact_line(
    postgres_dsn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    recorded = record(postgres_dsn, _select("SELECT %s::int", (1,)))
    with pytest.raises(DivergedError) as raised:
        replay(recorded.capsule(), _select("SELECT 2"))
    line = (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT 2"},'
        '"expected":{"text":"SELECT %s::int","values":[1]},"consumed":0,"total":1}'
    )
    assert str(raised.value) == "reproit: pg call diverged from the capture"
    assert raised.value.line == line
    assert capfd.readouterr().err == line + "\n"


def test_different_values_diverge(postgres_dsn: str, capfd: pytest.CaptureFixture[str]) -> None:
    recorded = record(postgres_dsn, _select("SELECT %s::numeric", (decimal.Decimal("1.5"),)))
    with pytest.raises(DivergedError):
        replay(recorded.capsule(), _select("SELECT %s::numeric", (decimal.Decimal("1.50"),)))
    assert capfd.readouterr().err == (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT %s::numeric",'
        '"values":[{"$pg":"decimal","v":"1.50"}]},"expected":{"text":"SELECT %s::numeric",'
        '"values":[{"$pg":"decimal","v":"1.5"}]},"consumed":0,"total":1}\n'
    )


def test_more_than_64_rows_are_truncated_and_replay_fails_closed(
    postgres_dsn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    app = _select("SELECT g FROM generate_series(1, 100) g")
    recorded = record(postgres_dsn, app)
    assert len(recorded.result) == 100
    response = recorded.exchanges[0]["response"]
    assert response["rows"] == [{"g": n} for n in range(1, 65)]
    assert (response["rowCount"], response["truncated"]) == (100, True)
    with pytest.raises(DivergedError) as raised:
        replay(recorded.capsule(), app)
    line = (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":'
        '{"text":"SELECT g FROM generate_series(1, 100) g","truncated":true},'
        '"expected":null,"consumed":1,"total":1}'
    )
    assert raised.value.line == line
    assert capfd.readouterr().err == line + "\n"


def test_exactly_64_rows_are_served(postgres_dsn: str) -> None:
    app = _select("SELECT g FROM generate_series(1, 64) g")
    recorded = record(postgres_dsn, app)
    assert "truncated" not in recorded.exchanges[0]["response"]
    assert replay(recorded.capsule(), app).result == recorded.result


def test_calls_past_the_recording_diverge(postgres_dsn: str) -> None:
    recorded = record(postgres_dsn, _select("SELECT 2"))

    def twice(connect: Any) -> Any:
        return _select("SELECT 2")(connect), _select("SELECT 2")(connect)

    with pytest.raises(DivergedError) as raised:
        replay(recorded.capsule(), twice)
    assert raised.value.line == (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT 2"},"expected":null,'
        '"consumed":1,"total":1}'
    )


@pytest.mark.parametrize("otel_first", [False, True])
def test_exchanges_sit_inside_the_database_spans(postgres_dsn: str, otel_first: bool) -> None:
    def app(connect: Any) -> Any:
        conn = connect(cursor_factory=psycopg2.extras.RealDictCursor)
        with conn.cursor() as cur:
            cur.execute("SELECT 1 AS one")
            cur.executemany("SELECT %s", [(1,), (2,)])
            cur.callproc("abs", (-3,))
            return cur.fetchall()

    recorded = record(postgres_dsn, app, otel_first=otel_first)
    assert recorded.returned["effectsComplete"] is True
    assert recorded.spans == ["SELECT", "SELECT", "abs", "GET /orders"]
    replayed = replay(recorded.capsule(), app)
    assert replayed.spans == ["SELECT", "SELECT", "abs"]
    assert replayed.result == recorded.result == [{"abs": 3}]


def test_copy_makes_the_operation_incomplete_and_cannot_be_replayed(postgres_dsn: str) -> None:
    def app(connect: Any) -> Any:
        with connect().cursor() as cur:
            out = io.StringIO()
            cur.copy_expert("COPY (SELECT 1) TO STDOUT", out)
            return out.getvalue()

    recorded = record(postgres_dsn, app)
    assert recorded.result == "1\n"
    assert recorded.exchanges == []
    assert recorded.returned["effectsComplete"] is False
    with pytest.raises(DivergedError) as raised:
        replay(recorded.capsule(), app)
    assert raised.value.line == (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"COPY (SELECT 1) TO STDOUT"},'
        '"expected":null,"consumed":0,"total":0}'
    )


def test_nothing_records_outside_an_operation(postgres_dsn: str) -> None:
    from reproit_otel.instrumentation.psycopg2 import install_recorder, uninstall_recorder

    install_recorder()
    try:
        conn = psycopg2.connect(postgres_dsn)
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchall() == [(1,)]
        conn.close()
    finally:
        uninstall_recorder()


MOGRIFY_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -12,
    2**70,
    1.5,
    float("nan"),
    float("inf"),
    decimal.Decimal("1.50"),
    "plain",
    "it's",
    "back\\slash",
    "naïve 😀",
    "",
    b"\x00\x01\xff",
    bytearray(b"ab"),
    memoryview(b"cd"),
    dt.date(2024, 1, 31),
    dt.datetime(2024, 1, 31, 10, 11, 12, 13),
    dt.datetime(2024, 1, 31, 10, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    dt.time(10, 11),
    dt.timedelta(days=1, seconds=5, microseconds=7),
    uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    [1, 2, None],
    [],
    [["a", "b"], ["c", "d"]],
    ["x'y", "z"],
    (1, "two", None),
    psycopg2.extras.Json({"a": ["é", 1]}),
    psycopg2.extras.NumericRange(1, 5),
]


def test_offline_mogrify_matches_psycopg2(postgres_dsn: str) -> None:
    psycopg2.extras.register_uuid()
    conn = psycopg2.connect(postgres_dsn)
    try:
        with conn.cursor() as cur:
            for value in MOGRIFY_VALUES:
                assert _pg_offline.mogrify("SELECT %s", (value,)) == cur.mogrify(
                    "SELECT %s", (value,)
                ), value
            assert _pg_offline.mogrify("%(a)s %(a)s %%", {"a": "q"}) == cur.mogrify(
                "%(a)s %(a)s %%", {"a": "q"}
            )
            assert _pg_offline.mogrify("SELECT 100%") == cur.mogrify("SELECT 100%")
            composed = sql.SQL("SELECT {} FROM {}").format(
                sql.Literal("it's"), sql.Identifier("sch", 'we"ird')
            )
            assert _pg_offline.render(composed) == composed.as_string(cur)
    finally:
        conn.close()


def test_secrets_are_redacted_at_capture_and_still_match_in_replay(postgres_dsn: str) -> None:
    from reproit_otel.capture.recording import register_secret_values

    register_secret_values(["pg-secret-4711"])

    def app(password: str) -> Any:
        def run(connect: Any) -> Any:
            with connect().cursor() as cur:
                cur.execute(
                    "SELECT 'pg-secret-4711' AS motto, 'a@example.com' AS email,"
                    " %(password)s = 'hunter2' AS ok",
                    {"password": password},
                )
                return cur.fetchall()

        return run

    recorded = record(postgres_dsn, app("hunter2"))
    placeholder = {"$reproit": {"redacted": True, "type": "string", "length": 7}}
    assert recorded.exchanges[0]["request"] == {
        "text": "SELECT '$reproit' AS motto, 'a@example.com' AS email,"
        " %(password)s = 'hunter2' AS ok",
        "values": {"password": placeholder},
    }
    assert recorded.exchanges[0]["response"]["rows"] == [
        {
            "motto": "$reproit",
            "email": {"$reproit": {"redacted": True, "type": "string", "length": 13}},
            "ok": True,
        }
    ]
    replayed = replay(recorded.capsule(), app("another password"))
    # The rows are served with stand-ins: a string of the placeholder's length, never the
    # placeholder object or the secret.
    email = standin({"redacted": True, "type": "string", "length": 13})
    assert replayed.result == [(text_standins("$reproit"), email, True)]
    assert len(email) == 13 and "pg-secret-4711" not in replayed.result[0][0]
