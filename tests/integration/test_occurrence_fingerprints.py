"""One occurrence per distinct failure, every batch pullable, and old databases migrated.

* A real Flask route (``apps/articles_app.py``) failing with three different exceptions under
  ``opentelemetry-instrument`` gives three occurrences on a served ingest, each pullable; the
  same exception twice stays one occurrence with two batches, and the older one is pulled with
  ``pull --batch``; ``show`` lists the batches; ``list`` shows the project of
  ``$REPROIT_APP_ID``.
* The store (SQLite and PostgreSQL) groups by project, operation and fingerprint: the
  exception's type and innermost application frame (not its line), else the status; an OTLP
  span counts on the latest occurrence of its operation.
* A database written by the code of before fingerprints
  (``data/ingest_before_fingerprints.sql``) is regrouped when opened, on SQLite and on
  PostgreSQL, keeping every count and batch.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg2
import pytest

from reproit_otel.ingest.facts import batch_facts, server_span_facts
from reproit_otel.ingest.store import Store, open_store
from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_batch
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.trace import BackendTrace, TraceContext
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.stack_support import KEY, Request, Stack, clean_environ, serving
from tests.integration.upstream import Upstream
from tests.pgserver import fresh_database

APPS = Path(__file__).resolve().parent / "apps"
OLD_DATABASE = Path(__file__).resolve().parent / "data" / "ingest_before_fingerprints.sql"
ARTICLES = "POST /api/articles"


# --- the store ---------------------------------------------------------------------------------


def _error(type_name: str, file: str, line: int, function: str) -> dict[str, Any]:
    return {
        "type": type_name,
        "message": "it failed",
        "frames": [
            {"file": "flask/app.py", "line": 880, "function": "Flask.dispatch", "library": True},
            {"file": file, "line": line, "function": function},
        ],
    }


def _batch(number: int, output: dict[str, Any], status: int = 500) -> dict[str, Any]:
    context = TraceContext(trace_id=f"cap-{number}-1", capture_envelope=True, replay_seed="00ff")
    trace = BackendTrace.begin(context, ARTICLES, input={"body": {"n": number}}, wall_ms=lambda: 1)
    trace.effect(
        "call",
        resource="profiles:8080",
        key="GET /profile",
        exchange={
            "protocol": "http",
            "request": {"method": "GET", "url": "http://profiles:8080/profile", "headers": {}},
            "response": {"status": 200, "headers": {}, "body": {"text": "ok"}},
        },
    )
    trace.finish(output, status, False, True)
    queued = {"operation": ARTICLES, "status": status, "events": trace.events}
    return build_capture_batch(
        queued,
        config=CaptureSettings(project_id="realworld", build="1", commit="c"),
        environment=CaptureEnvironment(
            now_ms=1_700_000_000_000 + number,
            batch_number=number,
            runtime="python 3.12.0",
            os="linux",
            arch="x64",
            tz="UTC",
        ),
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ingest.db'}"
    return fresh_database(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


def _record(store: Store, number: int, output: dict[str, Any], status: int = 500) -> str:
    batch = _batch(number, output, status)
    result = store.record_batch(
        batch, batch_facts(batch), body=canonical_json(batch), received_ms=number * 1000
    )
    return result.occurrence_id


def test_failures_of_one_operation_group_by_exception_and_frame_not_line(store: Store) -> None:
    key_error = _record(store, 1, {"error": _error("builtins.KeyError", "app.py", 30, "parse")})
    type_error = _record(store, 2, {"error": _error("builtins.TypeError", "app.py", 35, "slug")})
    moved = _record(store, 3, {"error": _error("builtins.KeyError", "app.py", 31, "parse")})
    elsewhere = _record(store, 4, {"error": _error("builtins.KeyError", "app.py", 40, "save")})
    plain = _record(store, 5, {"body": {"error": "down"}}, status=502)
    assert moved == key_error
    assert len({key_error, type_error, elsewhere, plain}) == 4
    page = store.list_occurrences(operation=ARTICLES)
    assert {item.id: (item.fingerprint, item.count) for item in page.items} == {
        key_error: ("KeyError @ app.py in parse", 2),
        type_error: ("TypeError @ app.py in slug", 1),
        elsewhere: ("KeyError @ app.py in save", 1),
        plain: ("HTTP 502", 1),
    }
    batches = store.occurrence_batches(key_error)
    assert [(b.received_ms, b.kept, b.kind) for b in batches] == [
        (3000, True, "KeyError @ app.py in parse"),
        (1000, True, "KeyError @ app.py in parse"),
    ]
    found, older = store.batch_of(key_error, batches[1].seq)
    assert found and older is not None
    assert batch_facts(older).exception_kind == "KeyError @ app.py in parse"
    assert older["batchId"] == _batch(1, {})["batchId"]
    assert store.batch_of(type_error, batches[1].seq) == (False, None)
    # A span carries no exception: it counts on the latest occurrence of its operation.
    span = server_span_facts(
        project_id="realworld", operation=ARTICLES, status=500, build=None, commit=None
    )
    result = store.record_server_span(span, trace_id="ab" * 16, span_id="cd" * 8, received_ms=9)
    assert result.occurrence_id == plain
    again = store.record_server_span(span, trace_id="ab" * 16, span_id="cd" * 8, received_ms=10)
    assert (again.occurrence_id, again.duplicate) == (plain, True)


# --- migration ---------------------------------------------------------------------------------


def _old_statements() -> list[str]:
    """The statements of the old database's dump, one each (its lines end with ``;``)."""
    statements: list[str] = []
    current: list[str] = []
    for line in OLD_DATABASE.read_text(encoding="utf-8").splitlines():
        if line.startswith("--") and not current:
            continue
        current.append(line)
        if line.endswith(";"):
            statements.append("\n".join(current))
            current = []
    return statements


