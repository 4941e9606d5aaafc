"""The request-fidelity app on Django (``fidelity_logic.py``), settings and URLs in this module.

Run with ``DJANGO_SETTINGS_MODULE=fidelity_django`` and this folder on ``PYTHONPATH``, for
gunicorn: ``fidelity_django:application``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from fidelity_logic import read_body, served_at

DEBUG = False
SECRET_KEY = "fidelity-django-test-only"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "fidelity_django"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, object] = {}


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def body(request: HttpRequest, case: str) -> Any:
    status, answer = read_body(case, request.body)
    return JsonResponse(answer, status=status)


def server(request: HttpRequest) -> Any:
    status, answer = served_at(request.META["SERVER_NAME"], request.get_port())
    return JsonResponse(answer, status=status)


urlpatterns = [path("", health), path("body/<str:case>", body), path("server", server)]


def __getattr__(name: str) -> Any:
    # The WSGI application is made when gunicorn asks for it: this module is the settings
    # module too, and OpenTelemetry's Django instrumentation reads the settings first.
    if name == "application":
        from django.core.wsgi import get_wsgi_application

        return get_wsgi_application()
    raise AttributeError(name)
