"""The path and query of a URL as a WHATWG ``URL`` object reports them (PROTOCOL 7.2).

Replay keys an HTTP exchange by its method and ``pathname + search`` of the request URL, with
the host and scheme left out (a replayed application dials another origin). The reference
computes that with the WHATWG URL parser (``new URL(url)``), so two spellings of one URL land
on one key: ``http://svc`` is ``/``, dot segments (``.``, ``..``, ``%2e``) are resolved,
backslashes are slashes in special schemes, spaces and non-ASCII are percent-encoded, an empty
``?`` is dropped and the fragment is ignored. A string the parser rejects (a relative path, an
invalid host or port) is used as it is.

This module is the subset of the WHATWG URL Standard that decides those two components for
an absolute URL (there is never a base URL): the basic URL parser state machine with its
percent-encode sets, and host parsing far enough to know whether a host is valid
(:mod:`reproit_otel.wire._url_hosts`).

The parser follows the reference runtime (Node 20): the path percent-encode set does not hold
``^``, and an opaque path keeps its spaces.

Speed. Recorders key every HTTP call they see and replay keys every call it serves, so the
common case is kept cheap without changing a result:

* a *plain* absolute ``http``/``https`` URL is answered by :func:`_plain_path_and_query`
  without the state machine: printable ASCII only; a host of ASCII letters, digits and hyphens
  in non-empty dot-separated labels, none starting with ``xn--``, whose last label is not a
  number unless the whole host is a dotted-decimal IPv4 address (four parts 0..255, no
  leading zeros); no user info; an optional port of at most 65535; a path and query made only
  of characters that neither the path nor the special-query percent-encode set touches (no
  backslash, space, ``"``, ``<``, ``>``, `````, ``{``, ``}``, and ``'`` in the query); no
  ``.``/``..``/``%2e`` segment. Such a URL's ``pathname + search`` is its own path (``/`` when
  empty) and its query (dropped when empty): exactly what the parser computes, which a
  property test checks against the full parser for every URL the fast path accepts;
* anything else goes through the full parser, and the last :data:`_CACHE_SIZE` distinct
  strings are remembered (a replayed or recorded service tends to repeat its URLs).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from reproit_otel.wire._js import UNSET, js_string
from reproit_otel.wire._url_hosts import InvalidHost, parse_host

__all__ = ["url_path_and_query"]

_SPECIAL_SCHEMES = frozenset({"ftp", "file", "http", "https", "ws", "wss"})
_ASCII_ALPHA = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ASCII_DIGITS = frozenset("0123456789")
_SCHEME_CHARS = _ASCII_ALPHA | _ASCII_DIGITS | frozenset("+-.")

# Percent-encode sets (URL Standard 1.3). Code points above U+007E are in every set.
_C0_CONTROL_SET = frozenset(chr(c) for c in range(0x20)) | {"\x7f"}
_QUERY_SET = _C0_CONTROL_SET | frozenset(' "#<>')
_SPECIAL_QUERY_SET = _QUERY_SET | {"'"}
_PATH_SET = _QUERY_SET | frozenset("?`{}")

_SINGLE_DOT = frozenset({".", "%2e"})
_DOUBLE_DOT = frozenset({"..", ".%2e", "%2e.", "%2e%2e"})


_CACHE_SIZE = 256

# A plain absolute http(s) URL (see the module docstring): scheme, host, port, path, query and
# fragment. Path characters: printable ASCII outside the path percent-encode set, without the
# backslash; query characters: printable ASCII outside the special-query percent-encode set.
_PLAIN = re.compile(
    r"[hH][tT][tT][pP][sS]?://"
    r"(?P<host>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)"
    r"(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<path>/[!$-;=@-\[\]-_a-z|~]*)?"
    r"(?P<query>\?[!$-&(-;=?-~]*)?"
    r"(?:#[!-~]*)?"
)
_DOTTED_QUAD_PART = re.compile(r"0|[1-9][0-9]{0,2}")
_HEX_NUMBER = re.compile(r"0[xX][0-9A-Fa-f]*")


class _Failure(Exception):
    """The URL does not parse (an invalid host raises :class:`InvalidHost` instead)."""


def url_path_and_query(url: Any) -> str:
    """``pathname + search`` of ``new URL(url)``, or ``String(url ?? "")`` if it does not parse.

    ``url`` may be any JSON value or :data:`~reproit_otel.wire._js.UNSET`; it is turned into a
    string the way JavaScript would (``String(url)``) before parsing.
    """
    if url is None or url is UNSET:
        return ""
    return _key_text(url if type(url) is str else js_string(url))


@lru_cache(maxsize=_CACHE_SIZE)
def _key_text(text: str) -> str:
    plain = _plain_path_and_query(text)
    if plain is not None:
        return plain
    return _full_path_and_query(text)


def _full_path_and_query(text: str) -> str:
    """The full WHATWG parser's answer (the text itself when it does not parse)."""
    try:
        return _path_and_query(text)
    except (_Failure, InvalidHost):
        return text


