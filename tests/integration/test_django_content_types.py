"""A warm Django worker answers content type lookups from memory; replay starts cold.

``ContentType.objects`` caches every content type it reads for the life of the process. The
notes project's summary page (``apps/notes_django``) reads the note's type with
``get_for_model`` and posts its id back; the post finds the note through ``get_for_id``,
which the worker that served the page answers from that cache, with no query, and then hits
the planted bug (500). The capture, made under ``runserver`` and the real
``opentelemetry-instrument`` after the user signed in and opened the page, so holds no
``django_content_type`` query. The replayed process is new, with an empty cache: the lookup
is served from what capture recorded where the cache answered it, and the failure is
REPRODUCED, not DIVERGED on a query production never needed; fixed code is FIXED, and a
post that runs another query first is DIVERGED. A post the same worker received before anything
had read the type (by its natural key) ran the query, and its capture replays with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.auth_stacks import (
    PASSWORD,
    SECRET_KEY,
    LoggedInRun,
    Scenario,
    Sent,
    assert_no_secret,
    hidden_field,
    run_logged_in,
)
from tests.integration.stack_support import dumped
from tests.integration.test_auth_django import STACK


def sign_in_open_and_fail(client: httpx.Client) -> Scenario:
    done = Scenario()
    login_token = hidden_field(client.get("/accounts/login/").text, "csrfmiddlewaretoken")
    signed_in = client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": login_token, "username": "ada", "password": PASSWORD},
    )
    assert (signed_in.status_code, signed_in.headers["location"]) == (302, "/notes/new/")
    form_token = hidden_field(client.get("/notes/new/").text, "csrfmiddlewaretoken")
    for title in ("Groceries", "Errands"):
        saved = client.post(
            "/notes/new/",
            data={"csrfmiddlewaretoken": form_token, "title": title, "body": "milk\neggs"},
        )
        assert (saved.status_code, saved.headers["location"]) == (302, "/notes/new/")
    # Nothing has read the note's content type yet: this post makes the worker query it.
    done.sent["cold"] = Sent(
        "POST",
        "/notes/2/summary/",
        client.post(
            "/notes/2/summary/", data={"csrfmiddlewaretoken": form_token, "kind": "notes.note"}
        ),
    )
    # The page reads the note's content type: from now on this worker holds it in memory.
    page = client.get("/notes/1/summary/")
    assert page.status_code == 200, page.text
    kind = hidden_field(page.text, "kind")
    summary_token = hidden_field(page.text, "csrfmiddlewaretoken")
    done.sent["warm"] = Sent(
        "POST",
        "/notes/1/summary/",
        client.post("/notes/1/summary/", data={"csrfmiddlewaretoken": summary_token, "kind": kind}),
    )
    # A signed-in GET / fails too: check's boot probe must not be taken for it.
    done.sent["home"] = Sent("GET", "/", client.get("/"))
    done.keep("csrf", login_token, form_token, summary_token, client.cookies["csrftoken"])
    done.keep("session cookie", client.cookies["sessionid"])
    return done


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoggedInRun]:
    workdir = tmp_path_factory.mktemp("notes-content-types")
    production = {"NOTES_SECRET_KEY": SECRET_KEY}
    with run_logged_in(STACK, workdir, sign_in_open_and_fail, production) as run:
        yield run


def _exchanges(capsule: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["exchange"] for e in capsule["events"] if e["kind"] == "effect"]


def test_the_lookup_the_cache_answered_is_recorded_in_place_of_a_query(warm: LoggedInRun) -> None:
    capture = warm.run.captures["warm"]
    assert capture.status == 500, capture.body
    exchanges = _exchanges(capture.capsule)
    lookups = [
        (x["request"], x["response"])
        for x in exchanges
        if x["protocol"] == "invoke" and x["request"]["tool"] == "cache"
    ]
    assert len(lookups) == 1, dumped(exchanges)
    [(request, response)] = lookups
    kind = response["data"]["id"]
    assert request == {
        "tool": "cache",
        "op": "django.contenttypes",
        "input": {"db": "default", "id": kind},
    }
    assert response == {"ok": True, "data": {"id": kind, "app_label": "notes", "model": "note"}}
    assert [x for x in exchanges if "django_content_type" in x["request"].get("text", "")] == []


def test_a_lookup_the_cache_could_not_answer_is_recorded_as_its_query(warm: LoggedInRun) -> None:
    capture = warm.run.captures["cold"]
    assert capture.status == 500, capture.body
    exchanges = _exchanges(capture.capsule)
    assert [x for x in exchanges if x["request"].get("tool") == "cache"] == []
    [lookup] = [x for x in exchanges if "django_content_type" in x["request"].get("text", "")]
    assert lookup["request"]["values"] == ["notes", "note"], dumped(lookup)


@pytest.mark.parametrize("kind", ["warm", "cold"])
def test_the_replay_in_a_new_process_reproduces_the_failure(warm: LoggedInRun, kind: str) -> None:
    code, result = warm.run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert (result["replayedException"]["type"], result["differentFailure"]) == (
        "builtins.ZeroDivisionError",
        False,
    ), dumped(result)
    assert result["usage"]["unused"] == 0, dumped(result)


@pytest.mark.parametrize(("kind", "title"), [("warm", "Groceries"), ("cold", "Errands")])
def test_the_fixed_code_replays_as_fixed(warm: LoggedInRun, kind: str, title: str) -> None:
    code, result = warm.run.check(kind, NOTES_FIXED="1")
    assert (code, result["verdict"], result["qualifier"]) == (0, "fixed", None), dumped(result)
    assert (result["observedResult"]["status"], result["observedResult"]["body"]) == (
        200,
        f"{title}: 1.0 words per line",
    )


def test_a_query_production_never_ran_diverges(warm: LoggedInRun) -> None:
    code, result = warm.run.check("warm", NOTES_SUMMARY_COUNT="1")
    assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
    [divergence] = result["divergences"]
    assert divergence["protocol"] == "pg", dumped(result)
    assert divergence["got"]["text"].startswith('SELECT COUNT(*) AS "__count" FROM "notes_note"'), (
        dumped(result)
    )


def test_a_failing_get_of_the_root_is_not_mistaken_for_the_boot_probe(warm: LoggedInRun) -> None:
    # check probes GET / until the application answers; when the recorded request is GET /
    # itself it probes with HEAD, so the anonymous probe neither begins the recorded request
    # nor uses its recording.
    assert warm.run.captures["home"].status == 500
    code, result = warm.run.check("home")
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["usage"]["unused"] == 0, dumped(result)
    assert result["replayedException"]["type"] == "builtins.ZeroDivisionError", dumped(result)
    code, result = warm.run.check("home", NOTES_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    assert result["observedResult"]["body"] == "ok, latest: 1.0 words per line"


def test_no_password_session_cookie_or_csrf_token_reaches_the_ingest(warm: LoggedInRun) -> None:
    assert_no_secret(warm, "password", "secret key", "csrf", "session cookie")
