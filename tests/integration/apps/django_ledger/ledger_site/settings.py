"""Settings of the ledger test project: PostgreSQL, time zones on.

Django talks to PostgreSQL through psycopg 3 when it is installed, else through psycopg2;
``LEDGER_DRIVER=psycopg2`` hides psycopg 3 from it, so the project runs on psycopg2 in an
environment that has both.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

if os.environ.get("LEDGER_DRIVER") == "psycopg2":
    # Before Django loads its PostgreSQL backend, which imports psycopg 3 when it can.
    sys.modules["psycopg"] = None  # type: ignore[assignment]

_url = urlsplit(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:9/postgres"))

SECRET_KEY = "ledger-test-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["django.contrib.staticfiles", "ledger"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "ledger_site.urls"
WSGI_APPLICATION = "ledger_site.wsgi.application"
STATIC_URL = "static/"
USE_TZ = True
TIME_ZONE = "Europe/Paris"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/") or "postgres",
        "USER": _url.username or "postgres",
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
        "CONN_MAX_AGE": int(os.environ.get("LEDGER_CONN_MAX_AGE", "0")),
    }
}
LOGGING = {
    "version": 1,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR"}},
}