def _load_old_into_postgres(dsn: str) -> None:
    connection = psycopg2.connect(dsn)
    with connection, connection.cursor() as cursor:
        for statement in _old_statements():
            head = statement.split(None, 2)[:2]
            if head in (["BEGIN", "TRANSACTION;"], ["COMMIT;"]) or "sqlite_sequence" in statement:
                continue
            sql = re.sub(r'^INSERT INTO "(\w+)"', r"INSERT INTO \1", statement)
            if sql.startswith("CREATE TABLE"):
                sql = sql.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
                sql = sql.replace("INTEGER", "BIGINT")
            cursor.execute(sql)
        cursor.execute(
            "SELECT setval('reproit_batches_seq_seq', (SELECT MAX(seq) FROM reproit_batches))"
        )
    connection.close()


def _old_store(store_url: str) -> str:
    if store_url.startswith("sqlite:///"):
        connection = sqlite3.connect(store_url[len("sqlite:///") :])
        connection.executescript("\n".join(s for s in _old_statements()))
        connection.close()
    else:
        _load_old_into_postgres(store_url)
    return store_url


def test_a_database_of_before_fingerprints_is_regrouped_when_opened(store_url: str) -> None:
    _old_store(store_url)
    store = open_store(store_url)
    try:
        page = store.list_occurrences()
        shown = sorted(
            (item.operation, item.fingerprint, item.count, item.batch_count, item.trace_count)
            for item in page.items
        )
        related = (
            "django.core.exceptions.RelatedObjectDoesNotExist @ articles/serializers.py in "
            "ArticleSerializer.create"
        )
        assert shown == sorted(
            [
                ("GET /api/tags", "HTTP 502", 1, 1, 0),
                (ARTICLES, related, 3, 2, 1),  # the span counts on the latest one
                (ARTICLES, "TypeError @ articles/views.py in ArticleViewSet.create", 2, 2, 0),
                (
                    ARTICLES,
                    "django.db.utils.IntegrityError @ articles/models.py in Article.save",
                    1,
                    1,
                    0,
                ),
            ]
        )
        assert sum(item.count for item in page.items) == 7  # as before the migration
        for item in page.items:
            batches = store.occurrence_batches(item.id)
            assert len(batches) == item.batch_count
            for batch in batches:
                found, body = store.batch_of(item.id, batch.seq)
                assert found and body is not None
                assert batch_facts(body).occurrence_id == item.id
            kinds = [kind.kind for kind in store.failure_kinds(item.id)]
            assert kinds == ([] if item.operation == "GET /api/tags" else [item.fingerprint])
        before = sorted((item.id, item.count) for item in page.items)
    finally:
        store.close()
    reopened = open_store(store_url)  # a second open finds nothing to migrate
    try:
        assert sorted((item.id, item.count) for item in reopened.list_occurrences().items) == before
    finally:
        reopened.close()


# --- a real application, the served ingest and the CLI ----------------------------------------


ARTICLES_STACK = Stack(
    name="articles",
    cwd=APPS,
    serve=(sys.executable, "-u", str(APPS / "articles_app.py"), "{port}"),
    healthy=Request("GET", "/"),
    failing=lambda identifier, kind: Request("POST", "/api/articles"),
)
BODIES = [
    {"title": "first"},  # KeyError in parse_article
    {"author": "ann", "tags": None, "title": "t"},  # TypeError in slug_for
    {"author": "ann", "tags": ["a"], "title": ""},  # ValueError in save_article
    {"title": "second"},  # KeyError in parse_article again
]


