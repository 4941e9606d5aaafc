"""The answer replay serves for a recorded HTTP exchange (PROTOCOL 7.4).

:func:`prepare_answer` works out, once per capsule load, what a call that consumes a recorded
exchange gets back: a :class:`ServedResponse` with the recorded status, headers, the exact
body bytes and their stream chunks, or the reason the exchange fails closed (its body or its
stream boundaries were truncated at capture). :func:`diverged_response` is the ``599``
answer of a diverged or fail-closed call. :mod:`reproit_otel.wire.replay` matches the call
and re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from reproit_otel.wire._js import UNSET, is_js_integer, utf8_bytes
from reproit_otel.wire.canonical import js_items, ordered_json
from reproit_otel.wire.exact_body import served_bytes

__all__ = [
    "DIVERGENCE_STATUS",
    "ServedResponse",
    "diverged_response",
    "prepare_answer",
    "split_chunk_bytes",
    "split_chunks",
]

DIVERGENCE_STATUS: Final = 599
"""The HTTP status served for a diverged or fail-closed call."""

_STRIPPED_HEADERS: Final = ("content-length", "transfer-encoding", "content-encoding")


@dataclass(frozen=True)
class ServedResponse:
    """What replay answers an HTTP call with.

    ``status`` is the recorded status (200 when none was recorded; an ``int`` in every
    capsule reproit writes, any other recorded value is passed through). ``headers`` are
    the recorded response headers minus ``content-length``,
    ``transfer-encoding`` and ``content-encoding``; ``body_text`` is the recorded body as text
    (PROTOCOL 7.4 step 4) and ``body`` the bytes to serve: the UTF-8 of ``body_text``, or the
    exact bytes of a body recorded with ``bodyBase64`` (see :mod:`reproit_otel.wire.exact_body`);
    ``chunks`` are ``body`` cut at the recorded stream boundaries, or ``None`` when the body
    is delivered whole.

    The answer to a recorded exchange is worked out once, when the capsule is loaded, and the
    same object is handed to every call that consumes that exchange: treat it as read-only.
    """

    status: Any
    headers: dict[str, Any]
    body_text: str
    chunks: list[bytes] | None = None
    recorded: Mapping[str, Any] | None = None
    """The matched exchange's recorded ``response`` object (``None`` on a divergence)."""
    divergence_line: str | None = None
    """The ``REPROIT:DIVERGENCE`` line this call produced, if it diverged."""
    body: bytes = b""
    """The bytes served (see above)."""


def diverged_response(reason: str, line: str | None) -> ServedResponse:
    """The ``599`` answer of a call that diverged or failed closed for ``reason``."""
    text = ordered_json({"reproit": reason})
    return ServedResponse(
        status=DIVERGENCE_STATUS,
        headers={"content-type": "application/json"},
        body_text=text,
        divergence_line=line,
        body=utf8_bytes(text),
    )


def split_chunks(text: str, lengths: Sequence[Any]) -> list[bytes]:
    """Cut the UTF-8 bytes of ``text`` at recorded chunk lengths (PROTOCOL 7.4).

    One chunk per recorded length, always: a length that is not a positive integer counts as
    0, chunks are clamped to the bytes left, and the last chunk takes whatever remains (so a
    chunk may be empty, and a multi-byte character may be split).
    """
    return split_chunk_bytes(utf8_bytes(text), lengths)


def split_chunk_bytes(data: bytes, lengths: Sequence[Any]) -> list[bytes]:
    """:func:`split_chunks` for a body that is already bytes."""
    total = len(data)
    chunks: list[bytes] = []
    offset = 0
    for index, length in enumerate(lengths):
        size = int(length) if is_js_integer(length) and length > 0 else 0
        end = total if index == len(lengths) - 1 else min(offset + size, total)
        chunks.append(data[offset:end])
        offset = end
    return chunks


def _served_status(response: Mapping[str, Any]) -> Any:
    status = response.get("status", UNSET)
    if status is None or status is UNSET:
        return 200
    if is_js_integer(status):
        return int(status)
    return status  # not written by reproit; served as recorded, as the reference does


def prepare_answer(exchange: Mapping[str, Any]) -> ServedResponse | str:
    """The answer to serve for a recorded HTTP exchange, or the reason it fails closed."""
    response = exchange.get("response", UNSET)
    if not isinstance(response, Mapping):
        response = {}
    if response.get("truncated", UNSET) is True:
        # The capture kept the body's identity, not its bytes: serving a guess would lie.
        return "truncated-exchange-body"
    recorded_headers = response.get("headers", UNSET)
    headers = dict(js_items(recorded_headers)) if isinstance(recorded_headers, Mapping) else {}
    for name in _STRIPPED_HEADERS:
        headers.pop(name, None)
    body, body_text = served_bytes(response)
    stream = response.get("stream", UNSET)
    lengths = stream.get("chunks", UNSET) if isinstance(stream, Mapping) else UNSET
    chunks: list[bytes] | None = None
    if isinstance(lengths, list):
        if stream.get("truncated", UNSET) is True:
            return "truncated-stream-boundaries"
        chunks = split_chunk_bytes(body, lengths)
    return ServedResponse(
        status=_served_status(response),
        headers=headers,
        body_text=body_text,
        chunks=chunks,
        recorded=response,
        body=body,
    )
