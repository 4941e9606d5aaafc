"""The coupon app on Django (``coupon_logic.py``), settings and URLs in this one module.

Run with ``DJANGO_SETTINGS_MODULE=coupon_django`` and this folder on ``PYTHONPATH``;
serves its WSGI application on ``PORT`` and asks ``UPSTREAM``.
"""

from __future__ import annotations

import os

from coupon_logic import quote
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

DEBUG = False
SECRET_KEY = "coupon-django-test-only"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "coupon_django"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, object] = {}
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def coupon(request: HttpRequest) -> JsonResponse:
    return JsonResponse(quote(UPSTREAM, request.GET.get("code", "")))  # VIEW


urlpatterns = [path("", health), path("coupon", coupon)]


if __name__ == "__main__":
    from django.core.wsgi import get_wsgi_application
    from werkzeug.serving import make_server

    make_server(
        "127.0.0.1", int(os.environ["PORT"]), get_wsgi_application(), threaded=True
    ).serve_forever()
