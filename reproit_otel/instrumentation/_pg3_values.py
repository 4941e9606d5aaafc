"""psycopg 3 values in a ``pg`` exchange: parameters in, served row values out.

A capsule does not care which driver produced it (``protocol: "pg"``), so psycopg 3 uses the
encoding of :mod:`reproit_otel.instrumentation._pg_values` both ways, with two additions:

* :func:`encode_params` (the recorder and the replay must encode a statement's parameters
  alike): a value :func:`~._pg_values.encode_value` knows is written as psycopg2's recorder
  writes it; a ``Json``/``Jsonb`` wrapper as the SQL literal psycopg2 sends for its ``Json``
  (``{"$pg":"sql","v":"'{\\"a\\": 1}'"}``, so the same statement matches across drivers); a
  psycopg 3 ``Range`` as a ``range`` tag of type ``Range``; any other value as the literal
  psycopg 3 renders for it (``sql.Literal``), tagged ``sql``.
* :func:`served_value` turns a recorded value into the type psycopg 3 returns for its column
  type, whichever driver recorded it: ``bytea`` as ``bytes`` (psycopg2 gives ``memoryview``),
  ``uuid`` as ``UUID``, ``inet``/``cidr`` as :mod:`ipaddress` objects, ``json``/``jsonb`` text
  parsed, range types as ``psycopg.types.range.Range``, ``timestamptz`` in the connection's
  ``TimeZone`` (a ``ZoneInfo``, as psycopg 3 loads it), element-wise in arrays.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import uuid
from typing import Any

from reproit_otel.instrumentation._pg_values import (
    TAG,
    UnsupportedValue,
    decode_value,
    encode_value,
    params_shaped,
)

__all__ = ["decode", "encode_params", "served_value"]


def encode_params(params: Any) -> Any:
    """The ``values`` of a psycopg 3 statement: an array for positional, an object for named."""
    return params_shaped(params, _encode_param)


def _encode_param(value: Any) -> Any:
    try:
        return encode_value(value)
    except UnsupportedValue:
        pass
    from psycopg.types.json import Json, Jsonb
    from psycopg.types.range import Range

    if isinstance(value, (Json, Jsonb)):
        text = json.dumps(value.obj)
        return {TAG: "sql", "v": "'" + text.replace("'", "''") + "'"}
    if isinstance(value, Range):
        if value.isempty:
            return {TAG: "range", "type": "Range", "v": None}
        return {
            TAG: "range",
            "type": "Range",
            "v": [_encode_param(value.lower), _encode_param(value.upper), value.bounds],
        }
    from psycopg import sql

    try:
        return {TAG: "sql", "v": sql.Literal(value).as_string(None)}
    except Exception as error:  # psycopg would refuse it too; keep the type
        return {TAG: "unadaptable", "type": type(value).__qualname__, "v": type(error).__name__}


def decode(value: Any) -> Any:
    """:func:`~._pg_values.decode_value`, with ranges as psycopg 3 ``Range`` objects."""
    if isinstance(value, list):
        return [decode(item) for item in value]
    if isinstance(value, dict) and value.get(TAG) == "range" and "$reproit" not in value:
        from psycopg.types.range import Range

        body = value.get("v")
        if body is None:
            return Range(empty=True)
        lower, upper, bounds = body
        return Range(decode(lower), decode(upper), str(bounds))
    return decode_value(value)


# Array type OID -> element type OID, for the element types converted below.
_ARRAYS = {
    1001: 17,
    2951: 2950,
    1041: 869,
    651: 650,
    199: 114,
    3807: 3802,
    1185: 1184,
    3905: 3904,
    3907: 3906,
    3909: 3908,
    3911: 3910,
    3913: 3912,
    3927: 3926,
}
_RANGES = frozenset({3904, 3906, 3908, 3910, 3912, 3926})


# Types psycopg 3 returns as str: a str recorded for them is already what it returns.
_TEXTUAL = frozenset({0, 18, 19, 25, 142, 705, 1042, 1043})


def served_value(value: Any, oid: Any, zone: dt.tzinfo | None, adapters: Any = None) -> Any:
    """``value`` (already decoded) as psycopg 3 returns a value of type ``oid``.

    A ``str`` recorded for a type psycopg 3 does not return as ``str`` (psycopg2 returns
    ``uuid[]``, ``inet`` and types it has no caster for as their text) is loaded by psycopg's
    own text loader for the type, found in ``adapters`` (psycopg's ``AdaptersMap``).
    """
    if value is None or not isinstance(oid, int):
        return value
    if isinstance(value, str) and adapters is not None and oid not in _TEXTUAL:
        loaded = _load_text(value, oid, adapters)
        if loaded is not _UNLOADED:
            return loaded
    element = _ARRAYS.get(oid)
    if element is not None and isinstance(value, list):
        return [served_value(item, element, zone, adapters) for item in value]
    try:
        return _convert(value, oid, zone)
    except (ValueError, TypeError):  # not what the type's loader would see: as recorded
        return value


_UNLOADED = object()


def _load_text(value: str, oid: int, adapters: Any) -> Any:
    from psycopg.pq import Format

    try:
        loader = adapters.get_loader(oid, Format.TEXT)
        if loader is None:
            return _UNLOADED
        return loader(oid, None).load(value.encode("utf-8"))
    except Exception:  # not what the type's loader reads: served as recorded
        return _UNLOADED


def _convert(value: Any, oid: int, zone: dt.tzinfo | None) -> Any:
    if oid == 17 and isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if oid == 2950 and isinstance(value, str):
        return uuid.UUID(value)
    if oid == 869 and isinstance(value, str):
        return ipaddress.ip_interface(value) if "/" in value else ipaddress.ip_address(value)
    if oid == 650 and isinstance(value, str):
        return ipaddress.ip_network(value)
    if oid in (114, 3802) and isinstance(value, str):
        return json.loads(value)
    if oid == 1184 and isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(zone) if zone is not None else value
    if oid in _RANGES:
        served = _range(value)
        if oid == 3910 and zone is not None and not getattr(served, "isempty", True):
            # tstzrange bounds are loaded in the connection's time zone, like timestamptz.
            lower = served_value(served.lower, 1184, zone)
            upper = served_value(served.upper, 1184, zone)
            return type(served)(lower, upper, served.bounds)
        return served
    return value


def _range(value: Any) -> Any:
    from psycopg.types.range import Range

    if isinstance(value, Range):
        return value
    try:
        from psycopg2 import extras
    except ImportError:
        return value
    if not isinstance(value, extras.Range):
        return value
    if value.isempty:
        return Range(empty=True)
    bounds = getattr(value, "_bounds", None)
    if not isinstance(bounds, str):
        bounds = ("[" if value.lower_inc else "(") + ("]" if value.upper_inc else ")")
    return Range(value.lower, value.upper, bounds)
