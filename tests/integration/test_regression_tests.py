"""``reproit-otel regression``: captured failures become pytest tests of a real project.

A small orders service (Flask, psycopg2, requests; no reproit-otel code) runs under
``opentelemetry-instrument`` against the test session's PostgreSQL and a loopback upstream,
and two of its requests fail for real; their captures reach a served ingest. ``regression``
turns each occurrence into a test of that project, and plain ``pytest`` runs of the project
(the database and the upstream stopped, nothing on ``PATH`` but the virtualenv) then fail
naming the exception while the bug is there, pass once it is fixed (also under
``pytest -n 2``), and fail as stale once the code makes a call the recording does not hold. A
capsule spooled by CI capture mode (``examples/ci``) becomes a regression the same way, and so
does a failure of the Django ledger example under gunicorn (its PostgreSQL stopped before the
regression runs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import httpx
import psycopg2
import pytest

from reproit_otel.wire._jsparse import js_json_parse
from reproit_otel.wire.canonical import ordered_json
from tests.integration.pytest_runs import RouteUpstream, Run, SampleProject
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.test_examples import _free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KEY = "regression-key"
SECRET = "tok-planted-4242"
BOOT = "opentelemetry-instrument python app.py"

pytestmark = pytest.mark.skipif(
    "reproit" not in {e.name for e in entry_points(group="opentelemetry_traces_exporter")},
    reason="the `reproit` exporter entry point is not installed (pip install -e .)",
)

APP = '''"""Orders: prices from PostgreSQL, exchange rates from an upstream."""

import os

import psycopg2
import requests
from flask import Flask, jsonify, request

app = Flask("orders")
DSN = os.environ.get("ORDERS_DSN", "postgresql://postgres@127.0.0.1:9/none")
RATES_URL = os.environ.get("RATES_URL", "http://127.0.0.1:9")


@app.get("/")
def health():
    return jsonify({"ok": True})


def price_of(sku):
    with psycopg2.connect(DSN) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT cents FROM regression_prices WHERE sku = %s", (sku,))
        return cursor.fetchone()[0]


@app.post("/orders")
def create_order():
    order = request.get_json()
    cents = price_of(order["sku"])
    card = f"Bearer {order['card_token']}"
    rates = requests.get(f"{RATES_URL}/rates", headers={"authorization": card}, timeout=5)
    rate = rates.json()[order["currency"]]
    return jsonify({"total": round(cents * order["quantity"] * rate)})


@app.get("/stock/<sku>")
def stock(sku):
    with psycopg2.connect(DSN) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT cents, boxes FROM regression_prices WHERE sku = %s", (sku,))
        cents, boxes = cursor.fetchone()
    return jsonify({"per_box": cents // boxes})


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ.get("PORT", "5000")))
'''
PYPROJECT = '[project]\nname = "orders"\nversion = "0"\n'
RATE_BUG = '    rate = rates.json()[order["currency"]]\n'
RATE_FIX = '    rate = rates.json().get(order["currency"], 1.0)\n'
BOX_BUG = '    return jsonify({"per_box": cents // boxes})\n'
BOX_FIX = '    return jsonify({"per_box": cents // boxes if boxes else 0})\n'
EXTRA_QUERY = (
    '        cursor.execute("SELECT cents FROM regression_prices WHERE sku = %s", (sku,))\n'
    '        cursor.execute("SELECT code FROM regression_currencies")\n'
)
ORDER = {"sku": "mug", "quantity": 2, "currency": "CHF", "card_token": SECRET}


def _line_of(text: str, line: str) -> int:
    return text.splitlines(keepends=True).index(line) + 1


def _env(**extra: str) -> dict[str, str]:
    """The project's shell: the virtualenv first on ``PATH``, no ``REPROIT_``/``OTEL_``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPROIT_", "OTEL_"))}
    env.pop("PYTEST_ADDOPTS", None)
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        REPROIT_STRICT_INTERNAL="1",
        PYTHONDONTWRITEBYTECODE="1",
        **extra,
    )
    return env


