"""The invoke boundary: record and replay any dependency call as an outcome.

``requests`` and ``psycopg2`` are recorded at their transport; a service also talks IMAP,
gRPC or Redis, or runs a local model. Mark such a call at its *invoke boundary* and
reproit-otel records what was asked and what came back, and replays it without running it::

    import reproit_otel

    @reproit_otel.boundary("imap", "fetch")
    def fetch(folder: str, uid: int) -> dict[str, str]:
        ...                                        # talks to the mail server

    @reproit_otel.boundary("embed", "vector", output=list)
    async def embed(text: str) -> list[float]:
        ...

    with reproit_otel.boundary("redis", "get") as call:   # around code you do not own
        value = call.run(client.get, "session:42")

What each call does:

* It produces an OpenTelemetry CLIENT span ``"<tool> <op>"`` (attributes ``reproit.tool``,
  ``reproit.op``), so the span processor counts it for ``effectsComplete`` (decision D4); a
  library span inside it (a Redis client's own span) is covered by the boundary's exchange.
* Under capture it records an exchange ``{"protocol": "invoke", "request": {tool, op,
  input}, "response": {ok: true, data} | {ok: false, error: {code, status, message,
  cause}}}`` as a ``call`` effect with ``resource`` = tool and ``key`` = op, bounded and
  redacted like every exchange (:mod:`reproit_otel.wire.invoke`). ``input`` is the call's
  arguments by parameter name, in their JSON form (:mod:`._invoke_values`).
* What is recorded: a result, and a failure only when it carries an HTTP-style status (a
  ``status`` attribute 100..599, or a :class:`~reproit_otel.ToolCallError`). Any other
  exception says nothing about why it failed: it is re-raised unchanged and not recorded (the
  operation's effects become incomplete, and a replay of that input is a miss). reproit-otel's
  own refusals (configuration, replay misses) are never recorded.
* Recording happens after the call returned: a failure to record is logged, never taken for
  the call's failure. The value returned is the JSON round trip of the result, i.e. exactly
  what a replay returns; ``output`` (a type, a dataclass, a pydantic model or a validating
  callable) checks or builds the value, live and replayed alike. A result with no JSON form
  is returned as it is and not recorded.

Replay (a ``REPROIT_REPLAY`` capsule is active, or ``REPROIT_TOOLS=replay`` with fixtures,
see :mod:`reproit_otel.fixtures`): the callable is not run, so no secret, runner or network
is needed. A recorded failure is raised as :class:`~reproit_otel.ToolCallError` (code, status,
message, the cause's message and status). A call the recording does not hold raises
:class:`~reproit_otel.MissingFixtureError` after a ``REPROIT:DIVERGENCE`` line with
``"protocol":"invoke"`` went to standard error; it is never a live call. Serving never
suspends, so an async replayed call completes without yielding to the event loop and no
cancellation or timeout can interrupt it.

Spans go to the global tracer provider unless :func:`use_tracer_provider` names another.
Every ``boundary(tool, op)`` is registered (:func:`declared_boundaries`) for
``reproit-otel doctor``.

Locks. ``_declared_lock`` guards the registry of declared boundaries (a dict update when a
boundary is declared, a sorted copy for ``doctor``); nothing under it logs or calls out. A
live call takes no lock of this module: its exchange goes to the pipeline through
:class:`~reproit_otel.capture.recording.ExchangeRecorder` (built and redacted before the pipeline's
locks, see ``operation.py``), a replayed one takes the replay session's lock to consume its
recorded exchange (``wire/replay.py``). An async call whose coroutine is closed before it
finished (a dropped task, possibly closed by the collector's finalizer) hands the "did not
finish" report over instead of calling the pipeline on that thread.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, cast

from opentelemetry import trace as otel_trace
from opentelemetry.trace import Span, SpanKind, Tracer

from reproit_otel import secrets as reproit_secrets
from reproit_otel._guard import guarded
from reproit_otel.capture.recording import (
    ExchangeRecorder,
    hand_over,
    registered_secret_values,
    start_exchange,
)
from reproit_otel.config import REPROIT_SECRET_VALUES, SETTINGS
from reproit_otel.errors import ConfigurationError, MissingFixtureError, ToolCallError
from reproit_otel.fixtures import (
    FixtureSettings,
    ToolsMode,
    fixture_document,
    fixture_name,
    read_fixture,
    scan_fixtures,
    tools_settings,
    write_fixture,
)
from reproit_otel.instrumentation._invoke_values import (
    RecordedError,
    bind_input,
    json_form,
    recorded_error,
    round_trip,
    validate_output,
)
from reproit_otel.redaction.core import redact, scrub_keys_and_values, scrub_secret_values
from reproit_otel.replay.session import active_session, report_divergence
from reproit_otel.wire.invoke import (
    INVOKE_PROTOCOL,
    Outcome,
    failure_response,
    fixture_key,
    invoke_request,
    read_outcome,
    success_response,
)
from reproit_otel.wire.replay import ReplaySession, divergence_line, divergence_report
from reproit_otel.wire.standins import served_response

__all__ = [
    "Boundary",
    "BoundaryCall",
    "DeclaredBoundary",
    "Output",
    "boundary",
    "capsule_holds",
    "capsule_outcome",
    "declared_boundaries",
    "finish_outcome",
    "use_tracer_provider",
]

_log = logging.getLogger("reproit_otel")

TRACER_NAME = "reproit_otel.boundary"
LIBRARY = "invoke"

Output = type | Callable[[Any], Any] | None
"""What ``output=`` accepts: a type to check or build, or a validating callable."""

P = ParamSpec("P")
R = TypeVar("R")

_tracer_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Create boundary spans with ``provider`` (``None``: the global tracer provider)."""
    global _tracer_provider
    _tracer_provider = provider


