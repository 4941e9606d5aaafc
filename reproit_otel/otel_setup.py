"""Is OpenTelemetry's zero-code set-up one reproit-otel can work with? Checks and their fixes.

A failure is captured only when OpenTelemetry traces the request: the launcher
(``opentelemetry-instrument``) must load an exporter list that names ``reproit``, and the
instrumentation of each web framework and client library the service uses must be installed,
of the version that goes with the SDK, and active. When any of that goes wrong OpenTelemetry
says little (``Failed to auto initialize``, a debug line about a dependency conflict) and the
service runs untraced. This module says what went wrong and the one command that fixes it:

* :func:`exporter_problems`: ``OTEL_TRACES_EXPORTER`` without ``reproit``, or naming an
  exporter no installed package provides (``otlp,reprot``);
* :func:`version_problems`: installed OpenTelemetry distributions whose exact requirements on
  each other disagree (an instrumentation of another release than the SDK);
* :func:`instrumentation_problems`: for the libraries reproit-otel records or needs spans from
  (:data:`LIBRARIES`), an instrumentation that is missing, switched off or not active.

``reproit-otel doctor`` reports them; under the launcher, :func:`warn_at_startup` (called by
the ``opentelemetry_post_instrument`` hook) writes each once to stderr, including for a
library the application imports later. The fix for a missing or mismatched package is always
:data:`INSTALL_TESTED_SET`: the extra that pins the OpenTelemetry set reproit-otel is tested
with (``docs/compatibility.md``).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from reproit_otel._import_hooks import when_imported

__all__ = [
    "INSTALL_TESTED_SET",
    "LIBRARIES",
    "Library",
    "Problem",
    "exporter_problems",
    "installed_exporters",
    "installed_libraries",
    "instrumentation_problems",
    "version_problems",
    "warn_at_startup",
]

INSTALL_TESTED_SET = "pip install 'reproit-otel[otel]'"
"""Installs the OpenTelemetry SDK, distro, OTLP exporter and instrumentations, pinned together."""

_EXPORTER_GROUP = "opentelemetry_traces_exporter"
_DISABLED = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"


@dataclass(frozen=True)
class Library:
    """A library whose OpenTelemetry instrumentation reproit-otel depends on."""

    module: str
    """Top-level module the application imports."""
    label: str
    """Its name for people."""
    entry_point: str
    """Name of its ``opentelemetry_instrumentor`` entry point (and in the disabled list)."""
    distribution: str
    """The instrumentation's distribution."""
    instrumentor: str
    """``module:Class`` of the instrumentor."""
    loses: str
    """What is lost while it is not active."""
    every_application: bool = False
    """Used by every application (a module of the standard library, imported before the
    application's own): checked whatever the application imports."""


_NO_SERVER_SPAN = "its requests start no server span, so their failures are not captured"
_NO_CLIENT_SPAN = "its calls make no span, so captures cannot tell whether they are complete"
_NO_THREAD_CONTEXT = (
    "calls a request makes on other threads (ThreadPoolExecutor, threading.Thread) are "
    "outside it, so they are not recorded and its captures claim complete effects without them"
)

