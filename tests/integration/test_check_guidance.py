"""``reproit-otel check`` says what to change when the application or the capsule is wrong.

Real subprocesses: the check command, and an application that exits at once, one that listens
on a port of its own choosing, and one that listens nowhere. Each reason is asserted whole,
with the application's last output lines shown after the verdict. A capsule missing its
``format``, ``version`` or ``events`` is refused with exit 2 naming the field.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.test_check_cli import check, recorded_capsule

LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")
NO_TELEMETRY = {
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}

EXITS = """\
import sys
sys.stderr.write("config: DATABASE_URL is not set\\n")
sys.exit(3)
"""

OWN_PORT = """\
import socket
import sys
import time

server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
sys.stderr.write(f"serving on port {server.getsockname()[1]}\\n")
sys.stderr.flush()
time.sleep(60)
"""

SILENT = """\
import sys
import time
sys.stderr.write("warming up\\n")
sys.stderr.flush()
time.sleep(60)
"""


def _run(tmp_path: Path, source: str, *extra: str) -> tuple[int, dict[str, object], str]:
    capsule = tmp_path / "capsule.json"
    capsule.write_text(json.dumps(recorded_capsule()), encoding="utf-8")
    app = tmp_path / "app.py"
    app.write_text(source, encoding="utf-8")
    # Under the launcher, as a user boots it: the replay is loaded (REPROIT:REPLAY) either way.
    command = f"{LAUNCHER} {sys.executable} {app}"
    done = check(tmp_path, str(capsule), "--exec", command, *extra, **NO_TELEMETRY)
    text = check(tmp_path, str(capsule), "--exec", command, *extra[1:], **NO_TELEMETRY)
    return done.returncode, json.loads(done.stdout), text.stdout


def test_an_application_that_exits_is_named_at_once_with_its_output(tmp_path: Path) -> None:
    code, result, text = _run(tmp_path, EXITS, "--json")
    port = result["reason"].split("$PORT (")[1].split(")")[0]  # type: ignore[union-attr]
    assert (code, result["verdict"]) == (3, "inconclusive")
    assert result["reason"] == (
        f"the application exited (code 3) before answering HTTP on $PORT ({port}); it must "
        "run a server listening on the port in the PORT environment variable (its last output "
        "lines are below)"
    )
    # The last output line is the application's (OpenTelemetry may have said something first).
    assert result["applicationStderr"][-1] == "config: DATABASE_URL is not set"  # type: ignore[index]
    assert text.splitlines()[-1] == "  config: DATABASE_URL is not set"


def test_an_application_on_its_own_port_is_told_to_take_port(tmp_path: Path) -> None:
    code, result, _ = _run(tmp_path, OWN_PORT, "--json", "--boot-timeout", "60")
    [own] = [line for line in result["applicationStderr"] if line.startswith("serving")]  # type: ignore[union-attr]
    reason = str(result["reason"])
    port = reason.split("$PORT (")[1].split(")", maxsplit=1)[0]
    assert (code, result["verdict"]) == (3, "inconclusive")
    assert reason == (
        f"the application listens on port {own.rsplit(' ', 1)[1]}, not on $PORT ({port}); it "
        "must take its port from the PORT environment variable, e.g. "
        "app.run(port=int(os.environ['PORT'])) or uvicorn --port $PORT"
    )


def test_an_application_that_never_listens_gets_the_port_rule(tmp_path: Path) -> None:
    code, result, _ = _run(tmp_path, SILENT, "--json", "--boot-timeout", "8")
    reason = str(result["reason"])
    port = reason.split("$PORT (")[1].split(")", maxsplit=1)[0]
    assert (code, result["verdict"]) == (3, "inconclusive")
    assert reason == (
        f"the application did not answer HTTP on $PORT ({port}) within 8 s; it must listen on "
        "the port in the PORT environment variable (raise --boot-timeout if it starts slowly)"
    )
    assert result["applicationStderr"][-1] == "warming up"  # type: ignore[index]


@pytest.mark.parametrize(
    ("capsule", "message"),
    [
        (
            {"format": "reproit-backend-capture"},
            'the capsule has no "version" field; expected "version": 1 or 2',
        ),
        (
            {"version": 2, "events": []},
            'the capsule has no "format" field; expected "format": "reproit-backend-capture" '
            '(a capture batch has a "batchId" instead)',
        ),
        (
            {"format": "reproit-backend-capture", "version": "2", "events": []},
            'the capsule\'s "version" is "2", which is not supported; expected 1 or 2. Upgrade '
            "reproit-otel if the capsule comes from a newer SDK.",
        ),
        (
            {"format": "reproit-backend-capture", "version": 2},
            'the capsule has no "events" field; expected an array of trace events',
        ),
        (
            {"format": "reproit-backend-capture", "version": 2, "events": "none"},
            'the capsule\'s "events" is a string; expected an array of trace events',
        ),
    ],
    ids=["no-version", "no-format", "version-text", "no-events", "events-text"],
)
def test_a_capsule_missing_a_field_is_exit_2_naming_it(
    tmp_path: Path, capsule: dict[str, object], message: str
) -> None:
    path = tmp_path / "capsule.json"
    path.write_text(json.dumps(capsule), encoding="utf-8")
    done = check(tmp_path, str(path), "--exec", "true")
    assert (done.returncode, done.stderr.splitlines()) == (
        2,
        [f"reproit-otel check: {path}: {message}"],
    )
