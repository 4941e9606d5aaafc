"""scripts/matrix, docs/versions.md and the declared ranges tell the same support matrix.

The cells themselves run with ``scripts/matrix``; here: every cell the page lists is one the
runner has (and the other way round), every test file a cell runs exists, the oldest
OpenTelemetry family pins the same packages as ``constraints.txt`` at the lower end of the
declared range, and every pin of a cell lies inside the range it tests.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib  # type: ignore[no-redef]
from packaging.specifiers import SpecifierSet

from reproit_otel.supported import SUPPORTED

ROOT = Path(__file__).resolve().parents[2]


def _matrix() -> ModuleType:
    path = str(ROOT / "scripts" / "matrix")
    spec = importlib.util.spec_from_loader("matrix", SourceFileLoader("matrix", path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["matrix"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _pins(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name] = version
    return pins


def test_the_list_names_every_cell_of_the_versions_page() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "matrix"), "--list"],
        capture_output=True,
        text=True,
        check=True,
    )
    listed = re.findall(r"^(\S+?)(?: \[ci\])?: Python ", done.stdout, flags=re.MULTILINE)
    page = (ROOT / "docs" / "versions.md").read_text(encoding="utf-8")
    table = page.partition("## The cells")[2].partition("\n\n```")[0]
    documented = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert listed == documented
    assert listed == [cell.name for cell in _matrix().CELLS]


def test_every_test_file_and_constraints_file_of_a_cell_exists() -> None:
    missing = [
        f"{cell.name}: {path}"
        for cell in _matrix().CELLS
        for path in (cell.constraints, *cell.tests)
        if not (ROOT / path).exists()
    ]
    assert missing == []


def test_the_oldest_family_pins_the_same_packages_at_the_lower_end() -> None:
    newest = _pins(ROOT / "constraints.txt")
    oldest = _pins(ROOT / "constraints" / "otel-oldest.txt")
    assert sorted(oldest) == sorted(name for name in newest if name.startswith("opentelemetry"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {
        Requirement(text).name: Requirement(text).specifier
        for text in project["dependencies"]
        if Requirement(text).name.startswith("opentelemetry")
    }
    lowest = {
        name: min(s.version for s in spec if s.operator == ">=") for name, spec in declared.items()
    }
    assert {name: oldest[name] for name in lowest} == {
        "opentelemetry-api": "1.36.0",
        "opentelemetry-sdk": "1.36.0",
        "opentelemetry-instrumentation": "0.57b0",
    }
    assert {name: lowest[name] for name in lowest} == {
        "opentelemetry-api": "1.36",
        "opentelemetry-sdk": "1.36",
        "opentelemetry-instrumentation": "0.57b0",
    }


def test_every_pin_of_a_cell_is_inside_the_range_it_tests() -> None:
    ranges = {row.distribution: SpecifierSet(row.versions) for row in SUPPORTED}
    outside = []
    for cell in _matrix().CELLS:
        pins = [Requirement(pin) for pin in cell.pins]
        pins += [
            Requirement(f"{name}=={version}")
            for name, version in _pins(ROOT / cell.constraints).items()
        ]
        for pin in pins:
            [exact] = pin.specifier
            wanted = ranges.get(pin.name)
            if wanted is not None and not wanted.contains(exact.version, prereleases=True):
                outside.append(f"{cell.name}: {pin}")
    assert outside == []
