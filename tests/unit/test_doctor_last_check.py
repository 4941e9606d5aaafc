"""``doctor`` reads what the last ``check`` kept (``.reproit/last-check.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reproit_otel.check.judgement import CREDENTIAL_HINT, CheckResult, Verdict, last_check_record
from reproit_otel.cli.check import LAST_CHECK
from reproit_otel.cli.doctor import Finding, last_check_findings


def _keep(folder: Path, text: str) -> None:
    (folder / LAST_CHECK).parent.mkdir(parents=True)
    (folder / LAST_CHECK).write_text(text, encoding="utf-8")


def test_a_check_refused_as_not_logged_in_is_a_warning_with_the_overrides(tmp_path: Path) -> None:
    result = CheckResult(
        mode="production",
        operation="POST /notes",
        verdict=Verdict.INCONCLUSIVE,
        reason="...",
        observed={"status": 401, "location": None},
        likely_cause=f"the application refused the request (HTTP 401): {CREDENTIAL_HINT}",
    )
    record = last_check_record(result, "capsule.json")
    assert record == {
        "capsule": "capsule.json",
        "operation": "POST /notes",
        "verdict": "inconclusive",
        "status": 401,
        "location": None,
        "likelyCause": f"the application refused the request (HTTP 401): {CREDENTIAL_HINT}",
    }
    _keep(tmp_path, json.dumps(record))

    assert last_check_findings(tmp_path) == [
        Finding(
            "warning",
            "last check",
            "the last check of capsule.json (POST /notes) was inconclusive: the application "
            "refused the request (HTTP 401), so the replayed request was not logged in as "
            "production's; fix: mint a credential on this machine and run `reproit-otel check "
            "capsule.json --exec ... --header 'Name: value'` (or `--cookie 'name=value'`)",
        )
    ]


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"capsule": "c.json", "verdict": "fixed", "status": 201, "likelyCause": None}),
        json.dumps({"capsule": "c.json", "likelyCause": "it redirected to /home before ..."}),
        "{not json",
        "[1, 2]",
    ],
)
def test_anything_else_says_nothing(tmp_path: Path, text: str) -> None:
    _keep(tmp_path, text)
    assert last_check_findings(tmp_path) == []


def test_no_check_yet_says_nothing(tmp_path: Path) -> None:
    assert last_check_findings(tmp_path) == []


def test_an_offline_check_is_not_kept() -> None:
    result = CheckResult(
        mode="offline", operation="POST /notes", verdict=Verdict.REPRODUCED, reason="..."
    )
    assert last_check_record(result, "capsule.json") is None
