"""Wiring reproit-otel into the OpenTelemetry a process already runs.

From code::

    import reproit_otel
    reproit_otel.install()                   # the global SDK TracerProvider
    reproit_otel.install(provider)           # or a given one

With no code change, under ``opentelemetry-instrument``:

* ``OTEL_TRACES_EXPORTER=otlp,reproit``: the ``reproit`` traces exporter
  (:class:`ReproitSpanExporter`, entry point group ``opentelemetry_traces_exporter``) exports
  nothing itself; creating it installs reproit-otel on the provider the SDK configurator just
  set up;
* the ``opentelemetry_post_instrument`` hook (:func:`post_instrument`) installs it after the
  instrumentors ran, whatever distro or configurator set the provider up;
* ``OTEL_TRACES_SAMPLER=reproit_parentbased_traceidratio`` (entry point group
  ``opentelemetry_traces_sampler``, :func:`reproit_parentbased_traceidratio`) samples like
  ``parentbased_traceidratio`` with ``OTEL_TRACES_SAMPLER_ARG``, except that a trace it would
  drop is still recorded (``RECORD_ONLY``): reproit-otel sees every request, exporters still
  receive only sampled spans.

What :func:`install` does (once per provider; a second call returns the same processor):

1. reads the configuration (``config.py``); with ``REPROIT_DISABLED=1`` or an unusable
   configuration it does nothing; otherwise it registers the configured secret values
   (``REPROIT_SECRET_VALUES``, or ``secret_values`` of a given configuration) with
   :func:`reproit_otel.capture.recording.register_secret_values`, so everything that keeps secrets
   out of what reproit-otel writes (invoke-boundary fixtures, replay's redaction of live
   calls) knows them, not only the span processor (decision D8);
2. with ``REPROIT_REPLAY`` set, installs hermetic replay (``reproit_otel.replay``) instead of
   recording, and stops there. Replay fails closed: when it cannot be armed completely
   (the capsule, its envelope, an instrumentor, the tripwire; or an unusable configuration
   alongside ``REPROIT_REPLAY``) the process writes why to standard error, with a
   ``REPROIT:REPLAY-FAILED {"capsule":...,"error":...}`` line, and ends with exit status 78
   (:data:`REPLAY_FAILED_EXIT`) instead of serving live;
3. adds :class:`~reproit_otel.capture.processor.ReproitSpanProcessor` to the provider, with the
   uploader as its sink when capture is configured (``REPROIT_ENDPOINT``, ``REPROIT_API_KEY``,
   ``REPROIT_APP_ID``) and the debug dump when ``REPROIT_DEBUG_DUMP`` is set;
4. installs the recorders (``requests``, ``httpx``, ``psycopg2``, ``psycopg``) whose library
   is importable and the SQLAlchemy hook (``instrumentation/sqlalchemy.py``); the inbound
   middleware patches for Flask, Starlette/FastAPI and Django (WSGI and ASGI) and the
   credential checks (``instrumentation/credentials.py``: signed sessions, CSRF tokens, JWTs)
   are applied when the application imports the module each patches (``_import_hooks.py``),
   at once for one it imported already: a library the service never imports is never
   imported for it.

Our own traffic is never recorded: recorders ignore calls made under OpenTelemetry's
``suppress_instrumentation``, which the uploader sets.

Locks. ``_lock`` orders :func:`install` and :func:`uninstall` (start-up, shutdown and tests);
no request, finalizer or signal handler of reproit-otel takes it. Start-up problems are logged
while it is held; it is reentrant only so that a logging handler calling :func:`install` from
such a line (the OpenTelemetry distro's hook can) returns instead of waiting on itself, and
install changes nothing until the pieces it creates are complete.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
)

from reproit_otel._guard import guarded
from reproit_otel._import_hooks import Hook, forget, when_imported
from reproit_otel._local_log import install_local_fallback, uninstall_local_fallback
from reproit_otel._stderr import ensure_visible
from reproit_otel.capture.processor import DebugDumpSink, OperationSink, ReproitSpanProcessor
from reproit_otel.capture.recording import register_secret_values
from reproit_otel.config import REPROIT_REPLAY, ReproitConfig, load_config
from reproit_otel.errors import ConfigurationError
from reproit_otel.wire.standins import set_identity_key

__all__ = [
    "REPLAY_FAILED_EXIT",
    "REPLAY_FAILED_MARKER",
    "RecordDroppedSampler",
    "ReproitSpanExporter",
    "install",
    "post_instrument",
    "reproit_parentbased_traceidratio",
    "stop_unarmed",
    "uninstall",
]

_log = logging.getLogger("reproit_otel")

REPLAY_FAILED_MARKER = "REPROIT:REPLAY-FAILED "
"""The prefix of the line written when replay cannot be armed: ``{"capsule":..,"error":..}``."""

REPLAY_FAILED_EXIT = 78
"""The exit status of a process whose replay could not be armed (``EX_CONFIG``)."""

# Recorder modules installed when their library is importable.
_RECORDERS = (
    "reproit_otel.instrumentation.requests",
    "reproit_otel.instrumentation.httpx",
    "reproit_otel.instrumentation.psycopg2",
    "reproit_otel.instrumentation.psycopg",
    "reproit_otel.instrumentation.sqlalchemy",
)

_lock = threading.RLock()
_processors: weakref.WeakKeyDictionary[Any, ReproitSpanProcessor] = weakref.WeakKeyDictionary()
_patched = False
_replaying = False
_waiting: list[tuple[str, Hook]] = []
"""The import hooks :func:`_install_library_hooks` placed (dropped by :func:`uninstall`)."""


def _sinks(config: ReproitConfig) -> list[OperationSink]:
    sinks: list[OperationSink] = []
    if config.capture_enabled:
        from reproit_otel.capture.uploader import Uploader  # only when capturing

        uploader = Uploader.from_config(config)
        if uploader is not None:
            sinks.append(uploader)
    elif config.endpoint:
        _log.warning(
            "reproit-otel will not upload captures: %s; set it and restart",
            config.capture_problem,
        )
    if config.debug_dump:
        sinks.append(DebugDumpSink(config.debug_dump))
    return sinks


def _install_library_hooks() -> None:
    global _patched
    if _patched:
        return
    _patched = True
    for module_name in _RECORDERS:
        with guarded(f"bootstrap.recorder[{module_name}]"):
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                _log.debug("reproit-otel: recorder %s not installed: %s", module_name, exc)
                continue
            module.install_recorder()
    with guarded("bootstrap.import_hooks"):
        for module_name, hook in _import_hooks_to_place():
            _waiting.append((module_name, hook))
            when_imported(module_name, hook)
    _install_error_hooks()


def _import_hooks_to_place() -> list[tuple[str, Hook]]:
    """The optional libraries' hooks, each applied when the application imports its module.

    A service that never imports Flask, Starlette, Django or a credential library pays
    nothing for them: none is imported at start-up (``_import_hooks.py``). One already
    imported is patched at once.
    """
    from reproit_otel.instrumentation import (  # after the guard
        asgi,
        credentials,
        django,
        django_contenttypes,
        wsgi,
    )

    def calling(install: Callable[[], object]) -> Hook:
        return lambda module: install()

    hooks: list[tuple[str, Hook]] = [
        ("flask", calling(wsgi.install_flask)),
        (asgi.APPLICATIONS_MODULE, calling(asgi.install_starlette)),
        (django.WSGI_HANDLER_MODULE, calling(django.install_django_wsgi)),
        (django.ASGI_HANDLER_MODULE, calling(django.install_django_asgi)),
    ]
    hooks += [(name, credentials.install_seams_of) for name in credentials.SEAM_MODULES]
    hooks.append(
        (django_contenttypes.APPS_MODULE, calling(django_contenttypes.install_contenttypes))
    )
    return hooks


def _install_error_hooks() -> None:
    from reproit_otel.instrumentation import errors  # after the guard

    with guarded("bootstrap.error_hooks"):
        errors.install_error_hooks()


def _install_replay(config: ReproitConfig) -> None:
    global _replaying
    if _replaying:
        return
    try:
        replay = importlib.import_module("reproit_otel.replay")
        replay.install_replay(config.replay)
        _install_error_hooks()
    except Exception as error:
        stop_unarmed(str(config.replay), error)
    _replaying = True


def stop_unarmed(
    capsule: str,
    error: BaseException,
    write: Callable[[str], None] | None = None,
    *,
    who: str = "the application",
) -> NoReturn:
    """Stop the process: replay was asked for and could not be armed completely.

    Whatever wraps the bootstrap (``opentelemetry-instrument``'s auto-initialisation, which
    swallows exceptions, a ``sitecustomize``, the application's own code) must not go on to
    serve live: the application would reach the real database and upstreams. So this writes
    the traceback, one ``REPROIT:REPLAY-FAILED`` line (``reproit-otel check`` names its
    ``error`` as the cause) and a sentence saying what to do, then ends the process with
    :data:`REPLAY_FAILED_EXIT` (``os._exit``: no exception handler or exit hook of a wrapper
    can turn it back into a live run).

    ``write`` writes one line to the real standard error (default: file descriptor 2; the
    pytest plugin passes its duplicate of it, taken before pytest captured output); ``who``
    names what stops in the last sentence (the pytest plugin: ``the test run``).
    """
    from reproit_otel.replay.session import write_stderr_line
    from reproit_otel.wire.canonical import ordered_json

    line = write_stderr_line if write is None else write
    cause = f"{type(error).__name__}: {error}"
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    line(text)
    line(REPLAY_FAILED_MARKER + ordered_json({"capsule": capsule, "error": cause}))
    line(
        f"reproit-otel: the replay of REPROIT_REPLAY={capsule} could not be armed ({cause}); "
        f"{who} stops instead of running without replay, where it would reach live "
        "systems. Fix the capsule or the setting and start it again."
    )
    os._exit(REPLAY_FAILED_EXIT)


def install(
    tracer_provider: Any = None, *, config: ReproitConfig | None = None
) -> ReproitSpanProcessor | None:
    """Install reproit-otel on ``tracer_provider`` (default: the global one). Idempotent.

    Returns the span processor, or ``None`` when nothing was installed (disabled, replay
    mode, or no SDK ``TracerProvider``). Never raises; but with ``REPROIT_REPLAY`` set, a
    replay that cannot be armed ends the process (exit 78, see the module doc): replay must
    never fall back to live calls.
    """
    ensure_visible()  # before load_config, whose warning about a bad setting must be seen
    config = config if config is not None else load_config()
    if config.problems and os.environ.get(REPROIT_REPLAY):
        # Replay was asked for; running on without it would run live (fail closed).
        stop_unarmed(os.environ[REPROIT_REPLAY], ConfigurationError("; ".join(config.problems)))
    if config.disabled:
        _log.debug("reproit-otel is disabled (%s)", "; ".join(config.problems) or "by setting")
        return None
    register_secret_values(config.secret_values)
    with _lock:
        if config.replay:
            # The replayed application's own traceback must show under `check`, even when
            # only OpenTelemetry's log handler sits on the root logger.
            install_local_fallback(logging.getLogger())
            _install_replay(config)
            return None
        provider = (
            tracer_provider if tracer_provider is not None else otel_trace.get_tracer_provider()
        )
        with guarded("bootstrap.install"):
            existing = _processors.get(provider)
            if existing is not None:
                return existing
            add = getattr(provider, "add_span_processor", None)
            if not callable(add):
                _log.warning(
                    "reproit-otel found no OpenTelemetry SDK TracerProvider (got %s); "
                    "configure the SDK first, or run under opentelemetry-instrument",
                    type(provider).__name__,
                )
                return None
            processor = ReproitSpanProcessor(config, _sinks(config))
            # Placeholders carry a keyed identity of the secret they replace; the key is
            # this process's own and is never written anywhere (wire/standins.py).
            set_identity_key(os.urandom(32))
            add(processor)
            _processors[provider] = processor
            _install_library_hooks()
            return processor
    return None


def uninstall() -> None:
    """Undo :func:`install` (tests): stop the processors, restore every patched library.

    The SDK cannot remove a span processor from a provider; a stopped processor ignores spans.
    """
    global _patched, _replaying
    with _lock:
        for processor in list(_processors.values()):
            processor.shutdown()
        _processors.clear()
        set_identity_key(None)
        if _patched:
            while _waiting:
                forget(*_waiting.pop())
            for module_name in _RECORDERS:
                with guarded(f"bootstrap.uninstall[{module_name}]"):
                    try:
                        module = importlib.import_module(module_name)
                    except ImportError:
                        continue
                    module.uninstall_recorder()
            from reproit_otel.instrumentation import asgi, django, wsgi

            wsgi.uninstall_flask()
            asgi.uninstall_starlette()
            django.uninstall_django()
            with guarded("bootstrap.uninstall[credentials]"):
                credentials = importlib.import_module("reproit_otel.instrumentation.credentials")
                credentials.uninstall_credentials()
            with guarded("bootstrap.uninstall[contenttypes]"):
                contenttypes = importlib.import_module(
                    "reproit_otel.instrumentation.django_contenttypes"
                )
                contenttypes.uninstall_contenttypes()
            _patched = False
        importlib.import_module("reproit_otel.instrumentation.errors").uninstall_error_hooks()
        uninstall_local_fallback(logging.getLogger())
        if _replaying:
            importlib.import_module("reproit_otel.replay").uninstall_replay()
            _replaying = False


def post_instrument(**kwargs: Any) -> None:
    """The ``opentelemetry_post_instrument`` hook: :func:`install` on the global provider.

    Then, unless reproit-otel is disabled, one stderr warning per problem that keeps
    failures from being captured: an instrumentation of a library reproit-otel needs spans
    from that is not active (now, or when the application first imports the library), and
    OpenTelemetry packages whose versions disagree (``reproit_otel.otel_setup``).
    """
    with guarded("bootstrap.post_instrument"):
        ensure_visible()
        config = load_config()
        install(config=config)
        if not config.disabled:
            from reproit_otel.otel_setup import warn_at_startup

            warn_at_startup(os.environ)


class ReproitSpanExporter(SpanExporter):
    """``OTEL_TRACES_EXPORTER=reproit``: installs reproit-otel, exports nothing itself.

    The SDK configurator creates exporters after it set the global ``TracerProvider``, so
    creating this one installs the span processor there (the processor, not this exporter,
    sees every span, sampled or not).
    """

    def __init__(self, **kwargs: Any) -> None:
        with guarded("exporter.install"):
            install()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Nothing to export: reproit-otel works in its span processor."""
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release (the processor is shut down with its provider)."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here."""
        return True


class RecordDroppedSampler(Sampler):
    """Wraps a sampler so that what it drops is still recorded (``RECORD_ONLY``).

    Span processors (reproit-otel's) see every span; exporters, which only take sampled
    spans, see exactly what the wrapped sampler chose.
    """

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        """The wrapped decision, with ``DROP`` turned into ``RECORD_ONLY``."""
        result = self.inner.should_sample(*args, **kwargs)
        if result.decision is Decision.DROP:
            return SamplingResult(
                Decision.RECORD_ONLY, result.attributes, trace_state=result.trace_state
            )
        return result

    def get_description(self) -> str:
        """``RecordDropped{<wrapped description>}``."""
        return f"RecordDropped{{{self.inner.get_description()}}}"


def reproit_parentbased_traceidratio(rate: float | str | None = None) -> Sampler:
    """Sampler factory for ``OTEL_TRACES_SAMPLER=reproit_parentbased_traceidratio``.

    ``rate`` is ``OTEL_TRACES_SAMPLER_ARG`` (a ratio in 0..1; missing or unusable means 1.0).
    """
    try:
        ratio = 1.0 if rate is None or rate == "" else float(rate)
    except ValueError:
        _log.warning("reproit-otel: OTEL_TRACES_SAMPLER_ARG=%r is not a ratio; using 1.0", rate)
        ratio = 1.0
    if not 0.0 <= ratio <= 1.0:
        _log.warning("reproit-otel: sampling ratio %r is outside 0..1; using 1.0", ratio)
        ratio = 1.0
    return RecordDroppedSampler(ParentBasedTraceIdRatio(ratio))
