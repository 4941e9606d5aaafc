"""The node-golden ``ci_capsule.json`` cases, run as real pytest projects.

For each case the adapter writes the pytest equivalent of ``input.fixture`` (the suite and test
names through ``@pytest.mark.reproit``, effects through :func:`current_test_trace`, fetches
through ``requests`` against a loopback upstream built from ``input.upstream``), runs the
capture (and the replay runs the case expects) in a subprocess, and compares:

* the exit code, the ``REPROIT:`` marker lines, the spool listing and ``dropped.count``;
* every capsule's text, after masking the fields the README lists as volatile (trace and span
  ids, ``at``, ``monoNs``, envelope values, capsule file names), as canonical JSON.

The reference was run with the clock and the RNG pinned; this adapter masks them instead, and
checks the masked fields against their rules (``ci-<ms>-<n>`` trace ids counting tests, span
ids, ``observedAtMs`` = the first ``at``, a 16-hex seed, ``tz`` from ``TZ``).

Where Python or a decision changes the expected result, the expectation is rewritten to our
documented behaviour and the reason is named (see :data:`REASONS`):

* ``fetch-headers``: Node's ``fetch`` records no request headers; ``requests`` sends and records
  its defaults (``user-agent``, ``accept``, ...). The expected request headers are the ones the
  reference recorded plus those defaults (section 4.3 bounds, section 3 redaction), and they
  are compared like every other field; the divergence marker's ``expected`` request is the
  recorded one, so it carries them too (rewritten by the same rule).
* ``node-assert``: Node's ``assert.strictEqual`` message; the Python sample raises
  ``AssertionError("Expected values to be strictly equal:\\n\\n<a> !== <b>\\n")`` (the same text
  as Node for numbers, ``JSON.stringify`` of each value otherwise).
* ``code-points``: names and failure texts are cut by code points, not UTF-16 units, so an
  astral character on the boundary stays whole instead of leaving a lone surrogate.
* ``D6``: the envelope names the runtime ``runtime: "python X.Y.Z"`` instead of ``node``.
* ``D7-names``: a long name never fails a test (the span id is shortened instead).
* ``D13``: a name of the documented list (``tests/vectors.py``) is redacted where the reference
  recorded it visible.
* ``D7-cap``: a trace that reaches 256 events keeps its last slot for the return event, so the
  capsule is still spooled with the effects past the cap dropped.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from reproit_otel.ci.pipeline import CiTrace
from reproit_otel.redaction.core import placeholder, redact
from reproit_otel.wire._js import UNSET, code_point_cut, js_string, js_trim
from reproit_otel.wire.bounds import bounded_headers
from reproit_otel.wire.canonical import canonical_json, ordered_json
from reproit_otel.wire.trace import MAX_EVENTS, TraceContext
from tests.integration.pytest_runs import RouteUpstream, clean_env
from tests.vectors import golden_cases, with_d13

CASES = golden_cases("ci_capsule.json")

REASONS = {
    "fetch-headers": "requests records its default request headers; Node's fetch records none",
    "node-assert": "Node's assert.strictEqual message text is Node-specific",
    "code-points": "Python cuts names and failure texts by code points, Node by UTF-16 units",
    "D6": "the envelope names the runtime as 'runtime', not 'node'",
    "D7-names": "a long test name never fails the test",
    "D7-cap": "the return event always fits; effects past the 256-event cap are dropped",
    "D13": "the secret key names of the documented list are redacted",
}

REQUESTS_HEADERS = {k.lower(): v for k, v in requests.utils.default_headers().items()}
MASK = "<volatile>"
CAPSULE_NAME = re.compile(r"capsule-[0-9a-f]{12}\.json")
SPOOL = "spool"


# --- the Python equivalent of a fixture --------------------------------------------------------

SAMPLE = """
import json
import math
import os

import pytest
import requests

from reproit_otel.ci import current_test_trace

