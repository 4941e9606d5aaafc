"""Every command the documentation shows is run by a named test, or says why not.

``tests/docs_commands.py`` reads the commands out of README.md, docs/*.md, the example READMEs
and the Collector READMEs (code blocks and inline commands). :data:`RUN_BY` maps each one, as
the documents spell it, to where it runs:

* ``tests/<file>.py::<test>``: that test runs this command line, or the same subcommand with
  the same flags (ports, folders and ids substituted; the note in parentheses says how);
* ``demo stage N``: stage N of ``reproit-otel demo`` runs it;
* ``.ci/run: <why>``: the CI script runs it (it is checked that the script names the program);
* ``setup: <why>``: an installation step (``pip``, ``opentelemetry-bootstrap``), which no test
  runs because it installs from a package registry; the project's own setup installs the same;
* ``external: <why>``: a program that is not part of the project and not in the test
  environment (the GitHub CLI, the Collector), with what the tests check instead.

A command added to a document without an entry here, or an entry whose command no document
shows any more, fails this test; so does an entry naming a test that does not exist. The
``reproit-otel`` lines of code blocks are also parsed with the real argument parser, so a
documented flag that does not exist fails too.
"""

from __future__ import annotations

import ast
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from reproit_otel.cli import build_parser
from reproit_otel.demo.run import STAGES
from tests.docs_commands import ROOT, Command, all_commands, program, unclassified_lines

WALK = "tests/integration/test_docs_walkthrough.py"
FIVE = f"{WALK}::test_the_five_minute_guide_captures_pulls_and_replays"
LAUNCH = f"{WALK}::test_each_launch_block_uploads_the_failure"
DUMP = f"{WALK}::test_the_debug_dump_shows_the_failing_operation"
TOOLS = f"{WALK}::test_fixture_modes_and_doctor_as_boundary_md_shows"
CI = f"{WALK}::test_the_ci_guide_and_the_ci_example_commands"
SERVE = f"{WALK}::test_every_documented_serve_command_starts_and_enforces_its_keys"
CONFIG = f"{WALK}::test_the_configuration_reference_regenerates_to_itself"
SHOP = "tests/integration/test_example_walkthrough.py::test_the_shop_readme_walkthrough"
DEMO = "tests/integration/test_demo.py::test_the_demo_reproduces_the_failure_then_sees_it_fixed"
BENCH = "tests/integration/test_benchmarks_smoke.py"
COLLECTOR = (
    "tests/integration/test_collector_config.py::"
    "test_what_the_reproit_exporter_sends_becomes_an_occurrence"
)
INSTALL_LINE = "tests/integration/test_install_line.py::"
SHOP_NOTE = " (shop, shop_fastapi and fastapi_async; ports free, the test PostgreSQL's DSN)"
BENCH_NOTE = " (the same module with --quick --out DIR: its smoke run, no timing asserted)"
NO_COLLECTOR = (
    "external: no otelcol-contrib binary in the test environment; "
    f"{COLLECTOR} and the other tests of that file parse the YAML it loads and send the "
    "ingest what its otlphttp/reproit exporter sends"
)
PIP = (
    "setup: installs from a package registry, so no test runs it; scripts/bootstrap installs "
    "the project with the dev and otel extras, which hold every package named here"
)

DJANGO = "tests/integration/test_django_stack.py"
DJANGO_CAPTURE = f"{DJANGO}::test_the_failure_is_captured_whole_with_its_input"
STACKS = "tests/integration/test_sqlalchemy_stacks.py"
DOCTOR_STACKS = "tests/integration/test_doctor_stacks.py"
MYSITE = " (the test project ledger_site for mysite, a free port)"

REGRESSION = "tests/integration/test_regression_tests.py::"
REGRESSION_WRITES = REGRESSION + "test_regression_writes_the_test_the_capsule_and_the_command_once"
REGRESSION_CI = REGRESSION + "test_a_ci_capsule_becomes_a_regression_too"

EXAMPLE_DJANGO = "tests/integration/test_example_django.py::"
EXAMPLE_DJANGO += "test_the_django_example_reproduces_then_is_fixed"

