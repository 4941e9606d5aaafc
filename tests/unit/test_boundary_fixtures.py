"""Fixture files: settings, names, what is written and how a bad file is reported."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from reproit_otel.errors import ConfigurationError
from reproit_otel.fixtures import (
    FixtureFile,
    FixtureSettings,
    ToolsMode,
    fixture_document,
    fixture_name,
    read_fixture,
    scan_fixtures,
    tools_settings,
    write_fixture,
)
from reproit_otel.instrumentation.invoke import boundary

EXCHANGE = {
    "protocol": "invoke",
    "request": {"tool": "imap", "op": "fetch", "input": {"uid": 1}},
    "response": {"ok": True, "data": "é"},
}


def test_settings() -> None:
    assert tools_settings({}) == FixtureSettings(ToolsMode.OFF, Path(".reproit/fixtures"))
    assert tools_settings({"REPROIT_TOOLS": " Record ", "REPROIT_FIXTURES": "fx"}) == (
        FixtureSettings(ToolsMode.RECORD, Path("fx"))
    )
    assert tools_settings({"REPROIT_TOOLS": "replay"}).mode is ToolsMode.REPLAY
    with pytest.raises(ConfigurationError) as error:
        tools_settings({"REPROIT_TOOLS": "1"})
    assert (
        str(error.value) == "REPROIT_TOOLS='1' is not a mode; expected one of: off, record, replay"
    )


def test_names_replace_unsafe_characters() -> None:
    assert fixture_name("imap", "fetch", "ab12") == "module.imap.fetch.ab12.json"
    assert fixture_name("my tool/v2", "get.all", "k") == "module.my_tool_v2.get_all.k.json"


def test_written_fixtures_read_back(tmp_path: Path) -> None:
    name = fixture_name("imap", "fetch", "ab12")
    path = write_fixture(tmp_path / "new", name, fixture_document("ab12", EXCHANGE))
    assert path.read_text(encoding="utf-8") == (
        json.dumps(
            {"exchange": EXCHANGE, "format": "reproit-invoke-fixture", "key": "ab12", "version": 1},
            indent=2,
            ensure_ascii=False,
            sort_keys=True,
        )
        + "\n"
    )
    assert read_fixture(path) == FixtureFile(path, "imap", "fetch", "ab12", EXCHANGE, None)
    write_fixture(tmp_path / "new", name, fixture_document("ab12", {**EXCHANGE, "response": 1}))
    assert json.loads(path.read_text())["exchange"]["response"] == 1  # the last one wins
    assert [p.name for p in (tmp_path / "new").iterdir()] == [name]


@pytest.mark.parametrize(
    ("content", "problem", "older"),
    [
        (
            "{",
            "is not JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
            False,
        ),
        ("[]", "does not hold a JSON object", False),
        (
            json.dumps({"exchange": EXCHANGE}),
            "is in an older fixture format (no format/version)",
            True,
        ),
        (
            json.dumps({"format": "reproit-invoke-fixture", "version": 0, "key": "k"}),
            "is in fixture format version 0",
            True,
        ),
        (
            json.dumps({"format": "reproit-invoke-fixture", "version": 2, "key": "k"}),
            "is in fixture format version 2, newer than this reproit-otel reads (1); "
            "upgrade reproit-otel",
            False,
        ),
        (
            json.dumps(fixture_document("other", EXCHANGE)),
            "is named for another key than it holds",
            True,
        ),
        (
            json.dumps(fixture_document("k", {"request": {"tool": "imap"}})),
            "has no tool and op in its request",
            False,
        ),
    ],
)
def test_bad_files_say_what_is_wrong(
    tmp_path: Path, content: str, problem: str, older: bool
) -> None:
    path = tmp_path / "module.imap.fetch.k.json"
    path.write_text(content)
    assert read_fixture(path) == FixtureFile(path, None, None, None, None, problem, older)


def test_scan_lists_fixture_files_in_name_order(tmp_path: Path) -> None:
    assert list(scan_fixtures(tmp_path / "missing")) == []
    for key in ("b", "a"):
        write_fixture(tmp_path, fixture_name("t", "o", key), fixture_document(key, EXCHANGE))
    (tmp_path / "notes.json").write_text("{}")
    assert [f.path.name for f in scan_fixtures(tmp_path)] == [
        "module.t.o.a.json",
        "module.t.o.b.json",
    ]


def test_long_tool_and_op_names_keep_their_head_and_hash_the_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = "t" * 300
    op = "operation-" + "o" * 290
    other_op = "operation-" + "o" * 289 + "x"  # the same first 80 characters
    key = "0123456789abcdef01234567"
    name = fixture_name(tool, op, key)
    tool_tail = hashlib.sha256(tool.encode()).hexdigest()[:15]
    op_tail = hashlib.sha256(op.encode()).hexdigest()[:15]
    assert name == f"module.{'t' * 80}-{tool_tail}.{op[:80]}-{op_tail}.{key}.json"
    assert len(name.encode()) <= 255
    assert fixture_name(tool, other_op, key) != name
    assert fixture_name("t" * 96, "o", key) == f"module.{'t' * 96}.o.{key}.json"

    # A real boundary with such names records a fixture the file system accepts, and replays it.
    ran: list[int] = []

    @boundary(tool, op)
    def call(value: int) -> dict[str, int]:
        ran.append(value)
        return {"doubled": value * 2}

    monkeypatch.setenv("REPROIT_FIXTURES", str(tmp_path))
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    assert call(21) == {"doubled": 42}
    [written] = list(tmp_path.iterdir())
    assert len(written.name.encode()) <= 255
    assert read_fixture(written).problem is None
    monkeypatch.setenv("REPROIT_TOOLS", "replay")
    assert call(21) == {"doubled": 42}
    assert ran == [21]  # the replayed call was served from the fixture, not run
