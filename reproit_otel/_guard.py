"""The one guard every reproit-otel hook runs inside.

reproit-otel runs inside somebody else's application. A defect in a hook of ours must leave
the request untraced, never broken: the guard logs the exception through the
``reproit_otel`` logger and swallows it. Under the test suite defects must stay visible, so
with ``REPROIT_STRICT_INTERNAL=1`` in the environment the guard re-raises instead
(``tests/conftest.py`` sets it).

Usage::

    from reproit_otel._guard import guarded

    with guarded("requests.record"):
        ...  # anything that may fail; the application never sees it

    @guarded("processor.on_end")
    def on_end(self, span): ...  # a swallowed failure makes the call return None

    value = guard_call("wsgi.input", build_input, environ, default=None)

    try:                      # the cheapest form, for hooks on every request's path
        ...
    except Exception as exc:
        absorb("requests.send", exc)

Only :class:`Exception` is caught: ``KeyboardInterrupt`` and ``SystemExit`` always propagate.
Log lines are rate limited per ``where`` (the first 10, then every 1000th) so a defect on a hot
path cannot flood the application's logs; :func:`internal_errors` counts every one.

Locks. ``_lock`` guards the counters only; the log line is written after it is released, so a
logging handler that re-enters reproit-otel (OpenTelemetry's, sending through an exporter)
never finds it held by its own thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

__all__ = ["STRICT_ENV", "absorb", "guard_call", "guarded", "internal_errors", "is_strict"]

STRICT_ENV = "REPROIT_STRICT_INTERNAL"
"""Set to ``1`` to make :func:`guarded` re-raise instead of swallowing (the test suite does)."""

_log = logging.getLogger("reproit_otel")
_counts: dict[str, int] = {}
_lock = threading.Lock()
_FIRST_LOGGED = 10
_THEN_EVERY = 1000

T = TypeVar("T")


def is_strict() -> bool:
    """True when internal defects must propagate (``REPROIT_STRICT_INTERNAL=1``)."""
    # Read on every failure, never on the happy path: tests flip it with monkeypatch.
    return os.environ.get(STRICT_ENV) == "1"


def internal_errors() -> dict[str, int]:
    """How many exceptions each guarded place has swallowed (or re-raised) so far."""
    with _lock:
        return dict(_counts)


def _note(where: str, exc: BaseException) -> None:
    with _lock:
        count = _counts.get(where, 0) + 1
        _counts[where] = count
    if count <= _FIRST_LOGGED or count % _THEN_EVERY == 0:
        _log.error(
            "reproit-otel internal error in %s (occurrence %d); the request continues untraced",
            where,
            count,
            exc_info=(type(exc), exc, exc.__traceback__),
        )


def absorb(where: str, exc: Exception) -> None:
    """What :class:`guarded` does with ``exc``, for an ``except Exception`` block of a hot path.

    Logs and counts it under ``where``; re-raises it when internal defects must propagate. A
    ``try``/``except`` costs nothing while no exception is raised, unlike entering a guard.
    """
    _note(where, exc)
    if is_strict():
        raise exc


class guarded(contextlib.ContextDecorator):  # reads as a function at call sites
    """Context manager and decorator that logs and swallows exceptions raised inside it.

    ``where`` names the hook in the log line and in :func:`internal_errors`. Used as a
    decorator, a swallowed failure makes the decorated function return ``None``.
    """

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> guarded:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        _note(self.where, exc)
        return not is_strict()


def guard_call(
    where: str, fn: Callable[..., T], /, *args: object, default: T, **kwargs: object
) -> T:
    """Call ``fn(*args, **kwargs)`` inside :class:`guarded`; return ``default`` if it failed."""
    with guarded(where):
        return fn(*args, **kwargs)
    return default
