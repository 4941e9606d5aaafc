"""Rebuilding an application's psycopg2 (or psycopg 3) class on a pure Python stand-in.

psycopg2's ``cursor`` and ``connection`` are C types that replay cannot instantiate without a
server. :func:`transplant` copies every Python class of an application's factory hierarchy
(``RealDictCursor``, ``LoggingConnection``, OpenTelemetry's traced cursor, yours) with the C base
replaced by a stub class, so the application's own methods run on top of the stub. The copy
poses as the class it stands in for (``isinstance`` holds as it did live). psycopg 3 replay
uses it for a connection's ``cursor_factory`` (OpenTelemetry's traced cursor, Django's), with
psycopg's own cursor class as the root.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

__all__ = ["transplant"]

_SKIPPED_ATTRS = frozenset(
    {"__dict__", "__weakref__", "_reproit_recording_cursor", "_reproit_recording_connection"}
)


def transplant(
    cls: Any,
    root: type,
    stub: type,
    layers: tuple[type, ...],
    cache: weakref.WeakKeyDictionary[type, type],
) -> Any:
    """``cls`` (a subclass of the C type ``root``) rebuilt with ``stub`` in place of ``root``.

    Each Python class in the hierarchy is copied once (kept in ``cache``) with its functions
    re-bound so a zero-argument ``super()`` finds the copy; a class of ``layers`` (a recording
    layer) or ``root`` itself becomes the plain stub. Raises ``psycopg2.ProgrammingError``
    for a factory that is not such a subclass, or for another C type.
    """
    if cls is None or cls is root or cls in layers:
        # A recording layer (the named-cursor one too) stands for the root it wraps.
        return _plain(stub, root)
    if isinstance(cls, type) and issubclass(cls, stub):
        return cls
    if not isinstance(cls, type) or not issubclass(cls, root):
        import psycopg2

        raise psycopg2.ProgrammingError(
            f"reproit replay cannot serve the factory {cls!r}: only subclasses of "
            f"psycopg2.extensions.{root.__name__} can be replayed"
        )
    cached = cache.get(cls)
    if cached is not None:
        return cached
    if not cls.__flags__ & (1 << 9):
        import psycopg2

        raise psycopg2.ProgrammingError(
            f"reproit replay cannot serve {cls.__module__}.{cls.__qualname__}: a C type "
            "other than the base cursor/connection (replication?) is not replayable"
        )
    bases = tuple(
        transplant(base, root, stub, layers, cache) if issubclass(base, root) else base
        for base in cls.__bases__
    )
    bases = tuple(dict.fromkeys(bases))  # a mixed-in layer and the root both become the stub
    slots = cls.__dict__.get("__slots__", ())
    slot_names = {slots} if isinstance(slots, str) else set(slots)
    namespace = {
        key: value
        for key, value in cls.__dict__.items()
        if key not in _SKIPPED_ATTRS and key not in slot_names
    }
    namespace["__class__"] = _posing_as(cls)
    metaclass: Any = type(cls)
    new = metaclass(cls.__name__, bases, namespace)
    for key, value in namespace.items():
        rebound = _rebind(value, cls, new)
        if rebound is not value:
            setattr(new, key, rebound)
    cache[cls] = new
    return new


def _posing_as(cls: type) -> property:
    # isinstance() consults obj.__class__ when type(obj) is not a subclass, so a stub poses as
    # the class it stands in for: isinstance(cur, RealDictCursor) and isinstance(cur,
    # psycopg2.extensions.cursor) hold in replay as they did live (RealDictRow relies on it).
    return property(lambda self: cls, doc="The psycopg2 class this stand-in replays.")


_plain_classes: dict[tuple[type, type], type] = {}


def _plain(stub: type, root: type) -> type:
    found = _plain_classes.get((stub, root))
    if found is None:
        namespace = {
            "__module__": root.__module__,
            "__qualname__": root.__qualname__,
            "__class__": _posing_as(root),
        }
        found = _plain_classes[stub, root] = type(root.__name__, (stub,), namespace)
    return found


def _rebind(value: Any, old: type, new: type) -> Any:
    """``value`` with its ``__class__`` cell (zero-argument ``super()``) pointing at ``new``."""
    if isinstance(value, types.FunctionType):
        code = value.__code__
        if "__class__" not in code.co_freevars or value.__closure__ is None:
            return value
        cells = list(value.__closure__)
        index = code.co_freevars.index("__class__")
        if cells[index].cell_contents is not old:
            return value
        cells[index] = types.CellType(new)
        rebound = types.FunctionType(
            code, value.__globals__, value.__name__, value.__defaults__, tuple(cells)
        )
        rebound.__kwdefaults__ = value.__kwdefaults__
        rebound.__dict__.update(value.__dict__)
        rebound.__qualname__ = value.__qualname__
        rebound.__doc__ = value.__doc__
        rebound.__module__ = value.__module__
        rebound.__annotations__ = value.__annotations__
        return rebound
    if isinstance(value, classmethod):
        inner = _rebind(value.__func__, old, new)
        return value if inner is value.__func__ else classmethod(inner)
    if isinstance(value, staticmethod):
        inner = _rebind(value.__func__, old, new)
        return value if inner is value.__func__ else staticmethod(inner)
    if isinstance(value, property):
        parts = [
            _rebind(f, old, new) if f is not None else None
            for f in (value.fget, value.fset, value.fdel)
        ]
        if parts == [value.fget, value.fset, value.fdel]:
            return value
        return property(parts[0], parts[1], parts[2], value.__doc__)
    return value
