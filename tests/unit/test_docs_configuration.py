"""The documentation cannot drift from the code: settings, CLI flags, variables and links."""

from __future__ import annotations

import re
from pathlib import Path

from reproit_otel.cli import build_parser
from reproit_otel.cli.reference import render_cli_markdown, replace_section
from reproit_otel.config import SETTINGS, render_markdown
from reproit_otel.variables import known_variables, render_other_markdown

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
REGENERATE = "python -m reproit_otel.cli.reference docs/configuration.md"


def _section(name: str) -> str:
    text = CONFIGURATION.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {name}:begin -->\n(.*)<!-- {name}:end -->", text, flags=re.S)
    assert match is not None, f"docs/configuration.md lost its {name} markers"
    return match.group(1)


def test_the_settings_table_is_the_generated_one() -> None:
    assert _section("settings") == render_markdown(), f"stale; regenerate: {REGENERATE}"


def test_the_command_line_reference_is_the_generated_one() -> None:
    assert _section("cli") == render_cli_markdown(), f"stale; regenerate: {REGENERATE}"


def test_every_subcommand_and_flag_is_documented() -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    parser = build_parser()
    [subcommands] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    missing = []
    for name, subparser in subcommands.choices.items():
        if f"### `reproit-otel {name}`" not in text:
            missing.append(name)
        for action in subparser._actions:
            missing += [
                f"{name} {flag}"
                for flag in action.option_strings
                if flag not in ("-h", "--help") and f"`{flag}" not in text
            ]
    assert missing == []


def test_every_environment_variable_the_package_reads_is_documented() -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    used = set()
    for source in (ROOT / "reproit_otel").rglob("*.py"):
        used |= set(re.findall(r"\bREPROIT_[A-Z][A-Z0-9_]*[A-Z0-9]\b", source.read_text("utf-8")))
    assert sorted(name for name in used if f"`{name}`" not in text) == []


def test_relative_links_in_the_docs_and_example_readmes_resolve() -> None:
    pages = [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "examples").rglob("README.md"),
        *(ROOT / "collector-config").rglob("*.md"),
    ]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text("utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_replace_section_swaps_only_the_named_section() -> None:
    text = "a\n<!-- one:begin -->\nold\n<!-- one:end -->\n<!-- two:begin -->\nx\n<!-- two:end -->\n"
    assert replace_section(text, "one", "new\n") == (
        "a\n<!-- one:begin -->\nnew\n<!-- one:end -->\n<!-- two:begin -->\nx\n<!-- two:end -->\n"
    )


def test_the_other_variables_table_is_the_generated_one() -> None:
    assert _section("variables") == render_other_markdown(), f"stale; regenerate: {REGENERATE}"


def test_the_documented_variables_are_exactly_those_doctor_knows() -> None:
    documented = set()
    for name in ("settings", "variables"):
        documented |= set(re.findall(r"^\| `(REPROIT_[A-Z0-9_]+)`", _section(name), flags=re.M))
    from_table = {setting.env for setting in SETTINGS}
    assert from_table <= documented
    assert documented == known_variables()
    for name in ("REPROIT_INGEST_URL", "REPROIT_INGEST_DB", "REPROIT_INGEST_API_KEYS"):
        assert name in known_variables()
    assert {"REPROIT_INGEST_READ_KEYS", "REPROIT_INGEST_REPLAY_EXEC"} <= known_variables()
