"""The pytest plugin in real pytest runs: capture, spool, markers, replay and ``check``.

Each test writes a sample project, runs ``python -m pytest`` in a subprocess (never with
``-s``: the markers must reach the real standard error anyway) and asserts on the spool, the
marker lines and the verdicts of ``reproit-otel check``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from reproit_otel.wire.canonical import canonical_json, ordered_json
from tests.integration.pytest_runs import RouteUpstream, SampleProject

CAPTURE = {"REPROIT_CI_CAPTURE": "1"}
# What requests sends on its own; the recorder keeps the prepared request's headers.
REQUESTS_DEFAULT_HEADERS = {
    name.lower(): value for name, value in requests.utils.default_headers().items()
}
SPOOL = ".reproit/ci-spool"

FLAKY_TEST = """
import os

import requests

UPSTREAM = os.environ["UPSTREAM"]


def fetch_rate():
    path = "/tax-rate-v2" if os.environ.get("DIVERGE") == "1" else "/tax-rate"
    return requests.get(UPSTREAM + path, timeout=5).json()["rate"]


def test_cart_total():
    rate = fetch_rate()
    if os.environ.get("FIXED") == "1":
        rate = min(rate, 0.2)  # the fix: the promotional rate is capped
    total = 100 + round(100 * rate)
    if os.environ.get("OTHER_FAILURE") == "1":
        raise RuntimeError("the cart service is unavailable")
    assert total == 120, f"total {total} for rate {rate}"


def test_unrelated():
    assert True
