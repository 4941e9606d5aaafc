"""Verified credentials: record what a signature or token check decided, replay it as recorded.

A *verified* credential proves itself with the application's secret key: a Flask session
cookie (so Flask-Login's session), a Flask-WTF CSRF token, a Django signed value or database
session payload, Django's session auth hash and CSRF token checks, a JWT. Replay sends a
stand-in where production had the credential (``wire/standins.py``), and the replaying
machine does not hold production's secret key, so a stand-in can never pass the check. The
application needs the *outcome* of the check, not the check: reproit-otel records it at the
library's own boundary, the way an invoke boundary (``invoke.py``) records a call, and serves
it in replay.

Under capture each check inside an operation records a ``call`` effect with ``resource``
``credential`` and ``key`` the seam's name::

    {"protocol": "invoke",
     "request":  {"tool": "credential", "op": "itsdangerous.loads",
                  "input": {"credential": <the signed text>, "salt": "cookie-session"}},
     "response": {"ok": true, "data": {"payload": {"_user_id": "1", "csrf_token": ...}}}}

The credential sits under the secret key ``credential``, so the pipeline's redaction turns it
into a placeholder (with its keyed identity while one is set); the outcome is redacted by the
usual rules (``csrf_token`` and the like become placeholders, and so does Django's session
auth hash ``_auth_user_hash``, an HMAC of the password hash). A result that is a bare string
(Flask-WTF's raw CSRF token, a Django signer's unsigned text) is carried inside the credential
and is recorded as a secret too, ``{"token": ...}``; a structured result as ``{"payload":
...}``; a yes/no check as ``{"verified": bool}``. A refusal (``BadSignature``,
``SignatureExpired``, ``ExpiredSignatureError``...) is recorded as ``{"ok": false, "error":
{"code": "<module>:<class>", "message": ...}}`` with every part of the credential scrubbed
from the message. Any other exception is not an outcome: the operation's effects become
incomplete.

In replay (a ``REPROIT_REPLAY`` capsule is active) the check does not run: the recorded outcome
is served for the call with stand-ins where it has placeholders (the replay session serves
every recorded value so, ``wire/standins.py``), so a session's CSRF token equals the stand-in
``check`` sends in the form; a recorded refusal is raised again as the library's own exception
class. A check the capsule does not hold is a
``REPROIT:DIVERGENCE`` and raises :class:`~reproit_otel.MissingFixtureError`, never a live
check. A check nested in another (``signing.loads`` inside ``unsign_object``) belongs to the
outer one. Fixture mode (``REPROIT_TOOLS``) does not apply: test suites check for real.

A check made before its request's operation began (Flask opens its signed session while it
pushes the request context, before OpenTelemetry's ``before_request`` hook starts the server
span) is recorded when the operation begins, as its first effect
(:func:`~reproit_otel.capture.inbound.defer_until_operation`).

These effects are not *data exchanges* for decision D5 (``wire/batch.py``): a failure whose
only effects are credential checks still sends no batch. They bind to the current span and
open none, so they neither add spans to the application's traces nor leave one uncovered.

Seams (each patched when the application imports the module it lives in: the bootstrap hands
:func:`install_seams_of` to ``reproit_otel/_import_hooks.py`` for each of
:data:`SEAM_MODULES`, so a library the service never imports is never imported for it;
:func:`install_credentials` patches every installed one at once, importing it, for replay;
each patch keeps the original and is restored exactly by :func:`uninstall_credentials`):

=============================================  ======================================
``itsdangerous.Serializer.loads``,             Flask sessions, Flask-WTF CSRF, any
``itsdangerous.TimedSerializer.loads``         ``URLSafe(Timed)Serializer``
``flask_login.login_manager.decode_cookie``    Flask-Login remember cookies
``flask_login.login_manager.                   Flask-Login session protection
_create_identifier``
``django.core.signing.Signer.unsign_object``   ``signing.loads``, database and cookie
``Signer.unsign``, ``TimestampSigner.unsign``  sessions, messages, ``get_signed_cookie``
``constant_time_compare`` of                   the session auth hash check in
``django.contrib.auth``                        ``get_user`` and ``login``
``django.middleware.csrf._does_token_match``   ``CsrfViewMiddleware``
``jwt.PyJWT.decode_complete``                  ``jwt.decode`` (simplejwt, FastAPI)
``jwt.PyJWS.get_unverified_header`` and its    the header read before the check
module names ``jwt.get_unverified_header``,    (Flask-JWT-Extended, Flask-AppBuilder's
``jwt.api_jws.get_unverified_header``          API, a key set's ``kid``)
``jose.jwt.decode``,                           python-jose, when installed
``get_unverified_header``,
``get_unverified_claims``
=============================================  ======================================

Never breaking the host: every step of ours is guarded; a failure to record is logged and the
application gets exactly what the library returned or raised.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

from reproit_otel._guard import guarded
from reproit_otel.capture.inbound import InboundRequest, current_inbound, defer_until_operation
from reproit_otel.capture.recording import ExchangeRecorder, start_exchange
from reproit_otel.errors import MissingFixtureError
from reproit_otel.instrumentation._invoke_values import json_form, round_trip
from reproit_otel.instrumentation.invoke import capsule_outcome, finish_outcome
from reproit_otel.redaction.core import placeholder, scrub_secret_values
from reproit_otel.replay.session import active_session
from reproit_otel.wire.batch import CREDENTIAL_TOOL
from reproit_otel.wire.invoke import failure_response, success_response
from reproit_otel.wire.replay import ReplaySession

__all__ = [
    "SEAM_MODULES",
    "install_credentials",
    "install_seams_of",
    "installed_seams",
    "uninstall_credentials",
]

_ORIGINAL = "__reproit_credential_original__"

Args = tuple[Any, ...]
Kwargs = dict[str, Any]


class _NotRecordable(Exception):
    pass


def _text(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value


def _argument(args: Args, kwargs: Kwargs, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


# -- what is recorded of a result -------------------------------------------------------------


def _plain(value: Any) -> Any:
    data = json_form(value)
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if "$object" in item and len(item) == 1:
                raise _NotRecordable(f"the result holds a {item['$object']} with no JSON form")
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return round_trip(data)


_PAYLOAD_SECRETS = frozenset({"_auth_user_hash"})
"""Payload keys that hold a secret under a name the key rules do not catch: Django's session
auth hash (an HMAC of the password hash under ``SECRET_KEY``)."""


_SESSION_IDENTIFIER = "_id"
"""Flask-Login's session identifier, beside its ``_user_id``: a hash of the client's address
and User-Agent (so of an address a guess can recover). It is recorded as a secret, as the
identifier check that compares with it is (``flask_login.session_identifier``), so a replay
from another address gives both one stand-in and the session stays the user's."""


