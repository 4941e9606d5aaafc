"""Versions outside the support matrix (docs/versions.md) are named by doctor and at start-up.

As in ``test_doctor_setup.py``, an installed release is changed without touching the
environment: a ``.dist-info`` folder first on ``PYTHONPATH`` wins over the installed one.
The application itself runs under the real ``opentelemetry-instrument``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reproit_otel.supported import SUPPORTED
from tests.integration.test_doctor_setup import (
    LAUNCHER,
    _doctor,
    _env,
    _fake_dist,
    _problems,
    _without_opentelemetry_range_line,
)

MAY_BE = "captures of what it does may be incomplete or missing"
# urllib3 carries requests' calls: operations making one are incomplete (D4), not uploaded
# (test_unsupported_capture.py shows it on the capture pipeline).
OLD_URLLIB3 = (
    "urllib3 1.25.11 is older than the oldest release reproit-otel is tested with "
    "(urllib3>=1.26,<3, docs/versions.md): every operation that makes a requests call is "
    "marked incomplete and not uploaded; fix: pip install 'urllib3>=1.26,<3'"
)
NEW_SQLALCHEMY = (
    "SQLAlchemy 2.2.0 is newer than the newest release reproit-otel is tested with "
    f"(sqlalchemy>=2.0,<2.2, docs/versions.md): {MAY_BE}; fix: pip install "
    "'sqlalchemy>=2.0,<2.2'"
)


def _outside(site: Path) -> None:
    _fake_dist(site, "urllib3", "1.25.11", [])
    _fake_dist(site, "sqlalchemy", "2.2.0", [])


def test_doctor_names_each_release_outside_the_matrix_with_its_fix(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _outside(site)
    code, findings = _doctor(tmp_path, _env(tmp_path, site))
    assert code == 0  # a warning: the service runs, its captures may not be whole
    assert _problems(findings, "supported") == [
        ("warning", "supported", OLD_URLLIB3),
        ("warning", "supported", NEW_SQLALCHEMY),
    ]


def test_doctor_says_ok_when_everything_is_in_range(tmp_path: Path) -> None:
    _, findings = _doctor(tmp_path, _env(tmp_path))
    assert [f for f in findings if f["topic"] == "supported"] == [
        {
            "level": "ok",
            "topic": "supported",
            "message": "Python and every installed library are in the tested range",
        }
    ]


def test_start_up_says_it_once_on_stderr(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _outside(site)
    (tmp_path / "app.py").write_text(
        'import sys\nimport requests\nsys.stderr.write("app: done\\n")\n', encoding="utf-8"
    )
    env = _env(
        tmp_path,
        site,
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
    assert done.returncode == 0, done.stderr
    assert _without_opentelemetry_range_line(done.stderr) == [
        f"reproit-otel: warning: {OLD_URLLIB3}",
        f"reproit-otel: warning: {NEW_SQLALCHEMY}",
        "app: done",
    ]


def test_the_matrix_page_states_every_range() -> None:
    page = " ".join(
        (Path(__file__).resolve().parents[2] / "docs" / "versions.md")
        .read_text(encoding="utf-8")
        .split()
    )
    missing = [
        row.distribution + row.versions
        for row in SUPPORTED
        if f"`{row.distribution}{row.versions}`" not in page
    ]
    assert missing == []