SPEC = json.loads({spec!r})
FIXED = os.environ.get("FIXED") == "1"
REPLAYING = bool(os.environ.get("REPROIT_REPLAY"))

pytestmark = pytest.mark.reproit(suite=SPEC["suite"])


def _strict_equal(a, b):
    # JavaScript Object.is on JSON values: two object or array literals are never the same.
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return type(a) is type(b) and a == b


def _run(test):
    trace = current_test_trace()
    if trace is not None:
        for effect in test.get("effects", []):
            trace.effect(effect["kind"], **effect.get("opts", {{}}))
    lenient = FIXED and test.get("fixable") is True
    for fetch in test.get("fetches", []):
        url = fetch["replayUrl"] if REPLAYING and fetch.get("replayUrl") else fetch["url"]
        response = requests.get(url, timeout=10)
        text = response.content.decode("utf-8", "replace")
        expected = fetch.get("expectBody")
        if expected is not None and text != expected and not lenient:
            raise Exception(f"upstream said {{text}} (status {{response.status_code}})")
    if "assertStrictEqual" in test and not lenient:
        a, b = test["assertStrictEqual"]
        if not _strict_equal(a, b):
            raise AssertionError(test["assertMessage"])
    if "throwMessage" in test and not lenient:
        raise Exception(test["throwMessage"])
"""

SAMPLE_TEST = """

@pytest.mark.reproit(test=SPEC["tests"][{index}]["name"])
def test_case_{index}():
    _run(SPEC["tests"][{index}])
"""


def _js_value_text(value: Any) -> str:
    """``String(value)`` of a JSON value as JavaScript gives it."""
    return js_string(value)


def thrown_message(throws: dict[str, Any]) -> str:
    """The failure text the reference derives from a throw: ``String(message ?? value)``."""
    if "error" in throws:
        return _js_value_text(throws["error"])  # new Error(m).message is String(m)
    if "string" in throws:
        return _js_value_text(throws["string"])
    value = throws.get("value")
    if isinstance(value, dict) and value.get("message") is not None:
        return _js_value_text(value["message"])
    return _js_value_text(value)


def assert_message(a: Any, b: Any) -> str:
    """The sample's strict-equality failure text (Node's own wording for numbers)."""
    return f"Expected values to be strictly equal:\n\n{ordered_json(a)} !== {ordered_json(b)}\n"


def utf16_cut(text: str, limit: int) -> str:
    """The reference's cut: the first ``limit`` UTF-16 units (may leave a lone surrogate)."""
    units = text.encode("utf-16-be", "surrogatepass")[: limit * 2]
    return units.decode("utf-16-be", "surrogatepass")


# --- what we expect of each test ----------------------------------------------------------------


@dataclass
class TestModel:
    """One fixture test as our plugin should treat it."""

    index: int
    suite: str
    name: str
    operation: str
    effects: int
    failure_full: str | None
    fixture: dict[str, Any] = field(default_factory=dict)
    fetch_urls: list[str] = field(default_factory=list)
    reasons: set[str] = field(default_factory=set)

    __test__ = False

    @property
    def failure(self) -> str | None:
        """The failure text as recorded: cut to 2048 code points."""
        return None if self.failure_full is None else code_point_cut(self.failure_full, 2048)

    def node_operation(self) -> str:
        """The reference's operation: names cut to 120 UTF-16 units."""
        return f"test:{utf16_cut(js_trim(self.suite), 120)}#{utf16_cut(js_trim(self.name), 120)}"

    def node_spools(self, now_ms: int) -> bool:
        """Whether the reference spools this test (it fails, begin and finish do not throw)."""
        span = f"ci-{now_ms}-{self.index + 1}:{self.node_operation()}"
        return self.failure_full is not None and len(span) <= 128 and 2 + self.effects <= MAX_EVENTS


def _route_text(route: dict[str, Any]) -> str:
    body = route.get("body")
    return body if isinstance(body, str) else ordered_json(body)


