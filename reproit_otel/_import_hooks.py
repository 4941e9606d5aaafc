"""Post-import hooks: run a callback once a module has been imported, now or later.

reproit-otel patches optional libraries (Flask, Starlette, Django, the credential checks of
``instrumentation/credentials.py``) only when the application itself imports them: importing
a library at start-up that the service never uses would cost it import time and memory and
run that library's import side effects. So the bootstrap says::

    from reproit_otel._import_hooks import when_imported, forget

    when_imported("flask", patch_flask)    # runs patch_flask(flask) now, or after `import flask`
    forget("flask", patch_flask)           # drops it again if it has not run yet

How: while a hook is pending, a finder sits first on :data:`sys.meta_path`. It finds nothing
itself; for a watched name it asks the finders after it for the spec and hands importlib the
same spec with its loader wrapped, so that the callbacks run right after the module executed
successfully (``exec_module``, or ``load_module`` for a legacy loader). The wrapper puts the
real loader back on the module and its spec before the module runs, so nothing of ours stays
visible afterwards (``module.__loader__``, :func:`importlib.reload`, ``importlib.resources``).
A module whose spec no finder finds is left to importlib, and so is a namespace package: it
has no loader and runs no code, so a hook waits for a module inside it, never for it.

Each hook runs once: the first thread whose import completes takes the module's hooks
(importlib already runs one module's code once, whatever the number of threads importing it).
A hook registered while another thread runs the module's code waits for it to complete and
then runs in the registering thread; one registered while another thread is still looking the
module up on :data:`sys.meta_path` can miss that import (reproit-otel registers its hooks at
start-up, before the application's threads import anything). A failing import runs nothing
and propagates unchanged; the hooks stay pending for a later
successful import. A submodule is its own name: a hook on ``django.core.handlers.wsgi`` runs
when that submodule is imported, whether or not ``django`` was imported before. The finder
leaves :data:`sys.meta_path` once no hook is pending.

Never breaking the host: a callback runs inside :func:`reproit_otel._guard.guarded`, so a
failure of ours is logged and the application's import goes on. This module imports nothing
beyond the standard library and the guard.

Locks. ``_lock`` guards the hook table and the finder's place on :data:`sys.meta_path`; no
callback, import or log line runs while it is held.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

from reproit_otel._guard import guarded

__all__ = ["Hook", "forget", "pending", "when_imported"]

Hook = Callable[[ModuleType], object]
"""A post-import hook: called with the imported module; what it returns is ignored."""

_lock = threading.Lock()
_hooks: dict[str, list[Hook]] = {}
_finding = threading.local()


def _imported(name: str) -> ModuleType | None:
    """The module when it is in :data:`sys.modules` and no thread is still running its code."""
    module = sys.modules.get(name)
    if module is None:
        return None
    if getattr(getattr(module, "__spec__", None), "_initializing", False):
        # Another thread is executing it (or this one, in a circular import): its import
        # lock makes the import below wait until it is complete, and imports nothing new.
        try:
            module = importlib.import_module(name)
        except Exception:
            return None  # its import failed: the hook waits for the next one
    return module if isinstance(module, ModuleType) else None


def when_imported(name: str, callback: Hook) -> None:
    """Run ``callback(module)`` once the module ``name`` is imported.

    At once when it is already imported; otherwise right after the application's first
    successful import of it, in the importing thread. A callback that raises is logged (it
    never breaks the import). Registering the same callback twice for a name runs it twice.
    """
    module = _imported(name)
    if module is None:
        with _lock:
            _hooks.setdefault(name, []).append(callback)
            _place_finder()
        module = _imported(name)  # imported meanwhile by another thread: run it here
        if module is None:
            return
        if not _take(name, callback):
            return  # the import that completed ran it
    _run(name, module, [callback])


def forget(name: str, callback: Hook) -> None:
    """Drop a pending hook (no effect once it ran); the finder leaves when none is left."""
    with _lock:
        _remove(name, callback)


def pending() -> dict[str, int]:
    """How many hooks wait for each module name."""
    with _lock:
        return {name: len(callbacks) for name, callbacks in _hooks.items()}


def _take(name: str, callback: Hook) -> bool:
    with _lock:
        return _remove(name, callback)


def _remove(name: str, callback: Hook) -> bool:
    callbacks = _hooks.get(name)
    if callbacks is None or callback not in callbacks:
        return False
    callbacks.remove(callback)
    if not callbacks:
        del _hooks[name]
    _place_finder()
    return True


def _take_all(name: str) -> list[Hook]:
    with _lock:
        callbacks = _hooks.pop(name, [])
        _place_finder()
    return callbacks


def _run(name: str, module: ModuleType, callbacks: Sequence[Hook]) -> None:
    for callback in callbacks:
        with guarded(f"import_hooks[{name}]"):
            callback(module)


def _place_finder() -> None:
    """Put the finder first on sys.meta_path while hooks wait, take it off when none do.

    Called with ``_lock`` held. The list is replaced rather than changed in place when the
    finder leaves, so a thread iterating the old list meanwhile skips no finder.
    """
    present = any(entry is _FINDER for entry in sys.meta_path)
    if _hooks and not present:
        sys.meta_path.insert(0, _FINDER)
    elif not _hooks and present:
        sys.meta_path = [entry for entry in sys.meta_path if entry is not _FINDER]


class _Finder:
    """Finds nothing itself: wraps the loader of a watched module found by the finders after it."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name not in _hooks:
            return None
        busy: set[str] = _finding.__dict__.setdefault("names", set())
        if name in busy:
            return None  # a finder below asked importlib again: let it answer
        busy.add(name)
        try:
            spec = _find_below(self, name, path, target)
        finally:
            busy.discard(name)
        if spec is None or spec.loader is None:
            return spec  # not found, or a namespace package: importlib goes on as usual
        if hasattr(spec.loader, "exec_module"):
            spec.loader = cast("Loader", _ExecLoader(spec.loader))
        elif hasattr(spec.loader, "load_module"):
            spec.loader = cast("Loader", _LegacyLoader(spec.loader))
        return spec

    def invalidate_caches(self) -> None:
        """Nothing cached."""


def _find_below(
    finder: _Finder, name: str, path: Sequence[str] | None, target: ModuleType | None
) -> ModuleSpec | None:
    for entry in list(sys.meta_path):
        if entry is finder:
            continue
        find_spec = getattr(entry, "find_spec", None)
        if find_spec is None:
            continue
        spec: ModuleSpec | None = find_spec(name, path, target)
        if spec is not None:
            return spec
    return None


class _Wrapped:
    """A loader standing in for ``real`` for one import; everything else is the real one's."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "real":  # not set yet (a copy being made): no recursion
            raise AttributeError(attribute)
        return getattr(self.real, attribute)

    def _restore(self, module: ModuleType) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.real
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.real


class _ExecLoader(_Wrapped):
    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self.real, "create_module", None)
        module: ModuleType | None = None if create is None else create(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._restore(module)
        self.real.exec_module(module)  # its exception reaches the importer unchanged
        name = module.__name__
        _run(name, sys.modules.get(name, module), _take_all(name))


class _LegacyLoader(_Wrapped):
    def load_module(self, name: str) -> ModuleType:
        module: ModuleType = self.real.load_module(name)
        self._restore(module)
        _run(name, module, _take_all(name))
        return module


_FINDER = _Finder()
