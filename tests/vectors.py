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
import re
from collections.abc import Callable
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


# --- decision D13: the secret key names reproit-otel adds to the reference's ------------------

D13_PARTS: tuple[str, ...] = (
    "pwd",
    "passphrase",
    "passcode",
    "jwt",
    "sessionid",
    "sessid",
    "sessionkey",
    "sessiondata",
    "credential",
    "authkey",
    "subscriptionkey",
    "encryptionkey",
    "masterkey",
    "clientkey",
    "csrf",
    "xsrf",
    "signature",
    "bearer",
    "connectionstring",
)
"""The fragments docs/recording.md lists beyond the wire's 14 (decision D13)."""

D13_NAMES: frozenset[str] = frozenset({"otp", "sig", "pin", "cvv", "cvc"})
"""The short names docs/recording.md lists as secret only as whole names (decision D13)."""

_NOT_FOLDED = re.compile(r"[^A-Za-z0-9]+")


def fold(name: str) -> str:
    """Section 3.1's folding: ASCII letters and digits only, lowercased."""
    return _NOT_FOLDED.sub("", name).lower()


def reference_secret(name: str) -> bool:
    """Section 3.1's predicate with the 14 fragments the behaviour vectors pin."""
    parts = load_vector("capture-behavior-v1.json")["redaction"]["secretParts"]
    folded = fold(name)
    return any(part in folded for part in parts)


def d13_secret(name: str) -> bool:
    """Whether decision D13 (and not the reference) makes ``name`` secret."""
    folded = fold(name)
    added = folded in D13_NAMES or any(part in folded for part in D13_PARTS)
    return added and not reference_secret(name)


def with_d13(value: Any, placeholder: Callable[[Any], Any]) -> tuple[Any, bool]:
    """A redacted reference value as decision D13 makes it, and whether D13 changed it.

    Every value the reference left visible under a name D13 adds becomes its placeholder. The
    reference's visible value has the type and length of the original (redaction keeps both),
    so its placeholder is the original's. ``placeholder`` is the one under test, which the
    ``typeCases`` vectors pin.
    """
    if isinstance(value, list):
        items = [with_d13(item, placeholder) for item in value]
        return [item for item, _ in items], any(changed for _, changed in items)
    if not isinstance(value, dict):
        return value, False
    result: dict[str, Any] = {}
    changed = False
    for key, child in value.items():
        if d13_secret(key):
            result[key] = placeholder(child)
            changed = True
        else:
            result[key], child_changed = with_d13(child, placeholder)
            changed = changed or child_changed
    return result, changed