def _tracer() -> Tracer:
    return otel_trace.get_tracer(TRACER_NAME, tracer_provider=_tracer_provider)


# -- the registry doctor reads -----------------------------------------------------------------


@dataclass(frozen=True)
class DeclaredBoundary:
    """A ``boundary(tool, op)`` declared somewhere in the application."""

    tool: str
    op: str
    where: str
    """``module:qualname`` of the decorated callable, or the module that created it."""


_declared: dict[tuple[str, str, str], DeclaredBoundary] = {}
_declared_lock = threading.Lock()


def _declare(tool: str, op: str, where: str, *, replaces: str | None = None) -> None:
    with _declared_lock:
        if replaces is not None:
            _declared.pop((tool, op, replaces), None)
        _declared.setdefault((tool, op, where), DeclaredBoundary(tool, op, where))


def declared_boundaries() -> list[DeclaredBoundary]:
    """Every boundary declared in this process, sorted by tool, op and place."""
    with _declared_lock:
        return sorted(_declared.values(), key=lambda d: (d.tool, d.op, d.where))


# -- secrets -----------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _configured_from(raw: str | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    setting = next(row for row in SETTINGS if row.env == REPROIT_SECRET_VALUES)
    try:
        values: tuple[str, ...] = setting.parse(raw)
    except ConfigurationError:
        return ()
    return values


def _configured_secrets() -> tuple[str, ...]:
    """``REPROIT_SECRET_VALUES`` as it is now (tests and fixtures may change it)."""
    return _configured_from(os.environ.get(REPROIT_SECRET_VALUES))


def _all_secrets(read: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*_configured_secrets(), *registered_secret_values(), *read)))


# -- one call ----------------------------------------------------------------------------------


class _NoJsonForm(Exception):
    pass


def _result_form(value: Any) -> Any:
    data = json_form(value)
    if _has_object_marker(data):
        raise _NoJsonForm(type(value).__name__)
    return data


def _has_object_marker(data: Any) -> bool:
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if "$object" in item and len(item) == 1:
                return True
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _redacted_input(input_value: Any, secrets: tuple[str, ...]) -> Any:
    """The input as recordings hold it: secrets scrubbed, secret keys redacted, keys sorted."""
    return round_trip(redact(scrub_keys_and_values(input_value, secrets)))


def _probe(tool: str, op: str, input_value: Any, secrets: tuple[str, ...]) -> dict[str, Any]:
    """The request as replay matches it (bounded like a recorded one)."""
    return invoke_request(tool, op, _redacted_input(input_value, secrets))


def _miss_message(tool: str, op: str, detail: str) -> str:
    return f"reproit: invoke boundary {tool}.{op} has no recorded outcome for this input ({detail})"