"""


@pytest.fixture
def upstream() -> Iterator[RouteUpstream]:
    server = RouteUpstream({"/tax-rate": {"status": 200, "body": {"rate": 0.2}}})
    try:
        yield server
    finally:
        server.stop()


def _capsule_files(project: SampleProject, directory: str = SPOOL) -> list[Path]:
    return [project.root / directory / n for n in project.spool(directory) if n.endswith(".json")]


def _volatile_free(capsule: dict[str, Any]) -> dict[str, Any]:
    """The capsule with clock, host and id fields taken out (they change every run)."""
    events = []
    for event in capsule["events"]:
        stripped = {
            k: v for k, v in event.items() if k not in ("at", "monoNs", "traceId", "spanId")
        }
        events.append(stripped)
    return {**capsule, "envelope": sorted(capsule["envelope"]), "events": events}


def test_flaky_failure_is_captured_and_judged_by_check(
    tmp_path: Path, upstream: RouteUpstream
) -> None:
    project = SampleProject(tmp_path, {"test_cart.py": FLAKY_TEST}).setup()
    env = {**CAPTURE, "UPSTREAM": upstream.base}

    # A plain run passes: the upstream answers 0.2.
    plain = project.pytest(env={"UPSTREAM": upstream.base})
    assert (plain.exit_code, plain.markers, project.spool()) == (0, [], [])

    # The upstream changes its answer (the flake); the capture run fails and spools.
    upstream.routes["/tax-rate"] = {"status": 200, "body": {"rate": 0.215}}
    run = project.pytest(env=env)
    assert run.exit_code == 1
    (capsule_path,) = _capsule_files(project)
    text = capsule_path.read_text("utf-8")
    capsule = json.loads(text)
    assert text == canonical_json(capsule)
    assert capsule_path.name == f"capsule-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    operation = "test:test_cart#test_cart_total"
    assert run.markers == [
        "REPROIT:CI-CAPSULE "
        + ordered_json({"file": f"{SPOOL}/{capsule_path.name}", "operation": operation})
    ]
    failure = "total 122 for rate 0.215\nassert 122 == 120"
    common = {"actionIndex": 0, "operation": operation}
    assert _volatile_free(capsule) == {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": operation,
        "oracle": "backend-authored-invariant",
        "envelope": ["arch", "observedAtMs", "os", "replaySeed", "runtime", "tz"],
        "events": [
            {
                **common,
                "sequence": 1,
                "kind": "start",
                "input": {"suite": "test_cart", "test": "test_cart_total"},
            },
            {
                **common,
                "sequence": 2,
                "kind": "effect",
                "effect": "call",
                "resource": f"127.0.0.1:{upstream.port}",
                "key": "GET /tax-rate",
                "exchange": {
                    "protocol": "http",
                    "request": {
                        "method": "GET",
                        "url": f"{upstream.base}/tax-rate",
                        "headers": REQUESTS_DEFAULT_HEADERS,
                    },
                    "response": {
                        "status": 200,
                        "headers": {"content-length": "14", "content-type": "application/json"},
                        "body": {"rate": 0.215},
                    },
                },
            },
            {
                **common,
                "sequence": 3,
                "kind": "return",
                "output": {"error": failure},
                "success": False,
                "effectsComplete": False,
            },
        ],
    }
    start = capsule["events"][0]
    assert re.fullmatch(r"ci-\d{13}-1", start["traceId"])  # the first test of the process
    assert start["spanId"] == f"{start['traceId']}:{operation}"
    assert capsule["envelope"]["observedAtMs"] == start["at"]
    assert re.fullmatch(r"[0-9a-f]{16}", capsule["envelope"]["replaySeed"])
    assert capsule["envelope"]["runtime"].startswith("python 3.")

    # On a laptop, with the upstream gone: the failure reproduces from the capsule alone.
    upstream.stop()
    calls_before = list(upstream.calls)
    reproduced = project.check(capsule_path, env={"UPSTREAM": upstream.base}, json_out=True)
    assert reproduced.exit_code == 1, reproduced.stderr
    result = json.loads(reproduced.stdout)
    assert (result["verdict"], result["recordedFailure"], result["observedResult"]["failure"]) == (
        "reproduced",
        failure,
        failure,
    )
    assert result["capture"]["mode"] == "test-hermetic"
    assert upstream.calls == calls_before

    fixed = project.check(
        capsule_path, env={"UPSTREAM": upstream.base, "FIXED": "1"}, json_out=True
    )
    assert (fixed.exit_code, json.loads(fixed.stdout)["verdict"]) == (0, "fixed")

    diverged = project.check(
        capsule_path, env={"UPSTREAM": upstream.base, "DIVERGE": "1"}, json_out=True
    )
    result = json.loads(diverged.stdout)
    assert (diverged.exit_code, result["verdict"]) == (3, "diverged")
    assert result["divergences"] == [
        {
            "protocol": "http",
            "got": {"method": "GET", "url": f"{upstream.base}/tax-rate-v2"},
            "expected": capsule["events"][1]["exchange"]["request"],
            "consumed": 0,
            "total": 1,
        }
    ]

    other = project.check(
        capsule_path, env={"UPSTREAM": upstream.base, "OTHER_FAILURE": "1"}, json_out=True
    )
    result = json.loads(other.stdout)
    assert (other.exit_code, result["verdict"]) == (3, "inconclusive")
    assert result["observedResult"]["failure"] == "the cart service is unavailable"


def test_replay_runs_only_the_target_and_reports_it(
    tmp_path: Path, upstream: RouteUpstream
) -> None:
    project = SampleProject(tmp_path, {"test_cart.py": FLAKY_TEST}).setup()
    upstream.routes["/tax-rate"] = {"status": 200, "body": {"rate": 0.3}}
    project.pytest(env={**CAPTURE, "UPSTREAM": upstream.base})
    (capsule_path,) = _capsule_files(project)
    upstream.stop()

    run = project.pytest(
        "-rs", env={"REPROIT_REPLAY": str(capsule_path), "UPSTREAM": upstream.base}
    )
    operation = "test:test_cart#test_cart_total"
    assert run.exit_code == 1
    assert run.markers == [
        "REPROIT:CI-TEST "
        + ordered_json(
            {
                "operation": operation,
                "status": "failed",
                "failure": "total 130 for rate 0.3\nassert 130 == 120",
            }
        )
    ]
    assert f"SKIPPED [1] test_cart.py: reproit replay targets {operation}" in run.stdout
    assert "1 failed, 1 skipped" in run.stdout
    assert project.spool() == [capsule_path.name]  # replay never spools

    passed = project.pytest(
        env={"REPROIT_REPLAY": str(capsule_path), "UPSTREAM": upstream.base, "FIXED": "1"}
    )
    assert passed.exit_code == 0
    assert passed.markers == [
        "REPROIT:CI-TEST " + ordered_json({"operation": operation, "status": "passed"})
    ]


KINDS_TEST = """
import unittest

