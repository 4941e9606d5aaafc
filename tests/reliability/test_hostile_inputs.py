"""Malformed, truncated, huge and hostile capsules and batches are refused clearly.

* ``reproit-otel check FILE`` exits 2 with one ``reproit-otel check: ...`` line on stderr (no
  traceback) for every file that is not a usable capsule or capture batch;
* ``reproit-otel serve`` answers a hostile ``POST /v1/capture-batches`` with a 4xx and a JSON
  error naming the rule, and keeps serving: a good batch sent afterwards is accepted.

"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.wire.capsule import capsule_from_batch
from tests.integration.capture_helpers import built_batch
from tests.integration.served_ingest import ServedIngest, cli_command

KEY = "team-key"


def _capsule() -> dict[str, Any]:
    capsule = capsule_from_batch(built_batch())
    assert capsule is not None
    return capsule


def _text(change: Callable[[dict[str, Any]], Any]) -> str:
    capsule = _capsule()
    changed = change(capsule)
    return json.dumps(capsule if changed is None else changed)


def _deep(opening: str, closing: str, depth: int = 200_000) -> str:
    return opening * depth + closing * depth


CHECK_CASES: list[Any] = [
    pytest.param(b"", id="empty"),
    pytest.param(b"capsule", id="not-json"),
    pytest.param(b"\xff\xfe\x00garbage\x80", id="not-utf8"),
    pytest.param(b"\xef\xbb\xbf" + json.dumps(_capsule()).encode(), id="byte-order-mark"),
    pytest.param(json.dumps(_capsule()).encode()[:200], id="truncated"),
    pytest.param(b"[]", id="array"),
    pytest.param(b"null", id="null"),
    pytest.param(b'"reproit-backend-capture"', id="string"),
    pytest.param(_text(lambda c: c.update(format="other")).encode(), id="wrong-format"),
    pytest.param(_text(lambda c: c.update(version=3)).encode(), id="newer-version"),
    pytest.param(_text(lambda c: c.update(version="2")).encode(), id="version-as-text"),
    pytest.param(_text(lambda c: c.update(events="x")).encode(), id="events-not-array"),
    pytest.param(_text(lambda c: c.update(events=[1, 2])).encode(), id="event-not-object"),
    pytest.param(_text(lambda c: c.update(events=[])).encode(), id="no-events"),
    pytest.param(
        json.dumps({"batchId": "b", "schema": "capture-batch-v1", "events": []}).encode(),
        id="batch-without-start",
    ),
    pytest.param(
        (json.dumps(_capsule())[:-1] + ', "pad": "' + "x" * (24 << 20)).encode(),
        id="huge-and-truncated",
    ),
    pytest.param(_deep("[", "]").encode(), id="deeply-nested-array"),
    pytest.param(_deep('{"a":', "}").replace("}", "1}", 1).encode(), id="deeply-nested-object"),
    pytest.param(
        json.dumps({**_capsule(), "operation": "\ud800"}, ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        ),
        id="raw-lone-surrogate",
    ),
    pytest.param(
        json.dumps(_capsule()).replace('"POST /orders"', '"\\ud800"').encode(),
        id="escaped-lone-surrogate",
    ),
    pytest.param(
        re.sub(r'"sequence": [0-9]+', '"sequence": NaN', json.dumps(_capsule()), count=1).encode(),
        id="nan-literal",
    ),
]


@pytest.mark.parametrize("content", CHECK_CASES)
def test_check_refuses_an_unusable_file_with_exit_code_2(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "capsule.json"
    path.write_bytes(content)
    done = subprocess.run(
        cli_command("check", str(path)), capture_output=True, text=True, timeout=120, check=False
    )
    lines = done.stderr.splitlines()
    assert (done.returncode, len(lines), lines[0].startswith("reproit-otel check: ")) == (
        2,
        1,
        True,
    ), done.stderr[-2000:]


def test_check_refuses_a_missing_file_with_exit_code_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    done = subprocess.run(
        cli_command("check", str(missing)), capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stderr.startswith("reproit-otel check: cannot read")) == (2, True)


def test_replay_refuses_an_unusable_capsule_before_the_application_runs(tmp_path: Path) -> None:
    """``REPROIT_REPLAY`` never falls back to live calls: install fails loudly."""
    path = tmp_path / "capsule.json"
    path.write_text(json.dumps(_capsule())[:100], encoding="utf-8")
    program = "import reproit_otel.bootstrap as b; b.install(); print('application ran')"
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "REPROIT_REPLAY": str(path), "REPROIT_STRICT_INTERNAL": "0"},
    )
    assert done.returncode != 0
    assert "application ran" not in done.stdout
    assert "CapsuleError" in done.stderr


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIngest]:
    folder = tmp_path_factory.mktemp("hostile-ingest")
    server = ServedIngest(f"sqlite:///{folder / 'ingest.db'}", "--api-key", KEY)
    yield server
    assert server.stop() == 0


def _good() -> bytes:
    return json.dumps(built_batch(), separators=(",", ":")).encode()


BATCH_CASES: list[Any] = [
    pytest.param(b"", 400, "json", id="empty"),
    pytest.param(b"batch", 400, "json", id="not-json"),
    pytest.param(b"\xff\xfe\x00\x80", 400, "json", id="not-utf8"),
    pytest.param(_good()[:300], 400, "json", id="truncated"),
    pytest.param(b"[]", 400, "field-type", id="array"),
    pytest.param(
        json.dumps({**built_batch(), "pad": "x" * (5 << 20)}).encode(), 413, "body-size", id="huge"
    ),
    pytest.param(_deep("[", "]").encode(), 400, "json", id="deeply-nested-array"),
    pytest.param(
        _good().replace(b'"POST /orders"', b'"\\ud800"', 1),
        400,
        None,
        id="escaped-lone-surrogate",
    ),
    pytest.param(
        _good().replace(b'"sequence":1', b'"sequence":NaN', 1),
        400,
        None,
        id="nan-literal",
    ),
]


@pytest.mark.parametrize(("body", "status", "rule"), BATCH_CASES)
def test_the_ingest_refuses_a_hostile_batch_and_keeps_serving(
    ingest: ServedIngest, body: bytes, status: int, rule: str | None
) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    url = f"{ingest.base_url}/v1/capture-batches"
    answer = httpx.post(url, content=body, headers=headers, timeout=60)
    refused = (answer.status_code, answer.json()["error"]["rule"] if rule else None)
    good = httpx.post(url, content=_good(), headers=headers, timeout=60)
    assert (refused, good.status_code) == ((status, rule), 202)