class _Invocation:
    """One call of a boundary: served from a recording, or run live and recorded."""

    def __init__(
        self,
        spec: Boundary,
        span: Span,
        signature: inspect.Signature | None,
        args: Any,
        kwargs: Any,
    ) -> None:
        self.spec = spec
        self.span = span
        self.input = bind_input(signature, args, kwargs)
        self.settings: FixtureSettings | None = None
        self.recorder: ExchangeRecorder | None = None

    @property
    def where(self) -> str:
        return f"{self.spec.tool}.{self.spec.op}"

    # replay ----------------------------------------------------------------------------------

    def replaying(self) -> bool:
        """True when this call must be served (decided before anything runs)."""
        if active_session() is not None:
            return True
        self.settings = tools_settings()
        return self.settings.mode is ToolsMode.REPLAY

    def serve(self) -> Any:
        """The recorded value, or raise the recorded failure / MissingFixtureError."""
        self.span.set_attribute("reproit.replayed", True)
        session = active_session()
        if session is not None:
            return self._serve_capsule(session)
        assert self.settings is not None
        return self._serve_fixture(self.settings.directory)

    def _serve_capsule(self, session: ReplaySession) -> Any:
        outcome = capsule_outcome(session, self.spec.tool, self.spec.op, self.input)
        return self._outcome(outcome, "the capsule's exchange has no usable response")

    def _serve_fixture(self, directory: Path) -> Any:
        tool, op = self.spec.tool, self.spec.op
        key = fixture_key(
            tool, op, redact(scrub_keys_and_values(self.input, _configured_secrets()))
        )
        path = directory / fixture_name(tool, op, key)
        fixture = read_fixture(path) if path.exists() else None
        if fixture is not None and fixture.problem is None and fixture.exchange is not None:
            # Served as a capsule's is: stand-ins where the fixture has placeholders.
            response = fixture.exchange.get("response")
            if isinstance(response, Mapping):
                response = served_response(response)
            outcome = read_outcome(response)
            return self._outcome(outcome, f"fixture {path} has no usable response")
        probe = {
            "tool": tool,
            "op": op,
            "input": _redacted_input(self.input, _all_secrets()),
        }
        everything = list(scan_fixtures(directory))
        expected = next(
            (
                f.exchange.get("request")
                for f in everything
                if f.exchange is not None and f.tool == tool and f.op == op
            ),
            None,
        )
        report = divergence_report(
            INVOKE_PROTOCOL, probe, expected, consumed=0, total=len(everything)
        )
        line = divergence_line(report)
        report_divergence(line)
        if fixture is not None and fixture.problem is not None:
            detail = f"fixture {path} {fixture.problem}; re-record it with REPROIT_TOOLS=record"
        else:
            detail = (
                f"expected the fixture {path}; record it by running the same code with "
                f"REPROIT_TOOLS=record"
            )
        raise MissingFixtureError(_miss_message(tool, op, detail), line=line)

    def _outcome(self, outcome: Any, invalid: str) -> Any:
        kind = outcome["kind"]
        if kind == "data":
            return validate_output(self.spec.output, outcome["data"], self.where)
        if kind == "error" and outcome["error"] is not None:
            error = outcome["error"]
            cause = error["cause"] or {"message": None, "status": None}
            raise ToolCallError(
                error["message"],
                code=error["code"],
                status=error["status"],
                cause_message=cause["message"],
                cause_status=cause["status"],
            )
        raise MissingFixtureError(_miss_message(self.spec.tool, self.spec.op, invalid))

    # live ------------------------------------------------------------------------------------

    def begin_live(self) -> None:
        self.recorder = start_exchange(LIBRARY)

    def succeeded(self, result: Any, read: tuple[str, ...]) -> Any:
        """What the caller gets back; the outcome is recorded after it is known."""
        try:
            data = _result_form(result)
        except _NoJsonForm as missing:
            self._not_recorded(f"the result ({missing}) has no JSON form")
            return validate_output(self.spec.output, result, self.where)
        value = round_trip(data)
        try:
            value = validate_output(self.spec.output, value, self.where)
        except BaseException:
            self._not_recorded("the result failed output validation")
            raise
        with guarded("invoke.record"):
            self._record(success_response, data, read)
        self._not_recorded("not recorded")  # no-op once recorded
        return value

    def failed(self, error: BaseException, read: tuple[str, ...]) -> None:
        """Record ``error`` when it says why the call failed (the caller re-raises it)."""
        recorded = recorded_error(error)
        if recorded is None:
            self._not_recorded(f"{type(error).__name__} without a status is not recorded")
            return
        with guarded("invoke.record"):
            self._record(lambda secrets: _failure(recorded, secrets), None, read)
        self._not_recorded("not recorded")

    def abandon(self) -> None:
        self._not_recorded("the call did not finish")

    def _not_recorded(self, reason: str) -> None:
        recorder = self.recorder
        if recorder is not None and not recorder.done:
            recorder.fail(f"{self.where}: {reason}")

    def _record(
        self, response: Callable[..., dict[str, Any]], data: Any, read: tuple[str, ...]
    ) -> None:
        tool, op = self.spec.tool, self.spec.op
        secrets = _all_secrets(read)
        scrubbed_input = scrub_keys_and_values(self.input, secrets)
        if response is success_response:
            scrubbed_data = scrub_keys_and_values(data, secrets)
            bounded_response = success_response(scrubbed_data)
            full_response: dict[str, Any] = {"ok": True, "data": scrubbed_data}
        else:
            bounded_response = full_response = response(secrets)
        recorder = self.recorder
        if recorder is not None:
            finish_outcome(recorder, tool, op, self.input, bounded_response, read=read)
        settings = self.settings
        if settings is not None and settings.mode is ToolsMode.RECORD:
            key = fixture_key(
                tool, op, redact(scrub_keys_and_values(self.input, _configured_secrets()))
            )
            exchange = {
                "protocol": INVOKE_PROTOCOL,
                "request": {"tool": tool, "op": op, "input": redact(scrubbed_input)},
                "response": redact(full_response),
            }
            write_fixture(
                settings.directory, fixture_name(tool, op, key), fixture_document(key, exchange)
            )


