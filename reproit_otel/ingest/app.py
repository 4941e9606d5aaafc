"""The ingest HTTP API, a Starlette application (served by uvicorn, see ``reproit-otel serve``).

Routes (every ``/v1`` route needs ``Authorization: Bearer <key>``):

``POST /v1/capture-batches``
    A ``capture-batch-v1`` as ``application/json`` (``content-encoding: gzip`` accepted; any
    other content type is refused with ``415``, so a page of another site cannot post one
    without the browser asking first). Answers ``202``
    ``{"accepted": true, "occurrenceId": ..., "duplicate": false, "warnings": [...]}``;
    ``401`` without a valid key; ``413`` over ``max_body_bytes`` (before or after
    decompression); ``400`` when the body is not JSON, breaks a rule of PROTOCOL section 5.8
    or carries no signed failure observation (:mod:`reproit_otel.ingest.batch_check`).
    Every refusal is ``{"error": {"rule": ..., "field": ..., "message": ...}}``; a refused
    batch also gets ``"problems"``, every rule it breaks.
``PUT /v1/artifacts/{id}``
    The bytes of a content-addressed artifact a batch will name (a heavy operation's whole
    capsule, media type ``application/vnd.reproit.backend-capture+json``), sent before that
    batch, with the same keys, size limit and encodings as batches. ``id`` is ``sha256:`` and
    the 64 hex digits of the bytes' SHA-256. Answers ``201`` ``{"stored": true, "id", "bytes"}``,
    or ``200`` with ``"stored": false`` when the same artifact is already stored (it is stored
    once); ``400`` when the bytes do not hash to ``id`` (``artifact-hash``) or are not a capsule;
    ``415`` for another media type. The bytes follow the batch route's input rules (UTF-8
    JSON, no ``NaN``/``Infinity``, no lone surrogate, nesting the parser can read: ``400``
    otherwise). Over the artifact quota (:data:`DEFAULT_MAX_ARTIFACT_BYTES` overall,
    :data:`DEFAULT_MAX_ARTIFACT_BYTES_PER_KEY` per ingest key) the answer is ``429
    artifact-quota``. An artifact is bound to the batch that names it: a batch naming a stored
    capsule artifact of another operation, trigger or oracle is refused (``400
    artifact-binding``), and a capsule is only ever read from an artifact bound this way.
``GET /v1/occurrences?operation=&status=&project=&exception=&limit=&offset=``
    ``{"occurrences": [...], "total": N, "limit": L, "offset": O, "nextOffset": O2 | null}``,
    most recently seen first (``limit`` 1..500, default 50); ``exception`` keeps those with a
    failure of that exception kind (``ingest/failure_kinds.py``).
``GET /v1/occurrences/{id}``
    One occurrence, ``404`` when unknown.
``GET /v1/occurrences/{id}/batches``
    ``{"batches": [{"batch": N, "batchId", "received", "kept", "exception"}, ...]}``: the
    batches the occurrence received, most recent first (at most 200); ``batch`` is the number
    ``capsule?batch=N`` takes, ``kept`` whether retention kept its body.
``GET /v1/occurrences/{id}/capsule?batch=N``
    The section 5.9 projection of the occurrence's latest batch (or of batch ``N``), as
    canonical JSON (the capsule file encoding of section 5.10); for a batch naming a stored
    capsule artifact (a heavy operation), that artifact: the whole capsule. ``404`` for a
    batch the occurrence does not have, ``409`` for an occurrence only seen over OTLP (it
    carries no exchanges), ``410`` for a batch whose body retention pruned, ``422`` when the
    batch projects to nothing.
``POST /v1/traces``
    OTLP/HTTP protobuf (gzip or not); failing server spans become occurrences
    (:mod:`reproit_otel.ingest.otlp`). Answers an empty ``ExportTraceServiceResponse``.
``GET /healthz``
    ``{"status": "ok"}``, without a key, for probes.

A store that cannot write or read (a full disk, a corrupt or unreachable database) makes any
route answer ``503 storage`` with the JSON error shape and no traceback; nothing acknowledged
is lost (a batch is acknowledged only once its transaction committed).
``GET /`` and the other pages of :mod:`reproit_otel.ingest.web`
    The web page: occurrences, exchanges, the replay command (``web=False`` leaves it out).

Keys: ``api_keys`` may send and read; ``read_keys`` may only read (the ``GET`` routes and the
web page). With an empty key set the ingest is open (a developer's laptop: every request is
accepted, with or without a bearer token); give keys for anything shared. Reading needs a key
as soon as any key, ingest or read-only, is configured. Store calls are synchronous and run
in the thread pool.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import sqlite3
import zlib
from collections.abc import Callable, Collection
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reproit_otel.errors import CapsuleError
from reproit_otel.ingest.accesslog import AccessLogMiddleware
from reproit_otel.ingest.artifact_store import ArtifactQuota, binding_problem
from reproit_otel.ingest.batch_check import check_batch, problem_json
from reproit_otel.ingest.facts import (
    BatchFactError,
    FailureFacts,
    UnsignedBatchError,
    batch_facts,
)
from reproit_otel.ingest.guard import RequestGuard
from reproit_otel.ingest.numbers import ascii_int
from reproit_otel.ingest.otlp import OtlpDecodeError, decode_request, failing_server_spans
from reproit_otel.ingest.store import MAX_PAGE, Store
from reproit_otel.wire._js import has_lone_surrogate
from reproit_otel.wire.artifacts import (
    ARTIFACT_ID_PATTERN,
    CAPSULE_MEDIA_TYPE,
    artifact_id,
    capsule_artifact_id,
)
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.capsule import capsule_bytes, capsule_from_batch, load_capsule

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_ARTIFACT_BYTES = 2 * 1024 * 1024 * 1024
"""Bytes of artifacts the ingest keeps in all."""
DEFAULT_MAX_ARTIFACT_BYTES_PER_KEY = 512 * 1024 * 1024
"""Bytes of artifacts one ingest key may have stored."""
_log = logging.getLogger("reproit_otel.ingest")
_MAX_OFFSET = 2**31 - 1  # past any real listing, within every database's OFFSET

Handler = Callable[[Request], Any]


class _Refused(Exception):
    def __init__(
        self,
        status: int,
        rule: str,
        field: str,
        message: str,
        *,
        problems: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.problems = problems
        self.status = status
        self.rule = rule
        self.field = field
        self.message = message

    def response(self) -> JSONResponse:
        headers = {"www-authenticate": "Bearer"} if self.status == 401 else None
        body: dict[str, Any] = {
            "error": {"rule": self.rule, "field": self.field, "message": self.message}
        }
        if self.problems is not None:
            body["problems"] = self.problems
        return JSONResponse(body, status_code=self.status, headers=headers)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parsed_json(raw: bytes, what: str) -> Any:
    """``raw`` as JSON under the input rules every route shares; raises :class:`_Refused`."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as error:
        raise _Refused(400, "json", "body", f"the body is not UTF-8 JSON: {error}") from error
    except RecursionError as error:
        raise _Refused(400, "json", "body", f"the body nests too deeply to be {what}") from error
    if has_lone_surrogate(value):
        raise _Refused(
            400,
            "json",
            "body",
            "a string holds a lone UTF-16 surrogate escape (\\udxxx); text must be valid Unicode",
        )
    return value


