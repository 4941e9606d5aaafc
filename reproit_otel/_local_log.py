"""Keep warnings and tracebacks on standard error when only OpenTelemetry's handler listens.

``opentelemetry-instrumentation-logging`` (which ``opentelemetry-bootstrap -a install``
adds) puts an OpenTelemetry ``LoggingHandler`` on the root logger. From then on Python's
last-resort handler, which prints a record nobody handles to standard error, never runs: a
warning or an error's traceback is exported as a log record and nothing is printed locally.

:class:`LocalFallbackHandler` restores the local line for the records it sees: it writes a
record (``WARNING`` and above) to standard error only when no handler on the way to the root
logger would show it: OpenTelemetry's (and its own kind) do not, nor do handlers that send
records elsewhere (``NullHandler``, mail, HTTP, socket and syslog handlers, Django's
``AdminEmailHandler``), nor a handler whose filters drop the record (Django's console
handler with ``DEBUG`` off, so a Django application's "Internal Server Error" traceback
shows). Where the application configured its own handler that shows the record
(``logging.basicConfig``, a framework's console handler, ``OTEL_PYTHON_LOG_CORRELATION=true``,
which calls ``basicConfig`` first) it stays silent, so nothing is printed twice.

Under replay, ``reproit_otel.install()`` adds one to the root logger, so the replayed
application's traceback shows under ``reproit-otel check``. (reproit-otel's own warnings
have their fallback on the ``reproit_otel`` logger in every mode, ``_stderr.py``; this
handler counts that one as local, so nothing is printed twice.)
"""

from __future__ import annotations

import logging
import logging.handlers
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


# Handlers that send a record somewhere other than the terminal. Django's AdminEmailHandler
# (``mail_admins`` in its default logging) is named, not imported: Django is optional.
_ELSEWHERE: tuple[type[logging.Handler], ...] = (
    logging.NullHandler,
    logging.handlers.SMTPHandler,
    logging.handlers.HTTPHandler,
    logging.handlers.SocketHandler,
    logging.handlers.SysLogHandler,
)
_ELSEWHERE_NAMES = frozenset({"django.utils.log.AdminEmailHandler"})


def _shows(handler: logging.Handler, record: logging.LogRecord) -> bool:
    """Whether ``handler`` would write ``record`` where a person running the app sees it."""
    if _exported_only(handler) or record.levelno < handler.level:
        return False
    kind = type(handler)
    if isinstance(handler, _ELSEWHERE) or f"{kind.__module__}.{kind.__name__}" in (
        _ELSEWHERE_NAMES
    ):
        return False
    try:
        # A filter may drop it: Django's console handler only passes records when DEBUG is on.
        return bool(handler.filter(record))
    except Exception:
        return True  # the handler would fail the same way: printing again would not help


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
            if _shows(handler, record):
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
