"""reproit-otel: production failures made reproducible from the OpenTelemetry a service runs.

The public names are re-exported here; each lives in a module named after what it owns.
They are loaded on first use, so ``import reproit_otel`` stays cheap for the
``opentelemetry-instrument`` start-up path and the CLI.

Wire core (pure, PROTOCOL section 10): :func:`canonical_json`, :func:`ordered_json`,
:func:`redact`, :func:`is_secret_key`, :func:`bounded_body`, :func:`bounded_headers`,
:class:`TraceContext`, :func:`trace_context_from_headers`, :class:`BackendTrace`,
:class:`TraceError`, :func:`reset_sequence`, :func:`marked_oracle`, :func:`selection`,
:func:`http_input`, :func:`build_capture_batch`, :func:`capture_payload`,
:class:`ReplaySession`, :func:`serve_http`, :func:`serve_pg`, :func:`matches`,
:func:`body_delta`, :func:`url_path_and_query`, :func:`operation_key`, :class:`ReplayRNG`.

Runtime: :func:`install` (wire the processor and recorders into a ``TracerProvider``),
:func:`boundary` (record and replay any dependency call as an outcome), :func:`install_replay`
and the replay instrumentors, the WSGI/ASGI middlewares and the :class:`Uploader`.
Testing: :func:`assert_fixed` (a regression test made from a captured failure).
``docs/api.md`` lists every public name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from reproit_otel._version import __version__

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "AGENT_ORACLES": "reproit_otel.wire.trace",
    "BackendTrace": "reproit_otel.wire.trace",
    "BatchValidationError": "reproit_otel.wire.batch_vocabulary",
    "CAPTURE_FORMAT": "reproit_otel.wire.capsule",
    "CAPTURE_VERSION": "reproit_otel.wire.capsule",
    "CapsuleError": "reproit_otel.errors",
    "CaptureEnvironment": "reproit_otel.wire.batch",
    "CaptureSettings": "reproit_otel.wire.batch",
    "ConfigurationError": "reproit_otel.errors",
    "DivergedError": "reproit_otel.errors",
    "HttpxReplayInstrumentor": "reproit_otel.instrumentation.httpx",
    "MissingFixtureError": "reproit_otel.errors",
    "ORACLE_MARKER_RESOURCE": "reproit_otel.wire.trace",
    "PLACEHOLDER_KEY": "reproit_otel.redaction.core",
    "Psycopg2ReplayInstrumentor": "reproit_otel.instrumentation.psycopg2",
    "PsycopgReplayInstrumentor": "reproit_otel.instrumentation.psycopg",
    "RecordedPgError": "reproit_otel.errors",
    "RegressionFailed": "reproit_otel.errors",
    "ReplayRNG": "reproit_otel.wire.rng",
    "ReplaySession": "reproit_otel.wire.replay",
    "ReproitASGIMiddleware": "reproit_otel.instrumentation.asgi",
    "ReproitConfig": "reproit_otel.config",
    "ReproitError": "reproit_otel.errors",
    "ReproitReplayInstrumentor": "reproit_otel.replay",
    "ReproitSpanProcessor": "reproit_otel.capture.processor",
    "ReproitWSGIMiddleware": "reproit_otel.instrumentation.wsgi",
    "RequestsReplayInstrumentor": "reproit_otel.instrumentation.requests",
    "SECRET_PARTS": "reproit_otel.redaction.core",
    "SERVER_ERROR_ORACLE": "reproit_otel.wire.trace",
    "ServedResponse": "reproit_otel.wire.replay",
    "StreamBoundaries": "reproit_otel.wire.bounds",
    "ToolCallError": "reproit_otel.errors",
    "TraceContext": "reproit_otel.wire.trace",
    "TraceError": "reproit_otel.errors",
    "UNSET": "reproit_otel.wire._js",
    "Uploader": "reproit_otel.capture.uploader",
    "assert_fixed": "reproit_otel.testing",
    "body_delta": "reproit_otel.wire.matching",
    "boundary": "reproit_otel.instrumentation.invoke",
    "bounded_body": "reproit_otel.wire.bounds",
    "bounded_headers": "reproit_otel.wire.bounds",
    "build_capture_batch": "reproit_otel.wire.batch",
    "canonical_json": "reproit_otel.wire.canonical",
    "capsule_from_batch": "reproit_otel.wire.capsule",
    "capsule_text": "reproit_otel.wire.capsule",
    "capture_eligibility": "reproit_otel.wire.batch",
    "capture_payload": "reproit_otel.wire.payload",
    "current_test_trace": "reproit_otel.ci",
    "divergence_line": "reproit_otel.wire.replay",
    "divergence_report": "reproit_otel.wire.replay",
    "http_input": "reproit_otel.wire.inputs",
    "identity": "reproit_otel.wire.trace",
    "install": "reproit_otel.bootstrap",
    "install_replay": "reproit_otel.replay",
    "is_secret_key": "reproit_otel.redaction.core",
    "is_token": "reproit_otel.wire.batch",
    "load_capsule": "reproit_otel.wire.capsule",
    "load_config": "reproit_otel.config",
    "marked_oracle": "reproit_otel.wire.trace",
    "matches": "reproit_otel.wire.matching",
    "operation_key": "reproit_otel.wire.matching",
    "ordered_json": "reproit_otel.wire.canonical",
    "redact": "reproit_otel.redaction.core",
    "redact_url": "reproit_otel.redaction.core",
    "reset_sequence": "reproit_otel.wire.trace",
    "scrub_secret_values": "reproit_otel.redaction.core",
    "selection": "reproit_otel.wire.inputs",
    "serve_http": "reproit_otel.wire.replay",
    "serve_pg": "reproit_otel.wire.replay",
    "trace_context_from_headers": "reproit_otel.wire.trace",
    "try_json": "reproit_otel.wire.matching",
    "uninstall": "reproit_otel.bootstrap",
    "uninstall_replay": "reproit_otel.replay",
    "url_path_and_query": "reproit_otel.wire.urls",
    "validate_capsule": "reproit_otel.wire.capsule",
    "validate_capture_batch": "reproit_otel.wire.validate",
}


__all__ = [
    "AGENT_ORACLES",
    "CAPTURE_FORMAT",
    "CAPTURE_VERSION",
    "ORACLE_MARKER_RESOURCE",
    "PLACEHOLDER_KEY",
    "SECRET_PARTS",
    "SERVER_ERROR_ORACLE",
    "UNSET",
    "BackendTrace",
    "BatchValidationError",
    "CapsuleError",
    "CaptureEnvironment",
    "CaptureSettings",
    "ConfigurationError",
    "DivergedError",
    "HttpxReplayInstrumentor",
    "MissingFixtureError",
    "Psycopg2ReplayInstrumentor",
    "PsycopgReplayInstrumentor",
    "RecordedPgError",
    "RegressionFailed",
    "ReplayRNG",
    "ReplaySession",
    "ReproitASGIMiddleware",
    "ReproitConfig",
    "ReproitError",
    "ReproitReplayInstrumentor",
    "ReproitSpanProcessor",
    "ReproitWSGIMiddleware",
    "RequestsReplayInstrumentor",
    "ServedResponse",
    "StreamBoundaries",
    "ToolCallError",
    "TraceContext",
    "TraceError",
    "Uploader",
    "__version__",
    "assert_fixed",
    "body_delta",
    "boundary",
    "bounded_body",
    "bounded_headers",
    "build_capture_batch",
    "canonical_json",
    "capsule_from_batch",
    "capsule_text",
    "capture_eligibility",
    "capture_payload",
    "current_test_trace",
    "divergence_line",
    "divergence_report",
    "http_input",
    "identity",
    "install",
    "install_replay",
    "is_secret_key",
    "is_token",
    "load_capsule",
    "load_config",
    "marked_oracle",
    "matches",
    "operation_key",
    "ordered_json",
    "redact",
    "redact_url",
    "reset_sequence",
    "scrub_secret_values",
    "selection",
    "serve_http",
    "serve_pg",
    "trace_context_from_headers",
    "try_json",
    "uninstall",
    "uninstall_replay",
    "url_path_and_query",
    "validate_capsule",
    "validate_capture_batch",
]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'reproit_otel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - static types of the lazily loaded names
    from reproit_otel.bootstrap import (
        install,
        uninstall,
    )
    from reproit_otel.capture.processor import (
        ReproitSpanProcessor,
    )
    from reproit_otel.capture.uploader import (
        Uploader,
    )
    from reproit_otel.ci import (
        current_test_trace,
    )
    from reproit_otel.config import (
        ReproitConfig,
        load_config,
    )
    from reproit_otel.errors import (
        CapsuleError,
        ConfigurationError,
        DivergedError,
        MissingFixtureError,
        RecordedPgError,
        RegressionFailed,
        ReproitError,
        ToolCallError,
        TraceError,
    )
    from reproit_otel.instrumentation.asgi import (
        ReproitASGIMiddleware,
    )
    from reproit_otel.instrumentation.httpx import (
        HttpxReplayInstrumentor,
    )
    from reproit_otel.instrumentation.invoke import (
        boundary,
    )
    from reproit_otel.instrumentation.psycopg import (
        PsycopgReplayInstrumentor,
    )
    from reproit_otel.instrumentation.psycopg2 import (
        Psycopg2ReplayInstrumentor,
    )
    from reproit_otel.instrumentation.requests import (
        RequestsReplayInstrumentor,
    )
    from reproit_otel.instrumentation.wsgi import (
        ReproitWSGIMiddleware,
    )
    from reproit_otel.redaction.core import (
        PLACEHOLDER_KEY,
        SECRET_PARTS,
        is_secret_key,
        redact,
        redact_url,
        scrub_secret_values,
    )
    from reproit_otel.replay import (
        ReproitReplayInstrumentor,
        install_replay,
        uninstall_replay,
    )
    from reproit_otel.testing import (
        assert_fixed,
    )
    from reproit_otel.wire._js import (
        UNSET,
    )
    from reproit_otel.wire.batch import (
        CaptureEnvironment,
        CaptureSettings,
        build_capture_batch,
        capture_eligibility,
        is_token,
    )
    from reproit_otel.wire.batch_vocabulary import (
        BatchValidationError,
    )
    from reproit_otel.wire.bounds import (
        StreamBoundaries,
        bounded_body,
        bounded_headers,
    )
    from reproit_otel.wire.canonical import (
        canonical_json,
        ordered_json,
    )
    from reproit_otel.wire.capsule import (
        CAPTURE_FORMAT,
        CAPTURE_VERSION,
        capsule_from_batch,
        capsule_text,
        load_capsule,
        validate_capsule,
    )
    from reproit_otel.wire.inputs import (
        http_input,
        selection,
    )
    from reproit_otel.wire.matching import (
        body_delta,
        matches,
        operation_key,
        try_json,
    )
    from reproit_otel.wire.payload import (
        capture_payload,
    )
    from reproit_otel.wire.replay import (
        ReplaySession,
        ServedResponse,
        divergence_line,
        divergence_report,
        serve_http,
        serve_pg,
    )
    from reproit_otel.wire.rng import (
        ReplayRNG,
    )
    from reproit_otel.wire.trace import (
        AGENT_ORACLES,
        ORACLE_MARKER_RESOURCE,
        SERVER_ERROR_ORACLE,
        BackendTrace,
        TraceContext,
        identity,
        marked_oracle,
        reset_sequence,
        trace_context_from_headers,
    )
    from reproit_otel.wire.urls import (
        url_path_and_query,
    )
    from reproit_otel.wire.validate import (
        validate_capture_batch,
    )