RUN_BY: dict[str, str] = {
    # docs/regression.md
    "reproit-otel regression": REGRESSION_WRITES,
    'reproit-otel regression occ_1f0c4e9a2b7d --exec "opentelemetry-instrument python app.py"': (
        REGRESSION_WRITES + " (a served ingest's occurrence, with --ingest and --api-key)"
    ),
    "reproit-otel regression CAPSULE [--exec COMMAND] [-o DIR] [--name NAME] [--refresh]": (
        REGRESSION + "test_refresh_replaces_the_capsule_and_keeps_the_test (each flag)"
    ),
    "reproit-otel regression .reproit/ci-spool/capsule-1f0c4e9a2b7d.json": REGRESSION_CI
    + " (the capsule the example's failing test spooled)",
    "python -m pytest": REGRESSION_CI + " (the default test-exec, with the running interpreter)",
    "pytest -n auto": REGRESSION
    + "test_the_tests_pass_once_fixed_also_in_parallel (-n 2: two regressions)",
    # examples/django_ledger/README.md
    "pip install 'reproit-otel[otel,requests,psycopg,replay,serve]' django gunicorn": PIP,
    "reproit-otel serve --api-key dev-key --db sqlite:///ledger-ingest.db": EXAMPLE_DJANGO
    + " (with --port 0)",
    "export DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres": EXAMPLE_DJANGO
    + " (the throwaway PostgreSQL's DSN)",
    "export DJANGO_SETTINGS_MODULE=ledger.settings PYTHONPATH=examples/django_ledger": (
        EXAMPLE_DJANGO
    ),
    "python examples/django_ledger/manage.py migrate": EXAMPLE_DJANGO,
    "export OTEL_SERVICE_NAME=ledger OTEL_TRACES_EXPORTER=reproit": EXAMPLE_DJANGO,
    "export REPROIT_API_KEY=dev-key REPROIT_APP_ID=ledger": EXAMPLE_DJANGO,
    "opentelemetry-instrument gunicorn --bind 127.0.0.1:8000 ledger.wsgi": EXAMPLE_DJANGO
    + " (a free port)",
    "curl -s -X POST localhost:8000/customers/5b8f3c1e-2f4a-4c2e-9d51-7a0e6b1c9f20/payments -H "
    "'content-type: application/json' -d '{\"amount\": \"20.00\"}'": EXAMPLE_DJANGO
    + " (gunicorn's free port)",
    "OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none reproit-otel "
    "check capsule.json --exec 'opentelemetry-instrument gunicorn --bind 127.0.0.1:$PORT "
    "ledger.wsgi'": EXAMPLE_DJANGO + " (before and after the fix)",
    # docs/frameworks.md
    "export DJANGO_SETTINGS_MODULE=mysite.settings": DJANGO_CAPTURE
    + " (DJANGO_SETTINGS_MODULE=ledger_site.settings in the environment of every server)",
    "opentelemetry-instrument gunicorn --bind 127.0.0.1:8000 mysite.wsgi": DJANGO_CAPTURE + MYSITE,
    "opentelemetry-instrument python manage.py runserver --noreload 127.0.0.1:8000": (
        DJANGO_CAPTURE + " (a free port)"
    ),
    "opentelemetry-instrument uvicorn --port 8000 mysite.asgi:application": DJANGO_CAPTURE + MYSITE,
    "OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none reproit-otel "
    "check OCC --exec 'opentelemetry-instrument gunicorn --bind 127.0.0.1:$PORT mysite.wsgi'": (
        f"{DJANGO}::test_the_replay_reproduces_the_failure (ledger_site for mysite, with "
        "--ingest, --api-key and --boot-timeout)"
    ),
    "opentelemetry-instrument uvicorn --port 8000 app:app": f"{STACKS}::"
    "test_the_failure_is_captured_complete_with_its_statements (fastapi_app for app, a free "
    "port)",
    "reproit-otel doctor --import myapp.db": f"{DOCTOR_STACKS}::"
    "test_sqlalchemy_engines_on_drivers_it_does_not_record_are_warned_about (engines for "
    "myapp.db)",
    # README.md, docs/quickstart.md
    "scripts/demo": DEMO + " (through scripts/demo whenever its bootstrap step has nothing to "
    "install, as in .ci/run)",
    "scripts/demo --app fastapi": DEMO + " (the fastapi case, through scripts/demo likewise)",
    "scripts/demo --app fastapi-async": DEMO
    + " (the fastapi-async case, through scripts/demo likewise)",
    "scripts/test": ".ci/run: its last step runs scripts/test, the whole suite",
    "scripts/bootstrap": ".ci/run: runs scripts/bootstrap before linting and testing",
    # docs/compatibility.md
    "scripts/refresh-vectors": "tests/unit/test_refresh_vectors.py::"
    "test_refresh_copies_the_published_folder_exactly (on a copy of the repository's layout "
    "with a published folder beside it)",
    "apt-get install postgresql": ".ci/run: need_package installs postgresql when initdb is "
    "missing",
    "pip install 'reproit-otel[otel,requests,psycopg2,replay,serve]'": PIP + " (the line once "
    "published; tests/integration/test_install_line.py checks the guides label it so)",
    "pip install -c constraints.txt '.[otel,requests,psycopg2,replay,serve]'": INSTALL_LINE
    + "test_the_line_from_a_clone_resolves_to_the_tested_set (with --dry-run --ignore-installed "
    "--report FILE: resolved in full, nothing installed)",
    "pip wheel --no-deps -w dist .": INSTALL_LINE
    + "test_the_built_wheel_installs_with_the_same_line (dist in a temporary folder; the wheel "
    "then resolved with the install line, --dry-run)",
    # docs/versions.md
    "scripts/matrix --list": "tests/unit/test_matrix_cells.py::"
    "test_the_list_names_every_cell_of_the_versions_page",
    "scripts/matrix": ".ci/run: runs scripts/matrix --ci (the runner the page describes)",
    "scripts/matrix --ci": ".ci/run: runs scripts/matrix --ci after the whole suite",
    "scripts/matrix oldest": ".ci/run: runs scripts/matrix --ci, whose cells include oldest",
    "scripts/matrix --all": ".ci/run: runs scripts/matrix --ci, the same runner on the cells "
    "marked [ci]; --all runs every cell that way",
    "pip install 'reproit-otel[otel,requests,psycopg2]'": PIP,
    "pip install 'reproit-otel[otel]'": PIP,
    "pip install 'reproit-otel[requests,psycopg2]'": PIP,
    "pip install opentelemetry-instrumentation-redis==0.66b1": "setup: an example of another "
    "library's instrumentation at the tested release; tests/unit/test_install_set.py checks "
    "that release is the one constraints.txt pins",
    "opentelemetry-bootstrap -a install": "setup: named as what not to rely on (it picks the "
    "installed distro's release); no test runs it, the otel extra replaces it",
    "export OTEL_TRACES_EXPORTER=otlp,reproit": FIVE,
    "export REPROIT_ENDPOINT=http://127.0.0.1:8765/v1/capture-batches": FIVE
    + " (the ingest's free port)",
    "export REPROIT_API_KEY=dev-key": FIVE,
    "export REPROIT_APP_ID=orders": FIVE,
    "opentelemetry-instrument python app.py": FIVE,
    "OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none reproit-otel "
    'check failure.json --exec "opentelemetry-instrument python app.py"': FIVE,
    "reproit-otel serve --api-key dev-key": FIVE + " (with --port 0)",
    "reproit-otel list": FIVE + " (REPROIT_INGEST_URL names the ingest)",
    "reproit-otel list --api-key dev-key": FIVE,
    "reproit-otel show OCC --api-key dev-key": FIVE,
    "reproit-otel pull OCC --api-key dev-key -o failure.json": FIVE,
    "reproit-otel doctor": TOOLS,
    # docs/ingest.md, docs/replay.md, docs/compatibility.md, docs/configuration.md
    'reproit-otel list --api-key dev-key --operation "POST /orders" --status 500': FIVE,
    "reproit-otel pull OCC --api-key dev-key -o capsule.json": FIVE,
    "reproit-otel pull OCC --api-key dev-key --batch 17 -o older.json": (
        "tests/integration/test_occurrence_fingerprints.py::"
        "test_a_route_failing_three_ways_is_three_pullable_occurrences"
    ),
    "reproit-otel pull OCC -o capsule.json": FIVE + " (the same flags, -o failure.json)",
    "OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none reproit-otel "
    'check capsule.json --exec "opentelemetry-instrument python app.py"': FIVE,
    "reproit-otel check OCC": "tests/integration/test_check_cli.py::"
    "test_an_occurrence_id_is_pulled_saved_and_checked",
    'reproit-otel check occ_... --exec "..." [--ingest URL] [--api-key KEY]': FIVE
    + " (with both options)",
    'reproit-otel check capsule.json --exec "opentelemetry-instrument python '
    'examples/shop/app.py"': "demo stage 9 (the capsule in the work folder, the shop by its "
    "full path)",
    'reproit-otel check capsule.json --exec "..." --header \'Authorization: Bearer '
    "eyJhbGciOi...' --cookie 'sessionid=k2j3l4...'": "tests/integration/"
    "test_request_fidelity.py::test_overrides_replace_the_recorded_credential (an occurrence "
    "id, --header only)",
    "reproit-otel serve": SERVE,
    "reproit-otel list/show/pull": FIVE,
    "reproit-otel show": FIVE,
    "reproit-otel pull": FIVE,
    "reproit-otel check": FIVE,
    "reproit-otel check --exec": FIVE,
    "reproit-otel demo": DEMO,
    "python -m reproit_otel": "tests/integration/test_cli_entry.py::"
    "test_python_dash_m_runs_the_same_command_line",
    "python -c 'from reproit_otel.config import render_markdown; "
    'print(render_markdown(), end="")\'': CONFIG,
    "python -m reproit_otel.cli.reference docs/configuration.md": CONFIG
    + " (on a copy of the document)",
    # docs/capture.md
    "export REPROIT_API_KEY=dev-key REPROIT_APP_ID=shop": LAUNCH,
    "OTEL_TRACES_EXPORTER=otlp,reproit opentelemetry-instrument python app.py": LAUNCH,
    "REPROIT_DEBUG_DUMP=/tmp/reproit-dump OTEL_TRACES_EXPORTER=reproit OTEL_METRICS_EXPORTER=none "
    "OTEL_LOGS_EXPORTER=none opentelemetry-instrument python app.py": DUMP
    + " (a temporary dump folder, PORT free)",
    "curl -i http://127.0.0.1:5000/failing-route": DUMP + " (the app's free port)",
    "cat /tmp/reproit-dump/cap-*.json": DUMP + " (the temporary dump folder)",
    # docs/boundary.md
    "REPROIT_TOOLS=record pytest": TOOLS,
    "REPROIT_TOOLS=replay pytest": TOOLS,
    "reproit-otel doctor --import myapp.tools --import myapp.mail [--fixtures DIR] [--json]": TOOLS
    + " (without the options, and with both)",
    # docs/ci.md, examples/ci/README.md
    "REPROIT_CI_CAPTURE=1 pytest": CI,
    "gh run download <run-id> -n reproit-capsules -D capsules": "external: the GitHub CLI "
    f"fetching a CI artifact; {CI} puts a spooled capsule where it leaves one (capsules/) and "
    "runs the two commands that follow",
    'reproit-otel check capsules/capsule-1f0c4e9a2b7d.json --exec "pytest"': CI,
    "REPROIT_REPLAY=capsules/capsule-1f0c4e9a2b7d.json pytest -x --pdb": CI
    + " (the debugger reads end of input)",
    'reproit-otel check CAPSULE --exec "<command that boots the app>"': SHOP,
    "REPROIT_CI_CAPTURE=1 QUOTES_ORDER=reversed pytest": CI,
    'reproit-otel check .reproit/ci-spool/capsule-*.json --exec "pytest"': CI,
    # docs/collector.md, collector-config/
    "REPROIT_API_KEY=team-key otelcol-contrib --config collector-config/single/collector.yaml": (
        NO_COLLECTOR
    ),
    "otelcol-contrib --config collector-config/scaled/loadbalancer.yaml": NO_COLLECTOR,
    "REPROIT_API_KEY=team-key otelcol-contrib --config collector-config/scaled/sampler.yaml": (
        NO_COLLECTOR
    ),
    "reproit-otel serve --host 0.0.0.0 --api-key team-key": SERVE + " (with --port 0)",
    "reproit-otel serve --host 0.0.0.0 --api-key team-key --db "
    "postgresql://reproit@db:5432/reproit": SERVE + " (a new database on the test PostgreSQL)",
    # docs/ingest-web.md
    "reproit-otel demo --workdir /tmp/reproit-demo": DEMO + " (a temporary work folder)",
    "reproit-otel serve --db sqlite:////tmp/reproit-demo/ingest.db --api-key demo-key "
    '--replay-exec "opentelemetry-instrument python examples/shop/app.py"': DEMO
    + " (on the demo's own database, with --port 0)",
    "reproit-otel serve --db postgresql://reproit@db:5432/reproit --api-key "
    '"$REPROIT_INGEST_KEY" --read-key "$REPROIT_READ_KEY" --replay-exec "python -m shop" '
    "--host 0.0.0.0": SERVE + " (a new database on the test PostgreSQL, with --port 0)",
    "reproit-otel pull occ_… -o occ_….capsule.json --ingest http://127.0.0.1:8765": DEMO
    + " (the line as the occurrence page prints it)",
    "reproit-otel check occ_….capsule.json --exec 'python -m shop'": DEMO
    + " (the line as the page prints it for the demo's --replay-exec)",
    # docs/performance.md
    ".venv/bin/python -m benchmarks.overhead": f"{BENCH}::test_overhead_quick{BENCH_NOTE}",
    ".venv/bin/python -m benchmarks.capture_path": f"{BENCH}::test_capture_path_smoke",
    ".venv/bin/python -m benchmarks.capture_calls": f"{BENCH}::test_capture_calls_smoke",
    ".venv/bin/python -m benchmarks.capture_scaling": f"{BENCH}::test_capture_scaling_smoke",
    ".venv/bin/python -m benchmarks.capture_failing": f"{BENCH}::test_capture_failing_smoke",
    ".venv/bin/python -m benchmarks.capture_paired": f"{BENCH}::test_capture_paired_quick"
    " (the same module with --quick --json PATH: its smoke run, no timing asserted)",
    ".venv/bin/python -m benchmarks.capture_async": f"{BENCH}::test_capture_async_smoke",
    ".venv/bin/python -m benchmarks.replay": f"{BENCH}::test_replay_quick{BENCH_NOTE}",
    ".venv/bin/python -m benchmarks.outage": f"{BENCH}::test_outage_quick{BENCH_NOTE}",
    ".venv/bin/python -m benchmarks.startup": f"{BENCH}::test_startup_smoke",
    "python -m benchmarks.startup --baseline DIR": f"{BENCH}::test_startup_smoke"
    " (with --quick, this checkout as DIR)",
    # examples/shop/README.md, examples/shop_fastapi/README.md, examples/fastapi_async/README.md
    'export PATH="$PWD/.venv/bin:$PATH"': SHOP + " (its shells have .venv/bin first on PATH)",
    "export SHOP_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres": SHOP + SHOP_NOTE,
    "python examples/shop/upstreams.py all": SHOP + " (with --port 0)",
    "reproit-otel serve --api-key dev-key --db sqlite:///shop-ingest.db": SERVE
    + " (as written, with --port 0)",
    "python examples/shop/app.py --init-db": SHOP + SHOP_NOTE,
    "python examples/shop_fastapi/app.py --init-db": SHOP + SHOP_NOTE,
    "python examples/fastapi_async/app.py --init-db": SHOP + SHOP_NOTE,
    "export OTEL_SERVICE_NAME=shop OTEL_TRACES_EXPORTER=reproit": SHOP,
    "export OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none": SHOP,
    "opentelemetry-instrument python examples/shop/app.py": SHOP + SHOP_NOTE,
    "opentelemetry-instrument python examples/shop_fastapi/app.py": SHOP + SHOP_NOTE,
    "opentelemetry-instrument python examples/fastapi_async/app.py": SHOP + SHOP_NOTE,
    "curl -s -X POST localhost:8100/orders -H 'content-type: application/json' -d "
    '\'{"sku": "mug", "quantity": 2, "country": "DE"}\'': SHOP + SHOP_NOTE,
    "curl -s -X POST localhost:8100/orders -H 'content-type: application/json' -d "
    '\'{"sku": "gift-card", "quantity": 1, "country": "DE"}\'': SHOP + SHOP_NOTE,
    "OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none reproit-otel "
    'check capsule.json --exec "opentelemetry-instrument python examples/shop/app.py"': SHOP,
    "OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none reproit-otel "
    'check capsule.json --exec "opentelemetry-instrument python examples/shop_fastapi/app.py"': (
        SHOP
    ),
    "OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none reproit-otel "
    'check capsule.json --exec "opentelemetry-instrument python examples/fastapi_async/app.py"': (
        SHOP
    ),
}