import pytest


class TestLedger(unittest.TestCase):
    def test_balance(self):
        self.assertEqual(3, 4)

    def test_ok(self):
        self.assertTrue(True)


class TestGroup:
    @pytest.mark.parametrize("n", [1, 2, 3])
    def test_even(self, n):
        assert n % 2 == 1, f"{n} is even"


@pytest.fixture
def broken():
    raise LookupError("fixture could not start")


def test_fixture_error(broken):
    pass


@pytest.mark.skip(reason="not today")
def test_skipped():
    assert False


@pytest.mark.xfail(reason="known")
def test_xfailed():
    assert False


@pytest.mark.xfail(reason="fixed already", strict=True)
def test_xpassed_strict():
    pass


def test_skips_itself():
    pytest.skip("nothing to do")


@pytest.mark.reproit(suite="billing")
def test_named_suite():
    raise ValueError("named")


@pytest.mark.reproit(test="  renamed test ")
def test_renamed():
    raise ValueError("renamed")
"""

ASYNC_TEST = """
import anyio
import pytest


@pytest.mark.anyio
async def test_async_failure():
    await anyio.sleep(0)
    raise TimeoutError("async deadline")


@pytest.fixture
def anyio_backend():
    return "asyncio"
"""


def test_every_kind_of_failing_item_is_captured(tmp_path: Path) -> None:
    files = {"tests/test_kinds.py": KINDS_TEST}
    has_anyio = importlib.util.find_spec("anyio") is not None
    if has_anyio:
        files["tests/test_async.py"] = ASYNC_TEST
    project = SampleProject(tmp_path, files).setup()
    run = project.pytest(env=CAPTURE)
    assert run.exit_code == 1
    failures = {
        operation: capsule["events"][-1]["output"]["error"]
        for operation, capsule in project.capsules().items()
    }
    expected = {
        "test:tests.test_kinds#TestLedger::test_balance": "3 != 4",
        "test:tests.test_kinds#TestGroup::test_even[2]": "2 is even\nassert (2 % 2) == 1",
        "test:tests.test_kinds#test_fixture_error": "fixture could not start",
        "test:tests.test_kinds#test_xpassed_strict": "[XPASS(strict)] fixed already",
        "test:billing#test_named_suite": "named",
        "test:tests.test_kinds#renamed test": "renamed",
    }
    if has_anyio:
        expected["test:tests.test_async#test_async_failure"] = "async deadline"
    assert failures == expected
    operations = [json.loads(m.split(" ", 1)[1])["operation"] for m in run.markers]
    assert sorted(operations) == sorted(expected)
    for capsule in project.capsules().values():
        returned = capsule["events"][-1]
        assert (returned["kind"], returned["success"], "status" in returned) == (
            "return",
            False,
            False,
        )


LONG_TEST = """
import pytest
import requests

from reproit_otel.ci import current_test_trace

LONG = "a very long scenario name " * 12


@pytest.mark.reproit(suite="suite " * 40, test=LONG)
def test_long_passes():
    pass


@pytest.mark.reproit(suite="suite " * 40, test=LONG + "failing")
def test_long_fails():
    raise AssertionError("long name failure")


@pytest.mark.parametrize("payload", ["x" * 400], ids=["x" * 400])
def test_long_param(payload):
    assert not payload


