"""The OTLP/HTTP trace receiver: failing server spans become occurrences without exchanges.

An OpenTelemetry Collector (or any OTLP exporter) can send traces to ``POST /v1/traces`` as
``application/x-protobuf``, gzip-compressed or not, exactly as the ``otlphttp`` exporter does.
Every span of kind SERVER whose HTTP status (``http.response.status_code``, or the older
``http.status_code``) is 500 or more is read as one failure:

* ``operation``: ``<method> <route>`` from ``http.request.method``/``http.method`` and
  ``http.route``, else the path of ``url.path``/``http.target`` (query dropped), else the span
  name;
* ``project``: the resource ``service.name``;
* ``build``: the resource ``service.version``; ``commit``: ``vcs.ref.head.revision`` or
  ``vcs.revision`` when a resource carries one.

Such an occurrence has no capsule: a span does not carry the exchanges replay needs. It tells
which failures happen and how often; the reproit-otel SDK in the service supplies the capsule.
The protobuf classes come from ``opentelemetry-proto``, imported only when a trace arrives.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from reproit_otel.ingest.facts import FailureFacts, server_span_facts
from reproit_otel.ingest.numbers import ascii_int

SPAN_KIND_SERVER = 2
FAILING_STATUS = 500


class OtlpDecodeError(ValueError):
    """The body is not a (possibly gzipped) ``ExportTraceServiceRequest``."""


@dataclass(frozen=True)
class FailingSpan:
    """A failing server span found in an OTLP request."""

    trace_id: str
    span_id: str
    facts: FailureFacts


def _attribute_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    return getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _attribute_value(item.value) for item in items}


def _status_of(attributes: dict[str, Any]) -> int | None:
    """The span's HTTP status; raises :class:`OtlpDecodeError` for one that is no status."""
    for key in ("http.response.status_code", "http.status_code"):
        value = attributes.get(key)
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535:
            return value
        status = ascii_int(value, high=65535) if isinstance(value, str) else None
        if status is None:
            raise OtlpDecodeError(
                f"the span attribute {key} is {value!r}: an HTTP status is an integer from 0 "
                "to 65535 (or its ASCII digits)"
            )
        return status
    return None


def _operation_of(name: str, attributes: dict[str, Any]) -> str:
    method = attributes.get("http.request.method") or attributes.get("http.method")
    route = attributes.get("http.route")
    if not isinstance(route, str) or not route:
        target = attributes.get("url.path") or attributes.get("http.target")
        route = target.split("?", 1)[0] if isinstance(target, str) and target else None
    if isinstance(method, str) and method and route:
        return f"{method} {route}"
    return name or "unknown operation"


def decode_request(body: bytes, content_encoding: str | None) -> Any:
    """Parse an ``ExportTraceServiceRequest``; raises :class:`OtlpDecodeError`."""
    # opentelemetry-proto (and protobuf) load only when a trace arrives.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    encoding = (content_encoding or "").strip().lower()
    if encoding == "gzip":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as error:
            raise OtlpDecodeError(f"the gzip body could not be decompressed: {error}") from error
    elif encoding not in ("", "identity"):
        raise OtlpDecodeError(f"unsupported content-encoding {encoding!r}; send gzip or none")
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as error:  # protobuf raises its own DecodeError
        raise OtlpDecodeError(f"the body is not an ExportTraceServiceRequest: {error}") from error
    return request


def failing_server_spans(request: Any) -> Iterator[FailingSpan]:
    """Every SERVER span with an HTTP status of 500 or more, with its occurrence facts."""
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        project = resource.get("service.name")
        project_id = project if isinstance(project, str) and project else "unknown_service"
        version = resource.get("service.version")
        commit = resource.get("vcs.ref.head.revision") or resource.get("vcs.revision")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if span.kind != SPAN_KIND_SERVER:
                    continue
                attributes = _attributes(span.attributes)
                status = _status_of(attributes)
                if status is None or status < FAILING_STATUS:
                    continue
                yield FailingSpan(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    facts=server_span_facts(
                        project_id=project_id,
                        operation=_operation_of(span.name, attributes),
                        status=status,
                        build=version if isinstance(version, str) and version else None,
                        commit=commit if isinstance(commit, str) and commit else None,
                    ),
                )
