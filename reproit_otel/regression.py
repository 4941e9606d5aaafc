"""Regression tests made from capsules: their files, their names and the project's settings.

``reproit-otel regression CAPSULE`` (:mod:`reproit_otel.cli.regression`) writes two files into
a folder of the project's tests (default ``tests/regressions``):

* ``<name>.capsule.json``: the capsule, redacted as it was uploaded (or spooled by CI capture
  mode), pretty-printed so a code review can read it (:func:`capsule_file_text`);
* ``test_<name>.py``: a few lines calling :func:`reproit_otel.testing.assert_fixed` on it
  (:func:`module_text`), formatted the way ``ruff format`` leaves them.

The command that boots the application (production capsules) or runs the tests (CI capsules)
is stored once per project, in the ``[tool.reproit]`` table of its ``pyproject.toml``
(:func:`read_settings`)::

    [tool.reproit]
    exec = "opentelemetry-instrument python app.py"   # boots the app, listening on $PORT
    test-exec = "python -m pytest"                     # CI capsules (default: this interpreter)
    boot-timeout = 20                                  # seconds (default 20)

The project root is the folder of the nearest ``pyproject.toml`` above the capsule; every
command runs there. A test module may name its own command instead (``command=``), which the
generator does when the table is missing or holds another one.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from reproit_otel.check.exceptions import recorded_exception
from reproit_otel.errors import ConfigurationError
from reproit_otel.wire.canonical import js_items, ordered_json
from reproit_otel.wire.exception import describe_exception, short_type

__all__ = [
    "CAPSULE_SUFFIX",
    "DEFAULT_FOLDER",
    "TEST_TRIGGER_PREFIX",
    "RegressionSettings",
    "capsule_file_text",
    "capsule_path",
    "default_name",
    "find_project_root",
    "is_ci_capsule",
    "module_text",
    "name_of_capsule",
    "read_settings",
    "settings_table",
    "test_module_path",
    "unique_name",
]

DEFAULT_FOLDER: Final = Path("tests") / "regressions"
"""Where ``reproit-otel regression`` writes, relative to the current folder."""
CAPSULE_SUFFIX: Final = ".capsule.json"
TEST_TRIGGER_PREFIX: Final = "test:"
SETTINGS_TABLE: Final = "reproit"
"""The table under ``[tool]`` of ``pyproject.toml``."""
DEFAULT_BOOT_TIMEOUT_S: Final = 20.0
_NAME_LIMIT = 60
_LINE_LIMIT = 88  # ruff's default line length: the generated module is formatted for it


@dataclass(frozen=True)
class RegressionSettings:
    """The project's ``[tool.reproit]`` table, read once (:func:`read_settings`)."""

    root: Path
    """The folder every command runs in (the ``pyproject.toml``'s, else the current one)."""
    exec: str | None = None
    """The command that boots the application on ``$PORT``, for production capsules."""
    test_exec: str | None = None
    """The test command for CI capsules; ``None``: :meth:`test_command`'s default."""
    boot_timeout: float = DEFAULT_BOOT_TIMEOUT_S
    found: bool = False
    """Whether ``pyproject.toml`` has a ``[tool.reproit]`` table."""
    pyproject: Path | None = None

    def test_command(self) -> str:
        """``test-exec``, else ``python -m pytest`` with the interpreter running now."""
        return self.test_exec or f"{shlex.quote(sys.executable)} -m pytest"


def find_project_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding a ``pyproject.toml``, else ``None``."""
    folder = start.resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    return None


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as handle:
            data: dict[str, Any] = tomllib.load(handle)
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"cannot read {path}: {error}") from error
    return data


def _text(table: Mapping[str, Any], key: str, path: Path) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"{path}: [tool.reproit] {key} must be a non-empty string (a shell command), "
            f"not {value!r}"
        )
    return value


def read_settings(start: Path) -> RegressionSettings:
    """The ``[tool.reproit]`` settings of the project ``start`` (a file or folder) is in.

    Without a ``pyproject.toml`` above it the root is the current folder and nothing is set.
    Raises :class:`~reproit_otel.errors.ConfigurationError` for an unreadable file or a value
    of the wrong type.
    """
    root = find_project_root(start if start.is_dir() else start.parent)
    if root is None:
        return RegressionSettings(root=Path.cwd())
    path = root / "pyproject.toml"
    tool = _load_toml(path).get("tool")
    table = tool.get(SETTINGS_TABLE) if isinstance(tool, dict) else None
    if table is None:
        return RegressionSettings(root=root, pyproject=path)
    if not isinstance(table, dict):
        raise ConfigurationError(f"{path}: [tool.reproit] must be a table")
    known = {"exec", "test-exec", "boot-timeout"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigurationError(
            f"{path}: [tool.reproit] has unknown keys {unknown}; the keys are {sorted(known)}"
        )
    timeout = table.get("boot-timeout", DEFAULT_BOOT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigurationError(
            f"{path}: [tool.reproit] boot-timeout must be a positive number of seconds, "
            f"not {timeout!r}"
        )
    return RegressionSettings(
        root=root,
        exec=_text(table, "exec", path),
        test_exec=_text(table, "test-exec", path),
        boot_timeout=float(timeout),
        found=True,
        pyproject=path,
    )


def settings_table(command: str) -> str:
    """The ``[tool.reproit]`` table storing ``command`` as ``exec`` (TOML text)."""
    # A JSON string is a TOML basic string: the same escapes, double quotes.
    return f"[tool.reproit]\nexec = {json.dumps(command)}\n"


def is_ci_capsule(capsule: Mapping[str, Any]) -> bool:
    """Whether the capsule is a failing test's (operation ``test:<suite>#<test>``)."""
    return str(capsule.get("operation", "")).startswith(TEST_TRIGGER_PREFIX)


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return slug[:_NAME_LIMIT].rstrip("_")


