"""A failing Flask request travels the whole way: pipeline, uploader, ``reproit-otel serve``,
``reproit-otel pull``, and comes back as a capsule that replays its exchanges."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from flask import Flask, jsonify
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel import bootstrap
from reproit_otel.capture.uploader import Uploader
from reproit_otel.config import read_config
from reproit_otel.wire.capsule import load_capsule
from tests.integration.pipeline_support import ServedWSGI
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.upstream import Upstream

ROOT = Path(__file__).resolve().parents[2]
KEY = "team-key"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[ServedIngest]:
    server = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", "--api-key", KEY)
    yield server
    assert server.stop() == 0


def _occurrences(ingest: ServedIngest) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{ingest.base_url}/v1/occurrences", headers={"authorization": f"Bearer {KEY}"}
    )
    rows: list[dict[str, Any]] = answer.json()["occurrences"]
    return rows


def _pull(ingest: ServedIngest, occurrence_id: str, output: Path) -> dict[str, Any]:
    pulled = subprocess.run(
        cli_command("pull", occurrence_id, "-o", str(output), "--ingest", ingest.base_url),
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "REPROIT_API_KEY": KEY},
        timeout=60,
    )
    assert pulled.returncode == 0, pulled.stderr
    return load_capsule(output.read_text(encoding="utf-8"))


def _exchanges(capsule: dict[str, Any]) -> list[tuple[str, int]]:
    return [
        (event["exchange"]["request"]["url"], event["exchange"]["response"]["status"])
        for event in capsule["events"]
        if event["kind"] == "effect"
    ]


def test_a_failing_request_is_pulled_back_as_a_capsule(
    upstream: Upstream, ingest: ServedIngest, tmp_path: Path
) -> None:
    config = read_config(
        {
            "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
            "REPROIT_API_KEY": KEY,
            "REPROIT_APP_ID": "shop",
            "REPROIT_BUILD": "7",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
    )
    app = Flask("shop")

    @app.get("/quote")
    def quote() -> Any:
        rate = requests.get(f"{upstream.base}/json", timeout=5).json()
        requests.get(f"{upstream.base}/fail", timeout=5)
        return jsonify({"error": "pricing unavailable", "rate": rate["rate"]}), 502

    provider = TracerProvider()
    processor = bootstrap.install(provider, config=config)
    assert processor is not None
    [uploader] = [sink for sink in processor.sinks if isinstance(sink, Uploader)]
    FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
    RequestsInstrumentor().instrument(tracer_provider=provider)
    served = ServedWSGI(app)
    try:
        assert requests.get(f"{served.base}/quote", timeout=10).status_code == 502
        for _ in range(100):
            if uploader.stats()["captured_operations"]:
                break
            processor.force_flush(100)
        assert uploader.flush(20) is True
        stats = uploader.stats()
    finally:
        served.stop()
        RequestsInstrumentor().uninstrument()
        FlaskInstrumentor().uninstrument_app(app)
        bootstrap.uninstall()
        provider.shutdown()
    assert (stats["sent_batches"], stats["failed_batches"]) == (1, 0)

    [occurrence] = _occurrences(ingest)
    assert {k: occurrence[k] for k in ("projectId", "operation", "status", "build")} == {
        "projectId": "shop",
        "operation": "GET /quote",
        "status": 502,
        "build": "7",
    }
    capsule = _pull(ingest, occurrence["id"], tmp_path / "capsule.json")
    assert (capsule["operation"], capsule["oracle"], capsule["version"]) == (
        "GET /quote",
        "backend-server-error",
        2,
    )
    assert _exchanges(capsule) == [(f"{upstream.base}/json", 200), (f"{upstream.base}/fail", 500)]


def _zero_code_ready() -> bool:
    names = {entry.name for entry in entry_points(group="opentelemetry_traces_exporter")}
    return "reproit" in names


@pytest.mark.skipif(
    not _zero_code_ready(),
    reason="the `reproit` opentelemetry_traces_exporter entry point is not installed "
    "(reinstall the package: pip install -e .)",
)
@pytest.mark.parametrize("exporters", ["reproit", "otlp_proto_http,reproit"])
def test_an_unmodified_flask_app_under_opentelemetry_instrument_delivers(
    upstream: Upstream, ingest: ServedIngest, tmp_path: Path, exporters: str
) -> None:
    # With the OTLP exporter too, the ingest's OTLP receiver gets the same failing span: it
    # counts on the same occurrence as the capture batch.
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    port = _free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "UPSTREAM": upstream.base,
        "OTEL_SERVICE_NAME": "shop",
        "OTEL_TRACES_EXPORTER": exporters,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ingest.base_url}/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"authorization=Bearer {KEY}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
        "REPROIT_API_KEY": KEY,
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
    }
    app = subprocess.Popen(
        [str(launcher), sys.executable, "-u", "tests/integration/apps/plain_flask.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rows: list[dict[str, Any]] = []
    try:
        assert app.stdout is not None
        assert app.stdout.readline().strip() == "listening"
        response = requests.get(f"http://127.0.0.1:{port}/quote", timeout=10)
        assert response.status_code == 502
        expected_traces = 1 if "otlp" in exporters else 0
        for _ in range(300):  # the upload follows the flush interval
            rows = _occurrences(ingest)
            if rows and rows[0]["batches"] == 1 and rows[0]["traces"] == expected_traces:
                break
            time.sleep(0.1)
    finally:
        app.terminate()
        _, stderr = app.communicate(timeout=30)
    assert len(rows) == 1, stderr
    assert (rows[0]["batches"], rows[0]["traces"], rows[0]["count"]) == (
        1,
        expected_traces,
        1 + expected_traces,
    )
    capsule = _pull(ingest, rows[0]["id"], tmp_path / "capsule.json")
    assert capsule["operation"] == "GET /quote"
    assert _exchanges(capsule) == [(f"{upstream.base}/json", 200), (f"{upstream.base}/fail", 500)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
