"""Redaction of free text: messages that name secrets in prose (decision D8).

:func:`scrub_message` is applied to exception messages: configured secret values are
replaced, and so is the value of every secret-named ``name=value`` pair and of a database
``Key (column)=(value)`` detail naming a secret column.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from reproit_otel.redaction.core import TEXT_PLACEHOLDER, is_secret_key, scrub_secret_values
from reproit_otel.redaction.sql import scrub_echoes

__all__ = ["scrub_message"]

_PAIR = re.compile(r"(?P<name>[A-Za-z0-9_.%+\-\[\]]+)=(?P<value>[^&\s#'\"<>;,)]+)")


def scrub_message(text: str, secrets: Iterable[str]) -> str:
    """``text`` with configured secret values and secret-named ``name=value`` values replaced."""
    text = scrub_secret_values(text, secrets)

    def replace(match: re.Match[str]) -> str:
        value = match.group("value")
        if value == TEXT_PLACEHOLDER or not is_secret_key(match.group("name")):
            return match.group(0)
        return f"{match.group('name')}={TEXT_PLACEHOLDER}"

    if "=" not in text:
        return text
    # A database error re-raised by the application echoes the key it refused
    # ("Key (email)=(ada@example.org) already exists"): a secret column's value goes.
    text = scrub_echoes(text, ())
    return _PAIR.sub(replace, text)