def model(case: dict[str, Any], *, replaying: bool = False, fixed: bool = False) -> list[TestModel]:
    """Our expected treatment of every test of the case's fixture."""
    fixture = case["input"]["fixture"]
    routes = (fixture.get("upstream") or {}).get("routes", {})
    suite = js_string(fixture["suite"])
    tests = []
    for index, test in enumerate(fixture["tests"]):
        name = js_string(test["name"])
        operation = (
            f"test:{code_point_cut(js_trim(suite), 120)}#{code_point_cut(js_trim(name), 120)}"
        )
        lenient = fixed and test.get("fixable") is True
        failure: str | None = None
        urls = []
        for fetch in test.get("fetches", []):
            url = fetch.get("replayUrl") if replaying and fetch.get("replayUrl") else fetch["url"]
            urls.append(url)
            path = "/" + url.split("/", 3)[3] if url.count("/") >= 3 else "/"
            route = routes.get(path)
            expected = fetch.get("expectBody")
            if replaying or route is None:
                break  # served from the capsule: the replay expectation says what happens
            text = _route_text(route)
            if expected is not None and text != expected and not lenient:
                failure = f"upstream said {text} (status {route.get('status', 200)})"
                break
        if failure is None and "assertStrictEqual" in test and not lenient:
            a, b = test["assertStrictEqual"]
            if not _strict_equal(a, b):
                failure = assert_message(a, b)
        if failure is None and "throws" in test and not lenient:
            failure = thrown_message(test["throws"])
        tests.append(
            TestModel(
                index=index,
                suite=suite,
                name=name,
                operation=operation,
                effects=len(test.get("effects", [])) + len(urls),
                failure_full=failure,
                fixture=test,
                fetch_urls=urls,
            )
        )
    return tests


def _strict_equal(a: Any, b: Any) -> bool:
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return type(a) is type(b) and a == b


# --- running ------------------------------------------------------------------------------------


@dataclass
class CaseRun:
    exit_code: int
    markers: list[str]
    stdout: str


def write_project(root: Path, case: dict[str, Any]) -> None:
    fixture = case["input"]["fixture"]
    tests = []
    for test in fixture["tests"]:
        spec = {k: v for k, v in test.items() if k != "throws"}
        if "throws" in test:
            spec["throwMessage"] = thrown_message(test["throws"])
        if "assertStrictEqual" in test:
            spec["assertMessage"] = assert_message(*test["assertStrictEqual"])
        tests.append(spec)
    spec_text = json.dumps({"suite": fixture["suite"], "tests": tests})
    source = SAMPLE.format(spec=spec_text)
    for index in range(len(tests)):
        source += SAMPLE_TEST.format(index=index)
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "test_fixture.py").write_text(source, encoding="utf-8")


def run_pytest(root: Path, env: dict[str, str]) -> CaseRun:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_fixture.py"],
        cwd=root,
        env=clean_env(env),
        capture_output=True,
        timeout=180,
        check=False,
    )
    stderr = done.stderr.decode("utf-8", "surrogateescape")
    markers = [line for line in stderr.splitlines() if line.startswith("REPROIT:")]
    return CaseRun(done.returncode, markers, done.stdout.decode("utf-8", "replace"))


def base_env(case: dict[str, Any]) -> dict[str, str]:
    env = {"TZ": case["input"]["environment"]["tz"]}
    env.update(case["input"].get("env") or {})
    return env


# --- comparing ---------------------------------------------------------------------------------


def masked(capsule: dict[str, Any]) -> dict[str, Any]:
    """The capsule with the volatile fields replaced by one placeholder."""
    events = []
    for event in capsule["events"]:
        copy = dict(event)
        for name in ("traceId", "spanId", "at", "monoNs"):
            if name in copy:
                copy[name] = MASK
        events.append(copy)
    envelope = dict.fromkeys(capsule.get("envelope", {}), MASK)
    return {**capsule, "envelope": envelope, "events": events}


