"""How one built capture reaches the ingest: the batch ``POST``, a heavy operation's artifact
``PUT``, their retries, and the warnings a failed delivery logs.

:class:`Sending` is a mixin of :class:`~reproit_otel.capture.uploader.Uploader` (which owns the
queue, the thread and the counters); its methods run on the uploader thread with no lock held.

* :meth:`Sending._send` POSTs one batch: attempts ``0..retry_limit``, 2xx is done, 4xx gives
  up at once, anything else waits :func:`backoff_ms` and tries again.
* :meth:`Sending._whole` sends an operation the 48 KiB batch bound cut as a content-addressed
  capsule artifact (``PUT <ingest>/v1/artifacts/<id>``, same key, timeout and retries as a
  batch) and returns the bounded batch that names it. Past the capture budget or the event
  cap, or when the ingest takes no artifacts (404, 405, 501) or the artifact cannot be
  delivered, the bounded batch goes as it is, ``partial`` with its counts, and the returned
  counter says why.
* :meth:`Sending._warn` logs a delivery problem (``reproit_otel.delivery``): the first of each
  cause, then every 100th, so an ingest that is down cannot flood the application's logs.

Each attempt goes through the standard library's ``http.client``, which no recorder patches;
the uploader thread runs inside OpenTelemetry's ``suppress_instrumentation`` context.
"""

from __future__ import annotations

import http.client
import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from reproit_otel.delivery import Delivery, describe_error, describe_status, endpoint_target
from reproit_otel.wire.artifacts import CAPSULE_MEDIA_TYPE, capsule_artifact, naming_artifact
from reproit_otel.wire.batch import (
    CaptureBuild,
    CaptureEnvironment,
    CaptureSettings,
    build_capture_result,
)

__all__ = ["USER_AGENT", "SendSettings", "Sending", "backoff_ms"]

_log = logging.getLogger("reproit_otel")

USER_AGENT = "reproit-otel-uploader"
_FIRST_WARNINGS = 1
_THEN_EVERY_WARNING = 100


def backoff_ms(attempt: int) -> int:
    """The pause after failed attempt ``attempt`` (0-based): 200, 400, 600, 800, 1000 ms."""
    return 200 * (attempt + 1)


class SendSettings(Protocol):
    """What delivery reads of the uploader's settings (``uploader.UploaderSettings`` has it).

    Named here so this module needs nothing from ``uploader.py``: the uploader imports its
    delivery half, never the other way round.
    """

    @property
    def endpoint(self) -> str: ...
    @property
    def api_key(self) -> str: ...
    @property
    def capture(self) -> CaptureSettings: ...
    @property
    def capture_budget(self) -> int: ...
    @property
    def request_timeout_ms(self) -> int: ...
    @property
    def retry_limit(self) -> int: ...


