"""The public facade stays in step with the contract and with itself."""

from __future__ import annotations

import re

import reproit_otel
from tests.vectors import protocol_path


def _section_10_names() -> set[str]:
    spec = protocol_path().read_text(encoding="utf-8")
    section = spec.split("## 10.", 1)[1].split("\n## 11.", 1)[0]
    names: set[str] = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        first_cell = row.split("|")[1]
        for code in re.findall(r"`([^`]+)`", first_cell):
            # `name(...)`, `Class.method(...)` or `Class`; skip `trace.x` methods and
            # prose lists such as the TraceError codes.
            match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(?:[.(]|$)", code)
            if match and not code.startswith("trace."):
                names.add(match.group(1))
    return names


def test_all_matches_the_lazy_table() -> None:
    # Sorting of __all__ itself is enforced by ruff (RUF022).
    assert set(reproit_otel.__all__) == {*reproit_otel._EXPORTS, "__version__"}


def test_every_public_name_resolves() -> None:
    for name in reproit_otel.__all__:
        assert getattr(reproit_otel, name) is not None, name


def test_every_name_of_protocol_section_10_is_public() -> None:
    names = _section_10_names()
    assert {"canonical_json", "BackendTrace", "ReplayRNG", "serve_pg", "reset_sequence"} <= names
    missing = sorted(names - set(reproit_otel.__all__))
    assert missing == []


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        reproit_otel.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def test_every_public_name_is_documented() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    undocumented = [
        name for name in reproit_otel.__all__ if name != "__version__" and f"`{name}`" not in page
    ]
    assert undocumented == []
