"""The ingest's web page: what failed, what it exchanged, and how to replay it.

``reproit-otel serve`` serves it next to the API (:func:`web_routes`, mounted by
:func:`reproit_otel.ingest.app.create_app`)::

    GET  /                              occurrences, filterable, paginated (weblist)
    GET  /occurrences/{id}              one occurrence: exception, timeline, exchanges, return,
                                        replay command (webview); ?exception=KIND shows the
                                        latest failure of that exception kind
    GET  /occurrences/{id}/capsule      the capsule file, as an attachment
    GET  /login, POST /login            the sign-in form (a read key), POST /logout
    GET  /static/...                    the stylesheet, script and icon shipped in the package

Everything but ``/login`` and ``/static`` needs a read key (:mod:`reproit_otel.ingest.webauth`):
without one a page answers ``401`` with the sign-in form, which returns to the page asked for
once the key is accepted. Pages are rendered on the server (:mod:`~reproit_otel.ingest.webhtml`
escapes every recorded string); the only script, ``static/web.js``, adds the copy buttons.
No asset comes from another host, so the page works offline. Every page is sent with a strict
Content Security Policy (no inline script, nothing from elsewhere), ``X-Frame-Options: DENY``,
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from reproit_otel.ingest.failure_kinds import FailureKind
from reproit_otel.ingest.store import OccurrenceFacets, OccurrencePage, Store
from reproit_otel.ingest.webauth import COOKIE_NAME, SESSION_SECONDS, ReadKeys
from reproit_otel.ingest.webexchanges import page_number
from reproit_otel.ingest.webhtml import page, text
from reproit_otel.ingest.weblist import PAGE_SIZE, ListQuery, list_html
from reproit_otel.ingest.webview import occurrence_html
from reproit_otel.wire.capsule import capsule_bytes, capsule_from_batch

__all__ = ["STATIC_DIR", "WebPages", "web_routes"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_LOGIN_BODY = 4096
FAILED_LOGIN_DELAY_S = 0.5

_SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def _html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={**_SECURITY_HEADERS, **(headers or {})})


def safe_next(target: str | None) -> str:
    """A local path to return to after signing in; anything else becomes ``/``."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    if any(ord(ch) < 32 or ch == "\\" for ch in target):
        return "/"
    return target


def _login_page(target: str, message: str | None = None) -> str:
    error = f'<p class="error" role="alert">{text(message)}</p>' if message else ""
    return page(
        "Sign in",
        '<section class="login"><h1>Sign in</h1>'
        "<p>This ingest holds production failures. Enter the ingest key or a read-only key "
        "(<code>reproit-otel serve --read-key</code>).</p>"
        f'{error}<form method="post" action="/login">'
        f'<input type="hidden" name="next" value="{text(target)}">'
        '<label>Key <input type="password" name="key" id="key" autocomplete="current-password" '
        'required autofocus></label> <button type="submit" id="sign-in">Sign in</button>'
        "</form></section>",
    )


def _no_keys_page() -> str:
    return page(
        "Sign in",
        '<section class="login"><h1>This page needs a key</h1>'
        "<p>This ingest was started without any key, and its page shows captured production "
        "data, so it is not served. Restart it with a key to read it here:</p>"
        "<pre>reproit-otel serve --api-key KEY</pre>"
        "<p>or add a read-only key with <code>--read-key KEY</code>.</p></section>",
    )


