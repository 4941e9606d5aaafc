"""``reproit-otel doctor`` on each common set-up mistake, and the launcher's start-up warnings.

Everything runs as a real subprocess: the doctor as a user types it, the application under
the real ``opentelemetry-instrument``. Installed packages are changed without touching the
project's environment: a mismatched release is faked by a ``.dist-info`` folder placed first
on ``PYTHONPATH`` (it wins over the installed one, as for pip's own resolution at run time),
and a missing instrumentation by a throwaway site folder holding every installed package but
that one, run with ``python -S``. Each problem is asserted as its exact line, fix included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.integration.served_ingest import ServedIngest

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")
TESTED = "pip install 'reproit-otel[otel]' (the set reproit-otel is tested with)"
NO_SERVER_SPAN = "its requests start no server span, so their failures are not captured"


def _env(tmp_path: Path, *paths: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "REPROIT_", "DJANGO_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*paths, tmp_path, REPO))
    env.update(extra)
    return env


def _doctor(
    tmp_path: Path, env: dict[str, str], *args: str, python: tuple[str, ...] = ()
) -> tuple[int, list[dict[str, Any]]]:
    argv = [*(python or (sys.executable,)), "-m", "reproit_otel", "doctor", *args, "--json"]
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def _problems(findings: list[dict[str, Any]], *topics: str) -> list[tuple[str, str, str]]:
    """The warnings and errors, of the given topics only when some are named.

    Without ``--import`` the doctor looks at every installed library, so the project's own
    environment may add findings of its own; tests of other topics leave them out.
    """
    return [
        (f["level"], f["topic"], f["message"])
        for f in findings
        if f["level"] != "ok" and (not topics or f["topic"] in topics)
    ]


def _fake_dist(site: Path, name: str, version: str, requires: list[str]) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    (folder / "METADATA").write_text(metadata, encoding="utf-8")


def test_a_typo_in_the_exporter_list_is_an_error_with_the_corrected_line(tmp_path: Path) -> None:
    code, findings = _doctor(tmp_path, _env(tmp_path, OTEL_TRACES_EXPORTER="otlp,reprot"))
    assert code == 1
    assert _problems(findings, "exporters") == [
        (
            "error",
            "exporters",
            "OTEL_TRACES_EXPORTER names 'reprot', which no installed package provides (did you "
            "mean reproit?): OpenTelemetry fails to start and nothing is traced; installed: "
            "console, otlp, otlp_proto_grpc, otlp_proto_http, reproit; "
            "fix: export OTEL_TRACES_EXPORTER=otlp,reproit",
        )
    ]


def test_an_exporter_list_without_reproit_is_a_warning(tmp_path: Path) -> None:
    code, findings = _doctor(tmp_path, _env(tmp_path, OTEL_TRACES_EXPORTER="otlp"))
    assert code == 0
    assert _problems(findings, "exporters") == [
        (
            "warning",
            "exporters",
            "OTEL_TRACES_EXPORTER is 'otlp', without reproit: reproit-otel then rests on its "
            "post-instrument hook alone, which launchers other than opentelemetry-instrument "
            "skip; fix: export OTEL_TRACES_EXPORTER=otlp,reproit",
        )
    ]
    _, findings = _doctor(tmp_path, _env(tmp_path, OTEL_TRACES_EXPORTER="otlp,reproit"))
    ok = {"level": "ok", "topic": "exporters", "message": "OTEL_TRACES_EXPORTER=otlp,reproit"}
    assert ok in findings


def test_a_mismatched_instrumentation_release_is_named_with_the_pinned_install(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    _fake_dist(
        site,
        "opentelemetry-instrumentation-flask",
        "0.66b2",
        ["opentelemetry-instrumentation==0.66b2", "opentelemetry-semantic-conventions==0.66b2"],
    )
    (tmp_path / "app.py").write_text("import flask\n", encoding="utf-8")
    code, findings = _doctor(tmp_path, _env(tmp_path, site), "--import", "app")
    needs = "opentelemetry-instrumentation-flask 0.66b2 needs opentelemetry-instrumentation==0.66b2"
    assert code == 1
    assert _problems(findings) == [
        (
            "error",
            "versions",
            f"{needs} but 0.66b1 is installed: OpenTelemetry skips or breaks what does not "
            f"match; fix: {TESTED}",
        ),
        (
            "error",
            "versions",
            "opentelemetry-instrumentation-flask 0.66b2 needs "
            "opentelemetry-semantic-conventions==0.66b2 but 0.66b1 is installed: OpenTelemetry "
            f"skips or breaks what does not match; fix: {TESTED}",
        ),
        (
            "error",
            "instrumented",
            "Flask's OpenTelemetry instrumentation does not match the installed OpenTelemetry "
            f"({needs} but 0.66b1 is installed): where it does not load, {NO_SERVER_SPAN}; "
            f"fix: {TESTED}",
        ),
    ]


def _switched_off_is_an_error(tmp_path: Path, source: str, entry_point: str, line: str) -> None:
    """An application of ``source``: doctor finds nothing wrong, then, with ``entry_point``
    in OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, exactly one error, ``line``."""
    (tmp_path / "app.py").write_text(source, encoding="utf-8")
    code, findings = _doctor(tmp_path, _env(tmp_path), "--import", "app")
    assert (code, _problems(findings)) == (0, [])
    off = _env(tmp_path, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=entry_point)
    code, findings = _doctor(tmp_path, off, "--import", "app")
    assert code == 1
    assert _problems(findings) == [("error", "instrumented", line)]


def test_httpx_is_a_recorded_client_whose_instrumentation_is_checked(tmp_path: Path) -> None:
    _switched_off_is_an_error(
        tmp_path,
        "import httpx\n",
        "httpx",
        "httpx is used but its OpenTelemetry instrumentation is not active "
        "(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS switches it off): its calls make no span, "
        "so captures cannot tell whether they are complete; "
        "fix: unset OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
    )


def test_psycopg3_is_a_recorded_driver_whose_instrumentation_is_checked(tmp_path: Path) -> None:
    _switched_off_is_an_error(
        tmp_path,
        "import psycopg\n",
        "psycopg",
        "psycopg 3 is used but its OpenTelemetry instrumentation is not active "
        "(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS switches it off): its calls make no span, "
        "so captures cannot tell whether they are complete; "
        "fix: unset OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
    )


def _site_without(tmp_path: Path, prefix: str) -> Path:
    """Every installed package but the distributions whose folder starts with ``prefix``."""
    site = tmp_path / "throwaway-site"
    site.mkdir()
    real = Path(sysconfig.get_paths()["purelib"])
    for entry in real.iterdir():
        if not entry.name.startswith(prefix):
            (site / entry.name).symlink_to(entry)
    return site


def test_a_missing_instrumentation_of_an_imported_framework_is_an_error(tmp_path: Path) -> None:
    site = _site_without(tmp_path, "opentelemetry_instrumentation_flask-")
    (tmp_path / "app.py").write_text("import flask\nimport requests\n", encoding="utf-8")
    env = _env(tmp_path, site)
    code, findings = _doctor(tmp_path, env, "--import", "app", python=(sys.executable, "-S"))
    assert code == 1
    assert _problems(findings) == [
        (
            "error",
            "instrumented",
            "Flask is used but its OpenTelemetry instrumentation is not active "
            f"(opentelemetry-instrumentation-flask is not installed): {NO_SERVER_SPAN}; "
            "fix: pip install 'reproit-otel[otel]'",
        )
    ]
    # Without --import every installed library is looked at, as a warning.
    code, findings = _doctor(tmp_path, env, python=(sys.executable, "-S"))
    assert code == 0
    assert [p for p in _problems(findings) if p[2].startswith("Flask ")] == [
        (
            "warning",
            "instrumented",
            "Flask is used but its OpenTelemetry instrumentation is not active "
            f"(opentelemetry-instrumentation-flask is not installed): {NO_SERVER_SPAN}; "
            "fix: pip install 'reproit-otel[otel]'",
        )
    ]


def test_threading_is_checked_for_every_application(tmp_path: Path) -> None:
    # Every application imports threading: without its instrumentation a request's calls on
    # a pool's threads are not its own (docs/capture.md, "Calls made on other threads").
    lost = (
        "calls a request makes on other threads (ThreadPoolExecutor, threading.Thread) are "
        "outside it, so they are not recorded and its captures claim complete effects without "
        "them"
    )
    _switched_off_is_an_error(
        tmp_path,
        "import json\n",
        "threading",
        "threading is used but its OpenTelemetry instrumentation is not active "
        f"(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS switches it off): {lost}; "
        "fix: unset OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
    )
    site = _site_without(tmp_path, "opentelemetry_instrumentation_threading-")
    env = _env(tmp_path, site)
    code, findings = _doctor(tmp_path, env, "--import", "app", python=(sys.executable, "-S"))
    assert code == 1
    assert _problems(findings) == [
        (
            "error",
            "instrumented",
            "threading is used but its OpenTelemetry instrumentation is not active "
            f"(opentelemetry-instrumentation-threading is not installed): {lost}; "
            "fix: pip install 'reproit-otel[otel]'",
        )
    ]


def test_a_django_module_is_imported_with_django_set_up(tmp_path: Path) -> None:
    (tmp_path / "manage.py").write_text(
        "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'proj.settings')\n",
        encoding="utf-8",
    )
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "proj" / "settings.py").write_text(
        "SECRET_KEY = 'doctor'\nINSTALLED_APPS = ['django.contrib.contenttypes', 'shop']\n"
        "DATABASES = {}\nUSE_TZ = True\n",
        encoding="utf-8",
    )
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "shop" / "models.py").write_text(
        "from django.db import models\n\n\nclass Order(models.Model):\n"
        "    sku = models.CharField(max_length=20)\n",
        encoding="utf-8",
    )
    code, findings = _doctor(tmp_path, _env(tmp_path), "--import", "shop.models")
    assert code == 0, _problems(findings)
    messages = [(f["topic"], f["message"]) for f in findings]
    assert ("django", "Django set up with proj.settings (from manage.py)") in messages
    assert ("import", "imported shop.models") in messages


def test_documented_variables_are_known_and_a_typo_gets_the_right_name(tmp_path: Path) -> None:
    env = _env(
        tmp_path,
        REPROIT_INGEST_URL="http://127.0.0.1:8765",
        REPROIT_INGEST_DB="sqlite:///x.db",
        REPROIT_INGEST_API_KEYS="a,b",
        REPROIT_INGEST_READ_KEYS="c",
        REPROIT_INGEST_REPLAY_EXEC="python app.py",
        REPROIT_ENDPONT="http://127.0.0.1:8765/v1/capture-batches",
    )
    code, findings = _doctor(tmp_path, env)
    assert code == 0
    assert _problems(findings, "configuration") == [
        (
            "warning",
            "configuration",
            "REPROIT_ENDPONT is not a reproit-otel variable (a typo?; docs/configuration.md "
            "lists them all); fix: rename it REPROIT_ENDPOINT",
        )
    ]


@pytest.mark.parametrize("key", ["dev-key", "wrong-key"])
def test_ping_says_whether_the_ingest_takes_the_key(tmp_path: Path, key: str) -> None:
    served = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", "--api-key", "dev-key")
    endpoint = f"{served.base_url}/v1/capture-batches"
    target = endpoint.replace("localhost", "127.0.0.1")
    try:
        env = _env(
            tmp_path,
            OTEL_TRACES_EXPORTER="reproit",
            REPROIT_ENDPOINT=endpoint,
            REPROIT_API_KEY=key,
            REPROIT_APP_ID="orders",
        )
        code, findings = _doctor(tmp_path, env, "--ping")
    finally:
        served.stop()
    [ping] = [f for f in findings if f["topic"] == "ping"]
    if key == "dev-key":
        assert (code, ping["level"]) == (0, "ok")
        assert ping["message"] == (
            f"{target} answered HTTP 400 to an empty batch: reachable, key accepted"
        )
    else:
        assert (code, ping["level"]) == (1, "error")
        assert ping["message"] == (
            f"the ingest at {target} refused the API key (HTTP 401): capture batches are "
            "dropped; fix: set REPROIT_API_KEY to a key the ingest accepts (reproit-otel serve "
            "--api-key KEY, or REPROIT_INGEST_API_KEYS where it runs)"
        )


def test_ping_names_a_refused_connection(tmp_path: Path) -> None:
    from tests.integration.loopback_ingest import down_url

    endpoint = down_url()
    env = _env(tmp_path, REPROIT_ENDPOINT=endpoint, REPROIT_API_KEY="k", REPROIT_APP_ID="a")
    code, findings = _doctor(tmp_path, env, "--ping")
    assert code == 1
    assert [f["message"] for f in findings if f["topic"] == "ping"] == [
        f"nothing listens at {endpoint} (connection refused): capture batches are dropped; "
        "fix: start the ingest (reproit-otel serve) or correct REPROIT_ENDPOINT"
    ]


_LATE_IMPORT = """\
import sys

