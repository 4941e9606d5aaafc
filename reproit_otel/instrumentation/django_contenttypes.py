"""Django's content type cache: what a warm process had in memory, recorded and served.

``ContentType.objects`` keeps every content type it has read in a cache of the process, shared
by ``get_for_model``, ``get_for_models``, ``get_for_id`` and ``get_by_natural_key``, and never
emptied while the process lives. Wagtail reads it for every page (``Page.specific``), and so do
generic relations, ``django.contrib.admin``'s log, permissions and many applications. In
production a worker that has served a few requests answers these lookups from memory: the
failing request runs no ``django_content_type`` query, so its capture holds none. Replay boots
a new process whose cache is empty: the same lookup runs the query, which the recording does
not hold, and a faithful replay of the failure would be reported as a divergence.

So the lookup is recorded where it is answered from memory. Under capture, the first lookup of
a content type in an operation that the cache answers records a ``call`` effect::

    {"protocol": "invoke",
     "request":  {"tool": "cache", "op": "django.contenttypes",
                  "input": {"db": "default", "id": 7}},
     "response": {"ok": true, "data": {"id": 7, "app_label": "home", "model": "homepage"}}}

(``input`` is ``{"db", "app_label", "model"}`` for a lookup by model or natural key.) A first
lookup the cache cannot answer runs its query, which the ``pg`` recorder records as usual, and
records nothing here; later lookups in the same operation are answered by what the first one
put in the cache, in production and in replay alike, and record nothing either.

In replay, the cache is emptied when the recorded request makes its first lookup (what boot
and ``check``'s probes put in it is not what production's worker held), and a lookup the
recording holds an unconsumed ``django.contenttypes`` exchange for is answered from it: the
content type is built from the recorded row and put in the cache, with no query. Any other
lookup runs as it would (the cache, else the query, served from the recording). Before the
recorded request arrives, lookups run as they would and consume nothing.

These effects are not *data exchanges* for decision D5 (``wire/batch.py``): a failure whose
only effects are cache lookups and credential checks still sends no batch. They bind to the
current span and open none.

Seams (patched on ``ContentTypeManager`` when ``django.contrib.contenttypes`` is importable,
restored exactly by :func:`uninstall_contenttypes`): ``get_for_id``, ``get_by_natural_key`` and
``_get_from_cache`` (the cache read of ``get_for_model`` and ``get_for_models``).

Never breaking the host: every step of ours is guarded; a failure to record is logged and the
application gets exactly what Django returned or raised.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from reproit_otel._guard import guarded
from reproit_otel.capture.inbound import current_inbound
from reproit_otel.capture.recording import start_exchange
from reproit_otel.instrumentation.invoke import capsule_holds, capsule_outcome, finish_outcome
from reproit_otel.replay.session import active_session
from reproit_otel.wire.batch import CACHE_TOOL
from reproit_otel.wire.invoke import success_response
from reproit_otel.wire.replay import ReplaySession

__all__ = ["install_contenttypes", "installed", "uninstall_contenttypes"]

OP = "django.contenttypes"
"""The ``op`` of a recorded content type lookup (its tool is ``CACHE_TOOL``)."""

_ORIGINAL = "__reproit_contenttypes_original__"
_SEAMS = ("get_for_id", "get_by_natural_key", "_get_from_cache")

Key = tuple[Any, ...]

# The content types each live operation has looked up so far (by id and by natural key).
_seen: weakref.WeakKeyDictionary[object, set[Key]] = weakref.WeakKeyDictionary()
_seen_lock = threading.Lock()
# The replay session whose recorded request has emptied the cache already.
_emptied_for: list[ReplaySession | None] = [None]


def _manager_class() -> Any:
    try:
        # Optional dependency; importing the model module needs configured settings, which a
        # process that imports it has.
        from django.contrib.contenttypes.models import (  # type: ignore[import-untyped]
            ContentTypeManager,
        )
    except Exception:  # not installed, or settings not configured here
        return None
    return ContentTypeManager


def _cached(manager: Any, key: Any) -> Any:
    """The content type ``manager``'s cache holds under ``key``, or None."""
    return manager._cache.get(manager.db, {}).get(key)


def _keys(content_type: Any) -> tuple[Key, Key]:
    return ("id", content_type.id), ("model", content_type.app_label, content_type.model)


def _input(manager: Any, key: Key) -> dict[str, Any]:
    if key[0] == "id":
        return {"db": manager.db, "id": key[1]}
    return {"db": manager.db, "app_label": key[1], "model": key[2]}


def _row(content_type: Any) -> dict[str, Any]:
    return {
        "id": content_type.id,
        "app_label": content_type.app_label,
        "model": content_type.model,
    }


# -- capture -----------------------------------------------------------------------------------


def _operation() -> object | None:
    with guarded("contenttypes.operation"):
        inbound = current_inbound()
        return None if inbound is None else inbound.operation
    return None


def _first_in(operation: object, key: Key) -> bool:
    with _seen_lock:
        return key not in _seen.get(operation, ())


def _note(operation: object, keys: tuple[Key, ...]) -> None:
    with _seen_lock:
        _seen.setdefault(operation, set()).update(keys)


def _record(manager: Any, key: Key, content_type: Any) -> None:
    recorder = start_exchange(CACHE_TOOL)
    if recorder is None:
        return
    try:
        finish_outcome(
            recorder, CACHE_TOOL, OP, _input(manager, key), success_response(_row(content_type))
        )
    finally:
        if not recorder.done:
            recorder.fail(f"{OP}: not recorded")