def default_name(capsule: Mapping[str, Any]) -> str:
    """The regression's name: operation and exception (``post_orders_keyerror``), or the
    failing test's name for a CI capsule (``cheapest_quote``)."""
    operation = str(capsule.get("operation", ""))
    if operation.startswith(TEST_TRIGGER_PREFIX):
        test = operation.partition("#")[2] or operation[len(TEST_TRIGGER_PREFIX) :]
        words = re.sub(r"^(test_)+", "", _slug(test))
        return "ci_test" if words in ("", "test") else words
    error = recorded_exception(capsule.get("events") or ())
    if error is not None:
        kind = short_type(str(error.get("type") or "")).rpartition(".")[2]
    else:
        status = next(
            (
                event.get("status")
                for event in reversed(capsule.get("events") or ())
                if isinstance(event, Mapping) and event.get("kind") == "return"
            ),
            None,
        )
        kind = f"http{status}" if isinstance(status, int) else "failure"
    base = _slug(operation)[: _NAME_LIMIT - len(kind) - 1].rstrip("_")
    return _slug(f"{base}_{kind}") or "regression"


def test_module_path(folder: Path, name: str) -> Path:
    """``folder/test_<name>.py``."""
    return folder / f"test_{name}.py"


def capsule_path(folder: Path, name: str) -> Path:
    """``folder/<name>.capsule.json``."""
    return folder / f"{name}{CAPSULE_SUFFIX}"


def name_of_capsule(path: Path) -> str:
    """The regression name of a ``<name>.capsule.json`` file."""
    file = path.name
    return file[: -len(CAPSULE_SUFFIX)] if file.endswith(CAPSULE_SUFFIX) else path.stem


def unique_name(folder: Path, name: str) -> str:
    """``name``, or ``name_2``, ``name_3``... : the first whose files do not exist yet."""
    candidate, number = name, 1
    while test_module_path(folder, candidate).exists() or capsule_path(folder, candidate).exists():
        number += 1
        candidate = f"{name}_{number}"
    return candidate


def _pretty(value: Any, indent: str) -> str:
    inner = indent + "  "
    if isinstance(value, Mapping):
        items = js_items(value)
        if not items:
            return "{}"
        members = [f"{inner}{ordered_json(key)}: {_pretty(item, inner)}" for key, item in items]
        return "{\n" + ",\n".join(members) + f"\n{indent}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(inner + _pretty(item, inner) for item in value) + f"\n{indent}]"
    return ordered_json(value)


def capsule_file_text(capsule: Any) -> str:
    """The capsule as ``JSON.stringify(capsule, null, 2)`` writes it, with a final newline:
    the same values (numbers written as JavaScript writes them), one member per line."""
    return _pretty(capsule, "") + "\n"


def _docstring_text(text: str) -> str:
    """``text`` safe inside a triple-quoted docstring line (printable, no quotes run)."""
    cleaned = "".join(ch if ch.isprintable() else " " for ch in text)
    return cleaned.replace("\\", "/").replace('"""', "'''").strip().rstrip('"')


def _wrap_words(text: str, width: int) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return lines


def _summary(capsule: Mapping[str, Any]) -> str:
    operation = str(capsule.get("operation", ""))
    error = recorded_exception(capsule.get("events") or ())
    if error is not None:
        # Type and where, never the message: it may quote data the reviewer need not see.
        described = describe_exception({**error, "message": ""})
        return f"{operation} raised {described}"
    return f"{operation} failed"


def _literal(text: str) -> str:
    """``text`` as a Python string literal in the quotes ``ruff format`` prefers (double,
    unless the text holds more double quotes than single ones)."""
    literal = json.dumps(text)  # a valid Python literal: the same escapes
    if text.count('"') <= text.count("'"):
        return literal
    body = literal[1:-1].replace('\\"', '"').replace("'", "\\'")
    return f"'{body}'"


def _call(command: str | None) -> str:
    """The ``assert_fixed`` call as ``ruff format`` lays it out for its line length."""
    if command is None:
        return "    assert_fixed(CAPSULE)\n"
    literal = _literal(command)
    one_line = f"    assert_fixed(CAPSULE, command={literal})"
    if len(one_line) <= _LINE_LIMIT:
        return one_line + "\n"
    hugged = f"        CAPSULE, command={literal}"
    if len(hugged) <= _LINE_LIMIT:
        return f"    assert_fixed(\n{hugged}\n    )\n"
    return f"    assert_fixed(\n        CAPSULE,\n        command={literal},\n    )\n"


def module_text(capsule: Mapping[str, Any], name: str, command: str | None = None) -> str:
    """The ``test_<name>.py`` module: a docstring, the capsule path and one test."""
    summary = _wrap_words(_docstring_text(f"Regression: {_summary(capsule)}."), _LINE_LIMIT - 4)
    head = '"""' + "\n".join(summary)
    lines = [
        head,
        "",
        "Made by `reproit-otel regression`; the recording is beside it, in",
        f"{name}{CAPSULE_SUFFIX}. The test fails while the recorded failure comes back,",
        "passes once it is fixed, and says when the recording no longer matches the code",
        "(refresh it with `reproit-otel regression --refresh`).",
        '"""',
        "",
        "from pathlib import Path",
        "",
        "from reproit_otel.testing import assert_fixed",
        "",
        f'CAPSULE = Path(__file__).with_name("{name}{CAPSULE_SUFFIX}")',
        "",
        "",
        f"def test_{name}() -> None:",
    ]
    return "\n".join(lines) + "\n" + _call(command)