sys.stderr.write("app: started\\n")
import fastapi  # noqa: E402,F401

sys.stderr.write("app: imported fastapi\\n")
import fastapi.routing  # noqa: E402,F401
import flask  # noqa: E402,F401

sys.stderr.write("app: imported flask\\n")
"""


def _without_opentelemetry_range_line(stderr: str) -> list[str]:
    # OpenTelemetry says itself that SQLAlchemy 2.1 is past what its instrumentation instruments
    # (up to 2.0); reproit-otel does not repeat it, and nothing else may be written.
    return [line for line in stderr.splitlines() if not line.startswith("sqlalchemy only ")]


_SOUND_APP = """\
import sys

sys.stderr.write("app: started\\n")
import django  # noqa: E402,F401
import flask  # noqa: E402,F401
import psycopg2  # noqa: E402,F401
import requests  # noqa: E402,F401

sys.stderr.write("app: done\\n")
"""


def test_the_launcher_warns_once_per_inactive_instrumentation_and_mismatch(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    _fake_dist(site, "opentelemetry-instrumentation-redis", "0.60b0", ["opentelemetry-api==1.39.0"])
    (tmp_path / "app.py").write_text(_LATE_IMPORT, encoding="utf-8")
    env = _env(
        tmp_path,
        site,
        OTEL_TRACES_EXPORTER="reproit",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="flask,fastapi",
    )
    done = subprocess.run(
        [str(LAUNCHER), sys.executable, "app.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    fix = "fix: unset OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
    off = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS switches it off"
    assert _without_opentelemetry_range_line(done.stderr) == [
        "reproit-otel: warning: opentelemetry-instrumentation-redis 0.60b0 needs "
        "opentelemetry-api==1.39.0 but 1.45.1 is installed: OpenTelemetry skips or breaks "
        f"what does not match; fix: {TESTED}",
        "app: started",
        "reproit-otel: warning: FastAPI is used but its OpenTelemetry instrumentation is not "
        f"active ({off}): {NO_SERVER_SPAN}; {fix}",
        "app: imported fastapi",
        # Not imported at start-up (reproit-otel hooks Flask when the application imports it):
        # said at the application's first import, like FastAPI.
        "reproit-otel: warning: Flask is used but its OpenTelemetry instrumentation is not "
        f"active ({off}): {NO_SERVER_SPAN}; {fix}",
        "app: imported flask",
    ]


def test_the_launcher_says_nothing_when_the_set_is_sound(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(_SOUND_APP, encoding="utf-8")
    env = _env(
        tmp_path,
        OTEL_TRACES_EXPORTER="reproit",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    done = subprocess.run(
        [str(LAUNCHER), sys.executable, "app.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = _without_opentelemetry_range_line(done.stderr)
    assert (done.returncode, lines) == (0, ["app: started", "app: done"])


def test_a_library_release_outside_the_instrumented_range_is_named(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_dist(site, "flask", "0.9", [])
    (tmp_path / "app.py").write_text("import flask\n", encoding="utf-8")
    code, findings = _doctor(tmp_path, _env(tmp_path, site), "--import", "app")
    assert code == 1
    assert _problems(findings) == [
        (
            "warning",
            "supported",
            "Flask 0.9 is older than the oldest release reproit-otel is tested with "
            "(flask>=2.3,<3.2, docs/versions.md): captures of what it does may be incomplete "
            "or missing; fix: pip install 'flask>=2.3,<3.2'",
        ),
        (
            "error",
            "instrumented",
            "Flask is used but its OpenTelemetry instrumentation is not active (flask 0.9 is "
            "outside what opentelemetry-instrumentation-flask 0.66b1 instruments, flask>=1.0): "
            f"{NO_SERVER_SPAN}; fix: pip install 'flask>=1.0'",
        ),
    ]
