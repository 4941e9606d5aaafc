"""JavaScript value semantics the wire contract is defined in.

The reference SDK is written in JavaScript, so several rules of the contract are phrased in
terms of JS built-ins: ``String(v)``, ``String.prototype.trim``, ``Number(text)``,
``Number.isInteger``, UTF-16 string order and ``TextEncoder``. This module gives each of them
one Python spelling so the rest of the wire layer can say what it means.

``UNSET`` stands for JavaScript ``undefined`` (an absent argument or key); ``None`` is ``null``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Final

__all__ = [
    "UNSET",
    "UnsetType",
    "code_point_cut",
    "has_lone_surrogate",
    "is_js_integer",
    "is_unset",
    "js_number",
    "js_number_to_string",
    "js_string",
    "js_trim",
    "utf8_bytes",
    "utf16_key",
    "utf16_length",
    "well_formed",
]


class UnsetType:
    """The type of :data:`UNSET`, the stand-in for JavaScript ``undefined``."""

    _instance: UnsetType | None = None

    def __new__(cls) -> UnsetType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Final = UnsetType()
"""An absent value (JavaScript ``undefined``); ``None`` is JSON ``null``."""


def is_unset(value: object) -> bool:
    """True when ``value`` is :data:`UNSET`."""
    return value is UNSET


# ECMAScript WhiteSpace and LineTerminator code points (what String.prototype.trim removes).
_JS_SPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """``String.prototype.trim``: strip ECMAScript white space and line terminators."""
    return text.strip(_JS_SPACE)


_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """Join surrogate pairs held as two code points; leave lone surrogates in place.

    A JavaScript string is a sequence of UTF-16 units, so a high surrogate followed by a low
    one *is* the astral character. Python may hold the two halves separately (for example
    after slicing); this brings such a string to the form JavaScript would read.
    """
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


def has_lone_surrogate(value: Any) -> bool:
    """True when a string anywhere in a JSON value (keys included) holds a lone surrogate.

    Python's ``json`` joins an escaped surrogate pair into one code point, so any surrogate
    code point left in a parsed string has no partner: valid JSON, but not valid Unicode, and
    not encodable as UTF-8. The walk uses its own stack, so nesting depth does not matter.
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item) is not None:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def utf8_bytes(text: str) -> bytes:
    """UTF-8 bytes as ``TextEncoder`` / ``Buffer.from`` give them (lone surrogates → U+FFFD)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        joined = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")
        return joined.encode("utf-8")


def utf16_key(text: str) -> bytes:
    """A sort key giving JavaScript's default string order (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


def utf16_length(text: str) -> int:
    """``text.length`` in JavaScript: the number of UTF-16 code units."""
    return len(utf16_key(text)) // 2


def code_point_cut(text: str, limit: int) -> str:
    """The first ``limit`` code points of ``text`` (a surrogate pair counts once)."""
    text = well_formed(text)
    return text if len(text) <= limit else text[:limit]


def is_js_integer(value: object) -> bool:
    """``Number.isInteger``: a finite number with no fractional part (``1.0`` included)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value) and value == math.floor(value)
    return False


_TWO_53 = 2**53


def js_number_to_string(value: int | float) -> str:
    """ECMAScript ``Number::toString(10)`` for a JSON number (NaN and infinities included).

    Integers are treated as JavaScript treats every JSON number: as an IEEE double, so an
    integer past 2**53 prints as the double it rounds to.
    """
    if value.__class__ is float and (1e-4 <= value < 1e16 or -1e16 < value <= -1e-4):
        # Here repr is already the ECMAScript text (the same shortest digits, no exponent),
        # except for an integral value, which ECMAScript prints without ".0".
        text = repr(value)
        if not text.endswith(".0"):
            return text
    return _number_text(value)


def _number_text(value: int | float) -> str:
    """:func:`js_number_to_string` the long way, for every number."""
    if isinstance(value, int) and not isinstance(value, bool):
        if -_TWO_53 < value < _TWO_53:
            return str(value)
        try:
            value = float(value)
        except OverflowError:
            return "Infinity" if value > 0 else "-Infinity"
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr gives the shortest digit string that round-trips, as ECMAScript requires.
    _, digit_tuple, exponent = Decimal(repr(abs(number))).as_tuple()
    assert isinstance(exponent, int)
    all_digits = "".join(map(str, digit_tuple))
    digits = all_digits.rstrip("0")
    k = len(digits)
    n = exponent + (len(all_digits) - k) + k  # value = 0.<digits> × 10**n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        exp = n - 1
        mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
        body = f"{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp)}"
    return sign + body


def js_string(value: Any) -> str:
    """``String(value)`` for the values a JSON document (or :data:`UNSET`) can hold."""
    if value is UNSET:
        return "undefined"
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return js_number_to_string(value)
    if isinstance(value, (list, tuple)):
        # Array.prototype.join: null and undefined elements become empty strings.
        return ",".join("" if item is None or item is UNSET else js_string(item) for item in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


_DECIMAL_LITERAL = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?)|(?:\.[0-9]+))(?:[eE][+-]?[0-9]+)?")
_RADIX_LITERAL = re.compile(r"0([xXoObB])([0-9a-fA-F]+)")
_RADIX = {"x": 16, "o": 8, "b": 2}


def js_number(value: Any) -> float:
    """``Number(value)`` (NaN when JavaScript would give NaN)."""
    if value is UNSET:
        return math.nan
    if value is None or value is False:
        return 0.0
    if value is True:
        return 1.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple, dict)):
        value = js_string(value)
    text = js_trim(str(value))
    if text == "":
        return 0.0
    if text in ("Infinity", "+Infinity"):
        return math.inf
    if text == "-Infinity":
        return -math.inf
    radix = _RADIX_LITERAL.fullmatch(text)
    if radix is not None:
        base = _RADIX[radix.group(1).lower()]
        try:
            return float(int(radix.group(2), base))
        except ValueError:
            return math.nan
    if _DECIMAL_LITERAL.fullmatch(text) is None:
        return math.nan
    return float(text)
