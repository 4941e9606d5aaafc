"""Pin the determinism envelope of a capsule for a replay run (PROTOCOL 7.7, decision D9).

What is pinned, from the capsule's top-level ``envelope``:

* ``tz`` → the ``TZ`` environment variable, applied with :func:`time.tzset`.
* ``observedAtMs`` → the wall clock. The process clock starts at the recorded instant and keeps
  advancing: :func:`time.time`, :func:`time.time_ns`, :meth:`datetime.datetime.now`,
  :meth:`datetime.datetime.utcnow` and :meth:`datetime.date.today` all see it. This uses the
  maintained ``time-machine`` library (``pip install reproit-otel[replay]``) rather than
  patching C types by hand. Monotonic clocks are left alone.
* ``replaySeed`` → the module-level functions of :mod:`random` (``random``, ``getrandbits``,
  ``randint``, ``randrange``, ``choice``, ``choices``, ``sample``, ``uniform``, ``shuffle``
  and the distributions built on them) draw from the RNG-S stream of the seed; ``random.seed``
  becomes a no-op. Instances of :class:`random.Random` the application creates itself, and
  ``secrets``/``os.urandom``, are not affected. OpenTelemetry's default id generator also
  draws from the module-level :func:`random.getrandbits`: the global SDK
  ``TracerProvider``'s :class:`~opentelemetry.sdk.trace.id_generator.RandomIdGenerator` is
  given a private generator of its own, so the pinned stream serves the application alone
  and its values do not depend on how many spans came first (the health checks a replay
  waits on, for one). A provider set up after the replay is installed keeps drawing from
  the pinned stream. ``uuid.uuid4`` draws from a second stream derived from the seed.

:meth:`PinnedEnvelope.restart_clock` starts the clock again at ``observedAtMs`` when the
recorded request begins (``reproit_otel.replay.request_window``).

An absent field is not pinned. An unusable one (a ``tz`` holding a NUL, a seed that is not
hexadecimal, a clock beyond year 9999) is an error: :func:`pin_envelope` raises and the
replay does not arm (the capsule loader refuses such a capsule first). A seed given as an
integer is not pinned; :func:`pin_envelope` reports what it skipped.
"""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reproit_otel.errors import CapsuleError
from reproit_otel.wire.assessment import envelope_problem
from reproit_otel.wire.rng import ReplayRNG

__all__ = ["PinnedEnvelope", "pin_envelope"]

_RANDOM_FUNCTIONS = (
    "random",
    "getrandbits",
    "randint",
    "randrange",
    "choice",
    "choices",
    "sample",
    "uniform",
    "shuffle",
    "triangular",
    "betavariate",
    "expovariate",
    "gammavariate",
    "gauss",
    "lognormvariate",
    "normalvariate",
    "vonmisesvariate",
    "paretovariate",
    "weibullvariate",
    "randbytes",
    "seed",
)


class _ReplayRandom(random.Random):
    """A :class:`random.Random` whose stream is the replay RNG; reseeding does nothing."""

    def __init__(self, rng: ReplayRNG) -> None:
        self._rng = rng
        super().__init__(0)

    def seed(self, a: Any = None, version: int = 2) -> None:
        # The base constructor seeds once; after that the recorded stream is kept.
        if getattr(self, "_rng", None) is None:
            super().seed(a, version)

    def random(self) -> float:
        return self._rng.random()

    def getrandbits(self, k: int) -> int:
        return self._rng.getrandbits(k)


@dataclass
class PinnedEnvelope:
    """What :func:`pin_envelope` pinned, and how to undo it."""

    tz: str | None = None
    observed_at_ms: int | None = None
    replay_seed: str | None = None
    skipped: list[str] = field(default_factory=list)
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    _traveller: Any = field(default=None, repr=False)

    def restore(self) -> None:
        """Undo every pin, newest first."""
        while self._undo:
            self._undo.pop()()

    def restart_clock(self) -> None:
        """Start the pinned clock again at the recorded ``observedAtMs`` (the request begins).

        The recorded request started at that instant; a replay fires it after the boot, so
        without this the replayed clock would run ahead by the boot time.
        """
        current, observed = self._traveller, self.observed_at_ms
        if current is None or observed is None:
            return
        import time_machine

        fresh = time_machine.travel(observed / 1000.0, tick=True)
        current.stop()
        fresh.start()
        self._traveller = fresh


def _pin_tz(tz: str, pinned: PinnedEnvelope) -> None:
    previous = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    pinned.tz = tz

    def undo() -> None:
        if previous is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = previous
        time.tzset()

    pinned._undo.append(undo)


