"""pytest plugin: a failing test in CI becomes a capsule, and the capsule replays that test.

Installed with the package (entry point ``pytest11`` named ``reproit``); it does nothing until
one of its two modes is switched on.

**Capture mode** (``REPROIT_CI_CAPTURE=1``, ``--reproit-capture`` or the ini key
``reproit_capture = true``). Every test item (functions, methods, parametrized cases,
``unittest.TestCase`` tests, async tests run by anyio or pytest-asyncio, any other item type)
runs under its own trace, from the start of its setup to the end of its teardown, so calls
made by its fixtures are recorded too. No decorator is needed. The trace's operation is
``test:<suite>#<test>``:

* ``suite`` is the test file's dotted path relative to the rootdir (``tests/api/test_orders.py``
  gives ``tests.api.test_orders``), or ``@pytest.mark.reproit(suite="orders")``;
* ``test`` is the rest of the node id (``TestOrders::test_total[eu]``), or
  ``@pytest.mark.reproit(test="total in EUR")``.

Every ``requests`` and ``httpx`` call and ``psycopg2`` statement of the test is recorded onto
its trace (the recorders are installed, before conftest files load, when those libraries are
importable), and test code may add its own effects through
:func:`reproit_otel.ci.current_test_trace`. A test that fails in any phase
ends its trace with ``{"error": <failure text>}`` and spools a capsule
(:mod:`reproit_otel.ci.spool`), announced by a ``REPROIT:CI-CAPSULE`` line on the real standard
error. Passing, skipped and xfailed tests write nothing. The failure text is ``str()`` of the
first exception of the failing phase (:mod:`reproit_otel.ci.naming`).

**Replay mode** (``REPROIT_REPLAY`` naming a capsule whose operation starts with ``test:``,
as ``reproit-otel check CAPSULE --exec "pytest ..."`` sets it). Replay takes precedence over
capture. Before conftest files load, the capsule's exchanges are installed as the answers of
every ``requests``, ``httpx`` and ``psycopg2`` call and its envelope (time zone, clock,
``random``) is pinned. Only the test whose operation equals the capsule's runs; every other
test is skipped with the reason ``reproit replay targets <operation>``. When it finishes a
``REPROIT:CI-TEST`` line reports ``passed``, or ``failed`` with the failure text. Replay fails
closed, as in a replayed application: a capsule it cannot serve (unreadable, of another kind
such as a production ``METHOD /path`` capsule, a field replay cannot pin or serve), a replay
that cannot be installed, or an unusable ``REPROIT_*`` setting next to ``REPROIT_REPLAY``
ends the run before any test runs, with the traceback, a
``REPROIT:REPLAY-FAILED {"capsule":...,"error":...}`` line on the real standard error and exit
status 78 (:func:`reproit_otel.bootstrap.stop_unarmed`).

Settings (command line, then environment, then ini file, then default):

==========================  =========================  ===================  ====================
option                      environment                ini key              default
==========================  =========================  ===================  ====================
``--reproit-capture``       ``REPROIT_CI_CAPTURE=1``   ``reproit_capture``  off
``--reproit-spool DIR``     ``REPROIT_CI_SPOOL``       ``reproit_spool``    ``.reproit/ci-spool``
``--reproit-spool-max N``   ``REPROIT_CI_SPOOL_MAX``   ``reproit_spool_max``  16777216
==========================  =========================  ===================  ====================

The trace's ``build`` is the first token of ``REPROIT_COMMIT`` or ``GITHUB_SHA``.

Markers reach the real standard error even under pytest's output capturing (decision D10): the
plugin keeps a duplicate of descriptor 2 taken before capturing starts. In replay mode it
also switches descriptor-level capturing (``--capture=fd``, the default) to ``sys`` so that the
``REPROIT:DIVERGENCE`` lines the replay writes to descriptor 2 are not swallowed.

Limits: a fixture shared between tests (module or session scope) is set up inside the first
test that needs it, so its calls are recorded into that test's capsule only; replaying another
test then makes those calls again and diverges. Names are cut to 120 code points, so two tests
whose names differ only after that share an operation; replay runs the first of them.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Final

import pytest

from reproit_otel._guard import guarded
from reproit_otel.capture import recording
from reproit_otel.ci import naming
from reproit_otel.ci.markers import RealStderr, capsule_marker, test_marker
from reproit_otel.ci.pipeline import CiRecordingPipeline, CiTrace, _set_active
from reproit_otel.ci.spool import (
    DEFAULT_SPOOL_DIR,
    Spool,
    SpoolStats,
    ci_capsule,
    ci_envelope,
    parse_spool_max,
)
from reproit_otel.config import REPROIT_CI_SPOOL, REPROIT_CI_SPOOL_MAX, REPROIT_REPLAY
from reproit_otel.wire._js import UNSET

__all__ = ["CaptureMode", "ReplayMode", "operation_of"]

_log = logging.getLogger("reproit_otel")

MARKER_NAME: Final = "reproit"
_PLUGIN_NAME: Final = "reproit-ci"
_RECORDERS: Final = (
    ("requests", "reproit_otel.instrumentation.requests"),
    ("httpx", "reproit_otel.instrumentation.httpx"),
    ("psycopg2", "reproit_otel.instrumentation.psycopg2"),
)


# A duplicate of the real descriptor 2, taken before pytest starts capturing output.
_real_stderr_fd: int | None = None
# Set when replay was installed before conftest files were loaded.
_early_replay: str | None = None
# Set when capture (and its recorders) started before conftest files were loaded.
_early_capture: CaptureMode | None = None


# --- settings -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    replay: str | None
    capture: bool
    spool: str
    spool_max: int
    build: str | None
    secret_values: tuple[str, ...]
    disabled: bool


def _ini(config: pytest.Config, name: str) -> Any:
    try:
        return config.getini(name)
    except (ValueError, KeyError):
        return None


def _settings(config: pytest.Config, namespace: Any) -> _Settings:
    from reproit_otel.config import load_config

    env = load_config()
    option_capture = getattr(namespace, "reproit_capture", None)
    capture = bool(option_capture) or env.ci_capture or bool(_ini(config, "reproit_capture"))

    spool = getattr(namespace, "reproit_spool", None)
    if not spool:
        spool = os.environ.get(REPROIT_CI_SPOOL) or _ini(config, "reproit_spool") or ""
    raw_max = getattr(namespace, "reproit_spool_max", None)
    if raw_max is None:
        raw_max = os.environ.get(REPROIT_CI_SPOOL_MAX)
    if raw_max is None:
        raw_max = _ini(config, "reproit_spool_max") or None
    return _Settings(
        replay=env.replay or None,
        capture=capture,
        spool=str(spool) or DEFAULT_SPOOL_DIR,
        spool_max=parse_spool_max(raw_max),
        build=env.commit,
        secret_values=tuple(env.secret_values),
        # REPROIT_DISABLED=1 turns the plugin off; unusable upload settings do not.
        disabled=env.disabled and not env.problems,
    )


# --- names ------------------------------------------------------------------------------------


def _names(item: pytest.Item) -> tuple[str, str]:
    path, _, rest = item.nodeid.partition("::")
    suite: str | None = None
    test: str | None = None
    # The closest marker wins, per name: a module's suite= combines with a function's test=.
    for marker in item.iter_markers(MARKER_NAME):
        if suite is None and isinstance(marker.kwargs.get("suite"), str):
            suite = marker.kwargs["suite"]
        if test is None and isinstance(marker.kwargs.get("test"), str):
            test = marker.kwargs["test"]
    if suite is None:
        suite = (path[:-3] if path.endswith(".py") else path).replace("\\", "/").replace("/", ".")
    if test is None:
        test = rest or item.name
    return suite, test


def operation_of(item: pytest.Item) -> str:
    """The operation ``test:<suite>#<test>`` of a collected test item."""
    suite, test = _names(item)
    return naming.test_operation(suite, test)


