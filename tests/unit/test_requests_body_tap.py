"""The requests recorder's body tap and header snapshots, checked against their definitions.

A body tap sees a body piece by piece and must give the fields ``bounded_body`` gives for the
whole body (or its size and SHA-256 past the bound), and, with boundaries, the ``stream``
field ``StreamBoundaries`` gives for the lengths of the pieces. A header snapshot must give
the items and content type the live mapping had when it was taken.
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from reproit_otel.instrumentation._requests_record import (
    _FROM_STORE,
    _HOLD_LIMIT,
    BodyTap,
    RecordedCall,
    _content_type,
    _header_items,
    _headers_of,
)
from reproit_otel.wire.bounds import (
    MAX_BODY_BYTES,
    MAX_STREAM_CHUNKS,
    StreamBoundaries,
    bounded_body,
)

_pieces = st.lists(
    st.one_of(
        st.binary(max_size=3000),
        st.binary(min_size=MAX_BODY_BYTES - 2, max_size=MAX_BODY_BYTES + 2),
        st.text(max_size=50),
    ),
    max_size=8,
)


def _whole(pieces: list[bytes | str]) -> bytes:
    return b"".join(p.encode("utf-8") if isinstance(p, str) else p for p in pieces)


@settings(suppress_health_check=[HealthCheck.too_slow])  # big pieces: slow on a busy machine
@given(_pieces, st.sampled_from([None, "application/json", "text/plain"]))
def test_a_body_seen_in_pieces_has_the_fields_of_the_whole(
    pieces: list[bytes | str], content_type: str | None
) -> None:
    tap = BodyTap()
    for piece in pieces:
        tap.add(piece)
    whole = _whole(pieces)
    if len(whole) > MAX_BODY_BYTES:
        expected = {
            "bodyBytes": len(whole),
            "bodySha256": hashlib.sha256(whole).hexdigest(),
            "truncated": True,
        }
    else:
        expected = bounded_body(whole or None, content_type)
    assert tap.kept_size() == min(len(whole), MAX_BODY_BYTES + 1)  # what the budget counts
    assert tap.fields(content_type) == expected
    assert tap.size == len(whole)
    assert tap.stream(False) is None


def test_a_body_past_the_hold_limit_and_read_midway_has_the_fields_of_the_whole() -> None:
    # Past the hold limit pieces are folded as they come, and fields() may be asked for before
    # the body ends (it folds what is held, and later pieces go on from there).
    pieces = [bytes([n % 251]) * (_HOLD_LIMIT // 3 + n) for n in range(7)]
    tap = BodyTap()
    for number, piece in enumerate(pieces):
        tap.add(piece)
        if number == 1:
            midway = b"".join(pieces[:2])
            assert tap.fields(None)["bodySha256"] == hashlib.sha256(midway).hexdigest()
    whole = b"".join(pieces)
    assert tap.fields(None) == {
        "bodyBytes": len(whole),
        "bodySha256": hashlib.sha256(whole).hexdigest(),
        "truncated": True,
    }


def test_a_piece_the_reader_changes_later_is_recorded_as_it_was() -> None:
    # Only bytes pieces are held by reference; a bytearray or memoryview is copied when added.
    buffer = bytearray(b'{"a": 1}')
    tap = BodyTap()
    tap.add(buffer)
    tap.add(memoryview(buffer)[:0])
    buffer[:] = b'{"b": 2}'
    assert tap.fields("application/json") == bounded_body(b'{"a": 1}', "application/json")


@given(st.lists(st.integers(min_value=0, max_value=40), max_size=MAX_STREAM_CHUNKS + 20))
def test_boundaries_are_the_lengths_of_the_pieces(lengths: list[int]) -> None:
    tap = BodyTap(boundaries=True)
    expected = StreamBoundaries()
    for length in lengths:
        tap.add(b"x" * length)
        if length:  # an empty piece is no chunk
            expected.add(length)
    assert tap.stream(False) == expected.result(False)
    assert tap.stream(True) == expected.result(True)


def test_a_stream_past_the_chunk_cap_is_truncated() -> None:
    tap = BodyTap(boundaries=True)
    for _ in range(MAX_STREAM_CHUNKS + 3):
        tap.add(b"ab")
    assert tap.stream(False) == {"chunks": [2] * MAX_STREAM_CHUNKS, "truncated": True}


def test_a_requests_header_snapshot_keeps_the_items_and_type_it_had() -> None:
    headers = CaseInsensitiveDict({"Accept": "*/*", "CONTENT-type": b"text/plain; charset=x"})
    snapshot = headers._store.copy()  # type: ignore[attr-defined]
    items, content_type = list(_header_items(headers)), _content_type(headers)
    headers["Content-Type"] = "application/json"
    headers["X-Later"] = "1"
    got_items, got_type = _headers_of(snapshot, _FROM_STORE)
    assert (list(got_items), got_type) == (items, content_type)
    assert content_type == "text/plain; charset=x"
    empty_items, empty_type = _headers_of(CaseInsensitiveDict()._store.copy(), _FROM_STORE)  # type: ignore[attr-defined]
    assert (list(empty_items), empty_type) == ([], None)


def test_another_mapping_is_read_at_once() -> None:
    headers = {"Content-Type": "text/html", "content-type": "application/json"}
    items, content_type = _headers_of(_header_items(headers), _content_type(headers))
    assert (list(items), content_type) == (list(headers.items()), "application/json")


_call_pieces = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.just(b""),
        st.binary(min_size=_HOLD_LIMIT // 3, max_size=_HOLD_LIMIT // 3 + 5),
        st.text(max_size=5),
        st.binary(max_size=5).map(bytearray),
    ),
    max_size=MAX_STREAM_CHUNKS + 20,
)


@settings(suppress_health_check=[HealthCheck.too_slow])  # big pieces: slow on a busy machine
@given(_call_pieces, st.sampled_from([None, "application/json", "text/event-stream"]))
def test_a_call_holding_its_response_pieces_records_what_a_tap_fed_them_records(
    pieces: list[bytes | bytearray | str], content_type: str | None
) -> None:
    # A recorded call keeps bytes pieces itself until a tap is needed; whatever the pieces,
    # its tap must end up as one given every piece from the start.
    call = RecordedCall.begin(_NoRecorder(), _Prepared())  # type: ignore[arg-type]
    tap = BodyTap(boundaries=True)
    for piece in pieces:
        call._add(piece)
        tap.add(piece)
    size = tap.size
    assert call._held() == min(size, MAX_BODY_BYTES + 1)
    held = call._tap()
    assert held.size == size
    assert held.fields(content_type, exact=True) == tap.fields(content_type, exact=True)
    assert held.stream(content_type == "text/event-stream") == tap.stream(
        content_type == "text/event-stream"
    )


class _NoRecorder:
    """A recorder the call is never finished into (these tests only feed it body pieces)."""


class _Prepared:
    method = "GET"
    url = "http://example.test/"
    headers = CaseInsensitiveDict({"Accept": "*/*"})
    body = None