EXTERNAL_PROGRAMS = frozenset({"gh", "otelcol-contrib"})
SETUP_PROGRAMS = frozenset({"pip", "opentelemetry-bootstrap"})
_TEST_REFERENCE = re.compile(r"^(?P<file>tests/[\w/]+\.py)::(?P<test>\w+)(?: \(.+\))?$")
_DEMO_STAGE = re.compile(r"^demo stage (?P<stage>\d+)(?: \(.+\))?$")


@cache
def _test_functions(file: str) -> frozenset[str]:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    )


def _documented() -> dict[str, list[Command]]:
    found: dict[str, list[Command]] = {}
    for command in all_commands():
        found.setdefault(command.text, []).append(command)
    return found


def test_every_line_of_a_shell_block_is_a_command_or_output() -> None:
    assert unclassified_lines() == []


def test_every_documented_command_is_mapped_and_every_entry_is_documented() -> None:
    documented = _documented()
    unmapped = {text: [c.path for c in where] for text, where in documented.items()}
    for text in RUN_BY:
        unmapped.pop(text, None)
    assert unmapped == {}, "add these commands to RUN_BY with the test that runs them"
    assert sorted(set(RUN_BY) - set(documented)) == [], "no document shows these any more"


@pytest.mark.parametrize("command", sorted(RUN_BY))
def test_each_entry_names_a_real_test_or_says_why_not(command: str) -> None:
    where = RUN_BY[command]
    name = program(command)
    if reference := _TEST_REFERENCE.match(where):
        assert (ROOT / reference["file"]).is_file(), where
        assert reference["test"] in _test_functions(reference["file"]), where
    elif stage := _DEMO_STAGE.match(where):
        assert 1 <= int(stage["stage"]) <= STAGES, where
    elif where.startswith(".ci/run: "):
        script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
        named = "postgresql" if name == "apt-get" else name
        assert named is not None and named in script, where
    elif where.startswith("setup: "):
        assert name in SETUP_PROGRAMS, where
    elif where.startswith("external: "):
        assert name in EXTERNAL_PROGRAMS, where
        for test in re.findall(r"tests/[\w/]+\.py::\w+", where):
            file, function = test.split("::")
            assert function in _test_functions(file), test
    else:
        pytest.fail(f"{command!r}: {where!r} is none of the accepted forms")


