"""Keep warnings and tracebacks on standard error when only OpenTelemetry's handler listens.

``opentelemetry-instrumentation-logging`` (which ``opentelemetry-bootstrap -a install``
adds) puts an OpenTelemetry ``LoggingHandler`` on the root logger. From then on Python's
last-resort handler, which prints a record nobody handles to standard error, never runs: a
warning or an error's traceback is exported as a log record and nothing is printed locally.

:class:`LocalFallbackHandler` restores the local line for the records it sees: it writes a
record (``WARNING`` and above) to standard error only when no handler other than
OpenTelemetry's (and its own kind) would handle it on the way to the root logger. Where the
application configured its own handler (``logging.basicConfig``, a framework's console
handler, ``OTEL_PYTHON_LOG_CORRELATION=true``, which calls ``basicConfig`` first) it stays
silent, so nothing is printed twice.

Under replay, ``reproit_otel.install()`` adds one to the root logger, so the replayed
application's traceback shows under ``reproit-otel check``. (reproit-otel's own warnings
have their fallback on the ``reproit_otel`` logger in every mode, ``_stderr.py``; this
handler counts that one as local, so nothing is printed twice.)
"""

from __future__ import annotations

import logging
import sys

__all__ = ["LocalFallbackHandler", "install_local_fallback", "uninstall_local_fallback"]

_FORMAT = "%(message)s"  # what Python's last-resort handler prints


def _exported_only(handler: logging.Handler) -> bool:
    """A handler that sends records away (OpenTelemetry's), or one of ours."""
    return isinstance(handler, LocalFallbackHandler) or type(handler).__module__.startswith(
        "opentelemetry."
    )


class LocalFallbackHandler(logging.Handler):
    """Writes a record to standard error when no local handler on its way would."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.setFormatter(logging.Formatter(_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        if _shown_locally(record):
            return
        try:
            stream = sys.stderr
            if stream is None:
                return
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def _shown_locally(record: logging.LogRecord) -> bool:
    # The manager's dict is read without logging's module lock (we run under our own).
    current: logging.Logger | logging.PlaceHolder | None = logging.Logger.manager.loggerDict.get(
        record.name
    )
    if not isinstance(current, logging.Logger):
        current = logging.getLogger() if record.name == "root" else None
    seen = 0
    while isinstance(current, logging.Logger) and seen < 64:
        for handler in current.handlers:
            if not _exported_only(handler) and record.levelno >= handler.level:
                return True
        if not current.propagate:
            return False
        current = current.parent
        seen += 1
    return False


def install_local_fallback(logger: logging.Logger) -> None:
    """Add a :class:`LocalFallbackHandler` to ``logger`` (once)."""
    if not any(isinstance(handler, LocalFallbackHandler) for handler in logger.handlers):
        logger.addHandler(LocalFallbackHandler())


def uninstall_local_fallback(logger: logging.Logger) -> None:
    """Remove the :class:`LocalFallbackHandler` of ``logger``, if any."""
    for handler in list(logger.handlers):
        if isinstance(handler, LocalFallbackHandler):
            logger.removeHandler(handler)
