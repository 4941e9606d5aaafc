"""The parsers of the configuration table: each turns a variable's text into its value.

Every parser of :data:`reproit_otel.config.SETTINGS` lives here. A parser takes the raw text of
one environment variable and returns the value, ``None`` for "not given" where that makes
sense, or raises :class:`~reproit_otel.errors.ConfigurationError` saying what was expected.
The caller (:mod:`reproit_otel.config`) names the variable in front of that message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from reproit_otel.errors import ConfigurationError
from reproit_otel.wire._js import js_number
from reproit_otel.wire.batch_environment import is_token

__all__ = [
    "CAPTURE_BUDGET_CEILING",
    "CAPTURE_BUDGET_DEFAULT",
    "CAPTURE_MAX_EVENTS_CEILING",
    "CAPTURE_MAX_EVENTS_FLOOR",
    "SPOOL_MAX_CEILING",
    "SPOOL_MAX_DEFAULT",
    "SPOOL_MAX_FLOOR",
    "at_least",
    "clamped",
    "parse_exactly_one",
    "parse_flag",
    "parse_integer",
    "parse_path",
    "parse_secret_text",
    "parse_secret_values",
    "parse_spool_max",
    "parse_text",
    "parse_token",
]


def parse_text(raw: str) -> str | None:
    """The text without surrounding blanks, or ``None`` when nothing is left."""
    value = raw.strip()
    return value or None


def parse_secret_text(raw: str) -> str | None:
    """The secret exactly as given, or ``None`` when blank."""
    # Secrets are used as given (a key with a trailing space is still that key) unless blank.
    return raw if raw.strip() else None


def parse_token(raw: str) -> str | None:
    """A protocol token (stripped), ``None`` when blank; anything else is an error."""
    value = raw.strip()
    if not value:
        return None
    if not is_token(value):
        raise ConfigurationError(
            f"{value!r} is not a token (letters, digits and a few separators, no spaces)"
        )
    return value


def parse_flag(raw: str) -> bool:
    """A switch: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``/empty."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{raw!r} is not a switch; expected 1 or 0")


def parse_exactly_one(raw: str) -> bool:
    """True for exactly ``1``, false for anything else (never an error)."""
    # Section 8.1: exactly "1" turns CI capture on, anything else leaves it off.
    return raw == "1"


def parse_integer(raw: str) -> int:
    """A whole number read as JavaScript's ``Number`` reads it (``1e3`` is 1000)."""
    number = js_number(raw.strip())
    if not isinstance(number, (int, float)) or not math.isfinite(number) or number != int(number):
        raise ConfigurationError(f"{raw!r} is not a whole number")
    return int(number)


def at_least(floor: int) -> Callable[[str], int]:
    """A parser of whole numbers that raises any value below ``floor`` to ``floor``."""

    def parse(raw: str) -> int:
        return max(floor, parse_integer(raw))

    return parse


def clamped(low: int, high: int) -> Callable[[str], int]:
    """A parser of whole numbers that clamps the value into ``low``..``high``."""

    def parse(raw: str) -> int:
        return min(high, max(low, parse_integer(raw)))

    return parse


CAPTURE_BUDGET_DEFAULT = 4 * 1024 * 1024
CAPTURE_BUDGET_CEILING = 64 * 1024 * 1024
CAPTURE_MAX_EVENTS_FLOOR = 256
CAPTURE_MAX_EVENTS_CEILING = 16384

SPOOL_MAX_DEFAULT = 16777216
SPOOL_MAX_FLOOR = 4096
SPOOL_MAX_CEILING = 67108864


def parse_spool_max(raw: str | None) -> int:
    """The CI spool cap in bytes from its text (section 8.1: JavaScript ``Number``, clamped).

    ``None`` or a value that is not a whole number gives the 16 MiB default; the empty string
    is 0 for ``Number`` and so gives the 4096 floor, as in the reference.
    """
    if raw is None:
        return SPOOL_MAX_DEFAULT
    number = js_number(raw)
    if not math.isfinite(number) or number != int(number):
        return SPOOL_MAX_DEFAULT
    return min(SPOOL_MAX_CEILING, max(SPOOL_MAX_FLOOR, int(number)))


def parse_secret_values(raw: str) -> tuple[str, ...]:
    """A JSON array of strings or a comma-separated list, deduplicated, blanks left out."""
    text = raw.strip()
    if not text:
        return ()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"not a JSON array of strings: {exc}") from None
        if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
            raise ConfigurationError("not a JSON array of strings")
        values = parsed
    else:
        values = [part.strip() for part in text.split(",")]
    return tuple(dict.fromkeys(v for v in values if v))


def parse_path(raw: str) -> str | None:
    """A path, used as given, or ``None`` when blank."""
    return raw if raw.strip() else None
