"""The shell commands the documentation tells a reader to run, read from the Markdown itself.

Used by ``tests/unit/test_docs_commands.py`` (every command is mapped to the test that runs
it) and by the walkthrough tests, which run the commands as the documents spell them.

What counts as a command:

* in a fenced block whose info string is empty, ``sh``, ``bash``, ``shell`` or ``console``:
  every line, with ``\\``-continued lines joined and a trailing ``# comment`` removed. A line
  is either a command (its first word after ``NAME=value`` assignments is one of
  :data:`PROGRAMS`), or output shown in the block (it starts with ``REPROIT:`` or ``{``);
  anything else is reported by :func:`unclassified_lines` so the table cannot miss it;
* in the prose, a backtick span (it may run over a line break) whose first word after
  assignments is a program of :data:`PROGRAMS` and that has an argument
  (``reproit-otel list``), or a ``scripts/`` path on its own (``scripts/bootstrap``). A span
  holding ``:`` followed by text (a quoted output line such as ``reproit-otel serve:
  listening on ...``) and ``python`` followed by anything but ``-m``, ``-c`` or a ``.py``
  path (``python 3.x.y``) are not commands.

Commands are normalised: runs of blanks become one space.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROGRAMS = frozenset(
    {
        "reproit-otel",
        "scripts/demo",
        "scripts/test",
        "scripts/bootstrap",
        "scripts/refresh-vectors",
        "scripts/matrix",
        "pip",
        "apt-get",
        "opentelemetry-bootstrap",
        "opentelemetry-instrument",
        "python",
        ".venv/bin/python",
        "pytest",
        "curl",
        "cat",
        "gh",
        "otelcol-contrib",
        "export",
    }
)
"""First words that make a line or a span a command."""

_SHELL_INFO = frozenset({"", "sh", "bash", "shell", "console"})
_FENCE = re.compile(r"^\s*```(?P<info>\S*)\s*$")
_SPAN = re.compile(r"`([^`]+?)`")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")


@dataclass(frozen=True)
class Command:
    """One documented command: where it is and how it reads."""

    path: str
    """The document, relative to the repository root."""
    text: str
    """The command, normalised."""
    inline: bool
    """True for a backtick span in the prose, False for a line of a code block."""


def documents() -> list[str]:
    """README.md, docs/*.md, the example READMEs and the Collector READMEs."""
    found = ["README.md"]
    found += sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md"))
    found += sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("examples/*/README.md"))
    found += sorted(
        str(path.relative_to(ROOT)) for path in ROOT.glob("collector-config/**/README.md")
    )
    return found


def _split(text: str) -> tuple[list[list[str]], str]:
    """Shell blocks (their lines) and the prose outside every fenced block."""
    shell: list[list[str]] = []
    prose: list[str] = []
    info: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence and info is None:
            info, lines = fence.group("info"), []
        elif fence:
            if info in _SHELL_INFO:
                shell.append(lines)
            info = None
        elif info is not None:
            lines.append(line)
        else:
            prose.append(line)
    return shell, "\n".join(prose)


def _joined(lines: list[str]) -> list[str]:
    result: list[str] = []
    pending = ""
    for raw in lines:
        line = raw.strip()
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        result.append(pending + line)
        pending = ""
    if pending:
        result.append(pending)
    return [line for line in result if line]


def _without_comment(text: str) -> str:
    """``text`` up to a ``#`` that follows a blank outside quotes (a shell comment)."""
    quote = ""
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and index > 0 and text[index - 1].isspace():
            return text[:index]
    return text


def normalise(text: str) -> str:
    """The command with its trailing comment removed and blanks collapsed."""
    return " ".join(_without_comment(text).split())


def program(text: str) -> str | None:
    """The first word after leading ``NAME=value`` assignments, or None."""
    for word in text.split():
        if not _ASSIGNMENT.match(word):
            return word
    return None


def _words_after_program(text: str) -> list[str]:
    words = text.split()
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    return words[1:]


def _is_output(line: str) -> bool:
    return line.startswith(("REPROIT:", "{"))


def _is_inline_command(span: str) -> bool:
    name = program(span)
    if name not in PROGRAMS:
        return False
    rest = _words_after_program(span)
    if re.search(r":\s", span):
        return False
    if name == "python":
        return bool(rest) and (rest[0] in ("-m", "-c") or rest[0].endswith(".py"))
    return bool(rest) or name.startswith("scripts/")


def commands_of(path: str) -> list[Command]:
    """Every command of one document, in the order it shows them (blocks first, then prose)."""
    shell, prose = _split((ROOT / path).read_text(encoding="utf-8"))
    found: list[Command] = []
    for block in shell:
        for line in _joined(block):
            text = normalise(line)
            if program(text) in PROGRAMS:
                found.append(Command(path, text, inline=False))
    for span in _SPAN.findall(prose):
        if "\n\n" not in span and _is_inline_command(span):
            found.append(Command(path, normalise(span), inline=True))
    return found


def all_commands() -> list[Command]:
    """The commands of every document of :func:`documents`."""
    return [command for path in documents() for command in commands_of(path)]


def unclassified_lines() -> list[tuple[str, str]]:
    """Lines of shell blocks that are neither a known command nor output: (document, line)."""
    odd: list[tuple[str, str]] = []
    for path in documents():
        shell, _ = _split((ROOT / path).read_text(encoding="utf-8"))
        for block in shell:
            for line in _joined(block):
                text = normalise(line)
                if program(text) not in PROGRAMS and not _is_output(text):
                    odd.append((path, text))
    return odd


def block_commands(path: str, first: str) -> list[str]:
    """The commands of the first shell block of ``path`` whose first command starts with
    ``first`` (for tests that run a block as the document shows it)."""
    shell, _ = _split((ROOT / path).read_text(encoding="utf-8"))
    for block in shell:
        lines = [normalise(line) for line in _joined(block)]
        if lines and lines[0].startswith(first):
            return lines
    raise LookupError(f"{path} has no shell block starting with {first!r}")


def block_from(path: str, command: str) -> list[str]:
    """The commands of the first shell block of ``path`` holding ``command``, from it on."""
    shell, _ = _split((ROOT / path).read_text(encoding="utf-8"))
    for block in shell:
        lines = [normalise(line) for line in _joined(block)]
        if command in lines:
            return lines[lines.index(command) :]
    raise LookupError(f"{path} has no shell block holding {command!r}")


def command_starting(path: str, first: str) -> str:
    """The one command of ``path`` (block or prose) that starts with ``first``."""
    matching = sorted({c.text for c in commands_of(path) if c.text.startswith(first)})
    if len(matching) != 1:
        raise LookupError(f"{path}: commands starting with {first!r}: {matching}")
    return matching[0]


def exports(lines: list[str]) -> dict[str, str]:
    """The variables the ``export`` lines among ``lines`` set, in order."""
    variables: dict[str, str] = {}
    for line in lines:
        if program(line) == "export":
            for word in shlex.split(line)[1:]:
                name, _, value = word.partition("=")
                variables[name] = value
    return variables
