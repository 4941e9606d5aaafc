"""The ``REPROIT:`` marker lines of CI mode and where they are written (decision D10).

``REPROIT:CI-CAPSULE {"file":...,"operation":...}`` follows every spooled capsule;
``REPROIT:CI-TEST {"operation":...,"status":"passed"|"failed","failure"?:...}`` reports the
target test of a replay run. The JSON is ``JSON.stringify`` text (insertion order, raw UTF-8;
PROTOCOL 1.2) and each line ends with ``\\n``.

Markers go to the process's real standard error, never through :mod:`logging` or a
``sys.stderr`` that pytest replaced: :class:`RealStderr` writes to a duplicate of file
descriptor 2 taken before pytest started capturing, or, when the plugin was loaded too late
for that, to descriptor 2 while pytest's capture is suspended. So no ``-s`` is needed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final

from reproit_otel.wire.canonical import ordered_json

__all__ = [
    "CI_CAPSULE_MARKER",
    "CI_TEST_MARKER",
    "RealStderr",
    "capsule_marker",
    "test_marker",
]

CI_CAPSULE_MARKER: Final = "REPROIT:CI-CAPSULE "
CI_TEST_MARKER: Final = "REPROIT:CI-TEST "


def capsule_marker(file: str, operation: str) -> str:
    """The line announcing a spooled capsule (without the newline)."""
    return CI_CAPSULE_MARKER + ordered_json({"file": file, "operation": operation})


def test_marker(operation: str, failure: str | None) -> str:
    """The replay result line: ``passed`` when ``failure`` is None, else ``failed`` with it."""
    payload: dict[str, Any] = {"operation": operation}
    if failure is None:
        payload["status"] = "passed"
    else:
        payload["status"] = "failed"
        payload["failure"] = failure
    return CI_TEST_MARKER + ordered_json(payload)


test_marker.__test__ = False  # type: ignore[attr-defined]  # not a test for pytest


class RealStderr:
    """Writes whole lines to the real standard error.

    ``fd`` is a duplicate of descriptor 2 taken before output capturing began, or None to
    write to descriptor 2 itself inside ``suspend()`` (a context manager that pauses
    capturing, such as pytest's ``CaptureManager.global_and_fixture_disabled``).
    """

    def __init__(
        self,
        fd: int | None = None,
        suspend: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.fd = fd
        self.suspend = suspend

    def write_line(self, line: str) -> None:
        """Write ``line`` and a newline in one unbuffered write; errors are ignored."""
        data = (line.rstrip("\n") + "\n").encode("utf-8", "surrogatepass")
        if self.fd is not None:
            self._write(self.fd, data)
            return
        pause = self.suspend() if self.suspend is not None else contextlib.nullcontext()
        with pause:
            self._write(2, data)

    @staticmethod
    def _write(fd: int, data: bytes) -> None:
        try:
            while data:
                written = os.write(fd, data)
                data = data[written:]
        except OSError:
            pass
