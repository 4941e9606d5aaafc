"""Framework error hooks: the exception a request raised, before it becomes a 500 page.

Flask, Django and Starlette (FastAPI) catch an application's exception and answer an error
page, so the exception never reaches the WSGI/ASGI middleware. These hooks hand it to
:func:`reproit_otel.failures.note_exception` (kept on the capture, or reported under
replay) at the point the framework handles it:

* Flask: a receiver of the ``flask.got_request_exception`` signal;
* Django: a receiver of ``django.core.signals.got_request_exception`` (the exception is the
  one being handled when Django sends it);
* Starlette and FastAPI: ``ServerErrorMiddleware.__call__`` (the outermost middleware of
  every Starlette app) is wrapped: the exception being handled when it sends a 5xx response
  start, or the exception propagating out of it.

Each hook only reads the exception: the signal receivers return nothing, the wrapper passes
every message and the exception through unchanged. ``install_error_hooks()`` is idempotent
and ``uninstall_error_hooks()`` disconnects and restores exactly; both are called by
``reproit_otel.install()``/``uninstall()``, for capture and for replay alike. Each hook is
applied when the application imports its framework (``reproit_otel/_import_hooks.py``), so a
framework the service never imports is never imported for it.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from types import ModuleType
from typing import Any

from reproit_otel._guard import guarded
from reproit_otel._import_hooks import Hook, forget, when_imported
from reproit_otel.failures import note_exception

__all__ = ["install_error_hooks", "uninstall_error_hooks"]

_DJANGO_UID = "reproit_otel.instrumentation.errors"
_PATCH_MARK = "_reproit_original_call"
_installed = False


def _flask_exception(sender: Any, exception: BaseException | None = None, **extra: Any) -> None:
    """``got_request_exception`` receiver: Flask is about to answer 500 for ``exception``."""
    with guarded("errors.flask"):
        import flask  # present: this receiver is connected only when it is

        operation = None
        if flask.has_request_context():
            operation = f"{flask.request.method} {flask.request.path}"
        note_exception(exception, operation)


def _django_exception(sender: Any, request: Any = None, **extra: Any) -> None:
    """``got_request_exception`` receiver: Django sends it while handling the exception."""
    with guarded("errors.django"):
        operation = None
        if request is not None:
            operation = f"{request.method} {request.path}"
        note_exception(sys.exc_info()[1], operation)


Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


def _scope_operation(scope: MutableMapping[str, Any]) -> str:
    return f"{scope.get('method') or 'GET'} {scope.get('path') or '/'}"


def _wrap_server_errors(original: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    async def __call__(self: Any, scope: Any, receive: Any, send: Send) -> None:
        if scope.get("type") != "http":
            await original(self, scope, receive, send)
            return

        async def watched(message: Message) -> None:
            if message.get("type") == "http.response.start":
                status = message.get("status")
                if isinstance(status, int) and status >= 500:
                    # Sent from ServerErrorMiddleware's except block: that is the exception.
                    note_exception(sys.exc_info()[1], _scope_operation(scope))
            await send(message)

        try:
            await original(self, scope, receive, watched)
        except Exception as error:
            note_exception(error, _scope_operation(scope))
            raise

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def _connect_flask(flask: ModuleType) -> None:
    flask.got_request_exception.connect(_flask_exception, weak=False)


def _connect_django(signals: ModuleType) -> None:
    signals.got_request_exception.connect(_django_exception, weak=False, dispatch_uid=_DJANGO_UID)


def _wrap_starlette(errors: ModuleType) -> None:
    cls = errors.ServerErrorMiddleware
    if _PATCH_MARK not in cls.__dict__:
        original = cls.__call__
        setattr(cls, _PATCH_MARK, original)
        cls.__call__ = _wrap_server_errors(original)


_HOOKS: tuple[tuple[str, Hook], ...] = (
    ("flask", _connect_flask),
    ("django.core.signals", _connect_django),
    ("starlette.middleware.errors", _wrap_starlette),
)
"""Each framework's hook and the module it needs: applied when the application imports it."""


def install_error_hooks() -> None:
    """Connect the Flask and Django receivers and wrap Starlette's ``ServerErrorMiddleware``,
    each when the application imports the framework (at once when it did already)."""
    global _installed
    if _installed:
        return
    _installed = True
    for module_name, hook in _HOOKS:
        when_imported(module_name, hook)


def uninstall_error_hooks() -> None:
    """Disconnect the receivers and restore ``ServerErrorMiddleware.__call__``."""
    global _installed
    _installed = False
    for module_name, hook in _HOOKS:
        forget(module_name, hook)
    flask = sys.modules.get("flask")
    if flask is not None:
        flask.got_request_exception.disconnect(_flask_exception)
    signals = sys.modules.get("django.core.signals")
    if signals is not None:
        signals.got_request_exception.disconnect(dispatch_uid=_DJANGO_UID)
    errors = sys.modules.get("starlette.middleware.errors")
    if errors is not None:
        cls = errors.ServerErrorMiddleware
        original = cls.__dict__.get(_PATCH_MARK)
        if original is not None:
            cls.__call__ = original
            delattr(cls, _PATCH_MARK)
