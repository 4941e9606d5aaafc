"""Artifacts are bound to their batch, checked like batches, bounded, and kept only by reference;
a store that cannot write answers 503 with a JSON error.

Every test runs the real ``reproit-otel serve`` (uvicorn) and talks to it over loopback, except
the retention rule, which is a rule of the store and is exercised on it directly.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.ingest.facts import batch_facts
from reproit_otel.ingest.retention import RetentionRules
from reproit_otel.ingest.store import open_store
from reproit_otel.wire.artifacts import (
    CAPSULE_MEDIA_TYPE,
    artifact_id,
    capsule_artifact,
    naming_artifact,
)
from reproit_otel.wire.canonical import canonical_json
from tests.integration.capture_helpers import built_batch
from tests.integration.served_ingest import ServedIngest

KEY = "artifact-safety-key"
OTHER_KEY = "artifact-safety-other"


def _auth(key: str = KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _put(base: str, data: bytes, key: str = KEY, identifier: str | None = None) -> httpx.Response:
    return httpx.put(
        f"{base}/v1/artifacts/{identifier or artifact_id(data)}",
        content=data,
        headers={**_auth(key), "content-type": CAPSULE_MEDIA_TYPE},
    )


def _post(base: str, batch: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/capture-batches",
        content=canonical_json(batch).encode(),
        headers={**_auth(), "content-type": "application/json"},
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedIngest]:
    ingest = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", "--api-key", KEY)
    try:
        yield ingest
    finally:
        assert ingest.stop() == 0


def test_a_batch_cannot_name_the_artifact_of_another_operation(served: ServedIngest) -> None:
    base = served.base_url
    evil = capsule_artifact(built_batch("DELETE /admin/everything", batch_number=1))
    assert evil is not None
    evil_data, evil_descriptor = evil
    assert _put(base, evil_data).status_code == 201
    innocent = naming_artifact(built_batch("GET /art-t0", batch_number=2), evil_descriptor, {})
    refused = _post(base, innocent)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "rule": "artifact-binding",
        "field": "artifacts",
        "message": "the named artifact is the capsule of another operation: refused as not its own",
    }


def test_an_artifact_stored_after_the_batch_naming_it_is_not_served_as_its_capsule(
    served: ServedIngest,
) -> None:
    base = served.base_url
    evil = capsule_artifact(built_batch("DELETE /admin/everything", batch_number=1))
    assert evil is not None
    evil_data, evil_descriptor = evil
    innocent = naming_artifact(built_batch("GET /art-t0", batch_number=2), evil_descriptor, {})
    accepted = _post(base, innocent)
    assert accepted.status_code == 202
    assert _put(base, evil_data).status_code == 201
    occurrence = accepted.json()["occurrenceId"]
    pulled = httpx.get(f"{base}/v1/occurrences/{occurrence}/capsule", headers=_auth())
    assert pulled.status_code == 200
    assert pulled.content != evil_data
    assert pulled.json()["operation"] == "GET /art-t0"


def test_the_own_artifact_of_a_batch_is_still_served(served: ServedIngest) -> None:
    base = served.base_url
    batch = built_batch("GET /heavy", batch_number=3)
    own = capsule_artifact(batch)
    assert own is not None
    data, descriptor = own
    assert _put(base, data).status_code == 201
    accepted = _post(base, naming_artifact(batch, descriptor, {}))
    assert accepted.status_code == 202
    occurrence = accepted.json()["occurrenceId"]
    pulled = httpx.get(f"{base}/v1/occurrences/{occurrence}/capsule", headers=_auth())
    assert (pulled.status_code, pulled.content) == (200, data)


def _nested(depth: int) -> bytes:
    return b'{"format":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_nested(100_000), "the body nests too deeply to be a capsule"),
        (b'{"format": NaN}', "the body is not UTF-8 JSON: NaN is not JSON"),
        (b'{"format": Infinity}', "the body is not UTF-8 JSON: Infinity is not JSON"),
        (
            b'{"format": "\\ud800"}',
            "a string holds a lone UTF-16 surrogate escape (\\udxxx); text must be valid Unicode",
        ),
    ],
)
def test_the_artifact_route_applies_the_batch_input_rules(
    served: ServedIngest, data: bytes, message: str
) -> None:
    answer = _put(served.base_url, data)
    assert answer.status_code == 400
    assert answer.json() == {"error": {"rule": "json", "field": "body", "message": message}}


def test_artifacts_have_a_quota_per_key_and_in_all(tmp_path: Path) -> None:
    made = [capsule_artifact(built_batch(f"GET /q{n}", batch_number=n)) for n in range(4)]
    datas = [m[0] for m in made if m is not None]
    size = max(len(d) for d in datas)
    flags = ("--api-key", KEY, "--api-key", OTHER_KEY)
    quota = ("--max-artifact-bytes-per-key", str(size + 10), "--max-artifact-bytes")
    ingest = ServedIngest(f"sqlite:///{tmp_path / 'ingest.db'}", *flags, *quota, str(3 * size + 10))
    try:
        base = ingest.base_url
        assert _put(base, datas[0]).status_code == 201
        over_key = _put(base, datas[1])
        assert over_key.status_code == 429
        assert over_key.json()["error"]["rule"] == "artifact-quota"
        assert _put(base, datas[0]).status_code == 200  # stored already: no new bytes
        assert _put(base, datas[1], OTHER_KEY).status_code == 201
        third = _put(base, datas[2], "x")
        assert third.status_code == 401
        # Both keys hold one artifact; a third would pass the overall quota for any key.
        assert _put(base, datas[2], OTHER_KEY).status_code == 429
    finally:
        assert ingest.stop() == 0


def test_retention_keeps_only_artifacts_a_batch_references(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'ingest.db'}")
    try:
        store.retention = RetentionRules(retain_batches=5, retain_days=0)
        kept = capsule_artifact(built_batch("GET /kept", batch_number=1))
        mentioned = capsule_artifact(built_batch("GET /mentioned", batch_number=2))
        assert kept is not None and mentioned is not None
        long_ago = 1_000
        for data, descriptor in (kept, mentioned):
            assert store.store_artifact(
                descriptor["id"], CAPSULE_MEDIA_TYPE, data, received_ms=long_ago
            )
        naming = naming_artifact(built_batch("GET /kept", batch_number=1), kept[1], {})
        # A batch that only mentions the other id, in a string of its own, keeps nothing.
        naming["deployment"] = {**naming.get("deployment", {}), "version": mentioned[1]["id"]}
        store.record_batch(naming, batch_facts(naming), body=canonical_json(naming))
        assert store.prune_artifacts(now_ms=10 * 3_600_000) == 1
        assert store.get_artifact(kept[1]["id"]) is not None
        assert store.get_artifact(mentioned[1]["id"]) is None
    finally:
        store.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (mounting needs root: the suite's container runs as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(folder: Path) -> None:
    """Write to ``folder`` until the disk is full."""
    descriptor = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(descriptor, b"\0" * 4096)
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(descriptor)


def test_a_full_disk_answers_503_with_a_json_error(small_disk: Path) -> None:
    ingest = ServedIngest(f"sqlite:///{small_disk / 'ingest.db'}", "--api-key", KEY)
    try:
        base = ingest.base_url
        first = _post(base, built_batch("GET /before", batch_number=1))
        assert first.status_code == 202
        _fill(small_disk)
        batch = built_batch("GET /after", batch_number=2)
        refused = _post(base, batch)
        (small_disk / "filler").unlink()
        listed = httpx.get(f"{base}/v1/occurrences", headers=_auth())
        again = _post(base, batch)
    finally:
        assert ingest.stop() == 0
    assert refused.status_code == 503
    assert refused.headers["content-type"] == "application/json"
    assert refused.json() == {
        "error": {
            "rule": "storage",
            "field": "store",
            "message": "the ingest cannot store or read right now (disk full or database "
            "unavailable); nothing was acknowledged, send it again later",
        }
    }
    assert "Traceback" not in "\n".join(ingest.lines)
    # What was acknowledged is there; what was refused was not half-stored.
    assert listed.status_code == 200
    assert [o["operation"] for o in listed.json()["occurrences"]] == ["GET /before"]
    assert again.status_code == 202


def test_a_corrupt_database_answers_503_with_a_json_error(tmp_path: Path) -> None:
    database = tmp_path / "ingest.db"
    ingest = ServedIngest(f"sqlite:///{database}", "--api-key", KEY)
    try:
        base = ingest.base_url
        assert _post(base, built_batch("GET /before", batch_number=1)).status_code == 202
        size = database.stat().st_size
        with open(database, "r+b") as file:  # the header and first pages overwritten
            file.write(os.urandom(min(size, 8192)))
        for suffix in ("-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        refused = _post(base, built_batch("GET /after", batch_number=2))
        listed = httpx.get(f"{base}/v1/occurrences", headers=_auth())
        page = httpx.get(f"{base}/", headers=_auth())
    finally:
        assert ingest.stop() == 0
    assert (refused.status_code, refused.json()["error"]["rule"]) == (503, "storage")
    assert (listed.status_code, listed.json()["error"]["rule"]) == (503, "storage")
    assert (page.status_code, page.json()["error"]["rule"]) == (503, "storage")
    assert "Traceback" not in "\n".join(ingest.lines)
