"""Connection limits of the ingest server: slow request heads and connections per client.

uvicorn bounds idle keep-alive connections but not a client that opens a connection and
sends its request head one byte at a time, nor how many connections one address holds open.
:func:`guarded_protocol` builds the HTTP protocol class ``reproit-otel serve`` gives uvicorn:

* a request head (request line and headers) must arrive within ``header_timeout`` seconds of
  the connection opening, or of the first byte of the next request on a kept-alive
  connection; otherwise the connection is closed;
* a client address may hold at most ``max_per_client`` connections at once; a connection
  beyond that is closed as soon as it opens.

The request body has its own bound (:class:`reproit_otel.ingest.guard.RequestGuard`).
Counting happens on the event loop only, so no lock is needed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["guarded_protocol"]


class _GuardedH11Protocol(H11Protocol):
    header_timeout: float = 10.0
    max_per_client: int = 32
    open_by_client: dict[str, int]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        self._counted: str | None = None
        super().connection_made(transport)
        address = self.client[0] if self.client else None
        if address is not None:
            held = self.open_by_client.get(address, 0) + 1
            self.open_by_client[address] = held
            self._counted = address
            if held > self.max_per_client:
                transport.close()
                return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        address, self._counted = self._counted, None
        if address is not None:
            left = self.open_by_client.get(address, 1) - 1
            if left > 0:
                self.open_by_client[address] = left
            else:
                self.open_by_client.pop(address, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        if self._head_timer is None and (before is None or before.response_complete):
            self._arm_head_timer()  # the first bytes of the next request on this connection
        super().data_received(data)
        if self.cycle is not before:
            self._disarm_head_timer()  # a whole request head arrived

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _disarm_head_timer(self) -> None:
        timer, self._head_timer = self._head_timer, None
        if timer is not None:
            timer.cancel()

    def _head_too_slow(self) -> None:
        self._head_timer = None
        idle = self.cycle is None or self.cycle.response_complete
        if idle and not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(*, header_timeout: float, max_per_client: int) -> Any:
    """An h11 protocol class for uvicorn (``Config(http=...)``) with these two limits."""
    return type(
        "IngestHttpProtocol",
        (_GuardedH11Protocol,),
        {
            "header_timeout": header_timeout,
            "max_per_client": max_per_client,
            "open_by_client": {},
        },
    )
