"""``collector-config/``: every pipeline is well formed, and the ingest takes what it sends.

No Collector binary runs here. The test parses every YAML file, checks that each pipeline
names defined components and that the reproit branch is what the docs say (tail sampling on
5xx, the ingest's ``/v1/traces``, gzip, protobuf, a Bearer key), applies the sampling
policies as written to a few traces, and sends the ingest, for each kept trace, the request
the ``otlphttp`` exporter makes: ``POST`` of a gzip-compressed ``ExportTraceServiceRequest``
with ``content-type: application/x-protobuf``, ``content-encoding: gzip`` and the configured
headers, at the configured path.
"""

from __future__ import annotations

import gzip
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.served_ingest import ServedIngest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "collector-config").rglob("*.yaml"))
KEY = "collector-key"
SECTIONS = ("receivers", "processors", "exporters")


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document


def _reproit_exporters(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: settings
        for name, settings in config.get("exporters", {}).items()
        if name.split("/")[0] == "otlphttp" and name.endswith("/reproit")
    }


def test_there_are_a_single_and_a_scaled_variant() -> None:
    assert [str(path.relative_to(ROOT)) for path in CONFIGS] == [
        "collector-config/scaled/loadbalancer.yaml",
        "collector-config/scaled/sampler.yaml",
        "collector-config/single/collector.yaml",
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.parent.name + "/" + path.name)
def test_every_pipeline_names_defined_components(path: Path) -> None:
    config = _load(path)
    undefined = []
    used: set[tuple[str, str]] = set()
    for pipeline, parts in config["service"]["pipelines"].items():
        assert pipeline.split("/")[0] == "traces"
        for section in SECTIONS:
            for name in parts.get(section, []):
                used.add((section, name))
                if name not in (config.get(section) or {}):
                    undefined.append(f"{pipeline}: {section} {name}")
    unused = [
        f"{section} {name}"
        for section in SECTIONS
        for name in config.get(section) or {}
        if (section, name) not in used
    ]
    assert (undefined, unused) == ([], [])


def test_the_reproit_branch_samples_5xx_and_posts_gzip_protobuf_with_a_key() -> None:
    senders = {}
    for path in CONFIGS:
        config = _load(path)
        for name, exporter in _reproit_exporters(config).items():
            senders[str(path.relative_to(ROOT / "collector-config"))] = exporter
            [pipeline] = [
                parts
                for parts in config["service"]["pipelines"].values()
                if name in parts["exporters"]
            ]
            samplers = [p for p in pipeline["processors"] if p.startswith("tail_sampling")]
            [sampler] = samplers
            assert config["processors"][sampler]["policies"] == [
                {
                    "name": "http-response-5xx",
                    "type": "numeric_attribute",
                    "numeric_attribute": {
                        "key": "http.response.status_code",
                        "min_value": 500,
                        "max_value": 599,
                    },
                },
                {
                    "name": "http-status-5xx-legacy",
                    "type": "numeric_attribute",
                    "numeric_attribute": {
                        "key": "http.status_code",
                        "min_value": 500,
                        "max_value": 599,
                    },
                },
            ]
            # Batching comes after sampling: a batch holds only kept traces.
            assert pipeline["processors"].index(sampler) < pipeline["processors"].index(
                "batch/reproit"
            )
    expected = {
        "traces_endpoint": "http://reproit-ingest:8765/v1/traces",
        "compression": "gzip",
        "encoding": "proto",
        "headers": {"authorization": "Bearer ${env:REPROIT_API_KEY}"},
    }
    assert senders == {"scaled/sampler.yaml": expected, "single/collector.yaml": expected}


def test_the_loadbalancer_routes_by_trace_id_to_the_samplers() -> None:
    balancer = _load(ROOT / "collector-config/scaled/loadbalancer.yaml")
    sampler = _load(ROOT / "collector-config/scaled/sampler.yaml")
    exporter = balancer["exporters"]["loadbalancing/by-trace"]
    assert exporter["routing_key"] == "traceID"
    assert exporter["resolver"]["dns"]["port"] == 4317
    assert sampler["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")
    # Both tiers keep the team's backend: the first tier still exports every span there.
    assert balancer["service"]["pipelines"]["traces/backend"]["exporters"] == ["otlp/backend"]


