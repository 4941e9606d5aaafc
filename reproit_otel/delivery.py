"""Why a capture batch did not reach the ingest, said as what to do about it.

The uploader and ``reproit-otel doctor --ping`` describe a failed POST the same way: a
:class:`Delivery` names its cause (``refused-401``, ``unreachable-dns``, ...: one warning per
cause, then rate-limited), what happened, and one line that fixes it, naming the variable to
change (``REPROIT_API_KEY``, ``REPROIT_ENDPOINT``, ``REPROIT_REQUEST_TIMEOUT_MS``) or the
ingest's flag. Pure: no I/O.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Delivery", "describe_error", "describe_status", "endpoint_target"]

_KEY_FIX = (
    "set REPROIT_API_KEY to a key the ingest accepts (reproit-otel serve --api-key KEY, "
    "or REPROIT_INGEST_API_KEYS where it runs)"
)


@dataclass(frozen=True)
class Delivery:
    """A failed delivery: its cause, what happened, and the fix."""

    cause: str
    """A short stable key; warnings are counted per cause."""
    message: str
    fix: str

    def line(self) -> str:
        """The message and its fix, as one line."""
        return f"{self.message}; fix: {self.fix}"


def endpoint_target(endpoint: str) -> str:
    """``scheme://host:port/path`` of an endpoint, without credentials or query."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname}:{port}{parts.path}"


def describe_status(status: int, endpoint: str) -> Delivery:
    """An answer that is not 2xx."""
    target = endpoint_target(endpoint)
    if status in (401, 403):
        return Delivery(
            f"refused-{status}",
            f"the ingest at {target} refused the API key (HTTP {status}): capture batches are "
            "dropped",
            _KEY_FIX,
        )
    if status in (404, 405):
        return Delivery(
            f"refused-{status}",
            f"{target} has no capture-batch route (HTTP {status}): REPROIT_ENDPOINT must be "
            "the full URL of the ingest's POST route",
            "export REPROIT_ENDPOINT=http://HOST:PORT/v1/capture-batches "
            "(the address reproit-otel serve prints)",
        )
    if status == 413:
        return Delivery(
            "refused-413",
            f"the ingest at {target} refused a capture batch as too large (HTTP 413)",
            "raise the ingest's limit (reproit-otel serve --max-body-bytes N)",
        )
    if 400 <= status < 500:
        return Delivery(
            f"refused-{status}",
            f"the ingest at {target} refused a capture batch with HTTP {status} (not retried)",
            "see the ingest's log for the rule the batch broke",
        )
    return Delivery(
        f"status-{status}",
        f"the ingest at {target} answered HTTP {status} to every attempt",
        "see the ingest's log; batches are retried REPROIT_RETRY_LIMIT times",
    )


def describe_error(error: BaseException, endpoint: str, timeout_ms: int) -> Delivery:
    """A POST that got no answer: refused, DNS, timeout, TLS or another network error."""
    target = endpoint_target(endpoint)
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if isinstance(error, ConnectionRefusedError):
        return Delivery(
            "unreachable-refused",
            f"nothing listens at {target} (connection refused): capture batches are dropped",
            "start the ingest (reproit-otel serve) or correct REPROIT_ENDPOINT",
        )
    if isinstance(error, socket.gaierror):
        return Delivery(
            "unreachable-dns",
            f"the host name {host!r} of {target} does not resolve (DNS: {error.strerror or error})"
            ": capture batches are dropped",
            "correct the host in REPROIT_ENDPOINT",
        )
    if isinstance(error, TimeoutError):  # socket.timeout is TimeoutError since 3.10
        return Delivery(
            "unreachable-timeout",
            f"no answer from {target} within {timeout_ms} ms (timeout): capture batches are "
            "dropped",
            "check that REPROIT_ENDPOINT is the ingest's address and that it is reachable from "
            "here, or raise REPROIT_REQUEST_TIMEOUT_MS",
        )
    if isinstance(error, ssl.SSLError):
        return Delivery(
            "unreachable-tls",
            f"TLS with {target} failed ({error}): capture batches are dropped",
            "check REPROIT_ENDPOINT's scheme (http or https) and the ingest's certificate",
        )
    return Delivery(
        f"unreachable-{type(error).__name__}",
        f"{target} could not be reached ({type(error).__name__}: {error}): capture batches "
        "are dropped",
        "check REPROIT_ENDPOINT and the network between this host and the ingest",
    )