def _capturing(service: str, ingest: ServedIngest) -> dict[str, str]:
    """What switches capture on for ``service`` under ``opentelemetry-instrument``."""
    return {
        "OTEL_SERVICE_NAME": service,
        "OTEL_TRACES_EXPORTER": "reproit",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
        "REPROIT_API_KEY": KEY,
        "REPROIT_APP_ID": service,
        "REPROIT_FLUSH_INTERVAL_MS": "100",
    }


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command(*args),
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _pytest(project: Path, *args: str) -> Run:
    return SampleProject(project).pytest(*args, env={"PATH": _env()["PATH"]}, timeout=300)


@dataclass
class Captured:
    """The project after ``regression`` ran twice, and what the ingest served."""

    project: Path
    occurrences: dict[str, str]
    served: dict[str, bytes]
    outputs: list[subprocess.CompletedProcess[str]]


def _prepare_database(dsn: str) -> None:
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(
                "CREATE TABLE IF NOT EXISTS regression_prices "
                "(sku TEXT PRIMARY KEY, cents INTEGER NOT NULL, boxes INTEGER NOT NULL)"
            )
            cursor.execute(
                "INSERT INTO regression_prices VALUES ('mug', 1250, 4), ('tea', 800, 0) "
                "ON CONFLICT (sku) DO NOTHING"
            )
    finally:
        connection.close()


