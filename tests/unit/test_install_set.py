"""The one install line of the guides yields the OpenTelemetry set the tests run with.

``pip install 'reproit-otel[otel]'`` pins exact releases; they must be the releases
``constraints.txt`` gives the project's own environment (which ``scripts/bootstrap`` installs
with that extra), and cover the SDK, the distro, the exporters and the instrumentation of
every library reproit-otel needs spans from (``reproit_otel.otel_setup.LIBRARIES``).
"""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib  # type: ignore[no-redef]

from reproit_otel.otel_setup import INSTALL_TESTED_SET, LIBRARIES

ROOT = Path(__file__).resolve().parents[2]


def _extra(name: str) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins: dict[str, str] = {}
    for text in project["optional-dependencies"][name]:
        requirement = Requirement(text)
        [specifier] = requirement.specifier
        assert specifier.operator == "==", f"{text}: the otel extra pins exact releases"
        pins[requirement.name] = specifier.version
    return pins


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name] = version
    return pins


def test_the_otel_extra_pins_the_releases_of_constraints_txt() -> None:
    extra, constraints = _extra("otel"), _constraints()
    assert {name: constraints.get(name) for name in extra} == extra


def test_the_otel_extra_covers_sdk_distro_exporters_and_every_checked_library() -> None:
    extra = _extra("otel")
    wanted = {"opentelemetry-sdk", "opentelemetry-distro", "opentelemetry-exporter-otlp"}
    wanted |= {library.distribution for library in LIBRARIES}
    assert sorted(wanted - set(extra)) == []
    assert INSTALL_TESTED_SET == "pip install 'reproit-otel[otel]'"


def test_bootstrap_installs_the_extra_with_the_constraints() -> None:
    script = (ROOT / "scripts" / "bootstrap").read_text(encoding="utf-8")
    assert "-c constraints.txt -e '.[dev,otel]'" in script


def test_the_release_the_quickstart_names_for_other_instrumentations_is_the_tested_one() -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    constraints = _constraints()
    assert (
        f"opentelemetry-instrumentation-redis=={constraints['opentelemetry-instrumentation']}"
        in (" ".join(text.split()))
    )
    assert f"`opentelemetry-sdk` {constraints['opentelemetry-sdk']}" in " ".join(text.split())


def test_the_compatibility_page_names_the_pinned_releases() -> None:
    text = " ".join((ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8").split())
    constraints = _constraints()
    assert (
        f"OpenTelemetry SDK {constraints['opentelemetry-sdk']} and the "
        f"{constraints['opentelemetry-instrumentation']} instrumentations"
    ) in text


def test_the_installed_package_declares_its_entry_points() -> None:
    # The launcher and the stack tests find reproit-otel through these: a checkout used without
    # `pip install -e .` (scripts/bootstrap) fails here, by name, instead of in every stack test.
    from importlib.metadata import entry_points

    groups = (
        "opentelemetry_traces_exporter",
        "opentelemetry_post_instrument",
        "opentelemetry_traces_sampler",
        "pytest11",
    )
    found = {
        (group, entry.name, entry.value)
        for group in groups
        for entry in entry_points(group=group)
        if entry.value.startswith("reproit_otel")
    }
    assert found == {
        ("opentelemetry_traces_exporter", "reproit", "reproit_otel.bootstrap:ReproitSpanExporter"),
        ("opentelemetry_post_instrument", "reproit", "reproit_otel.bootstrap:post_instrument"),
        (
            "opentelemetry_traces_sampler",
            "reproit_parentbased_traceidratio",
            "reproit_otel.bootstrap:reproit_parentbased_traceidratio",
        ),
        ("pytest11", "reproit", "reproit_otel.pytest_plugin"),
    }