LIBRARIES: tuple[Library, ...] = (
    Library(
        "flask",
        "Flask",
        "flask",
        "opentelemetry-instrumentation-flask",
        "opentelemetry.instrumentation.flask:FlaskInstrumentor",
        _NO_SERVER_SPAN,
    ),
    Library(
        "django",
        "Django",
        "django",
        "opentelemetry-instrumentation-django",
        "opentelemetry.instrumentation.django:DjangoInstrumentor",
        _NO_SERVER_SPAN,
    ),
    Library(
        "fastapi",
        "FastAPI",
        "fastapi",
        "opentelemetry-instrumentation-fastapi",
        "opentelemetry.instrumentation.fastapi:FastAPIInstrumentor",
        _NO_SERVER_SPAN,
    ),
    Library(
        "requests",
        "requests",
        "requests",
        "opentelemetry-instrumentation-requests",
        "opentelemetry.instrumentation.requests:RequestsInstrumentor",
        _NO_CLIENT_SPAN,
    ),
    Library(
        "httpx",
        "httpx",
        "httpx",
        "opentelemetry-instrumentation-httpx",
        "opentelemetry.instrumentation.httpx:HTTPXClientInstrumentor",
        _NO_CLIENT_SPAN,
    ),
    Library(
        "psycopg2",
        "psycopg2",
        "psycopg2",
        "opentelemetry-instrumentation-psycopg2",
        "opentelemetry.instrumentation.psycopg2:Psycopg2Instrumentor",
        _NO_CLIENT_SPAN,
    ),
    Library(
        "psycopg",
        "psycopg 3",
        "psycopg",
        "opentelemetry-instrumentation-psycopg",
        "opentelemetry.instrumentation.psycopg:PsycopgInstrumentor",
        _NO_CLIENT_SPAN,
    ),
    Library(
        "threading",
        "threading",
        "threading",
        "opentelemetry-instrumentation-threading",
        "opentelemetry.instrumentation.threading:ThreadingInstrumentor",
        _NO_THREAD_CONTEXT,
        every_application=True,
    ),
)
"""The libraries checked, in report order.

SQLAlchemy is not among them: its statements are the DB-API driver's, recorded (psycopg2) or
reported as unrecorded by reproit-otel's pool hook (``instrumentation/sqlalchemy.py``), so
captures stay complete and honest with or without its OpenTelemetry instrumentation (which
does not instrument SQLAlchemy 2.1). ``doctor`` checks the engines' drivers instead."""


@dataclass(frozen=True)
class Problem:
    """One thing that keeps captures from working, and the command or change that fixes it."""

    topic: str
    """``exporter``, ``versions`` or ``instrumentation``."""
    message: str
    """What is wrong and what it costs."""
    fix: str
    """One line: the command to run or the change to make."""

    def line(self) -> str:
        """The message and its fix, as one line."""
        return f"{self.message}; fix: {self.fix}"


# -- the exporter list -------------------------------------------------------------------------


def installed_exporters() -> set[str]:
    """Names of every traces exporter an installed package provides."""
    return {point.name for point in importlib.metadata.entry_points(group=_EXPORTER_GROUP)}


def exporter_problems(value: str | None, installed: Iterable[str]) -> list[Problem]:
    """What is wrong with ``OTEL_TRACES_EXPORTER=value`` given the installed exporter names.

    An unknown name makes OpenTelemetry's start-up fail as a whole (``Failed to auto
    initialize``), so nothing is traced; a list without ``reproit`` traces but never captures.
    """
    known = set(installed)
    # Unset means OpenTelemetry's default, otlp.
    names = [part.strip() for part in (value or "otlp").split(",") if part.strip()]
    suggestion = ",".join([*(n for n in names if n in known and n != "reproit"), "reproit"])
    problems: list[Problem] = []
    for name in names:
        if name in known or name == "none":  # none: reported as the missing reproit below
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(
            Problem(
                "exporter",
                f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides"
                f"{hint}: OpenTelemetry fails to start and nothing is traced; installed: "
                + ", ".join(sorted(known)),
                f"export OTEL_TRACES_EXPORTER={suggestion}",
            )
        )
    if "reproit" not in names and not problems:
        shown = "unset" if value is None else repr(value)
        problems.append(
            Problem(
                "exporter",
                f"OTEL_TRACES_EXPORTER is {shown}, without reproit: reproit-otel then rests on "
                "its post-instrument hook alone, which launchers other than "
                "opentelemetry-instrument skip",
                f"export OTEL_TRACES_EXPORTER={suggestion}",
            )
        )
    return problems


# -- versions ----------------------------------------------------------------------------------


