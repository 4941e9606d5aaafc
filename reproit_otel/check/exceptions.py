"""The exception half of a production verdict: was it the recorded failure that came back?

A production capsule recorded by reproit-otel carries the exception its request raised
(``return`` output ``{"error": {...}}``, ``wire/exception.py``); the replayed application
reports the exception its replayed request raised in a ``REPROIT:EXCEPTION`` line
(``failures.py``). When the replay answers 5xx, ``check`` compares the two:

* same type and same innermost application frame (file and function) -> *reproduced*;
* another exception (or the same type from elsewhere) -> a different failure: *inconclusive*,
  exit 3, both exceptions printed;
* a capsule without an exception (older captures, other SDKs), or a replay that reported none,
  keeps the status comparison alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from reproit_otel.failures import EXCEPTION_MARKER
from reproit_otel.wire.exception import describe_exception, error_of_output, same_failure

__all__ = ["judge_exception", "recorded_exception", "replayed_exception"]


def recorded_exception(events: Iterable[Any]) -> dict[str, Any] | None:
    """The exception the capsule's last ``return`` event carries, else ``None``."""
    returned = None
    for event in events:
        if isinstance(event, Mapping) and event.get("kind") == "return":
            returned = event
    return None if returned is None else error_of_output(returned.get("output"))


def replayed_exception(lines: Iterable[str], operation: str) -> dict[str, Any] | None:
    """The exception of the last ``REPROIT:EXCEPTION`` line for ``operation``, else ``None``.

    Lines for other operations (the boot probe's ``GET /``, say) are skipped.
    """
    found = None
    for line in lines:
        if not line.startswith(EXCEPTION_MARKER):
            continue
        try:
            payload = json.loads(line[len(EXCEPTION_MARKER) :])
        except ValueError:
            continue
        if not isinstance(payload, dict) or payload.get("operation") != operation:
            continue
        error = payload.get("exception")
        if error_of_output({"error": error}) is not None:
            found = error
    return found


def judge_exception(
    status_verdict: str,
    recorded: Mapping[str, Any] | None,
    replayed: Mapping[str, Any] | None,
) -> tuple[bool, str] | None:
    """For a *reproduced* status verdict: ``(same failure, reason)``; ``None`` when the
    exceptions cannot decide (no recorded or no replayed exception, another verdict)."""
    if status_verdict != "reproduced" or recorded is None or replayed is None:
        return None
    if same_failure(recorded, replayed):
        return True, (
            "the replayed request raised the recorded exception again (same type, same "
            "innermost application frame)"
        )
    return False, (
        f"a different failure: the replay raised {describe_exception(replayed)}; "
        f"the recording raised {describe_exception(recorded)}"
    )
