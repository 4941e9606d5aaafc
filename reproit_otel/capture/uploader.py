"""The uploader: failing operations leave the process as ``capture-batch-v1`` POSTs.

Usage::

    uploader = Uploader.from_config(load_config())   # None when capture is not configured
    uploader.record(trace)          # a finished BackendTrace, or its list of raw events
    uploader.submit(trace)          # the same, as the span processor's sink
    uploader.flush(timeout=5.0)     # True once everything queued was sent (or given up)
    uploader.stats()                # counters, below
    uploader.close()                # flush briefly and stop the thread (idempotent)

What happens to an operation (PROTOCOL sections 5.3 and 5.4, decisions D3 and D5):

1. :meth:`Uploader.record` asks :func:`~reproit_otel.wire.batch.capture_eligibility`;
   an ineligible operation is counted under its reason in ``stats()["ineligible"]``.
   It never blocks on the network and never raises into the caller. A ``BackendTrace``
   whose events are partly deferred (the capture pipeline's healthy operations) is first
   judged on its settled events (``unfinished`` and ``not-a-failure`` depend only on the
   ``return`` event and oracle markers, which are never deferred), so a healthy operation's
   exchanges are never built. The span processor goes further for the captures whose trace it
   never opened (``capture/operation.py``, "Lazy traces"): a healthy one is only counted
   (:meth:`Uploader.note_healthy`, no lock), and a failing one is handed over unopened
   (:meth:`Uploader.submit_unopened`, no lock): this thread opens it, which builds its
   events, and records it, so the request's thread builds nothing. :meth:`Uploader.flush`,
   :meth:`Uploader.stats` and :meth:`Uploader.close` open what waits first. At most 64 wait;
   the 65th pushes out the oldest (``dropped_operations``).
2. An eligible one is queued (``captured_operations``). The queue holds 64 operations; the
   65th pushes out the **oldest** (``dropped_operations``). The first record arms the flush
   timer (``flush_interval_ms``, default 3000, floor 100); a timer already armed is not
   pushed back.
3. When the timer fires (or on :meth:`flush`), the one uploader thread builds one batch per
   operation, in queue order, with :func:`~reproit_otel.wire.batch.build_capture_result`:
   effects dropped to fit the 48 KiB payload bound are counted in
   ``capture_dropped_effects``, values replaced by their identity in
   ``capture_replaced_values``.
4. The body is the canonical JSON of the batch, POSTed to the endpoint verbatim with
   ``authorization: Bearer <key>`` and ``content-type: application/json``, each attempt
   bounded by ``request_timeout_ms``. Attempts ``0..retry_limit`` (limit clamped to 0..5):
   2xx is done (``sent_batches``); 4xx (429 included, as the reference does) gives up at
   once; anything else (5xx, refused connection, timeout) waits ``200 × (attempt + 1)`` ms
   and tries again (``upload_sending.py`` does the sending, and first sends a heavy
   operation's capsule artifact when there is a capture budget). A batch that was given up
   counts in ``failed_batches`` and ``dropped_operations``. A batch that cannot be
   built (a defect) counts in ``dropped_operations`` and is logged. Delivery problems are
   logged through the ``reproit_otel`` logger as what to do (``reproit_otel.delivery``: a
   refused key names ``REPROIT_API_KEY`` and the ingest's key flags, an unreachable ingest
   its cause and ``REPROIT_ENDPOINT``): the first of each cause, then every 100th, so an
   ingest that is down cannot flood the application's logs. They reach stderr even when the
   only handler is OpenTelemetry's (``reproit_otel._stderr``).

Our own traffic is neither recorded nor traced: uploads go through the standard library's
``http.client`` (no recorder patches it) inside OpenTelemetry's ``suppress_instrumentation``
context, so instrumentations that honour it (urllib, http.client based ones, ours) stay quiet.

Processes: the thread is a daemon and starts on the first record. After ``os.fork`` the child
gets a fresh lock, an empty queue, zeroed counters and no thread; its first record starts its
own thread, so pre-fork servers (gunicorn workers) capture and upload from every worker. At
interpreter exit a bounded final flush runs (``exit_flush_timeout_s``, default 2 s): with the
ingest down or hanging the process still exits on time, losing what was not sent.

Locks and process hooks. One condition (``_cond``, a plain lock) guards the queue, the
counters and the flush state. The span processor reaches it (:meth:`Uploader.submit`) only
after releasing its own and the operation's locks. Under it nothing builds, encodes, sends or
logs: batches are built and posted on the uploader thread with it released, and delivery
warnings are logged after it. The ``at``-fork hook runs in the child alone and replaces the
lock rather than taking it; ``_live_uploaders`` is a ``weakref.WeakSet`` whose callbacks are
the standard library's and take no lock of ours. The one hook that takes the condition is the
``atexit`` exit flush: it runs on the main thread after the main module returned, when that
thread is outside every locked section of reproit-otel (each is a ``with`` block, left by any
exception), so it can only wait for the uploader thread, and for at most
``exit_flush_timeout_s``.

Handed-over work. Finalizers never take a lock, so they cannot wake this thread; they hand
their work over to :func:`reproit_otel.capture.recording.hand_over` and the next hook of the
application settles it. So that an idle worker does not keep that work (and the operation it
refers to) until its next request, the thread also wakes every :data:`SETTLE_INTERVAL_S` and
settles what it finds, outside the condition and holding no lock of reproit-otel, so the work
takes only the locks it would take on an application thread, in the same order. The span
processor starts the thread when it begins a capture operation (:meth:`Uploader.keep_settling`),
so it runs before the first failure.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from reproit_otel._guard import absorb
from reproit_otel.capture import recording
from reproit_otel.capture.upload_sending import USER_AGENT, Sending, backoff_ms
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.batch import (
    CaptureEnvironment,
    CaptureSettings,
    build_capture_result,
    capture_eligibility,
    host_environment,
    operation_status,
)
from reproit_otel.wire.canonical import canonical_json_bytes
from reproit_otel.wire.trace import MAX_EVENTS, BackendTrace

if TYPE_CHECKING:
    from reproit_otel.config import ReproitConfig

__all__ = [
    "DEFAULT_EXIT_FLUSH_TIMEOUT_S",
    "HEAVY_QUEUE_LIMIT",
    "OPEN_WAIT_S",
    "QUEUE_LIMIT",
    "SETTLE_INTERVAL_S",
    "USER_AGENT",
    "Uploader",
    "UploaderSettings",
    "backoff_ms",
]

_log = logging.getLogger("reproit_otel")

QUEUE_LIMIT = 64
HEAVY_QUEUE_LIMIT = 4
"""Operations past the 256-event trace limit that may wait in the queue at once."""
MIN_FLUSH_INTERVAL_MS = 100
SETTLE_INTERVAL_S = 1.0
OPEN_WAIT_S = 5.0
"""How long :meth:`Uploader.stats` and :meth:`Uploader.flush` wait at most for failing
operations the uploader's thread is opening (building their events)."""
"""How often the uploader thread looks for work finalizers handed over (``recording.py``)."""
MAX_RETRY_LIMIT = 5
DEFAULT_EXIT_FLUSH_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class UploaderSettings:
    """Where and how batches are sent. Numbers are normalised as section 5.1 says."""

    endpoint: str
    api_key: str = field(repr=False)
    capture: CaptureSettings
    flush_interval_ms: int = 3000
    request_timeout_ms: int = 5000
    retry_limit: int = 2
    exit_flush_timeout_s: float = DEFAULT_EXIT_FLUSH_TIMEOUT_S
    queue_limit: int = QUEUE_LIMIT
    capture_budget: int = 0
    """Bytes up to which an operation too big for one batch goes whole as an artifact (0: off)."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "flush_interval_ms", max(MIN_FLUSH_INTERVAL_MS, int(self.flush_interval_ms))
        )
        object.__setattr__(self, "retry_limit", min(MAX_RETRY_LIMIT, max(0, int(self.retry_limit))))
        object.__setattr__(self, "request_timeout_ms", max(1, int(self.request_timeout_ms)))
        object.__setattr__(self, "queue_limit", max(1, int(self.queue_limit)))
        object.__setattr__(self, "capture_budget", max(0, int(self.capture_budget)))

    @classmethod
    def from_config(cls, config: ReproitConfig) -> UploaderSettings | None:
        """The settings of a loaded configuration, or ``None`` when capture cannot run."""
        if config.capture_problem is not None:
            return None
        assert config.endpoint is not None and config.api_key is not None
        assert config.app_id is not None
        return cls(
            endpoint=config.endpoint,
            api_key=config.api_key,
            capture=CaptureSettings(
                project_id=config.app_id,
                build=config.build,
                commit=config.commit,
                image_digest=config.usable_image_digest,
            ),
            flush_interval_ms=config.flush_interval_ms,
            request_timeout_ms=config.request_timeout_ms,
            retry_limit=config.retry_limit,
            capture_budget=config.capture_budget,
        )


# Ineligibility reasons that the return event and oracle markers alone decide.
_DECIDED_ON_SETTLED_EVENTS = frozenset({"unfinished", "not-a-failure"})


def _healthy(trace: object) -> bool:
    """Whether a finished trace's return status alone shows it is ``not-a-failure``.

    The common case, answered without building any event: a ``BackendTrace`` knows the status
    it returned and whether any event could be an agent oracle marker. False means: decide on
    the events, as :func:`~reproit_otel.wire.batch.capture_eligibility` does.
    """
    if type(trace) is not BackendTrace or not trace.finished or trace.may_hold_oracle_marker:
        return False
    status = trace.return_status
    if status is UNSET:
        return True
    # operation_status() gives None (not a failure) outside 0..65535; floats take the long way.
    return type(status) is int and not 500 <= status <= 0xFFFF


class _HasEvents(Protocol):
    @property
    def events(self) -> Sequence[Mapping[str, Any]]: ...


EnvironmentFactory = Callable[[int], CaptureEnvironment]
"""Builds the :class:`CaptureEnvironment` of batch number ``n`` (default: this host, now)."""


def _fresh_stats() -> dict[str, Any]:
    return {
        "captured_operations": 0,
        "dropped_operations": 0,
        "sent_batches": 0,
        "failed_batches": 0,
        "capture_dropped_effects": 0,
        "capture_replaced_values": 0,
        "artifacts_sent": 0,
        "artifacts_refused": 0,
        "artifacts_failed": 0,
        "capture_over_budget": 0,
        "capture_over_event_cap": 0,
        "ineligible": {},
    }


def _suppressed() -> Callable[[], None]:
    """Enter OpenTelemetry's suppress-instrumentation context; returns the exit function."""
    try:
        from opentelemetry.context import (
            _SUPPRESS_INSTRUMENTATION_KEY,
            attach,
            detach,
            set_value,
        )
    except ImportError:  # pragma: no cover - opentelemetry-api is a dependency
        return lambda: None
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    return lambda: detach(token)