def capsule_holds(session: ReplaySession, tool: str, op: str, input_value: Any) -> bool:
    """Whether ``session``'s capsule holds an unconsumed exchange for the call ``tool``/``op``
    on ``input_value`` (consumes nothing, reports nothing)."""
    probe = session.redact_probe(INVOKE_PROTOCOL, _probe(tool, op, input_value, _all_secrets()))
    return session.has_candidate(INVOKE_PROTOCOL, probe)


def capsule_outcome(session: ReplaySession, tool: str, op: str, input_value: Any) -> Outcome:
    """The outcome ``session``'s capsule recorded for the call ``tool``/``op`` on ``input_value``.

    Consumes the matching ``invoke`` exchange. A call the capsule does not hold (or holds by
    identity only) writes its ``REPROIT:DIVERGENCE`` line and raises
    :class:`~reproit_otel.MissingFixtureError`: it is never run live.
    """
    probe = session.redact_probe(INVOKE_PROTOCOL, _probe(tool, op, input_value, _all_secrets()))
    exchange, line = session.match_with_line(INVOKE_PROTOCOL, probe)
    if exchange is None:
        _report(session, line)
        raise MissingFixtureError(
            _miss_message(tool, op, "the capsule holds no matching invoke exchange"),
            line=line,
        )
    outcome = read_outcome(exchange.get("response") if isinstance(exchange, dict) else None)
    if outcome["kind"] == "truncated" or "truncated" in probe:
        line = session.diverge(INVOKE_PROTOCOL, {**probe, "truncated": True})
        _report(session, line)
        raise MissingFixtureError(
            _miss_message(tool, op, "it was recorded by identity only, over the budget"),
            line=line,
        )
    return outcome


def _report(session: ReplaySession, line: str | None) -> None:
    if line is not None and session.on_divergence is None:
        report_divergence(line)


def finish_outcome(
    recorder: ExchangeRecorder,
    tool: str,
    op: str,
    input_value: Any,
    response: dict[str, Any],
    *,
    read: tuple[str, ...] = (),
) -> None:
    """Record ``response`` (``success_response`` / ``failure_response``) for the call
    ``tool``/``op`` on ``input_value`` as a ``call`` effect, the way a boundary records it.

    Secret values (configured, read through :mod:`reproit_otel.secrets`, and ``read``) are
    scrubbed from the input; the pipeline redacts secret-named keys of the whole exchange.
    """
    secrets = _all_secrets(read)
    scrubbed_input = scrub_keys_and_values(input_value, secrets)
    request = invoke_request(tool, op, redact(scrubbed_input))
    if "input" in request:
        # The pipeline redacts secret-named keys itself (redaction is not idempotent).
        request["input"] = scrubbed_input
    recorder.finish(
        "call",
        resource=tool,
        key=op,
        exchange={"protocol": INVOKE_PROTOCOL, "request": request, "response": response},
    )


def _failure(recorded: RecordedError, secrets: tuple[str, ...]) -> dict[str, Any]:
    def scrub(text: str | None) -> str | None:
        return None if text is None else scrub_secret_values(text, secrets)

    return failure_response(
        code=scrub(recorded.code),
        status=recorded.status,
        message=scrub(recorded.message) or "",
        cause_message=scrub(recorded.cause_message),
        cause_status=recorded.cause_status,
    )