def test_many_effects():
    trace = current_test_trace()
    for index in range(300):
        trace.effect("emit", event=f"tick {index}")
    raise RuntimeError("late failure")
"""


def test_long_names_and_the_event_cap_never_fail_a_test_or_lose_its_capsule(
    tmp_path: Path,
) -> None:
    project = SampleProject(tmp_path, {"test_long.py": LONG_TEST}).setup()
    run = project.pytest("-rA", env=CAPTURE)
    assert run.exit_code == 1
    assert "PASSED test_long.py::test_long_passes" in run.stdout
    capsules = project.capsules()
    suite = ("suite " * 40).strip()[:120]
    long_name = ("a very long scenario name " * 12)[:120]
    param_name = ("test_long_param[" + "x" * 400)[:120]
    assert sorted(capsules) == sorted(
        [
            f"test:{suite}#{long_name}",
            f"test:test_long#{param_name}",
            "test:test_long#test_many_effects",
        ]
    )
    capsule = capsules[f"test:{suite}#{long_name}"]
    start = capsule["events"][0]
    digest = hashlib.sha256(capsule["operation"].encode()).hexdigest()[:24]
    assert start["spanId"] == f"{start['traceId']}:sha256:{digest}"
    assert start["input"] == {"suite": suite, "test": long_name}
    assert capsule["events"][-1]["output"] == {"error": "long name failure"}

    capped = capsules["test:test_long#test_many_effects"]["events"]
    assert len(capped) == 256
    assert [e["kind"] for e in capped] == ["start"] + ["effect"] * 254 + ["return"]
    assert [e["event"] for e in capped[1:-1]] == [f"tick {i}" for i in range(254)]
    assert capped[-1]["output"] == {"error": "late failure"}
    assert (
        "reproit: 3 capsule(s) spooled to .reproit/ci-spool, 0 dropped (spool full), "
        "0 failed, 46 effect(s) past the event cap dropped"
    ) in run.stdout


FAILING = """
def test_one():
    raise ValueError("one")


def test_two():
    raise ValueError("two")
