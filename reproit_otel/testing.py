"""Regression tests from captured failures: :func:`assert_fixed`.

A module written by ``reproit-otel regression`` is a few lines::

    from pathlib import Path

    from reproit_otel.testing import assert_fixed

    CAPSULE = Path(__file__).with_name("post_orders_keyerror.capsule.json")


    def test_post_orders_keyerror() -> None:
        assert_fixed(CAPSULE)

:func:`assert_fixed` runs the same hermetic replay as ``reproit-otel check`` (every database
and upstream call served from the capsule, none made; the tripwire on) and turns its verdict
into a test outcome:

=============================  ===========================================================
verdict                        the test
=============================  ===========================================================
fixed (also beyond the         passes
recording)
reproduced                     fails: :class:`~reproit_otel.errors.RegressionFailed` naming
                               the recorded exception and the request, like a bug report
diverged, inconclusive         fails as *stale*: the recording no longer matches the code;
                               the message shows the first divergence and how to refresh it
=============================  ===========================================================

The command comes from the argument, else from the project's ``[tool.reproit]`` table
(:mod:`reproit_otel.regression`): ``exec`` boots the application for a production capsule,
``test-exec`` (default ``python -m pytest`` with the running interpreter) runs the tests for
a CI capsule. It runs in the project root (the folder of the nearest ``pyproject.toml``), on a
free port, with OpenTelemetry's exporters set to ``none`` unless the command sets them: a
regression run sends nothing anywhere, and needs neither the database nor the upstreams.
Runs share nothing, so they can run in parallel (``pytest -n``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from reproit_otel.check.judgement import CheckResult, Verdict
from reproit_otel.check.request import recorded_request
from reproit_otel.check.run import CI_RUN_TIMEOUT_S, check_capsule
from reproit_otel.errors import CapsuleError, ConfigurationError, RegressionFailed
from reproit_otel.regression import (
    CAPSULE_SUFFIX,
    RegressionSettings,
    is_ci_capsule,
    name_of_capsule,
    read_settings,
)
from reproit_otel.wire.exception import describe_exception

__all__ = ["assert_fixed"]

QUIET_EXPORTERS: Final = (
    "export OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none"
)
"""Prefixed to a production boot command: a replay exports no telemetry."""
_BODY_SHOWN = 300
_OUTPUT_SHOWN = 30


def _command(
    capsule: Mapping[str, Any], settings: RegressionSettings, command: str | None, path: Path
) -> tuple[str, str]:
    """``(command as configured, command as run)``."""
    if is_ci_capsule(capsule):
        chosen = command or settings.test_command()
        return chosen, f"cd {shlex.quote(str(settings.root))} && {chosen}"
    chosen = command or settings.exec or ""
    if not chosen:
        where = settings.pyproject or settings.root / "pyproject.toml"
        raise ConfigurationError(
            f"no command boots the application for {path}: set it once for the project in "
            f'{where} (`[tool.reproit]` `exec = "opentelemetry-instrument python app.py"`, '
            "the command that serves the application on $PORT), or pass command=... to "
            "assert_fixed"
        )
    return chosen, f"cd {shlex.quote(str(settings.root))} && {QUIET_EXPORTERS} && {chosen}"


def _request_line(capsule: Mapping[str, Any]) -> str:
    if is_ci_capsule(capsule):
        return f"the test {capsule['operation'][len('test:') :]}"
    try:
        method, target, body = recorded_request(capsule)
    except CapsuleError:
        return str(capsule["operation"])
    if not body:
        return f"{method} {target}"
    text = " ".join(body.decode("utf-8", "replace").split())
    cut = "..." if len(text) > _BODY_SHOWN else ""
    return f"{method} {target} {text[:_BODY_SHOWN]}{cut}"


def _capsule_shown(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def _output_lines(result: CheckResult) -> list[str]:
    lines: list[str] = []
    for name, kept in (
        ("standard output", result.application_stdout),
        ("standard error", result.application_stderr),
    ):
        shown = kept[-_OUTPUT_SHOWN:]
        if shown:
            lines.append(f"the application's {name} (last {len(shown)} lines):")
            lines.extend(f"  {line}" for line in shown)
    return lines


def _reproduced_message(
    result: CheckResult, capsule: Mapping[str, Any], shown_path: str, command: str
) -> str:
    from reproit_otel.check.report import exception_lines

    recorded = result.recorded_exception
    if recorded is not None:
        head = describe_exception(recorded)
    else:
        text = (result.recorded_failure or "").strip()
        head = text.splitlines()[0] if text else "(no failure text recorded)"
    lines = [
        f"{result.operation} still fails as recorded: {head}",
        f"  request:  {_request_line(capsule)}",
    ]
    if recorded is not None:
        lines.append(f"  recorded: {result.recorded_failure or 'a failure'}, {head}")
    status = result.observed.get("status")
    if result.replayed_exception is not None:
        lines.append(f"  replayed: HTTP {status}, {describe_exception(result.replayed_exception)}")
    elif status is not None and not is_ci_capsule(capsule):
        lines.append(f"  replayed: HTTP {status}")
    lines += [f"  capsule:  {shown_path}", f"  command:  {command}"]
    if result.replayed_exception is not None:
        lines += exception_lines(result.replayed_exception, "replayed exception")
    elif is_ci_capsule(capsule) and result.recorded_failure:
        lines.append("the recorded failure, as the replayed test failed again:")
        lines += [f"  {line}" for line in result.recorded_failure.splitlines()]
    lines.append(
        "The test passes once the bug is fixed (every dependency served from the capsule)."
    )
    return "\n".join(lines)


def _stale_message(result: CheckResult, shown_path: str, name: str, folder: str) -> str:
    from reproit_otel.check.report import divergence_lines

    lines = [
        f"the recording no longer matches the code ({result.verdict.value}): {result.reason}",
        f"  operation: {result.operation}",
        f"  capsule:   {shown_path}",
    ]
    if result.recorded_exception is not None:
        lines.append(f"  recorded:  {describe_exception(result.recorded_exception)}")
    if result.replayed_exception is not None:
        lines.append(f"  replayed:  {describe_exception(result.replayed_exception)}")
    lines += divergence_lines(result.divergences)
    if result.verdict is not Verdict.DIVERGED:
        lines += _output_lines(result)  # why the replay gave no answer: a boot error, say
    lines += [
        "The recording is stale: this test cannot tell whether the failure is fixed. Refresh it:",
        "capture the failure again (production: the new occurrence; CI: the failing test run "
        "with REPROIT_CI_CAPTURE=1), then",
        f"  reproit-otel regression NEW_CAPSULE --name {name} -o {folder} --refresh",
        "(or delete this regression if the failure can no longer happen).",
    ]
    return "\n".join(lines)


def assert_fixed(
    capsule: str | os.PathLike[str],
    command: str | None = None,
    *,
    timeout: float = CI_RUN_TIMEOUT_S,
    boot_timeout: float | None = None,
) -> CheckResult:
    """Replay ``capsule`` hermetically and return the result when the failure is gone.

    ``command`` boots the application (production capsule) or runs the tests (CI capsule);
    without it the project's ``[tool.reproit]`` table names it. ``timeout`` bounds a test
    command's run, ``boot_timeout`` (default ``[tool.reproit] boot-timeout``, else 20 s) the
    wait for the application to answer HTTP.

    Raises :class:`~reproit_otel.errors.RegressionFailed` (an ``AssertionError``) when the
    failure is reproduced (``stale`` false) or the recording no longer matches the code
    (``stale`` true); :class:`~reproit_otel.errors.CapsuleError` for an unusable capsule and
    :class:`~reproit_otel.errors.ConfigurationError` when no command is known.
    """
    __tracebackhide__ = True  # pytest shows the test's line, not this helper's
    path = Path(capsule)
    from reproit_otel.check.run import load_check_target

    document = load_check_target(path)
    settings = read_settings(path.resolve())
    configured, run = _command(document, settings, command, path)
    result = check_capsule(
        path,
        run,
        echo=None,
        timeout=timeout,
        boot_timeout=settings.boot_timeout if boot_timeout is None else boot_timeout,
    )
    shown_path = _capsule_shown(path, settings.root)
    if result.verdict is Verdict.FIXED:
        return result
    if result.verdict is Verdict.REPRODUCED:
        message = _reproduced_message(result, document, shown_path, configured)
        raise RegressionFailed(message, result=result, stale=False)
    name = name_of_capsule(path)
    folder = str(Path(shown_path).parent) if path.name.endswith(CAPSULE_SUFFIX) else "."
    raise RegressionFailed(
        _stale_message(result, shown_path, name, folder), result=result, stale=True
    )
