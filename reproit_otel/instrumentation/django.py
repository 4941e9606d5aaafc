"""Django inbound side: every Django project gets the WSGI/ASGI middleware with no code change.

Under ``opentelemetry-instrument`` (``reproit_otel.install()`` calls :func:`install_django_wsgi`
and :func:`install_django_asgi` when the application imports the handler module each wraps, so
a service that never imports Django never imports it for reproit-otel), reproit-otel wraps
Django's two request entry points:

* ``django.core.handlers.wsgi.WSGIHandler.__call__``: the application ``wsgi.py`` returns
  (``get_wsgi_application()``), served by gunicorn, uWSGI, mod_wsgi, waitress or
  ``manage.py runserver`` (whose static-files handler hands every other request to it);
* ``django.core.handlers.asgi.ASGIHandler.__call__``: the application ``asgi.py`` returns
  (``get_asgi_application()``), served by uvicorn, daphne or hypercorn.

Both are the outermost seam of a Django project: OpenTelemetry's Django instrumentation is a
Django middleware inserted into ``settings.MIDDLEWARE``, so it starts the server span inside
the handler call, after reproit-otel has published the request. Each request then gets what
a Flask or Starlette request gets (``wsgi.py``, ``asgi.py``): the JSON or form body, the
concrete path and query, the headers, and at the response start the status and the JSON
output. Nothing in ``settings.py``, ``wsgi.py`` or ``asgi.py`` changes. A WSGI
``HttpResponse`` keeps its body in memory, so its operation finishes as the handler returns
and the server gets the response object itself; a streaming response goes out chunk by
chunk like any other body (a copy of its first 64 KiB is kept).

Limits: subclasses of the handlers that override ``__call__`` without calling it (rare) are
not wrapped; a project that wraps the handler in WSGI/ASGI middleware of its own keeps it
inside reproit-otel's, which is what it wants (it sees the same request).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from types import MethodType
from typing import Any

from reproit_otel.instrumentation.asgi import Receive, Scope, Send, asgi_call
from reproit_otel.instrumentation.wsgi import StartResponse, wsgi_call

__all__ = [
    "ASGI_HANDLER_MODULE",
    "WSGI_HANDLER_MODULE",
    "install_django",
    "install_django_asgi",
    "install_django_wsgi",
    "uninstall_django",
]

_PATCH_MARK = "_reproit_original_call"


WSGI_HANDLER_MODULE = "django.core.handlers.wsgi"
"""Where ``WSGIHandler`` lives: the bootstrap wraps it when the application imports it."""

ASGI_HANDLER_MODULE = "django.core.handlers.asgi"
"""Where ``ASGIHandler`` lives: the bootstrap wraps it when the application imports it."""


def _handler(module_name: str, class_name: str, *, importing: bool) -> Any:
    """The handler class, or None when Django is not installed (not imported, without
    ``importing``). Importing a handler module needs no configured settings."""
    module = sys.modules.get(module_name)
    if module is None and importing:
        try:
            module = importlib.import_module(module_name)  # optional dependency
        except ImportError:
            return None
    return getattr(module, class_name, None)


def _whole_body_reader() -> Callable[[Iterable[bytes]], bytes | None]:
    """How to read the body of a Django ``HttpResponse`` (it keeps its body in memory).

    Only for a response whose iteration and ``content`` are ``HttpResponse``'s own (a
    streaming response, or a class that changes either, gives None): its ``content`` is then
    exactly the bytes the server will iterate.
    """
    from django.http import HttpResponse  # type: ignore[import-untyped]

    iterate = HttpResponse.__iter__
    content = HttpResponse.__dict__["content"]

    def whole_body(body: Iterable[bytes]) -> bytes | None:
        if not isinstance(body, HttpResponse):
            return None
        kind = type(body)
        if kind.__iter__ is not iterate or kind.content is not content:
            return None
        data: bytes = body.content
        return data

    return whole_body


def install_django() -> bool:
    """Wrap every Django WSGI and ASGI application, importing both handlers. Idempotent.

    Returns False when Django is not installed.
    """
    return install_django_wsgi() and install_django_asgi()


def install_django_wsgi() -> bool:
    """Wrap ``WSGIHandler.__call__`` (importing its module). Idempotent.

    Returns False when Django is not installed.
    """
    wsgi_handler = _handler(WSGI_HANDLER_MODULE, "WSGIHandler", importing=True)
    if wsgi_handler is None:
        return False
    if _PATCH_MARK not in wsgi_handler.__dict__:
        wsgi_original = wsgi_handler.__call__
        # django.http: imported already by the handler's module itself.
        whole_body = _whole_body_reader()

        def wsgi_entry(
            self: Any, environ: dict[str, Any], start_response: StartResponse
        ) -> Iterable[bytes]:
            # A bound method rather than a closure: no Python frame of ours per request.
            return wsgi_call(
                MethodType(wsgi_original, self), environ, start_response, whole_body=whole_body
            )

        wsgi_entry.__wrapped__ = wsgi_original  # type: ignore[attr-defined]
        setattr(wsgi_handler, _PATCH_MARK, wsgi_original)
        wsgi_handler.__call__ = wsgi_entry
    return True


def install_django_asgi() -> bool:
    """Wrap ``ASGIHandler.__call__`` (importing its module). Idempotent.

    Returns False when Django is not installed.
    """
    asgi_handler = _handler(ASGI_HANDLER_MODULE, "ASGIHandler", importing=True)
    if asgi_handler is None:
        return False
    if _PATCH_MARK not in asgi_handler.__dict__:
        asgi_original = asgi_handler.__call__

        async def asgi_entry(self: Any, scope: Scope, receive: Receive, send: Send) -> None:
            async def inner(scope: Scope, receive: Receive, send: Send) -> None:
                await asgi_original(self, scope, receive, send)

            await asgi_call(inner, scope, receive, send)

        asgi_entry.__wrapped__ = asgi_original  # type: ignore[attr-defined]
        setattr(asgi_handler, _PATCH_MARK, asgi_original)
        asgi_handler.__call__ = asgi_entry
    return True


def uninstall_django() -> None:
    """Restore both handlers' ``__call__`` exactly (importing nothing: a handler that is not
    imported was never wrapped)."""
    for module_name, class_name in (
        (WSGI_HANDLER_MODULE, "WSGIHandler"),
        (ASGI_HANDLER_MODULE, "ASGIHandler"),
    ):
        handler = _handler(module_name, class_name, importing=False)
        original = None if handler is None else handler.__dict__.get(_PATCH_MARK)
        if original is not None:
            handler.__call__ = original
            delattr(handler, _PATCH_MARK)
