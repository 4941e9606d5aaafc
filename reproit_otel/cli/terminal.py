"""What the CLI prints: captured text with every control character made visible.

Operation names, paths, messages and bodies come from requests anybody could send to a
service, so printing them raw lets a request path such as
``/fail/%1B]0;pwned%07%1B[2J...verdict: FIXED`` set the terminal title, clear the screen or
print a line that looks like a verdict. Every printer of the CLI goes through this module:

* :func:`shown` makes one captured value printable on one line: C0 controls (new lines and
  tabs included), DEL, C1 controls, and the Unicode marks that reorder or hide text (bidi
  overrides and isolates, zero-width characters, line and paragraph separators) become
  visible escapes (``\\x1b``, ``\\n``, ``\\u202e``);
* :func:`say` prints text the CLI composed (several lines allowed) with every control
  character except the line breaks it chose made visible, as a last guard;
* :func:`json_text` writes JSON whose strings hold those characters as ``\\uXXXX`` escapes:
  the same JSON value, safe on a terminal.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, TextIO

__all__ = ["json_text", "say", "shown", "silence", "terminal_capsule"]

# Bidi embeddings, overrides, isolates and marks; zero-width characters; line and paragraph
# separators; the byte order mark used as a zero-width no-break space.
_INVISIBLE = "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_INVISIBLE}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: object) -> str:
    """``value`` as text that prints on one line and cannot drive the terminal."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text)


def say(text: str = "", *, file: TextIO | None = None) -> None:
    """Print ``text`` (lines the CLI composed) with control characters other than its line
    breaks made visible.

    A reader that went away (``reproit-otel check ... | head``) silences the stream rather
    than ending the command: it runs to its end and keeps its exit code (a verdict's).
    """
    stream = sys.stdout if file is None else file
    try:
        print(_UNSAFE_BUT_NEWLINE.sub(_escape, text), file=stream)
    except BrokenPipeError:
        silence(stream)


def silence(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at the null device: its reader closed the pipe, and
    neither later output nor the flush at exit should raise (or print a traceback) for it."""
    try:
        target = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, target)
    finally:
        os.close(null)


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON (non-ASCII kept) with terminal-unsafe characters as ``\\u`` escapes."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    # JSON already escapes C0; the characters left can only sit inside strings.
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def terminal_capsule(data: bytes) -> str:
    """Capsule bytes as text for a terminal: the same JSON value, unsafe characters escaped.

    Bytes that are not UTF-8 JSON are shown with :func:`shown` line by line.
    """
    try:
        text = data.decode("utf-8")
        json.loads(text)
    except ValueError:
        return "\n".join(shown(line) for line in data.decode("utf-8", "replace").split("\n"))
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)
