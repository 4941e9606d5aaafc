"""examples/django_ledger/README.md, run as written: capture, pull, stop, replay, fix, replay.

The commands are read from the README (``tests/docs_commands.py``) and run in a shell, in a
folder holding a copy of the example where the README's ``examples/django_ledger`` paths
point, with the only substitutions a reader's machine would make: the throwaway PostgreSQL's
DSN, free ports for the ingest and gunicorn.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx

from tests.docs_commands import ROOT, block_commands, command_starting, exports
from tests.integration.pipeline_support import _free_port
from tests.integration.test_docs_walkthrough import (
    Background,
    _env,
    _serve,
    _sh,
    _verdict,
    _wait_for_rows,
)
from tests.pgserver import ThrowawayPostgres

README = "examples/django_ledger/README.md"
BUG = "    average = total / len(overdue)\n"
FIX = "    average = total / len(overdue) if overdue else Decimal(0)\n"


def test_the_django_example_reproduces_then_is_fixed(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "django_ledger", tmp_path / "examples" / "django_ledger")
    views = tmp_path / "examples" / "django_ledger" / "payments" / "views.py"
    assert views.read_text(encoding="utf-8").count(BUG) == 1
    assert FIX.strip() in (ROOT / README).read_text(encoding="utf-8")

    postgres = ThrowawayPostgres()
    postgres.start()
    ingest, ingest_url = _serve(command_starting(README, "reproit-otel serve"), tmp_path, _env())
    server: Background | None = None
    try:
        block = block_commands(README, "export DATABASE_URL=")
        variables = {
            name: value.replace("http://127.0.0.1:8765", ingest_url)
            for name, value in exports(block).items()
        }
        variables["DATABASE_URL"] = postgres.dsn
        env = _env(**variables, REPROIT_INGEST_URL=ingest_url)
        migrate = command_starting(README, "python examples/django_ledger/manage.py")
        migrated = _sh(migrate, tmp_path, env)
        assert migrated.returncode == 0, migrated.stderr

        port = _free_port()
        launch = block[-1].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        server = Background(launch, tmp_path, env)
        server.wait_http(f"http://127.0.0.1:{port}/", timeout=60)
        ada = "11111111-1111-4111-8111-111111111111"  # seeded with overdue invoices
        healthy = httpx.post(
            f"http://127.0.0.1:{port}/customers/{ada}/payments", json={"amount": "5.00"}
        )
        assert healthy.status_code == 200, "\n".join(server.lines)
        assert healthy.json()["overdue"] == 2
        curl = command_starting(README, "curl").replace("localhost:8000", f"localhost:{port}")
        paid = _sh(curl, tmp_path, env)
        assert paid.returncode == 0, paid.stderr
        assert "Server Error (500)" in paid.stdout

        rows = _wait_for_rows(command_starting(README, "reproit-otel list"), tmp_path, env)
        [[occurrence, *_, operation]] = rows
        assert operation.endswith("/payments")
        pull = command_starting(README, "reproit-otel pull").replace("OCC", occurrence)
        pulled = _sh(pull, tmp_path, env)
        assert pulled.returncode == 0, pulled.stderr
        capsule = json.loads((tmp_path / "capsule.json").read_text(encoding="utf-8"))
        start = capsule["events"][0]
        assert (start["input"]["body"], capsule["events"][-1]["status"]) == (
            {"amount": "20.00"},
            500,
        )

        assert server.stop() == 0
        server = None
        postgres.stop()

        check = command_starting(README, "OTEL_TRACES_EXPORTER=none")
        replayed = _sh(check, tmp_path, env)
        assert (replayed.returncode, _verdict(replayed.stdout)) == (1, "REPRODUCED"), (
            replayed.stdout + replayed.stderr
        )
        views.write_text(views.read_text(encoding="utf-8").replace(BUG, FIX), encoding="utf-8")
        fixed = _sh(check, tmp_path, env)
        assert (fixed.returncode, _verdict(fixed.stdout)) == (0, "FIXED"), (
            fixed.stdout + fixed.stderr
        )
    finally:
        if server is not None:
            server.stop()
        ingest.stop()
        if postgres.data.exists():
            postgres.stop()
