"""The step-by-step of ``examples/shop/README.md``, with its commands and variables.

The README's commands run as written, except for ports: every service here listens on a
free port (``--port 0``, ``PORT``) so the test never collides with anything, and the
``reproit-otel list/show/pull`` commands get ``--ingest`` for the ingest's port.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import requests

from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.test_examples import Upstreams, _free_port

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = str(Path(sys.executable).with_name("opentelemetry-instrument"))
NO_TELEMETRY = {
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}

pytestmark = pytest.mark.skipif(
    "reproit" not in {e.name for e in entry_points(group="opentelemetry_traces_exporter")},
    reason="the `reproit` exporter entry point is not installed (pip install -e .)",
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "REPROIT_"))}
    env["REPROIT_STRICT_INTERNAL"] = "1"
    env.update(extra)
    return env


def _cli(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command(*args),
        cwd=cwd,
        env=_clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[ServedIngest]:
    served = ServedIngest(f"sqlite:///{tmp_path / 'shop-ingest.db'}", "--api-key", "dev-key")
    yield served
    assert served.stop() == 0


def test_the_shop_readme_walkthrough(
    ingest: ServedIngest, postgres_dsn: str, tmp_path: Path
) -> None:
    upstreams = Upstreams()
    port = _free_port()
    app_env = {
        "SHOP_DATABASE_URL": postgres_dsn,
        "PRICING_URL": upstreams.addresses["pricing"],
        "ASSISTANT_URL": upstreams.addresses["assistant"],
        "TAX_ADDRESS": upstreams.addresses["tax"],
    }
    capture_env = {
        **app_env,
        "PORT": str(port),
        "OTEL_SERVICE_NAME": "shop",
        "OTEL_TRACES_EXPORTER": "reproit",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
        "REPROIT_API_KEY": "dev-key",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
    }
    init = subprocess.run(
        [sys.executable, "examples/shop/app.py", "--init-db"],
        cwd=ROOT,
        env=_clean_env(**app_env),
        capture_output=True,
        text=True,
        check=False,
    )
    assert (init.returncode, init.stdout) == (0, "shop tables ready\n")
    shop = subprocess.Popen(
        [LAUNCHER, sys.executable, "examples/shop/app.py"],
        cwd=ROOT,
        env=_clean_env(**capture_env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                requests.get(base, timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        normal = requests.post(
            f"{base}/orders", json={"sku": "mug", "quantity": 2, "country": "DE"}, timeout=10
        )
        failing = requests.post(
            f"{base}/orders", json={"sku": "gift-card", "quantity": 1, "country": "DE"}, timeout=10
        )
        assert (normal.status_code, failing.status_code) == (200, 500)
        listed = ""
        for _ in range(200):
            listed = _cli("list", "--ingest", ingest.base_url, "--api-key", "dev-key").stdout
            if "POST /orders" in listed:
                break
            time.sleep(0.1)
    finally:
        shop.terminate()
        shop.wait(10)
        assert upstreams.stop() == 0

    # ID  COUNT  STATUS  LAST SEEN  CAPSULE  OPERATION
    [row] = [line.split() for line in listed.splitlines()[1:]]
    assert (row[1], row[2], row[-3], " ".join(row[-2:])) == ("1", "500", "yes", "POST /orders")
    occurrence = row[0]
    shown = _cli("show", occurrence, "--ingest", ingest.base_url, "--api-key", "dev-key")
    assert re.search(r"^operation\s+POST /orders$", shown.stdout, flags=re.M), shown.stdout
    pulled = _cli(
        "pull",
        occurrence,
        "--ingest",
        ingest.base_url,
        "--api-key",
        "dev-key",
        "-o",
        "capsule.json",
        cwd=tmp_path,
    )
    assert pulled.returncode == 0, pulled.stderr
    moved = tmp_path / "capsule.json"

    # The upstreams are stopped, and the check's environment names no database: the
    # replayed shop's connect() gets the replay stub and its calls are served from the capsule.
    boot = "opentelemetry-instrument python examples/shop/app.py"
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    checked = _cli("check", str(moved), "--exec", boot, "--json", PATH=path, **NO_TELEMETRY)
    result = json.loads(checked.stdout)
    assert (checked.returncode, result["verdict"], result["divergences"]) == (
        1,
        "reproduced",
        [],
    )