class WebPages:
    """The page handlers bound to one store, set of read keys and replay boot command."""

    def __init__(self, store: Store, keys: ReadKeys, *, exec_command: str | None = None) -> None:
        self.store = store
        self.keys = keys
        self.exec_command = exec_command

    def _allowed(self, request: Request) -> bool:
        return self.keys.allowed(request.headers, request.cookies)

    def _refused(self, request: Request) -> HTMLResponse:
        if not self.keys.configured:
            return _html(_no_keys_page(), 401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return _html(
            _login_page(safe_next(target)), 401, {"www-authenticate": 'Bearer realm="reproit"'}
        )

    def _bad_request(self, message: str) -> HTMLResponse:
        body = f'<h1>Bad request</h1><p>{text(message)}.</p><p><a href="/">All occurrences</a></p>'
        return _html(page("Bad request", body, signed_in=True), 400)

    def _not_found(self, message: str, status: int = 404) -> HTMLResponse:
        body = f'<h1>Not here</h1><p>{text(message)}</p><p><a href="/">All occurrences</a></p>'
        return _html(page("Not found", body, signed_in=True), status)

    async def index(self, request: Request) -> Response:
        if not self._allowed(request):
            return self._refused(request)
        try:
            query = ListQuery.parse(request.query_params)
        except ValueError as error:
            return self._bad_request(str(error))

        def load() -> tuple[
            OccurrencePage, OccurrenceFacets, dict[str, list[str]], list[tuple[str, int]]
        ]:
            listed = self.store.list_occurrences(
                operation=query.operation,
                status=query.status,
                project_id=query.project,
                exception_kind=query.exception,
                limit=PAGE_SIZE,
                offset=query.offset,
            )
            kinds = self.store.kinds_of([item.id for item in listed.items])
            return listed, self.store.occurrence_facets(), kinds, self.store.kind_facets()

        listed, facets, kinds, kind_facets = await run_in_threadpool(load)
        body = list_html(query, listed, facets, kinds, kind_facets)
        return _html(page("Occurrences", body, signed_in=True))

    async def occurrence(self, request: Request) -> Response:
        if not self._allowed(request):
            return self._refused(request)
        try:
            page_wanted = page_number(request.query_params.get("page"))
        except ValueError as error:
            return self._bad_request(str(error))
        occurrence_id = request.path_params["occurrence_id"]
        found = await run_in_threadpool(self.store.get_occurrence, occurrence_id)
        if found is None:
            return self._not_found(f"No occurrence {occurrence_id}.")
        wanted = request.query_params.get("exception") or None

        def load() -> tuple[dict[str, Any] | None, list[FailureKind]]:
            if not found.batch_count:
                return None, []
            batch = None
            if wanted is not None:
                batch = self.store.latest_batch_of_kind(occurrence_id, wanted)
            if batch is None:
                batch = self.store.latest_batch(occurrence_id)
            return batch, self.store.failure_kinds(occurrence_id)

        batch, kinds = await run_in_threadpool(load)
        whole = None if batch is None else await run_in_threadpool(self.store.whole_capsule, batch)
        # The configured address, not the request's Host header (which the client chose).
        public_url = getattr(request.app.state, "public_url", None)
        base_url = public_url or str(request.base_url).rstrip("/")
        body = occurrence_html(
            found,
            batch,
            base_url=base_url,
            exec_command=self.exec_command,
            capsule=None if whole is None else json.loads(whole),
            page=page_wanted,
            kinds=kinds,
            selected_kind=wanted,
        )
        title = f"{found.status or ''} {found.operation}".strip()
        return _html(page(title, body, signed_in=True))

    async def capsule(self, request: Request) -> Response:
        if not self._allowed(request):
            return self._refused(request)
        occurrence_id = request.path_params["occurrence_id"]
        batch = await run_in_threadpool(self.store.latest_batch, occurrence_id)
        if batch is None:
            return self._not_found(
                f"Occurrence {occurrence_id} has no capture batch, so there is no capsule."
            )
        whole = await run_in_threadpool(self.store.whole_capsule, batch)
        capsule = capsule_from_batch(batch) if whole is None else None
        if whole is None and capsule is None:
            return self._not_found("The stored batch does not project to a capsule.", 422)
        filename = urllib.parse.quote(f"{occurrence_id}.capsule.json", safe="")
        return Response(
            whole if capsule is None else capsule_bytes(capsule),
            media_type="application/json",
            headers={
                **_SECURITY_HEADERS,
                "content-disposition": f"attachment; filename*=UTF-8''{filename}",
            },
        )

    async def login_form(self, request: Request) -> Response:
        target = safe_next(request.query_params.get("next"))
        if not self.keys.configured:
            return _html(_no_keys_page(), 401)
        if self._allowed(request):
            return RedirectResponse(target, status_code=303)
        return _html(_login_page(target))

    async def login(self, request: Request) -> Response:
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_LOGIN_BODY:
                return _html(_login_page("/", "The form is too large."), 413)
        fields = urllib.parse.parse_qs(raw.decode("utf-8", errors="replace"))
        key = (fields.get("key") or [""])[0].strip()
        target = safe_next((fields.get("next") or ["/"])[0])
        if not self.keys.configured:
            return _html(_no_keys_page(), 401)
        if not key or not self.keys.accepts(key):
            await asyncio.sleep(FAILED_LOGIN_DELAY_S)
            return _html(_login_page(target, "That key is not accepted here."), 401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE_NAME,
            self.keys.session_for(key),
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="lax")
        return response


def web_routes(store: Store, keys: ReadKeys, *, exec_command: str | None = None) -> list[BaseRoute]:
    """The page's routes, to put in the ingest application's route list."""
    pages = WebPages(store, keys, exec_command=exec_command)
    return [
        Route("/", pages.index, methods=["GET"]),
        Route("/occurrences/{occurrence_id}", pages.occurrence, methods=["GET"]),
        Route("/occurrences/{occurrence_id}/capsule", pages.capsule, methods=["GET"]),
        Route("/login", pages.login_form, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