class Sending:
    """The delivery half of the uploader (a mixin: the uploader sets the attributes below)."""

    settings: SendSettings
    _stop: threading.Event
    """Set when the uploader closes: a retry pause ends at once and the delivery gives up."""
    _warnings: dict[str, int]
    """Warnings logged so far, by cause."""

    def _whole(
        self, operation: Mapping[str, Any], environment: CaptureEnvironment, build: CaptureBuild
    ) -> tuple[dict[str, Any], int, str]:
        """Send an operation the batch bound cut as a capsule artifact, within the budget.

        Returns the batch to send, the effects it loses, and the counter to add one to. Past
        the budget or the event cap (while recorded, or here), or when the ingest takes no
        artifacts (404, 405, 501) or the artifact cannot be delivered, the bounded batch goes
        as it is, ``partial`` with its counts.
        """
        # Effects not kept while recorded: no capsule of it is whole, so none is built.
        if operation.get("capped"):
            return build.batch, build.dropped_effects, "capture_over_event_cap"
        if operation.get("unheld"):
            return build.batch, build.dropped_effects, "capture_over_budget"
        budget = self.settings.capture_budget
        whole = build_capture_result(
            operation,
            config=self.settings.capture,
            environment=environment,
            payload_limit=budget,
        )
        artifact = None if whole.dropped_effects else capsule_artifact(whole.batch)
        if artifact is None or len(artifact[0]) > budget:
            return build.batch, build.dropped_effects, "capture_over_budget"
        data, descriptor = artifact
        status = self._send_artifact(descriptor["id"], data)
        if status is None or not 200 <= status < 300:
            refused = status in _NO_ARTIFACTS
            self._warn(
                Delivery(
                    "artifact-refused" if refused else "artifact-failed",
                    f"a heavy capture's artifact was not taken by the ingest at "
                    f"{endpoint_target(self.settings.endpoint)} "
                    f"({'no answer' if status is None else f'HTTP {status}'}): its batch was "
                    "sent bounded, with effects left out",
                    "run an ingest that takes artifacts (reproit-otel serve), or set "
                    "REPROIT_CAPTURE_BUDGET=0 to stop trying",
                )
            )
            kind = "artifacts_refused" if refused else "artifacts_failed"
            return build.batch, build.dropped_effects, kind
        completed = {name: d for name, d in build.partial.items() if name not in whole.partial}
        return naming_artifact(build.batch, descriptor, completed), 0, "artifacts_sent"

    def _send_artifact(self, identifier: str, data: bytes) -> int | None:
        """PUT the artifact with the batch's retries; the last status (``None``: no answer)."""
        path = _sibling_path(self.settings.endpoint, f"artifacts/{identifier}")
        status: int | None = None
        for attempt in range(self.settings.retry_limit + 1):
            outcome = self._post(data, method="PUT", path=path, content_type=CAPSULE_MEDIA_TYPE)
            status = outcome if isinstance(outcome, int) else None
            if status is not None and status < 500:
                return status
            if attempt < self.settings.retry_limit and self._stop.wait(backoff_ms(attempt) / 1000):
                break
        return status

    def _send(self, body: bytes) -> bool:
        """POST one batch with retries; True on a 2xx answer."""
        limit = self.settings.retry_limit
        outcome: int | Exception = 0
        for attempt in range(limit + 1):
            outcome = self._post(body)
            if isinstance(outcome, int) and 200 <= outcome < 300:
                return True
            if isinstance(outcome, int) and 400 <= outcome < 500:
                self._warn(describe_status(outcome, self.settings.endpoint))
                return False
            if attempt < limit and self._stop.wait(backoff_ms(attempt) / 1000):
                return False
        if isinstance(outcome, int):
            self._warn(describe_status(outcome, self.settings.endpoint))
        else:
            timeout = self.settings.request_timeout_ms
            self._warn(describe_error(outcome, self.settings.endpoint, timeout))
        return False

    def _warn(self, delivery: Delivery) -> None:
        """Log a delivery problem: the first of each cause, then every 100th."""
        count = self._warnings.get(delivery.cause, 0) + 1
        self._warnings[delivery.cause] = count
        if count <= _FIRST_WARNINGS or count % _THEN_EVERY_WARNING == 0:
            suffix = f" ({count} times so far)" if count > 1 else ""
            _log.warning("reproit-otel: %s%s", delivery.line(), suffix)

    def _post(
        self,
        body: bytes,
        *,
        method: str = "POST",
        path: str | None = None,
        content_type: str = "application/json",
    ) -> int | Exception:
        """One attempt: the HTTP status, or the network error (refused, DNS, timeout...)."""
        parts = urlsplit(self.settings.endpoint)
        timeout = self.settings.request_timeout_ms / 1000
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname or "", parts.port, timeout=timeout
            )
        if path is None:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {
            "authorization": f"Bearer {self.settings.api_key}",
            "content-type": content_type,
            "user-agent": USER_AGENT,
        }
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException) as error:
            _log.debug("reproit-otel upload attempt failed: %s", error)
            return error
        finally:
            connection.close()


# Answers of an ingest that has no artifact route (or does not allow PUT on it).
_NO_ARTIFACTS = frozenset({404, 405, 501})


def _sibling_path(endpoint: str, relative: str) -> str:
    """The path of ``relative`` beside the batch endpoint (``/v1/capture-batches`` gives
    ``/v1/<relative>``)."""
    return urlsplit(urljoin(endpoint, relative)).path