def _run_sync(call: _Invocation, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    if call.replaying():
        return call.serve()
    call.begin_live()
    try:
        with reproit_secrets.tracking_call() as read:
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:
                call.failed(error, tuple(read))
                raise
        return call.succeeded(result, tuple(read))
    finally:
        call.abandon()


async def _run_async(
    call: _Invocation, fn: Callable[..., Awaitable[Any]], args: Any, kwargs: Any
) -> Any:
    if call.replaying():
        return call.serve()  # never awaits: replay is instant and cannot be cancelled
    call.begin_live()
    closed = False
    try:
        with reproit_secrets.tracking_call() as read:
            try:
                result = await fn(*args, **kwargs)
            except GeneratorExit:
                closed = True
                raise
            except BaseException as error:
                call.failed(error, tuple(read))
                raise
        return call.succeeded(result, tuple(read))
    finally:
        if closed:
            # The coroutine was closed before it finished, maybe by the garbage collector's
            # finalizer on whatever thread allocates: the pipeline is told later, at a hook
            # that holds no lock (capture/recording.py, "Finalizers").
            hand_over(call.abandon)
        else:
            call.abandon()


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _where(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{name}"


# -- the public objects ------------------------------------------------------------------------


class BoundaryCall:
    """The ``as`` target of ``with boundary(tool, op) as call``: runs calls inside its span."""

    def __init__(self, spec: Boundary, span: Span) -> None:
        self._spec = spec
        self._span = span

    @property
    def span(self) -> Span:
        """The boundary's OpenTelemetry span."""
        return self._span

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` through the boundary (an awaitable for a coroutine
        function): recorded live, served in replay."""
        call = _Invocation(self._spec, self._span, _signature(fn), args, kwargs)
        if inspect.iscoroutinefunction(fn):
            return _run_async(call, fn, args, kwargs)
        return _run_sync(call, fn, args, kwargs)


class Boundary:
    """What :func:`boundary` returns: a decorator, and a (sync or async) context manager."""

    def __init__(self, tool: str, op: str, output: Output, where: str) -> None:
        if not isinstance(tool, str) or not tool or not isinstance(op, str) or not op:
            raise TypeError("boundary(tool, op) needs two non-empty strings")
        self.tool = tool
        self.op = op
        self.output = output
        self._where = where
        # Entered context managers, per context (threads and tasks each see their own).
        self._open: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
            f"reproit_boundary_{tool}_{op}", default=()
        )
        _declare(tool, op, where)

    def __repr__(self) -> str:
        return f"boundary({self.tool!r}, {self.op!r})"

    @contextmanager
    def _span(self) -> Iterator[Span]:
        with _tracer().start_as_current_span(
            f"{self.tool} {self.op}",
            kind=SpanKind.CLIENT,
            attributes={"reproit.tool": self.tool, "reproit.op": self.op},
        ) as span:
            yield span

    # decorator -------------------------------------------------------------------------------

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"boundary {self.tool}.{self.op} cannot wrap the generator {fn!r}: a recorded "
                "outcome is one value; return a list instead"
            )
        _declare(self.tool, self.op, _where(fn), replaces=self._where)
        signature = _signature(fn)
        spec = self

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                with spec._span() as span:
                    return await _run_async(
                        _Invocation(spec, span, signature, args, kwargs), fn, args, kwargs
                    )

            call_async.__reproit_boundary__ = spec  # type: ignore[attr-defined]
            return cast(Callable[P, R], call_async)

        @functools.wraps(fn)
        def call_sync(*args: Any, **kwargs: Any) -> Any:
            with spec._span() as span:
                return _run_sync(_Invocation(spec, span, signature, args, kwargs), fn, args, kwargs)

        call_sync.__reproit_boundary__ = spec  # type: ignore[attr-defined]
        return cast(Callable[P, R], call_sync)

    # context manager -------------------------------------------------------------------------

    def __enter__(self) -> BoundaryCall:
        manager = self._span()
        span = manager.__enter__()
        self._open.set((*self._open.get(), manager))
        return BoundaryCall(self, span)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        *rest, manager = self._open.get()
        self._open.set(tuple(rest))
        return bool(manager.__exit__(exc_type, exc, tb))

    async def __aenter__(self) -> BoundaryCall:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return self.__exit__(exc_type, exc, tb)


def boundary(tool: str, op: str, *, output: Output = None) -> Boundary:
    """Declare the invoke boundary ``tool``/``op`` (see the module docstring).

    Use it as a decorator of a function or coroutine function, or as a context manager whose
    ``run(fn, *args, **kwargs)`` makes calls through it. ``output`` checks every result.
    """
    frame = sys._getframe(1)
    return Boundary(tool, op, output, str(frame.f_globals.get("__name__", "?")))