"""


def test_a_full_spool_drops_capsules_and_counts_them(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_fail.py": FAILING}).setup()
    spool = project.root / "spool"
    spool.mkdir()
    (spool / "existing.json").write_text("x" * 3000)
    (spool / "notes.txt").write_text("y" * 5000)  # only *.json counts toward the cap
    env = {**CAPTURE, "REPROIT_CI_SPOOL": "spool", "REPROIT_CI_SPOOL_MAX": "4096"}
    run = project.pytest(env=env)
    assert run.exit_code == 1
    names = project.spool("spool")
    capsule_names = [n for n in names if n.startswith("capsule-")]
    # The first capsule fits next to the 3000 bytes; the second does not.
    assert len(capsule_names) == 1
    assert sorted(set(names) - set(capsule_names)) == [
        "dropped.count",
        "existing.json",
        "notes.txt",
    ]
    assert (spool / "dropped.count").read_bytes() == b"1\n"
    assert run.markers == [
        "REPROIT:CI-CAPSULE "
        + ordered_json(
            {"file": f"spool/{capsule_names[0]}", "operation": "test:test_fail#test_one"}
        )
    ]
    again = project.pytest(env=env)
    assert (again.exit_code, again.markers) == (1, [])
    assert (spool / "dropped.count").read_bytes() == b"3\n"


def test_options_and_ini_keys_turn_capture_on(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_fail.py": FAILING}).setup()
    run = project.pytest("--reproit-capture", "--reproit-spool", "out/caps")
    assert (run.exit_code, len(run.markers)) == (1, 2)
    assert len(project.spool("out/caps")) == 2

    ini_project = SampleProject(tmp_path / "ini", {"test_fail.py": FAILING}).setup(
        "reproit_capture = true\nreproit_spool = from-ini\nreproit_spool_max = 4096\n"
    )
    (ini_project.root / "from-ini").mkdir()
    (ini_project.root / "from-ini" / "existing.json").write_text("x" * 3000)
    run = ini_project.pytest()
    assert (run.exit_code, len(run.markers)) == (1, 1)  # the second one exceeds 4096 bytes
    assert (ini_project.root / "from-ini" / "dropped.count").read_bytes() == b"1\n"

    # An environment value other than "1" does not turn the ini key off; the spool is full.
    again = ini_project.pytest(env={"REPROIT_CI_CAPTURE": "true"})
    assert (again.exit_code, again.markers) == (1, [])
    assert (ini_project.root / "from-ini" / "dropped.count").read_bytes() == b"3\n"


def test_capture_flag_must_be_exactly_one(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_fail.py": FAILING}).setup()
    run = project.pytest(env={"REPROIT_CI_CAPTURE": "true"})
    assert (run.exit_code, run.markers, project.spool()) == (1, [], [])


def test_build_is_the_commit_when_it_is_a_token(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_fail.py": FAILING}).setup()
    project.pytest(env={**CAPTURE, "REPROIT_COMMIT": "not a token", "GITHUB_SHA": "abc123"})
    for capsule in project.capsules().values():
        assert {e["build"] for e in capsule["events"]} == {"abc123"}


def _replay_failed(capsule: Path, error: str) -> str:
    return "REPROIT:REPLAY-FAILED " + ordered_json({"capsule": str(capsule), "error": error})


def test_a_production_capsule_stops_the_run(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_fail.py": FAILING}).setup()
    capsule = {
        "format": "reproit-backend-capture",
        "version": 1,
        "operation": "GET /orders",
        "oracle": "backend-server-error",
        "events": [
            {
                "traceId": "t",
                "spanId": "t:GET /orders",
                "actionIndex": 0,
                "operation": "GET /orders",
                "sequence": 1,
                "kind": "start",
                "input": None,
            }
        ],
    }
    path = project.write("prod.json", json.dumps(capsule))
    run = project.pytest(env={"REPROIT_REPLAY": str(path)})
    error = (
        f"CapsuleError: {path} does not carry a test trigger identity: its operation is "
        "'GET /orders', not 'test:<suite>#<test>'. Replay a production capsule with "
        '`reproit-otel check CAPSULE --exec "<command that boots the app>"` instead.'
    )
    assert (run.exit_code, run.stdout, run.markers) == (78, "", [_replay_failed(path, error)])


def _captured(project: SampleProject, upstream: RouteUpstream) -> Path:
    """The capsule of ``test_cart_total`` failing on the flaky rate."""
    upstream.routes["/tax-rate"] = {"status": 200, "body": {"rate": 0.3}}
    project.pytest(env={**CAPTURE, "UPSTREAM": upstream.base})
    (path,) = _capsule_files(project)
    return path


def _nul_tz(capsule: dict[str, Any]) -> str:
    capsule["envelope"]["tz"] = "UTC\x00; DROP TABLE carts"
    return "capsule envelope: tz must be absent or 1 to 255 printable ASCII characters"


def _http_setup(capsule: dict[str, Any]) -> str:
    [call] = [e for e in capsule["events"] if e["kind"] == "effect"]
    call["exchange"]["setup"] = [
        {"protocol": "pg", "request": {"text": "SHOW TimeZone"}, "response": {"rows": []}}
    ]
    index = capsule["events"].index(call)
    return f"events[{index}].exchange.setup only a pg exchange carries connection setup answers"


@pytest.mark.parametrize("spoil", [_nul_tz, _http_setup], ids=["envelope", "connection-setup"])
def test_a_ci_capsule_replay_cannot_serve_stops_the_run_before_any_test(
    tmp_path: Path, upstream: RouteUpstream, spoil: Any
) -> None:
    project = SampleProject(tmp_path, {"test_cart.py": FLAKY_TEST}).setup()
    capsule = json.loads(_captured(project, upstream).read_text("utf-8"))
    problem = spoil(capsule)
    path = project.write("spoiled.json", json.dumps(capsule))
    calls = list(upstream.calls)

    run = project.pytest(env={"REPROIT_REPLAY": str(path), "UPSTREAM": upstream.base})
    assert (run.exit_code, run.stdout, len(run.markers)) == (78, "", 1)
    prefix = _replay_failed(path, f"CapsuleError: {path}: {problem}")[:-2]
    assert run.markers[0].startswith(prefix)
    assert run.stderr.splitlines()[-1] == (
        f"reproit-otel: the replay of REPROIT_REPLAY={path} could not be armed "
        f"({json.loads(run.markers[0].split(' ', 1)[1])['error']}); the test run stops instead "
        "of running without replay, where it would reach live systems. Fix the capsule or the "
        "setting and start it again."
    )
    assert upstream.calls == calls  # no test ran: nothing reached the upstream


def test_an_unusable_setting_next_to_a_ci_replay_stops_the_run_and_check_names_it(
    tmp_path: Path, upstream: RouteUpstream
) -> None:
    project = SampleProject(tmp_path, {"test_cart.py": FLAKY_TEST}).setup()
    path = _captured(project, upstream)
    calls = list(upstream.calls)

    environ = {"REPROIT_REPLAY": str(path), "UPSTREAM": upstream.base}
    run = project.pytest(env={**environ, "REPROIT_FLUSH_INTERVAL_MS": "soon"})
    assert (run.exit_code, run.stdout, len(run.markers)) == (78, "", 1)
    error = json.loads(run.markers[0].split(" ", 1)[1])["error"]
    assert error.startswith("ConfigurationError: REPROIT_FLUSH_INTERVAL_MS: ")
    assert run.markers == [_replay_failed(path, error)]

    # check reads the line: exit 2, the cause named, no verdict.
    checked = project.check(
        path, env={"UPSTREAM": upstream.base}, prefix=("env", "REPROIT_FLUSH_INTERVAL_MS=soon")
    )
    assert (checked.exit_code, checked.stdout) == (2, "")
    assert checked.stderr.startswith(
        "reproit-otel check: the test command could not arm the replay and stopped before "
        f"running the test: {error}"
    )
    assert upstream.calls == calls


STOCK_TEST = """
import os