def _occurrences(ingest: ServedIngest) -> dict[str, str]:
    headers = {"authorization": f"Bearer {KEY}"}
    found: dict[str, str] = {}
    for _ in range(200):
        rows = httpx.get(f"{ingest.base_url}/v1/occurrences", headers=headers, timeout=10).json()[
            "occurrences"
        ]
        found = {row["operation"]: row["id"] for row in rows}
        if len(found) == 2:
            break
        time.sleep(0.1)
    return found


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory, postgres_dsn: str) -> Iterator[Captured]:
    project = tmp_path_factory.mktemp("regression") / "orders"
    project.mkdir()
    (project / "app.py").write_text(APP, encoding="utf-8")
    (project / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    _prepare_database(postgres_dsn)
    upstream = RouteUpstream({"/rates": {"body": {"EUR": 1.0, "USD": 1.08}}})
    ingest = ServedIngest(f"sqlite:///{project.parent / 'ingest.db'}", "--api-key", KEY)
    port = _free_port()
    app = subprocess.Popen(
        BOOT,
        shell=True,
        cwd=project,
        env=_env(
            PORT=str(port),
            ORDERS_DSN=postgres_dsn,
            RATES_URL=upstream.base,
            **_capturing("orders", ingest),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        good = httpx.post(f"{base}/orders", json={**ORDER, "currency": "EUR"}, timeout=10)
        assert (good.status_code, good.json()) == (200, {"total": 2500})
        assert httpx.post(f"{base}/orders", json=ORDER, timeout=10).status_code == 500
        assert httpx.get(f"{base}/stock/tea", timeout=10).status_code == 500
        occurrences = _occurrences(ingest)
    finally:
        os.killpg(app.pid, 15)
        app.wait(10)
        upstream.stop()
    try:
        assert sorted(occurrences) == ["GET /stock/tea", "POST /orders"]
        served = {
            operation: httpx.get(
                f"{ingest.base_url}/v1/occurrences/{occurrence}/capsule",
                headers={"authorization": f"Bearer {KEY}"},
            ).content
            for operation, occurrence in occurrences.items()
        }
        pull = ("--ingest", ingest.base_url, "--api-key", KEY)
        outputs = [
            _cli(project, "regression", occurrences["POST /orders"], *pull, "--exec", BOOT),
            _cli(project, "regression", occurrences["GET /stock/tea"], *pull),
        ]
    finally:
        assert ingest.stop() == 0
    yield Captured(project, occurrences, served, outputs)


@pytest.fixture
def project(captured: Captured, tmp_path: Path) -> Path:
    copy = tmp_path / "orders"
    shutil.copytree(captured.project, copy, ignore=shutil.ignore_patterns(".reproit"))
    return copy


def _edit(project: Path, old: str, new: str) -> None:
    app = project / "app.py"
    text = app.read_text(encoding="utf-8")
    assert old in text
    app.write_text(text.replace(old, new), encoding="utf-8")


def _module(name: str, summary: str) -> str:
    return (
        f'"""Regression: {summary}.\n'
        "\n"
        "Made by `reproit-otel regression`; the recording is beside it, in\n"
        f"{name}.capsule.json. The test fails while the recorded failure comes back,\n"
        "passes once it is fixed, and says when the recording no longer matches the code\n"
        "(refresh it with `reproit-otel regression --refresh`).\n"
        '"""\n'
        "\n"
        "from pathlib import Path\n"
        "\n"
        "from reproit_otel.testing import assert_fixed\n"
        "\n"
        f'CAPSULE = Path(__file__).with_name("{name}.capsule.json")\n'
        "\n"
        "\n"
        f"def test_{name}() -> None:\n"
        "    assert_fixed(CAPSULE)\n"
    )


def test_regression_writes_the_test_the_capsule_and_the_command_once(captured: Captured) -> None:
    project = captured.project
    folder = project / "tests" / "regressions"
    first, second = captured.outputs
    orders, stock = captured.occurrences["POST /orders"], captured.occurrences["GET /stock/tea"]
    assert (first.returncode, first.stdout.splitlines()) == (
        0,
        [
            "wrote tests/regressions/test_post_orders_keyerror.py",
            "wrote tests/regressions/post_orders_keyerror.capsule.json",
            f"stored the command in {project / 'pyproject.toml'} [tool.reproit] exec",
            "run it: pytest tests/regressions/test_post_orders_keyerror.py (it fails until the "
            "failure is fixed)",
        ],
    ), first.stderr
    assert first.stderr.splitlines() == [
        f"reproit-otel regression: pulled occurrence {orders} from {_base(first.stderr)} into "
        f".reproit/capsules/{orders}.json"
    ]
    assert (second.returncode, second.stdout.splitlines()[:2]) == (
        0,
        [
            "wrote tests/regressions/test_get_stock_tea_zerodivisionerror.py",
            "wrote tests/regressions/get_stock_tea_zerodivisionerror.capsule.json",
        ],
    ), second.stderr
    assert stock in second.stderr
    assert (project / "pyproject.toml").read_text(encoding="utf-8") == (
        PYPROJECT + '\n[tool.reproit]\nexec = "opentelemetry-instrument python app.py"\n'
    )
    assert sorted(path.name for path in folder.iterdir()) == [
        "get_stock_tea_zerodivisionerror.capsule.json",
        "post_orders_keyerror.capsule.json",
        "test_get_stock_tea_zerodivisionerror.py",
        "test_post_orders_keyerror.py",
    ]
    create_order = _line_of(APP, RATE_BUG)
    per_box = _line_of(APP, BOX_BUG)
    assert (folder / "test_post_orders_keyerror.py").read_text(encoding="utf-8") == _module(
        "post_orders_keyerror",
        f"POST /orders raised KeyError (app.py:{create_order} in create_order)",
    )
    assert (folder / "test_get_stock_tea_zerodivisionerror.py").read_text(
        encoding="utf-8"
    ) == _module(
        "get_stock_tea_zerodivisionerror",
        f"GET /stock/tea raised ZeroDivisionError (app.py:{per_box} in stock)",
    )
    # The capsule as the ingest served it (the same values), one member per line.
    for operation, name in (
        ("POST /orders", "post_orders_keyerror"),
        ("GET /stock/tea", "get_stock_tea_zerodivisionerror"),
    ):
        text = (folder / f"{name}.capsule.json").read_text(encoding="utf-8")
        served = js_json_parse(captured.served[operation].decode("utf-8"))
        assert ordered_json(js_json_parse(text)) == ordered_json(served)
        # The ingest serves canonical JSON (keys sorted): that order, two spaces per level.
        assert text.splitlines()[:3] == ["{", '  "envelope": {', '    "arch": "x64",']
        assert text.endswith("\n}\n")
    written = [path.read_text(encoding="utf-8") for path in folder.iterdir()]
    assert [SECRET in text for text in written] == [False] * 4


def _base(stderr: str) -> str:
    return stderr.split(" from ", 1)[1].split(" into ", 1)[0]


def test_the_generated_files_pass_ruff_defaults(captured: Captured) -> None:
    folder = captured.project / "tests" / "regressions"
    ruff = str(BIN / "ruff")
    for command in (
        [ruff, "check", "--isolated", "."],
        [ruff, "format", "--isolated", "--check", "."],
    ):
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_tests_fail_with_the_bug_naming_the_exception_and_the_request(project: Path) -> None:
    run = _pytest(project)
    assert run.exit_code == 1, run.stdout
    assert run.stdout.splitlines()[-1].startswith("2 failed in ")
    line = _line_of(APP, RATE_BUG)
    assert (
        f"POST /orders still fails as recorded: KeyError: 'CHF'  (app.py:{line} in create_order)"
        in run.stdout
    ), run.stdout
    # The request as replayed: the recorded body, the card token a stand-in of its shape.
    # (pytest repeats the message in its short summary where CI=true asks for one.)
    shown = [text for text in run.stdout.splitlines() if "  request:  POST /orders " in text]
    sent = json.loads(shown[0].split("  request:  POST /orders ", 1)[1])
    stand_in = sent.pop("card_token")
    assert sent == {k: v for k, v in ORDER.items() if k != "card_token"}
    assert isinstance(stand_in, str) and len(stand_in) == len(SECRET) and stand_in != SECRET
    assert "  recorded: HTTP 500, KeyError: 'CHF'" in run.stdout
    assert f"  replayed: HTTP 500, KeyError: 'CHF'  (app.py:{line} in create_order)" in run.stdout
    per_box = _line_of(APP, BOX_BUG)
    assert (
        "GET /stock/tea still fails as recorded: ZeroDivisionError: integer division or modulo "
        f"by zero  (app.py:{per_box} in stock)"
    ) in run.stdout
    assert SECRET not in run.stdout


def test_the_tests_pass_once_fixed_also_in_parallel(project: Path) -> None:
    _edit(project, RATE_BUG, RATE_FIX)
    run = _pytest(project, "-n", "2")
    assert run.exit_code == 1, run.stdout  # one of the two bugs is still there
    assert "1 failed, 1 passed" in run.stdout.splitlines()[-1], run.stdout
    assert "GET /stock/tea still fails as recorded: ZeroDivisionError" in run.stdout
    _edit(project, BOX_BUG, BOX_FIX)
    run = _pytest(project, "-n", "2")
    assert run.exit_code == 0, run.stdout
    assert run.stdout.splitlines()[-1].startswith("2 passed in "), run.stdout


def test_a_query_added_before_the_failing_line_makes_the_test_stale(project: Path) -> None:
    _edit(
        project,
        '        cursor.execute("SELECT cents FROM regression_prices WHERE sku = %s", (sku,))\n',
        EXTRA_QUERY,
    )
    run = _pytest(project, "tests/regressions/test_post_orders_keyerror.py")
    assert run.exit_code == 1, run.stdout
    lines = [line[8:] for line in run.stdout.splitlines() if line.startswith("E       ")]
    app = (project / "app.py").read_text(encoding="utf-8")
    sent = '"text": "SELECT code FROM regression_currencies"'
    assert lines == [
        "reproit_otel.errors.RegressionFailed: the recording no longer matches the code "
        "(diverged): the application made a call the capsule does not hold",
        "  operation: POST /orders",
        "  capsule:   tests/regressions/post_orders_keyerror.capsule.json",
        f"  recorded:  KeyError: 'CHF'  (app.py:{_line_of(APP, RATE_BUG)} in create_order)",
        "  replayed:  reproit_otel.errors.DivergedError: reproit: pg call diverged from the "
        f"capture  (app.py:{_line_of(app, EXTRA_QUERY.splitlines(True)[1])} in price_of)",
        "divergence 1: pg SELECT code FROM regression_currencies",
        "first divergence (1 of 2 recorded exchanges served before it):",
        f"  {'the application sent':<58}   the recording expected",
        f"  {'-' * 58}   {'-' * 58}",
        f"  {'{':<58} | (nothing of this kind left in the recording)",
        f"    {sent:<56} |",
        f"  {'}':<58} |",
        "The recording is stale: this test cannot tell whether the failure is fixed. Refresh it:",
        "capture the failure again (production: the new occurrence; CI: the failing test run "
        "with REPROIT_CI_CAPTURE=1), then",
        "  reproit-otel regression NEW_CAPSULE --name post_orders_keyerror -o tests/regressions "
        "--refresh",
        "(or delete this regression if the failure can no longer happen).",
    ], run.stdout


def test_refresh_replaces_the_capsule_and_keeps_the_test(captured: Captured, project: Path) -> None:
    folder = project / "tests" / "regressions"
    module = (folder / "test_post_orders_keyerror.py").read_bytes()
    newer = project / "newer.json"
    newer.write_bytes(captured.served["POST /orders"])
    again = _cli(project, "regression", "newer.json", "--name", "post_orders_keyerror")
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == (
        "reproit-otel regression: tests/regressions/test_post_orders_keyerror.py exists; give "
        "another --name, or --refresh to replace the capsule of that regression\n"
    )
    (folder / "post_orders_keyerror.capsule.json").write_text("{}", encoding="utf-8")
    done = _cli(
        project,
        *("regression", "newer.json", "-o", "tests/regressions"),
        *("--name", "post_orders_keyerror", "--refresh"),
    )
    assert (done.returncode, done.stdout) == (
        0,
        "refreshed tests/regressions/post_orders_keyerror.capsule.json from newer.json "
        "(kept tests/regressions/test_post_orders_keyerror.py)\n",
    ), done.stderr
    assert (folder / "test_post_orders_keyerror.py").read_bytes() == module
    refreshed = (folder / "post_orders_keyerror.capsule.json").read_text(encoding="utf-8")
    assert ordered_json(js_json_parse(refreshed)) == ordered_json(
        js_json_parse(captured.served["POST /orders"].decode("utf-8"))
    )
    missing = _cli(project, "regression", "newer.json", "--name", "nothing_here", "--refresh")
    assert (missing.returncode, missing.stderr) == (
        2,
        "reproit-otel regression: there is no regression nothing_here to refresh "
        "(tests/regressions/test_nothing_here.py does not exist); give its name with --name, "
        "or leave out --refresh to make a new one\n",
    )
    # Without --name a new regression gets a name of its own; the command is the table's.
    third = _cli(project, "regression", "newer.json")
    assert third.stdout.splitlines()[0] == "wrote tests/regressions/test_post_orders_keyerror_2.py"


def test_a_ci_capsule_becomes_a_regression_too(tmp_path: Path) -> None:
    example = tmp_path / "ci"
    shutil.copytree(ROOT / "examples" / "ci", example, ignore=shutil.ignore_patterns(".reproit"))
    captured = _pytest_env(example, REPROIT_CI_CAPTURE="1", QUOTES_ORDER="reversed")
    assert captured.returncode == 1, captured.stdout
    [spooled] = sorted((example / ".reproit" / "ci-spool").glob("capsule-*.json"))
    made = _cli(example, "regression", str(spooled))
    assert made.stdout.splitlines()[:2] == [
        "wrote tests/regressions/test_cheapest_quote.py",
        "wrote tests/regressions/cheapest_quote.capsule.json",
    ], made.stderr
    run = _pytest(example, "tests/regressions")
    assert run.exit_code == 1, run.stdout
    failure = json.loads(spooled.read_text(encoding="utf-8"))["events"][-1]["output"]["error"]
    assert failure.startswith("assert ('drone', 2500) == ('postal', 450)\n")
    message = [line[2:] for line in run.stdout.splitlines() if line.startswith("E ")]
    start = message.index(
        "      reproit_otel.errors.RegressionFailed: test:test_shipping#test_cheapest_quote still "
        "fails as recorded: assert ('drone', 2500) == ('postal', 450)"
    )
    end = message.index(
        "      The test passes once the bug is fixed (every dependency served from the capsule)."
    )
    assert message[start + 1 : end] == [
        "        request:  the test test_shipping#test_cheapest_quote",
        "        capsule:  tests/regressions/cheapest_quote.capsule.json",
        f"        command:  {sys.executable} -m pytest",
        "      the recorded failure, as the replayed test failed again:",
        *[f"        {line}" for line in failure.splitlines()],
    ], run.stdout
    source = example / "shipping.py"
    buggy = "    return quotes(base_url, weight_kg)[0]\n"
    fixed = '    return min(quotes(base_url, weight_kg), key=lambda quote: quote["cents"])\n'
    source.write_text(source.read_text(encoding="utf-8").replace(buggy, fixed), encoding="utf-8")
    run = _pytest(example, "tests/regressions")
    assert (run.exit_code, run.stdout.splitlines()[-1][:9]) == (0, "1 passed "), run.stdout


def _pytest_env(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


LEDGER_BUG = "    average = total / len(overdue)\n"
LEDGER_FIX = "    average = total / len(overdue) if overdue else Decimal(0)\n"
LEDGER_BOOT = (
    "DJANGO_SETTINGS_MODULE=ledger.settings "
    "opentelemetry-instrument gunicorn --bind 127.0.0.1:$PORT ledger.wsgi"
)


def test_a_django_ledger_failure_becomes_a_regression(tmp_path: Path) -> None:
    from tests.pgserver import ThrowawayPostgres

    project = tmp_path / "ledger"
    shutil.copytree(ROOT / "examples" / "django_ledger", project)
    (project / "pyproject.toml").write_text('[project]\nname = "ledger"\n', encoding="utf-8")
    postgres = ThrowawayPostgres()
    postgres.start()
    ingest = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", "--api-key", KEY)
    try:
        settings = {"DATABASE_URL": postgres.dsn, "DJANGO_SETTINGS_MODULE": "ledger.settings"}
        migrated = subprocess.run(
            [sys.executable, "manage.py", "migrate"],
            cwd=project,
            env=_env(**settings),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert migrated.returncode == 0, migrated.stderr
        port = _free_port()
        server = subprocess.Popen(
            LEDGER_BOOT.replace("$PORT", str(port)),
            shell=True,
            cwd=project,
            env=_env(
                **settings,
                **_capturing("ledger", ingest),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    httpx.get(base, timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            customer = "5b8f3c1e-2f4a-4c2e-9d51-7a0e6b1c9f20"  # no overdue invoice
            paid = httpx.post(f"{base}/customers/{customer}/payments", json={"amount": "20.00"})
            assert paid.status_code == 500
            headers = {"authorization": f"Bearer {KEY}"}
            rows: list[dict[str, str]] = []
            for _ in range(200):
                rows = httpx.get(f"{ingest.base_url}/v1/occurrences", headers=headers).json()[
                    "occurrences"
                ]
                if rows:
                    break
                time.sleep(0.1)
        finally:
            os.killpg(server.pid, 15)
            server.wait(10)
        [row] = rows
        made = _cli(
            project,
            *("regression", row["id"], "--ingest", ingest.base_url, "--api-key", KEY),
            *("--exec", LEDGER_BOOT),
        )
        assert made.returncode == 0, made.stderr
    finally:
        assert ingest.stop() == 0
        postgres.stop()  # the regression runs below have no database at all

    [module] = sorted((project / "tests" / "regressions").glob("test_*.py"))
    run = _pytest(project)
    assert run.exit_code == 1, run.stdout
    line = _line_of((project / "payments" / "views.py").read_text(encoding="utf-8"), LEDGER_BUG)
    assert (
        f"POST /customers/{customer}/payments still fails as recorded: "
        "decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]  "
        f"(payments/views.py:{line} in pay)"
    ) in run.stdout, run.stdout
    views = project / "payments" / "views.py"
    views.write_text(
        views.read_text(encoding="utf-8").replace(LEDGER_BUG, LEDGER_FIX), encoding="utf-8"
    )
    run = _pytest(project, str(module.relative_to(project)))
    assert (run.exit_code, run.stdout.splitlines()[-1][:9]) == (0, "1 passed "), run.stdout
