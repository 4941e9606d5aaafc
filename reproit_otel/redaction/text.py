"""Redaction of free text: messages that name secrets in prose (decision D8).

:func:`scrub_message` is applied to exception messages: configured secret values are
replaced, and so is the value of every secret-named ``name=value`` pair.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from reproit_otel.redaction.core import TEXT_PLACEHOLDER, is_secret_key, scrub_secret_values

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

    return _PAIR.sub(replace, text) if "=" in text else text
