"""A real ``reproit-otel serve`` subprocess: uploads, refusals, OTLP, capsules and the CLI."""

from __future__ import annotations

import gzip
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.capture.uploader import Uploader, UploaderSettings
from reproit_otel.ingest.facts import batch_facts
from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_batch
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.capsule import capsule_bytes, capsule_from_batch, load_capsule
from tests.integration.capture_helpers import built_batch, failing_trace, queued
from tests.integration.loopback_ingest import down_url
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.pgserver import fresh_database

KEY = "team-key"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServedIngest]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ingest.db'}"
    else:
        url = fresh_database(request.getfixturevalue("postgres_dsn"))
    server = ServedIngest(url, "--api-key", KEY, "--max-body-bytes", "262144")
    yield server
    assert server.stop() == 0


def post_batch(served: ServedIngest, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{served.base_url}/v1/capture-batches",
        content=body,
        headers={**AUTH, "content-type": "application/json", **headers},
    )


def refusal(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def test_an_uploaded_failure_becomes_an_occurrence_with_its_capsule(
    served: ServedIngest, tmp_path: Path
) -> None:
    capture = CaptureSettings(project_id="orders-api", build="1.2.3", commit="abc123")

    def environment(number: int) -> CaptureEnvironment:
        return CaptureEnvironment(now_ms=1_700_000_000_000, batch_number=number, runtime="python 3")

    uploader = Uploader(
        UploaderSettings(
            endpoint=f"{served.base_url}/v1/capture-batches",
            api_key=KEY,
            capture=capture,
            flush_interval_ms=100,
        ),
        environment,
    )
    trace = failing_trace()
    uploader.record(trace)
    assert uploader.flush(20) is True
    assert uploader.stats()["sent_batches"] == 1
    uploader.close()

    batch = build_capture_batch(queued(trace), config=capture, environment=environment(1))
    occurrence_id = batch_facts(batch).occurrence_id
    listing = httpx.get(f"{served.base_url}/v1/occurrences", headers=AUTH).json()
    assert [item["id"] for item in listing["occurrences"]] == [occurrence_id]
    assert (listing["total"], listing["nextOffset"]) == (1, None)
    occurrence = httpx.get(f"{served.base_url}/v1/occurrences/{occurrence_id}", headers=AUTH)
    assert occurrence.json() == listing["occurrences"][0]
    assert {k: occurrence.json()[k] for k in ("operation", "status", "count", "build")} == {
        "operation": "POST /orders",
        "status": 500,
        "count": 1,
        "build": "1.2.3",
    }

    expected = capsule_from_batch(batch)
    assert expected is not None
    served_capsule = httpx.get(
        f"{served.base_url}/v1/occurrences/{occurrence_id}/capsule", headers=AUTH
    )
    assert served_capsule.content == capsule_bytes(expected)
    assert load_capsule(served_capsule.content.decode()) == expected

    output = tmp_path / "capsule.json"
    pulled = subprocess.run(
        cli_command("pull", occurrence_id, "-o", str(output), "--ingest", served.base_url),
        check=False,
        capture_output=True,
        text=True,
        env={"REPROIT_API_KEY": KEY, "PATH": ""},
        timeout=60,
    )
    assert (pulled.returncode, pulled.stderr) == (
        0,
        f"wrote {output} ({len(served_capsule.content)} bytes)\n",
    )
    assert output.read_bytes() == served_capsule.content

    listed = subprocess.run(
        cli_command("list", "--json", "--ingest", served.base_url, "--api-key", KEY),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0
    assert json.loads(listed.stdout) == listing

    access = [json.loads(line) for line in served.lines if line.startswith("{")]
    assert [(line["method"], line["path"], line["status"]) for line in access[:2]] == [
        ("POST", "/v1/capture-batches", 202),
        ("GET", "/v1/occurrences", 200),
    ]


def test_the_same_failure_twice_counts_twice(served: ServedIngest) -> None:
    bodies = [canonical_json(built_batch(batch_number=number)).encode() for number in (1, 2)]
    for body in bodies:
        response = post_batch(served, body)
        assert response.status_code == 202
        assert response.json()["duplicate"] is False
    again = post_batch(served, bodies[1])  # a retry after a lost answer
    assert (again.status_code, again.json()["duplicate"]) == (202, True)
    [occurrence] = httpx.get(f"{served.base_url}/v1/occurrences", headers=AUTH).json()[
        "occurrences"
    ]
    assert occurrence["count"] == 2


def _broken_envelope(batch: dict[str, Any]) -> dict[str, Any]:
    for event in batch["events"]:
        if event["event"].get("name") == "determinism-envelope":
            event["event"]["attributes"]["observedAtMs"] = -1
    return batch


@pytest.mark.parametrize(
    ("change", "rule", "field"),
    [
        (lambda b: {**b, "extra": True}, "unknown-field", "batch.extra"),
        (lambda b: {**b, "projectId": "orders api"}, "token", "batch.projectId"),
        (_broken_envelope, "determinism-envelope", "batch.events[2].event.attributes"),
    ],
)
def test_batches_breaking_a_rule_are_refused_with_the_rule_and_field(
    served: ServedIngest, change: Any, rule: str, field: str
) -> None:
    response = post_batch(served, canonical_json(change(built_batch())).encode())
    assert response.status_code == 400
    assert (refusal(response)["rule"], refusal(response)["field"]) == (rule, field)
    assert httpx.get(f"{served.base_url}/v1/occurrences", headers=AUTH).json()["total"] == 0


def test_keys_size_and_json_are_checked_before_storing(served: ServedIngest) -> None:
    body = canonical_json(built_batch()).encode()
    missing = httpx.post(f"{served.base_url}/v1/capture-batches", content=body)
    assert (missing.status_code, refusal(missing)["rule"]) == (401, "auth")
    wrong = post_batch(served, body, authorization="Bearer nope")
    assert (wrong.status_code, refusal(wrong)["field"]) == (401, "authorization")
    assert httpx.get(f"{served.base_url}/v1/occurrences").status_code == 401
    large = post_batch(served, b" " * 300_000)
    assert (large.status_code, refusal(large)["rule"]) == (413, "body-size")
    bomb = post_batch(served, gzip.compress(b" " * 300_000), **{"content-encoding": "gzip"})
    assert (bomb.status_code, refusal(bomb)["rule"]) == (413, "body-size")
    broken = post_batch(served, b'{"version": 1,')
    assert (broken.status_code, refusal(broken)["rule"]) == (400, "json")
    zipped = post_batch(served, gzip.compress(body), **{"content-encoding": "gzip"})
    assert zipped.status_code == 202


def _otlp_request(status: int, *, kind: int = 2) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def attribute(key: str, value: str | int) -> KeyValue:
        if isinstance(value, int):
            return KeyValue(key=key, value=AnyValue(int_value=value))
        return KeyValue(key=key, value=AnyValue(string_value=value))

    span = Span(
        trace_id=bytes(range(16)),
        span_id=bytes(range(8)),
        name="POST /orders/{id}",
        kind=kind,  # type: ignore[arg-type]
        attributes=[
            attribute("http.request.method", "POST"),
            attribute("http.route", "/orders/{id}"),
            attribute("http.response.status_code", status),
        ],
    )
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[
                        attribute("service.name", "orders-api"),
                        attribute("service.version", "2.0.0"),
                    ]
                ),
                scope_spans=[ScopeSpans(spans=[span])],
            )
        ]
    )
    return request.SerializeToString()


