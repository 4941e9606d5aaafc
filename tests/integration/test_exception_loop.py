"""Why it failed, end to end: the exception captured, compared on replay, shown.

The coupon app (``apps/coupon_logic.py``, no reproit-otel code) runs on Flask, FastAPI and
Django under the real ``opentelemetry-instrument`` launcher (with
``opentelemetry-instrumentation-logging`` installed, so an OpenTelemetry handler sits on the
root logger) and sends its failure to a real ``reproit-otel serve``. Its ``GET /coupon`` asks
a real loopback upstream for a rate, then a helper function fails: a ``ZeroDivisionError``
re-raised as a ``ValueError`` whose message holds a configured secret and a secret query
value. The upstream is then stopped and the real CLI replays the occurrence:

* the capsule's ``return`` carries the exception (type, scrubbed message, application frames,
  the chained cause), and the stored batch is one the reference validator accepts;
* ``check`` prints ``REPRODUCED  ValueError: ...  (coupon_logic.py:N in apply_coupon), as
  recorded`` and the replayed application's own standard error: the framework's traceback,
  exactly once, whether OpenTelemetry's log handler, a local handler too, or no logging
  instrumentation sits on the root logger, and before it what the application printed on
  its standard output (in ``--json`` too, and as it runs with ``--verbose``);
* a variant failing with another exception is a different failure (exit 3, both shown);
* the fixed variant is *fixed*;
* ``reproit-otel show`` prints the exception;
* the ingest page, in a real headless Chromium, shows the exception with its application
  frames and chained cause, the timeline of the exchanges, and, once a failure with another
  exception joins the occurrence, both exception kinds, filterable (screenshots in
  ``test-artifacts/``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.capture.uploader import Uploader, UploaderSettings
from reproit_otel.check.report import COLUMN_WIDTH
from reproit_otel.ingest.store import SQLiteStore
from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings
from reproit_otel.wire.capsule import capsule_from_batch
from reproit_otel.wire.exception import error_of_output
from reproit_otel.wire.validate import validate_capture_batch
from tests.integration import test_ingest_web as web_page
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.upstream import Upstream

APPS = Path(__file__).resolve().parent / "apps"
LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")
KEY = "coupon-key"
SECRET = "sk_live_planted_4242"
CHECK_TIMEOUT_S = 180
FRAMEWORKS = ("flask", "fastapi", "django")


def clean_environ(**extra: str) -> dict[str, str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "REPROIT_", "COUPON_", "DJANGO_"))
        or key == "REPROIT_STRICT_INTERNAL"
    }
    environ.update(extra)
    return environ


def app_environ(framework: str, **extra: str) -> dict[str, str]:
    environ = clean_environ(
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        REPROIT_SECRET_VALUES=SECRET,
        PYTHONPATH=str(APPS),
        **extra,
    )
    if framework == "django":
        environ["DJANGO_SETTINGS_MODULE"] = "coupon_django"
    return environ


def line_of(name: str, marker: str) -> int:
    """The line number of the first line of ``apps/<name>`` containing ``marker``."""
    for number, line in enumerate((APPS / name).read_text().splitlines(), 1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} not in {name}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class Loop:
    framework: str
    ingest: ServedIngest
    occurrence: str
    capsule: dict[str, Any]
    upstream: str
    workdir: Path

    def check(self, *flags: str, **variant: str) -> subprocess.CompletedProcess[str]:
        """``reproit-otel check`` of the occurrence against the app, from its own folder."""
        app = APPS / f"coupon_{self.framework}.py"
        boot = " ".join(shlex.quote(str(part)) for part in (LAUNCHER, sys.executable, app))
        return subprocess.run(
            cli_command(
                "check",
                self.occurrence,
                "--exec",
                f"cd {shlex.quote(str(APPS))} && {boot}",
                "--ingest",
                self.ingest.base_url,
                "--api-key",
                KEY,
                *flags,
            ),
            cwd=self.workdir,
            env=app_environ(
                self.framework,
                OTEL_TRACES_EXPORTER="none",
                UPSTREAM=self.upstream,
                **variant,
            ),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )

    def check_json(self, **variant: str) -> tuple[int, dict[str, Any]]:
        done = self.check("--json", **variant)
        try:
            result: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise AssertionError(f"no JSON (exit {done.returncode}):\n{done.stderr}") from None
        return done.returncode, result


def wait_for_occurrence(ingest: ServedIngest) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = httpx.get(
            f"{ingest.base_url}/v1/occurrences", headers={"authorization": f"Bearer {KEY}"}
        ).json()["occurrences"]
        ready = [row for row in rows if row["capsuleAvailable"]]
        if ready:
            [row] = ready
            identifier: str = row["id"]
            return identifier
        time.sleep(0.1)
    raise AssertionError(f"no occurrence reached the ingest: {ingest.lines}")


@pytest.fixture(scope="module", params=FRAMEWORKS)
def loop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loop]:
    framework: str = request.param
    workdir = tmp_path_factory.mktemp(f"exception-{framework}")
    ingest = ServedIngest(f"sqlite:///{workdir / 'ingest.db'}", "--api-key", KEY)
    upstream = Upstream()
    app: subprocess.Popen[str] | None = None
    try:
        port = free_port()
        app = subprocess.Popen(
            [str(LAUNCHER), sys.executable, "-u", str(APPS / f"coupon_{framework}.py")],
            cwd=APPS,
            env=app_environ(
                framework,
                PORT=str(port),
                UPSTREAM=upstream.base,
                OTEL_SERVICE_NAME=f"coupon-{framework}",
                OTEL_TRACES_EXPORTER="reproit",
                REPROIT_ENDPOINT=f"{ingest.base_url}/v1/capture-batches",
                REPROIT_API_KEY=KEY,
                REPROIT_APP_ID=f"coupon-{framework}",
                REPROIT_FLUSH_INTERVAL_MS="100",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not answers(port):
            assert app.poll() is None and time.monotonic() < deadline, app.communicate(timeout=10)
            time.sleep(0.1)
        live = httpx.get(f"http://127.0.0.1:{port}/coupon?code=SAVE10", timeout=30)
        assert live.status_code == 500
        occurrence = wait_for_occurrence(ingest)
        capsule = httpx.get(
            f"{ingest.base_url}/v1/occurrences/{occurrence}/capsule",
            headers={"authorization": f"Bearer {KEY}"},
        ).json()
        app.terminate()
        app.communicate(timeout=30)
        upstream.stop()
        yield Loop(framework, ingest, occurrence, capsule, upstream.base, workdir)
    finally:
        if app is not None and app.poll() is None:
            app.kill()
            app.communicate(timeout=30)
        upstream.stop()
        assert ingest.stop() == 0


def application_frames(error: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [
        (frame["file"], frame["line"], frame["function"])
        for frame in error["frames"]
        if not frame.get("library")
    ]


def test_the_capsule_carries_the_exception_scrubbed(loop: Loop) -> None:
    returned = loop.capsule["events"][-1]
    assert (returned["kind"], returned["status"]) == ("return", 500)
    error = error_of_output(returned["output"])
    assert error is not None, returned
    assert (error["type"], error["message"]) == (
        "builtins.ValueError",
        f"coupon SAVE10 failed for account $reproit "
        f"(priced by {loop.upstream}/json?api_key=$reproit&currency=EUR)",
    )
    assert SECRET not in json.dumps(loop.capsule) and "hunter2" not in json.dumps(loop.capsule)
    view = {"flask": "coupon", "fastapi": "coupon", "django": "coupon"}[loop.framework]
    assert application_frames(error) == [
        (f"coupon_{loop.framework}.py", line_of(f"coupon_{loop.framework}.py", "# VIEW"), view),
        ("coupon_logic.py", line_of("coupon_logic.py", "return apply_coupon("), "quote"),
        ("coupon_logic.py", line_of("coupon_logic.py", "raise ValueError("), "apply_coupon"),
    ]
    cause = error["cause"]
    assert (cause["type"], cause["message"], cause["chained"]) == (
        "builtins.ZeroDivisionError",
        "float division by zero",
        "cause",
    )
    assert application_frames(cause) == [
        ("coupon_logic.py", line_of("coupon_logic.py", "# BUG"), "apply_coupon")
    ]


def test_the_stored_batch_passes_the_reference_validator_and_projects_to_the_capsule(
    loop: Loop,
) -> None:
    store = SQLiteStore(loop.workdir / "ingest.db")
    try:
        batch = store.latest_batch(loop.occurrence)
    finally:
        store.close()
    assert batch is not None
    assert validate_capture_batch(batch) == []
    assert capsule_from_batch(batch) == loop.capsule


def test_check_reproduces_the_recorded_exception(loop: Loop) -> None:
    done = loop.check()
    assert done.returncode == 1, done.stdout + done.stderr
    line = line_of("coupon_logic.py", "raise ValueError(")
    headline = (
        f"REPRODUCED  ValueError: coupon SAVE10 failed for account $reproit (priced by "
        f"{loop.upstream}/json?api_key=$reproit&currency=EUR)  "
        f"(coupon_logic.py:{line} in apply_coupon), as recorded"
    )
    assert headline in done.stdout.splitlines(), done.stdout
    # The replayed application's own traceback, though only OpenTelemetry's handler sat on
    # the root logger, and before it what it printed: shown after the verdict.
    printed, shown = done.stdout.split("application stderr (last", 1)
    assert "Traceback (most recent call last):" in shown, done.stdout
    assert "ZeroDivisionError: float division by zero" in shown, done.stdout
    assert printed.split("\napplication stdout (last ", 1)[1].splitlines()[1:] == [
        "  quoting coupon SAVE10 at rate 1.5"
    ], done.stdout


def test_the_replayed_applications_stdout_is_in_json_and_live_with_verbose(loop: Loop) -> None:
    code, result = loop.check_json()
    assert (code, result["applicationStdout"]) == (1, ["quoting coupon SAVE10 at rate 1.5"])
    verbose = loop.check("--verbose")
    assert "application stdout (last" not in verbose.stdout
    echoed = verbose.stderr.splitlines()
    assert echoed.count("quoting coupon SAVE10 at rate 1.5") == 1, verbose.stderr


LOGGING_SETUPS = {
    # The launcher's default: the logging instrumentation's handler alone on the root logger.
    "otel-handler-only": {},
    # It calls logging.basicConfig() first: a local stream handler beside OpenTelemetry's.
    "log-correlation": {"OTEL_PYTHON_LOG_CORRELATION": "true"},
    # No logging instrumentation at all.
    "no-logging-instrumentation": {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "logging"},
}


# The line each framework heads its logged traceback with: Flask's app logger, uvicorn's
# error logger (its own stream handler), Django's ``django.request`` logger (whose console
# handler is silent with DEBUG off, so the traceback reaches stderr through reproit-otel's
# fallback or the root logger's handler).
TRACEBACK_HEADS = {
    "flask": "Exception on /coupon [GET]",
    "fastapi": "Exception in ASGI application",
    "django": "Internal Server Error: /coupon",
}


@pytest.mark.parametrize("setup", sorted(LOGGING_SETUPS))
def test_the_replayed_traceback_shows_once_whatever_the_logging(loop: Loop, setup: str) -> None:
    head = TRACEBACK_HEADS[loop.framework]
    done = loop.check(**LOGGING_SETUPS[setup])
    assert done.returncode == 1, done.stdout + done.stderr
    shown = done.stdout.split("application stderr (last", 1)[1].splitlines()
    # The framework's traceback of the failure, its chained cause included, exactly once.
    assert sum(head in line for line in shown) == 1, shown
    assert sum(line.strip() == "Traceback (most recent call last):" for line in shown) == 2, shown
    assert sum(line.strip() == "ZeroDivisionError: float division by zero" for line in shown) == 1
    verbose = loop.check("--verbose", **LOGGING_SETUPS[setup])
    assert "application stderr (last" not in verbose.stdout
    assert sum(head in line for line in verbose.stderr.splitlines()) == 1, verbose.stderr


def test_another_exception_is_a_different_failure(loop: Loop) -> None:
    code, result = loop.check_json(COUPON_OTHER="1")
    assert (code, result["verdict"], result["differentFailure"]) == (3, "inconclusive", True)
    assert result["observedResult"]["status"] == 500
    recorded, replayed = result["recordedException"], result["replayedException"]
    assert (recorded["type"], replayed["type"], replayed["message"]) == (
        "builtins.ValueError",
        "builtins.KeyError",
        "'SAVE10'",
    )
    assert application_frames(replayed)[-1] == (
        "coupon_logic.py",
        line_of("coupon_logic.py", "# OTHER BUG"),
        "lookup_discount",
    )


def test_a_divergence_shows_what_was_sent_next_to_what_was_recorded(loop: Loop) -> None:
    done = loop.check(COUPON_CURRENCY="USD")
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("first divergence (0 of 1 recorded exchanges served before it):")
    title, rule, method, url, *_ = lines[start + 1 :]
    assert title.split() == ["the", "application", "sent", "the", "recording", "expected"]
    assert set(rule.replace(" ", "")) == {"-"}
    # Field by field: the method is the same (":"), the URL is not ("|").
    column = f"  {{:<{COLUMN_WIDTH}}} {{}} {{}}"
    assert method == column.format('"method": "GET"', ":", '"method": "GET"')
    assert url == column.format(
        f'"url": "{loop.upstream}/json?currency=USD"', "|", f'"url": "{loop.upstream}/json"'
    )


def test_the_fixed_app_is_fixed(loop: Loop) -> None:
    code, result = loop.check_json(COUPON_FIXED="1")
    assert (code, result["verdict"], result["replayedException"]) == (0, "fixed", None)


def test_show_prints_the_exception(loop: Loop) -> None:
    done = subprocess.run(
        cli_command("show", loop.occurrence, "--ingest", loop.ingest.base_url, "--api-key", KEY),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = line_of("coupon_logic.py", "raise ValueError(")
    assert (
        f"exception:  ValueError: coupon SAVE10 failed for account $reproit (priced by "
        f"{loop.upstream}/json?api_key=$reproit&currency=EUR)  "
        f"(coupon_logic.py:{line} in apply_coupon)"
    ) in done.stdout.splitlines(), done.stdout
    assert f"  coupon_logic.py:{line} in apply_coupon" in done.stdout.splitlines()


# -- the page, in a real headless Chromium (last: it files a second exception kind) ----------


def other_failure(loop: Loop) -> None:
    """Upload the same failure once more, raising a KeyError elsewhere: a second kind."""
    events = [dict(event) for event in loop.capsule["events"]]
    error = {
        "type": "builtins.KeyError",
        "message": "'SAVE10'",
        "frames": [{"file": "coupon_logic.py", "line": 46, "function": "lookup_discount"}],
    }
    events[-1]["output"] = {"error": error}
    # The projection's start event leaves the seed to the envelope; a capture carries it.
    events[0]["replaySeed"] = loop.capsule["envelope"]["replaySeed"]
    uploader = Uploader(
        UploaderSettings(
            endpoint=f"{loop.ingest.base_url}/v1/capture-batches",
            api_key=KEY,
            capture=CaptureSettings(project_id=f"coupon-{loop.framework}"),
            flush_interval_ms=100,
        ),
        lambda number: CaptureEnvironment(
            now_ms=int(time.time() * 1000), batch_number=number, runtime="python 3"
        ),
    )
    try:
        assert uploader.record(events) is True
        assert uploader.flush(20) is True
        assert uploader.stats()["sent_batches"] == 1
    finally:
        uploader.close()


browser = web_page.browser  # the headless Chromium fixture of the page's own tests


def test_the_page_shows_the_exception_its_kinds_and_the_timeline(loop: Loop, browser: Any) -> None:
    other_failure(loop)
    kind = "ValueError @ coupon_logic.py in apply_coupon"
    other = "KeyError @ coupon_logic.py in lookup_discount"
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{loop.ingest.base_url}/")
        page.fill("#key", KEY)
        page.click("#sign-in")
        page.wait_for_selector("table.occurrences")
        # One capture of each: by name.
        assert texts(page, "tr.occ td.exc code") == [other, kind]
        page.select_option("#f-exception", other)
        page.click("#f-apply")
        page.wait_for_url(re.compile(r".*exception=KeyError.*"))
        assert texts(page, "tr.occ a.op") == ["GET /coupon"]
        page.click("tr.occ a.op")
        page.wait_for_selector("#exception")
        # Each distinct failure is an occurrence of its own: the KeyError one holds only its
        # kind, and the ValueError one is reached from the list by its kind.
        assert page.inner_text("#exception .exc-type") == "KeyError"
        assert texts(page, "#kinds td code") == [other]
        page.goto(f"{loop.ingest.base_url}/")
        page.wait_for_selector("table.occurrences")
        page.select_option("#f-exception", kind)
        page.click("#f-apply")
        page.wait_for_url(re.compile(r".*exception=ValueError.*"))
        assert texts(page, "tr.occ a.op") == ["GET /coupon"]
        page.click("tr.occ a.op")
        page.wait_for_selector("#exception")
        assert texts(page, "#exception-0 .exc-type, #exception-0 .exc-message") == [
            "ValueError",
            f"coupon SAVE10 failed for account $reproit "
            f"(priced by {loop.upstream}/json?api_key=$reproit&currency=EUR)",
        ]
        logic = "coupon_logic.py"
        assert texts(page, "#exception-0 .app-frames li") == [
            f"{logic}:{line_of(logic, 'raise ValueError(')} in apply_coupon",
            f"{logic}:{line_of(logic, 'return apply_coupon(')} in quote",
            f"coupon_{loop.framework}.py:{line_of(f'coupon_{loop.framework}.py', '# VIEW')} "
            "in coupon",
        ]
        assert page.inner_text("#exception-1 .exc-type") == "ZeroDivisionError"
        assert page.locator("#timeline rect.bar").count() == 1
        assert texts(page, "#timeline .timeline-labels code") == [f"GET {loop.upstream}/json"]
        assert SECRET not in page.content()
        page.screenshot(
            path=str(web_page.artifacts_dir() / f"ingest-web-exception-{loop.framework}.png"),
            full_page=True,
        )
        assert errors == []
    finally:
        context.close()
    for wanted, found in ((kind, [loop.occurrence]), ("KeyError @ elsewhere.py in f", [])):
        listed = httpx.get(
            f"{loop.ingest.base_url}/v1/occurrences",
            params={"exception": wanted},
            headers={"authorization": f"Bearer {KEY}"},
        ).json()
        assert [row["id"] for row in listed["occurrences"]] == found


def texts(page: Any, selector: str) -> list[str]:
    return [" ".join(text.split()) for text in page.locator(selector).all_inner_texts()]
