"""Run a check: boot or start the application on the capsule, fire, collect, judge.

Two paths, chosen by the capsule's operation (PROTOCOL 8.4 and 9.3):

* **CI capsules** (operation ``test:<suite>#<test>``) run the test command with
  ``REPROIT_REPLAY`` set and read the ``REPROIT:CI-TEST`` marker the pytest plugin writes; a
  run that wrote ``REPROIT:REPLAY-FAILED`` instead ran no test: :class:`ReplayNotArmedError`,
  exit 2, naming its cause.
* **Production capsules** (operation ``METHOD /path``) boot the application command with
  ``REPROIT_REPLAY`` and ``PORT``, wait for it to answer HTTP, fire the recorded request
  (:mod:`reproit_otel.check.request`) and hand what came back to
  :mod:`reproit_otel.check.judgement`. The request is fired only once the application has
  also written the ``REPROIT:REPLAY`` line naming this capsule
  (:func:`reproit_otel.replay.install_replay` writes it when the replay is armed
  completely). An application that answers without it runs live, and one that writes
  ``REPROIT:REPLAY-FAILED`` could not arm: :class:`ReplayNotArmedError`, exit 2, nothing
  fired.

Without a command the recorded events are judged offline
(:func:`reproit_otel.check.judgement.offline_verdict`).
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from reproit_otel.check.boot import boot_failure, listening_ports
from reproit_otel.check.exceptions import judge_exception, recorded_exception, replayed_exception
from reproit_otel.check.judgement import (
    REPLAY_FAILED_MARKER,
    TEST_TRIGGER_PREFIX,
    CheckResult,
    Verdict,
    classify_production_run,
    classify_test_run,
    divergence_markers,
    judge_evidence,
    judge_reached_failure,
    last_return,
    offline_verdict,
    parse_marker,
    replay_markers,
    replay_usage,
)
from reproit_otel.check.output import OutputPump, output_tail
from reproit_otel.check.request import (
    RequestOverrides,
    observed_body,
    recorded_request,
    replay_request,
)
from reproit_otel.errors import CapsuleError, ReproitError

__all__ = [
    "BOOT_TIMEOUT_S",
    "CI_RUN_TIMEOUT_S",
    "ReplayNotArmedError",
    "check_capsule",
    "load_check_target",
]

CI_RUN_TIMEOUT_S = 120.0
BOOT_TIMEOUT_S = 20.0
BOOT_POLL_S = 0.2
STDERR_GRACE_S = 0.2
OTHER_PORT_GRACE_S = 2.0
"""How long an application may listen only on other ports before check stops waiting."""


def load_check_target(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a capsule, or a capture batch projected to one, and validate it."""
    from reproit_otel.replay.session import read_capsule_file
    from reproit_otel.wire.capsule import validate_capsule

    document = read_capsule_file(path)
    try:
        validate_capsule(document)
    except CapsuleError as error:
        raise CapsuleError(f"{path}: {error}") from None
    if not document.get("events"):
        raise CapsuleError(f"{path} holds no events; there is nothing to replay")
    return document