def _cli_arguments(command: str) -> list[str]:
    words = shlex.split(command)
    while words and re.match(r"^\w+=", words[0]):
        words.pop(0)
    assert words[0] == "reproit-otel"
    # `[--fixtures DIR]`: an optional part, given here.
    return [word.strip("[]") for word in words[1:]]


@pytest.mark.parametrize(
    "command",
    sorted({c.text for c in all_commands() if not c.inline and program(c.text) == "reproit-otel"}),
)
def test_documented_reproit_otel_lines_parse_with_the_real_parser(command: str) -> None:
    parsed = build_parser().parse_args(_cli_arguments(command))  # exits 2 on an unknown flag
    assert callable(parsed.handler)


def test_every_mapped_test_file_reads_or_names_what_it_runs() -> None:
    """A test that runs a document's commands either reads them from the document (through
    tests/docs_commands.py) or spells the command; here: each file uses the reader."""
    files = {
        match["file"]
        for where in RUN_BY.values()
        if (match := _TEST_REFERENCE.match(where))
        and match["file"] in (WALK, SHOP.partition("::")[0], DEMO.partition("::")[0])
    }
    for file in sorted(files):
        assert "tests.docs_commands" in (ROOT / file).read_text(encoding="utf-8"), file


def test_the_reader_finds_blocks_inline_commands_and_output() -> None:
    from tests import docs_commands

    assert docs_commands.normalise("a  b \\#c   # note 'x'") == "a b \\#c"
    assert docs_commands.program("A=1 B=2 pytest -x") == "pytest"
    assert docs_commands._is_inline_command("reproit-otel serve: listening on x") is False
    assert docs_commands._is_inline_command("python 3.x.y") is False
    assert docs_commands._is_inline_command("scripts/bootstrap") is True
    assert docs_commands._is_inline_command("reproit-otel doctor") is True
    assert docs_commands._is_inline_command("opentelemetry-instrument") is False
    assert docs_commands._joined(["a \\", "  b", "", "c"]) == ["a b", "c"]
    assert docs_commands.exports(["export A=1 B='x y'", "run"]) == {"A": "1", "B": "x y"}


def test_the_reader_covers_every_document() -> None:
    from tests.docs_commands import documents

    expected = {"README.md", "collector-config/README.md"}
    expected |= {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    expected |= {str(p.relative_to(ROOT)) for p in ROOT.glob("examples/*/README.md")}
    assert expected <= set(documents())
    assert all(Path(ROOT / path).is_file() for path in documents())
