"""Arguments, results, ``output`` and errors at an invoke boundary (pure parts)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import inspect
import uuid
from decimal import Decimal
from typing import Any

import pytest

from reproit_otel.errors import ConfigurationError, MissingFixtureError, ToolCallError
from reproit_otel.instrumentation._invoke_values import (
    bind_input,
    json_form,
    recorded_error,
    round_trip,
    validate_output,
)


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Client:
    pass


def test_json_form_of_python_values() -> None:
    value = {
        "t": (1, 2),
        "s": {3, 1, 2},
        "b": b"\x00\xff",
        "e": Color.RED,
        "d": datetime.date(2024, 5, 1),
        "dt": datetime.datetime(2024, 5, 1, 12, 30),
        "dec": Decimal("1.10"),
        "u": uuid.UUID(int=1),
        "p": Point(1, 2.5),
        "c": Client(),
        1: "int key",
        None: "none key",
    }
    assert json_form(value) == {
        "t": [1, 2],
        "s": [1, 2, 3],
        "b": {"$bytes": "AP8="},
        "e": "red",
        "d": "2024-05-01",
        "dt": "2024-05-01T12:30:00",
        "dec": "1.10",
        "u": "00000000-0000-0000-0000-000000000001",
        "p": {"x": 1, "y": 2.5},
        "c": {"$object": "Client"},
        "1": "int key",
        "null": "none key",
    }


def test_json_form_of_a_cycle_names_the_type() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert json_form(loop) == [1, {"$object": "list"}]


def fetch(client: Client, folder: str, uid: int = 1, *rest: int, **extra: Any) -> None:
    """A tool signature with every kind of parameter."""


def test_bind_input_names_every_argument_and_applies_defaults() -> None:
    signature = inspect.signature(fetch)
    assert bind_input(signature, (Client(), "INBOX"), {}) == {
        "client": {"$object": "Client"},
        "folder": "INBOX",
        "uid": 1,
        "rest": [],
    }
    assert bind_input(signature, (Client(), "INBOX", 2, 3, 4), {"peek": True}) == {
        "client": {"$object": "Client"},
        "folder": "INBOX",
        "uid": 2,
        "rest": [3, 4],
        "peek": True,
    }
    assert bind_input(signature, (Client(),), {"uid": 1, "folder": "INBOX"}) == bind_input(
        signature, (Client(), "INBOX"), {}
    )


def test_bind_input_rejects_arguments_the_callable_would_reject() -> None:
    with pytest.raises(TypeError):
        bind_input(inspect.signature(fetch), (), {})


def test_bind_input_without_a_signature() -> None:
    assert bind_input(None, (1, "a"), {"k": (2,)}) == {"args": [1, "a"], "k": [2]}


def test_round_trip_is_what_a_replay_returns() -> None:
    value = {"b": (1.0, 2**53 + 1, float("nan")), "a": 1e21}
    assert round_trip(json_form(value)) == {"a": 1e21, "b": [1, 2**53, None]}
    assert list(round_trip({"b": 1, "a": 2})) == ["a", "b"]


def test_validate_output_with_types() -> None:
    assert validate_output(None, [1], "t.o") == [1]
    assert validate_output(list, [1], "t.o") == [1]
    assert validate_output(float, 1, "t.o") == 1.0
    assert isinstance(validate_output(float, 1, "t.o"), float)
    assert validate_output(tuple, [1, 2], "t.o") == (1, 2)
    assert validate_output(Point, {"x": 1, "y": 2.5}, "t.o") == Point(1, 2.5)
    with pytest.raises(TypeError) as error:
        validate_output(int, True, "imap.fetch")
    assert str(error.value) == (
        "boundary imap.fetch returned bool, expected int; fix the callable or the boundary's "
        "output="
    )


def test_validate_output_with_a_callable() -> None:
    def positive(value: Any) -> int:
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"not positive: {value!r}")
        return value

    assert validate_output(positive, 3, "t.o") == 3
    with pytest.raises(ValueError, match="not positive: -1"):
        validate_output(positive, -1, "t.o")


class StatusError(Exception):
    def __init__(self, message: str, status: Any, code: Any = None) -> None:
        super().__init__(message)
        self.status = status
        if code is not None:
            self.code = code


def _fields(error: BaseException) -> dict[str, Any] | None:
    recorded = recorded_error(error)
    if recorded is None:
        return None
    return {name: getattr(recorded, name) for name in recorded.__slots__}


def test_errors_with_a_status_are_recorded() -> None:
    try:
        raise StatusError("no such mailbox", 404) from StatusError("NO [NONEXISTENT]", 400)
    except StatusError as error:
        assert _fields(error) == {
            "code": "StatusError",
            "status": 404,
            "message": "no such mailbox",
            "cause_message": "NO [NONEXISTENT]",
            "cause_status": 400,
        }
    assert _fields(StatusError("x", 503, code="Unavailable")) == {
        "code": "Unavailable",
        "status": 503,
        "message": "x",
        "cause_message": None,
        "cause_status": None,
    }


def test_tool_call_errors_are_recorded_with_their_own_fields() -> None:
    error = ToolCallError("quota", code="RateLimited", status=429, cause_message="slow down")
    assert _fields(error) == {
        "code": "RateLimited",
        "status": 429,
        "message": "quota",
        "cause_message": "slow down",
        "cause_status": None,
    }


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("connection reset"),
        StatusError("not http", 42),
        StatusError("not a number", "404"),
        StatusError("a bool", True),
        ConfigurationError("REPROIT_TOOLS=maybe"),
        MissingFixtureError("no fixture"),
        KeyboardInterrupt(),
    ],
)
def test_errors_that_say_nothing_are_not_recorded(error: BaseException) -> None:
    assert recorded_error(error) is None
