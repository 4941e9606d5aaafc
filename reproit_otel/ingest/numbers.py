"""Numbers read from what clients send: ASCII digits within a range, or nothing.

``str.isdigit`` accepts ``²`` and ``٣`` and ``int`` then fails, and ``int`` of 5,000 digits
raises too; a query parameter, a cookie or a batch field must turn into a clear refusal
instead. :func:`ascii_int` is the one reading the ingest does.
"""

from __future__ import annotations

import re

__all__ = ["ascii_int"]

_DIGITS = re.compile(r"[0-9]{1,19}")


def ascii_int(text: object, *, low: int = 0, high: int = 2**63 - 1) -> int | None:
    """``text`` as an integer when it is 1 to 19 ASCII digits within ``low..high``, else None."""
    if not isinstance(text, str) or _DIGITS.fullmatch(text) is None:
        return None
    value = int(text)
    return value if low <= value <= high else None