def check_volatile(capsule: dict[str, Any], test: TestModel, case: dict[str, Any]) -> None:
    """The masked fields follow their rules."""
    events = capsule["events"]
    trace_id = events[0]["traceId"]
    assert re.fullmatch(rf"ci-\d+-{test.index + 1}", trace_id), trace_id
    span = f"{trace_id}:{test.operation}"
    if len(span) > 128:  # D7: shortened instead of failing
        hashed = "sha256:" + hashlib.sha256(test.operation.encode()).hexdigest()[:24]
        span = f"{trace_id}:{hashed}"
        if len(span) > 128:  # D7: a trace id too long even for that leaves the hash alone
            span = hashed
    for event in events:
        assert (event["traceId"], event["spanId"]) == (trace_id, span)
        assert isinstance(event["at"], int) and isinstance(event["monoNs"], int)
    envelope = capsule["envelope"]
    assert sorted(envelope) == ["arch", "observedAtMs", "os", "replaySeed", "runtime", "tz"]
    assert envelope["observedAtMs"] == events[0]["at"]
    assert envelope["tz"] == case["input"]["environment"]["tz"]
    assert re.fullmatch(r"[0-9a-f]{16}", envelope["replaySeed"])
    assert envelope["runtime"] == "python {}.{}.{}".format(*sys.version_info[:3])


def expected_capsule(
    node: dict[str, Any] | None, test: TestModel, first_sequence: int, ours: dict[str, Any]
) -> dict[str, Any]:
    """Node's capsule for ``test`` rewritten to our documented behaviour."""
    if node is None:
        # D7: the reference spooled nothing (its begin or finish threw); build ours by rule.
        return _built_capsule(test, first_sequence, ours)
    capsule = json.loads(json.dumps(node))
    envelope = capsule["envelope"]
    if "node" in envelope:
        envelope["runtime"] = envelope.pop("node")
        test.reasons.add("D6")
    for offset, event in enumerate(capsule["events"]):
        event["sequence"] = first_sequence + offset
        exchange = event.get("exchange")
        if isinstance(exchange, dict) and exchange.get("protocol") == "http":
            request = exchange["request"]
            if with_client_headers(request) != request:
                exchange["request"] = with_client_headers(request)
                test.reasons.add("fetch-headers")
        for name in ("input", "detail", "exchange", "output"):
            if name in event:
                event[name], changed = with_d13(event[name], placeholder)
                if changed:
                    test.reasons.add("D13")
        if event["kind"] == "return" and isinstance(event.get("output"), dict):
            node_error = event["output"].get("error")
            if node_error != test.failure:
                assert test.failure is not None
                test.reasons.add(_error_reason(node_error, test))
                event["output"]["error"] = test.failure
    return capsule


def with_client_headers(request: dict[str, Any]) -> dict[str, Any]:
    """A request the reference recorded, as ours records it: its headers are the ones the
    reference recorded (redacted already) and those ``requests`` adds by default, bounded
    (section 4.3) and redacted (section 3) as every exchange is; keys in capsule-file order."""
    recorded = request.get("headers") or {}
    defaults = redact(bounded_headers(REQUESTS_HEADERS).get("headers", {}))
    headers = {name: defaults[name] for name in defaults if name not in recorded}
    headers.update(recorded)
    assert len(headers) <= 32, "more headers than section 4.3 keeps: the rule needs the cap"
    rewritten = {**request, "headers": dict(sorted(headers.items()))}
    parsed: dict[str, Any] = json.loads(canonical_json(rewritten))
    return parsed


def _error_reason(node_error: Any, test: TestModel) -> str:
    assert test.failure is not None
    if isinstance(node_error, str) and node_error == utf16_cut(test.failure_full, 2048):
        return "code-points"
    return "node-assert"