def _secret_or_payload(result: Any) -> dict[str, Any]:
    """A bare string is part of the credential (a secret); anything else is a payload."""
    if isinstance(result, (str, bytes, bytearray)):
        return {"token": _text(result)}
    payload = _plain(result)
    if isinstance(payload, dict):
        secrets = _PAYLOAD_SECRETS | ({_SESSION_IDENTIFIER} if "_user_id" in payload else set())
        payload = {
            key: placeholder(value) if key in secrets else value for key, value in payload.items()
        }
    return {"payload": payload}


def _served_value(data: dict[str, Any]) -> Any:
    return data["token"] if "token" in data else data.get("payload")


def _verified(result: Any) -> dict[str, Any]:
    if not isinstance(result, bool):
        raise _NotRecordable(f"the check returned {type(result).__name__}, not a bool")
    return {"verified": result}


def _served_verified(data: dict[str, Any], args: Args, kwargs: Kwargs) -> Any:
    return data["verified"] is True


# -- the seams ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Seam:
    op: str
    module: str
    """The module the patched attribute lives in (imported only when already importable)."""
    owner: str
    """The class holding the attribute, or ``""`` for a module attribute."""
    attribute: str
    refusals: tuple[str, str] | None
    """``(module, class)`` of the library's base exception: its subclasses are refusals
    (None: the check answers yes or no and refuses nothing)."""
    input: Callable[[Args, Kwargs], dict[str, Any]]
    """The recorded input: the credential under ``credential``, plus what tells checks apart."""
    result: Callable[[Any], dict[str, Any]]
    served: Callable[[dict[str, Any], Args, Kwargs], Any]
    applies: Callable[[], bool] | None = None
    """Whether this call is a check (None: every call is). A call that is not runs as it
    always did, neither recorded nor served."""


