"""requests: record every HTTP exchange of an operation, and serve it back in a replay.

Recording
=========

::

    from reproit_otel.instrumentation.requests import install_recorder, uninstall_recorder

    install_recorder()     # idempotent; reproit_otel.install() and the distro call it for you
    ...
    uninstall_recorder()   # puts requests back exactly as it was

Every call that goes through ``requests.adapters.HTTPAdapter.send`` while an operation is being
recorded (see :mod:`reproit_otel.capture.recording`) becomes one effect of kind ``call`` whose
``exchange`` follows PROTOCOL section 4.1::

    {"protocol": "http",
     "request":  {"method": "POST", "url": "http://api:8080/v1/rates?token=$reproit",
                  "headers": {...}, "body": {...}},
     "response": {"status": 200, "headers": {...}, "body": {...}, "stream": {"chunks": [...]}}}

* ``resource`` is the host with its port when the URL names a non-default one
  (``api:8080``); ``key`` is the method and the path with its query (``POST /v1/rates?...``).
* The URL (and so the key) never holds a password from the user info, and the value of every
  secret-named query parameter is ``$reproit`` (decision D8). Configured secret values are
  scrubbed by the pipeline from every recorded string.
* Request headers are the ones requests sends (``traceparent`` included when OpenTelemetry
  injected it); bodies and headers are bounded as sections 4.2 and 4.3 say: bodies over 8192
  bytes are kept as their size and SHA-256 only.
* Request bodies of every kind requests accepts are recorded without taking anything from the
  server: strings, bytes, JSON and form bodies as they are; a seekable file is read and put
  back; a generator, an iterator or an unseekable file is recorded piece by piece as it is
  sent.
* The response body is recorded as the application reads it (``content``, ``json()``,
  ``iter_content``, ``iter_lines``, ``raw.read``), without changing a byte of what it reads.
  Each piece the application receives is one chunk boundary (section 4.5); ``response.stream``
  is present for a server-sent event stream, and for any body read in two or more pieces.
  The exchange is finished when the body is read to its end. A stream the application stops
  reading is finished when the response is closed (``response.close()``, a ``with`` block) or
  garbage collected: the exchange then holds exactly the bytes it read.
* A transport error (connection refused, DNS, timeouts, TLS, proxy) is recorded as an exchange
  whose response is ``{"error": {"type": "requests.exceptions.ConnectTimeout", "message":
  str(error)}}`` (``type`` is the exception's module and qualified name); the exception then
  reaches the application unchanged, with its traceback. An error while the body is being
  read (a connection cut mid-stream) is recorded as ``error`` next to the status, headers and
  the part of the body that arrived; its ``type`` is the urllib3 exception requests converts.
* Calls made while OpenTelemetry instrumentation is suppressed (reproit-otel's own uploads,
  exporters) are never recorded.

Why ``HTTPAdapter.send``: it is the lowest seam every requests call passes (``requests.get``,
sessions, redirects, each hop separately) and it still sees the prepared request with its
final headers and body, the ``stream`` flag and the urllib3 response before anyone reads it.
It sits below OpenTelemetry's own wrapper of ``Session.send``, so the exchange is bound to the
CLIENT span and the order in which instrumentors are installed does not matter. Adapters that
override ``send`` without calling ``HTTPAdapter.send`` are not recorded; their spans then make
the operation's effects incomplete (decision D4), which is the honest answer.

Replay
======

:class:`RequestsReplayInstrumentor` (an OpenTelemetry ``BaseInstrumentor``; the replay
bootstrap installs it when ``REPROIT_REPLAY`` is set) patches the same seam. Each call is
answered from :func:`reproit_otel.replay.session.active_session` by the matcher of PROTOCOL
7.2 to 7.4 and no socket is ever opened:

* a match becomes a real :class:`requests.Response` (built by the adapter's own
  ``build_response``): status, reason phrase, headers (minus ``content-length``,
  ``transfer-encoding``, ``content-encoding``), body, ``json()``, ``encoding``, ``url``,
  ``request``, ``elapsed``, and a ``raw`` that is a readable urllib3 response.
  ``iter_content(None)`` yields the recorded chunks; ``iter_lines`` the recorded lines;
* a recorded transport error raises the recorded exception class (requests, urllib3, ``ssl``
  and built-in exceptions only; anything else raises
  :class:`requests.exceptions.ConnectionError`) with the recorded message; a recorded
  mid-body error is raised after the recorded part of the body;
* a call the recording does not hold is answered ``599 Reproit Diverged`` with the body
  ``{"reproit":"diverged"}`` and its ``REPROIT:DIVERGENCE`` line goes to standard error;
* a call made under OpenTelemetry's ``suppress_instrumentation`` (an exporter's upload) is
  neither served nor sent: it raises :class:`requests.exceptions.ConnectionError` saying so,
  writes no DIVERGENCE line and is counted
  (:func:`reproit_otel.replay.session.quiet_refusal_count`).

While replay is installed, ``Session.merge_environment_settings`` merges the explicit
settings only: no connection is made, so the proxies and CA bundle requests would look up in
the environment on every call cannot matter (an application that calls that method itself
gets no environment values from it, and a ``proxies`` dict it passes is not filled in).

The live call is redacted as the capture was before it is compared (D8): the URL through the
same password and query rule, configured secret values scrubbed from the URL and the body.
Request headers are never compared. OpenTelemetry CLIENT spans are still produced, since the
OpenTelemetry requests instrumentation wraps ``Session.send`` above this seam.

Response bodies replay byte for byte (:mod:`reproit_otel.wire.exact_body`): ``content``,
``text``, ``json()``, ``iter_content``, ``iter_lines`` and ``raw`` give the bytes read live,
with their key order, number spelling (``9.0`` stays a float), whitespace, escapes and
charset. A JSON body whose canonical JSON is the text read keeps its parsed value; any other
JSON body is recorded as its text; a body that is not UTF-8 keeps the reference's lossy text
in ``body`` and its exact bytes in ``bodyBase64``. The bytes served are worked out once, when
the capsule is loaded.

Limits: a JSON body holding a secret key is kept parsed so that the key's value is redacted,
and is served re-serialized (``json()`` gives the redacted value). A configured secret value
found in a body that is not UTF-8 drops its exact bytes: the scrubbed lossy text is served.
Response headers whose names are secret (``set-cookie``,
...) were redacted at capture and are not served, so replayed responses set no cookies. A
body the application read with ``raw.read(decode_content=False)`` is recorded as the
(compressed) bytes it read.

Locks. ``_patch_lock`` only orders installs and uninstalls (never taken on a call's path).
A recorded call takes no lock of this package: its recording is handed to the pipeline, and a
stream dropped unread is finished through a hand-over, never by the collector's finalizer
(``_requests_record.py``). A replayed call takes only the replay session's lock, to consume
its recorded exchange in one step; the served body is built, and the divergence line
encoded and written, after it is released (``wire/replay.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any

import requests.adapters
import requests.exceptions
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from reproit_otel._guard import absorb
from reproit_otel.capture.recording import (
    is_suppressed,
    registered_secret_values,
    start_exchange,
)
from reproit_otel.config import given_secret_values
from reproit_otel.instrumentation._requests_record import RecordedCall
from reproit_otel.instrumentation._requests_replay import (
    ReplayedBody,
    answer,
    live_probe,
    rebuild_error,
    served_headers,
    telemetry_refusal,
)
from reproit_otel.replay.session import active_session, report_divergence

__all__ = [
    "RequestsReplayInstrumentor",
    "install_recorder",
    "recorder_installed",
    "uninstall_recorder",
]

_Send = Callable[..., Any]

_patch_lock = threading.Lock()
_recorder_original: _Send | None = None
_replay_original: _Send | None = None


# ------------------------------------------------------------------------------ recording


def _recording_send(original: _Send) -> _Send:
    # Every step of ours is in a try/except: a defect of the recorder never reaches the call
    # (see reproit_otel._guard.absorb); the call itself always runs outside those blocks.
    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            recorder = start_exchange("requests")
        except Exception as exc:
            absorb("requests.start_exchange", exc)
            recorder = None
        if recorder is None:
            return original(self, request, *args, **kwargs)
        body = request.body
        call: RecordedCall | None = None
        try:
            call = RecordedCall.begin(recorder, request)
        except BaseException as exc:
            recorder.fail("the request could not be recorded")
            if not isinstance(exc, Exception):
                raise
            absorb("requests.record_request", exc)
        if call is None:
            return original(self, request, *args, **kwargs)
        try:
            response = original(self, request, *args, **kwargs)
        except BaseException as error:
            request.body = body  # redirects and hooks see the request's own body
            _record(recorder, call.failed, error, "requests.record_error")
            raise
        request.body = body
        try:  # _record(recorder, call.responded, ...), inline: every answered call passes here
            call.responded(response)
        except BaseException as exc:
            recorder.fail("the exchange could not be recorded")
            if not isinstance(exc, Exception):
                raise
            absorb("requests.record_response", exc)
        return response

    send.__reproit_recorder__ = True  # type: ignore[attr-defined]
    send.__wrapped__ = original  # type: ignore[attr-defined]
    return send


def _record(recorder: Any, step: Callable[[Any], None], value: Any, where: str) -> None:
    """``step(value)``: record how the call ended; a defect of ours fails the exchange only."""
    try:
        step(value)
    except BaseException as exc:
        recorder.fail("the exchange could not be recorded")
        if not isinstance(exc, Exception):
            raise
        absorb(where, exc)


def install_recorder() -> None:
    """Record every ``requests`` call made inside a recorded operation. Idempotent."""
    global _recorder_original
    with _patch_lock:
        current = requests.adapters.HTTPAdapter.send
        if getattr(current, "__reproit_recorder__", False):
            return
        _recorder_original = current
        requests.adapters.HTTPAdapter.send = _recording_send(current)  # type: ignore[method-assign]


def uninstall_recorder() -> None:
    """Undo :func:`install_recorder`; does nothing when it is not installed.

    If another library wrapped ``HTTPAdapter.send`` after the recorder, the recorder stays
    installed (removing it would remove that library's wrapper too).
    """
    global _recorder_original
    with _patch_lock:
        current = requests.adapters.HTTPAdapter.send
        if _recorder_original is None or not getattr(current, "__reproit_recorder__", False):
            return
        requests.adapters.HTTPAdapter.send = _recorder_original  # type: ignore[method-assign]
        _recorder_original = None


def recorder_installed() -> bool:
    """True while the recorder is patched in."""
    return bool(getattr(requests.adapters.HTTPAdapter.send, "__reproit_recorder__", False))


# ------------------------------------------------------------------------------ replay


def _replay_send(secrets: tuple[str, ...]) -> _Send:
    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        # stream, timeout, verify, cert and proxies change nothing: no connection is made.
        session = active_session()
        if session is None:
            raise requests.exceptions.ConnectionError(
                "reproit replay is installed but no replay session is active; set "
                "REPROIT_REPLAY to a capsule, or uninstrument RequestsReplayInstrumentor",
                request=request,
            )
        if is_suppressed():  # an exporter's upload: refused quietly, never a divergence
            raise telemetry_refusal(request)
        probe = live_probe(request, secrets + registered_secret_values())
        # No lock of ours here: the session consumes a recorded exchange in one step under
        # its own lock, and the served body is built after it is released.
        result = answer(session, probe)
        if session.on_divergence is None:  # a session with a callback reported them itself
            for line in result.divergences:
                report_divergence(line)
        if result.error is not None or result.served is None:
            raise rebuild_error(result.error, request)
        served = result.served
        body_error = None
        if result.body_error is not None:
            body_error = rebuild_error(result.body_error, request)
        chunks = served.chunks if served.chunks is not None else (served.body,)
        raw = ReplayedBody(
            status=served.status,
            headers=served_headers(served.headers),
            chunks=chunks,
            url=request.url,
            method=request.method,
            error=body_error,
        )
        return self.build_response(request, raw)

    send.__reproit_replay__ = True  # type: ignore[attr-defined]
    return send


# A replay opens no connection, so the transport settings requests gathers from the
# environment on every call (proxies for the URL, REQUESTS_CA_BUNDLE) can change nothing the
# application sees: the replayed send ignores them. Looking them up walks the whole
# environment twice per call, the largest single cost of a replayed call, so during a replay
# Session.merge_environment_settings merges the explicit settings only.
_settings_original: Callable[..., Any] | None = None


def _explicit_settings(  # noqa: PLR0917 - the signature requests calls it with
    self: requests.Session, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
) -> dict[str, Any]:
    """``Session.merge_environment_settings`` without the environment (see above)."""
    merge: Callable[[Any, Any], Any] = requests.sessions.merge_setting
    return {
        "proxies": merge(proxies, self.proxies),
        "stream": merge(stream, self.stream),
        "verify": merge(verify, self.verify),
        "cert": merge(cert, self.cert),
    }


def _patch_environment_settings() -> None:
    global _settings_original
    current = requests.Session.merge_environment_settings
    if current is not _explicit_settings:
        _settings_original = current
        requests.Session.merge_environment_settings = _explicit_settings  # type: ignore[assignment,method-assign]


def _restore_environment_settings() -> None:
    global _settings_original
    if _settings_original is not None:
        if requests.Session.merge_environment_settings is _explicit_settings:
            requests.Session.merge_environment_settings = _settings_original  # type: ignore[method-assign]
        _settings_original = None


class RequestsReplayInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Serves every ``requests`` call from the active replay session instead of the network.

    ``instrument(secret_values=(...))`` adds values to scrub from live calls before they are
    compared (the values ``REPROIT_SECRET_VALUES`` names are read from the configuration).
    ``uninstrument()`` restores ``HTTPAdapter.send`` and
    ``Session.merge_environment_settings`` exactly.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("requests >= 2.0",)

    def _instrument(self, **kwargs: Any) -> None:
        global _replay_original
        secrets = given_secret_values(kwargs.get("secret_values"))
        with _patch_lock:
            current = requests.adapters.HTTPAdapter.send
            if getattr(current, "__reproit_replay__", False):
                return
            _replay_original = current
            requests.adapters.HTTPAdapter.send = _replay_send(secrets)  # type: ignore[method-assign]
            _patch_environment_settings()

    def _uninstrument(self, **kwargs: Any) -> None:
        global _replay_original
        with _patch_lock:
            if _replay_original is None:
                return
            if getattr(requests.adapters.HTTPAdapter.send, "__reproit_replay__", False):
                requests.adapters.HTTPAdapter.send = _replay_original  # type: ignore[method-assign]
            _replay_original = None
            _restore_environment_settings()