def _built_capsule(test: TestModel, first_sequence: int, ours: dict[str, Any]) -> dict[str, Any]:
    """Our capsule for a test the reference could not spool, built with our own trace."""
    test.reasons.add("D7-cap" if 2 + test.effects > MAX_EVENTS else "D7-names")
    fixture_test = test.fixture
    context = TraceContext(trace_id="ci-0-0", capture_envelope=True)
    trace = CiTrace.begin(
        context,
        test.operation,
        input={
            "suite": code_point_cut(js_trim(test.suite), 120),
            "test": code_point_cut(js_trim(test.name), 120),
        },
    )
    assert isinstance(trace, CiTrace)
    for effect in fixture_test.get("effects", []):
        trace.effect(effect["kind"], **effect.get("opts", {}))
    calls = [e for e in ours["events"] if e.get("effect") == "call"]
    for call in calls:  # recorded exchanges of the fetches, checked against the fixture's URLs
        trace.effect("call", resource=call["resource"], key=call["key"], exchange=call["exchange"])
    assert [c["exchange"]["request"]["url"] for c in calls] == test.fetch_urls[: len(calls)]
    trace.finish({"error": test.failure}, UNSET, False, False)
    events = trace.events
    for offset, event in enumerate(events):
        event["sequence"] = first_sequence + offset
    return {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": test.operation,
        "oracle": "backend-authored-invariant",
        "envelope": dict(ours["envelope"]),
        "events": events,
    }


def _marker_payload(line: str) -> tuple[str, dict[str, Any]]:
    prefix, _, payload = line.partition(" ")
    return prefix, json.loads(payload)


def _masked_capsule_marker(line: str) -> str:
    prefix, payload = _marker_payload(line)
    assert list(payload) == ["file", "operation"]
    directory, _, name = payload["file"].rpartition("/")
    assert directory == SPOOL and CAPSULE_NAME.fullmatch(name), payload["file"]
    return prefix + " " + ordered_json({"file": MASK, "operation": payload["operation"]})


def _masked_files(names: list[str]) -> list[str]:
    return sorted(MASK if CAPSULE_NAME.fullmatch(n) else n for n in names)


