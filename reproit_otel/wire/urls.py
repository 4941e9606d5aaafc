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
percent-encode sets, and host parsing far enough to know whether a host is valid (IPv4 and
IPv6 literals, forbidden code points, ports). International domain names are checked with an
approximation of UTS #46 built on :mod:`unicodedata` (NFKC case folding, disallowed general
categories, Punycode); that only decides validity, since the host never reaches the key.

The parser follows the reference runtime (Node 20): the path percent-encode set does not hold
``^``, and an opaque path keeps its spaces.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from reproit_otel.wire._js import UNSET, js_string

__all__ = ["url_path_and_query"]

_SPECIAL_SCHEMES = frozenset({"ftp", "file", "http", "https", "ws", "wss"})
_ASCII_ALPHA = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ASCII_DIGITS = frozenset("0123456789")
_ASCII_HEX = frozenset("0123456789abcdefABCDEF")
_SCHEME_CHARS = _ASCII_ALPHA | _ASCII_DIGITS | frozenset("+-.")

# Percent-encode sets (URL Standard 1.3). Code points above U+007E are in every set.
_C0_CONTROL_SET = frozenset(chr(c) for c in range(0x20)) | {"\x7f"}
_QUERY_SET = _C0_CONTROL_SET | frozenset(' "#<>')
_SPECIAL_QUERY_SET = _QUERY_SET | {"'"}
_PATH_SET = _QUERY_SET | frozenset("?`{}")

_FORBIDDEN_HOST = frozenset("\x00\t\n\r #/:<>?@[\\]^|")
_FORBIDDEN_DOMAIN = _FORBIDDEN_HOST | frozenset(chr(c) for c in range(0x20)) | {"%", "\x7f"}

_SINGLE_DOT = frozenset({".", "%2e"})
_DOUBLE_DOT = frozenset({"..", ".%2e", "%2e.", "%2e%2e"})


class _Failure(Exception):
    """The URL does not parse."""


def url_path_and_query(url: Any) -> str:
    """``pathname + search`` of ``new URL(url)``, or ``String(url ?? "")`` if it does not parse.

    ``url`` may be any JSON value or :data:`~reproit_otel.wire._js.UNSET`; it is turned into a
    string the way JavaScript would (``String(url)``) before parsing.
    """
    if url is None or url is UNSET:
        return ""
    text = js_string(url)
    try:
        return _path_and_query(text)
    except _Failure:
        return text


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


def _starts_with_windows_drive_letter(rest: str) -> bool:
    return (
        len(rest) >= 2
        and _is_windows_drive_letter(rest[:2])
        and (len(rest) == 2 or rest[2] in "/\\?#")
    )


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
                url.host = _parse_host(buffer, opaque=not url.special)
                buffer = ""
                state = "port"
            elif char is None or char in "/?#" or (url.special and char == "\\"):
                pointer -= 1
                if url.special and buffer == "":
                    raise _Failure
                url.host = _parse_host(buffer, opaque=not url.special)
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
                    host = _parse_host(buffer, opaque=False)
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


