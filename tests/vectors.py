"""Locate and read the shared ReproIt vectors (``../shared/vectors`` beside the checkout)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "vectors"


def vectors_dir() -> Path:
    """The vectors folder: ``$REPROIT_VECTORS_DIR`` or ``../shared/vectors`` beside the repo."""
    override = os.environ.get("REPROIT_VECTORS_DIR")
    return Path(override) if override else _DEFAULT


def load_vector(name: str) -> Any:
    """Parse one vector file (``"rng-s.json"`` or ``"node-golden/canonical.json"``)."""
    path = vectors_dir() / name
    if not path.is_file():
        raise FileNotFoundError(
            f"shared vector file {path} is missing; check out ../shared beside the repository "
            "or set REPROIT_VECTORS_DIR"
        )
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def golden_cases(name: str) -> list[dict[str, Any]]:
    """The cases of one ``node-golden`` file, as a list."""
    data = load_vector(f"node-golden/{name}")
    cases = data if isinstance(data, list) else data["cases"]
    assert isinstance(cases, list)
    return cases
