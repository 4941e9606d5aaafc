"""Credential checks: what a real signature or token check records, and how a capsule serves it.

The libraries run for real (itsdangerous, Flask's session, Flask-Login, Flask-WTF, Django's
signing and CSRF check, PyJWT); an in-memory pipeline stands in for the span processor so each
recorded exchange can be asserted whole, and the capsule side uses the real
:class:`~reproit_otel.wire.replay.ReplaySession`. The end-to-end runs under
``opentelemetry-instrument`` are ``tests/integration/test_auth_flask.py``, ``test_auth_django.py``
and ``test_auth_fastapi.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import itsdangerous
import jose.jwt
import jwt
import pytest
from flask import Flask, session

from reproit_otel.capture import recording
from reproit_otel.errors import MissingFixtureError
from reproit_otel.instrumentation import credentials
from reproit_otel.redaction.core import redact
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.batch import capture_eligibility
from reproit_otel.wire.replay import ReplaySession
from reproit_otel.wire.standins import materialize


class ListPipeline:
    """Records what recorders report, as ``("finish", exchange)`` / ``("fail", reason)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def start_exchange(self, library: str) -> recording.ExchangeRecorder | None:
        return recording.ExchangeRecorder(self, object(), library)

    def mark_incomplete(self, reason: str) -> None:
        self.calls.append(("incomplete", reason))

    def has_live_operations(self) -> bool:
        return True

    def exchange_finished(
        self, handle: object, effect: str, resource: str | None, key: str | None, exchange: Any
    ) -> None:
        assert (effect, resource) == ("call", "credential")
        self.calls.append(("finish", key, exchange))

    def exchange_failed(self, handle: object, reason: str) -> None:
        self.calls.append(("fail", reason))

    def exchanges(self) -> list[dict[str, Any]]:
        """The finished exchanges as the pipeline records them (redacted)."""
        return [redact(call[2]) for call in self.calls if call[0] == "finish"]


@pytest.fixture
def patched() -> Iterator[list[str]]:
    seams = credentials.install_credentials()
    try:
        yield seams
    finally:
        credentials.uninstall_credentials()


