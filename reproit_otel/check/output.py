"""What the application under ``reproit-otel check`` writes, read while it runs and kept bounded.

:class:`OutputPump` reads one of the child's pipes line by line on a daemon thread: it keeps
every line (``REPROIT:`` marker lines included: the verdict reads them) and echoes the other
lines as they come when ``check --verbose`` asks for it.

:func:`output_tail` is what a check shows after its verdict and puts in ``--json``: the
application's own lines (markers left out), the last :data:`TAIL_LINES`, each cut to
:data:`LINE_CHARS` characters. When those lines begin inside a Python traceback, the tail
reaches back to the traceback's first line, and through its chained causes
(``The above exception was the direct cause ...``) to the first of them, with the log line
that announced it (``Exception in ASGI application``, ``Internal Server Error: /path``):
a deep framework stack is shown whole, not cut at its 80th line from the end. It never
reaches back further than :data:`TRACEBACK_LINES` lines from the end (the earlier tracebacks
of a chain beyond that are left out, and a traceback whose first line lies beyond it is cut
as any other line).
"""

from __future__ import annotations

import threading
from typing import IO, Final, TextIO

__all__ = ["LINE_CHARS", "TAIL_LINES", "TRACEBACK_LINES", "OutputPump", "output_tail"]

TAIL_LINES: Final = 80
"""Lines of each of the application's streams a check keeps (the last ones)."""
TRACEBACK_LINES: Final = 400
"""How far back from the end the tail may reach to show a traceback it begins inside."""
LINE_CHARS: Final = 1000
"""Characters kept of one line."""

_MARKER = "REPROIT:"
_ECHO_LOCK = threading.Lock()
_HEAD = "Traceback (most recent call last):"
_CHAINS = frozenset(
    {
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
    }
)


class OutputPump:
    """Reads a child's pipe line by line into :attr:`lines`, echoing non-marker lines."""

    def __init__(self, stream: IO[bytes] | None, echo: TextIO | None) -> None:
        self.lines: list[str] = []
        self._stream = stream
        self._echo = echo
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._stream is None:
            return
        try:
            for raw in iter(self._stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.lines.append(line)
                if self._echo is not None and not line.startswith(_MARKER):
                    # Both pipes echo to one stream: a whole line at a time, never two mixed.
                    with _ECHO_LOCK:
                        self._echo.write(line + "\n")
                        self._echo.flush()
        finally:
            # The pump is the pipe's only reader: closed at its end, not left to the garbage
            # collector (a check run inside a test process would warn of the open file).
            self._stream.close()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the pipe to close."""
        self._thread.join(timeout)


def _indented(line: str) -> bool:
    return line.startswith((" ", "\t"))


def _traceback_start(lines: list[str], start: int, floor: int) -> int:
    """``start`` moved back to the first line of a traceback it falls inside (see the module
    docstring), never below ``floor``."""
    position = start
    for offset, line in enumerate(lines[start : start + 3]):
        if line in _CHAINS:  # it begins between two chained tracebacks: take the earlier one
            position = max(floor, start + offset - 2)
            break
    found = None
    while True:
        head = position
        while head > floor and lines[head] != _HEAD and _indented(lines[head - 1]):
            head -= 1
        if lines[head] != _HEAD and head > floor and lines[head - 1] == _HEAD:
            head -= 1
        if lines[head] != _HEAD:
            break
        found = head
        # A chained traceback: blank, the chain sentence, blank, then the earlier one's
        # exception line, which ends it.
        if (
            head - 4 >= floor
            and lines[head - 1] == ""
            and lines[head - 2] in _CHAINS
            and lines[head - 3] == ""
        ):
            position = head - 4
            continue
        break
    if found is None:
        return start
    announced = found - 1
    if announced >= floor and lines[announced] and not _indented(lines[announced]):
        return announced
    return found


def output_tail(lines: list[str]) -> list[str]:
    """The lines a check shows of one stream (see the module docstring)."""
    own = [line for line in lines if not line.startswith(_MARKER)]
    start = max(0, len(own) - TAIL_LINES)
    if start > 0:
        start = _traceback_start(own, start, max(0, len(own) - TRACEBACK_LINES))
    return [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + "..." for line in own[start:]]