def _capture_expectations(
    case: dict[str, Any], tests: list[TestModel], ours: dict[str, dict[str, Any]]
) -> tuple[int, list[str], list[str], dict[str, dict[str, Any]]]:
    """Exit code, masked markers, masked files and capsules we expect of the capture run."""
    expect = case["expect"]["capture"]
    now_ms = case["input"]["environment"]["nowMs"]
    node_capsules = {}
    for entry in expect.get("capsules", []):
        capsule = json.loads(entry["text"])
        node_capsules[capsule["operation"]] = capsule
    capture_on = case["input"]["captureEnv"].get("REPROIT_CI_CAPTURE") == "1"
    exit_code = 1 if any(t.failure_full is not None for t in tests) else 0
    if exit_code != expect["exitCode"]:
        assert expect["exitCode"] == 1, "the reference fails only where a decision says so"
        for test in tests:
            test.reasons.add("D7-cap" if 2 + test.effects > MAX_EVENTS else "D7-names")
    markers: list[str] = []
    capsules: dict[str, dict[str, Any]] = {}
    files = [n for n in expect.get("files", []) if not CAPSULE_NAME.fullmatch(n)]
    sequence = 1
    for test in tests:
        first = sequence
        sequence += 2 + min(test.effects, MAX_EVENTS - 2) if capture_on else 0
        if not capture_on or test.failure_full is None:
            continue
        node_op = test.node_operation()
        if node_op != test.operation:
            test.reasons.add("code-points")
        spooled_by_node = node_op in node_capsules
        if test.node_spools(now_ms) and not spooled_by_node:
            continue  # the spool was full for the reference too
        if test.operation not in ours:
            capsules[test.operation] = {}
            continue  # reported as missing by the capsule comparison
        node = node_capsules.get(node_op) if spooled_by_node else None
        capsules[test.operation] = expected_capsule(node, test, first, ours[test.operation])
        markers.append(
            "REPROIT:CI-CAPSULE " + ordered_json({"file": MASK, "operation": test.operation})
        )
        files.append(MASK)
    return exit_code, markers, sorted(files), capsules


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_ci_capsule_case(case: dict[str, Any], tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_project(project, case)
    spool = project / SPOOL
    for name, text in (case["input"].get("prefill") or {}).items():
        spool.mkdir(parents=True, exist_ok=True)
        (spool / name).write_text(text, encoding="utf-8")

    upstream_spec = case["input"]["fixture"].get("upstream")
    upstream = None
    if upstream_spec:
        routes = {
            path: {
                "status": route.get("status", 200),
                "contentType": route.get("contentType", "application/json"),
                "body": _route_text(route),
            }
            for path, route in upstream_spec.get("routes", {}).items()
        }
        upstream = RouteUpstream(routes, port=upstream_spec["port"], node_headers=True)
    try:
        run = run_pytest(project, {**base_env(case), **case["input"]["captureEnv"]})
    finally:
        if upstream is not None:
            upstream.stop()

    tests = model(case)
    files = sorted(os.listdir(spool)) if spool.is_dir() else []
    ours = {}
    for name in files:
        if CAPSULE_NAME.fullmatch(name):
            text = (spool / name).read_text("utf-8")
            assert name == f"capsule-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
            capsule = json.loads(text)
            assert text == canonical_json(capsule), "capsule files are canonical JSON"
            ours[capsule["operation"]] = capsule

    exit_code, markers, expected_files, expected = _capture_expectations(case, tests, ours)
    assert run.exit_code == exit_code, run.stdout
    assert [_masked_capsule_marker(m) for m in run.markers] == markers
    assert _masked_files(files) == expected_files
    if "droppedCount" in case["expect"]["capture"]:
        dropped = (spool / "dropped.count").read_text("utf-8")
        assert dropped == case["expect"]["capture"]["droppedCount"]
    by_operation = {t.operation: t for t in tests}
    for operation, want in expected.items():
        got = ours[operation]
        assert canonical_json(masked(got)) == canonical_json(masked(want)), operation
        check_volatile(got, by_operation[operation], case)

    for replay in case["expect"].get("replay", []):
        _check_replay(case, project, run, tests, ours, replay)

    reasons = sorted({reason for test in tests for reason in test.reasons})
    for reason in reasons:
        print(f"{case['name']}: expectation rewritten ({reason}): {REASONS[reason]}")


def _check_replay(  # noqa: PLR0917 - one call site
    case: dict[str, Any],
    project: Path,
    capture: CaseRun,
    tests: list[TestModel],
    ours: dict[str, dict[str, Any]],
    replay: dict[str, Any],
) -> None:
    assert capture.markers, "a replay run needs the capsule the capture spooled"
    _, payload = _marker_payload(capture.markers[0])
    capsule = ours[payload["operation"]]
    env = {**base_env(case), "REPROIT_REPLAY": str(project / payload["file"])}
    if replay["fixed"]:
        env["FIXED"] = "1"
    run = run_pytest(project, env)
    replayed = {t.operation: t for t in model(case, replaying=True, fixed=replay["fixed"])}
    recorded = [e["exchange"]["request"] for e in capsule["events"] if e.get("exchange")]
    want = []
    for line in replay["markers"]:
        prefix, report = _marker_payload(line)
        if prefix == "REPROIT:DIVERGENCE":
            expected_request = report.get("expected")
            if report.get("protocol") == "http" and isinstance(expected_request, dict):
                # fetch-headers: the candidate is the recorded request, headers included.
                report["expected"] = with_d13(with_client_headers(expected_request), placeholder)[0]
                assert report["expected"] in recorded
        elif prefix == "REPROIT:CI-TEST":
            test = next(t for t in tests if t.node_operation() == report["operation"])
            report["operation"] = test.operation
            ours_now = replayed[test.operation]
            if "failure" in report and ours_now.failure is not None:
                report["failure"] = ours_now.failure
        want.append(prefix + " " + ordered_json(report))
    assert (run.exit_code, run.markers) == (replay["exitCode"], want), run.stdout