# --- what the exporter sends, into a real ingest ----------------------------------------------


def _attribute(key: str, value: str | int) -> Any:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _trace(number: int, spans: list[tuple[int, str, int]]) -> list[Any]:
    """Spans (kind, name, HTTP status) of one trace of the ``shop`` service."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    built = []
    for index, (kind, name, status) in enumerate(spans):
        method, _, route = name.partition(" ")
        status_key = "http.response.status_code" if number % 2 else "http.status_code"
        built.append(
            Span(
                trace_id=bytes([number]) * 16,
                span_id=bytes([number, index + 1]) * 4,
                name=name,
                kind=kind,  # type: ignore[arg-type]
                attributes=[
                    _attribute("http.request.method", method),
                    _attribute("http.route", route),
                    _attribute(status_key, status),
                ],
            )
        )
    return built


def _kept(trace: list[Any], policies: list[dict[str, Any]]) -> bool:
    """The numeric_attribute policies as the tail_sampling processor applies them."""
    for policy in policies:
        rule = policy["numeric_attribute"]
        for span in trace:
            for attribute in span.attributes:
                value = attribute.value.int_value
                if attribute.key == rule["key"] and rule["min_value"] <= value <= rule["max_value"]:
                    return True
    return False


def _export_request(spans: list[Any]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    resource = Resource(attributes=[_attribute("service.name", "shop")])
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[ServedIngest]:
    served = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", "--api-key", KEY)
    yield served
    assert served.stop() == 0


@pytest.mark.parametrize("variant", ["single/collector.yaml", "scaled/sampler.yaml"])
def test_what_the_reproit_exporter_sends_becomes_an_occurrence(
    ingest: ServedIngest, variant: str
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    config = _load(ROOT / "collector-config" / variant)
    [exporter] = _reproit_exporters(config).values()
    [sampler] = [name for name in config["processors"] if name.startswith("tail_sampling")]
    policies = config["processors"][sampler]["policies"]
    server, client = 2, 3
    traces = [
        _trace(1, [(server, "POST /orders", 500), (client, "GET /prices/{sku}", 200)]),
        _trace(2, [(server, "POST /orders", 200)]),
        _trace(3, [(server, "GET /orders/{id}", 503)]),
        _trace(4, [(server, "POST /orders", 200), (client, "GET /prices/{sku}", 502)]),
    ]
    kept = [trace for trace in traces if _kept(trace, policies)]
    assert [trace[0].trace_id[0] for trace in kept] == [1, 3, 4]

    path = urllib.parse.urlsplit(exporter["traces_endpoint"]).path
    headers = {
        name: re.sub(r"\$\{env:REPROIT_API_KEY\}", KEY, value)
        for name, value in exporter["headers"].items()
    }
    batch = [span for trace in kept for span in trace]  # batch/reproit: one request
    response = httpx.post(
        ingest.base_url + path,
        content=gzip.compress(_export_request(batch)),
        headers={
            **headers,
            "content-type": "application/x-protobuf",
            "content-encoding": "gzip",
            "user-agent": "OpenTelemetry Collector Contrib",
        },
    )
    assert response.status_code == 200
    assert ExportTraceServiceResponse.FromString(response.content) == ExportTraceServiceResponse()

    listed = httpx.get(
        f"{ingest.base_url}/v1/occurrences", headers={"authorization": f"Bearer {KEY}"}
    ).json()["occurrences"]
    fields = ("projectId", "operation", "status", "count", "traces", "capsuleAvailable")
    assert sorted(({k: row[k] for k in fields} for row in listed), key=str) == [
        {
            "projectId": "shop",
            "operation": "GET /orders/{id}",
            "status": 503,
            "count": 1,
            "traces": 1,
            "capsuleAvailable": False,
        },
        {
            "projectId": "shop",
            "operation": "POST /orders",
            "status": 500,
            "count": 1,
            "traces": 1,
            "capsuleAvailable": False,
        },
    ]