@pytest.fixture
def pipeline(patched: list[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[ListPipeline]:
    monkeypatch.delenv("REPROIT_SECRET_VALUES", raising=False)
    active = ListPipeline()
    previous = recording.current_pipeline()
    recording.set_pipeline(active)
    try:
        yield active
    finally:
        recording.clear_pipeline(active)
        if previous is not None:
            recording.set_pipeline(previous)


def _capsule(exchanges: list[dict[str, Any]]) -> dict[str, Any]:
    events = [{"kind": "effect", "effect": "call", "exchange": e} for e in exchanges]
    return {"format": "reproit-backend-capture", "version": 2, "events": events}


@pytest.fixture
def replay() -> Iterator[Any]:
    lines: list[str] = []

    def start(exchanges: list[dict[str, Any]]) -> list[str]:
        activate(ReplaySession(_capsule(exchanges), on_divergence=lines.append))
        return lines

    try:
        yield start
    finally:
        deactivate()


_PLACEHOLDER_STRING = {"$reproit": {"redacted": True, "type": "string", "length": 0}}


def _string_placeholder(length: int) -> dict[str, Any]:
    return {"$reproit": {"redacted": True, "type": "string", "length": length}}


def _without_extras(value: Any) -> Any:
    """Placeholders reduced to type and length (identity and class vary with the key)."""
    if isinstance(value, dict):
        body = value.get("$reproit")
        if isinstance(body, dict) and len(value) == 1:
            return _string_placeholder(body["length"]) if body["type"] == "string" else value
        return {k: _without_extras(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_extras(v) for v in value]
    return value


# -- patching ----------------------------------------------------------------------------------


def test_every_installed_library_is_patched_and_restored_exactly() -> None:
    from django.core import signing

    originals = (
        itsdangerous.serializer.Serializer.__dict__["loads"],
        itsdangerous.timed.TimedSerializer.__dict__["loads"],
        signing.Signer.__dict__["unsign"],
        jwt.api_jwt.PyJWT.__dict__["decode_complete"],
        jwt.api_jws.PyJWS.__dict__["get_unverified_header"],
        jwt.api_jws.get_unverified_header,
        jwt.get_unverified_header,
        jose.jwt.decode,
        jose.jwt.get_unverified_header,
        jose.jwt.get_unverified_claims,
    )
    seams = credentials.install_credentials()
    try:
        assert credentials.install_credentials() == seams  # idempotent
        assert seams == [
            "itsdangerous.serializer:Serializer.loads",
            "itsdangerous.timed:TimedSerializer.loads",
            "flask_login.login_manager:decode_cookie",
            "flask_login.login_manager:_create_identifier",
            "django.core.signing:Signer.unsign_object",
            "django.core.signing:Signer.unsign",
            "django.core.signing:TimestampSigner.unsign",
            "django.contrib.auth:constant_time_compare",
            "django.middleware.csrf:_does_token_match",
            "jwt.api_jwt:PyJWT.decode_complete",
            "jwt.api_jws:PyJWS.get_unverified_header",
            "jwt.api_jws:get_unverified_header",
            "jwt:get_unverified_header",
            "jose.jwt:decode",
            "jose.jwt:get_unverified_header",
            "jose.jwt:get_unverified_claims",
        ]
        assert credentials.installed_seams() == seams
        assert itsdangerous.serializer.Serializer.__dict__["loads"] is not originals[0]
    finally:
        credentials.uninstall_credentials()
    assert credentials.installed_seams() == []
    assert (
        itsdangerous.serializer.Serializer.__dict__["loads"],
        itsdangerous.timed.TimedSerializer.__dict__["loads"],
        signing.Signer.__dict__["unsign"],
        jwt.api_jwt.PyJWT.__dict__["decode_complete"],
        jwt.api_jws.PyJWS.__dict__["get_unverified_header"],
        jwt.api_jws.get_unverified_header,
        jwt.get_unverified_header,
        jose.jwt.decode,
        jose.jwt.get_unverified_header,
        jose.jwt.get_unverified_claims,
    ) == originals


def test_outside_an_operation_a_check_runs_as_it_always_did(patched: list[str]) -> None:
    serializer = itsdangerous.URLSafeTimedSerializer("key", salt="s")
    signed = serializer.dumps({"user": 1})
    assert serializer.loads(signed, return_timestamp=True)[0] == {"user": 1}
    with pytest.raises(itsdangerous.BadSignature):
        serializer.loads(signed + "x")


# -- itsdangerous ------------------------------------------------------------------------------


def test_a_signed_payload_is_recorded_by_its_outcome_and_served_without_the_key(
    pipeline: ListPipeline, replay: Any
) -> None:
    serializer = itsdangerous.URLSafeTimedSerializer("production-key", salt="cookie-session")
    signed = serializer.dumps({"_user_id": "7", "csrf_token": "a" * 40})
    assert serializer.loads(signed, max_age=60) == {"_user_id": "7", "csrf_token": "a" * 40}
    [exchange] = pipeline.exchanges()
    assert _without_extras(exchange) == {
        "protocol": "invoke",
        "request": {
            "tool": "credential",
            "op": "itsdangerous.loads",
            "input": {"credential": _string_placeholder(len(signed)), "salt": "cookie-session"},
        },
        "response": {
            "ok": True,
            "data": {"payload": {"_user_id": "7", "csrf_token": _string_placeholder(40)}},
        },
    }
    recording.clear_pipeline(pipeline)

    lines = replay([exchange])
    other_key = itsdangerous.URLSafeTimedSerializer("replay-key", salt="cookie-session")
    served = other_key.loads("stand-in-of-the-same-cookie", max_age=60)
    assert served == materialize(exchange["response"]["data"]["payload"])
    assert served["_user_id"] == "7"
    assert isinstance(served["csrf_token"], str)
    assert len(served["csrf_token"]) == 40
    assert lines == []


def test_a_refusal_is_recorded_scrubbed_and_raised_again_as_the_library_class(
    pipeline: ListPipeline, replay: Any
) -> None:
    serializer = itsdangerous.URLSafeSerializer("production-key", salt="remember")
    signed = serializer.dumps("ada")
    forged = signed[:-3] + ("AAA" if not signed.endswith("AAA") else "BBB")
    with pytest.raises(itsdangerous.BadSignature) as live:
        serializer.loads(forged)
    [exchange] = pipeline.exchanges()
    signature = forged.rsplit(".", 1)[1]
    assert signature in str(live.value)
    assert exchange["response"] == {
        "ok": False,
        "error": {
            "code": "itsdangerous.exc:BadSignature",
            "status": None,
            "message": str(live.value).replace(signature, "$reproit"),
            "cause": None,
        },
    }
    recording.clear_pipeline(pipeline)

    replay([exchange])
    with pytest.raises(itsdangerous.BadSignature) as served:
        itsdangerous.URLSafeSerializer("replay-key", salt="remember").loads("x.y")
    assert type(served.value) is itsdangerous.BadSignature
    assert str(served.value) == exchange["response"]["error"]["message"]


def test_an_unrecorded_check_in_replay_is_a_divergence_never_a_live_check(
    patched: list[str], replay: Any
) -> None:
    lines = replay([])
    serializer = itsdangerous.URLSafeSerializer("key", salt="s")
    with pytest.raises(MissingFixtureError) as miss:
        serializer.loads(serializer.dumps("valid here"))
    assert str(miss.value) == (
        "reproit: invoke boundary credential.itsdangerous.loads has no recorded outcome for "
        "this input (the capsule holds no matching invoke exchange)"
    )
    [line] = lines
    assert line.startswith('REPROIT:DIVERGENCE {"protocol":"invoke"')
    assert '"op":"itsdangerous.loads"' in line


# -- Flask-Login and Flask-WTF on a real Flask app ---------------------------------------------


def _flask_app(secret: str, protection: str = "basic") -> Flask:
    from flask_login import LoginManager, UserMixin, current_user, login_required, login_user
    from flask_wtf import FlaskForm
    from flask_wtf.csrf import CSRFProtect
    from wtforms import StringField

    app = Flask(__name__)
    app.config.update(SECRET_KEY=secret, WTF_CSRF_TIME_LIMIT=None, SESSION_PROTECTION=protection)
    CSRFProtect(app)
    login = LoginManager(app)

    class User(UserMixin):
        def __init__(self, user_id: str) -> None:
            self.id = user_id

    @login.user_loader
    def load_user(user_id: str) -> User:
        return User(user_id)

    class NoteForm(FlaskForm):
        title = StringField("title")

    @app.get("/login")
    def show_login() -> str:
        login_user(User("42"))
        return NoteForm().csrf_token.current_token or ""

    @app.get("/whoami")
    def whoami() -> dict[str, Any]:
        return {"authenticated": current_user.is_authenticated}

    @app.post("/notes")
    @login_required
    def add_note() -> dict[str, Any]:
        form = NoteForm()
        if not form.validate_on_submit():
            return {"errors": form.errors}
        return {"user": current_user.id, "title": form.title.data, "fresh": session["_fresh"]}

    return app


def test_a_logged_in_csrf_protected_post_replays_as_the_same_user_without_the_key(
    pipeline: ListPipeline, replay: Any
) -> None:
    production = _flask_app("production-secret-key")
    client = production.test_client()
    token = client.get("/login").get_data(as_text=True)
    cookie = client.get_cookie("session")
    assert cookie is not None
    del pipeline.calls[:]
    answer = client.post("/notes", data={"csrf_token": token, "title": "hello"})
    assert answer.get_json() == {"user": "42", "title": "hello", "fresh": True}
    exchanges = pipeline.exchanges()
    assert [(e["request"]["op"], e["request"]["input"].get("salt")) for e in exchanges] == [
        ("itsdangerous.loads", "cookie-session"),
        ("itsdangerous.loads", "wtf-csrf-token"),  # CSRFProtect checks before the view
        ("flask_login.session_identifier", None),  # login_required loads the user
    ]
    recorded = repr(exchanges)
    for secret in (token, cookie.value, "production-secret-key"):
        assert secret not in recorded
    raw_token = production.session_interface.get_signing_serializer(production).loads(cookie.value)[
        "csrf_token"
    ]
    assert raw_token not in recorded
    recording.clear_pipeline(pipeline)

    # Replay: another key, and stand-ins where production had the cookie and the token.
    lines = replay(exchanges)
    replaying = _flask_app("the-replay-machine-key").test_client()
    replaying.set_cookie("session", "x" * len(cookie.value))
    answer = replaying.post("/notes", data={"csrf_token": "y" * len(token), "title": "hello"})
    assert answer.get_json() == {"user": "42", "title": "hello", "fresh": True}
    assert lines == []


def test_strong_session_protection_replays_the_recorded_client_from_another_address(
    pipeline: ListPipeline, replay: Any
) -> None:
    """Flask-Login binds a session to a hash of the client's address and User-Agent (``_id``),
    and under ``strong`` protection logs out a session presented from elsewhere; a replay
    comes from 127.0.0.1. The identifier is recorded as a secret with the identity of the
    session's ``_id``, so both get one stand-in. A request of no session (``check``'s probes)
    computes it too: that is no check, neither recorded nor served."""
    production = _flask_app("production-secret-key", protection="strong")
    client = production.test_client()
    client_address = {"REMOTE_ADDR": "203.0.113.7"}
    token = client.get("/login", environ_base=client_address).get_data(as_text=True)
    cookie = client.get_cookie("session")
    assert cookie is not None
    with production.test_request_context(environ_base=client_address):
        from flask_login.utils import _create_identifier

        identifier = _create_identifier()
    assert production.test_client().get("/whoami").get_json() == {"authenticated": False}
    assert pipeline.exchanges() == []
    answer = client.post(
        "/notes", data={"csrf_token": token, "title": "hello"}, environ_base=client_address
    )
    assert answer.get_json() == {"user": "42", "title": "hello", "fresh": True}
    exchanges = pipeline.exchanges()
    assert [e["request"]["op"] for e in exchanges] == [
        "itsdangerous.loads",
        "itsdangerous.loads",
        "flask_login.session_identifier",
    ]
    session_id = exchanges[0]["response"]["data"]["payload"]["_id"]
    assert exchanges[2]["request"] == {
        "tool": "credential",
        "op": "flask_login.session_identifier",
        "input": {},
    }
    assert exchanges[2]["response"] == {"ok": True, "data": {"token": session_id}}
    assert _without_extras(session_id) == _string_placeholder(128)
    assert identifier not in repr(exchanges)
    recording.clear_pipeline(pipeline)

    lines = replay(exchanges)
    replaying = _flask_app("the-replay-machine-key", protection="strong")
    assert replaying.test_client().get("/whoami").get_json() == {"authenticated": False}
    client = replaying.test_client()
    client.set_cookie("session", "x" * len(cookie.value))
    answer = client.post("/notes", data={"csrf_token": "y" * len(token), "title": "hello"})
    assert answer.get_json() == {"user": "42", "title": "hello", "fresh": True}
    assert lines == []


def test_a_flask_login_remember_cookie_is_served_by_its_user_id(
    pipeline: ListPipeline, replay: Any
) -> None:
    from flask_login.utils import _cookie_digest, decode_cookie

    app = Flask(__name__)
    app.config.update(SECRET_KEY="production-secret-key")
    with app.test_request_context():
        cookie = f"42|{_cookie_digest('42')}"
        assert decode_cookie(cookie) == "42"
        assert pipeline.calls == []  # the seam is the name the login manager calls
        from flask_login import login_manager

        assert login_manager.decode_cookie(cookie) == "42"
    [exchange] = pipeline.exchanges()
    assert _without_extras(exchange["request"]["input"]) == {
        "credential": _string_placeholder(len(cookie))
    }
    assert exchange["response"] == {"ok": True, "data": {"payload": "42"}}
    recording.clear_pipeline(pipeline)
    replay([exchange])
    with app.test_request_context():
        assert login_manager.decode_cookie("42|forged") == "42"


# -- Django ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def django_settings() -> Iterator[None]:
    # Another test of the session may have configured Django already, without a key: the key
    # is then set on those settings (Django cannot restore an empty key, reading it raises).
    from django.conf import settings

    if not settings.configured:
        settings.configure(SECRET_KEY="production-django-key", USE_TZ=True)
    else:
        settings.SECRET_KEY = "production-django-key"
        settings.USE_TZ = True
    yield


def test_django_signing_records_the_payload_and_nested_checks_belong_to_it(
    django_settings: None, pipeline: ListPipeline, replay: Any
) -> None:
    from django.core import signing

    session = {"_auth_user_id": "3", "_auth_user_hash": "f" * 64, "sessionid": "k" * 32}
    signed = signing.dumps(session, salt="sessions")
    assert signing.loads(signed, salt="sessions") == session
    [exchange] = pipeline.exchanges()
    assert _without_extras(exchange) == {
        "protocol": "invoke",
        "request": {
            "tool": "credential",
            "op": "django.signing.unsign_object",
            "input": {"credential": _string_placeholder(len(signed)), "salt": "sessions"},
        },
        "response": {
            "ok": True,
            "data": {
                "payload": {
                    "_auth_user_id": "3",
                    "_auth_user_hash": _string_placeholder(64),
                    "sessionid": _string_placeholder(32),
                }
            },
        },
    }
    del pipeline.calls[:]
    with pytest.raises(signing.BadSignature):
        signing.Signer(salt="cookies").unsign(signed)
    [refused] = pipeline.exchanges()
    assert refused["response"]["error"]["code"] == "django.core.signing:BadSignature"
    recording.clear_pipeline(pipeline)

    replay([exchange, refused])
    assert signing.loads("stand-in", salt="sessions")["_auth_user_id"] == "3"
    with pytest.raises(signing.BadSignature):
        signing.Signer(salt="cookies").unsign("other stand-in")


def test_django_csrf_and_session_hash_checks_record_yes_or_no(
    django_settings: None, pipeline: ListPipeline, replay: Any
) -> None:
    from django.contrib import auth
    from django.middleware import csrf

    secret = csrf._get_new_csrf_string()
    masked = csrf._mask_cipher_secret(secret)
    assert csrf._does_token_match(masked, secret) is True
    assert auth.constant_time_compare("hash-a", "hash-b") is False
    exchanges = pipeline.exchanges()
    assert [_without_extras(e["request"]) for e in exchanges] == [
        {
            "tool": "credential",
            "op": "django.csrf.token_match",
            "input": {"credential": {"$reproit": {"redacted": True, "type": "array", "length": 2}}},
        },
        {
            "tool": "credential",
            "op": "django.auth.session_hash",
            "input": {"credential": {"$reproit": {"redacted": True, "type": "array", "length": 2}}},
        },
    ]
    assert [e["response"] for e in exchanges] == [
        {"ok": True, "data": {"verified": True}},
        {"ok": True, "data": {"verified": False}},
    ]
    assert secret not in repr(exchanges) and masked not in repr(exchanges)
    recording.clear_pipeline(pipeline)

    replay(exchanges)
    stand_in = "s" * 64
    assert csrf._does_token_match(stand_in, "t" * 32) is True
    assert auth.constant_time_compare("same", "same") is False


# -- PyJWT -------------------------------------------------------------------------------------

JWT_KEY = "production-jwt-key-of-at-least-32-bytes"


def test_a_jwt_is_served_by_its_claims_and_an_expired_one_by_its_refusal(
    pipeline: ListPipeline, replay: Any
) -> None:
    token = jwt.encode({"sub": "ada", "scope": "notes"}, JWT_KEY, algorithm="HS256")
    assert jwt.decode(token, JWT_KEY, algorithms=["HS256"]) == {
        "sub": "ada",
        "scope": "notes",
    }
    expired = jwt.encode({"sub": "bob", "exp": 1}, JWT_KEY, algorithm="HS256")
    with pytest.raises(jwt.ExpiredSignatureError):
        jwt.decode(expired, JWT_KEY, algorithms=["HS256"])
    exchanges = pipeline.exchanges()
    assert [_without_extras(e) for e in exchanges] == [
        {
            "protocol": "invoke",
            "request": {
                "tool": "credential",
                "op": "jwt.decode",
                "input": {"credential": _string_placeholder(len(token)), "algorithms": ["HS256"]},
            },
            "response": {
                "ok": True,
                "data": {
                    "header": {"alg": "HS256", "typ": "JWT"},
                    "payload": {"sub": "ada", "scope": "notes"},
                },
            },
        },
        {
            "protocol": "invoke",
            "request": {
                "tool": "credential",
                "op": "jwt.decode",
                "input": {
                    "credential": _string_placeholder(len(expired)),
                    "algorithms": ["HS256"],
                },
            },
            "response": {
                "ok": False,
                "error": {
                    "code": "jwt.exceptions:ExpiredSignatureError",
                    "status": None,
                    "message": "Signature has expired",
                    "cause": None,
                },
            },
        },
    ]
    recording.clear_pipeline(pipeline)

    replay(exchanges)
    assert jwt.decode("a.b.c", "replay-key-" * 3, algorithms=["HS256"]) == {
        "sub": "ada",
        "scope": "notes",
    }
    with pytest.raises(jwt.ExpiredSignatureError) as refused:
        jwt.decode("d.e.f", "replay-key-" * 3, algorithms=["HS256"])
    assert str(refused.value) == "Signature has expired"


def test_the_header_read_before_the_check_is_served_for_a_stand_in(
    pipeline: ListPipeline, replay: Any
) -> None:
    """Flask-JWT-Extended reads the header of the token it has not verified yet (to choose the
    key): a stand-in is no JWT, so the header it reads in replay is the recorded one."""
    token = jwt.encode({"sub": "ada"}, JWT_KEY, algorithm="HS256", headers={"kid": "k1"})
    header = {"alg": "HS256", "kid": "k1", "typ": "JWT"}
    assert jwt.get_unverified_header(token) == header
    assert jwt.api_jws.get_unverified_header(token) == header
    assert jwt.PyJWS().get_unverified_header(token) == header
    with pytest.raises(jwt.DecodeError):
        jwt.get_unverified_header("not-a-token")
    exchanges = pipeline.exchanges()
    read = {
        "protocol": "invoke",
        "request": {
            "tool": "credential",
            "op": "jwt.get_unverified_header",
            "input": {"credential": _string_placeholder(len(token))},
        },
        "response": {"ok": True, "data": {"header": header}},
    }
    assert [_without_extras(e) for e in exchanges] == [
        read,
        read,
        read,
        {
            "protocol": "invoke",
            "request": {
                "tool": "credential",
                "op": "jwt.get_unverified_header",
                "input": {"credential": _string_placeholder(len("not-a-token"))},
            },
            "response": {
                "ok": False,
                "error": {
                    "code": "jwt.exceptions:DecodeError",
                    "status": None,
                    "message": "Not enough segments",
                    "cause": None,
                },
            },
        },
    ]
    recording.clear_pipeline(pipeline)

    lines = replay(exchanges)
    assert jwt.get_unverified_header("s" * len(token)) == header
    assert jwt.api_jws.get_unverified_header("s" * len(token)) == header
    assert jwt.PyJWS().get_unverified_header("s" * len(token)) == header
    with pytest.raises(jwt.DecodeError) as refused:
        jwt.get_unverified_header("s" * len("not-a-token"))
    assert (str(refused.value), lines) == ("Not enough segments", [])


def test_python_jose_unverified_reads_are_served_for_a_stand_in(
    pipeline: ListPipeline, replay: Any
) -> None:
    token = jose.jwt.encode({"sub": "ada"}, JWT_KEY, algorithm="HS256", headers={"kid": "k1"})
    assert jose.jwt.get_unverified_header(token) == {"alg": "HS256", "kid": "k1", "typ": "JWT"}
    assert jose.jwt.get_unverified_claims(token) == {"sub": "ada"}
    exchanges = pipeline.exchanges()
    credential = {"credential": _string_placeholder(len(token))}
    assert [_without_extras(e) for e in exchanges] == [
        {
            "protocol": "invoke",
            "request": {
                "tool": "credential",
                "op": "jose.jwt.get_unverified_header",
                "input": credential,
            },
            "response": {
                "ok": True,
                "data": {"header": {"alg": "HS256", "kid": "k1", "typ": "JWT"}},
            },
        },
        {
            "protocol": "invoke",
            "request": {
                "tool": "credential",
                "op": "jose.jwt.get_unverified_claims",
                "input": credential,
            },
            "response": {"ok": True, "data": {"payload": {"sub": "ada"}}},
        },
    ]
    recording.clear_pipeline(pipeline)

    lines = replay(exchanges)
    assert jose.jwt.get_unverified_header("s" * len(token)) == {
        "alg": "HS256",
        "kid": "k1",
        "typ": "JWT",
    }
    assert jose.jwt.get_unverified_claims("s" * len(token)) == {"sub": "ada"}
    assert lines == []


# -- D5 ----------------------------------------------------------------------------------------


def _failure(*exchanges: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"kind": "input", "operation": "POST /notes", "replaySeed": "0123456789abcdef"},
        *({"kind": "effect", "effect": "call", "exchange": e} for e in exchanges),
        {"kind": "return", "status": 500, "effectsComplete": True},
    ]


def test_a_failure_whose_only_effects_are_credential_checks_sends_no_batch() -> None:
    check = {
        "protocol": "invoke",
        "request": {"tool": "credential", "op": "jwt.decode", "input": {}},
        "response": {"ok": True, "data": {"verified": True}},
    }
    # What a warm process's cache answered is no more data than a credential is.
    cached = {
        "protocol": "invoke",
        "request": {"tool": "cache", "op": "django.contenttypes", "input": {"id": 7}},
        "response": {"ok": True, "data": {"id": 7, "app_label": "notes", "model": "note"}},
    }
    data = {
        "protocol": "invoke",
        "request": {"tool": "kv", "op": "get", "input": {}},
        "response": {"ok": True, "data": 1},
    }
    assert capture_eligibility(_failure(check)) == (False, "no-exchanges")
    assert capture_eligibility(_failure(check, cached)) == (False, "no-exchanges")
    assert capture_eligibility(_failure(check, data)) == (True, None)
    assert capture_eligibility(_failure(cached, data)) == (True, None)
    assert re.fullmatch(r"[0-9a-f]{16}", _failure()[0]["replaySeed"])


# -- never changing what the application sees --------------------------------------------------


class Opaque:
    """A payload a custom serializer may return: it has no JSON form."""


class OpaqueSerializer:
    @staticmethod
    def loads(data: bytes) -> Opaque:
        return Opaque()

    @staticmethod
    def dumps(value: Any) -> str:
        return "{}"


def test_a_result_with_no_json_form_is_returned_as_it_is_and_the_capture_is_incomplete(
    pipeline: ListPipeline,
) -> None:
    serializer = itsdangerous.Serializer("key", salt="s", serializer=OpaqueSerializer)
    result = serializer.loads(serializer.dumps({}))
    assert type(result) is Opaque
    assert pipeline.calls == [
        ("fail", "credential: itsdangerous.loads: the result holds a Opaque with no JSON form")
    ]


def test_a_refusal_naming_a_class_outside_the_library_is_not_raised(
    patched: list[str], replay: Any
) -> None:
    refusal = {
        "protocol": "invoke",
        "request": {
            "tool": "credential",
            "op": "itsdangerous.loads",
            "input": {"credential": _string_placeholder(3), "salt": "s"},
        },
        "response": {
            "ok": False,
            "error": {"code": "builtins:SystemExit", "status": None, "message": "bye"},
        },
    }
    replay([refusal])
    with pytest.raises(MissingFixtureError) as refused:
        itsdangerous.URLSafeSerializer("key", salt="s").loads("abc")
    assert str(refused.value) == (
        "reproit: credential check itsdangerous.loads recorded a refusal (builtins:SystemExit) "
        "this process cannot raise"
    )