def _opentelemetry_distributions() -> dict[str, importlib.metadata.Distribution]:
    # The first of a name on sys.path wins, as for importlib.metadata.version().
    found: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name.startswith("opentelemetry-") and name not in found:
            found[name] = dist
    return found


def version_problems() -> list[Problem]:
    """Installed OpenTelemetry distributions whose exact requirements on each other fail.

    Each OpenTelemetry release pins its siblings (an instrumentation ``0.66b1`` requires
    ``opentelemetry-instrumentation==0.66b1`` and the semantic conventions the SDK ``1.45.1``
    requires), so any disagreement between the SDK, the distro and the instrumentations shows
    up as one of these.
    """
    dists = _opentelemetry_distributions()
    problems: list[Problem] = []
    for name in sorted(dists):
        dist = dists[name]
        for text in dist.requires or ():
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            needed = canonicalize_name(requirement.name)
            other = dists.get(needed)
            if other is None or not needed.startswith("opentelemetry-"):
                continue
            have = other.version
            if requirement.specifier.contains(have, prereleases=True):
                continue
            problems.append(
                Problem(
                    "versions",
                    f"{name} {dist.version} needs {needed}{requirement.specifier} but {have} "
                    "is installed: OpenTelemetry skips or breaks what does not match",
                    f"{INSTALL_TESTED_SET} (the set reproit-otel is tested with)",
                )
            )
    return problems


# -- instrumentations --------------------------------------------------------------------------


def _disabled(environ: Mapping[str, str]) -> set[str]:
    return {part.strip() for part in environ.get(_DISABLED, "").split(",") if part.strip()}


def _instrumentor_active(library: Library) -> bool:
    """True when the instrumentor ran (only looked up if its module was loaded already)."""
    module_name, _, class_name = library.instrumentor.partition(":")
    module: ModuleType | None = sys.modules.get(module_name)
    if module is None:
        return False
    cls: Any = getattr(module, class_name, None)
    instance = getattr(cls, "_instance", None)
    return bool(getattr(instance, "_is_instrumented_by_opentelemetry", False))


def _package_problem(library: Library, environ: Mapping[str, str]) -> Problem | None:
    """What keeps a library's instrumentation from loading: switched off, missing, mismatched."""
    inactive = f"{library.label} is used but its OpenTelemetry instrumentation is not active"
    disabled = _disabled(environ)
    if library.entry_point in disabled or "*" in disabled:
        # One fix for every library of the table the list names, so two lines never disagree.
        listed = ",".join(sorted(disabled - {lib.entry_point for lib in LIBRARIES} - {"*"}))
        return Problem(
            "instrumentation",
            f"{inactive} ({_DISABLED} switches it off): {library.loses}",
            f"export {_DISABLED}={listed}" if listed else f"unset {_DISABLED}",
        )
    try:
        importlib.metadata.distribution(library.distribution)
    except importlib.metadata.PackageNotFoundError:
        return Problem(
            "instrumentation",
            f"{inactive} ({library.distribution} is not installed): {library.loses}",
            INSTALL_TESTED_SET,
        )
    outside = _outside_instrumented_range(library)
    if outside is not None:
        return outside
    for problem in version_problems():
        if problem.message.startswith(f"{library.distribution} "):
            return Problem(
                "instrumentation",
                f"{library.label}'s OpenTelemetry instrumentation does not match the installed "
                f"OpenTelemetry ({problem.message.partition(':')[0]}): where it does not load, "
                f"{library.loses}",
                problem.fix,
            )
    return None


def _outside_instrumented_range(library: Library) -> Problem | None:
    """The library's installed release is not one its instrumentation instruments."""
    dist = importlib.metadata.distribution(library.distribution)
    for text in dist.requires or ():
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        marker = requirement.marker
        if marker is None or not marker.evaluate({"extra": "instruments"}):
            continue
        try:
            have = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            continue  # another distribution of the same library (psycopg2-binary)
        if requirement.specifier.contains(have, prereleases=True):
            continue
        wanted = f"{requirement.name}{requirement.specifier}"
        return Problem(
            "instrumentation",
            f"{library.label} is used but its OpenTelemetry instrumentation is not active "
            f"({requirement.name} {have} is outside what {library.distribution} "
            f"{dist.version} instruments, {wanted}): {library.loses}",
            f"pip install '{wanted}'",
        )
    return None