def _pin_clock(observed_at_ms: float, pinned: PinnedEnvelope) -> None:
    try:
        import time_machine
    except ImportError:
        pinned.skipped.append(
            "clock: time-machine is not installed (pip install 'reproit-otel[replay]')"
        )
        return
    traveller = time_machine.travel(observed_at_ms / 1000.0, tick=True)
    traveller.start()
    pinned.observed_at_ms = int(observed_at_ms)
    pinned._traveller = traveller

    def undo() -> None:
        current = pinned._traveller
        pinned._traveller = None
        if current is not None:
            current.stop()

    pinned._undo.append(undo)


def _pin_random(seed: str, pinned: PinnedEnvelope) -> None:
    try:
        rng = ReplayRNG(seed)
    except ValueError:
        pinned.skipped.append(f"random: seed {seed!r} is not hexadecimal")
        return
    instance = _ReplayRandom(rng)
    previous = {name: getattr(random, name) for name in _RANDOM_FUNCTIONS if hasattr(random, name)}
    for name in previous:
        setattr(random, name, getattr(instance, name))
    pinned.replay_seed = seed

    def undo() -> None:
        for name, function in previous.items():
            setattr(random, name, function)

    pinned._undo.append(undo)
    _private_telemetry_ids(pinned)
    _pin_uuid4(seed, pinned)


def _pin_uuid4(seed: str, pinned: PinnedEnvelope) -> None:
    """``uuid.uuid4`` draws from its own stream derived from the seed (run-to-run stable).

    A stream apart from :mod:`random`'s, so generating ids does not shift the values the
    application draws from :mod:`random`. References taken before the replay was installed
    (``default=uuid.uuid4`` in a model imported earlier) keep the original function; replay
    matching does not depend on the pin (see ``reproit_otel.wire.fresh``).
    """
    stream = random.Random(f"reproit-uuid4:{seed}")
    original = uuid.uuid4

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=stream.getrandbits(128), version=4)

    uuid.uuid4 = uuid4

    def undo() -> None:
        uuid.uuid4 = original

    pinned._undo.append(undo)


def _private_telemetry_ids(pinned: PinnedEnvelope) -> None:
    """Keep OpenTelemetry's span and trace ids off the pinned :mod:`random` stream."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    except ImportError:
        return
    generator = getattr(trace.get_tracer_provider(), "id_generator", None)
    if type(generator) is not RandomIdGenerator:
        return  # a proxy provider, or an id generator the application chose
    private = random.Random()  # seeded from os.urandom, never from the capsule

    def generate_span_id() -> int:
        while True:
            span_id = private.getrandbits(64)
            if span_id != trace.INVALID_SPAN_ID:
                return span_id

    def generate_trace_id() -> int:
        while True:
            trace_id = private.getrandbits(128)
            if trace_id != trace.INVALID_TRACE_ID:
                return trace_id

    generator.generate_span_id = generate_span_id  # type: ignore[method-assign]
    generator.generate_trace_id = generate_trace_id  # type: ignore[method-assign]

    def undo() -> None:
        for name in ("generate_span_id", "generate_trace_id"):
            vars(generator).pop(name, None)

    pinned._undo.append(undo)


def pin_envelope(envelope: Mapping[str, Any] | None) -> PinnedEnvelope:
    """Pin time zone, wall clock and :mod:`random` from a capsule ``envelope``.

    Raises :class:`~reproit_otel.errors.CapsuleError` for an envelope that breaks
    :func:`~reproit_otel.wire.assessment.envelope_problem` (nothing is pinned then).
    """
    pinned = PinnedEnvelope()
    if envelope is None:
        return pinned
    problem = envelope_problem(envelope, complete=False)
    if problem is not None:
        raise CapsuleError(f"capsule envelope: {problem}; replay cannot pin it")
    try:
        _pin_fields(envelope, pinned)
    except BaseException:
        pinned.restore()  # all or nothing
        raise
    return pinned


def _pin_fields(envelope: Any, pinned: PinnedEnvelope) -> None:
    tz = envelope.get("tz")
    if isinstance(tz, str) and tz.strip():
        _pin_tz(tz, pinned)
    observed = envelope.get("observedAtMs")
    if (
        isinstance(observed, (int, float))
        and not isinstance(observed, bool)
        and math.isfinite(observed)
    ):
        _pin_clock(observed, pinned)
    seed = envelope.get("replaySeed")
    if isinstance(seed, str) and seed:
        _pin_random(seed, pinned)
    elif seed is not None:
        pinned.skipped.append("random: an integer replaySeed is not pinned (PROTOCOL 7.7)")
