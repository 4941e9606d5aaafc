"""The doctor's checks of the OpenTelemetry set-up, the ingest and the Django start-up.

Each returns :class:`~reproit_otel.cli.doctor.Finding` lines whose message ends with the fix
(``...; fix: <command>``):

* :func:`exporter_findings`: ``OTEL_TRACES_EXPORTER`` names an exporter no installed package
  provides (OpenTelemetry then starts nothing: ``Failed to auto initialize``), or leaves
  ``reproit`` out while captures are configured;
* :func:`package_findings`: OpenTelemetry packages whose versions disagree, Python or an
  installed library outside the tested versions (``docs/versions.md``), and for each
  library the application imports (with ``--import``; else each installed one) an
  instrumentation that is missing, mismatched or switched off;
* :func:`ping_findings` (``--ping``): POSTs an empty JSON object to ``REPROIT_ENDPOINT`` with
  the key: an ingest refuses it as a batch (HTTP 400) and stores nothing, so the answer says
  whether the ingest is reachable and takes the key;
* :func:`setup_django`: before ``--import``, configure Django (``DJANGO_SETTINGS_MODULE``,
  else the one ``manage.py`` in the current folder names) so a module that touches models
  imports as it does in the running application.
"""

from __future__ import annotations

import http.client
import importlib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from reproit_otel.cli.doctor import Finding, Level
from reproit_otel.config import ReproitConfig
from reproit_otel.delivery import describe_error, describe_status, endpoint_target
from reproit_otel.otel_setup import (
    LIBRARIES,
    exporter_problems,
    installed_exporters,
    installed_libraries,
    instrumentation_problems,
    version_problems,
)
from reproit_otel.supported import unsupported_problems

__all__ = ["exporter_findings", "package_findings", "ping_findings", "setup_django"]

_EXPORTERS = "OTEL_TRACES_EXPORTER"


def exporter_findings(env: Mapping[str, str]) -> list[Finding]:
    """``OTEL_TRACES_EXPORTER`` against the installed exporters."""
    value = env.get(_EXPORTERS)
    capturing = bool(env.get("REPROIT_ENDPOINT"))
    if value is None and not capturing:
        return [
            Finding(
                "ok",
                "exporters",
                f"{_EXPORTERS} is not set (to capture under opentelemetry-instrument: "
                f"{_EXPORTERS}=otlp,reproit)",
            )
        ]
    problems = exporter_problems(value, installed_exporters())
    found: list[Finding] = []
    for problem in problems:
        # An unknown name stops OpenTelemetry; without reproit the post-instrument hook still
        # installs reproit-otel, so that one is a warning.
        level: Level = "warning" if "without reproit" in problem.message else "error"
        found.append(Finding(level, "exporters", problem.line()))
    if not problems:
        found.append(Finding("ok", "exporters", f"{_EXPORTERS}={value}"))
    return found


def package_findings(env: Mapping[str, str], imported: Iterable[str] | None) -> list[Finding]:
    """Version agreement, then the instrumentation of each library used.

    ``imported`` holds the modules the application's ``--import`` brought in; ``None`` (no
    ``--import``) checks every library of the table that is installed, as warnings.
    """
    found = [Finding("error", "versions", problem.line()) for problem in version_problems()]
    if not found:
        found.append(Finding("ok", "versions", "the OpenTelemetry packages agree in version"))
    outside = unsupported_problems()
    found += [Finding("warning", "supported", problem.line()) for problem in outside]
    if not outside:
        found.append(
            Finding("ok", "supported", "Python and every installed library are in the tested range")
        )
    level: Level = "warning" if imported is None else "error"
    if imported is None:
        used = installed_libraries()
    else:
        always = {library.module for library in LIBRARIES if library.every_application}
        used = sorted({name.partition(".")[0] for name in imported} | always)
    problems = instrumentation_problems(used, env)
    found += [Finding(level, "instrumented", problem.line()) for problem in problems]
    return found


def ping_findings(config: ReproitConfig) -> list[Finding]:
    """POST ``{}`` to the endpoint with the key: reachable? key accepted? (``--ping``)."""
    if not config.endpoint:
        return [
            Finding(
                "error",
                "ping",
                "--ping needs REPROIT_ENDPOINT; fix: export "
                "REPROIT_ENDPOINT=http://127.0.0.1:8765/v1/capture-batches",
            )
        ]
    parts = urlsplit(config.endpoint)
    timeout = config.request_timeout_ms / 1000
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_class(parts.hostname or "", parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"content-type": "application/json", "user-agent": "reproit-otel-doctor"}
    if config.api_key:
        headers["authorization"] = f"Bearer {config.api_key}"
    try:
        connection.request("POST", path, body=b"{}", headers=headers)
        response = connection.getresponse()
        response.read()
        status = response.status
    except (OSError, http.client.HTTPException) as error:
        problem = describe_error(error, config.endpoint, config.request_timeout_ms)
        return [Finding("error", "ping", problem.line())]
    finally:
        connection.close()
    target = endpoint_target(config.endpoint)
    if status in (400, 422) or 200 <= status < 300:
        return [
            Finding(
                "ok",
                "ping",
                f"{target} answered HTTP {status} to an empty batch: reachable, key accepted",
            )
        ]
    return [Finding("error", "ping", describe_status(status, config.endpoint).line())]


_MANAGE_SETTINGS = re.compile(r"""DJANGO_SETTINGS_MODULE["']\s*,\s*["']([\w.]+)["']""")


def setup_django(modules: Iterable[str], env: Mapping[str, str]) -> list[Finding]:
    """Configure Django before the application's modules are imported, when it is Django's.

    Nothing happens unless Django is installed and either ``DJANGO_SETTINGS_MODULE`` is set
    or ``./manage.py`` names a settings module (which is then used, as ``manage.py`` would).
    """
    if not list(modules):
        return []
    settings = env.get("DJANGO_SETTINGS_MODULE")
    source = "DJANGO_SETTINGS_MODULE"
    if not settings:
        manage = Path("manage.py")
        match = (
            _MANAGE_SETTINGS.search(manage.read_text(encoding="utf-8", errors="replace"))
            if manage.is_file()
            else None
        )
        if match is None:
            return []
        settings, source = match.group(1), "manage.py"
    try:
        django = importlib.import_module("django")
    except ImportError:
        return []
    os.environ["DJANGO_SETTINGS_MODULE"] = settings  # this process only, as manage.py does
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        django.setup()
    except Exception as error:  # the project's settings failed: report, the imports go on
        return [
            Finding(
                "error",
                "django",
                f"Django set-up with {settings} (from {source}) failed: "
                f"{type(error).__name__}: {error}; fix: make `python -c 'import django; "
                f"django.setup()'` work with DJANGO_SETTINGS_MODULE={settings}",
            )
        ]
    return [Finding("ok", "django", f"Django set up with {settings} (from {source})")]