def _cli(ingest: ServedIngest, *args: str, app_id: str | None = "articles") -> tuple[int, str]:
    env = clean_environ(REPROIT_INGEST_URL=ingest.base_url, REPROIT_API_KEY=KEY)
    if app_id is not None:
        env["REPROIT_APP_ID"] = app_id
    done = subprocess.run(
        cli_command(*args), env=env, capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stdout + done.stderr


def _input_body(capsule: dict[str, Any]) -> Any:
    start = next(event for event in capsule["events"] if event["kind"] == "start")
    return start["input"]["body"]


def test_a_route_failing_three_ways_is_three_pullable_occurrences(tmp_path: Path) -> None:
    ingest = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", "--api-key", KEY)
    upstream = Upstream()
    try:
        env = {
            "UPSTREAM": upstream.base,
            "OTEL_SERVICE_NAME": "articles",
            "OTEL_TRACES_EXPORTER": "reproit",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
            "REPROIT_API_KEY": KEY,
            "REPROIT_APP_ID": "articles",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
        with serving(ARTICLES_STACK, env) as port:
            for body in BODIES:
                answer = httpx.post(f"http://127.0.0.1:{port}/api/articles", json=body, timeout=30)
                assert answer.status_code == 500, answer.text
            deadline = time.monotonic() + 30
            rows: list[dict[str, Any]] = []
            while time.monotonic() < deadline:
                rows = httpx.get(
                    f"{ingest.base_url}/v1/occurrences",
                    headers={"authorization": f"Bearer {KEY}"},
                ).json()["occurrences"]
                if sum(row["batches"] for row in rows) == len(BODIES):
                    break
                time.sleep(0.1)
        code, listed = _cli(ingest, "list", "--json")
        assert code == 0, listed
        occurrences = json.loads(listed)["occurrences"]
        by_function = {row["fingerprint"].rsplit(" in ", 1)[-1]: row for row in occurrences}
        assert sorted(by_function) == ["parse_article", "save_article", "slug_for"], occurrences
        assert {name: row["fingerprint"].split(" @ ")[0] for name, row in by_function.items()} == {
            "parse_article": "KeyError",
            "slug_for": "TypeError",
            "save_article": "ValueError",
        }
        assert {name: row["batches"] for name, row in by_function.items()} == {
            "parse_article": 2,
            "slug_for": 1,
            "save_article": 1,
        }
        assert {row["operation"] for row in occurrences} == {ARTICLES}
        # Each is pullable, and its capsule holds the request that failed that way.
        for name, body in (("slug_for", BODIES[1]), ("save_article", BODIES[2])):
            target = tmp_path / f"{name}.json"
            code, said = _cli(ingest, "pull", by_function[name]["id"], "-o", str(target))
            assert code == 0, said
            assert _input_body(json.loads(target.read_text())) == body
        # The same exception twice: one occurrence, both batches listed and pullable.
        twice = by_function["parse_article"]["id"]
        code, shown = _cli(ingest, "show", twice)
        assert code == 0, shown
        batches = httpx.get(
            f"{ingest.base_url}/v1/occurrences/{twice}/batches",
            headers={"authorization": f"Bearer {KEY}"},
        ).json()["batches"]
        assert [batch["kept"] for batch in batches] == [True, True]
        newer, older = (batch["batch"] for batch in batches)
        assert "batches (most recent first; pull one with --batch N):" in shown
        for number in (newer, older):
            assert any(line.split()[:1] == [str(number)] for line in shown.splitlines()), shown
        pulled = {}
        for number in (newer, older, None):
            target = tmp_path / f"batch-{number}.json"
            extra = () if number is None else ("--batch", str(number))
            code, said = _cli(ingest, "pull", twice, *extra, "-o", str(target))
            assert code == 0, said
            pulled[number] = _input_body(json.loads(target.read_text()))
        assert pulled == {newer: BODIES[3], older: BODIES[0], None: BODIES[3]}
        code, said = _cli(ingest, "pull", twice, "--batch", "999999", "-o", str(tmp_path / "x"))
        assert code == 2
        assert f"occurrence {twice} has no batch 999999" in said
        # list shows the configured project's occurrences by default.
        code, other = _cli(ingest, "list", app_id="another-app")
        assert (code, other.strip()) == (0, "no occurrences of project another-app")
        code, every = _cli(ingest, "list", "--all-projects", "--json", app_id="another-app")
        assert len(json.loads(every)["occurrences"]) == 3
    finally:
        upstream.stop()
        ingest.stop()


def test_identifiers_are_new_per_fingerprint() -> None:
    # The id names project, operation, signature and fingerprint: no two of them collide.
    ids = {
        batch_facts(
            _batch(n, {"error": _error("builtins.KeyError", "a.py", 1, f"f{n}")})
        ).occurrence_id
        for n in range(20)
    }
    assert len(ids) == 20
    assert all(identifier.startswith("occ_") and len(identifier) == 24 for identifier in ids)
