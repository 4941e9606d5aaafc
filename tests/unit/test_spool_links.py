"""The CI spool never writes through a symbolic link and counts only regular files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from reproit_otel.ci.spool import DROPPED_COUNT_FILE, Spool, ci_capsule
from reproit_otel.wire.capsule import capsule_bytes

ENVELOPE = {"observedAtMs": 1, "replaySeed": "00ff00ff00ff00ff"}


def _capsule(name: str) -> dict[str, Any]:
    return ci_capsule(f"test:links#{name}", [{"kind": "start", "operation": name}], ENVELOPE)


def _name(capsule: dict[str, Any]) -> str:
    return f"capsule-{hashlib.sha256(capsule_bytes(capsule)).hexdigest()[:12]}.json"


def test_a_link_planted_at_the_capsule_name_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    capsule = _capsule("a")
    (spool_dir / _name(capsule)).symlink_to(victim)

    path = Spool(str(spool_dir), 1 << 20).write(capsule)

    assert path == str(spool_dir / _name(capsule))
    assert victim.read_bytes() == b"keep me"
    assert not os.path.islink(path)
    assert Path(path).read_bytes() == capsule_bytes(capsule)
    assert sorted(p.name for p in spool_dir.iterdir()) == [_name(capsule)]


def test_dropped_count_that_is_a_link_is_neither_read_nor_followed(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    victim = tmp_path / "count-elsewhere"
    victim.write_text("41\n", encoding="utf-8")
    (spool_dir / DROPPED_COUNT_FILE).symlink_to(victim)
    spool = Spool(str(spool_dir), 4096)

    big = ci_capsule("test:links#big", [{"kind": "start", "note": "x" * 5000}], ENVELOPE)
    assert spool.write(big) is None

    assert victim.read_text(encoding="utf-8") == "41\n"
    count = spool_dir / DROPPED_COUNT_FILE
    assert not count.is_symlink()
    assert count.read_bytes() == b"1\n"
    assert spool.stats.dropped_capsules == 1


def test_only_regular_files_count_toward_the_cap(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    large = tmp_path / "large.json"
    large.write_bytes(b"x" * 100_000)
    (spool_dir / "elsewhere.json").symlink_to(large)  # a link to a large file
    (spool_dir / "folder.json").mkdir()
    (spool_dir / "empty.json").touch()  # a regular, empty file: counts zero bytes
    capsule = _capsule("b")

    path = Spool(str(spool_dir), 4096).write(capsule)

    assert path is not None
    assert Path(path).read_bytes() == capsule_bytes(capsule)
    assert large.read_bytes() == b"x" * 100_000