def _salted(owner: Any, salt: Any) -> dict[str, Any]:
    """The salt in force: it tells a session cookie from a CSRF token signed with one key."""
    return {"salt": _text(salt if salt is not None else getattr(owner, "salt", None))}


def _serializer_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    """``Serializer.loads(self, s, salt=None, **kwargs)``."""
    credential = _text(_argument(args, kwargs, 1, "s"))
    return {"credential": credential, **_salted(args[0], _argument(args, kwargs, 2, "salt"))}


def _timed_serializer_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    """``TimedSerializer.loads(self, s, max_age=None, return_timestamp=False, salt=None)``."""
    credential = _text(_argument(args, kwargs, 1, "s"))
    return {"credential": credential, **_salted(args[0], _argument(args, kwargs, 4, "salt"))}


def _itsdangerous_result(result: Any) -> dict[str, Any]:
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], _dt.datetime):
        return {**_secret_or_payload(result[0]), "timestamp": result[1].isoformat()}
    return _secret_or_payload(result)


def _itsdangerous_served(data: dict[str, Any], args: Args, kwargs: Kwargs) -> Any:
    value = _served_value(data)
    if _argument(args, kwargs, 3, "return_timestamp", False):
        stamp = data.get("timestamp")
        when = _dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
        return value, when
    return value


def _decode_cookie_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    return {"credential": _text(_argument(args, kwargs, 0, "cookie"))}


def _decode_cookie_result(result: Any) -> dict[str, Any]:
    # The user id in front of the digest: visible in the cookie, and what the user loader
    # looks up in the database, so it is kept as it is.
    return {"payload": _plain(result)}


def _no_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    return {}


def _session_holds_identifier() -> bool:
    """Whether Flask's session of the current request holds Flask-Login's ``_id``: only then
    is the client's identifier compared with something (every request computes it, those of
    no session too, such as ``check``'s probes while the replayed application boots)."""
    flask = sys.modules.get("flask")
    if flask is None or not flask.has_request_context():
        return False
    return _SESSION_IDENTIFIER in flask.session


def _payload_served(data: dict[str, Any], args: Args, kwargs: Kwargs) -> Any:
    return _served_value(data)


def _signer_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    """``unsign(self, value, ...)``, ``unsign_object(self, signed_obj, ...)``."""
    credential = (
        args[1]
        if len(args) > 1
        else kwargs.get("signed_value", kwargs.get("value", kwargs.get("signed_obj")))
    )
    return {"credential": _text(credential), **_salted(args[0], None)}


def _pair_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    """``constant_time_compare(val1, val2)``, ``_does_token_match(token, secret)``."""
    return {"credential": [_text(value) for value in (*args, *kwargs.values())]}


def _jwt_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    algorithms = _argument(args, kwargs, 3, "algorithms")
    return {
        "credential": _text(_argument(args, kwargs, 1, "jwt")),
        "algorithms": list(algorithms) if isinstance(algorithms, (list, tuple)) else None,
    }


