"""How recorded exceptions are named, and which named classes a replay may raise again.

A recorder writes an exception's class as ``module.QualifiedName``; a replay looks the name
up in an allow-list built from the modules its library raises from, so a capsule can never
make reproit instantiate an arbitrary class.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["allowed_exception_classes", "exception_type_name"]


def exception_type_name(error: BaseException) -> str:
    """``module.QualifiedName`` of the exception's class, as recorded in ``error.type``."""
    cls = type(error)
    return f"{cls.__module__}.{cls.__qualname__}"


def allowed_exception_classes(*modules: ModuleType) -> dict[str, type[BaseException]]:
    """Every :class:`Exception` subclass defined in ``modules``, by its recorded name."""
    found: dict[str, type[BaseException]] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Exception):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found
