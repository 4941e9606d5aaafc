"""Read credentials so reproit-otel knows to keep them out of every recording.

::

    from reproit_otel import secrets

    password = secrets.get("IMAP_PASSWORD")            # None when unset
    token = secrets.get("EMBEDDING_TOKEN", default="")

:func:`get` reads the named environment variable (or the source given to :func:`set_source`)
and remembers the value: from then on it is replaced by the text placeholder ``$reproit``
wherever it appears in a recorded string (exchanges of every library, decision D8), and an
invoke boundary (``reproit_otel.boundary``) also scrubs it from object keys and from the
fixture files it writes. Values shorter than four characters are not scrubbed (they would
match ordinary text).

A boundary running in replay does not run the call, so the call reads no secret: replay needs
none. :func:`read_in_current_call` says which values the running boundary call has read.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from reproit_otel.capture.recording import register_secret_values

__all__ = ["get", "read_in_current_call", "set_source", "tracking_call"]

_source: Callable[[str], str | None] | None = None
_current_call: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "reproit_secrets_current_call", default=None
)


def set_source(source: Mapping[str, str] | Callable[[str], str | None] | None) -> None:
    """Read secrets from ``source`` (a mapping or a ``name -> value`` function) instead of
    the environment; ``None`` goes back to the environment."""
    global _source
    _source = source if source is None or callable(source) else source.get


def get(name: str, default: str | None = None) -> str | None:
    """The secret ``name`` (``default`` when it is not set), remembered for redaction."""
    value = _source(name) if _source is not None else os.environ.get(name)
    if value is None:
        return default
    register_secret_values([value])
    read = _current_call.get()
    if read is not None and value not in read:
        read.append(value)
    return value


@contextmanager
def tracking_call() -> Iterator[list[str]]:
    """Collect the secrets read while the block runs (an invoke boundary call)."""
    read: list[str] = []
    token = _current_call.set(read)
    try:
        yield read
    finally:
        _current_call.reset(token)


def read_in_current_call() -> tuple[str, ...]:
    """The secret values read so far by the boundary call running in this context."""
    read = _current_call.get()
    return () if read is None else tuple(read)
