"""The judgement of a check: what a finished replay's output and answer mean.

:mod:`reproit_otel.check.run` runs the application and hands its output lines, its answer
and the ``REPROIT:`` markers in them to the functions here; they give the verdict.

For CI and production capsules alike, any ``REPROIT:DIVERGENCE`` line on the application's
standard error means the run left the recording and the verdict is *diverged*, with one
exception for production capsules: a replay that first consumed every recorded data exchange,
in the recorded order, and only then made calls production never made got past the recorded
failure point. It is *fixed*, qualified *beyond the recording* (:func:`judge_evidence`).

A production *fixed* needs evidence: the ``REPROIT:REPLAY-USAGE`` line must show that the
replayed request consumed every recorded data exchange (all of them precede the recorded
failure), in order, and the recorded exception must not have been raised again. A 2xx/3xx
that consumed fewer is *inconclusive*, naming the recorded calls never made and the likely
reason (a login redirect, a 401/403, a form rendered again, the application's own error
page).

=============  ====  =====================================================================
verdict        exit  meaning
=============  ====  =====================================================================
reproduced     1     the recorded failure happened again
fixed          0     the same inputs now get past the recorded failure point (qualified
                     "beyond the recording" when they then made calls production never made)
diverged       3     the application made a call the recording does not hold
inconclusive   3     no usable answer (timeout, no marker, a different failure, no boot,
                     no replay)
=============  ====  =====================================================================
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from reproit_otel.replay.tripwire import TRIPWIRE_PROTOCOL
from reproit_otel.wire.exception import same_failure
from reproit_otel.wire.replay_usage import describe_call

__all__ = [
    "BEYOND_THE_RECORDING",
    "CI_TEST_MARKER",
    "CREDENTIAL_HINT",
    "DIVERGENCE_MARKER",
    "REPLAY_FAILED_MARKER",
    "REPLAY_MARKER",
    "TEST_TRIGGER_PREFIX",
    "USAGE_MARKER",
    "CheckResult",
    "Evidence",
    "Verdict",
    "classify_production_run",
    "classify_test_run",
    "divergence_markers",
    "judge_evidence",
    "judge_reached_failure",
    "last_check_record",
    "last_return",
    "likely_cause",
    "offline_verdict",
    "parse_marker",
    "replay_markers",
    "replay_usage",
]

DIVERGENCE_MARKER = "REPROIT:DIVERGENCE "
CI_TEST_MARKER = "REPROIT:CI-TEST "
REPLAY_MARKER = "REPROIT:REPLAY "
"""Written by the replayed process once its replay is active (``reproit_otel.replay``)."""
REPLAY_FAILED_MARKER = "REPROIT:REPLAY-FAILED "
"""Written by a process that could not arm its replay, before it stops (``bootstrap.py``)."""
USAGE_MARKER = "REPROIT:REPLAY-USAGE "
"""Written by the replayed process when the recorded request ends (counts of what it used)."""
TEST_TRIGGER_PREFIX = "test:"
BEYOND_THE_RECORDING = "beyond the recording"
"""The qualifier of a *fixed* replay that went on to make calls production never made."""
CREDENTIAL_HINT = (
    "the replayed request is not logged in as production's was: mint a credential on this "
    "machine and give it with `check --header 'Name: value'` or `--cookie 'name=value'`"
)


class Verdict(str, enum.Enum):
    """The four answers of ``reproit-otel check``."""

    REPRODUCED = "reproduced"
    FIXED = "fixed"
    DIVERGED = "diverged"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_code(self) -> int:
        """Process exit code: fixed 0, reproduced 1, diverged and inconclusive 3."""
        return {"fixed": 0, "reproduced": 1}.get(self.value, 3)

    @property
    def outcome(self) -> str:
        """``pass`` for fixed, ``fail`` for reproduced, ``stale`` otherwise."""
        return {"fixed": "pass", "reproduced": "fail"}.get(self.value, "stale")


@dataclass
class CheckResult:
    """What a check observed and concluded."""

    verdict: Verdict
    mode: str
    operation: str
    recorded_failure: str | None = None
    observed: dict[str, Any] = field(default_factory=dict)
    divergences: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False
    envelope: dict[str, Any] | None = None
    reason: str = ""
    recorded_exception: dict[str, Any] | None = None
    """The exception the capsule recorded (``wire/exception.py``), if any."""
    replayed_exception: dict[str, Any] | None = None
    """The exception the replayed request raised (its ``REPROIT:EXCEPTION`` line), if any."""
    different_failure: bool = False
    """The replay failed, but with another exception than the recorded one."""
    application_stderr: list[str] = field(default_factory=list)
    """The last lines the application wrote to standard error (markers left out, bounded)."""
    application_stdout: list[str] = field(default_factory=list)
    """The last lines the application wrote to standard output (bounded the same way)."""
    usage: dict[str, Any] | None = None
    """The replayed process's ``REPROIT:REPLAY-USAGE`` counts (production), else ``None``."""
    qualifier: str | None = None
    """``"beyond the recording"`` for a *fixed* replay that then made calls production never
    made (:data:`BEYOND_THE_RECORDING`), else ``None``."""
    first_new_call: dict[str, Any] | None = None
    """The first call past the recording (protocol and request, as :func:`describe_call`)."""
    unused_calls: list[dict[str, Any]] = field(default_factory=list)
    """The recorded data exchanges the replay never made (an inconclusive 2xx/3xx, say)."""
    likely_cause: str | None = None
    """Why the replay did not reach the recorded failure point, as far as check can tell."""

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "capture": {"mode": self.mode, "operation": self.operation},
            "verdict": self.verdict.value,
            "outcome": self.verdict.outcome,
            "exit": self.verdict.exit_code,
            "reason": self.reason,
            "recordedFailure": self.recorded_failure,
            "observedResult": self.observed,
            "divergences": self.divergences,
            "timedOut": self.timed_out,
            "envelope": self.envelope,
            "recordedException": self.recorded_exception,
            "replayedException": self.replayed_exception,
            "differentFailure": self.different_failure,
            "applicationStderr": self.application_stderr,
            "applicationStdout": self.application_stdout,
            "usage": self.usage,
            "qualifier": self.qualifier,
            "firstNewCall": self.first_new_call,
            "unusedCalls": self.unused_calls,
            "likelyCause": self.likely_cause,
        }