def _spawn(command: str, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    environ = dict(env)
    # A Python application's print() to a pipe is block-buffered, and the check ends it with
    # a signal that skips the flush: unbuffered, its lines arrive as it writes them.
    environ.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.Popen(
        ["sh", "-c", command],
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_test_check(
    capsule: dict[str, Any],
    capsule_path: Path,
    command: str,
    echo: TextIO | None,
    timeout: float,
) -> CheckResult:
    operation = str(capsule["operation"])
    returned = last_return(capsule["events"])
    output = returned.get("output") if returned else None
    recorded = output.get("error") if isinstance(output, dict) else None
    recorded_failure = recorded if isinstance(recorded, str) else None
    env = {**os.environ, "REPROIT_REPLAY": str(capsule_path.resolve())}
    env.pop("REPROIT_CI_CAPTURE", None)
    process = _spawn(command, env)
    pump = OutputPump(process.stderr, echo)
    printed = OutputPump(process.stdout, echo)
    timed_out = False
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _stop(process)
    pump.join(5.0)
    printed.join(5.0)
    for line in pump.lines:
        failed = parse_marker(line, REPLAY_FAILED_MARKER)
        if failed is not None:
            raise ReplayNotArmedError(
                "the test command could not arm the replay and stopped before running the "
                f"test: {failed.get('error')}"
            )
    verdict, reason, observed = classify_test_run(
        operation, recorded_failure, pump.lines, timed_out
    )
    observed.setdefault("exitCode", process.returncode)
    return CheckResult(
        verdict=verdict,
        mode="test-hermetic",
        operation=operation,
        recorded_failure=recorded_failure,
        observed=observed,
        divergences=divergence_markers(pump.lines),
        timed_out=timed_out,
        envelope=capsule.get("envelope"),
        reason=reason,
        application_stderr=output_tail(pump.lines),
        application_stdout=output_tail(printed.lines),
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def probe_method(operation: str) -> str:
    """The method of the boot probe to ``/``: ``GET``, or ``HEAD`` when the recorded request is
    ``GET /`` itself (the replayed process takes the first server span of the recorded method
    and path for the recorded request, so a ``GET /`` probe would be taken for it)."""
    method, _, path = operation.partition(" ")
    return "HEAD" if method.upper() == "GET" and (path or "/") == "/" else "GET"


def _answers_http(port: int, method: str) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=BOOT_POLL_S * 5)
    try:
        connection.request(method, "/")
        connection.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


class ReplayNotArmedError(ReproitError):
    """The application (or the test command) never armed the replay of the capsule: the
    request was not fired, the test did not run.

    ``reproit-otel check`` exits 2 with its message (the cause and what to change).
    """


def _armed(lines: list[str], capsule: str) -> bool:
    """Whether the application wrote the ``REPROIT:REPLAY`` line of ``capsule`` (armed)."""
    return any(marker.get("capsule") == capsule for marker in replay_markers(lines))


def _unarmed_reason(lines: list[str], capsule: str, answered: bool, waited: float) -> str | None:
    """Why a production replay never armed, or ``None`` when the boot failed otherwise.

    Reads the ``REPROIT:REPLAY-FAILED`` line a process writes before it stops (a bad capsule
    field, an instrumentor or the tripwire that could not be installed), and the case of an
    application that answers HTTP without a ``REPROIT:REPLAY`` line for this capsule.
    """
    for line in lines:
        failed = parse_marker(line, REPLAY_FAILED_MARKER)
        if failed is not None:
            return (
                f"the application could not arm the replay and stopped before serving: "
                f"{failed.get('error')}; the recorded request was not sent"
            )
    if not answered:
        return None
    others = sorted({str(m.get("capsule")) for m in replay_markers(lines)} - {capsule})
    if others:
        return (
            f"the application answers HTTP on $PORT but armed the replay of {', '.join(others)}, "
            f"not of {capsule}; the recorded request was not sent"
        )
    return (
        "the application answers HTTP on $PORT but never reported that replay is armed (no "
        f"REPROIT:REPLAY line within {waited:g} s): it runs live, without replay. Start it "
        'under the launcher (--exec "opentelemetry-instrument python app.py") with '
        "reproit-otel installed where it runs, or call reproit_otel.install() at start-up; "
        "the recorded request was not sent"
    )


def _has_exchange(capsule: Mapping[str, Any]) -> bool:
    return any(
        isinstance(e, dict) and e.get("kind") == "effect" and e.get("exchange")
        for e in capsule["events"]
    )


def _run_hermetic_check(
    capsule: dict[str, Any],
    capsule_path: Path,
    command: str,
    echo: TextIO | None,
    boot_timeout: float,
    *,
    overrides: RequestOverrides | None = None,
) -> CheckResult:
    operation = str(capsule["operation"])
    port = _free_port()
    env = {**os.environ, "REPROIT_REPLAY": str(capsule_path.resolve()), "PORT": str(port)}
    process = _spawn(command, env)
    pump = OutputPump(process.stderr, echo)
    printed = OutputPump(process.stdout, echo)
    observed: dict[str, Any] = {}
    answer_headers: dict[str, str] = {}
    status: int | None = None
    reason = ""
    armed_for = env["REPROIT_REPLAY"]
    answered = booted = False
    probe = probe_method(operation)
    try:
        deadline = time.monotonic() + boot_timeout
        elsewhere: set[int] = set()
        elsewhere_since: float | None = None
        while time.monotonic() < deadline and process.poll() is None:
            if _answers_http(port, probe):
                answered = True
                if _armed(pump.lines, armed_for):  # never fire at a process serving live
                    booted = True
                    break
                time.sleep(BOOT_POLL_S)
                continue
            # Listening on another port only: it will not move to $PORT; after a grace for
            # applications that open a side port (metrics) first, stop waiting.
            elsewhere = listening_ports(process.pid) - {port}
            if not elsewhere:
                elsewhere_since = None
            elif elsewhere_since is None:
                elsewhere_since = time.monotonic()
            elif time.monotonic() - elsewhere_since >= OTHER_PORT_GRACE_S:
                break
            time.sleep(BOOT_POLL_S)
        if booted:
            request = replay_request(capsule, overrides)
            observed["request"] = {"method": request.method, "target": request.target}
            try:
                status, answer = request.fire(port, answer_headers=answer_headers)
                observed["status"] = status
                observed.update(observed_body(answer))
            except (OSError, http.client.HTTPException) as error:
                reason = f"the recorded request failed: {error}"
            time.sleep(STDERR_GRACE_S)
        else:
            exit_code = process.poll()
            reason = boot_failure(port, exit_code, elsewhere, boot_timeout)
    finally:
        _stop(process)
        pump.join(5.0)
        printed.join(5.0)
    if not booted:
        unarmed = _unarmed_reason(pump.lines, armed_for, answered, boot_timeout)
        if unarmed is not None:
            raise ReplayNotArmedError(unarmed)
    divergences = divergence_markers(pump.lines)
    markers = replay_markers(pump.lines)
    observed["replay"] = markers[0] if markers else None
    verdict, reason = classify_production_run(status, divergences, bool(markers), reason)
    recorded = recorded_exception(capsule["events"])
    replayed = replayed_exception(pump.lines, operation)
    judged = judge_exception(verdict.value, recorded, replayed)
    if judged is not None:
        same, reason = judged
        if not same:
            verdict = Verdict.INCONCLUSIVE
    usage = replay_usage(pump.lines)
    reached = judge_reached_failure(verdict, reason, usage)
    left_early = reached[0] is not verdict
    verdict, reason = reached
    location = answer_headers.get("location")
    if location is not None:
        observed["location"] = location
    evidence = judge_evidence(
        verdict,
        reason,
        status=status,
        location=location,
        observed=observed,
        usage=usage,
        divergences=divergences,
        capsule=capsule,
        recorded=recorded,
        replayed=replayed,
    )
    verdict, reason = evidence.verdict, evidence.reason
    returned = last_return(capsule["events"])
    return CheckResult(
        verdict=verdict,
        mode="production-hermetic",
        operation=operation,
        recorded_failure=(
            f"HTTP {returned.get('status')}" if returned and "status" in returned else None
        ),
        observed=observed,
        divergences=divergences,
        envelope=capsule.get("envelope"),
        reason=reason,
        recorded_exception=recorded,
        replayed_exception=replayed,
        different_failure=(judged is not None and not judged[0]) or left_early,
        application_stderr=output_tail(pump.lines),
        application_stdout=output_tail(printed.lines),
        usage=usage,
        qualifier=evidence.qualifier,
        first_new_call=evidence.first_new_call,
        unused_calls=evidence.unused_calls,
        likely_cause=evidence.likely_cause,
    )


def check_capsule(
    path: str | os.PathLike[str],
    command: str | None,
    *,
    echo: TextIO | None = sys.stderr,
    timeout: float = CI_RUN_TIMEOUT_S,
    boot_timeout: float = BOOT_TIMEOUT_S,
    on_start: Callable[[str], None] | None = None,
    overrides: RequestOverrides | None = None,
) -> CheckResult:
    """Run the check for one capsule file and return its result.

    ``command`` is the test command (CI capsules) or the boot command (production capsules);
    without it the recorded events are re-evaluated offline. ``overrides`` (``--header``,
    ``--cookie``) change the request a production check sends. Raises
    :class:`~reproit_otel.errors.CapsuleError` for an unusable capsule.
    """
    capsule_path = Path(path)
    capsule = load_check_target(capsule_path)
    operation = str(capsule["operation"])
    if on_start is not None:
        on_start(operation)
    if operation.startswith(TEST_TRIGGER_PREFIX):
        if not command:
            raise CapsuleError(
                f"{capsule_path} is a CI capsule ({operation}); give the test command with "
                '--exec "pytest ..."'
            )
        return _run_test_check(capsule, capsule_path, command, echo, timeout)
    if not command:
        return offline_verdict(capsule)
    recorded_request(capsule)  # refuses a request line no HTTP request can carry, before boot
    if not _has_exchange(capsule):
        raise CapsuleError(
            f"{capsule_path} records no dependency exchange, so a hermetic replay has nothing "
            "to serve; run `reproit-otel check` without --exec for the offline verdict"
        )
    return _run_hermetic_check(
        capsule, capsule_path, command, echo, boot_timeout, overrides=overrides
    )
