"""The response body reads of a recorded requests call.

The reads of one urllib3 response go through one small :class:`_BodyReads` object whose bound
methods are set on that response, and record each piece the application receives into its
:class:`~reproit_otel.instrumentation._requests_record.RecordedCall`; the call finishes when
the body ends, breaks off or is closed. See :mod:`._requests_record` for the whole story,
finalizers and locks included.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from urllib3 import response as _urllib3_response
from urllib3.response import HTTPResponse

from reproit_otel._guard import absorb
from reproit_otel.capture.recording import hand_over
from reproit_otel.instrumentation._requests_body import _HOLD_LIMIT

if TYPE_CHECKING:
    from reproit_otel.instrumentation._requests_record import RecordedCall

# urllib3's buffer of decoded bytes (urllib3 2): _drained reads its size without a call.
_QueueBuffer: Any = getattr(_urllib3_response, "BytesQueueBuffer", None)
# HTTPResponse.read1 exists from urllib3 2.2 on. Before that (1.26, 2.0, 2.1) a response is
# tapped by the general path, which sets only the methods the response has.
_FAST_PATH = callable(getattr(HTTPResponse, "read1", None))


def _exhausted(raw: Any) -> bool:
    """True when nothing is left to read from the urllib3 response ``raw``."""
    try:
        if not raw.closed:
            return False
    except Exception:
        return False
    return _drained(raw)


def _drained(raw: Any) -> bool:
    """For a closed urllib3 response ``raw``: True when nothing is left in its buffers."""
    try:
        buffered = raw._decoded_buffer
    except AttributeError:
        buffered = None
    if buffered is not None:
        try:  # urllib3's own buffer: its length is its _size, read without a call
            size = buffered._size if buffered.__class__ is _QueueBuffer else len(buffered)
        except AttributeError:
            size = len(buffered)
        if size > 0:
            return False
    try:
        decoder = raw._decoder
    except AttributeError:
        return True
    return not (decoder is not None and getattr(decoder, "has_unconsumed_tail", False))


class _BodyReads:
    """The body reads of one urllib3 response, recorded into its :class:`RecordedCall`.

    Its bound methods ``read``, ``read1``, ``read_chunked`` and ``close`` are set as instance
    attributes of that one response (the class, other responses and the bytes the application
    receives stay exactly as they were); :meth:`untap` takes them off again. A ``close()`` that
    urllib3 makes inside a read (it does before raising a protocol error) is settled by that
    read, so the error is recorded with the exchange.

    While the taps are set the response, this object and the call form a reference cycle;
    the call's finish removes the taps and lets go of this object, so reference counting
    frees the response. Only a stream neither read to its end nor closed is left to the cyclic
    collector, and the call is finished after it is collected: the response's own finalizer
    closes it and :meth:`__del__` covers any other body object, and both only hand the finish
    over (:func:`~reproit_otel.capture.recording.hand_over`), never finish on the collector's
    thread.
    """

    __slots__ = (
        "_alive",
        "_call",
        "_chunked",
        "_close",
        "_close_pending",
        "_depth",
        "_previous",
        "_raw",
        "_read",
        "_read1",
    )

    def __init__(self, call: RecordedCall, raw: Any) -> None:
        self._call = call
        self._raw = raw
        self._depth = 0  # reads under way: a read inside a read passes through
        self._close_pending = False
        self._previous: dict[str, Any] | None = None  # instance attributes the taps replaced
        try:  # dead once the collector is finalizing the response: see _collected()
            self._alive: Any = weakref.ref(raw)
        except TypeError:  # a body object without weak references: every close hands over
            self._alive = None
        own = raw.__dict__
        if (
            _FAST_PATH
            and raw.__class__ is HTTPResponse
            and not ("read" in own or "read1" in own or "read_chunked" in own or "close" in own)
        ):
            self._read: Any = raw.read
            self._read1: Any = raw.read1
            self._chunked: Any = raw.read_chunked
            self._close: Any = raw.close
            own["read"] = self.read
            own["read1"] = self.read1
            own["read_chunked"] = self.read_chunked
            own["close"] = self.close
        else:
            self._tap_any(raw, own)

    def _tap_any(self, raw: Any, own: dict[str, Any]) -> None:
        """Set the taps on a body object of any kind (the methods it does not have are left)."""
        chunked = getattr(raw, "read_chunked", None)
        self._chunked = chunked if callable(chunked) else None
        self._close = raw.close
        self._read = raw.read
        read1 = getattr(raw, "read1", None)
        self._read1 = read1 if callable(read1) else None
        taps: dict[str, Any] = {"read": self.read}
        if self._read1 is not None:
            taps["read1"] = self.read1
        if self._chunked is not None:
            taps["read_chunked"] = self.read_chunked
        taps["close"] = self.close
        self._previous = {name: own[name] for name in taps if name in own} or None
        own.update(taps)

    def untap(self) -> None:
        """Give the response its own methods back (or what was set on it before the taps)."""
        own = self._raw.__dict__
        previous = self._previous
        for name, tap in (
            ("read", self.read),
            ("read1", self.read1),
            ("read_chunked", self.read_chunked),
            ("close", self.close),
        ):
            if name in own and own[name] == tap:
                if previous is not None and name in previous:
                    own[name] = previous[name]
                else:
                    del own[name]

    def __del__(self) -> None:
        # Collected before its end: the bytes read so far are the body. A finalizer runs on
        # whatever thread allocates, maybe inside a locked section: it only hands over.
        call = self._call
        if not call._done:
            hand_over(call.finish)

    def _collected(self) -> bool:
        """True when the collector is finalizing the response: it clears the weak references
        to what it finalizes before running any finalizer."""
        alive = self._alive
        return alive is None or alive() is None

    def read(self, *args: Any, **kwargs: Any) -> Any:
        # _reading(self._read, ...) and _settle inline: every body read passes here.
        call = self._call
        if self._depth or call._done:  # a read inside a read (the outer one records), or late
            return self._read(*args, **kwargs)
        self._depth += 1
        try:
            data = self._read(*args, **kwargs)
        except Exception as error:
            call.finish(error)
            raise
        finally:
            self._depth -= 1
        if not data:
            self._settle(data, args, kwargs)
            return data
        if not call._done:
            try:  # call._add(data), its usual case inline: bytes held by reference
                if data.__class__ is bytes and call._response_body is None:
                    size = call._size + len(data)
                    if size <= _HOLD_LIMIT:
                        call._pieces.append(data)
                        call._size = size
                    else:
                        call._add(data)
                else:
                    call._add(data)
            except Exception as exc:  # never let a defect of ours reach the read
                absorb("requests.record_body", exc)
        if self._close_pending:
            call.finish()
            return data
        raw = self._raw
        try:  # _exhausted(raw), its first step inline: most reads leave the body open
            closed = raw.closed
        except Exception:
            closed = False
        if closed and _drained(raw):
            call.finish()
        return data

    def read1(self, *args: Any, **kwargs: Any) -> Any:
        return self._reading(self._read1, args, kwargs)

    def _reading(
        self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """One ``read``/``read1`` of the body through ``method``, recorded."""
        call = self._call
        if self._depth or call._done:  # a read inside a read (the outer one records), or late
            return method(*args, **kwargs)
        self._depth += 1
        try:
            data = method(*args, **kwargs)
        except Exception as error:
            call.finish(error)
            raise
        finally:
            self._depth -= 1
        self._settle(data, args, kwargs)
        return data

    def _settle(self, data: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """After a read: record what it gave; finish when the body ended or was closed."""
        call = self._call
        if data:
            if not call._done:
                try:
                    call._add(data)
                except Exception as exc:  # never let a defect of ours reach the read
                    absorb("requests.record_body", exc)
            if self._close_pending or _exhausted(self._raw):
                call.finish()
        elif (
            self._close_pending
            or (args[0] if args else kwargs.get("amt")) != 0
            or _exhausted(self._raw)
        ):
            call.finish()

    def read_chunked(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        call = self._call
        pieces = self._chunked(*args, **kwargs)
        try:
            while True:
                self._depth += 1
                try:
                    piece = next(pieces)
                except StopIteration:
                    break
                except Exception as error:
                    call.finish(error)
                    raise
                finally:
                    self._depth -= 1
                if piece and not call._done:
                    try:
                        call._add(piece)
                    except Exception as exc:
                        absorb("requests.record_body", exc)
                yield piece
        finally:
            pieces.close()  # the reader stopped early: close() or garbage collection finishes
        call.finish()

    def close(self) -> None:
        try:
            self._close()
        finally:
            if self._depth:
                self._close_pending = True
            elif self._collected():  # the response's finalizer: never finish on its thread
                hand_over(self._call.finish)
            else:
                self._call.finish()