# What a store raises when it cannot write or read: a full disk, a corrupt database file, a
# database that went away. psycopg2's errors are matched by module (it is optional).
_STORAGE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, OSError, MemoryError)


def _is_storage_error(error: BaseException) -> bool:
    if isinstance(error, _STORAGE_ERRORS):
        return True
    return type(error).__module__.startswith(("psycopg2", "psycopg"))


def _storage_refusal(error: BaseException) -> JSONResponse:
    _log.error("reproit-otel ingest: the store failed: %s: %s", type(error).__name__, error)
    return JSONResponse(
        {
            "error": {
                "rule": "storage",
                "field": "store",
                "message": "the ingest cannot store or read right now (disk full or database "
                "unavailable); nothing was acknowledged, send it again later",
            }
        },
        status_code=503,
        headers={"retry-after": "30"},
    )


class IngestApp:
    """The route handlers bound to one store, key set and body limit."""

    def __init__(
        self,
        store: Store,
        *,
        api_keys: Collection[str] = (),
        read_keys: Collection[str] = (),
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        artifact_quota: ArtifactQuota | None = None,
    ) -> None:
        self.store = store
        self.api_keys = tuple(api_keys)
        self.read_keys = tuple(dict.fromkeys((*self.api_keys, *read_keys)))
        self.max_body_bytes = max_body_bytes
        self.artifact_quota = artifact_quota or ArtifactQuota(
            DEFAULT_MAX_ARTIFACT_BYTES, DEFAULT_MAX_ARTIFACT_BYTES_PER_KEY
        )

    # -- helpers ---------------------------------------------------------------------------

    def _authorize(self, request: Request, *, read: bool = False) -> None:
        keys = self.read_keys if read else self.api_keys
        if not keys:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _Refused(
                401, "auth", "authorization", "send the ingest key as 'Authorization: Bearer KEY'"
            )
        if not any(hmac.compare_digest(token.encode(), key.encode()) for key in keys):
            raise _Refused(401, "auth", "authorization", "the bearer key is not accepted here")

    def _too_large(self, where: str) -> _Refused:
        return _Refused(
            413, "body-size", "body", f"the {where} exceeds {self.max_body_bytes} bytes"
        )

    async def _body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        size_said = ascii_int(declared) if declared else None
        if declared and (size_said is None or size_said > self.max_body_bytes):
            raise self._too_large("body")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large("body")
            chunks.append(chunk)
        return b"".join(chunks)

    def _decompress(self, body: bytes, encoding: str | None) -> bytes:
        encoding = (encoding or "").strip().lower()
        if encoding in ("", "identity"):
            return body
        if encoding != "gzip":
            raise _Refused(
                400, "content-encoding", "content-encoding", f"unsupported encoding {encoding!r}"
            )
        try:
            decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data = decompressor.decompress(body, self.max_body_bytes + 1)
        except zlib.error as error:
            raise _Refused(400, "gzip", "body", f"the gzip body is broken: {error}") from error
        if len(data) > self.max_body_bytes:
            raise self._too_large("decompressed body")
        return data

    # -- routes ----------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def post_capture_batch(self, request: Request) -> Response:
        self._authorize(request)
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            # A page of another site can POST text/plain without asking first; JSON it cannot.
            raise _Refused(
                415,
                "content-type",
                "content-type",
                "send a capture batch as application/json (gzip it with content-encoding: gzip)",
            )
        body = await self._body(request)
        # Decompressing, parsing, checking and canonicalising a batch of megabytes takes
        # hundreds of milliseconds: off the event loop, so health probes and other clients
        # are answered meanwhile.
        batch, facts, body_text, warnings = await run_in_threadpool(
            self._checked_batch, body, request.headers.get("content-encoding")
        )
        await run_in_threadpool(self._checked_binding, batch)
        result = await run_in_threadpool(self.store.record_batch, batch, facts, body=body_text)
        return JSONResponse(
            {
                "accepted": True,
                "occurrenceId": result.occurrence_id,
                "duplicate": result.duplicate,
                "warnings": warnings,
            },
            status_code=202,
        )

    def _checked_batch(
        self, body: bytes, encoding: str | None
    ) -> tuple[Any, FailureFacts, str, list[dict[str, str]]]:
        """The batch, its facts, its canonical text and its warnings; raises :class:`_Refused`."""
        raw = self._decompress(body, encoding)
        batch = _parsed_json(raw, "a capture batch")
        checked = check_batch(batch)
        if checked.refused:
            first = checked.refused[0]
            raise _Refused(
                400,
                first.rule,
                first.field,
                first.message,
                problems=[problem_json(problem) for problem in checked.refused],
            )
        try:
            facts = batch_facts(batch)
        except UnsignedBatchError as error:
            raise _Refused(400, "observation", "events", str(error)) from error
        except BatchFactError as error:
            raise _Refused(400, error.rule, error.field, str(error)) from error
        warnings = [problem_json(problem) for problem in checked.warnings]
        return batch, facts, canonical_json(batch), warnings

    def _checked_binding(self, batch: Any) -> None:
        """Refuse a batch naming a stored capsule artifact that is not its own capsule."""
        named = capsule_artifact_id(batch)
        if named is None:
            return
        artifact = self.store.get_artifact(named)
        if artifact is None:
            return  # not stored (yet): it is checked again whenever the capsule is read
        problem = binding_problem(batch, artifact.body)
        if problem is not None:
            raise _Refused(400, "artifact-binding", "artifacts", problem)

    async def put_artifact(self, request: Request) -> Response:
        self._authorize(request)
        identifier = request.path_params["artifact_id"]
        if ARTIFACT_ID_PATTERN.fullmatch(identifier) is None:
            raise _Refused(
                400, "artifact", "id", "an artifact id is sha256: and 64 lowercase hex digits"
            )
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != CAPSULE_MEDIA_TYPE:
            return JSONResponse(
                {
                    "error": {
                        "rule": "content-type",
                        "field": "content-type",
                        "message": f"this ingest takes artifacts of type {CAPSULE_MEDIA_TYPE}",
                    }
                },
                status_code=415,
            )
        body = await self._body(request)
        raw = await run_in_threadpool(  # megabytes to inflate, hash and parse: off the loop
            self._checked_artifact, body, request.headers.get("content-encoding"), identifier
        )
        owner = _key_digest(request.headers.get("authorization", ""))
        stored = await run_in_threadpool(
            self.store.store_artifact,
            identifier,
            media_type,
            raw,
            owner=owner,
            quota=self.artifact_quota,
        )
        if stored is None:
            raise _Refused(
                429,
                "artifact-quota",
                "body",
                "the ingest's artifact quota is used up (for this key or in all); retention "
                "frees the space of artifacts no kept batch names",
            )
        return JSONResponse(
            {"stored": stored, "id": identifier, "bytes": len(raw)},
            status_code=201 if stored else 200,
        )

    def _checked_artifact(self, body: bytes, encoding: str | None, identifier: str) -> bytes:
        """The artifact's bytes, checked against its id and read as a capsule."""
        raw = self._decompress(body, encoding)
        if artifact_id(raw) != identifier:
            raise _Refused(
                400,
                "artifact-hash",
                "body",
                f"the bytes hash to {artifact_id(raw)}, not {identifier}: refused as altered",
            )
        _parsed_json(raw, "a capsule")
        try:
            load_capsule(raw)
        except (CapsuleError, RecursionError) as error:
            raise _Refused(400, "artifact", "body", f"not a capsule: {error}") from error
        return raw

    async def post_traces(self, request: Request) -> Response:
        self._authorize(request)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-protobuf":
            return Response(
                json.dumps(
                    {
                        "error": {
                            "rule": "content-type",
                            "field": "content-type",
                            "message": "send OTLP traces as application/x-protobuf",
                        }
                    }
                ),
                status_code=415,
                media_type="application/json",
            )
        body = await self._body(request)
        encoding = request.headers.get("content-encoding")
        try:
            spans = await run_in_threadpool(
                lambda: _failing_spans(self._decompress(body, encoding))
            )
        except OtlpDecodeError as error:
            raise _Refused(400, "otlp", "body", str(error)) from error
        if spans:
            await run_in_threadpool(self.store.record_server_spans, spans)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        return Response(
            ExportTraceServiceResponse().SerializeToString(),
            media_type="application/x-protobuf",
        )

    async def list_occurrences(self, request: Request) -> Response:
        self._authorize(request, read=True)
        query = request.query_params
        numbers: dict[str, int | None] = {}
        for name, default, high in (
            ("status", None, 65535),
            ("limit", "50", 10**9),
            ("offset", "0", _MAX_OFFSET),
        ):
            text = query.get(name, default)
            numbers[name] = None if text is None else ascii_int(text, high=high)
            if text is not None and numbers[name] is None:
                raise _Refused(400, "query", name, f"{name} must be ASCII digits from 0 to {high}")
        status, limit, offset = numbers["status"], numbers["limit"], numbers["offset"]
        assert limit is not None and offset is not None
        page = await run_in_threadpool(
            lambda: self.store.list_occurrences(
                operation=query.get("operation") or None,
                status=status,
                project_id=query.get("project") or None,
                exception_kind=query.get("exception") or None,
                limit=min(MAX_PAGE, limit),
                offset=offset,
            )
        )
        following = page.offset + len(page.items)
        return JSONResponse(
            {
                "occurrences": [item.to_json() for item in page.items],
                "total": page.total,
                "limit": page.limit,
                "offset": page.offset,
                "nextOffset": following if following < page.total else None,
            }
        )

    async def get_occurrence(self, request: Request) -> Response:
        self._authorize(request, read=True)
        occurrence_id = request.path_params["occurrence_id"]
        occurrence = await run_in_threadpool(self.store.get_occurrence, occurrence_id)
        if occurrence is None:
            raise _Refused(404, "unknown-occurrence", "id", f"no occurrence {occurrence_id!r}")
        return JSONResponse(occurrence.to_json())

    async def get_batches(self, request: Request) -> Response:
        self._authorize(request, read=True)
        occurrence_id = request.path_params["occurrence_id"]
        occurrence = await run_in_threadpool(self.store.get_occurrence, occurrence_id)
        if occurrence is None:
            raise _Refused(404, "unknown-occurrence", "id", f"no occurrence {occurrence_id!r}")
        batches = await run_in_threadpool(self.store.occurrence_batches, occurrence_id)
        return JSONResponse({"batches": [batch.to_json() for batch in batches]})

    async def get_capsule(self, request: Request) -> Response:
        self._authorize(request, read=True)
        occurrence_id = request.path_params["occurrence_id"]
        occurrence = await run_in_threadpool(self.store.get_occurrence, occurrence_id)
        if occurrence is None:
            raise _Refused(404, "unknown-occurrence", "id", f"no occurrence {occurrence_id!r}")
        wanted = request.query_params.get("batch")
        if wanted is not None:
            seq = ascii_int(wanted, high=2**63 - 1)
            if seq is None:
                raise _Refused(400, "query", "batch", "batch must be ASCII digits (see show)")
            found, batch = await run_in_threadpool(self.store.batch_of, occurrence_id, seq)
            if not found:
                raise _Refused(
                    404, "unknown-batch", "batch", f"occurrence {occurrence_id} has no batch {seq}"
                )
            if batch is None:
                raise _Refused(
                    410,
                    "retention",
                    "batch",
                    f"batch {seq} of occurrence {occurrence_id} was pruned by the ingest's "
                    "retention (--retain-batches, --retain-days)",
                )
        else:
            batch = await run_in_threadpool(self.store.latest_batch, occurrence_id)
        if batch is None and occurrence.batch_count:
            raise _Refused(
                410,
                "retention",
                "id",
                f"the batches of occurrence {occurrence_id} were pruned by the ingest's retention "
                "(--retain-batches, --retain-days); its counts are kept, its capsule is not",
            )
        if batch is None:
            raise _Refused(
                409,
                "no-exchanges",
                "id",
                f"occurrence {occurrence_id} was only seen as an OpenTelemetry span; it carries "
                "no exchanges, so there is no capsule. Install reproit-otel in the service to "
                "capture one.",
            )
        whole = await run_in_threadpool(self.store.whole_capsule, batch)
        if whole is not None:  # a heavy operation: its whole capsule
            return Response(whole, media_type="application/json")
        capsule = capsule_from_batch(batch)
        if capsule is None:
            raise _Refused(
                422, "projection", "id", "the stored batch does not project to a capsule"
            )
        return Response(capsule_bytes(capsule), media_type="application/json")


