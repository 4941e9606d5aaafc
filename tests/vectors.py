"""Locate and read the ReproIt contract the tests check against.

The vectors live in the repository (``tests/vectors/``, with ``node-golden/``) beside the wire
contract text (``tests/spec/PROTOCOL.md``), so a bare clone runs its tests with nothing beside
it. ``scripts/refresh-vectors`` copies both from the spec's published folder when the spec
changes. ``$REPROIT_VECTORS_DIR`` points the tests at another vectors folder instead (the
contract text is then read from ``../spec/PROTOCOL.md`` beside that folder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent
_DEFAULT = _TESTS / "vectors"


def vectors_dir() -> Path:
    """The vectors folder: ``$REPROIT_VECTORS_DIR`` or the repository's ``tests/vectors``."""
    override = os.environ.get("REPROIT_VECTORS_DIR")
    return Path(override) if override else _DEFAULT


def protocol_path() -> Path:
    """The wire contract text that goes with :func:`vectors_dir` (``../spec/PROTOCOL.md``)."""
    return vectors_dir().parent / "spec" / "PROTOCOL.md"


def load_vector(name: str) -> Any:
    """Parse one vector file (``"rng-s.json"`` or ``"node-golden/canonical.json"``)."""
    path = vectors_dir() / name
    if not path.is_file():
        if os.environ.get("REPROIT_VECTORS_DIR"):
            fix = "point REPROIT_VECTORS_DIR at a folder that has it, or unset it"
        else:
            fix = "restore it: git checkout -- tests/vectors (or scripts/refresh-vectors)"
        raise FileNotFoundError(f"vector file {path} is missing; {fix}")
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def golden_cases(name: str) -> list[dict[str, Any]]:
    """The cases of one ``node-golden`` file, as a list."""
    data = load_vector(f"node-golden/{name}")
    cases = data if isinstance(data, list) else data["cases"]
    assert isinstance(cases, list)
    return cases
