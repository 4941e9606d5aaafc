"""Django 5.2, zero code: captured under gunicorn, runserver and uvicorn, then replayed.

The project in ``apps/django_ledger`` has no reproit-otel code and an unchanged ``wsgi.py``,
``asgi.py`` and ``settings.py``. It runs under the real ``opentelemetry-instrument`` with the
Django, psycopg and requests instrumentations, on a real PostgreSQL, and sends its failures
to a real ``reproit-otel serve``. Each server is captured twice: the failing request as the
first one after boot (cold) and after several healthy requests (warm). Then PostgreSQL and the
upstream are stopped and ``reproit-otel check`` replays each occurrence: reproduced as is,
fixed with the one-line fix, diverged when a real query parameter changes.

Django talks to PostgreSQL through psycopg 3, which it prefers when it is installed (as Django's
documentation recommends); one more run hides psycopg 3 from it, so psycopg2 under Django
stays covered.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.integration.stack_support import (
    Request,
    Stack,
    StackRun,
    clean_environ,
    dumped,
    exchanges,
    run_stack,
    start_input,
)

APP = Path(__file__).resolve().parent / "apps" / "django_ledger"
PYTHON = sys.executable
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
UVICORN = str(Path(sys.executable).with_name("uvicorn"))
HEALTHY_CUSTOMER = "11111111-1111-4111-8111-111111111111"
BODY = {"amount": "12.50", "reference": "r-1"}
FORM = "application/x-www-form-urlencoded"


def migrate(env: Mapping[str, str]) -> None:
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--verbosity", "0"],
        cwd=APP,
        env={**env, "DJANGO_SETTINGS_MODULE": "ledger_site.settings"},
        check=True,
        timeout=120,
    )


def driver(**env: str) -> str:
    """The module Django's PostgreSQL backend talks through, in the project's environment."""
    done = subprocess.run(
        [
            PYTHON,
            "-c",
            "import django; django.setup(); "
            "from django.db import connection; print(connection.Database.__name__)",
        ],
        cwd=APP,
        env=clean_environ(**{"DJANGO_SETTINGS_MODULE": "ledger_site.settings", **env}),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


def payment(customer: str, kind: str = "cold") -> Request:
    """A payment: JSON for the healthy and the cold requests, a form for the warm one."""
    path = f"/api/customers/{customer}/payments?currency=EUR"
    if kind == "warm":
        return Request("POST", path, urlencode(BODY).encode(), FORM)
    return Request("POST", path, json.dumps(BODY).encode(), "application/json")


def stack(name: str, serve: tuple[str, ...], **env: str) -> Stack:
    return Stack(
        name=name,
        cwd=APP,
        serve=serve,
        healthy=payment(HEALTHY_CUSTOMER),
        failing=payment,
        prepare=migrate,
        env={"DJANGO_SETTINGS_MODULE": "ledger_site.settings", **env},
    )


STACKS = {
    "gunicorn": stack(
        "django-gunicorn",
        (GUNICORN, "--bind", "127.0.0.1:{port}", "ledger_site.wsgi"),
    ),
    "gunicorn-conn-max-age": stack(
        "django-gunicorn-persistent",
        (GUNICORN, "--bind", "127.0.0.1:{port}", "ledger_site.wsgi"),
        LEDGER_CONN_MAX_AGE="60",
    ),
    "runserver": stack(
        "django-runserver",
        (PYTHON, "manage.py", "runserver", "--noreload", "127.0.0.1:{port}"),
    ),
    "uvicorn": stack(
        "django-uvicorn",
        (UVICORN, "--port", "{port}", "ledger_site.asgi:application"),
    ),
}


PSYCOPG2 = stack(
    "django-gunicorn-psycopg2",
    (GUNICORN, "--bind", "127.0.0.1:{port}", "ledger_site.wsgi"),
    LEDGER_DRIVER="psycopg2",
)


def test_django_talks_to_postgresql_through_psycopg_3() -> None:
    # Both drivers are installed; every stack above runs with the project's plain settings.
    assert (driver(), driver(**PSYCOPG2.env)) == ("psycopg", "psycopg2")


@pytest.fixture(scope="module", params=sorted(STACKS))
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackRun]:
    name: str = request.param
    with run_stack(STACKS[name], tmp_path_factory.mktemp(name)) as result:
        yield result


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_failure_is_captured_whole_with_its_input(run: StackRun, kind: str) -> None:
    capture = run.captures[kind]
    path = capture.request.path.partition("?")[0]
    assert capture.status == 500
    assert capture.capsule["operation"] == f"POST {path}"
    given = start_input(capture.capsule)
    assert (given["body"], given["query"]) == (BODY, {"currency": "EUR"})
    assert given["headers"]["content-type"] == capture.request.content_type
    assert capture.capsule["events"][-1]["status"] == 500
    seen = exchanges(capture.capsule)
    protocols = {exchange["protocol"] for exchange in seen}
    assert protocols == {"pg", "http"}
    texts = [exchange["request"].get("text", "") for exchange in seen]
    assert any('INSERT INTO "ledger_payment"' in text for text in texts), texts
    assert any('"ledger_invoice"."due_at" <' in text for text in texts), texts


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_replay_reproduces_the_failure(run: StackRun, kind: str) -> None:
    code, result = run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_the_fixed_code_replays_as_fixed(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, LEDGER_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    answer = json.loads(result["observedResult"]["body"])
    assert (answer["overdue"], answer["average"], answer["rate"]) == (0, "0", 1.5)


@pytest.mark.parametrize("kind", ["cold", "warm"])
def test_a_changed_query_parameter_diverges(run: StackRun, kind: str) -> None:
    code, result = run.check(kind, LEDGER_OTHER_CURRENCY="1")
    assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
    # Django 4.2 runs the diverging query more than once (once with LIMIT 21): each run is a
    # divergence of its own; Django 5 and 6 run it once.
    divergences = result["divergences"]
    seen = [(d["protocol"], "USD" in json.dumps(d["got"])) for d in divergences]
    assert (len(seen) >= 1, seen) == (True, [("pg", True)] * len(seen)), dumped(result)


def test_django_on_psycopg2_is_captured_and_replayed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with run_stack(PSYCOPG2, tmp_path_factory.mktemp("psycopg2")) as run:
        for kind, capture in sorted(run.captures.items()):
            texts = [exchange["request"].get("text", "") for exchange in exchanges(capture.capsule)]
            assert capture.status == 500, kind
            assert any('INSERT INTO "ledger_payment"' in text for text in texts), texts
            code, result = run.check(kind)
            assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), (
                dumped(result)
            )
        code, result = run.check("warm", LEDGER_FIXED="1")
        assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
        code, result = run.check("cold", LEDGER_OTHER_CURRENCY="1")
        assert (code, result["verdict"]) == (3, "diverged"), dumped(result)