def last_check_record(result: CheckResult, capsule: str) -> dict[str, Any] | None:
    """What ``check`` keeps of a check that fired a request, for ``doctor`` to read
    (``.reproit/last-check.json``); ``None`` when no request was answered (offline, CI)."""
    status = result.observed.get("status") if isinstance(result.observed, dict) else None
    if not isinstance(status, int):
        return None
    return {
        "capsule": capsule,
        "operation": result.operation,
        "verdict": result.verdict.value,
        "status": status,
        "location": result.observed.get("location"),
        "likelyCause": result.likely_cause,
    }


def last_return(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The capsule's last ``return`` event (what the recorded operation ended with)."""
    for event in reversed(events):
        if isinstance(event, dict) and event.get("kind") == "return":
            return event
    return None


def parse_marker(line: str, marker: str) -> dict[str, Any] | None:
    """The JSON object after ``marker`` on ``line``, or ``None`` (another line, bad JSON)."""
    if not line.startswith(marker):
        return None
    try:
        payload = json.loads(line[len(marker) :])
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def classify_test_run(
    operation: str,
    recorded_failure: str | None,
    stderr_lines: list[str],
    timed_out: bool,
) -> tuple[Verdict, str, dict[str, Any]]:
    """The CI verdict table of PROTOCOL 8.4, applied to a finished run's stderr lines."""
    if timed_out:
        return Verdict.INCONCLUSIVE, "the test command timed out", {}
    if any(line.startswith(DIVERGENCE_MARKER) for line in stderr_lines):
        return Verdict.DIVERGED, "the test made a call the capsule does not hold", {}
    marker: dict[str, Any] | None = None
    for line in stderr_lines:
        payload = parse_marker(line, CI_TEST_MARKER)
        if (
            payload
            and isinstance(payload.get("operation"), str)
            and isinstance(payload.get("status"), str)
        ):
            marker = payload
            break
    if marker is None:
        return Verdict.INCONCLUSIVE, "the test command wrote no REPROIT:CI-TEST marker", {}
    observed = {"status": marker["status"], "failure": marker.get("failure")}
    if marker["operation"] != operation:
        return Verdict.INCONCLUSIVE, f"the marker names {marker['operation']!r}", observed
    if marker["status"] == "passed":
        return Verdict.FIXED, "the test passes with the recorded exchanges", observed
    if marker["status"] == "failed":
        failure = marker.get("failure")
        if recorded_failure is None:
            return Verdict.REPRODUCED, "the test fails again", observed
        if isinstance(failure, str) and failure == recorded_failure:
            return Verdict.REPRODUCED, "the test fails again with the recorded failure", observed
        return Verdict.INCONCLUSIVE, "the test fails, but not with the recorded failure", observed
    return Verdict.INCONCLUSIVE, f"unknown test status {marker['status']!r}", observed


def divergence_markers(lines: list[str]) -> list[dict[str, Any]]:
    """The ``REPROIT:DIVERGENCE`` payloads among ``lines``, in order."""
    found = []
    for line in lines:
        payload = parse_marker(line, DIVERGENCE_MARKER)
        if payload is not None:
            found.append(payload)
    return found


def replay_markers(lines: list[str]) -> list[dict[str, Any]]:
    """The ``REPROIT:REPLAY`` payloads among ``lines`` (one per replaying process)."""
    found = []
    for line in lines:
        payload = parse_marker(line, REPLAY_MARKER)
        if payload is not None:
            found.append(payload)
    return found


def classify_production_run(
    status: int | None, divergences: list[dict[str, Any]], replayed: bool, failure: str
) -> tuple[Verdict, str]:
    """The production verdict (PROTOCOL 9.3, plus the replay proof) of one finished run.

    ``failure`` says why there is no status (no boot, the request failed); ``replayed`` is
    whether the application wrote a ``REPROIT:REPLAY`` line.
    """
    if divergences:
        return Verdict.DIVERGED, "the application made a call the capsule does not hold"
    if not replayed:
        reason = (
            "the application never loaded the capsule: it wrote no REPROIT:REPLAY line, so it "
            "ran without replay (is reproit-otel installed where it runs, and did "
            "opentelemetry-instrument set up? an exporter it cannot create stops it)"
        )
        return Verdict.INCONCLUSIVE, f"{reason}; also, {failure}" if failure else reason
    if status is None:
        return Verdict.INCONCLUSIVE, failure
    if status >= 500:
        return Verdict.REPRODUCED, f"the recorded request answered HTTP {status} again"
    if 200 <= status < 400:
        return Verdict.FIXED, f"the recorded request now answers HTTP {status}"
    return Verdict.INCONCLUSIVE, f"the recorded request answered HTTP {status}"


def replay_usage(lines: list[str]) -> dict[str, Any] | None:
    """The last ``REPROIT:REPLAY-USAGE`` payload among ``lines`` (``None`` without one)."""
    found = None
    for line in lines:
        payload = parse_marker(line, USAGE_MARKER)
        if payload is not None:
            found = payload
    return found


def judge_reached_failure(
    verdict: Verdict, reason: str, usage: Mapping[str, Any] | None
) -> tuple[Verdict, str]:
    """A 5xx is the recorded failure only if the replay got as far as the recording did.

    The recorded request made every one of its data exchanges before it failed, so a
    faithful replay of it consumes them all. A 5xx that left some unused failed earlier, for
    another reason: *inconclusive* (exit 3), with the counts in the reason. Without a usage
    report (an application that replays without a request window) the verdict stands.
    """
    if verdict is not Verdict.REPRODUCED or usage is None:
        return verdict, reason
    unused = usage.get("unused")
    total = usage.get("dataExchanges")
    if not isinstance(unused, int) or not isinstance(total, int) or unused <= 0:
        return verdict, reason
    return Verdict.INCONCLUSIVE, (
        f"{reason}, but it used only {total - unused} of the {total} recorded data exchanges: "
        "it failed before reaching the recorded failure, so this is a different failure "
        "(see usage in --json; a boot or configuration problem of the replay is likely)"
    )


@dataclass
class Evidence:
    """What :func:`judge_evidence` adds to a production verdict."""

    verdict: Verdict
    reason: str
    qualifier: str | None = None
    first_new_call: dict[str, Any] | None = None
    unused_calls: list[dict[str, Any]] = field(default_factory=list)
    likely_cause: str | None = None


_LOGIN_PATH = re.compile(r"log-?in|sign-?in|sign_in|auth|sso|/account|session", re.IGNORECASE)
_ERROR_WORDS = re.compile(
    r"not configured|misconfigured|configuration|missing|not set|unavailable|error|exception|"
    r"failed|failure|invalid|denied|forbidden|unauthori[sz]ed|something went wrong",
    re.IGNORECASE,
)
_SNIPPET = 120


def _reached_in_order(usage: Mapping[str, Any]) -> bool | None:
    """Whether every recorded data exchange was consumed, in the recorded order (``None``:
    the usage report does not say)."""
    total = usage.get("dataExchanges")
    order = usage.get("consumedOrder")
    if not isinstance(total, int) or not isinstance(order, list):
        return None
    return order == list(range(total))


def _call_text(call: Mapping[str, Any]) -> str:
    names = ("method", "url", "text", "tool", "op", "address")
    parts = [str(call[name]) for name in names if call.get(name) is not None]
    return " ".join([str(call.get("protocol")), *parts])


def _host(url: Any) -> str | None:
    if not isinstance(url, str):
        return None
    try:
        return urlsplit(url).netloc or None
    except ValueError:
        return None


def _recorded_hosts(capsule: Mapping[str, Any]) -> set[str]:
    hosts = set()
    for event in capsule.get("events") or ():
        exchange = event.get("exchange") if isinstance(event, Mapping) else None
        if isinstance(exchange, Mapping) and exchange.get("protocol") == "http":
            request = exchange.get("request")
            host = _host(request.get("url") if isinstance(request, Mapping) else None)
            if host is not None:
                hosts.add(host)
    return hosts


def _body_text(observed: Mapping[str, Any]) -> str:
    body = observed.get("body")
    if not isinstance(body, str):
        return ""
    text = re.sub(r"<[^>]*>", " ", body)
    return " ".join(text.split())


def likely_cause(
    status: int | None, location: str | None, observed: Mapping[str, Any], consumed: int
) -> str:
    """Why a replayed answer came before the recorded failure point, as far as its status,
    ``location`` header and body tell."""
    if status in (401, 403):
        return f"the application refused the request (HTTP {status}): {CREDENTIAL_HINT}"
    if status is not None and 300 <= status < 400:
        if location and _LOGIN_PATH.search(location):
            return f"it redirected to a login page ({location}): {CREDENTIAL_HINT}"
        where = f" to {location}" if location else ""
        return f"it redirected{where} before doing the recorded work"
    body = observed.get("body")
    raw = body if isinstance(body, str) else ""
    if consumed == 0 and "<form" in raw.lower():
        return (
            "the form was rendered again (HTTP 200 with none of the recorded data exchanges "
            "used): the application refused the replayed form, typically its CSRF token or "
            "its validation; a CSRF token bound to a session needs that session "
            "(`check --cookie 'name=value'`)"
        )
    text = _body_text(observed)
    if _ERROR_WORDS.search(text):
        snippet = text[:_SNIPPET] + ("..." if len(text) > _SNIPPET else "")
        return (
            f'the answer reads like the application\'s own error page ("{snippet}"): a '
            "setting or environment variable production had and this run lacks is likely"
        )
    return (
        "it answered before reaching the recorded failure point; compare its body and output "
        "with production's"
    )


def judge_evidence(
    verdict: Verdict,
    reason: str,
    *,
    status: int | None,
    location: str | None,
    observed: Mapping[str, Any],
    usage: Mapping[str, Any] | None,
    divergences: list[dict[str, Any]],
    capsule: Mapping[str, Any],
    recorded: Mapping[str, Any] | None,
    replayed: Mapping[str, Any] | None,
) -> Evidence:
    """Hold a production *fixed* to the evidence, and find *fixed beyond the recording*.

    * *fixed* stays only when the usage report shows every recorded data exchange consumed,
      in the recorded order, and the recorded exception was not raised again; otherwise it
      is *inconclusive*, with the calls never made and :func:`likely_cause`.
    * *diverged* becomes *fixed* ``beyond the recording`` when the first divergence came
      after every recorded data exchange had been consumed in order and the recorded
      exception was not raised: the replay got past the recorded failure point, and the
      calls after it were answered by the divergence rule (never live).
    * a 401/403 says how to replay as the recorded user.
    """
    if verdict is Verdict.INCONCLUSIVE and status in (401, 403):
        cause = likely_cause(status, location, observed, 0)
        return Evidence(verdict, f"{reason}: {cause}", likely_cause=cause)
    raised_again = (
        recorded is not None and replayed is not None and same_failure(recorded, replayed)
    )
    if verdict is Verdict.DIVERGED:
        return _judge_divergence(reason, usage, divergences, capsule, raised_again)
    if verdict is not Verdict.FIXED:
        return Evidence(verdict, reason)
    if usage is None:
        return Evidence(
            Verdict.INCONCLUSIVE,
            f"{reason}, but the application wrote no REPROIT:REPLAY-USAGE line, so nothing "
            "shows that the replay reached the recorded failure point (the line is written "
            "when the request's OpenTelemetry server span ends: is the request served under "
            "opentelemetry-instrument?)",
        )
    unused_calls = [
        dict(call) for call in usage.get("unusedCalls") or () if isinstance(call, Mapping)
    ]
    total = usage.get("dataExchanges")
    consumed = usage.get("consumed")
    if (
        not isinstance(total, int)
        or not isinstance(consumed, int)
        or _reached_in_order(usage) is None
    ):
        return Evidence(
            Verdict.INCONCLUSIVE,
            f"{reason}, but the usage report does not say which recorded exchanges were used",
        )
    if consumed < total:
        cause = likely_cause(status, location, observed, consumed)
        never = "; ".join(_call_text(call) for call in unused_calls[:3])
        more = f" and {total - consumed - 3} more" if total - consumed > 3 else ""
        return Evidence(
            Verdict.INCONCLUSIVE,
            f"{reason}, but it used only {consumed} of the {total} recorded data exchanges, so "
            f"it never reached the recorded failure point (never made: {never}{more}); "
            f"likely: {cause}",
            unused_calls=unused_calls,
            likely_cause=cause,
        )
    if raised_again:
        return Evidence(
            Verdict.INCONCLUSIVE,
            f"{reason}, but the replay raised the recorded exception again (handled by the "
            "application): the recorded failure is still there",
        )
    return Evidence(
        Verdict.FIXED,
        f"{reason}, after using all {total} recorded data exchanges{_order_note(usage)}",
    )


def _order_note(usage: Mapping[str, Any]) -> str:
    """How the recorded data exchanges were used: `` in order``, or the order they were.

    Each dependency's calls are served in their own recorded sequence (a call takes the next
    unused exchange of its kind), so a use in another order is calls to *different*
    dependencies made in another order: concurrent calls (``asyncio.gather``) finish in any
    order. It says nothing about the failure point, which the replay reached all the same.
    """
    if _reached_in_order(usage):
        return " in order"
    return (
        f", in another order than recorded ({usage.get('consumedOrder')}: calls to different "
        "dependencies, as concurrent calls make them)"
    )


def _new_call(divergence: Mapping[str, Any]) -> bool:
    """Whether a divergence is a call production never made, as opposed to a call no
    recording could serve: the network tripwire's refusal of a client reproit-otel does not
    record, or a recorded exchange refused because capture truncated it."""
    if divergence.get("protocol") == TRIPWIRE_PROTOCOL:
        return False
    got = divergence.get("got")
    flags = ("truncated", "streamBoundariesTruncated")
    return not (isinstance(got, Mapping) and any(got.get(flag) for flag in flags))


def _judge_divergence(
    reason: str,
    usage: Mapping[str, Any] | None,
    divergences: list[dict[str, Any]],
    capsule: Mapping[str, Any],
    raised_again: bool,
) -> Evidence:
    first = divergences[0] if divergences else {}
    got = first.get("got")
    call = describe_call(first.get("protocol"), got)
    host = _host(call.get("url")) if call.get("protocol") == "http" else None
    if host is not None and host not in _recorded_hosts(capsule):
        reason = (
            f"{reason}: its first call went to {host}, a host the recording never called "
            "(another configuration of the upstream's address is likely)"
        )
    total = usage.get("dataExchanges") if usage is not None else None
    before = first.get("consumed")
    if (
        usage is None
        or not isinstance(total, int)
        or not isinstance(before, int)
        or before < total
        or _reached_in_order(usage) is None
        or raised_again
        or not all(_new_call(divergence) for divergence in divergences)
    ):
        return Evidence(Verdict.DIVERGED, reason)
    return Evidence(
        Verdict.FIXED,
        f"the replay used all {total} recorded data exchanges{_order_note(usage)} and did not "
        "fail at "
        f"the recorded failure point; then it made {len(divergences)} call(s) production "
        f"never made, answered by the divergence rule (never live), first: {_call_text(call)}",
        qualifier=BEYOND_THE_RECORDING,
        first_new_call=call,
    )


def offline_verdict(capsule: Mapping[str, Any]) -> CheckResult:
    """Re-evaluate the recorded events without running anything (no ``--exec``)."""
    from reproit_otel.wire.trace import marked_oracle

    events = capsule["events"]
    returned = last_return(events)
    status = returned.get("status") if returned else None
    marked = marked_oracle(events)
    fires = marked is not None or (
        isinstance(status, int) and not isinstance(status, bool) and status >= 500
    )
    return CheckResult(
        verdict=Verdict.REPRODUCED if fires else Verdict.FIXED,
        mode="offline",
        operation=str(capsule["operation"]),
        observed={"status": status, "oracle": marked},
        envelope=capsule.get("envelope"),
        reason="the recorded events still fire the oracle" if fires else "no oracle fires",
    )