def test_otlp_failing_server_spans_become_occurrences_without_exchanges(
    served: ServedIngest,
) -> None:
    url = f"{served.base_url}/v1/traces"
    protobuf = {**AUTH, "content-type": "application/x-protobuf"}
    for body, extra in (
        (_otlp_request(200), {}),
        (_otlp_request(500, kind=3), {}),  # a CLIENT span is not the operation
        (gzip.compress(_otlp_request(503)), {"content-encoding": "gzip"}),
        (_otlp_request(503), {}),  # the same span again (a collector retry)
    ):
        response = httpx.post(url, content=body, headers={**protobuf, **extra})
        assert (response.status_code, response.content) == (200, b"")
    [occurrence] = httpx.get(f"{served.base_url}/v1/occurrences", headers=AUTH).json()[
        "occurrences"
    ]
    assert {
        k: occurrence[k]
        for k in ("operation", "signature", "status", "count", "traces", "hasExchanges", "build")
    } == {
        "operation": "POST /orders/{id}",
        "signature": "backend-server-error:POST /orders/{id}",
        "status": 503,
        "count": 1,
        "traces": 1,
        "hasExchanges": False,
        "build": "2.0.0",
    }
    capsule = httpx.get(
        f"{served.base_url}/v1/occurrences/{occurrence['id']}/capsule", headers=AUTH
    )
    assert (capsule.status_code, refusal(capsule)["rule"]) == (409, "no-exchanges")
    broken = httpx.post(url, content=b"\xff\x00garbage", headers=protobuf)
    assert (broken.status_code, refusal(broken)["rule"]) == (400, "otlp")
    wrong_type = httpx.post(
        url, content=b"{}", headers={**AUTH, "content-type": "application/json"}
    )
    assert wrong_type.status_code == 415


def test_cli_errors_exit_2_with_one_clear_line(served: ServedIngest) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli_command(*args),
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": ""},
        )

    unknown = run("show", "occ_nothing", "--ingest", served.base_url, "--api-key", KEY)
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert unknown.stderr == "reproit-otel show: no occurrence 'occ_nothing'\n"
    refused = run("list", "--ingest", served.base_url, "--api-key", "wrong")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"reproit-otel list: the ingest at {served.base_url} refused the API key; pass "
        "--api-key or set REPROIT_API_KEY to a key the ingest accepts\n"
    )
    down = down_url().rsplit("/v1/", 1)[0]
    gone = run("pull", "occ_x", "--ingest", down)
    assert gone.returncode == 2
    assert gone.stderr.startswith(f"reproit-otel pull: no ingest answers at {down} (")
    assert gone.stderr.endswith(
        "start one with `reproit-otel serve` or point --ingest (or REPROIT_INGEST_URL) at it\n"
    )