def _captured(original: Callable[..., Any], manager: Any, key: Key, args: Any) -> Any:
    operation = _operation()
    if operation is None:
        return original(manager, *args)
    hit = None
    with guarded("contenttypes.peek"):
        hit = _cached(manager, key[1] if key[0] == "id" else key[1:])
    try:
        result = original(manager, *args)
    except BaseException:
        with guarded("contenttypes.note"):
            _note(operation, (key,))  # a miss: the query that follows is recorded
        raise
    with guarded("contenttypes.record"):
        if hit is not None and result is hit and _first_in(operation, key):
            _record(manager, key, result)
        _note(operation, _keys(result))
    return result


# -- replay ------------------------------------------------------------------------------------


def _served(manager: Any, session: ReplaySession, key: Key) -> Any:
    """The recorded content type for ``key`` (now in the cache), or None: look it up live."""
    if session.usage.awaiting:
        return None  # before the recorded request: boot and probes consume nothing
    if _emptied_for[0] is not session:
        _emptied_for[0] = session
        manager.clear_cache()
    input_value = _input(manager, key)
    if not capsule_holds(session, CACHE_TOOL, OP, input_value):
        return None
    outcome = capsule_outcome(session, CACHE_TOOL, OP, input_value)
    row = outcome["data"] if outcome["kind"] == "data" else None
    if not isinstance(row, dict):
        return None
    content_type = manager.model.from_db(
        manager.db, ["id", "app_label", "model"], [row["id"], row["app_label"], row["model"]]
    )
    manager._add_to_cache(manager.db, content_type)
    return content_type


def _through(original: Callable[..., Any], manager: Any, key: Key, args: Any) -> Any:
    session = None
    with guarded("contenttypes.session"):
        session = active_session()
    if session is None:
        return _captured(original, manager, key, args)
    served = _served(manager, session, key)
    return original(manager, *args) if served is None else served


def _get_for_id(original: Callable[..., Any]) -> Callable[..., Any]:
    def get_for_id(self: Any, id: Any) -> Any:
        return _through(original, self, ("id", id), (id,))

    return get_for_id


def _get_by_natural_key(original: Callable[..., Any]) -> Callable[..., Any]:
    def get_by_natural_key(self: Any, app_label: Any, model: Any) -> Any:
        return _through(original, self, ("model", app_label, model), (app_label, model))

    return get_by_natural_key


def _get_from_cache(original: Callable[..., Any]) -> Callable[..., Any]:
    def _get_from_cache(self: Any, opts: Any) -> Any:
        return _through(original, self, ("model", opts.app_label, opts.model_name), (opts,))

    return _get_from_cache


_WRAPPERS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "get_for_id": _get_for_id,
    "get_by_natural_key": _get_by_natural_key,
    "_get_from_cache": _get_from_cache,
}


APPS_MODULE = "django.contrib.contenttypes.apps"
"""Where ``ContentTypesConfig`` lives: the bootstrap patches when the application imports it."""


def _config_class() -> Any:
    try:
        # Importable without settings: the app's configuration, not its models.
        from django.contrib.contenttypes.apps import (  # type: ignore[import-untyped]
            ContentTypesConfig,
        )
    except Exception:  # not installed
        return None
    return ContentTypesConfig


def _models_ready() -> bool:
    try:
        from django.apps import apps  # type: ignore[import-untyped]
    except Exception:
        return False
    return bool(apps.models_ready)


def _patch_manager() -> None:
    manager_class = _manager_class()
    if manager_class is None:
        return
    for name in _SEAMS:
        current = manager_class.__dict__.get(name)
        if current is None or getattr(current, _ORIGINAL, None) is not None:
            continue
        wrapper = _WRAPPERS[name](current)
        wrapper.__qualname__ = getattr(current, "__qualname__", name)
        wrapper.__doc__ = getattr(current, "__doc__", None)
        wrapper.__wrapped__ = current  # type: ignore[attr-defined]
        setattr(wrapper, _ORIGINAL, current)
        setattr(manager_class, name, wrapper)


def _ready_then_patch(original: Callable[..., Any]) -> Callable[..., Any]:
    def ready(self: Any) -> Any:
        result = original(self)
        with guarded("contenttypes.install"):
            _patch_manager()
        return result

    ready.__qualname__ = getattr(original, "__qualname__", "ready")
    ready.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(ready, _ORIGINAL, original)
    return ready


def install_contenttypes() -> bool:
    """Patch ``ContentTypeManager``'s lookups, now when Django's models are loaded, else as
    ``django.contrib.contenttypes`` becomes ready (``django.setup()`` imports the models after
    ``opentelemetry-instrument`` has run this). Idempotent; False when Django's content types
    are not installed."""
    config_class = _config_class()
    if config_class is None:
        return False
    if _models_ready():
        _patch_manager()
        return True
    current = config_class.__dict__.get("ready")
    if current is not None and getattr(current, _ORIGINAL, None) is None:
        config_class.ready = _ready_then_patch(current)
    return True


def installed() -> bool:
    """Whether the lookups are patched now."""
    manager_class = _manager_class() if _models_ready() else None
    return manager_class is not None and all(
        getattr(manager_class.__dict__.get(name), _ORIGINAL, None) is not None for name in _SEAMS
    )


def uninstall_contenttypes() -> None:
    """Restore every patched lookup, and the app's ``ready``, exactly (imports nothing: a
    content types app never imported was never patched)."""
    if APPS_MODULE not in sys.modules:
        _emptied_for[0] = None
        return
    config_class = _config_class()
    if config_class is None:
        return
    ready = getattr(config_class.__dict__.get("ready"), _ORIGINAL, None)
    if ready is not None:
        config_class.ready = ready
    manager_class = _manager_class() if _models_ready() else None
    if manager_class is not None:
        for name in _SEAMS:
            original = getattr(manager_class.__dict__.get(name), _ORIGINAL, None)
            if original is not None:
                setattr(manager_class, name, original)
    _emptied_for[0] = None
