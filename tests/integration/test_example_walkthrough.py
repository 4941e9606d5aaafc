"""The step-by-step of the shops' READMEs: ``examples/shop``, ``examples/shop_fastapi`` and
``examples/fastapi_async``.

Each README's commands are read from the README (``tests/docs_commands.py``) and run through
``sh`` with ``.venv/bin`` first on ``PATH``, in a folder holding a copy of ``examples/`` (so
the capsule and the fix land there, not in the repository). What is replaced: ports (every
service listens on a free one: ``upstreams.py all --port 0``, ``PORT``, ``localhost:8100`` in
the curl lines, ``reproit-otel serve --port 0``; ``list``/``show``/``pull`` find the ingest
through ``REPROIT_INGEST_URL``, their documented default), ``OCC``, and the PostgreSQL DSN.
The last step fixes ``discount_label()`` in the copy and runs the same ``check`` again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from reproit_otel.demo.run import BUG_LINE, FIXED_LINE
from tests.docs_commands import block_from, command_starting, commands_of, exports
from tests.integration.served_ingest import ServedIngest
from tests.integration.test_examples import Upstreams, _free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
READMES = {
    "flask": "examples/shop/README.md",
    "fastapi": "examples/shop_fastapi/README.md",
    "fastapi-async": "examples/fastapi_async/README.md",
}
SCRIPTS = {
    "flask": "examples/shop/app.py",
    "fastapi": "examples/shop_fastapi/app.py",
    "fastapi-async": "examples/fastapi_async/app.py",
}

pytestmark = pytest.mark.skipif(
    "reproit" not in {e.name for e in entry_points(group="opentelemetry_traces_exporter")},
    reason="the `reproit` exporter entry point is not installed (pip install -e .)",
)


def _shell_env(**extra: str) -> dict[str, str]:
    """A reader's shell after ``export PATH="$PWD/.venv/bin:$PATH"``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "REPROIT_"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        REPROIT_STRICT_INTERNAL="1",
        **extra,
    )
    return env


def _sh(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        shell=True,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _verdict(output: str) -> str:
    found = re.search(r"^verdict:\s+(\S+)", output, flags=re.M)
    assert found, output
    return found.group(1)


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[ServedIngest]:
    # The README's serve line: its --db and --api-key, on a free port.
    serve = command_starting(READMES["flask"], "reproit-otel serve")
    assert serve == command_starting(READMES["fastapi"], "reproit-otel serve")
    assert serve == command_starting(READMES["fastapi-async"], "reproit-otel serve")
    assert serve == "reproit-otel serve --api-key dev-key --db sqlite:///shop-ingest.db"
    served = ServedIngest(f"sqlite:///{tmp_path / 'shop-ingest.db'}", "--api-key", "dev-key")
    yield served
    assert served.stop() == 0


@pytest.mark.parametrize("shop", sorted(READMES))
def test_the_shop_readme_walkthrough(
    shop: str, ingest: ServedIngest, postgres_dsn: str, tmp_path: Path
) -> None:
    readme, script = READMES[shop], SCRIPTS[shop]
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns(".reproit"))
    assert command_starting(readme, "python examples/shop/upstreams.py") == (
        "python examples/shop/upstreams.py all"
    )
    upstreams = Upstreams()  # `upstreams.py all --port 0`
    port = _free_port()
    app_env = {
        "SHOP_DATABASE_URL": postgres_dsn,
        "PRICING_URL": upstreams.addresses["pricing"],
        "ASSISTANT_URL": upstreams.addresses["assistant"],
        "TAX_ADDRESS": upstreams.addresses["tax"],
    }
    block = block_from(readme, f"python {script} --init-db")
    variables = {
        name: value.replace("http://127.0.0.1:8765", ingest.base_url)
        for name, value in exports(block).items()
    }
    shell = _shell_env(
        **app_env,
        **variables,
        REPROIT_FLUSH_INTERVAL_MS="100",
        REPROIT_INGEST_URL=ingest.base_url,
    )
    init = _sh(block[0], work, shell)
    assert (init.returncode, init.stdout) == (0, "shop tables ready\n")
    assert block[-1] == f"opentelemetry-instrument python {script}"
    shop_process = subprocess.Popen(
        block[-1],
        shell=True,
        cwd=work,
        env={**shell, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    steps = [c.text for c in commands_of(readme) if not c.inline]
    try:
        for _ in range(300):
            if _sh(f"curl -s 127.0.0.1:{port}/", work, shell).returncode == 0:
                break
            time.sleep(0.05)
        answers = [
            _sh(curl.replace("localhost:8100", f"127.0.0.1:{port}"), work, shell).stdout
            for curl in steps
            if curl.startswith("curl ")
        ]
        assert "Internal Server Error" in answers[-1]  # the gift card: 500
        for answer in answers[:-1]:  # the mug
            assert json.loads(answer)["sku"] == "mug"
        listed = ""
        for _ in range(200):
            listed = _sh(command_starting(readme, "reproit-otel list"), work, shell).stdout
            if "POST /orders" in listed:
                break
            time.sleep(0.1)
    finally:
        os.killpg(shop_process.pid, 15)
        shop_process.wait(10)
        assert upstreams.stop() == 0

    # ID  COUNT  STATUS  LAST SEEN  CAPSULE  OPERATION
    [row] = [line.split() for line in listed.splitlines()[1:]]
    assert (row[1], row[2], row[-3], " ".join(row[-2:])) == ("1", "500", "yes", "POST /orders")
    occurrence = row[0]
    for command in steps:
        if command.startswith(("reproit-otel show", "reproit-otel pull")):
            done = _sh(command.replace("OCC", occurrence), work, shell)
            assert done.returncode == 0, done.stderr
            if command.startswith("reproit-otel show"):
                assert re.search(r"^operation\s+POST /orders$", done.stdout, flags=re.M)
    assert json.loads((work / "capsule.json").read_text("utf-8"))["operation"] == "POST /orders"

    # The upstreams and the shop are stopped, and the database is never reached: the
    # replayed shop's connect() gets the replay stub and its calls are served from the capsule.
    [check] = [c for c in steps if c.startswith("OTEL_TRACES_EXPORTER=none")]
    assert check.endswith(f'--exec "opentelemetry-instrument python {script}"')
    checked = _sh(check, work, shell)
    assert (checked.returncode, _verdict(checked.stdout)) == (1, "REPRODUCED"), checked.stderr
    app = work / script
    app.write_text(app.read_text("utf-8").replace(BUG_LINE, FIXED_LINE), "utf-8")
    checked = _sh(check, work, shell)
    assert (checked.returncode, _verdict(checked.stdout)) == (0, "FIXED"), checked.stderr
