"""The JSON encoding of PostgreSQL values in a ``pg`` exchange (psycopg2).

A recorded row must come back in replay with the very Python types the application saw
(``Decimal`` stays ``Decimal``, ``memoryview`` stays ``memoryview``). JSON natives are written
as themselves; every other value is a small tagged object ``{"$pg": TAG, "v": ...}``:

====================  ==========================================  ===========================
Python value           recorded as                                 note
====================  ==========================================  ===========================
``None``               ``null``
``bool``               ``true`` / ``false``
``int``                a JSON number                               beyond ±2**53: ``int`` tag
                                                                   with the decimal text
``float``              a JSON number when finite and not           ``1.0``, ``-0.0``, NaN and
                       integral, else ``{"$pg":"float","v":      ±inf keep their type
                       repr}``
``str``                a JSON string
``Decimal``            ``{"$pg":"decimal","v":"1.50"}``            ``str(d)``: NaN, Infinity
``bytes``              ``{"$pg":"bytes","v":BASE64}``              also ``memoryview`` (what
                                                                   psycopg2 returns for bytea)
                                                                   and ``bytearray`` tags
``date``               ``{"$pg":"date","v":"2024-01-31"}``         ``isoformat()``
``time``               ``{"$pg":"time","v":"10:00:00+02:00"}``     offset kept when aware
``datetime``           ``{"$pg":"datetime","v":ISO}``              with or without offset
``timedelta``          ``{"$pg":"timedelta","v":[d, s, us]}``
``UUID``               ``{"$pg":"uuid","v":"..."}``
``list``               a JSON array of encoded elements            PostgreSQL arrays, json
``tuple``              ``{"$pg":"tuple","v":[...]}``
``dict``               a JSON object of encoded values             json/jsonb, hstore,
                                                                   ``RealDictRow``
``dict`` whose keys    ``{"$pg":"dict","keys":[...],"v":{...}}``   capsules sort keys; this
are not in sorted                                                  keeps the order (values
order                                                              stay redactable by key)
``dict`` with a key    ``{"$pg":"map","v":[[k, v], ...]}``         keys that are not strings,
that could be                                                      or are ``$pg``/``$reproit``
mistaken for a tag
Range (extras)         ``{"$pg":"range","type":NAME,"v":           NumericRange, DateRange,
                       [lower, upper, bounds]}`` / ``"v":null``   DateTimeRange,
                       when empty                                  DateTimeTZRange; psycopg
                                                                   3's ``Range``: ``"Range"``
``ipaddress`` objects  ``{"$pg":"ip","type":NAME,"v":TEXT}``
====================  ==========================================  ===========================

A fixed UTC offset comes back as a ``datetime.timezone``; any other ``tzinfo`` is recorded by
its offset at that instant. Any other type is not encodable: :class:`UnsupportedValue` is
raised, and the recorder reports the exchange as unrecordable instead of storing a lossy value.

Redaction runs on the encoded exchange: a value under a secret column name becomes a
``$reproit`` placeholder object, and replay hands the application its stand-in (a string of
the recorded length and class, a number for a number; :mod:`reproit_otel.wire.standins`)
where the live run had the secret value: the same stand-in the inbound request and every
other served value carry for the same secret.

Statement parameters use the same encoding (:func:`encode_params`); the top-level sequence of
positional parameters is always an array, so ``(1, 2)`` and ``[1, 2]`` match each other.
A parameter of another type (``Json``, ``AsIs`` and other adapters) is recorded as the SQL
literal psycopg2 would send: ``{"$pg":"sql","v":"'{\\"a\\": 1}'"}``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import ipaddress
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reproit_otel.wire._js import utf16_key

__all__ = [
    "TAG",
    "UnsupportedValue",
    "column_keys",
    "decode_value",
    "encode_params",
    "encode_value",
    "params_shaped",
]

TAG = "$pg"
"""The key that marks a tagged (non JSON-native) value."""

_RESERVED_KEYS = frozenset({TAG, "$reproit"})
_MAX_SAFE_INT = 2**53


class UnsupportedValue(TypeError):
    """A value whose type has no documented encoding (the exchange is then unrecordable)."""


def _tagged(tag: str, value: Any, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {TAG: tag}
    out.update(extra)
    out["v"] = value
    return out


def _offset_text(offset: dt.timedelta) -> str:
    return str(offset)


def encode_value(value: Any) -> Any:
    """The JSON form of one value (see the module docstring); raises :class:`UnsupportedValue`."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT else _tagged("int", str(value))
    if isinstance(value, float):
        if math.isfinite(value) and not value.is_integer():
            return value
        return _tagged("float", repr(value))
    if isinstance(value, decimal.Decimal):
        return _tagged("decimal", str(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        tag = "bytes" if isinstance(value, bytes) else type(value).__name__
        return _tagged(tag, base64.b64encode(bytes(value)).decode("ascii"))
    if isinstance(value, dt.datetime):
        return _tagged("datetime", value.isoformat())
    if isinstance(value, dt.date):
        return _tagged("date", value.isoformat())
    if isinstance(value, dt.time):
        return _tagged("time", _time_text(value))
    if isinstance(value, dt.timedelta):
        return _tagged("timedelta", [value.days, value.seconds, value.microseconds])
    if isinstance(value, uuid.UUID):
        return _tagged("uuid", str(value))
    if isinstance(value, list):
        return [encode_value(item) for item in value]
    if isinstance(value, tuple) and not _is_record(value):
        return _tagged("tuple", [encode_value(item) for item in value])
    if isinstance(value, Mapping):
        keys = list(value)
        if all(isinstance(key, str) and key not in _RESERVED_KEYS for key in keys):
            encoded = {key: encode_value(item) for key, item in value.items()}
            if keys == sorted(keys, key=utf16_key):
                return encoded
            # Capsules are canonical JSON (keys sorted): keep the order the application saw.
            return _tagged("dict", encoded, keys=keys)
        return _tagged("map", [[encode_value(k), encode_value(v)] for k, v in value.items()])
    if isinstance(
        value,
        (
            ipaddress.IPv4Address,
            ipaddress.IPv6Address,
            ipaddress.IPv4Interface,
            ipaddress.IPv6Interface,
            ipaddress.IPv4Network,
            ipaddress.IPv6Network,
        ),
    ):
        return _tagged("ip", str(value), type=type(value).__name__)
    ranged = _encode_range(value)
    if ranged is not None:
        return ranged
    raise UnsupportedValue(
        f"a value of type {type(value).__module__}.{type(value).__qualname__} has no pg "
        "exchange encoding"
    )


def _time_text(value: dt.time) -> str:
    # time.isoformat() drops the offset of a tzinfo that needs a date to answer; ask with none.
    text = value.replace(tzinfo=None).isoformat()
    if value.tzinfo is not None:
        offset = value.tzinfo.utcoffset(None)
        if offset is not None:
            text += _format_offset(offset)
    return text


def _format_offset(offset: dt.timedelta) -> str:
    sign = "-" if offset < dt.timedelta(0) else "+"
    offset = abs(offset)
    hours, rest = divmod(offset, dt.timedelta(hours=1))
    minutes, rest = divmod(rest, dt.timedelta(minutes=1))
    text = f"{sign}{hours:02d}:{minutes:02d}"
    if rest:
        text += f":{rest.seconds:02d}"
        if rest.microseconds:
            text += f".{rest.microseconds:06d}"
    return text


def _is_record(value: tuple[Any, ...]) -> bool:
    # A namedtuple (NamedTupleCursor row, register_composite value) has _fields; those are
    # not encodable faithfully as a plain tuple, so they are refused like any unknown type.
    return hasattr(value, "_fields")


def _encode_range(value: Any) -> dict[str, Any] | None:
    if type(value).__module__ == _PSYCOPG_RANGES:
        return _encode_psycopg_range(value)
    try:
        from psycopg2 import extras
    except ImportError:  # psycopg 3 alone
        return None
    if not isinstance(value, extras.Range):
        return None
    name = type(value).__name__
    if name not in _RANGE_TYPES:
        return None
    if value.isempty:
        return _tagged("range", None, type=name)
    # The bounds as given (lower_inc/upper_inc hide them on an infinite side).
    bounds = getattr(value, "_bounds", None)
    if not isinstance(bounds, str):
        bounds = ("[" if value.lower_inc else "(") + ("]" if value.upper_inc else ")")
    return _tagged(
        "range", [encode_value(value.lower), encode_value(value.upper), bounds], type=name
    )


_RANGE_TYPES = ("NumericRange", "DateRange", "DateTimeRange", "DateTimeTZRange", "Range")
_PSYCOPG_RANGES = "psycopg.types.range"


def _encode_psycopg_range(value: Any) -> dict[str, Any] | None:
    """A psycopg 3 ``Range`` (every range type loads as one): ``type`` ``"Range"``, with the
    bounds psycopg 3 keeps; a ``Multirange`` has no encoding."""
    if type(value).__name__ != "Range":
        return None
    if value.isempty:
        return _tagged("range", None, type="Range")
    return _tagged(
        "range", [encode_value(value.lower), encode_value(value.upper), value.bounds], type="Range"
    )


def encode_params(params: Any) -> Any:
    """The ``values`` of a statement: an array for positional, an object for named ones.

    Values that have no encoding are recorded as the SQL literal psycopg2 would send.
    """
    return params_shaped(params, _encode_param)


def params_shaped(params: Any, encode_one: Callable[[Any], Any]) -> Any:
    """``params`` with each value encoded by ``encode_one``: an object for named parameters,
    an array for positional ones (a single value is an array of one)."""
    if isinstance(params, Mapping):
        return {str(key): encode_one(item) for key, item in params.items()}
    if isinstance(params, Sequence) and not isinstance(params, (str, bytes)):
        return [encode_one(item) for item in params]
    return [encode_one(params)]


def _encode_param(value: Any) -> Any:
    try:
        return encode_value(value)
    except UnsupportedValue:
        pass
    from psycopg2 import extensions

    try:
        quoted = extensions.adapt(value).getquoted()
    except Exception as error:  # psycopg2 would refuse it too; keep the type
        return _tagged("unadaptable", f"{type(error).__name__}", type=type(value).__qualname__)
    text = quoted.decode("utf-8", "replace") if isinstance(quoted, bytes) else str(quoted)
    return _tagged("sql", text)


def decode_value(value: Any) -> Any:
    """The Python value an encoded value stands for (inverse of :func:`encode_value`).

    A ``$reproit`` placeholder (a redacted value) comes back as the placeholder ``dict``.
    """
    if isinstance(value, list):
        return [decode_value(item) for item in value]
    if not isinstance(value, dict):
        return value
    tag = value.get(TAG)
    if not isinstance(tag, str) or "$reproit" in value:
        if "$reproit" in value:
            return value
        return {key: decode_value(item) for key, item in value.items()}
    decoder = _DECODERS.get(tag)
    if decoder is None:
        return value
    return decoder(value)


def _decode_range(tagged: dict[str, Any]) -> Any:
    from psycopg2 import extras

    cls = getattr(extras, str(tagged.get("type")), extras.Range)
    body = tagged.get("v")
    if body is None:
        return cls(empty=True)
    lower, upper, bounds = body
    return cls(decode_value(lower), decode_value(upper), bounds)


def _decode_ip(tagged: dict[str, Any]) -> Any:
    cls = getattr(ipaddress, str(tagged.get("type")), None)
    text = str(tagged["v"])
    return cls(text) if cls is not None else ipaddress.ip_interface(text)


def _b64(tagged: dict[str, Any]) -> bytes:
    return base64.b64decode(str(tagged["v"]))


_DECODERS: dict[str, Any] = {
    "int": lambda t: int(t["v"]),
    "float": lambda t: float(t["v"]),
    "decimal": lambda t: decimal.Decimal(t["v"]),
    "bytes": _b64,
    "memoryview": lambda t: memoryview(_b64(t)),
    "bytearray": lambda t: bytearray(_b64(t)),
    "date": lambda t: dt.date.fromisoformat(t["v"]),
    "time": lambda t: dt.time.fromisoformat(t["v"]),
    "datetime": lambda t: dt.datetime.fromisoformat(t["v"]),
    "timedelta": lambda t: dt.timedelta(days=t["v"][0], seconds=t["v"][1], microseconds=t["v"][2]),
    "uuid": lambda t: uuid.UUID(t["v"]),
    "tuple": lambda t: tuple(decode_value(item) for item in t["v"]),
    "map": lambda t: {_hashable(decode_value(k)): decode_value(v) for k, v in t["v"]},
    "dict": lambda t: {key: decode_value(t["v"].get(key)) for key in t["keys"]},
    "range": _decode_range,
    "ip": _decode_ip,
}


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def column_keys(names: Sequence[str]) -> list[str]:
    """The object keys of a recorded row, one per column.

    A column's key is its name; a name already used by an earlier column becomes
    ``name#i`` (``i`` the zero-based column position), so no value is lost when a query
    returns two columns with the same name.
    """
    seen: set[str] = set()
    keys: list[str] = []
    for index, name in enumerate(names):
        key = name if name not in seen else f"{name}#{index}"
        seen.add(key)
        keys.append(key)
    return keys
