"""Serving psycopg2 statements from the active replay session.

:func:`serve` answers one statement of a stub connection: a statement the recording holds an
unconsumed data exchange for by that exchange (strictly, whatever its text), a
connection-scope statement it holds none for by the ambient rule, a statement asked before the
recorded request by the before-request rule, and diverges on any other (see
:mod:`._pg_replay` for the rules).
A recorded error comes back as the same psycopg2 class (:func:`rebuild_error`); a statement the
recording does not hold, or a truncated result, raises
:class:`~reproit_otel.errors.DivergedError` after its ``REPROIT:DIVERGENCE`` line was written.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Mapping
from typing import Any

from reproit_otel.capture.recording import registered_secret_values
from reproit_otel.errors import DivergedError
from reproit_otel.instrumentation._exceptions import allowed_exception_classes
from reproit_otel.instrumentation._pg_common import TRUNCATED_MESSAGE, effect_key
from reproit_otel.redaction.core import scrub_value
from reproit_otel.replay.session import active_session, report_divergence
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.replay import PG_DIVERGED_MESSAGE, ReplaySession, pg_probe
from reproit_otel.wire.statements import default_response, setting_change, statement_scope

__all__ = ["diverge", "rebuild_error", "serve", "set_secret_values"]

_secret_values: tuple[str, ...] = ()


def set_secret_values(values: tuple[str, ...]) -> None:
    """The configured secret values to scrub from live statements before matching (D8)."""
    global _secret_values
    _secret_values = values


def _live_probe(session: ReplaySession, probe: dict[str, Any]) -> dict[str, Any]:
    # D8: the capture had configured secret values replaced in every recorded string (text
    # and values alike); the live call gets the same treatment, then the session's own.
    scrubbed: dict[str, Any] = scrub_value(probe, _secret_values + registered_secret_values())
    return session.redact_probe("pg", scrubbed)


def _session() -> ReplaySession:
    session = active_session()
    if session is None:
        raise DivergedError(
            "reproit: psycopg2 is in replay mode but no replay session is active; "
            "set REPROIT_REPLAY to a capsule or uninstrument the psycopg2 replay"
        )
    return session


def _report(session: ReplaySession, line: str | None) -> None:
    if line is not None and session.on_divergence is not report_divergence:
        report_divergence(line)


def diverge(probe: dict[str, Any], message: str = PG_DIVERGED_MESSAGE) -> DivergedError:
    """Report ``probe`` as a divergence and return the error to raise (a call replay refuses)."""
    session = _session()
    probe = _live_probe(session, probe)
    line = session.diverge("pg", probe)
    _report(session, line)
    return DivergedError(message, line=line)


def serve(
    text: str,
    values: Any,
    parameters: dict[str, str] | None = None,
    rebuild: Callable[[Mapping[str, Any]], BaseException] | None = None,
) -> Mapping[str, Any]:
    """The recorded response for a statement, or raise as the recording says.

    Any statement asked before the recorded request is answered by the before-request rule
    (a connection-scope one by the ambient rule); from the request on, a statement the
    recording holds an unconsumed exchange for is matched strictly, and a connection-scope
    statement it holds none for is answered by the ambient rule (both in the module
    docstring);
    ``parameters`` are the asking connection's server parameters (updated by ``SET``);
    ``rebuild`` turns a recorded ``error`` into the driver's exception (default: psycopg2's,
    :func:`rebuild_error`).
    """
    rebuild = rebuild_error if rebuild is None else rebuild
    session = _session()
    probe = _live_probe(session, pg_probe(text, UNSET if values is None else values))
    connection_scope = statement_scope(text, probe.get("values")) is not None
    if session.usage.awaiting:
        if connection_scope:
            return _ambient(session, probe, text, values, parameters, rebuild=rebuild)
        return _before_request(session, probe, text, values, parameters)
    # A recorded data exchange with the statement's text is matched strictly, whatever the
    # text: the connection-scope rule answers only what the recording has no exchange for.
    if connection_scope and not session.has_candidate("pg", probe):
        return _ambient(session, probe, text, values, parameters, rebuild=rebuild)
    exchange, line = session.match_with_line("pg", probe)
    if exchange is None:
        _report(session, line)
        raise DivergedError(PG_DIVERGED_MESSAGE, line=line)
    response = _response_of(exchange)
    if response.get("truncated") is True:
        line = session.diverge("pg", {**probe, "truncated": True})
        _report(session, line)
        raise DivergedError(TRUNCATED_MESSAGE, line=line)
    error = response.get("error")
    if error:
        raise rebuild(error if isinstance(error, Mapping) else {})
    return response


def _response_of(exchange: Any) -> Mapping[str, Any]:
    response = exchange.get("response") if isinstance(exchange, Mapping) else None
    return response if isinstance(response, Mapping) else {}


def _ambient(
    session: ReplaySession,
    probe: dict[str, Any],
    text: str,
    values: Any,
    parameters: dict[str, str] | None,
    *,
    rebuild: Callable[[Mapping[str, Any]], BaseException],
) -> Mapping[str, Any]:
    exchange = session.ambient(probe)
    response = _response_of(exchange) if exchange is not None else None
    if parameters is not None:
        change = setting_change(text, values)
        if change is not None:
            parameters[change[0]] = change[1]
    if response is None or response.get("truncated") is True:
        return default_response(text, values, parameters)
    error = response.get("error")
    if error:
        raise rebuild(error if isinstance(error, Mapping) else {})
    return response


def _before_request(
    session: ReplaySession,
    probe: dict[str, Any],
    text: str,
    values: Any,
    parameters: dict[str, str] | None,
) -> Mapping[str, Any]:
    # Boot-time calls (migration checks, warm-up) must neither consume the request's
    # exchanges nor fail the boot: a recorded answer is read without consuming it, and a
    # recorded error or truncated result gives way to the documented empty answer.
    session.note_before_request({"protocol": "pg", "text": effect_key(text)})
    response = _response_of(session.peek("pg", probe))
    if response and not response.get("error") and response.get("truncated") is not True:
        return response
    return default_response(text, values, parameters)


@functools.cache
def _allowed() -> dict[str, type[BaseException]]:
    # Only these classes are ever instantiated from a capsule. Imported on first use: psycopg
    # 3 replay serves through this module where psycopg2 may not be installed.
    import psycopg2
    from psycopg2 import errors

    return allowed_exception_classes(builtins, psycopg2, errors)


def rebuild_error(fields: Mapping[str, Any]) -> BaseException:
    """The exception a recorded ``error`` stands for, with its ``pgcode`` and ``pgerror``."""
    import psycopg2
    from psycopg2 import errors as _errors

    message = fields.get("message")
    message = "recorded pg error" if message is None else str(message)
    code = fields.get("code")
    cls: type[BaseException] | None = _allowed().get(str(fields.get("type")))
    if cls is None and isinstance(code, str) and code:
        try:
            cls = _errors.lookup(code)
        except KeyError:
            cls = None
    if cls is None:
        cls = psycopg2.DatabaseError
    error = cls(message)
    if isinstance(error, psycopg2.Error):
        pgerror = fields.get("pgerror")
        restorable: Any = error  # the C Error sets pgcode/pgerror only through __setstate__
        restorable.__setstate__(
            {
                "pgcode": code if isinstance(code, str) else None,
                "pgerror": pgerror if isinstance(pgerror, str) else None,
            }
        )
    return error