def _dotted_quad(labels: list[str]) -> bool:
    return len(labels) == 4 and all(
        _DOTTED_QUAD_PART.fullmatch(part) is not None and int(part) <= 255 for part in labels
    )


def _plain_path_and_query(text: str) -> str | None:
    """``pathname + search`` of a plain http(s) URL, or None when the URL is not plain."""
    match = _PLAIN.fullmatch(text)
    if match is None:
        return None
    host, port, path, query = match.group("host", "port", "path", "query")
    labels = host.split(".")
    last = labels[-1]
    # A host ending in a number is an IPv4 address; only the dotted-decimal form is plain.
    if (last.isdigit() or _HEX_NUMBER.fullmatch(last)) and not _dotted_quad(labels):
        return None
    if "xn--" in host.lower():
        return None  # Punycode labels are validated by the full parser
    if port is not None and int(port) > 65535:
        return None
    if path is None:
        path = "/"
    elif "." in path or "%" in path:
        for segment in path.split("/"):
            lowered = segment.lower()
            if lowered in _SINGLE_DOT or lowered in _DOUBLE_DOT:
                return None
    if query is None or query == "?":
        return path
    return path + query


def _usv(text: str) -> str:
    """The USVString conversion: lone surrogates become U+FFFD, pairs are joined."""
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")


def _encode(char: str, encode_set: frozenset[str]) -> str:
    if char in encode_set or ord(char) > 0x7E:
        return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return char


def _encode_text(text: str, encode_set: frozenset[str]) -> str:
    return "".join(_encode(char, encode_set) for char in text)


def _is_windows_drive_letter(text: str, *, normalized: bool = False) -> bool:
    if len(text) != 2 or text[0] not in _ASCII_ALPHA:
        return False
    return text[1] == ":" if normalized else text[1] in ":|"


class _Url:
    """The parts of a parsed URL the key needs (scheme, path, query)."""

    def __init__(self) -> None:
        self.scheme = ""
        self.host: str | None = None
        self.path: list[str] = []
        self.opaque_path: str | None = None
        self.query: str | None = None

    @property
    def special(self) -> bool:
        return self.scheme in _SPECIAL_SCHEMES

    def shorten_path(self) -> None:
        if (
            self.scheme == "file"
            and len(self.path) == 1
            and _is_windows_drive_letter(self.path[0], normalized=True)
        ):
            return
        if self.path:
            self.path.pop()

    def pathname(self) -> str:
        if self.opaque_path is not None:
            return self.opaque_path
        return "".join("/" + segment for segment in self.path)

    def search(self) -> str:
        return "" if not self.query else "?" + self.query


def _path_and_query(raw: str) -> str:
    parsed = _parse(raw)
    return parsed.pathname() + parsed.search()


