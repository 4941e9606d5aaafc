"""Mixing a Python layer into an application's psycopg2 class, just above the C type.

psycopg2's ``connection`` and ``cursor`` are C types whose methods cannot be monkeypatched, so
a recording layer is a Python subclass of the C type, mixed into whatever class the
application asked for as its last base (:func:`mixed_class`). The mixed class is made once:
cached on the application's class itself (so a class made per connection is freed with it),
or in a module table for C types.
"""

from __future__ import annotations

from typing import Any

__all__ = ["mixed_class"]

_c_type_cache: dict[tuple[type, type], type] = {}


def mixed_class(base: Any, layer: type, cache_attr: str, root: type, slot: int) -> Any:
    """``base`` with ``layer`` mixed in just above the C type ``root``.

    Cached on ``base`` itself (``base.__dict__[cache_attr][slot]``, so a class made per
    connection is freed with it), or in a module table for C types.
    """
    if not isinstance(base, type) or not issubclass(base, root):
        return base  # a factory function: nothing to subclass, left unrecorded
    if issubclass(base, layer):
        return base
    heap = _is_heap(base) and base is not root
    pair: list[Any] = []
    if not heap:
        cached = _c_type_cache.get((base, layer))
        if cached is not None:
            return cached
    else:
        if cache_attr in base.__dict__:
            pair = base.__dict__[cache_attr]
        else:
            pair = [None, None]
            setattr(base, cache_attr, pair)
        if pair[slot] is not None:
            return pair[slot]
    if base is root:
        # The layer on its own, under psycopg2's name ("cursor", "connection").
        namespace = {"__module__": root.__module__, "__qualname__": root.__qualname__}
        mixed: Any = type(root.__name__, (layer,), namespace)
    else:
        namespace = {"__module__": base.__module__, "__qualname__": base.__qualname__}
        metaclass: Any = type(base)
        mixed = metaclass(base.__name__, (base, layer), namespace)
    if heap:
        pair[slot] = mixed
    else:
        _c_type_cache[(base, layer)] = mixed
    return mixed


_HEAPTYPE = 1 << 9


def _is_heap(cls: type) -> bool:
    return bool(cls.__flags__ & _HEAPTYPE)
