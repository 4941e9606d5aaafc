"""Reading the JSON texts inside vector cases the way the reference read them.

The vectors' README says a ``json`` input was parsed with ``JSON.parse`` extended to accept
``NaN``/``Infinity``/``-Infinity``, which is what :func:`json.loads` accepts by default. The
only help Python needs is stack room: some inputs nest 1500 levels deep, past the default
recursion limit of its decoder, so the limit is raised around the call and restored after.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_DEEP_LIMIT = 20_000


@contextmanager
def deep_recursion(limit: int = _DEEP_LIMIT) -> Iterator[None]:
    """Raise the interpreter recursion limit for the duration of the block."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def parse_reference_json(text: str) -> Any:
    """``JSON.parse(text)`` with the NaN/Infinity extension of the vector corpus."""
    with deep_recursion():
        return json.loads(text)
