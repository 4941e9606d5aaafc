"""``reproit-otel doctor`` recognises Django, Flask, FastAPI and SQLAlchemy and warns about what
it cannot see: a real subprocess in real project folders."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from tests.integration.served_ingest import cli_command

APPS = Path(__file__).resolve().parent / "apps"


def doctor(folder: Path, *args: str, **env: str) -> tuple[int, list[str]]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REPROIT_", "DJANGO_")) and key not in ("DATABASE_URL", "PYTHONPATH")
    }
    environ.update(env)
    done = subprocess.run(
        cli_command("doctor", *args),
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, [line for line in done.stdout.splitlines() if " stacks " in line]


def test_a_django_project_without_its_settings_module_is_warned_about(tmp_path: Path) -> None:
    project = tmp_path / "ledger"
    shutil.copytree(APPS / "django_ledger", project)
    code, lines = doctor(project)
    assert code == 0
    django = lines[0].split()[3].rstrip(":")
    assert lines == [
        f"ok       stacks        Django {django}: requests are captured with no code change "
        "(WSGI and ASGI handlers: gunicorn, uWSGI, runserver, uvicorn)",
        "warning  stacks        DJANGO_SETTINGS_MODULE is not set: opentelemetry-instrument "
        "sets Django up before manage.py or wsgi.py would set it, and its Django "
        "instrumentation then falls back to empty settings (no server spans, or a project "
        "that fails to start); fix: export DJANGO_SETTINGS_MODULE=ledger_site.settings before "
        "opentelemetry-instrument",
    ]
    code, lines = doctor(project, DJANGO_SETTINGS_MODULE="ledger_site.settings")
    assert code == 0
    # Django picks psycopg 3 when it is installed (the project's environment has both).
    driver = "psycopg 3" if importlib.util.find_spec("psycopg") is not None else "psycopg2"
    assert lines[1:] == [
        f"ok       stacks        Django database 'default': PostgreSQL through {driver}, recorded"
    ]


def test_a_django_database_reproit_otel_does_not_record_is_warned_about(tmp_path: Path) -> None:
    project = tmp_path / "ledger"
    shutil.copytree(APPS / "django_ledger", project)
    (project / "sqlite_settings.py").write_text(
        "from ledger_site.settings import *  # noqa: F403\n\n"
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': 'db'}}\n",
        encoding="utf-8",
    )
    code, lines = doctor(project, DJANGO_SETTINGS_MODULE="sqlite_settings")
    assert code == 0
    assert lines[1:] == [
        "warning  stacks        Django database 'default' (sqlite3) is not recorded "
        "(reproit-otel records PostgreSQL through psycopg2 and psycopg 3): captures of requests "
        "that use it are incomplete"
    ]
    code, lines = doctor(project, DJANGO_SETTINGS_MODULE="no_such_settings")
    assert code == 1
    assert lines[1:] == [
        "error    stacks        DJANGO_SETTINGS_MODULE=no_such_settings does not import: "
        "ModuleNotFoundError: No module named 'no_such_settings'; fix: run doctor from the project "
        "folder (or put it on PYTHONPATH)"
    ]


def test_sqlalchemy_engines_on_drivers_it_does_not_record_are_warned_about(
    tmp_path: Path,
) -> None:
    (tmp_path / "engines.py").write_text(
        "import sqlalchemy\n\n"
        "main = sqlalchemy.create_engine('postgresql+psycopg2://app@db.internal/shop')\n"
        "modern = sqlalchemy.create_engine('postgresql+psycopg://app@db.internal/shop')\n"
        "cache = sqlalchemy.create_engine('sqlite:///cache.db')\n",
        encoding="utf-8",
    )
    code, lines = doctor(
        tmp_path, "--import", "engines", REPORTS_URL="postgresql+pg8000://app@reports/db"
    )
    assert code == 0
    version = lines[0].split()[3].rstrip(":")
    assert lines == [
        f"ok       stacks        SQLAlchemy {version}: engines on psycopg2 and psycopg 3 are "
        "recorded, with or without opentelemetry-instrumentation-sqlalchemy",
        "ok       stacks        SQLAlchemy engine postgresql+psycopg2://app@db.internal/shop: "
        "psycopg2, recorded",
        "ok       stacks        SQLAlchemy engine postgresql+psycopg://app@db.internal/shop: "
        "psycopg 3, recorded",
        "warning  stacks        SQLAlchemy engine sqlite:///cache.db uses the pysqlite driver, "
        "which reproit-otel does not record: every capture that uses it is incomplete (never "
        "uploaded); fix: use postgresql+psycopg2:// for PostgreSQL",
        "warning  stacks        SQLAlchemy REPORTS_URL (postgresql+pg8000) uses the pg8000 "
        "driver, which reproit-otel does not record: every capture that uses it is incomplete "
        "(never uploaded); fix: use postgresql+psycopg2:// for PostgreSQL",
    ]


def test_flask_and_fastapi_apps_are_recognised(tmp_path: Path) -> None:
    code, lines = doctor(
        APPS / "sqlalchemy_ledger",
        "--import",
        "flask_app",
        "--import",
        "fastapi_app",
        DATABASE_URL="postgresql://app@127.0.0.1:9/shop",
    )
    assert code == 0
    assert [line.split(":")[0].split()[2] for line in lines[:2]] == ["Flask", "FastAPI/Starlette"]
    assert all(line.startswith("ok ") for line in lines), lines
    assert (
        "ok       stacks        SQLAlchemy engine postgresql+psycopg2://app@127.0.0.1:9/shop: "
        "psycopg2, recorded"
    ) in lines
