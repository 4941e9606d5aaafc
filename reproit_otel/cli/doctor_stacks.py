"""``reproit-otel doctor``, part 6: the application stacks it recognises, and what they hide.

A stack is looked at when the project uses it: its module was imported by the modules given
with ``--import``, or (Django) a ``manage.py`` is in the current folder or
``DJANGO_SETTINGS_MODULE`` is set. For each one doctor says what reproit-otel captures there
and warns about what it cannot see:

* Django: ``DJANGO_SETTINGS_MODULE`` must be set before ``opentelemetry-instrument`` starts
  (its Django instrumentation reads the settings before ``manage.py`` or ``wsgi.py`` would set
  the variable, and falls back to empty settings); the settings module must import; each
  database must be PostgreSQL (through psycopg 3 when it is installed, which Django then
  picks, else psycopg2; both are recorded);
* SQLAlchemy: every engine the imported modules created (and every SQLAlchemy URL in the
  environment) must use the psycopg2 or the psycopg (3) driver; an engine on another driver
  (pg8000, asyncpg, a MySQL or SQLite driver) makes every capture that uses it incomplete.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reproit_otel.cli.doctor import Finding

__all__ = ["stack_findings"]

_RECORDED_DRIVERS = {"psycopg2": "psycopg2", "psycopg": "psycopg 3"}  # driver name -> label
# (stack, top-level module, distribution); whether each has its OpenTelemetry
# instrumentation is doctor_setup.package_findings' part.
_SERVERS = (
    ("Flask", "flask", "flask"),
    ("FastAPI/Starlette", "starlette", "starlette"),
)
_SETTINGS_IN_MANAGE = re.compile(r"""DJANGO_SETTINGS_MODULE['"]\s*,\s*['"](?P<module>[\w.]+)['"]""")
_URL = re.compile(r"^(?P<dialect>[a-z][a-z0-9]*)\+(?P<driver>[a-z0-9_]+)://")


def _finding(level: str, topic: str, message: str) -> Finding:
    from reproit_otel.cli.doctor import Finding

    return Finding(level, topic, message)  # type: ignore[arg-type]


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def stack_findings(
    env: Mapping[str, str], imported: set[str], folder: Path | None = None
) -> list[Finding]:
    """Findings about the stacks in use (``imported``: top-level modules the project imported)."""
    folder = Path.cwd() if folder is None else folder
    found: list[Finding] = []
    if (
        "django" in imported
        or (folder / "manage.py").is_file()
        or env.get("DJANGO_SETTINGS_MODULE")
    ):
        found += _django(env, folder)
    for stack, module, distribution in _SERVERS:
        if module not in imported:
            continue
        found.append(
            _finding(
                "ok",
                "stacks",
                f"{stack} {_version(distribution) or '?'}: requests are captured with no code "
                "change (body, path, query, headers, status, output)",
            )
        )
    if "sqlalchemy" in imported or any(_URL.match(value) for value in env.values()):
        found += _sqlalchemy(env)
    return found


# -- Django ------------------------------------------------------------------------------------


def _django(env: Mapping[str, str], folder: Path) -> list[Finding]:
    version = _version("django")
    if version is None:
        return [_finding("warning", "stacks", "a Django project, but Django is not installed here")]
    found = [
        _finding(
            "ok",
            "stacks",
            f"Django {version}: requests are captured with no code change (WSGI and ASGI "
            "handlers: gunicorn, uWSGI, runserver, uvicorn)",
        )
    ]
    settings = env.get("DJANGO_SETTINGS_MODULE")
    if not settings:
        guess = _settings_from_manage(folder) or "<project>.settings"
        found.append(
            _finding(
                "warning",
                "stacks",
                "DJANGO_SETTINGS_MODULE is not set: opentelemetry-instrument sets Django up "
                "before manage.py or wsgi.py would set it, and its Django instrumentation then "
                "falls back to empty settings (no server spans, or a project that fails to "
                f"start); fix: export DJANGO_SETTINGS_MODULE={guess} before "
                "opentelemetry-instrument",
            )
        )
        return found
    try:
        module = importlib.import_module(settings)
    except Exception as error:  # the application's settings failed to import: report it
        found.append(
            _finding(
                "error",
                "stacks",
                f"DJANGO_SETTINGS_MODULE={settings} does not import: "
                f"{type(error).__name__}: {error}; fix: run doctor from the project folder (or put "
                "it on PYTHONPATH)",
            )
        )
        return found
    found += _django_databases(getattr(module, "DATABASES", None))
    return found


def _settings_from_manage(folder: Path) -> str | None:
    try:
        text = (folder / "manage.py").read_text(encoding="utf-8")
    except OSError:
        return None
    match = _SETTINGS_IN_MANAGE.search(text)
    return match["module"] if match else None


def _django_databases(databases: Any) -> list[Finding]:
    if not isinstance(databases, Mapping) or not databases:
        return []
    found: list[Finding] = []
    psycopg3 = importlib.util.find_spec("psycopg") is not None
    driver = "psycopg 3" if psycopg3 else "psycopg2"
    for alias, options in databases.items():
        engine = str(options.get("ENGINE", "")) if isinstance(options, Mapping) else ""
        if engine.endswith(".postgresql"):
            found.append(
                _finding(
                    "ok",
                    "stacks",
                    f"Django database {alias!r}: PostgreSQL through {driver}, recorded",
                )
            )
        else:
            backend = engine.rsplit(".", 1)[-1] or "unknown"
            found.append(
                _finding(
                    "warning",
                    "stacks",
                    f"Django database {alias!r} ({backend}) is not recorded (reproit-otel "
                    "records PostgreSQL through psycopg2 and psycopg 3): captures of requests "
                    "that use it are incomplete",
                )
            )
    return found


# -- SQLAlchemy --------------------------------------------------------------------------------


def _sqlalchemy(env: Mapping[str, str]) -> list[Finding]:
    version = _version("sqlalchemy")
    found = [
        _finding(
            "ok",
            "stacks",
            f"SQLAlchemy {version or '?'}: engines on psycopg2 and psycopg 3 are recorded, with "
            "or without opentelemetry-instrumentation-sqlalchemy",
        )
    ]
    drivers: dict[str, str] = {}  # where -> driver
    # By URL: the collector's order of the engines differs between Python releases.
    engines = {
        engine.url.render_as_string(hide_password=True): str(engine.dialect.driver)
        for engine in _engines()
    }
    for url, driver in sorted(engines.items()):
        drivers[f"engine {url}"] = driver
    for name, value in sorted(env.items()):
        match = _URL.match(value)
        if match:
            drivers[f"{name} ({match['dialect']}+{match['driver']})"] = match["driver"]
    for where, driver in drivers.items():
        if driver in _RECORDED_DRIVERS:
            label = _RECORDED_DRIVERS[driver]
            found.append(_finding("ok", "stacks", f"SQLAlchemy {where}: {label}, recorded"))
        else:
            found.append(
                _finding(
                    "warning",
                    "stacks",
                    f"SQLAlchemy {where} uses the {driver} driver, which reproit-otel does not "
                    "record: every capture that uses it is incomplete (never uploaded); fix: "
                    "use postgresql+psycopg2:// for PostgreSQL",
                )
            )
    if not drivers:
        found.append(
            _finding(
                "ok",
                "stacks",
                "no SQLAlchemy engine found to check; pass the module that creates yours with "
                "--import",
            )
        )
    return found


def _engines() -> list[Any]:
    """Every SQLAlchemy ``Engine`` alive in this process (the imported modules made them)."""
    try:
        from sqlalchemy.engine import Engine
    except ImportError:
        return []
    return [item for item in gc.get_objects() if isinstance(item, Engine)]
