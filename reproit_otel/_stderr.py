"""reproit-otel's own warnings stay visible on stderr whatever the application's logging is.

Python prints a warning nobody handles (``logging.lastResort``), but only while no handler at
all is configured. Under ``opentelemetry-instrument`` with log export switched on, the root
logger's one handler is OpenTelemetry's ``LoggingHandler``: every warning then leaves as an
OTLP log record (or nowhere, with no collector) and the terminal shows nothing, so a refused
API key or an unreachable ingest goes unnoticed.

:func:`ensure_visible` adds one handler to the ``reproit_otel`` logger that writes a record
(warning and above) to stderr only when no stream or file handler on the way to the root
would write it, so nothing is printed twice. It holds no lock: a line is one ``write``.

Every line reproit-otel logs leaves the process as well when the application exports its logs
(OpenTelemetry's ``LoggingHandler``): :func:`scrub_log_records` puts a filter on the loggers
reproit-otel writes to that passes each record's text through the one scrubber
(:func:`reproit_otel.redaction.text.scrub_text`, with the configured secret values) before
any handler sees it.
"""

from __future__ import annotations

import logging
import sys

from reproit_otel.redaction.text import scrub_text

__all__ = ["ensure_visible", "scrub_log_records"]

_LOGGER_NAME = "reproit_otel"
# Every logger reproit-otel writes to (a parent's filters do not see a child's records).
_LOGGER_NAMES = (_LOGGER_NAME, "reproit_otel.ingest", "reproit_otel.ingest.access")


class _Scrubbed(logging.Filter):
    """Rewrites a record's text through :func:`scrub_text` (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
            recording = sys.modules.get("reproit_otel.capture.recording")
            secrets = () if recording is None else recording.registered_secret_values()
            scrubbed = scrub_text(message, secrets)
        except Exception:  # a record whose arguments do not format: left to the handler
            return True
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        return True


def scrub_log_records() -> None:
    """Put the scrubbing filter on every logger reproit-otel writes to (once per process)."""
    for name in _LOGGER_NAMES:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, _Scrubbed) for existing in logger.filters):
            logger.addFilter(_Scrubbed())


class _StderrFallback(logging.Handler):
    """Writes to stderr what no stream handler of the logger chain writes."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logging.WARNING)
        self._logger = logger
        self.setFormatter(logging.Formatter("%(message)s"))

    def handle(self, record: logging.LogRecord) -> bool:
        # Handler.handle would take the handler's lock around emit; one write per record
        # needs none, and no lock of ours is held while logging.
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if _printed_elsewhere(self._logger, record, self):
                return
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # a closed stderr or a broken record: never the application's problem
            return


def _printed_elsewhere(
    logger: logging.Logger, record: logging.LogRecord, ours: logging.Handler
) -> bool:
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if (
                handler is not ours
                and isinstance(handler, logging.StreamHandler)
                and record.levelno >= handler.level
            ):
                return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def ensure_visible() -> None:
    """Add the stderr fallback to the ``reproit_otel`` logger (once per process), and the
    scrubbing filter to every logger reproit-otel writes to."""
    scrub_log_records()
    logger = logging.getLogger(_LOGGER_NAME)
    if any(isinstance(handler, _StderrFallback) for handler in logger.handlers):
        return
    logger.addHandler(_StderrFallback(logger))
