"""Host parsing of the WHATWG URL Standard, as far as deciding validity (PROTOCOL 7.2).

:func:`parse_host` raises :class:`InvalidHost` exactly when the reference runtime's URL
parser (Node 20) rejects a host, so :func:`reproit_otel.wire.urls.url_path_and_query` knows
when a URL does not parse: bracketed IPv6 literals, IPv4 in its decimal, octal and hex
forms (a host ending in a number must be one), forbidden code points, and domain to ASCII.

Domain to ASCII approximates UTS #46 (non-transitional, CheckBidi and CheckJoiners on,
STD3 rules and DNS lengths off) with :mod:`unicodedata`: NFKC case folding, the code points
UTS #46 ignores or disallows, Punycode, and the Bidi checks the reference applies. Code points
newer than this Python's Unicode database are rejected as unassigned. The result decides
validity only: the host never reaches a replay key.
"""

from __future__ import annotations

import unicodedata

__all__ = ["InvalidHost", "parse_host"]

_ASCII_DIGITS = frozenset("0123456789")
_ASCII_HEX = frozenset("0123456789abcdefABCDEF")
_C0_CONTROL_SET = frozenset(chr(c) for c in range(0x20)) | {"\x7f"}
_FORBIDDEN_HOST = frozenset("\x00\t\n\r #/:<>?@[\\]^|")
_FORBIDDEN_DOMAIN = _FORBIDDEN_HOST | frozenset(chr(c) for c in range(0x20)) | {"%", "\x7f"}


class InvalidHost(ValueError):
    """The host of a URL is not valid, so the URL does not parse."""


def _encode_opaque(text: str) -> str:
    return "".join(
        "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
        if char in _C0_CONTROL_SET or ord(char) > 0x7E
        else char
        for char in text
    )


def parse_host(text: str, *, opaque: bool) -> str:
    """Host parsing (URL Standard 3.5); raises :class:`InvalidHost` for an invalid host."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise InvalidHost
        _parse_ipv6(text[1:-1])
        return text
    if opaque:
        if any(char in _FORBIDDEN_HOST for char in text):
            raise InvalidHost
        return _encode_opaque(text)
    domain = _percent_decode(text).decode("utf-8", "replace")
    ascii_domain = _domain_to_ascii(domain)
    if any(char in _FORBIDDEN_DOMAIN for char in ascii_domain):
        raise InvalidHost
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
    """Domain to ASCII with ``beStrict`` false; raises :class:`InvalidHost` when it fails."""
    if domain.isascii():
        mapped = domain.lower()
    else:
        mapped = "".join(char for char in domain if char not in _IGNORED)
        if any(char in _DISALLOWED for char in mapped):
            raise InvalidHost
        for char in set(mapped.translate(_IDEOGRAPHIC_STOPS)) - {"."}:
            # A character whose mapping holds a full stop (such as U+2488) is disallowed.
            if "." in unicodedata.normalize("NFKC", char):
                raise InvalidHost
        mapped = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", mapped).casefold())
        mapped = mapped.translate(_IDEOGRAPHIC_STOPS)
    out: list[str] = []
    unicode_labels: list[str] = []
    for label in mapped.split("."):
        if label.startswith("xn--"):
            try:
                decoded = label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError) as error:
                raise InvalidHost from error
            if decoded == "":
                raise InvalidHost
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
        raise InvalidHost
    return result


def _check_label(label: str) -> None:
    if unicodedata.normalize("NFC", label) != label:
        raise InvalidHost
    if unicodedata.category(label[0]).startswith("M"):
        raise InvalidHost
    for index, char in enumerate(label):
        if char in _JOINERS:
            # CheckJoiners, reduced to its common case: a joiner must follow a virama.
            if index == 0 or unicodedata.combining(label[index - 1]) != _VIRAMA:
                raise InvalidHost
            continue
        if (
            char in _IGNORED
            or char in _DISALLOWED
            or unicodedata.category(char) in _DISALLOWED_CATEGORIES
        ):
            raise InvalidHost


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
        raise InvalidHost
    if classes[0] == "L":
        if any(kind not in _LTR_ALLOWED for kind in classes[:last]):
            raise InvalidHost
        return
    head = classes[: last + 1]
    if any(kind not in _RTL_ALLOWED for kind in head) or head[-1] not in _RTL_ENDINGS:
        raise InvalidHost
    if "EN" in head and "AN" in head:
        raise InvalidHost


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
        raise InvalidHost
    numbers: list[int] = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            raise InvalidHost
        numbers.append(number)
    if any(number > 255 for number in numbers[:-1]):
        raise InvalidHost
    if numbers[-1] >= 256 ** (5 - len(numbers)):
        raise InvalidHost
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
            raise InvalidHost
        pointer = 2
        piece_index += 1
        compress = piece_index
    while at(pointer) is not None:
        if piece_index == 8:
            raise InvalidHost
        if at(pointer) == ":":
            if compress is not None:
                raise InvalidHost
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
                raise InvalidHost
            pointer -= count
            if piece_index > 6:
                raise InvalidHost
            numbers_seen = 0
            while at(pointer) is not None:
                ipv4_piece: int | None = None
                if numbers_seen > 0:
                    if at(pointer) == "." and numbers_seen < 4:
                        pointer += 1
                    else:
                        raise InvalidHost
                if (at(pointer) or "x") not in _ASCII_DIGITS:
                    raise InvalidHost
                while (char := at(pointer)) is not None and char in _ASCII_DIGITS:
                    number = int(char)
                    if ipv4_piece is None:
                        ipv4_piece = number
                    elif ipv4_piece == 0:
                        raise InvalidHost
                    else:
                        ipv4_piece = ipv4_piece * 10 + number
                    if ipv4_piece > 255:
                        raise InvalidHost
                    pointer += 1
                assert ipv4_piece is not None
                address[piece_index] = address[piece_index] * 0x100 + ipv4_piece
                numbers_seen += 1
                if numbers_seen in (2, 4):
                    piece_index += 1
            if numbers_seen != 4:
                raise InvalidHost
            break
        if at(pointer) == ":":
            pointer += 1
            if at(pointer) is None:
                raise InvalidHost
        elif at(pointer) is not None:
            raise InvalidHost
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
        raise InvalidHost
    return address