def _failing_spans(raw: bytes) -> list[tuple[FailureFacts, str, str]]:
    otlp_request = decode_request(raw, None)
    return [
        (span.facts, span.trace_id, span.span_id) for span in failing_server_spans(otlp_request)
    ]


def _key_digest(header: str) -> str:
    """Who uploads: the SHA-256 of the bearer key (the key itself is never stored)."""
    token = header.partition(" ")[2].strip()
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _wrap(handler: Handler) -> Handler:
    async def endpoint(request: Request) -> Response:
        try:
            response: Response = await handler(request)
        except _Refused as refused:
            return refused.response()
        except Exception as error:
            if _is_storage_error(error):
                return _storage_refusal(error)
            raise
        return response

    return endpoint


class _Failsafe:
    """Any route's failure becomes a JSON error and one log line, never a traceback: ``503``
    for the store's (a full disk, a corrupt database), ``500`` otherwise. Once the answer has
    started, the connection is closed instead (there is no status left to change). What the
    request's own ``receive`` raises (the guard's body timeout, a client that went away) is no
    failure of the route and goes on to whoever wraps this application."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        received: list[BaseException] = []

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        async def receiving() -> Message:
            try:
                return await receive()
            except BaseException as error:
                received.append(error)
                raise

        try:
            await self.app(scope, receiving, tracked)
        except Exception as error:
            if any(error is raised for raised in received):
                raise
            if started:
                _log.error("reproit-otel ingest: an answer failed: %s", type(error).__name__)
                return
            response: Response
            if _is_storage_error(error):
                response = _storage_refusal(error)
            else:
                _log.error(
                    "reproit-otel ingest: %s failed: %s", scope.get("path"), type(error).__name__
                )
                response = JSONResponse(
                    {
                        "error": {
                            "rule": "internal",
                            "field": "",
                            "message": "the ingest failed to answer",
                        }
                    },
                    status_code=500,
                )
            await response(scope, receive, send)


def create_app(
    store: Store,
    *,
    api_keys: Collection[str] = (),
    read_keys: Collection[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    web: bool = True,
    replay_exec: str | None = None,
    allowed_hosts: Collection[str] | None = None,
    public_url: str | None = None,
    body_timeout: float | None = 30.0,
    artifact_quota: ArtifactQuota | None = None,
) -> Starlette:
    """The ingest ASGI application over ``store``.

    ``read_keys`` may only read; ``web`` serves the web page at ``/``; ``replay_exec`` is the
    command the page's replay instructions give ``reproit-otel check --exec``.
    ``allowed_hosts`` (``None``: any) and ``body_timeout`` go to
    :class:`~reproit_otel.ingest.guard.RequestGuard`; ``public_url`` is the address the page's
    replay line names (``reproit-otel serve`` sets it to the address it listens on when not
    given; without it the page names the address the request reached). ``artifact_quota``
    bounds the stored artifacts (default: :data:`DEFAULT_MAX_ARTIFACT_BYTES` in all,
    :data:`DEFAULT_MAX_ARTIFACT_BYTES_PER_KEY` per key).
    """
    ingest = IngestApp(
        store,
        api_keys=api_keys,
        read_keys=read_keys,
        max_body_bytes=max_body_bytes,
        artifact_quota=artifact_quota,
    )
    routes: list[BaseRoute] = [
        Route("/healthz", _wrap(ingest.healthz), methods=["GET"]),
        Route("/v1/capture-batches", _wrap(ingest.post_capture_batch), methods=["POST"]),
        Route("/v1/traces", _wrap(ingest.post_traces), methods=["POST"]),
        Route("/v1/artifacts/{artifact_id}", _wrap(ingest.put_artifact), methods=["PUT"]),
        Route("/v1/occurrences", _wrap(ingest.list_occurrences), methods=["GET"]),
        Route("/v1/occurrences/{occurrence_id}", _wrap(ingest.get_occurrence), methods=["GET"]),
        Route(
            "/v1/occurrences/{occurrence_id}/batches",
            _wrap(ingest.get_batches),
            methods=["GET"],
        ),
        Route(
            "/v1/occurrences/{occurrence_id}/capsule",
            _wrap(ingest.get_capsule),
            methods=["GET"],
        ),
    ]
    if web:
        from reproit_otel.ingest.web import web_routes
        from reproit_otel.ingest.webauth import ReadKeys

        routes += web_routes(store, ReadKeys(ingest.read_keys), exec_command=replay_exec)
    guard = Middleware(RequestGuard, allowed_hosts=allowed_hosts, body_timeout=body_timeout)
    app = Starlette(
        routes=routes,
        middleware=[Middleware(AccessLogMiddleware), guard, Middleware(_Failsafe)],
    )
    app.state.ingest = ingest
    app.state.public_url = public_url.rstrip("/") if public_url else None
    return app


__all__ = [
    "DEFAULT_MAX_ARTIFACT_BYTES",
    "DEFAULT_MAX_ARTIFACT_BYTES_PER_KEY",
    "DEFAULT_MAX_BODY_BYTES",
    "IngestApp",
    "create_app",
]
