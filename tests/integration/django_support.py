"""Django configured in the test process, for the tests that run the ORM in-process.

Django reads its settings once per process, so every such test module shares one
configuration: the session's PostgreSQL, time zones on (UTC), a persistent connection.
Each module defines its own models, with an ``app_label`` of its own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit


def configure_django(dsn: str) -> None:
    """Configure Django for the database at ``dsn`` unless this process already did."""
    import django
    from django.conf import settings

    if settings.configured and "default" in getattr(settings, "DATABASES", {}):
        return
    parts = urlsplit(dsn)
    options: dict[str, Any] = {
        "USE_TZ": True,
        "TIME_ZONE": "UTC",
        "INSTALLED_APPS": [],
        "DATABASES": {
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": parts.path.lstrip("/"),
                "USER": parts.username,
                "HOST": parts.hostname,
                "PORT": parts.port,
                "CONN_MAX_AGE": 60,
            }
        },
    }
    if settings.configured:
        # Another test of the session configured Django without a database (the credential
        # checks' tests): the database goes onto those settings, which nothing opened yet.
        for name, value in options.items():
            setattr(settings, name, value)
    else:
        settings.configure(**options)
    django.setup()