import psycopg2


def test_widget_in_stock():
    connection = psycopg2.connect(os.environ["PG_DSN"])
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT qty FROM ci_stock WHERE sku = %s", ("widget",))
        (qty,) = cursor.fetchone()
    finally:
        connection.close()
    if os.environ.get("FIXED") == "1":
        qty = max(qty, 1)  # the fix: an empty shelf shows as one reserved item
    assert qty > 0, f"widget out of stock ({qty})"
"""


@pytest.mark.postgres
def test_a_database_read_is_captured_and_replayed_with_the_database_gone(
    tmp_path: Path, postgres_dsn: str
) -> None:
    import psycopg2

    setup = psycopg2.connect(postgres_dsn)
    setup.autocommit = True
    with setup.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS ci_stock")
        cursor.execute("CREATE TABLE ci_stock (sku text PRIMARY KEY, qty integer)")
        cursor.execute("INSERT INTO ci_stock VALUES ('widget', 0)")
    setup.close()

    project = SampleProject(tmp_path, {"test_stock.py": STOCK_TEST}).setup()
    run = project.pytest(env={**CAPTURE, "PG_DSN": postgres_dsn})
    assert (run.exit_code, len(run.markers)) == (1, 1)
    capsule = project.capsules()["test:test_stock#test_widget_in_stock"]
    (read,) = [e for e in capsule["events"] if e["kind"] == "effect"]
    assert (read["effect"], read["resource"], read["exchange"]["request"]) == (
        "read",
        "pg",
        {"text": "SELECT qty FROM ci_stock WHERE sku = %s", "values": ["widget"]},
    )
    assert read["exchange"]["response"]["rows"] == [{"qty": 0}]
    failure = "widget out of stock (0)\nassert 0 > 0"
    assert capsule["events"][-1]["output"] == {"error": failure}

    # No database on the laptop: the DSN points at a port nothing listens on.
    gone = "host=127.0.0.1 port=9 dbname=none user=none connect_timeout=1"
    (path,) = _capsule_files(project)
    reproduced = project.check(path, env={"PG_DSN": gone}, json_out=True)
    assert (reproduced.exit_code, json.loads(reproduced.stdout)["verdict"]) == (1, "reproduced")
    fixed = project.check(path, env={"PG_DSN": gone, "FIXED": "1"}, json_out=True)
    assert (fixed.exit_code, json.loads(fixed.stdout)["verdict"]) == (0, "fixed")


def test_reproit_disabled_turns_the_plugin_off(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_fail.py": FAILING}).setup()
    run = project.pytest(env={**CAPTURE, "REPROIT_DISABLED": "1"})
    assert (run.exit_code, run.markers, project.spool()) == (1, [], [])


def test_a_replay_whose_test_is_gone_says_so(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_fail.py": FAILING}).setup()
    project.pytest(env=CAPTURE)
    capsule_path = _capsule_files(project)[0]
    capsule = json.loads(capsule_path.read_text("utf-8"))
    capsule["operation"] = "test:test_fail#test_renamed"
    moved = project.write("moved.json", canonical_json(capsule))
    run = project.pytest(env={"REPROIT_REPLAY": str(moved)})
    assert (run.exit_code, run.markers) == (0, [])
    assert (
        "reproit: no collected test has the operation test:test_fail#test_renamed; was it "
        "renamed, moved or deselected? Run the same test command as in CI."
    ) in run.stdout
    assert "2 skipped" in run.stdout


HTTPX_TEST = """
import asyncio
import os