def _parse_host(text: str, *, opaque: bool) -> str:
    """Host parsing (URL Standard 3.5); raises :class:`_Failure` for an invalid host."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise _Failure
        _parse_ipv6(text[1:-1])
        return text
    if opaque:
        if any(char in _FORBIDDEN_HOST for char in text):
            raise _Failure
        return _encode_text(text, _C0_CONTROL_SET)
    domain = _percent_decode(text).decode("utf-8", "replace")
    ascii_domain = _domain_to_ascii(domain)
    if any(char in _FORBIDDEN_DOMAIN for char in ascii_domain):
        raise _Failure
    if _ends_in_number(ascii_domain):
        _parse_ipv4(ascii_domain)
    return ascii_domain


def _percent_decode(text: str) -> bytes:
    data = text.encode("utf-8")
    out = bytearray()
    index = 0
    while index < len(data):
        byte = data[index]
        pair = data[index + 1 : index + 3]
        if byte == 0x25 and len(pair) == 2 and all(chr(b) in _ASCII_HEX for b in pair):
            out.append(int(pair, 16))
            index += 3
        else:
            out.append(byte)
            index += 1
    return bytes(out)


# UTS #46 code points that map to nothing (soft hyphen, joiners, variation selectors, BOM...).
_IGNORED = frozenset(
    ["\u00ad", "\u034f", "\u180b", "\u180c", "\u180d", "\u180f", "\u200b", "\u2060", "\u2064"]
    + [chr(c) for c in range(0xFE00, 0xFE10)]
    + [chr(c) for c in range(0xE0100, 0xE01F0)]
    + ["\ufeff"]
)
# Code points UTS #46 disallows although NFKC case folding would keep them: Georgian capital
# letters, Hangul fillers, ideographic description characters and a few more.
_DISALLOWED = frozenset(
    [chr(c) for c in range(0x10A0, 0x10C6)]
    + [chr(c) for c in range(0x2FF0, 0x3000)]
    + ["\u115f", "\u1160", "\u17b4", "\u17b5", "\u1806", "\u2132", "\u2183", "\u3164"]
    + ["\uffa0", "\ufffd"]
)
_JOINERS = frozenset({"\u200c", "\u200d"})
_VIRAMA = 9  # canonical combining class of a virama
_IDEOGRAPHIC_STOPS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_DISALLOWED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})

# Bidi classes for the Bidi Rule (RFC 5893 section 2) as Node's IDNA code applies it.
_RTL = frozenset({"R", "AL", "AN"})
_RTL_ALLOWED = frozenset({"R", "AL", "AN", "EN", "ES", "CS", "ET", "ON", "BN", "NSM"})
_RTL_ENDINGS = frozenset({"R", "AL", "AN", "EN"})
_LTR_ALLOWED = frozenset({"L", "EN", "ES", "CS", "ET", "ON", "BN", "NSM"})


def _domain_to_ascii(domain: str) -> str:
    """Domain to ASCII with ``beStrict`` false; raises :class:`_Failure` when it fails."""
    if domain.isascii():
        mapped = domain.lower()
    else:
        mapped = "".join(char for char in domain if char not in _IGNORED)
        if any(char in _DISALLOWED for char in mapped):
            raise _Failure
        for char in set(mapped.translate(_IDEOGRAPHIC_STOPS)) - {"."}:
            # A character whose mapping holds a full stop (such as U+2488) is disallowed.
            if "." in unicodedata.normalize("NFKC", char):
                raise _Failure
        mapped = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", mapped).casefold())
        mapped = mapped.translate(_IDEOGRAPHIC_STOPS)
    out: list[str] = []
    unicode_labels: list[str] = []
    for label in mapped.split("."):
        if label.startswith("xn--"):
            try:
                decoded = label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError) as error:
                raise _Failure from error
            if decoded == "":
                raise _Failure
            _check_label(decoded)
            out.append(label)
            unicode_labels.append(decoded)
        elif label.isascii():
            out.append(label)
            unicode_labels.append(label)
        else:
            _check_label(label)
            out.append("xn--" + label.encode("punycode").decode("ascii"))
            unicode_labels.append(label)
    for label in unicode_labels:
        _check_bidi(label)
    result = ".".join(out)
    if result == "":
        raise _Failure
    return result


def _check_label(label: str) -> None:
    if unicodedata.normalize("NFC", label) != label:
        raise _Failure
    if unicodedata.category(label[0]).startswith("M"):
        raise _Failure
    for index, char in enumerate(label):
        if char in _JOINERS:
            # CheckJoiners, reduced to its common case: a joiner must follow a virama.
            if index == 0 or unicodedata.combining(label[index - 1]) != _VIRAMA:
                raise _Failure
            continue
        if (
            char in _IGNORED
            or char in _DISALLOWED
            or unicodedata.category(char) in _DISALLOWED_CATEGORIES
        ):
            raise _Failure


def _check_bidi(label: str) -> None:
    """CheckBidi for one label, as the reference runtime's IDNA code (ada) evaluates it.

    Only a label holding an R, AL or AN character is checked. One starting with an L
    character is checked as left-to-right, every character before its last non-NSM one
    being L, EN, ES, CS, ET, ON, BN or NSM; any other is checked as right-to-left: no L,
    not both EN and AN, and its last non-NSM character R, AL, AN or EN.
    """
    classes = [unicodedata.bidirectional(char) for char in label]
    if not any(kind in _RTL for kind in classes):
        return
    last = len(classes) - 1
    while last >= 0 and classes[last] == "NSM":
        last -= 1
    if last < 0:
        raise _Failure
    if classes[0] == "L":
        if any(kind not in _LTR_ALLOWED for kind in classes[:last]):
            raise _Failure
        return
    head = classes[: last + 1]
    if any(kind not in _RTL_ALLOWED for kind in head) or head[-1] not in _RTL_ENDINGS:
        raise _Failure
    if "EN" in head and "AN" in head:
        raise _Failure


def _ends_in_number(domain: str) -> bool:
    parts = domain.split(".")
    if parts[-1] == "":
        if len(parts) == 1:
            return False
        parts.pop()
    last = parts[-1]
    if last and all(char in _ASCII_DIGITS for char in last):
        return True
    return _ipv4_number(last) is not None


def _ipv4_number(text: str) -> int | None:
    if text == "":
        return None
    radix = 10
    if text[:2] in ("0x", "0X"):
        radix, text = 16, text[2:]
    elif len(text) >= 2 and text[0] == "0":
        radix, text = 8, text[1:]
    if text == "":
        return 0
    digits = {8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}[radix]
    if any(char not in digits for char in text):
        return None
    return int(text, radix)


def _parse_ipv4(text: str) -> int:
    parts = text.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        raise _Failure
    numbers: list[int] = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            raise _Failure
        numbers.append(number)
    if any(number > 255 for number in numbers[:-1]):
        raise _Failure
    if numbers[-1] >= 256 ** (5 - len(numbers)):
        raise _Failure
    address = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        address += number * 256 ** (3 - index)
    return address


def _parse_ipv6(text: str) -> list[int]:
    address = [0] * 8
    piece_index = 0
    compress: int | None = None
    pointer = 0
    length = len(text)

    def at(index: int) -> str | None:
        return text[index] if 0 <= index < length else None

    if at(0) == ":":
        if at(1) != ":":
            raise _Failure
        pointer = 2
        piece_index += 1
        compress = piece_index
    while at(pointer) is not None:
        if piece_index == 8:
            raise _Failure
        if at(pointer) == ":":
            if compress is not None:
                raise _Failure
            pointer += 1
            piece_index += 1
            compress = piece_index
            continue
        value = 0
        count = 0
        while count < 4 and (at(pointer) or "g") in _ASCII_HEX:
            value = value * 0x10 + int(text[pointer], 16)
            pointer += 1
            count += 1
        if at(pointer) == ".":
            if count == 0:
                raise _Failure
            pointer -= count
            if piece_index > 6:
                raise _Failure
            numbers_seen = 0
            while at(pointer) is not None:
                ipv4_piece: int | None = None
                if numbers_seen > 0:
                    if at(pointer) == "." and numbers_seen < 4:
                        pointer += 1
                    else:
                        raise _Failure
                if (at(pointer) or "x") not in _ASCII_DIGITS:
                    raise _Failure
                while (char := at(pointer)) is not None and char in _ASCII_DIGITS:
                    number = int(char)
                    if ipv4_piece is None:
                        ipv4_piece = number
                    elif ipv4_piece == 0:
                        raise _Failure
                    else:
                        ipv4_piece = ipv4_piece * 10 + number
                    if ipv4_piece > 255:
                        raise _Failure
                    pointer += 1
                assert ipv4_piece is not None
                address[piece_index] = address[piece_index] * 0x100 + ipv4_piece
                numbers_seen += 1
                if numbers_seen in (2, 4):
                    piece_index += 1
            if numbers_seen != 4:
                raise _Failure
            break
        if at(pointer) == ":":
            pointer += 1
            if at(pointer) is None:
                raise _Failure
        elif at(pointer) is not None:
            raise _Failure
        address[piece_index] = value
        piece_index += 1
    if compress is not None:
        swaps = piece_index - compress
        piece_index = 7
        while piece_index != 0 and swaps > 0:
            address[piece_index], address[compress + swaps - 1] = (
                address[compress + swaps - 1],
                address[piece_index],
            )
            piece_index -= 1
            swaps -= 1
    elif piece_index != 8:
        raise _Failure
    return address
