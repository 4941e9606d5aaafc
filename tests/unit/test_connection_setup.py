"""The connection ``setup`` rule, applied where a capsule is loaded and where a batch arrives.

One rule (``wire/connection_setup.py``) decides whether the answers a warm connection carried
into a capture can be served: ``validate_capsule`` (``check``, the replayed process, the
artifact route), a :class:`ReplaySession` made from a parsed capsule, and the batch validator
the ingest runs (rule ``connection-setup``) refuse the same capsules with the same field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from reproit_otel.errors import CapsuleError
from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_batch
from reproit_otel.wire.capsule import validate_capsule
from reproit_otel.wire.connection_setup import setup_problem
from reproit_otel.wire.replay import ReplaySession
from reproit_otel.wire.trace import BackendTrace, TraceContext
from reproit_otel.wire.validate import validate_capture_batch

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OPERATION = "GET /stock"
SELECT = "SELECT qty FROM stock WHERE sku = %s"


def _column(name: str, oid: int) -> list[Any]:
    return [name, oid, None, None, None, None, None, None, None]


def _one(name: str, value: Any, command: str = "SELECT 1") -> dict[str, Any]:
    return {
        "command": command,
        "rowCount": 1,
        "rows": [{name: value}],
        "columns": [_column(name, 25)],
    }


# What SQLAlchemy's dialect asks a new connection, as a warm connection carries it.
CARRIED: list[dict[str, Any]] = [
    {
        "protocol": "pg",
        "request": {"text": "SELECT t.oid, typarray FROM pg_type t WHERE typname = 'hstore'"},
        "response": {
            "command": "SELECT",
            "rowCount": 6,
            "rows": [{"oid": 16000 + n, "typarray": 16100 + n} for n in range(4)],
            "truncated": True,
            "columns": [_column("oid", 26), _column("typarray", 26)],
        },
    },
    {
        "protocol": "pg",
        "request": {"text": "select pg_catalog.version()"},
        "response": _one("version", "PostgreSQL 16.4 on x86_64-pc-linux-gnu, 64-bit"),
    },
    {
        "protocol": "pg",
        "request": {"text": "select current_schema()"},
        "response": _one("current_schema", "public"),
    },
    {
        "protocol": "pg",
        "request": {"text": "SELECT set_config('TimeZone', %s, false)", "values": ["Asia/Tokyo"]},
        "response": _one("set_config", "Asia/Tokyo"),
    },
    {
        "protocol": "pg",
        "request": {"text": "show standard_conforming_strings"},
        "response": _one("standard_conforming_strings", "on", "SHOW"),
    },
]


def _pg_exchange(setup: Any) -> dict[str, Any]:
    return {
        "protocol": "pg",
        "request": {"text": SELECT, "values": ["widget"]},
        "response": {
            "command": "SELECT",
            "rowCount": 1,
            "rows": [{"qty": 0}],
            "columns": [_column("qty", 23)],
        },
        "setup": setup,
    }


def capsule(setup: Any) -> dict[str, Any]:
    common = {"traceId": TRACE, "spanId": "00f067aa0ba902b7", "operation": OPERATION}
    return {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": OPERATION,
        "oracle": "backend-server-error",
        "events": [
            {**common, "kind": "start", "sequence": 0, "input": {}},
            {
                **common,
                "kind": "effect",
                "sequence": 1,
                "effect": "read",
                "resource": "pg",
                "exchange": _pg_exchange(setup),
            },
            {**common, "kind": "return", "sequence": 2, "status": 500},
        ],
    }


def batch(setup: Any) -> dict[str, Any]:
    context = TraceContext(
        trace_id="cap-1-1", capture_envelope=True, replay_seed="00ff00ff00ff00ff"
    )
    trace = BackendTrace.begin(context, OPERATION, input={}, wall_ms=lambda: 1_700_000_000_000)
    trace.effect("read", resource="pg", key=SELECT, exchange=_pg_exchange(setup))
    trace.finish({"error": "out of stock"}, 500, False, True)
    events = trace.events
    return build_capture_batch(
        {"operation": OPERATION, "status": 500, "events": events},
        config=CaptureSettings(project_id="stock-api"),
        environment=CaptureEnvironment(
            now_ms=1_700_000_000_500,
            batch_number=1,
            runtime="python 3.11.0",
            os="linux",
            arch="x64",
            tz="UTC",
        ),
    )


def _edited(edit: Callable[[list[Any]], Any]) -> Any:
    setup = copy.deepcopy(CARRIED)
    changed = edit(setup)
    return setup if changed is None else changed


def _set(path: tuple[Any, ...], value: Any) -> Callable[[list[Any]], None]:
    def edit(setup: list[Any]) -> None:
        target: Any = setup
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return edit


def _drop(path: tuple[Any, ...]) -> Callable[[list[Any]], None]:
    def edit(setup: list[Any]) -> None:
        target: Any = setup
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return edit


HOSTILE = [
    pytest.param(lambda s: {"0": s[0]}, "setup", "must be an array of 1 to 8 answers", id="object"),
    pytest.param(lambda s: [], "setup", "must be an array of 1 to 8 answers", id="empty"),
    pytest.param(
        lambda s: s + [{**s[4], "request": {"text": f"SHOW p{n}"}} for n in range(4)],
        "setup",
        "must be an array of 1 to 8 answers",
        id="too-many",
    ),
    pytest.param(
        _set((1,), "select version()"),
        "setup[1]",
        "must be an object {protocol, request, response}",
        id="not-an-object",
    ),
    pytest.param(
        _set((1, "scope"), "connection"),
        "setup[1]",
        "must be exactly {protocol: 'pg', request, response}",
        id="extra-member",
    ),
    pytest.param(_set((1, "protocol"), "http"), "setup[1].protocol", "must be 'pg'", id="http"),
    pytest.param(
        _set((2, "request", "text"), "DELETE FROM stock"),
        "setup[2].request.text",
        "is not a connection-scope setting or introspection statement (SET, SHOW, set_config, "
        "current_setting, version(), current_schema(), a pg_type lookup); a connection never "
        "carries the answer of any other statement",
        id="data-statement",
    ),
    pytest.param(
        _set((2, "request", "text"), "BEGIN"),
        "setup[2].request.text",
        "is not a connection-scope setting or introspection statement (SET, SHOW, set_config, "
        "current_setting, version(), current_schema(), a pg_type lookup); a connection never "
        "carries the answer of any other statement",
        id="transaction",
    ),
    pytest.param(
        _set((2, "request", "text"), "  "),
        "setup[2].request.text",
        "must be a non-empty statement text",
        id="blank-text",
    ),
    pytest.param(
        _set((3, "request", "values"), "Asia/Tokyo"),
        "setup[3].request.values",
        "must be an array or an object when present",
        id="values-text",
    ),
    pytest.param(
        lambda s: [*s, {**s[2], "request": {"text": "select  current_schema() ;"}}],
        "setup[5].request.text",
        "answers the same statement as setup[2]",
        id="duplicate",
    ),
    pytest.param(
        _set((1, "response"), {"error": {"message": "boom", "code": "XX000"}}),
        "setup[1].response.error",
        "a setup answer is a successful one; an error is never carried",
        id="error",
    ),
    pytest.param(
        _set((1, "response", "body"), "x"),
        "setup[1].response",
        "has field(s) body a pg answer cannot carry",
        id="unknown-field",
    ),
    pytest.param(
        _set((1, "response", "rowCount"), -1),
        "setup[1].response.rowCount",
        "must be an integer of at least 0",
        id="negative-count",
    ),
    pytest.param(
        _set((1, "response", "rowCount"), True),
        "setup[1].response.rowCount",
        "must be an integer of at least 0",
        id="boolean-count",
    ),
    pytest.param(
        _set((1, "response", "rows"), {"version": "x"}),
        "setup[1].response.rows",
        "must be an array of row objects",
        id="rows-object",
    ),
    pytest.param(
        _set((0, "response", "rows"), [{"oid": n, "typarray": n} for n in range(5)]),
        "setup[0].response.rows",
        "holds 5 rows; a setup answer keeps 4",
        id="too-many-rows",
    ),
    pytest.param(
        _drop((0, "response", "truncated")),
        "setup[0].response.rows",
        "holds 4 of rowCount 6 rows without truncated: true",
        id="cut-without-truncated",
    ),
    pytest.param(
        _set((1, "response", "truncated"), True),
        "setup[1].response.rows",
        "holds 1 of rowCount 1 rows but says truncated",
        id="truncated-whole",
    ),
    pytest.param(
        _set((1, "response", "truncated"), False),
        "setup[1].response.truncated",
        "must be true when present",
        id="truncated-false",
    ),
    pytest.param(
        _set((1, "response", "command"), 1),
        "setup[1].response.command",
        "must be text or null",
        id="command-number",
    ),
    pytest.param(
        _set((1, "response", "columns"), "version"),
        "setup[1].response.columns",
        "must be an array or null",
        id="columns-text",
    ),
    pytest.param(
        _set((4, "response", "rows"), [{"standard_conforming_strings": "on", "x": "y"}]),
        "setup[4].response.rows",
        "a one-value statement answers at most one row of one column",
        id="two-columns",
    ),
    pytest.param(
        _set((1, "response", "rows"), [{"version": ["PostgreSQL", 16]}]),
        "setup[1].response.rows[0]",
        "must hold text of at most 4096 characters without control characters, null or a "
        "redaction placeholder",
        id="version-not-text",
    ),
    pytest.param(
        _set((4, "response", "rows"), [{"standard_conforming_strings": "on\x00off"}]),
        "setup[4].response.rows[0]",
        "must hold text of at most 4096 characters without control characters, null or a "
        "redaction placeholder",
        id="nul-in-show",
    ),
    pytest.param(
        _set((3, "request", "values"), ["UTC\x00; DROP TABLE stock"]),
        "setup[3].response",
        "tells the server parameter 'TimeZone' a value replay cannot report (text of at most "
        "4096 characters without control characters)",
        id="nul-in-set-config",
    ),
]


def test_a_captured_setup_is_accepted_everywhere() -> None:
    document = capsule(CARRIED)
    assert validate_capsule(copy.deepcopy(document)) == document
    session = ReplaySession(document)
    assert session.recorded_parameters() == {
        "TimeZone": "Asia/Tokyo",
        "standard_conforming_strings": "on",
    }
    assert [p for p in validate_capture_batch(batch(CARRIED)) if p.rule == "connection-setup"] == []


def test_an_exchange_without_setup_has_no_setup_problem() -> None:
    exchange = _pg_exchange(None)
    del exchange["setup"]
    assert setup_problem(exchange) is None


def test_setup_on_an_http_exchange_is_refused() -> None:
    exchange = {"protocol": "http", "request": {}, "response": {}, "setup": CARRIED}
    assert setup_problem(exchange) == (
        "setup",
        "only a pg exchange carries connection setup answers",
    )


@pytest.mark.parametrize(("edit", "field", "message"), HOSTILE)
def test_a_malformed_or_inconsistent_setup_is_refused_where_a_capsule_is_loaded(
    edit: Callable[[list[Any]], Any], field: str, message: str
) -> None:
    document = capsule(_edited(edit))
    expected = f"events[1].exchange.{field} {message}; replay cannot serve this connection"
    for strict in (True, False):
        with pytest.raises(CapsuleError) as refused:
            validate_capsule(copy.deepcopy(document), strict=strict)
        assert str(refused.value) == expected
    with pytest.raises(CapsuleError) as refused:
        ReplaySession(document)
    assert str(refused.value) == expected


@pytest.mark.parametrize(("edit", "field", "message"), HOSTILE)
def test_a_malformed_or_inconsistent_setup_is_refused_where_a_batch_arrives(
    edit: Callable[[list[Any]], Any], field: str, message: str
) -> None:
    built = batch(_edited(edit))
    [index] = [
        n
        for n, entry in enumerate(built["events"])
        if entry["event"].get("value", {}).get("value", {}).get("exchange")
    ]
    problems = validate_capture_batch(built, portable=False)
    assert [(p.rule, p.field, p.message) for p in problems] == [
        (
            "connection-setup",
            f"batch.events[{index}].event.value.value.exchange.{field}",
            message,
        )
    ]