import httpx

UPSTREAM = os.environ["UPSTREAM"]


async def both_rates():
    async with httpx.AsyncClient() as client:
        answers = await asyncio.gather(
            client.get(UPSTREAM + "/tax-rate"), client.get(UPSTREAM + "/fee")
        )
        return [answer.json()["rate"] for answer in answers]


def test_rates_agree():
    with httpx.Client() as client:
        base = client.get(UPSTREAM + "/tax-rate").json()["rate"]
    tax, fee = asyncio.run(both_rates())
    if os.environ.get("FIXED") == "1":
        fee = tax
    assert base == tax == fee, f"rates {base} {tax} {fee}"
"""


def test_httpx_calls_sync_and_async_are_captured_and_replayed(tmp_path: Path) -> None:
    upstream = RouteUpstream(
        {
            "/tax-rate": {"status": 200, "body": {"rate": 0.2}},
            "/fee": {"status": 200, "body": {"rate": 0.3}},
        }
    )
    try:
        project = SampleProject(tmp_path, {"test_rates.py": HTTPX_TEST}).setup()
        run = project.pytest(env={**CAPTURE, "UPSTREAM": upstream.base})
        assert (run.exit_code, len(run.markers)) == (1, 1)
    finally:
        upstream.stop()
    capsule = project.capsules()["test:test_rates#test_rates_agree"]
    calls = [e for e in capsule["events"] if e["kind"] == "effect"]
    assert sorted((e["key"], e["exchange"]["response"]["body"]["rate"]) for e in calls) == [
        ("GET /fee", 0.3),
        ("GET /tax-rate", 0.2),
        ("GET /tax-rate", 0.2),
    ]
    assert {e["exchange"]["protocol"] for e in calls} == {"http"}
    (path,) = _capsule_files(project)
    reproduced = project.check(path, env={"UPSTREAM": upstream.base}, json_out=True)
    assert (reproduced.exit_code, json.loads(reproduced.stdout)["verdict"]) == (1, "reproduced")
    fixed = project.check(path, env={"UPSTREAM": upstream.base, "FIXED": "1"}, json_out=True)
    assert (fixed.exit_code, json.loads(fixed.stdout)["verdict"]) == (0, "fixed")
