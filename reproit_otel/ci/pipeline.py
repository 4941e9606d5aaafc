"""The recording pipeline of CI capture mode: every exchange belongs to the running test.

While capture is on, the pytest plugin installs one :class:`CiRecordingPipeline` as the
override pipeline of :mod:`reproit_otel.capture.recording`, so it is asked before any span processor
of the same process. It holds at most one test trace at a time (pytest runs one test per
process; pytest-xdist workers are separate processes): from the start of a test's setup to the
end of its teardown, every exchange a recorder sees, on any thread, is pushed onto that test's
trace as an effect. Between tests it has no live operation and the recorders fall back to the
installed pipeline, if any.

The test's trace is a :class:`CiTrace`. Test code may add its own effects to it::

    from reproit_otel.ci import current_test_trace

    trace = current_test_trace()     # None outside CI capture mode
    if trace is not None:
        trace.effect("emit", event="cache-miss")

Event cap (decision D7): a trace holds 256 events, start and return included. A
:class:`CiTrace` keeps the last slot for its return event, so the test's capsule can always be
written: effects past the cap are dropped and counted in :attr:`CiTrace.dropped_effects`,
never raised into the test.

Configured secret values (``REPROIT_SECRET_VALUES`` and
:func:`reproit_otel.capture.recording.register_secret_values`) are replaced in every string of an
exchange, its key and its resource before the effect is pushed (decision D8).

Locks. ``CiTrace._cap_lock`` makes "is there room left? push" one step; the effect is
scrubbed and redacted before it is taken, and under it only the trace's own lock is taken (a
count and an append). The pipeline's ``_lock`` guards which trace is attached. Neither is
held while logging or while code outside reproit-otel runs, and no finalizer of reproit-otel
pushes an effect (it hands the finish over, settled by the next recorded call or at the end
of the test), so neither can be waited on by the thread that holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from reproit_otel._guard import guarded
from reproit_otel.capture.recording import (
    ExchangeRecorder,
    registered_secret_values,
    watch_collections,
)
from reproit_otel.errors import TraceError
from reproit_otel.redaction.core import scrub_secret_values, scrub_value
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.trace import MAX_EVENTS, BackendTrace

__all__ = ["CiRecordingPipeline", "CiTrace", "current_test_trace"]


class CiTrace(BackendTrace):
    """A CI test trace: effects past the 256-event cap are dropped and counted (D7)."""

    dropped_effects: int
    """Effects not recorded because the trace was full."""
    failed_exchanges: int
    """Exchanges a recorder could not record, or that finished after the trace."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dropped_effects = 0
        self.failed_exchanges = 0
        self._cap_lock = threading.Lock()

    def effect(
        self,
        kind: Any,
        *,
        resource: Any = UNSET,
        key: Any = UNSET,
        tenant: Any = UNSET,
        event: Any = UNSET,
        detail: Any = UNSET,
        exchange: Any = UNSET,
    ) -> None:
        """:meth:`BackendTrace.effect`, except that a full trace drops the effect silently."""
        if self.finished:
            raise TraceError("AlreadyFinished")
        # Redacted before the lock: the lock only makes "room left? push" one step.
        fields = self.effect_fields(
            kind,
            resource=resource,
            key=key,
            tenant=tenant,
            event=event,
            detail=detail,
            exchange=exchange,
        )
        with self._cap_lock:
            if not self.finished and len(self.settled_events()) >= MAX_EVENTS - 1:
                self.dropped_effects += 1
                return
            self.push_effect_fields(fields)


class CiRecordingPipeline:
    """Routes every recorded exchange to the trace of the test that is running."""

    def __init__(self, secret_values: Iterable[str] = ()) -> None:
        self._secret_values = tuple(secret_values)
        self._trace: CiTrace | None = None
        self._lock = threading.Lock()

    # -- the test's trace -----------------------------------------------------------------

    def attach(self, trace: CiTrace) -> None:
        """Make ``trace`` the one every exchange goes to until :meth:`detach`."""
        watch_collections()  # finalizers' calls are then handed over (capture/recording.py)
        with self._lock:
            self._trace = trace

    def detach(self) -> CiTrace | None:
        """Stop routing exchanges to the current trace and return it."""
        with self._lock:
            trace, self._trace = self._trace, None
        return trace

    @property
    def trace(self) -> CiTrace | None:
        """The trace of the test that is running, if any."""
        return self._trace

    # -- RecordingPipeline ----------------------------------------------------------------

    def has_live_operations(self) -> bool:
        """True while a test runs."""
        return self._trace is not None

    def start_exchange(self, library: str) -> ExchangeRecorder | None:
        """A recorder bound to the running test's trace, or None between tests."""
        trace = self._trace
        if trace is None:
            return None
        return ExchangeRecorder(self, trace, library)

    def mark_incomplete(self, reason: str) -> None:
        """Nothing to do: a CI trace always reports ``effectsComplete: false``."""

    # -- ExchangeOwner --------------------------------------------------------------------

    def exchange_finished(
        self,
        handle: object,
        effect: str,
        resource: str | None,
        key: str | None,
        exchange: dict[str, Any],
    ) -> None:
        """Push the (scrubbed) exchange onto the trace it was started in."""
        assert isinstance(handle, CiTrace)
        secrets = self.current_secrets()
        if secrets:
            exchange = scrub_value(exchange, secrets)
            resource = None if resource is None else scrub_secret_values(resource, secrets)
            key = None if key is None else scrub_secret_values(key, secrets)
        if handle.finished:
            handle.failed_exchanges += 1  # a streamed body read after the test ended
            return
        try:
            handle.effect(
                effect,
                resource=UNSET if resource is None else resource,
                key=UNSET if key is None else key,
                exchange=exchange,
            )
        except TraceError:
            handle.failed_exchanges += 1

    def exchange_failed(self, handle: object, reason: str) -> None:
        """Count an exchange that could not be recorded."""
        if isinstance(handle, CiTrace):
            handle.failed_exchanges += 1

    def current_secrets(self) -> tuple[str, ...]:
        registered = registered_secret_values()
        return self._secret_values + tuple(v for v in registered if v not in self._secret_values)


_active: CiRecordingPipeline | None = None


def _set_active(pipeline: CiRecordingPipeline | None) -> None:
    global _active
    _active = pipeline


def current_test_trace() -> CiTrace | None:
    """The trace of the test running in CI capture mode, or None (off, replay, between tests)."""
    pipeline = _active
    if pipeline is None:
        return None
    with guarded("ci.current_test_trace"):
        return pipeline.trace
    return None