def _parse(raw: str) -> _Url:
    text = _usv(raw).strip("".join(chr(c) for c in range(0x21)))
    text = text.replace("\t", "").replace("\n", "").replace("\r", "")
    url = _Url()
    state = "scheme start"
    buffer = ""
    at_sign_seen = False
    inside_brackets = False
    pointer = 0
    length = len(text)

    while True:
        char: str | None = text[pointer] if pointer < length else None
        rest = text[pointer + 1 :]

        if state == "scheme start":
            if char is not None and char in _ASCII_ALPHA:
                buffer += char.lower()
                state = "scheme"
            else:
                raise _Failure  # no scheme and no base URL
        elif state == "scheme":
            if char is not None and char in _SCHEME_CHARS:
                buffer += char.lower()
            elif char == ":":
                url.scheme = buffer
                buffer = ""
                if url.scheme == "file":
                    state = "file"
                elif url.special:
                    state = "special authority slashes"
                elif rest.startswith("/"):
                    state = "path or authority"
                    pointer += 1
                else:
                    url.opaque_path = ""
                    state = "opaque path"
            else:
                raise _Failure  # no scheme and no base URL
        elif state == "special authority slashes":
            if char == "/" and rest.startswith("/"):
                state = "special authority ignore slashes"
                pointer += 1
            else:
                state = "special authority ignore slashes"
                pointer -= 1
        elif state == "special authority ignore slashes":
            if char not in ("/", "\\"):
                state = "authority"
                pointer -= 1
        elif state == "path or authority":
            if char == "/":
                state = "authority"
            else:
                state = "path"
                pointer -= 1
        elif state == "authority":
            if char == "@":
                # Credentials are not part of the key; only their syntax matters.
                at_sign_seen = True
                buffer = ""
            elif char is None or char in "/?#" or (url.special and char == "\\"):
                if at_sign_seen and buffer == "":
                    raise _Failure  # credentials without a host
                pointer -= len(buffer) + 1
                buffer = ""
                state = "host"
            else:
                buffer += char
        elif state == "host":
            if char == ":" and not inside_brackets:
                if buffer == "":
                    raise _Failure
                url.host = parse_host(buffer, opaque=not url.special)
                buffer = ""
                state = "port"
            elif char is None or char in "/?#" or (url.special and char == "\\"):
                pointer -= 1
                if url.special and buffer == "":
                    raise _Failure
                url.host = parse_host(buffer, opaque=not url.special)
                buffer = ""
                state = "path start"
            else:
                if char == "[":
                    inside_brackets = True
                elif char == "]":
                    inside_brackets = False
                buffer += char
        elif state == "port":
            if char is not None and char in _ASCII_DIGITS:
                buffer += char
            elif char is None or char in "/?#" or (url.special and char == "\\"):
                if buffer and int(buffer) > 65535:
                    raise _Failure
                buffer = ""
                state = "path start"
                pointer -= 1
            else:
                raise _Failure
        elif state == "file":
            url.host = ""
            if char in ("/", "\\"):
                state = "file slash"
            else:
                state = "path"
                pointer -= 1
        elif state == "file slash":
            if char in ("/", "\\"):
                state = "file host"
            else:
                state = "path"
                pointer -= 1
        elif state == "file host":
            if char is None or char in "/\\?#":
                pointer -= 1
                if _is_windows_drive_letter(buffer):
                    state = "path"  # the buffer is kept: it becomes the first segment
                elif buffer == "":
                    url.host = ""
                    state = "path start"
                else:
                    host = parse_host(buffer, opaque=False)
                    url.host = "" if host == "localhost" else host
                    buffer = ""
                    state = "path start"
            else:
                buffer += char
        elif state == "path start":
            if url.special:
                state = "path"
                if char not in ("/", "\\"):
                    pointer -= 1
            elif char == "?":
                url.query = ""
                state = "query"
            elif char == "#":
                return url
            elif char is not None:
                state = "path"
                if char != "/":
                    pointer -= 1
        elif state == "path":
            slash = char == "/" or (url.special and char == "\\")
            if char is None or slash or char in "?#":
                lowered = buffer.lower()
                if lowered in _DOUBLE_DOT:
                    had_segments = bool(url.path)
                    url.shorten_path()
                    # Node's parser leaves a non-special path empty when ".." had nothing
                    # to remove ("foo:/.." has pathname ""); the Standard would append "".
                    if not slash and (url.special or had_segments):
                        url.path.append("")
                elif lowered in _SINGLE_DOT:
                    if not slash:
                        url.path.append("")
                else:
                    if url.scheme == "file" and not url.path and _is_windows_drive_letter(buffer):
                        buffer = buffer[0] + ":"
                    url.path.append(buffer)
                buffer = ""
                if char == "?":
                    url.query = ""
                    state = "query"
                elif char == "#":
                    return url
            else:
                buffer += _encode(char, _PATH_SET)
        elif state == "opaque path":
            if char == "?":
                url.query = ""
                state = "query"
            elif char == "#":
                return url
            elif char is not None:
                url.opaque_path = (url.opaque_path or "") + _encode(char, _C0_CONTROL_SET)
        elif state == "query":
            if char is None or char == "#":
                encode_set = _SPECIAL_QUERY_SET if url.special else _QUERY_SET
                url.query = (url.query or "") + _encode_text(buffer, encode_set)
                return url
            buffer += char

        # After a run the pointer may have stepped back to re-read a code point in the next
        # state; the machine stops once a run leaves it on the end of the input.
        if pointer >= length:
            return url
        pointer += 1