class Uploader(Sending):
    """Queues eligible failing operations and posts them from one daemon thread.

    How a built batch (and a heavy operation's artifact) is delivered is :class:`Sending`'s
    part (``upload_sending.py``).
    """

    settings: UploaderSettings

    def __init__(
        self,
        settings: UploaderSettings,
        environment: EnvironmentFactory | None = None,
    ) -> None:
        self.settings = settings
        self._environment: EnvironmentFactory = environment or host_environment
        self._closed = False
        self._exit_flushed = False
        self._warned_restart = False  # a restarted thread is logged once per uploader
        self._reset_process_state()
        _live_uploaders.add(self)
        _register_exit_flush(self)

    @classmethod
    def from_config(
        cls, config: ReproitConfig, environment: EnvironmentFactory | None = None
    ) -> Uploader | None:
        """An uploader for a loaded configuration, or ``None`` when capture cannot run."""
        settings = UploaderSettings.from_config(config)
        return None if settings is None else cls(settings, environment)

    # -- state -----------------------------------------------------------------------------

    def _reset_process_state(self) -> None:
        """Everything that belongs to one process (called at creation and in a forked child)."""
        self._pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        self._stats = _fresh_stats()
        # note_healthy() counts without a lock: next() on an itertools.count is one C call the
        # interpreter lock keeps whole. stats() reads it with one next() of its own, counted in
        # _healthy_reads (under the condition), so both stay exact.
        self._healthy_notes = itertools.count()
        self._healthy_reads = 0
        # Failing operations handed over unopened (submit_unopened): their traces are opened
        # and recorded by _open_unopened. Only append and popleft: no lock.
        self._unopened: collections.deque[Callable[[], _HasEvents]] = collections.deque()
        self._opening = 0  # taken from _unopened and not recorded yet (under the condition)
        self._deadline: float | None = None
        self._flush_requested = False
        self._sending = False
        self._batch_number = 0
        self._thread: threading.Thread | None = None
        # Set (no lock) by a thread that ends without being told to: the next caller starts
        # another one (keep_settling reads it on every capture, so it is a plain attribute).
        self._thread_died = False
        self._stop = threading.Event()
        self._warnings: dict[str, int] = {}

    def _after_fork_in_child(self) -> None:
        # The parent keeps (and sends) what it queued; the child starts empty with its own
        # lock (the parent's may have been held by another thread at fork time).
        closed = self._closed
        self._reset_process_state()
        self._closed = closed

    def _ensure_thread(self) -> None:
        """Start the uploader thread of this process if it is not running (lock held); a
        thread that died is replaced, and that is logged once."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._thread is not None and not self._warned_restart:
            self._warned_restart = True
            _log.warning(
                "reproit-otel: the uploader thread stopped unexpectedly; a new one was started "
                "(the operation it was sending may be lost, later ones are sent)"
            )
        self._thread_died = False
        self._thread = threading.Thread(target=self._run, name="reproit-otel-uploader", daemon=True)
        self._thread.start()

    # -- the caller's side -----------------------------------------------------------------

    def record(self, trace: _HasEvents | Sequence[Mapping[str, Any]]) -> bool:
        """Queue a finished operation if it is eligible; True when it was queued.

        Never blocks on the network and never raises (defects are logged by the guard).
        """
        try:
            return self._record(trace)
        except Exception as exc:
            absorb("uploader.record", exc)
        return False

    def submit(self, trace: _HasEvents) -> None:
        """The span processor's sink: :meth:`record` a finished ``BackendTrace``."""
        try:
            if _healthy(trace) and os.getpid() == self._pid:
                self._ineligible("not-a-failure")  # most operations: nothing else to do
                return
        except Exception as exc:
            absorb("uploader.record", exc)
            return
        self.record(trace)

    def submit_unopened(self, open_trace: Callable[[], _HasEvents]) -> None:
        """The span processor's call for a failing capture whose trace is not opened yet
        (instead of :meth:`submit`): ``open_trace()`` builds its events, so it is called on
        this uploader's thread (or by :meth:`flush`, :meth:`stats` and :meth:`close`, which
        open what is waiting first), holding no lock, and its trace is then recorded.

        Takes no lock: past :attr:`UploaderSettings.queue_limit` waiting operations the
        oldest is dropped (``dropped_operations``), as the queue drops its oldest.
        """
        unopened = self._unopened
        unopened.append(open_trace)
        if self._thread_died:  # nobody would open it: start a thread again
            self.keep_settling()
        if len(unopened) > self.settings.queue_limit:
            try:
                unopened.popleft()
            except IndexError:
                return
            with self._cond:  # only when the uploader is that far behind
                self._stats["captured_operations"] += 1
                self._stats["dropped_operations"] += 1

    def _open_unopened(self) -> None:
        """Open and record the failing operations handed over unopened, oldest first, on this
        thread, holding no lock while it builds: building and redacting their events happens
        here. Each one taken is counted in ``_opening`` until it is recorded, so a caller that
        wants exact counts can wait for the ones another thread is opening
        (:meth:`_wait_opened`)."""
        unopened = self._unopened
        for _ in range(len(unopened)):
            with self._cond:
                try:
                    open_trace = unopened.popleft()
                except IndexError:
                    return
                self._opening += 1
            try:
                self.record(open_trace())
            except Exception as exc:
                absorb("uploader.open", exc)
            finally:
                with self._cond:
                    self._opening -= 1
                    self._cond.notify_all()
            time.sleep(0)  # let the request threads in between two operations

    def _settle_unopened(self, timeout: float = OPEN_WAIT_S) -> None:
        """Open what waits on this thread, then wait (up to ``timeout``) for what another
        thread is opening, so what follows sees every failure handed over so far."""
        if self._unopened:
            self._open_unopened()
        limit = time.monotonic() + timeout
        with self._cond:
            while self._opening:
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    def note_healthy(self) -> None:
        """The span processor's call for a capture that finished healthy and whose trace was
        never opened (instead of :meth:`submit`): counted as ``not-a-failure``, with no lock
        (most requests end here)."""
        next(self._healthy_notes)

    def keep_settling(self) -> None:
        """Start this process's uploader thread now, so it settles handed-over work.

        The span processor calls it when it begins a capture operation. Finalizers hand
        their work over (:func:`reproit_otel.capture.recording.hand_over`) without waking anyone;
        the application's next hook settles it, and so does the uploader thread every
        :data:`SETTLE_INTERVAL_S`, so an idle worker does not keep that work (and the
        operation it refers to) until its next request. Cheap once the thread runs.
        """
        if (self._thread is not None and not self._thread_died) or self._closed:
            return
        with self._cond:
            if os.getpid() == self._pid and not self._closed:
                self._ensure_thread()

    def _ineligible(self, reason: str) -> None:
        with self._cond:
            ineligible: dict[str, int] = self._stats["ineligible"]
            ineligible[reason] = ineligible.get(reason, 0) + 1

    def _record(self, trace: _HasEvents | Sequence[Mapping[str, Any]]) -> bool:
        if os.getpid() != self._pid:  # forked without the at-fork hook (should not happen)
            self._after_fork_in_child()
        eligible, reason = False, None
        if _healthy(trace):
            reason = "not-a-failure"
        else:
            settled = getattr(trace, "settled_events", None)
            if callable(settled):
                eligible, reason = capture_eligibility(settled())
        if reason not in _DECIDED_ON_SETTLED_EVENTS:
            events = list(trace.events) if hasattr(trace, "events") else list(trace)
            eligible, reason = capture_eligibility(events)
        if not eligible:
            self._ineligible(reason or "unknown")
            return False
        returned = next(e for e in reversed(events) if e.get("kind") == "return")
        operation = {
            "operation": events[0]["operation"],
            "status": operation_status(returned),
            "events": [dict(event) for event in events],
        }
        unheld = getattr(trace, "unheld_effects", None)
        if unheld:  # past the capture budget while recorded: counted, never held
            operation["unheld"] = dict(unheld)
            operation["budget"] = getattr(trace, "capture_budget", 0)
        capped = getattr(trace, "capped_effects", None)
        if capped:  # past the event cap while recorded: counted, never held
            operation["capped"] = dict(capped)
            operation["eventCap"] = getattr(trace, "max_events", 0)
        with self._cond:
            if self._closed:
                return False
            self._stats["captured_operations"] += 1
            self._queue.append(operation)
            while len(self._queue) > self.settings.queue_limit:
                self._queue.popleft()
                self._stats["dropped_operations"] += 1
            if len(operation["events"]) > MAX_EVENTS:
                self._bound_heavy_locked()
            if self._deadline is None:
                self._deadline = time.monotonic() + self.settings.flush_interval_ms / 1000
            self._ensure_thread()
            self._cond.notify_all()
        return True

    def _bound_heavy_locked(self) -> None:
        """Keep at most :data:`HEAVY_QUEUE_LIMIT` heavy operations queued, dropping the oldest.

        A heavy operation (past the 256-event trace limit) may hold thousands of exchanges; an
        ingest that is down must not let a service pile up 64 of them.
        """
        heavy = [op for op in self._queue if len(op["events"]) > MAX_EVENTS]
        for operation in heavy[: max(0, len(heavy) - HEAVY_QUEUE_LIMIT)]:
            self._queue.remove(operation)
            self._stats["dropped_operations"] += 1

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything queued now; True once the queue is empty and nothing is sending.

        False when ``timeout`` (seconds) passed first. Safe from any thread but the uploader's.
        """
        limit = None if timeout is None else time.monotonic() + timeout
        self._settle_unopened(OPEN_WAIT_S if timeout is None else min(timeout, OPEN_WAIT_S))
        with self._cond:
            if not self._queue and not self._sending:
                return True
            self._flush_requested = True
            self._ensure_thread()
            self._cond.notify_all()
            while self._queue or self._sending:
                remaining = None if limit is None else limit - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def stats(self) -> dict[str, Any]:
        """A copy of the counters (``ineligible`` maps each reason to its count).

        Failing operations handed over unopened are opened and recorded first (those the
        uploader's thread is opening are waited for), so the counters include them."""
        self._settle_unopened()
        with self._cond:
            copy = dict(self._stats)
            ineligible = copy["ineligible"] = dict(self._stats["ineligible"])
            healthy = next(self._healthy_notes) - self._healthy_reads
            self._healthy_reads += 1
            if healthy:
                ineligible["not-a-failure"] = ineligible.get("not-a-failure", 0) + healthy
            copy["queued"] = len(self._queue)
            return copy

    def close(self, timeout: float | None = None) -> bool:
        """Flush (bounded by ``timeout``, default the exit bound) and stop the thread.

        What is still queued after the timeout is left unsent (``stats()["queued"]``); a
        batch being sent is abandoned at its next retry pause.

        After the interpreter-exit flush has run, the flush is not attempted again, so a
        tracer provider shut down at exit adds no second wait.
        """
        if timeout is None:
            timeout = 0.0 if self._exit_flushed else self.settings.exit_flush_timeout_s
        flushed = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._stop.set()
            self._cond.notify_all()
        return flushed

    shutdown = close

    def _exit_flush(self) -> None:
        if os.getpid() != self._pid or self._closed or self._exit_flushed:
            return
        self._exit_flushed = True
        with self._cond:
            pending = (
                bool(self._queue) or self._sending or bool(self._unopened) or self._opening > 0
            )
        if pending:
            self.flush(self.settings.exit_flush_timeout_s)

    # -- the uploader thread ---------------------------------------------------------------

    def _run(self) -> None:
        detach = _suppressed()
        told_to_stop = False
        try:
            while True:
                work = self._wait_for_work()
                if work is None:
                    told_to_stop = True
                    return
                if recording.handed_over:
                    self._settle()
                if self._unopened:
                    self._open_unopened()
                if work:
                    self._drain()
        finally:
            detach()
            if not told_to_stop:  # killed (an exception from outside, a defect that escaped)
                self._thread_died = True
                with self._cond:
                    self._sending = False
                    self._cond.notify_all()

    def _wait_for_work(self) -> bool | None:
        """Wait for batches to send (True) or the next settling round (False); None: stop."""
        waited = False  # one wait at least between settling rounds: never a busy loop
        with self._cond:
            while True:
                if self._closed:
                    return None
                if self._queue and (self._flush_requested or self._closed):
                    break
                now = time.monotonic()
                if self._deadline is not None and now >= self._deadline:
                    break
                if waited and (recording.handed_over or self._unopened):
                    return False
                wait = SETTLE_INTERVAL_S
                if self._deadline is not None:
                    wait = min(wait, self._deadline - now)
                self._cond.wait(wait)
                waited = True
            self._deadline = None
            self._flush_requested = False
            return True

    @staticmethod
    def _settle() -> None:
        """Run the work finalizers handed over, on this thread, holding no lock.

        The work takes the locks any application thread takes for it (an operation's, then
        the processor's, then this uploader's condition when it submits a finished
        operation), in that order; none is held here, so none can be waited on by its owner.
        """
        try:
            recording.settle_handed_over()
        except Exception as exc:
            # Only under the test suite's strict guard, which has already counted the defect
            # (``_guard.internal_errors``): the thread lives on to send batches.
            _log.debug("reproit-otel: settling handed-over work failed: %r", exc)

    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._queue or self._stop.is_set():
                    self._sending = False
                    self._cond.notify_all()
                    return
                operation = self._queue.popleft()
                self._sending = True
                self._batch_number += 1
                number = self._batch_number
            try:
                environment = self._environment(number)
                build = build_capture_result(
                    operation, config=self.settings.capture, environment=environment
                )
            except Exception:
                _log.exception(
                    "reproit-otel could not build the capture batch of %r; it is dropped",
                    operation.get("operation"),
                )
                with self._cond:
                    self._stats["dropped_operations"] += 1
                continue
            batch, lost, outcome = build.batch, build.dropped_effects, None
            if lost and self.settings.capture_budget:
                try:
                    batch, lost, outcome = self._whole(operation, environment, build)
                except Exception:
                    _log.exception("reproit-otel could not send a heavy capture as an artifact")
                    outcome = "artifacts_failed"
            try:
                sent = self._send(canonical_json_bytes(batch))
            except Exception:
                # A defect while sending costs this batch, never the uploader thread.
                _log.exception("reproit-otel could not send a capture batch; it is dropped")
                sent = False
            with self._cond:
                self._stats["capture_dropped_effects"] += lost
                self._stats["capture_replaced_values"] += build.replaced_values
                if outcome is not None:
                    self._stats[outcome] += 1
                if sent:
                    self._stats["sent_batches"] += 1
                else:
                    self._stats["failed_batches"] += 1
                    self._stats["dropped_operations"] += 1


# -- process hooks ---------------------------------------------------------------------------

_live_uploaders: weakref.WeakSet[Uploader] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for uploader in list(_live_uploaders):
        uploader._after_fork_in_child()


def _register_exit_flush(uploader: Uploader) -> None:
    reference = weakref.ref(uploader)

    def exit_flush() -> None:
        alive = reference()
        if alive is not None:
            alive._exit_flush()

    atexit.register(exit_flush)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
