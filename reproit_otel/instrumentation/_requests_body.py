"""The body taps of the requests recorder: what a body was, seen piece by piece.

A :class:`BodyTap` counts, keeps and hashes the pieces of one body as they pass, so that the
body fields of PROTOCOL section 4.2 (and the stream boundaries of section 4.5) can be built
later, only for an operation that is uploaded. :func:`_observe_request_body` puts a tap on
each kind of request body requests accepts without taking anything away from the server.
See :mod:`._requests_record` for how a recorded call uses them.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Iterator
from typing import Any

from reproit_otel.wire._js import utf8_bytes
from reproit_otel.wire.bounds import (
    MAX_BODY_BYTES,
    MAX_STREAM_CHUNKS,
    StreamBoundaries,
    StreamFields,
    bounded_body,
)
from reproit_otel.wire.exact_body import exact_body

__all__ = ["BodyTap"]

_READ_BLOCK = 65536
_KEPT = MAX_BODY_BYTES + 1  # bytes of a body kept: one more than fits tells "too big"
# Bytes of a body a tap holds by reference before it folds them as they come: a 64 KiB
# answer read whole costs a healthy request no copy and no hash; a long stream stays bounded.
_HOLD_LIMIT = 128 * 1024


class BodyTap:
    """Counts every byte given to it; keeps the first ``MAX_BODY_BYTES + 1`` and hashes the
    whole body when the body fields are asked for.

    The pieces are held by reference (a ``bytes`` piece cannot change; any other kind is
    copied) and folded into the kept prefix and the SHA-256 only by :meth:`fields`, which runs
    when a failing operation is built: a healthy request never copies or hashes its bodies, so
    its cost does not grow with their size. Past ``_HOLD_LIMIT`` bytes the pieces are folded
    as they arrive, so a tap never holds more than that. Small bodies are never hashed (the
    kept bytes are all of them).

    With ``boundaries`` it also notes each piece as one stream chunk (section 4.5): the
    lengths of the first ``MAX_STREAM_CHUNKS`` pieces are kept, later pieces only counted.
    """

    __slots__ = ("_chunks", "_folded", "_held", "_kept", "_pieces", "_sha", "size")

    def __init__(self, *, boundaries: bool = False) -> None:
        self._sha: Any = None
        self._kept = bytearray()
        self._held: list[bytes] = []
        self._folded = 0  # bytes already folded into the kept prefix and the hash
        self.size = 0
        self._chunks: list[int] | None = [] if boundaries else None
        self._pieces = 0

    def add(self, data: bytes | bytearray | memoryview | str) -> None:
        """Account for one piece (a ``str`` counts as its UTF-8 bytes)."""
        if data.__class__ is bytes:
            piece: Any = data
        else:
            piece = utf8_bytes(data) if isinstance(data, str) else bytes(data)
        count = len(piece)
        if not count:
            return
        total = self.size + count
        self.size = total
        self._held.append(piece)
        if total > _HOLD_LIMIT:
            self._fold()
        chunks = self._chunks
        if chunks is not None:
            self._pieces += 1
            if self._pieces <= MAX_STREAM_CHUNKS:
                chunks.append(count)

    def kept_size(self) -> int:
        """How many bytes the built body keeps: the first ``MAX_BODY_BYTES + 1`` at most (the
        pieces held until then are not counted: they are dropped with the operation)."""
        size = self.size
        return size if size < _KEPT else _KEPT

    def _fold(self) -> None:
        """Fold the held pieces, in order, into the kept prefix and the hash."""
        held = self._held
        if not held:
            return
        self._held = []
        kept = self._kept
        sha = self._sha
        seen = self._folded
        for piece in held:
            total = seen + len(piece)
            if total > _KEPT:
                if sha is None:  # the kept bytes are everything so far
                    sha = self._sha = hashlib.sha256(kept)
                sha.update(piece)
            if seen < _KEPT:  # the kept bytes are the first min(size, _KEPT) bytes
                kept += piece[: _KEPT - seen]
            seen = total
        self._folded = seen

    def fields(self, content_type: str | None, *, exact: bool = False) -> dict[str, Any]:
        """The body fields of section 4.2 for everything added so far.

        ``exact`` (response bodies) records them so that a replay serves these very bytes
        (:func:`~reproit_otel.wire.exact_body.exact_body`).
        """
        self._fold()
        if self.size > MAX_BODY_BYTES:
            sha = self._sha if self._sha is not None else hashlib.sha256(self._kept)
            return {"bodyBytes": self.size, "bodySha256": sha.hexdigest(), "truncated": True}
        if exact:
            return exact_body(bytes(self._kept), content_type)
        return bounded_body(bytes(self._kept) if self.size else None, content_type)

    def stream(self, event_stream: bool) -> StreamFields | None:
        """The ``stream`` field of the pieces added so far (``None``: no boundaries kept)."""
        if self._chunks is None:
            return None
        boundaries = StreamBoundaries()
        for length in self._chunks:
            boundaries.add(length)
        for _ in range(self._pieces - len(self._chunks)):
            boundaries.add(0)  # past the cap a piece is only counted, whatever its length
        return boundaries.result(event_stream)


# ------------------------------------------------------------------------------ request body


class _TeeReader(io.RawIOBase):
    """An unseekable file handed to the transport: records what it reads, gives bytes."""

    def __init__(self, source: Any, tap: BodyTap) -> None:
        super().__init__()
        self._source = source
        self._tap = tap

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        data = self._source.read() if size is None or size < 0 else self._source.read(size)
        if isinstance(data, str):
            data = utf8_bytes(data)  # what urllib3 sends for a text file
        data = bytes(data or b"")
        self._tap.add(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _tee_iterable(source: Iterable[Any], tap: BodyTap) -> Iterator[Any]:
    """Yields ``source``'s pieces unchanged, recording each as the transport pulls it."""
    for piece in source:
        if isinstance(piece, (bytes, bytearray, memoryview, str)):
            tap.add(piece)
        yield piece


def _read_and_rewind(source: Any, tap: BodyTap) -> bool:
    """Read a seekable file to its end into ``tap`` and seek back; False if it cannot seek."""
    try:
        if not source.seekable():
            return False
        position = source.tell()
    except (AttributeError, OSError, ValueError):
        return False
    try:
        while True:
            block = source.read(_READ_BLOCK)
            if not block:
                break
            tap.add(block)
    finally:
        source.seek(position)
    return True


def _observe_request_body(body: Any, tap: BodyTap) -> Any:
    """Record what ``body`` will send; return what the transport must be given instead."""
    if body is None:
        return body
    if isinstance(body, (str, bytes, bytearray)):
        tap.add(body)
        return body
    if hasattr(body, "read"):
        if _read_and_rewind(body, tap):
            return body
        return _TeeReader(body, tap)
    if isinstance(body, (list, tuple)):
        for piece in body:  # re-iterable: reading it takes nothing away
            if isinstance(piece, (bytes, bytearray, memoryview, str)):
                tap.add(piece)
        return body
    try:
        view = memoryview(body)
    except TypeError:
        return _tee_iterable(body, tap)
    tap.add(view)
    return body