# --- outcome of one item ----------------------------------------------------------------------

_failure_key = pytest.StashKey[str]()


def _phase_failure(
    call: pytest.CallInfo[None], report: pytest.TestReport, secrets: tuple[str, ...]
) -> str | None:
    """The failure text of a failed phase, or None when the phase did not fail.

    Scrubbed like every text that leaves the process (:func:`scrub_text`): of ``secrets`` and
    of the values redaction hid from the calls that raised the exception or its causes.
    """
    if not report.failed:
        return None
    if call.excinfo is not None:
        error = call.excinfo.value
        echoed = recording.echoed_values(error)
        return naming.exception_text(error, (*secrets, *echoed))
    # A failure without an exception: a strict xpass ("[XPASS(strict)] reason").
    return naming.failure_text(str(report.longrepr or ""), secrets)


def _record_phase(
    item: pytest.Item,
    call: pytest.CallInfo[None],
    report: pytest.TestReport,
    secrets: tuple[str, ...],
) -> None:
    if _failure_key in item.stash:
        return  # the first failing phase decides (a teardown error after a failing call)
    failure = _phase_failure(call, report, secrets)
    if failure is not None:
        item.stash[_failure_key] = failure


# --- capture mode -----------------------------------------------------------------------------


class CaptureMode:
    """The capture-mode plugin object: one trace per test item, capsules for failures."""

    def __init__(self, settings: _Settings, stderr: RealStderr) -> None:
        self.settings = settings
        self.stderr = stderr
        self.stats = SpoolStats()
        self.spool = Spool(settings.spool, settings.spool_max, self.stats)
        self.pipeline = CiRecordingPipeline(settings.secret_values)
        self._installed: list[Any] = []

    def start(self) -> None:
        from reproit_otel.capture.recording import set_override_pipeline

        set_override_pipeline(self.pipeline)
        _set_active(self.pipeline)
        for library, module_name in _RECORDERS:
            try:
                importlib.import_module(library)
            except ImportError:
                continue
            module = importlib.import_module(module_name)
            module.install_recorder()
            self._installed.append(module)

    def stop(self) -> None:
        from reproit_otel.capture.recording import clear_override_pipeline

        for module in self._installed:
            with guarded("pytest_plugin.uninstall_recorder"):
                module.uninstall_recorder()
        self._installed.clear()
        clear_override_pipeline(self.pipeline)
        _set_active(None)

    def _begin(self, item: pytest.Item) -> CiTrace:
        suite, test = _names(item)
        operation = naming.test_operation(suite, test)
        context = naming.ci_trace_context(time.time_ns() // 1_000_000, self.settings.build)
        trace = CiTrace.begin(
            context,
            operation,
            input={"suite": naming.bound_name(suite), "test": naming.bound_name(test)},
        )
        assert isinstance(trace, CiTrace)
        return trace

    def _end(self, trace: CiTrace, failure: str | None) -> None:
        self.stats.dropped_effects += trace.dropped_effects
        if trace.dropped_effects:
            _log.warning(
                "reproit-otel: %d effect(s) of %s past the 256-event cap were dropped",
                trace.dropped_effects,
                trace.operation,
            )
        if failure is None:
            trace.finish(None, UNSET, True, False)
            return
        trace.finish({"error": failure}, UNSET, False, False)
        events = trace.events
        capsule = ci_capsule(trace.operation, events, ci_envelope(events))
        path = self.spool.write(capsule)
        if path is not None:
            self.stderr.write_line(capsule_marker(path, trace.operation))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        trace: CiTrace | None = None
        with guarded("pytest_plugin.begin"):
            trace = self._begin(item)
            self.pipeline.attach(trace)
        try:
            return (yield)
        finally:
            with guarded("pytest_plugin.settle"):
                # What finalizers handed over during the test (a stream it dropped unread)
                # belongs to its trace: settled before the trace is let go.
                if recording.handed_over:
                    recording.settle_handed_over()
            self.pipeline.detach()
            if trace is not None:
                with guarded("pytest_plugin.end"):
                    self._end(trace, item.stash.get(_failure_key, None))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        with guarded("pytest_plugin.makereport"):
            _record_phase(item, call, report, self.pipeline.current_secrets())
        return report

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        stats = self.stats
        counts = (
            stats.spooled_capsules,
            stats.dropped_capsules,
            stats.failed_captures,
            stats.dropped_effects,
        )
        if not any(counts):
            return
        terminalreporter.write_line(
            f"reproit: {stats.spooled_capsules} capsule(s) spooled to {self.spool.directory}, "
            f"{stats.dropped_capsules} dropped (spool full), "
            f"{stats.failed_captures} failed, "
            f"{stats.dropped_effects} effect(s) past the event cap dropped"
        )


# --- replay mode ------------------------------------------------------------------------------


class ReplayMode:
    """The replay-mode plugin object: run only the capsule's test and report its result."""

    def __init__(self, operation: str, stderr: RealStderr) -> None:
        self.operation = operation
        self.stderr = stderr
        self.target: pytest.Item | None = None

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        reason = f"reproit replay targets {self.operation}"
        for item in items:
            if self.target is None and operation_of(item) == self.operation:
                self.target = item
                continue
            item.add_marker(pytest.mark.skip(reason=reason))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if item is self.target:
            with guarded("pytest_plugin.makereport"):
                from reproit_otel.replay.session import live_secret_values

                _record_phase(item, call, report, live_secret_values())
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if item is self.target:
                failure = item.stash.get(_failure_key, None)
                self.stderr.write_line(test_marker(self.operation, failure))

    def pytest_report_header(self, config: pytest.Config) -> str:
        return f"reproit: replaying {self.operation}"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.target is None:
            terminalreporter.write_line(
                f"reproit: no collected test has the operation {self.operation}; was it "
                "renamed, moved or deselected? Run the same test command as in CI.",
                yellow=True,
            )


def _replay_operation(path: str) -> str:
    """The operation of the capsule at ``path``; a :class:`CapsuleError` unless it is a CI
    capsule replay can serve."""
    from reproit_otel.errors import CapsuleError
    from reproit_otel.wire.capsule import load_capsule

    try:
        capsule = load_capsule(_read(path), strict=False)
    except CapsuleError as error:
        raise CapsuleError(f"{path}: {error}") from None
    operation = capsule.get("operation")
    if not isinstance(operation, str) or not operation.startswith(naming.TEST_TRIGGER_PREFIX):
        raise CapsuleError(
            f"{path} does not carry a test trigger identity: its operation is "
            f"{operation!r}, not 'test:<suite>#<test>'. Replay a production capsule with "
            '`reproit-otel check CAPSULE --exec "<command that boots the app>"` instead.'
        )
    return operation


def _read(path: str) -> bytes:
    from reproit_otel.errors import CapsuleError

    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise CapsuleError(f"cannot read the capsule: {error}") from error


def _install_replay(path: str) -> str:
    operation = _replay_operation(path)
    from reproit_otel.replay import install_replay

    install_replay(path)
    return operation


def _armed_or_stop(arm: Callable[[str], str], path: str, stderr: RealStderr) -> str:
    """``arm(path)``, or the end of the run when it fails (replay fails closed).

    A capsule that cannot be served (unreadable, not a CI capsule, a field replay cannot pin
    or serve) or a replay that cannot be installed must not let the tests run live: the run
    ends as a replayed application's process does (``bootstrap.stop_unarmed``), with the
    ``REPROIT:REPLAY-FAILED`` line on the real standard error and exit status 78.
    """
    try:
        return arm(path)
    except Exception as error:
        from reproit_otel.bootstrap import stop_unarmed

        stop_unarmed(path, error, stderr.write_line, who="the test run")


# --- hooks ------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("reproit", "reproit-otel CI capture and replay")
    group.addoption(
        "--reproit-capture",
        action="store_true",
        default=None,
        dest="reproit_capture",
        help="record every test; spool a replayable capsule for each failing test "
        "(also REPROIT_CI_CAPTURE=1).",
    )
    group.addoption(
        "--reproit-spool",
        dest="reproit_spool",
        metavar="DIR",
        default=None,
        help=f"directory for capsules (REPROIT_CI_SPOOL; default {DEFAULT_SPOOL_DIR}).",
    )
    group.addoption(
        "--reproit-spool-max",
        dest="reproit_spool_max",
        metavar="BYTES",
        default=None,
        help="total bytes of *.json the spool may hold, 4096..67108864 "
        "(REPROIT_CI_SPOOL_MAX; default 16777216).",
    )
    parser.addini("reproit_capture", type="bool", default=False, help="turn CI capture on")
    parser.addini("reproit_spool", default="", help="directory for CI capsules")
    parser.addini("reproit_spool_max", default="", help="byte cap of the CI spool")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    # Runs before pytest's capture plugin starts capturing and before conftest files load.
    global _real_stderr_fd, _early_replay, _early_capture
    if _real_stderr_fd is None:
        try:
            _real_stderr_fd = os.dup(2)
        except OSError:
            _real_stderr_fd = None
    from reproit_otel.config import load_config

    environment = load_config()
    replay = environment.replay or ""
    asked = os.environ.get(REPROIT_REPLAY)
    if environment.problems and asked:
        # Replay was asked for; running the tests without it would run them live.
        from reproit_otel.bootstrap import stop_unarmed
        from reproit_otel.errors import ConfigurationError

        problems = ConfigurationError("; ".join(environment.problems))
        stop_unarmed(asked, problems, RealStderr(_real_stderr_fd).write_line, who="the test run")
    if replay and not environment.disabled:
        namespace = early_config.known_args_namespace
        if getattr(namespace, "capture", None) == "fd":
            # Divergence lines are written to descriptor 2; keep it uncaptured.
            namespace.capture = "sys"
        _armed_or_stop(_install_replay, replay, RealStderr(_real_stderr_fd))
        _early_replay = replay
    elif _early_capture is None:
        # Install the recorders before conftest files import the application, so a
        # `from psycopg2 import connect` there already sees the recording seam.
        settings = _settings(early_config, early_config.known_args_namespace)
        if settings.capture and not settings.disabled and not settings.replay:
            _early_capture = CaptureMode(settings, RealStderr(_real_stderr_fd))
            _early_capture.start()
    return (yield)


def pytest_configure(config: pytest.Config) -> None:
    global _early_capture
    config.addinivalue_line(
        "markers",
        "reproit(suite=None, test=None): the suite and test names of this test's "
        "reproit operation test:<suite>#<test>",
    )
    settings = _settings(config, config.option)
    if settings.disabled:
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    stderr = RealStderr(
        _real_stderr_fd,
        capman.global_and_fixture_disabled if capman is not None else None,
    )
    if settings.replay:
        arm = _replay_operation if _early_replay == settings.replay else _install_replay
        operation = _armed_or_stop(arm, settings.replay, stderr)
        config.pluginmanager.register(ReplayMode(operation, stderr), _PLUGIN_NAME)
    elif settings.capture:
        capture, _early_capture = _early_capture, None
        if capture is None or capture.settings != settings:
            if capture is not None:
                capture.stop()
            capture = CaptureMode(settings, stderr)
            capture.start()
        capture.stderr = stderr
        config.pluginmanager.register(capture, _PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if isinstance(plugin, CaptureMode):
        plugin.stop()
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)