def _jwt_result(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise _NotRecordable(f"decode_complete returned {type(result).__name__}")
    return {"header": _plain(result.get("header")), "payload": _plain(result.get("payload"))}


def _jwt_served(data: dict[str, Any], args: Args, kwargs: Kwargs) -> Any:
    return {"header": data.get("header"), "payload": data.get("payload"), "signature": b""}


def _token_at(index: int, name: str) -> Callable[[Args, Kwargs], dict[str, Any]]:
    """The input of a check whose only argument is the token (at ``index``, or ``name``)."""

    def read(args: Args, kwargs: Kwargs) -> dict[str, Any]:
        return {"credential": _text(_argument(args, kwargs, index, name))}

    return read


def _header_result(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise _NotRecordable(f"the header is a {type(result).__name__}, not an object")
    return {"header": _plain(result)}


def _header_served(data: dict[str, Any], args: Args, kwargs: Kwargs) -> Any:
    return data.get("header")


def _jose_input(args: Args, kwargs: Kwargs) -> dict[str, Any]:
    algorithms = _argument(args, kwargs, 2, "algorithms")
    if isinstance(algorithms, str):
        algorithms = [algorithms]
    return {
        "credential": _text(_argument(args, kwargs, 0, "token")),
        "algorithms": list(algorithms) if isinstance(algorithms, (list, tuple)) else None,
    }


def _jose_result(result: Any) -> dict[str, Any]:
    return {"payload": _plain(result)}


_ITSDANGEROUS_BASE = ("itsdangerous.exc", "BadData")
_PYJWT_BASE = ("jwt.exceptions", "PyJWTError")
_JOSE_BASE = ("jose.exceptions", "JOSEError")
_DJANGO_BASE = ("django.core.signing", "BadSignature")

SEAMS: tuple[_Seam, ...] = (
    _Seam(
        "itsdangerous.loads",
        "itsdangerous.serializer",
        "Serializer",
        "loads",
        _ITSDANGEROUS_BASE,
        _serializer_input,
        _itsdangerous_result,
        _itsdangerous_served,
    ),
    _Seam(
        "itsdangerous.loads",
        "itsdangerous.timed",
        "TimedSerializer",
        "loads",
        _ITSDANGEROUS_BASE,
        _timed_serializer_input,
        _itsdangerous_result,
        _itsdangerous_served,
    ),
    _Seam(
        "flask_login.decode_cookie",
        "flask_login.login_manager",
        "",
        "decode_cookie",
        None,
        _decode_cookie_input,
        _decode_cookie_result,
        _payload_served,
    ),
    # Session protection: the identifier of the client (its address and User-Agent) compared
    # with the session's ``_id``. A replay comes from another address: the recorded
    # identifier is served, so the session is the user's as it was, fresh or not. Only a
    # call made while the session holds an ``_id`` is a check. LoginManager keeps the
    # function it finds here when it is made (after the patch, under opentelemetry-instrument).
    _Seam(
        "flask_login.session_identifier",
        "flask_login.login_manager",
        "",
        "_create_identifier",
        None,
        _no_input,
        _secret_or_payload,
        _payload_served,
        _session_holds_identifier,
    ),
    _Seam(
        "django.signing.unsign_object",
        "django.core.signing",
        "Signer",
        "unsign_object",
        _DJANGO_BASE,
        _signer_input,
        _secret_or_payload,
        _payload_served,
    ),
    _Seam(
        "django.signing.unsign",
        "django.core.signing",
        "Signer",
        "unsign",
        _DJANGO_BASE,
        _signer_input,
        _secret_or_payload,
        _payload_served,
    ),
    _Seam(
        "django.signing.unsign",
        "django.core.signing",
        "TimestampSigner",
        "unsign",
        _DJANGO_BASE,
        _signer_input,
        _secret_or_payload,
        _payload_served,
    ),
    _Seam(
        "django.auth.session_hash",
        "django.contrib.auth",
        "",
        "constant_time_compare",
        None,
        _pair_input,
        _verified,
        _served_verified,
    ),
    _Seam(
        "django.csrf.token_match",
        "django.middleware.csrf",
        "",
        "_does_token_match",
        None,
        _pair_input,
        _verified,
        _served_verified,
    ),
    _Seam(
        "jwt.decode",
        "jwt.api_jwt",
        "PyJWT",
        "decode_complete",
        _PYJWT_BASE,
        _jwt_input,
        _jwt_result,
        _jwt_served,
    ),
    # The header read before the token is verified, to choose the key (Flask-JWT-Extended,
    # a key set's ``kid``): a method of PyJWS, and bound to PyJWS's shared instance under two
    # module names before anything could patch the class, so each is patched.
    _Seam(
        "jwt.get_unverified_header",
        "jwt.api_jws",
        "PyJWS",
        "get_unverified_header",
        _PYJWT_BASE,
        _token_at(1, "jwt"),
        _header_result,
        _header_served,
    ),
    _Seam(
        "jwt.get_unverified_header",
        "jwt.api_jws",
        "",
        "get_unverified_header",
        _PYJWT_BASE,
        _token_at(0, "jwt"),
        _header_result,
        _header_served,
    ),
    _Seam(
        "jwt.get_unverified_header",
        "jwt",
        "",
        "get_unverified_header",
        _PYJWT_BASE,
        _token_at(0, "jwt"),
        _header_result,
        _header_served,
    ),
    _Seam(
        "jose.jwt.decode",
        "jose.jwt",
        "",
        "decode",
        _JOSE_BASE,
        _jose_input,
        _jose_result,
        _payload_served,
    ),
    _Seam(
        "jose.jwt.get_unverified_header",
        "jose.jwt",
        "",
        "get_unverified_header",
        _JOSE_BASE,
        _token_at(0, "token"),
        _header_result,
        _header_served,
    ),
    _Seam(
        "jose.jwt.get_unverified_claims",
        "jose.jwt",
        "",
        "get_unverified_claims",
        _JOSE_BASE,
        _token_at(0, "token"),
        _jose_result,
        _payload_served,
    ),
)
"""Every credential check reproit-otel records, in the order they are patched."""


# -- one check ---------------------------------------------------------------------------------

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "reproit_credential_inside", default=False
)


def _refusal_base(seam: _Seam) -> type[BaseException] | None:
    if seam.refusals is None:
        return None
    try:
        base = getattr(importlib.import_module(seam.refusals[0]), seam.refusals[1])
    except (ImportError, AttributeError):
        return None
    if isinstance(base, type) and issubclass(base, BaseException):
        return base
    return None


def _credential_parts(input_value: dict[str, Any]) -> tuple[str, ...]:
    """The credential and each of its dot-, colon- or bar-separated parts (to scrub messages)."""
    values = input_value.get("credential")
    texts = [v for v in (values if isinstance(values, list) else [values]) if isinstance(v, str)]
    parts: list[str] = []
    for text in texts:
        parts.append(text)
        parts.extend(p for p in re.split(r"[.:|]", text) if len(p) >= 4)
    return tuple(dict.fromkeys(parts))


def _refusal_response(
    seam: _Seam, error: BaseException, input_value: dict[str, Any]
) -> dict[str, Any] | None:
    base = _refusal_base(seam)
    if base is None or not isinstance(error, base):
        return None
    kind = type(error)
    parts = _credential_parts(input_value)
    return failure_response(
        code=f"{kind.__module__}:{kind.__qualname__}",
        status=None,
        message=scrub_secret_values(str(error), parts),
    )


def _raise_refusal(seam: _Seam, error: dict[str, Any]) -> None:
    base = _refusal_base(seam)
    code = error.get("code")
    message = str(error.get("message") or "")
    kind: type[BaseException] | None = None
    if base is not None and isinstance(code, str) and ":" in code:
        module_name, _, qualname = code.partition(":")
        # Only a module this process has imported already: a capsule names no import.
        found: Any = sys.modules.get(module_name)
        for name in qualname.split("."):
            found = getattr(found, name, None)
        if isinstance(found, type) and issubclass(found, base):
            kind = found
    if kind is None:
        raise MissingFixtureError(
            f"reproit: credential check {seam.op} recorded a refusal ({code}) this process "
            "cannot raise"
        )
    try:
        refusal = kind(message)
    except Exception:
        refusal = base(message) if base is not None else RuntimeError(message)
    raise refusal


def _serve(seam: _Seam, session: ReplaySession, args: Args, kwargs: Kwargs) -> Any:
    input_value = seam.input(args, kwargs)
    outcome = capsule_outcome(session, CREDENTIAL_TOOL, seam.op, input_value)
    if outcome["kind"] == "error" and outcome["error"] is not None:
        _raise_refusal(seam, dict(outcome["error"]))
    data = outcome["data"] if outcome["kind"] == "data" else None
    if not isinstance(data, dict):
        raise MissingFixtureError(
            f"reproit: credential check {seam.op} has no usable recorded outcome"
        )
    return seam.served(data, args, kwargs)


Outcome = tuple[dict[str, Any], dict[str, Any]] | str
"""``(input, response)`` of a finished check, or why it cannot be recorded."""


def _outcome(
    seam: _Seam,
    args: Args,
    kwargs: Kwargs,
    *,
    result: Any = None,
    error: BaseException | None = None,
) -> Outcome:
    input_value = seam.input(args, kwargs)
    if error is not None:
        refused = _refusal_response(seam, error, input_value)
        if refused is None:
            return f"{type(error).__name__} is not a refusal of the credential"
        return input_value, refused
    try:
        return input_value, success_response(seam.result(result))
    except _NotRecordable as why:
        return str(why)


def _finish(seam: _Seam, recorder: ExchangeRecorder, outcome: Outcome) -> None:
    if isinstance(outcome, str):
        recorder.fail(f"{seam.op}: {outcome}")
        return
    input_value, response = outcome
    finish_outcome(recorder, CREDENTIAL_TOOL, seam.op, input_value, response)


def _finish_later(seam: _Seam, outcome: Outcome) -> None:
    """Record a check made before its request's operation began, now that it has."""
    recorder = start_exchange(CREDENTIAL_TOOL)
    if recorder is not None:
        _finish(seam, recorder, outcome)


def _settle(
    seam: _Seam,
    recorder: ExchangeRecorder | None,
    inbound: InboundRequest | None,
    outcome: Outcome,
) -> None:
    if recorder is not None:
        _finish(seam, recorder, outcome)
    elif inbound is not None:
        defer_until_operation(inbound, partial(_finish_later, seam, outcome))


def _early_request() -> InboundRequest | None:
    """The current inbound request when its operation has not begun yet (Flask opens its
    session before OpenTelemetry starts the server span)."""
    with guarded("credentials.inbound"):
        inbound = current_inbound()
        return inbound if inbound is not None and inbound.operation is None else None
    return None


def _applies(seam: _Seam) -> bool:
    with guarded("credentials.applies"):
        return seam.applies is None or seam.applies()
    return False


def _replay_session() -> ReplaySession | None:
    with guarded("credentials.session"):
        return active_session()
    return None


def _recorder() -> ExchangeRecorder | None:
    with guarded("credentials.start"):
        return start_exchange(CREDENTIAL_TOOL)
    return None


def _through(seam: _Seam, original: Callable[..., Any], args: Args, kwargs: Kwargs) -> Any:
    if _inside.get():
        return original(*args, **kwargs)  # part of the check that encloses it
    if seam.applies is not None and not _applies(seam):
        return original(*args, **kwargs)
    session = _replay_session()
    if session is not None:
        token = _inside.set(True)
        try:
            return _serve(seam, session, args, kwargs)
        finally:
            _inside.reset(token)
    recorder = _recorder()
    inbound = _early_request() if recorder is None else None
    if recorder is None and inbound is None:
        return original(*args, **kwargs)
    token = _inside.set(True)
    try:
        try:
            result = original(*args, **kwargs)
        except BaseException as error:
            with guarded("credentials.record"):
                _settle(seam, recorder, inbound, _outcome(seam, args, kwargs, error=error))
            raise
        with guarded("credentials.record"):
            _settle(seam, recorder, inbound, _outcome(seam, args, kwargs, result=result))
        return result
    finally:
        _inside.reset(token)
        if recorder is not None:
            with guarded("credentials.unfinished"):
                if not recorder.done:
                    recorder.fail(f"{seam.op}: not recorded")


# -- patching ----------------------------------------------------------------------------------


def _target(seam: _Seam, *, importing: bool = True) -> Any:
    """The class or module holding the seam's attribute, or None when it is not installed
    (with ``importing=False``: when its module is not imported)."""
    module: ModuleType | None
    if importing:
        try:
            module = importlib.import_module(seam.module)
        except Exception:  # not installed, or a library that cannot import here
            return None
    else:
        module = sys.modules.get(seam.module)
    holder = getattr(module, seam.owner, None) if seam.owner else module
    if holder is None or not callable(getattr(holder, seam.attribute, None)):
        return None
    return holder


def _wrapper(seam: _Seam, original: Callable[..., Any]) -> Callable[..., Any]:
    def checked(*args: Any, **kwargs: Any) -> Any:
        return _through(seam, original, args, kwargs)

    checked.__name__ = getattr(original, "__name__", seam.attribute)
    checked.__qualname__ = getattr(original, "__qualname__", seam.attribute)
    checked.__doc__ = getattr(original, "__doc__", None)
    checked.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(checked, _ORIGINAL, original)
    return checked


def _patch(seam: _Seam, holder: Any) -> bool:
    """Wrap the seam's attribute on ``holder`` unless it is wrapped; False when it is inherited."""
    current = (
        holder.__dict__.get(seam.attribute)
        if isinstance(holder, type)
        else getattr(holder, seam.attribute)
    )
    if current is None:
        return False  # inherited, not the class's own
    if getattr(current, _ORIGINAL, None) is None:
        setattr(holder, seam.attribute, _wrapper(seam, current))
    return True


def install_credentials() -> list[str]:
    """Patch every seam whose library is importable, importing it. Idempotent; returns the
    seams patched (``module:owner.attribute``)."""
    patched: list[str] = []
    for seam in SEAMS:
        with guarded(f"credentials.install[{seam.op}]"):
            holder = _target(seam)
            if holder is not None and _patch(seam, holder):
                patched.append(_name(seam))
    return patched


SEAM_MODULES: tuple[str, ...] = tuple(dict.fromkeys(seam.module for seam in SEAMS))
"""The modules the seams live in, in :data:`SEAMS` order: the bootstrap patches each one's
seams with :func:`install_seams_of` when the application imports it."""


def install_seams_of(module: ModuleType) -> list[str]:
    """Patch the seams that live in ``module`` (one of :data:`SEAM_MODULES`, imported).
    Idempotent; returns the seams patched."""
    patched: list[str] = []
    for seam in SEAMS:
        if seam.module != module.__name__:
            continue
        with guarded(f"credentials.install[{seam.op}]"):
            holder = _target(seam, importing=False)
            if holder is not None and _patch(seam, holder):
                patched.append(_name(seam))
    return patched


def installed_seams() -> list[str]:
    """The seams patched now (``module:owner.attribute``); a library not imported yet has none."""
    found: list[str] = []
    for seam in SEAMS:
        holder = _target(seam, importing=False)
        if holder is None:
            continue
        current = getattr(holder, seam.attribute, None)
        if getattr(current, _ORIGINAL, None) is not None:
            found.append(_name(seam))
    return found


def _name(seam: _Seam) -> str:
    owner = f"{seam.owner}." if seam.owner else ""
    return f"{seam.module}:{owner}{seam.attribute}"


def uninstall_credentials() -> None:
    """Restore every patched attribute exactly (importing nothing: what is not imported was
    never patched)."""
    for seam in reversed(SEAMS):
        with guarded(f"credentials.uninstall[{seam.op}]"):
            holder = _target(seam, importing=False)
            if holder is None:
                continue
            current = (
                holder.__dict__.get(seam.attribute)
                if isinstance(holder, type)
                else getattr(holder, seam.attribute, None)
            )
            original = getattr(current, _ORIGINAL, None)
            if original is not None:
                setattr(holder, seam.attribute, original)
