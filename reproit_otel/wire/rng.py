"""The replay random number stream (PROTOCOL 7.7, decision D2).

A capsule's envelope may carry a ``replaySeed``; replay then swaps the process's default
random source for this stream so two replays of one capsule draw the same numbers. It is the
standard xorshift64* generator ("RNG-S"): three shift-xor steps, each masked to 64 bits, and
the output ``(state * 0x2545F4914F6CDD1D) mod 2**64`` keeps its top 53 bits.

The seed is read as the reference reads it: its first 16 characters, right-padded with ``0``
to 16, as hexadecimal, with the lowest bit forced on (a zero state would be stuck at zero).
Seeds written by reproit are always 16 lowercase hex digits.

The stream makes replays repeatable; it does not reproduce what the application drew in
production.
"""

from __future__ import annotations

import random
from typing import Any, Final

from reproit_otel.wire._js import js_trim

__all__ = ["ReplayRNG", "parse_seed"]

_MASK: Final = (1 << 64) - 1
_MULTIPLIER: Final = 0x2545F4914F6CDD1D
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_TWO_53: Final = float(1 << 53)


def parse_seed(seed: str) -> int:
    """The initial xorshift state for ``seed``; raises :class:`ValueError` if it is not hex.

    Only the first 16 characters count; shorter seeds are right-padded with ``0``. The
    characters must be hex digits (no sign, prefix, underscore or white space).
    """
    if not isinstance(seed, str):
        raise ValueError(f"replay seed must be a string of hex digits, got {type(seed).__name__}")
    head = seed[:16]
    # The reference hands "0x" + the padded head to BigInt, which ignores trailing white
    # space; only a full 16-character head can end in white space.
    # (The "0" in front keeps js_trim from touching the start.)
    digits = js_trim("0" + head)[1:] if len(head) == 16 else head.ljust(16, "0")
    if seed == "" or digits == "" or any(char not in _HEX_DIGITS for char in digits):
        raise ValueError(
            f"replay seed {seed!r} is not hexadecimal; expected 16 hex digits such as "
            "'00ff00ff00ff00ff'"
        )
    return int(digits, 16) | 1


class ReplayRNG(random.Random):
    """The xorshift64* stream behind a capsule's ``replaySeed``.

    ``random()`` returns floats in ``[0, 1)``; ``draw53()`` the underlying 53-bit integers;
    ``getrandbits(k)`` builds ``k`` bits from 32-bit slices of ``random()``. As a
    :class:`random.Random`, every other method (``randint``, ``choice``, ``uniform``,
    ``shuffle``...) draws from this stream, so replay can bind the :mod:`random` module
    functions to one instance. Reseeding is a no-op: the capsule's seed stays in charge.
    """

    def __init__(self, seed: str) -> None:
        self._state = parse_seed(seed)
        super().__init__()

    def seed(self, *args: Any, **kwargs: Any) -> None:
        """Ignored: the stream keeps following the capsule's seed."""

    def getstate(self) -> tuple[Any, ...]:
        """The xorshift state, for :meth:`setstate`."""
        return ("reproit-xorshift64*", self._state, self.gauss_next)

    def setstate(self, state: tuple[Any, ...]) -> None:
        """Restore a state returned by :meth:`getstate`."""
        if len(state) != 3 or state[0] != "reproit-xorshift64*":
            raise ValueError("not a ReplayRNG state")
        self._state = int(state[1])
        self.gauss_next = state[2]

    def draw53(self) -> int:
        """Advance the state and return the next 53-bit draw."""
        state = self._state
        state ^= (state << 13) & _MASK
        state ^= state >> 7
        state ^= (state << 17) & _MASK
        self._state = state
        return ((state * _MULTIPLIER) & _MASK) >> 11

    def random(self) -> float:
        """The next float in ``[0, 1)`` (``draw53() / 2**53``)."""
        return self.draw53() / _TWO_53

    def getrandbits(self, k: int) -> int:
        """``k`` random bits: 32-bit slices ``int(random() * 2**32)`` joined, top ``k`` kept."""
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        if k == 0:
            return 0
        value = 0
        bits = 0
        while bits < k:
            value = (value << 32) | int(self.random() * 4294967296.0)
            bits += 32
        return value >> (bits - k)