def _why_inactive(library: Library, environ: Mapping[str, str]) -> Problem:
    """Why an instrumentation that should be active is not."""
    found = _package_problem(library, environ)
    if found is not None:
        return found
    return Problem(
        "instrumentation",
        f"{library.label} is used but its OpenTelemetry instrumentation is not active "
        f"({library.distribution} is installed but did not instrument at start-up): "
        f"{library.loses}",
        "run the service under opentelemetry-instrument (OTEL_LOG_LEVEL=debug says why an "
        "instrumentation is skipped)",
    )


def instrumentation_problems(used: Iterable[str], environ: Mapping[str, str]) -> list[Problem]:
    """Package problems of the instrumentations of the :data:`LIBRARIES` in ``used`` (modules).

    For ``reproit-otel doctor``: whether each instrumentation is installed, matches the
    installed OpenTelemetry and is not switched off. Whether it is active can only be seen
    under the launcher (:func:`warn_at_startup`).
    """
    wanted = set(used)
    problems: list[Problem] = []
    for library in LIBRARIES:
        if library.module in wanted:
            found = _package_problem(library, environ)
            if found is not None:
                problems.append(found)
    return problems


def installed_libraries() -> list[str]:
    """Modules of the :data:`LIBRARIES` that can be imported here (nothing is imported)."""
    found: list[str] = []
    for library in LIBRARIES:
        try:
            spec = importlib.util.find_spec(library.module)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            found.append(library.module)
    return found


# -- at start-up under the launcher -----------------------------------------------------------


def _say(problem: Problem) -> None:
    try:
        sys.stderr.write(f"reproit-otel: warning: {problem.line()}\n")
        sys.stderr.flush()
    except Exception:  # a closed or broken stderr must not reach the application
        return


def _say_at_import(problem: Problem) -> Callable[[ModuleType], None]:
    """A post-import hook writing ``problem`` (worked out at start-up: no metadata I/O while
    the application imports)."""

    def say(module: ModuleType) -> None:
        _say(problem)

    return say


_warned = False


def warn_at_startup(environ: Mapping[str, str]) -> list[Problem]:
    """Under the launcher: write each problem once to stderr; returns those written now.

    Installed versions outside the support matrix (:mod:`reproit_otel.supported`), version
    disagreements and the instrumentations of libraries already imported are reported at
    once (reproit-otel's recorders import requests, httpx and psycopg2 when they are
    installed); a library imported later (Flask, Django, FastAPI: reproit-otel hooks them when
    the application imports them) is reported at its first import. Called once per process (a
    second call does nothing).
    """
    global _warned
    if _warned:
        return []
    _warned = True
    from reproit_otel.supported import unsupported_problems

    problems = unsupported_problems() + version_problems()
    later: dict[str, Problem] = {}
    installed = installed_libraries()
    for library in LIBRARIES:
        # A release outside the instrumentation's range is reported by OpenTelemetry itself
        # at start-up (``... falls outside of that range``): not said twice.
        if _instrumentor_active(library) or _outside_instrumented_range(library) is not None:
            continue
        if library.module in sys.modules:
            problems.append(_why_inactive(library, environ))
        elif library.module in installed:
            later[library.module] = _why_inactive(library, environ)
    for problem in problems:
        _say(problem)
    for module_name, problem in later.items():
        # A library whose instrumentation is active was imported by its instrumentor at
        # start-up, so its first import from now on is one OpenTelemetry does not trace.
        when_imported(module_name, _say_at_import(problem))
    return problems
