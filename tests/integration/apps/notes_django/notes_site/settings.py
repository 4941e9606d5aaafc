"""Settings of the notes test project, as ``startproject`` writes them, on PostgreSQL.

``NOTES_SECRET_KEY`` is the secret key (production's differs from the replaying laptop's).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:9/postgres"))

SECRET_KEY = os.environ.get("NOTES_SECRET_KEY", "django-insecure-dev")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "rest_framework",
    "rest_framework.authtoken",
    "notes",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "notes_site.urls"
WSGI_APPLICATION = "notes_site.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/") or "postgres",
        "USER": _url.username or "postgres",
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
    }
}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_REDIRECT_URL = "/notes/new/"
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["notes.authentication.StrictTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
LOGGING = {
    "version": 1,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR"}},
}
