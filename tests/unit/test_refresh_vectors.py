"""The contract the tests read is in the repository, and scripts/refresh-vectors renews it.

The script runs for real, as a subprocess, on a copy of the repository's layout in a temporary
folder: it must copy a published spec folder (``vectors/`` with ``node-golden/``, and
``spec/PROTOCOL.md``) into ``tests/vectors`` and ``tests/spec`` exactly, replacing what was
there, and refuse a folder that is not one with a message that says what to pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.vectors import protocol_path, vectors_dir

ROOT = Path(__file__).resolve().parents[2]


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _repo_copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "refresh-vectors", repo / "scripts" / "refresh-vectors")
    stale = repo / "tests" / "vectors" / "node-golden"
    stale.mkdir(parents=True)
    (stale / "removed-from-the-spec.json").write_text("[]", encoding="utf-8")
    return repo


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "REPROIT_VECTORS_DIR"}
    return subprocess.run(
        [str(repo / "scripts" / "refresh-vectors"), *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_tests_read_the_vectors_kept_in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPROIT_VECTORS_DIR", raising=False)
    assert vectors_dir() == ROOT / "tests" / "vectors"
    assert protocol_path() == ROOT / "tests" / "spec" / "PROTOCOL.md"
    assert (vectors_dir() / "node-golden" / "canonical.json").is_file()
    assert protocol_path().read_text(encoding="utf-8").startswith("# reproit-otel wire contract")


def test_refresh_copies_the_published_folder_exactly(tmp_path: Path) -> None:
    published = tmp_path / "shared"
    shutil.copytree(ROOT / "tests" / "vectors", published / "vectors")
    (published / "spec").mkdir()
    shutil.copy2(ROOT / "tests" / "spec" / "PROTOCOL.md", published / "spec" / "PROTOCOL.md")
    repo = _repo_copy(tmp_path)

    done = _run(repo)  # the default source: ../shared beside the checkout

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "refreshed tests/vectors and tests/spec from ../shared:"
    assert _tree(repo / "tests" / "vectors") == _tree(ROOT / "tests" / "vectors")
    assert _tree(repo / "tests" / "spec") == {"PROTOCOL.md": protocol_path().read_bytes()}


def test_refresh_refuses_a_folder_without_the_spec(tmp_path: Path) -> None:
    repo = _repo_copy(tmp_path)
    (tmp_path / "elsewhere").mkdir()

    done = _run(repo, str(tmp_path / "elsewhere"))

    assert done.returncode == 2
    assert done.stderr == (
        f"refresh-vectors: {tmp_path / 'elsewhere'} has no vectors/ folder or spec/PROTOCOL.md; "
        "pass the folder that holds them, e.g. scripts/refresh-vectors ../shared\n"
    )
    assert (repo / "tests" / "vectors" / "node-golden" / "removed-from-the-spec.json").is_file()
