"""``reproit-otel doctor [--import MODULE]... [--fixtures DIR] [--ping] [--json]``: check.

What it checks, in order, printing one line per finding (``ok``, ``warning`` or ``error``;
a problem's line ends with ``fix:`` and the command or change that fixes it):

1. the installation: reproit-otel and the OpenTelemetry packages with their versions (API and
   SDK must agree), and the entry points zero-code use relies on (the ``reproit`` traces
   exporter and sampler, the ``opentelemetry_post_instrument`` hook, the console script);
2. the configuration: every ``REPROIT_*`` variable parses (a name that is neither in the
   settings table nor in the other documented variables, ``reproit_otel.variables``, is a
   warning: probably a typo), whether uploads can run, ``REPROIT_TOOLS`` and
   ``REPROIT_REPLAY`` (the capsule must load); ``OTEL_TRACES_EXPORTER`` names only installed
   exporters and includes ``reproit``; with ``--ping``, the ingest answers at
   ``REPROIT_ENDPOINT`` and accepts the key (``cli/doctor_setup.py``);
3. the modules named by ``--import`` are imported, so their invoke boundaries are declared
   (an import that fails is an error); a Django project is set up first
   (``DJANGO_SETTINGS_MODULE``, else the one ``manage.py`` names). Then the OpenTelemetry
   packages must agree in version, and each library the modules imported (every installed
   one without ``--import``) must have its instrumentation installed, matching and not
   switched off; Python and every installed library it records or reads spans from must be
   in the versions it is tested with (``docs/versions.md``, ``reproit_otel.supported``);
4. invoke-boundary fixtures (``REPROIT_FIXTURES`` or ``--fixtures``): every declared
   boundary with no usable fixture is an error; fixtures no declared boundary uses are
   warnings; fixtures in an older format are warnings with the command to re-record them;
5. client libraries the imported modules brought in that reproit-otel does not record
   (aiohttp, redis, grpc, ...): a replay cannot serve their calls unless they run inside an
   invoke boundary;
6. the stacks the project uses (Django, Flask, FastAPI/Starlette, SQLAlchemy), what is
   captured there and what cannot be seen (``doctor_stacks.py``): a Django project without
   ``DJANGO_SETTINGS_MODULE``, a database or SQLAlchemy engine on a driver reproit-otel does
   not record, a missing OpenTelemetry instrumentation.

Exit status: 1 when any error was found, else 0.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from reproit_otel._version import __version__
from reproit_otel.cli.terminal import json_text, say, shown

__all__ = ["Finding", "diagnose", "register", "run"]

Level = Literal["ok", "warning", "error"]

_OTEL_PACKAGES = (
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-instrumentation",
    "opentelemetry-distro",
    "opentelemetry-exporter-otlp-proto-http",
)
# (group, name or None for "any entry pointing into reproit_otel", what it enables)
_ENTRY_POINTS = (
    ("console_scripts", "reproit-otel", "the reproit-otel command"),
    ("opentelemetry_traces_exporter", "reproit", "OTEL_TRACES_EXPORTER=reproit"),
    (
        "opentelemetry_traces_sampler",
        "reproit_parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER=reproit_parentbased_traceidratio",
    ),
    ("opentelemetry_post_instrument", None, "installing under opentelemetry-instrument"),
)
# Client libraries whose calls reproit-otel does not record, by top-level module.
_UNRECORDED = {
    "aio_pika": "RabbitMQ (aio-pika)",
    "aiohttp": "HTTP (aiohttp)",
    "aiokafka": "Kafka (aiokafka)",
    "asyncpg": "PostgreSQL (asyncpg)",
    "boto3": "AWS (boto3)",
    "cassandra": "Cassandra",
    "confluent_kafka": "Kafka (confluent-kafka)",
    "elasticsearch": "Elasticsearch",
    "ftplib": "FTP (ftplib)",
    "grpc": "gRPC (grpcio)",
    "imaplib": "IMAP (imaplib)",
    "kafka": "Kafka (kafka-python)",
    "ldap3": "LDAP (ldap3)",
    "motor": "MongoDB (motor)",
    "MySQLdb": "MySQL (mysqlclient)",
    "nats": "NATS",
    "paramiko": "SSH (paramiko)",
    "pg8000": "PostgreSQL (pg8000)",
    "pika": "RabbitMQ (pika)",
    "poplib": "POP3 (poplib)",
    "pycurl": "HTTP (pycurl)",
    "pymongo": "MongoDB (pymongo)",
    "pymysql": "MySQL (PyMySQL)",
    "redis": "Redis (redis-py)",
    "smtplib": "SMTP (smtplib)",
}


@dataclass(frozen=True)
class Finding:
    """One line of the report."""

    level: Level
    topic: str
    message: str


def register(subparsers: Any) -> None:
    """Add the ``doctor`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "doctor",
        help="check the installation, the configuration and the invoke-boundary fixtures",
        description=(
            "Check that reproit-otel is installed and configured, import the application's "
            "modules and check their invoke boundaries against the fixtures. Exit 1 when an "
            "error was found."
        ),
    )
    parser.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first so its boundaries are declared (repeatable)",
    )
    parser.add_argument(
        "--fixtures",
        metavar="DIR",
        help="fixtures directory (default: $REPROIT_FIXTURES or .reproit/fixtures)",
    )
    parser.add_argument(
        "--ping",
        action="store_true",
        help="POST an empty batch to REPROIT_ENDPOINT with the key (the ingest refuses it as "
        "a batch and stores nothing) to check that it is reachable and accepts the key",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the findings; 1 when any is an error."""
    findings = diagnose(args.modules, fixtures=args.fixtures, ping=args.ping)
    if args.json:
        say(json_text([f.__dict__ for f in findings]))
    else:
        for finding in findings:
            say(f"{shown(finding.level):<8} {shown(finding.topic):<13} {shown(finding.message)}")
        errors = sum(1 for f in findings if f.level == "error")
        warnings = sum(1 for f in findings if f.level == "warning")
        say(f"{errors} error(s), {warnings} warning(s)")
    return 1 if any(f.level == "error" for f in findings) else 0


def diagnose(
    modules: Iterable[str] = (),
    *,
    fixtures: str | None = None,
    environ: Mapping[str, str] | None = None,
    ping: bool = False,
) -> list[Finding]:
    """Every finding, in report order (see the module docstring)."""
    from reproit_otel.cli import doctor_setup

    env = os.environ if environ is None else environ
    given = dict(env)
    modules = list(modules)
    # reproit-otel's own imports happen before the baseline, so only the application's count.
    importlib.import_module("reproit_otel.instrumentation.invoke")
    findings: list[Finding] = []
    findings += _installation()
    findings += _configuration(env)
    findings += doctor_setup.exporter_findings(env)
    if ping:
        from reproit_otel.config import load_config

        findings += doctor_setup.ping_findings(load_config(env))
    before = set(sys.modules)
    findings += doctor_setup.setup_django(modules, env)
    findings += _imports(modules)
    imported = set(sys.modules) - before
    findings += doctor_setup.package_findings(env, imported if modules else None)
    findings += _fixtures(fixtures, env)
    findings += _unrecorded(imported)
    from reproit_otel.cli.doctor_stacks import stack_findings

    # As given: the Django set-up above may have set DJANGO_SETTINGS_MODULE from manage.py.
    findings += stack_findings(given, {name.partition(".")[0] for name in imported})
    return findings


# -- 1. installation ---------------------------------------------------------------------------


def _installation() -> list[Finding]:
    found = [Finding("ok", "installation", f"reproit-otel {__version__}")]
    versions: dict[str, str] = {}
    for package in _OTEL_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    for required in _OTEL_PACKAGES[:3]:
        if required not in versions:
            found.append(
                Finding(
                    "error",
                    "installation",
                    f"{required} is not installed; pip install reproit-otel installs it",
                )
            )
    listed = ", ".join(f"{name} {version}" for name, version in versions.items())
    if listed:
        found.append(Finding("ok", "installation", listed))
    api, sdk = versions.get("opentelemetry-api"), versions.get("opentelemetry-sdk")
    if api and sdk and api != sdk:
        found.append(
            Finding(
                "warning",
                "installation",
                f"opentelemetry-api {api} and opentelemetry-sdk {sdk} differ; install matching "
                "versions (pip install opentelemetry-sdk==" + api + ")",
            )
        )
    found += _entry_points()
    return found


def _entry_points() -> list[Finding]:
    found: list[Finding] = []
    for group, name, purpose in _ENTRY_POINTS:
        points = importlib.metadata.entry_points(group=group)
        ours = [
            point
            for point in points
            if point.value.startswith("reproit_otel") and (name is None or point.name == name)
        ]
        if ours:
            found.append(
                Finding("ok", "entry points", f"{group}: {ours[0].name} = {ours[0].value}")
            )
        else:
            found.append(
                Finding(
                    "warning",
                    "entry points",
                    f"no {group} entry point of reproit-otel"
                    + (f" named {name}" if name else "")
                    + f"; {purpose} will not work (reinstall reproit-otel)",
                )
            )
    return found


# -- 2. configuration --------------------------------------------------------------------------


def _configuration(env: Mapping[str, str]) -> list[Finding]:
    from reproit_otel.config import read_config
    from reproit_otel.errors import ConfigurationError
    from reproit_otel.fixtures import tools_settings
    from reproit_otel.variables import known_variables

    found: list[Finding] = []
    known = known_variables()
    for name in sorted(env):
        if name.startswith("REPROIT_") and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            fix = f"rename it {close[0]}" if close else f"unset {name}"
            found.append(
                Finding(
                    "warning",
                    "configuration",
                    f"{name} is not a reproit-otel variable (a typo?; docs/configuration.md "
                    f"lists them all); fix: {fix}",
                )
            )
    try:
        config = read_config(env)
    except ConfigurationError as error:
        found.append(Finding("error", "configuration", f"{error}; fix it and restart"))
        return found
    found.append(Finding("ok", "configuration", "every REPROIT_* setting parses"))
    if config.disabled:
        found.append(Finding("warning", "configuration", "REPROIT_DISABLED=1: reproit-otel is off"))
    problem = config.capture_problem
    if problem is None:
        found.append(
            Finding(
                "ok",
                "configuration",
                f"captures upload to {config.endpoint} (not contacted; --ping checks that it "
                "answers and takes the key)",
            )
        )
    elif config.endpoint:
        found.append(Finding("error", "configuration", f"captures cannot upload: {problem}"))
    else:
        found.append(
            Finding("ok", "configuration", "no REPROIT_ENDPOINT: captures are not uploaded")
        )
    try:
        settings = tools_settings(env)
    except ConfigurationError as error:
        found.append(Finding("error", "configuration", str(error)))
    else:
        found.append(
            Finding(
                "ok",
                "configuration",
                f"REPROIT_TOOLS={settings.mode.value}, fixtures in {settings.directory}",
            )
        )
    if config.replay:
        found.append(_replay_file(config.replay))
    return found


def _replay_file(path: str) -> Finding:
    from reproit_otel.errors import CapsuleError
    from reproit_otel.replay.session import load_replay_file

    try:
        session = load_replay_file(path)
    except CapsuleError as error:
        return Finding("error", "replay", f"REPROIT_REPLAY: {error}")
    return Finding(
        "ok", "replay", f"REPROIT_REPLAY={path} holds {session.total} recorded exchange(s)"
    )


# -- 3. imports --------------------------------------------------------------------------------


def _imports(modules: Iterable[str]) -> list[Finding]:
    found: list[Finding] = []
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like python -m: the application's own modules
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as error:  # the application's import failed: report, go on
            found.append(
                Finding(
                    "error", "import", f"importing {name} failed: {type(error).__name__}: {error}"
                )
            )
        else:
            found.append(Finding("ok", "import", f"imported {name}"))
    return found


# -- 4. fixtures -------------------------------------------------------------------------------


def _fixtures(option: str | None, env: Mapping[str, str]) -> list[Finding]:
    from reproit_otel.errors import ConfigurationError
    from reproit_otel.fixtures import REPROIT_FIXTURES, scan_fixtures, tools_settings
    from reproit_otel.instrumentation.invoke import declared_boundaries

    if option:
        directory = Path(option)
    else:
        try:
            directory = tools_settings(env).directory
        except ConfigurationError:
            directory = Path(env.get(REPROIT_FIXTURES, "") or ".reproit/fixtures")
    declared = declared_boundaries()
    files = list(scan_fixtures(directory))
    found: list[Finding] = []
    usable: set[tuple[str, str]] = set()
    for fixture in files:
        if fixture.problem is None and fixture.tool is not None and fixture.op is not None:
            usable.add((fixture.tool, fixture.op))
        elif fixture.older_format:
            found.append(
                Finding(
                    "warning",
                    "fixtures",
                    f"{fixture.path} {fixture.problem}; delete it and re-record: "
                    f"REPROIT_TOOLS=record REPROIT_FIXTURES={directory} "
                    "<the command that runs your tests>",
                )
            )
        else:
            found.append(Finding("error", "fixtures", f"{fixture.path} {fixture.problem}"))
    pairs = sorted({(d.tool, d.op) for d in declared})
    for tool, op in pairs:
        if (tool, op) in usable:
            continue
        places = ", ".join(d.where for d in declared if (d.tool, d.op) == (tool, op))
        found.append(
            Finding(
                "error",
                "fixtures",
                f"boundary {tool}.{op} ({places}) has no fixture in {directory}; record it: "
                f"REPROIT_TOOLS=record REPROIT_FIXTURES={directory} <the command that runs "
                "your tests>",
            )
        )
    for tool, op in sorted(usable - set(pairs)):
        count = sum(1 for f in files if (f.tool, f.op) == (tool, op))
        found.append(
            Finding(
                "warning",
                "fixtures",
                f"{count} fixture(s) of {tool}.{op} in {directory} match no declared boundary "
                "(renamed or removed? pass the module with --import, or delete them)",
            )
        )
    if pairs and not any(f.level == "error" for f in found):
        found.append(Finding("ok", "fixtures", f"{len(pairs)} boundary(ies), each with a fixture"))
    elif not pairs and not files:
        found.append(Finding("ok", "fixtures", "no invoke boundary declared, no fixture"))
    return found


# -- 5. unrecorded libraries -------------------------------------------------------------------


def _unrecorded(new_modules: set[str]) -> list[Finding]:
    tops = {name.partition(".")[0] for name in new_modules}
    return [
        Finding(
            "warning",
            "libraries",
            f"{_UNRECORDED[top]} is imported but not recorded: a replay cannot serve its calls; "
            "make them inside a reproit_otel.boundary",
        )
        for top in sorted(tops & set(_UNRECORDED))
    ]
