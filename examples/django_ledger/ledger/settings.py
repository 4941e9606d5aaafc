"""Settings of the ledger example: PostgreSQL from ``DATABASE_URL``, through psycopg 3 (Django
falls back to psycopg2 when psycopg 3 is not installed)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_database = urlsplit(
    os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["payments"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "ledger.urls"
WSGI_APPLICATION = "ledger.wsgi.application"
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.path.lstrip("/") or "postgres",
        "USER": _database.username or "postgres",
        "PASSWORD": _database.password or "",
        "HOST": _database.hostname or "127.0.0.1",
        "PORT": str(_database.port or 5432),
        "CONN_MAX_AGE": 60,
    }
}
