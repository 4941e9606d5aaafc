"""Django responses of each body kind through the patched ``WSGIHandler``; prints what a
WSGI server saw for each, as JSON lines (``test_wsgi_response_start.py`` reads them).

Settings and URLs live in this one module (``DJANGO_SETTINGS_MODULE=django_bodies``, this
folder on ``PYTHONPATH``, the repository root importable for the test helpers). The real
span processor runs with a list sink and OpenTelemetry's Django instrumentation, so every
answer of 500 is captured and its ``return`` event printed too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path

DEBUG = False
SECRET_KEY = "django-bodies-test-only"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "django_bodies"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, object] = {}
BIG = b"y" * 70_000


def in_memory(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b'{"d":4}', content_type="application/json", status=500)


def as_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"e": [5]}, status=502)


def big(request: HttpRequest) -> HttpResponse:
    return HttpResponse(BIG, content_type="application/json", status=500)


def streamed(request: HttpRequest) -> StreamingHttpResponse:
    def parts() -> Iterator[bytes]:
        yield b'{"f":'
        yield b"6}"

    return StreamingHttpResponse(parts(), content_type="application/json", status=503)


urlpatterns = [
    path("memory", in_memory),
    path("json", as_json),
    path("big", big),
    path("stream", streamed),
]


def serve(handler: Any, environ: dict[str, Any]) -> list[Any]:
    """Call ``handler`` once as a WSGI server does; what the server saw, in order."""
    log: list[Any] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        log.append(["start", status])
        return lambda data: None

    body = handler(environ, start_response)
    log.append(["returned", type(body).__name__])
    log.append(["body", len(b"".join(body))])
    body.close()
    return log


def main() -> None:
    import django
    from django.core.handlers.wsgi import WSGIHandler
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from werkzeug.test import EnvironBuilder

    from reproit_otel.instrumentation.django import install_django, uninstall_django
    from tests.integration.pipeline_support import pipeline

    django.setup()
    with pipeline() as active:
        DjangoInstrumentor().instrument(tracer_provider=active.provider)
        install_django()
        try:
            for route in ("memory", "json", "big", "stream"):
                log = serve(WSGIHandler(), EnvironBuilder(path=f"/{route}").get_environ())
                [trace] = active.sink.wait_for(1)
                active.sink.traces.clear()
                output = trace.events[-1]["output"]
                print(json.dumps({"route": route, "log": log, "output": output}))
        finally:
            uninstall_django()
            DjangoInstrumentor().uninstrument()


if __name__ == "__main__":
    main()
