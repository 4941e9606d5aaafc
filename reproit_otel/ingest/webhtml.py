"""HTML building blocks of the ingest's web page: escaping, recorded values, the page frame.

Every piece of recorded data reaches the page through :func:`text` (``html.escape`` with
quotes) or through :func:`value_html`, which builds markup around escaped text only; nothing
recorded is ever placed in a tag, an attribute name, a script or a style. The page's Content
Security Policy (see :mod:`reproit_otel.ingest.web`) forbids inline scripts as a second wall.

Recorded values are shown the way a developer needs to read them:

* JSON values are pretty-printed, two spaces per level, keys in recorded order;
* a redaction placeholder ``{"$reproit": {"redacted": true, "type": T, "length": L}}`` is one
  marked badge (``redacted string, 7 chars``): the value was removed at the source and replay
  accepts any live value there;
* the text placeholder ``$reproit`` (a secret URL parameter or a configured secret value cut
  out of a string, decision D8) is marked inside strings;
* a PostgreSQL value in the tagged encoding of the psycopg2 recorder (``{"$pg": "decimal",
  "v": "1.50"}``) shows its value with its type;
* a body kept by identity only (``{"bodyBytes": N, "bodySha256": H, "truncated": true}``) is a
  marked notice naming its size and digest: it was over the 8 KiB budget and is not stored.

Values nested deeper than :data:`MAX_DEPTH` are shown as compact canonical JSON text, so a
hostile body cannot exhaust the recursion limit.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from typing import Any

from reproit_otel.redaction.core import PLACEHOLDER_KEY, TEXT_PLACEHOLDER
from reproit_otel.wire.canonical import canonical_json

__all__ = [
    "MAX_DEPTH",
    "is_identity",
    "is_placeholder",
    "page",
    "placeholder_html",
    "string_html",
    "text",
    "value_html",
]

MAX_DEPTH = 48
INDENT = "  "


def text(value: object) -> str:
    """``str(value)`` escaped for element content and quoted attribute values."""
    return html.escape(str(value), quote=True)


def is_placeholder(value: object) -> bool:
    """Whether ``value`` is a ``$reproit`` redaction placeholder object."""
    return isinstance(value, Mapping) and bool(value.get(PLACEHOLDER_KEY))


def is_identity(value: object) -> bool:
    """Whether ``value`` is a body (or input/data) kept by identity only."""
    return (
        isinstance(value, Mapping)
        and value.get("truncated") is True
        and any(str(key).endswith("Sha256") for key in value)
    )


def placeholder_html(value: Mapping[str, Any]) -> str:
    """The badge for a redaction placeholder."""
    body = value.get(PLACEHOLDER_KEY)
    parts = ["redacted"]
    if isinstance(body, Mapping):
        kind = body.get("type")
        if isinstance(kind, str) and kind:
            parts.append(kind)
        length = body.get("length")
        if isinstance(length, int) and not isinstance(length, bool):
            parts.append(f"{length} chars" if kind == "string" else f"length {length}")
    return (
        '<span class="ph" title="removed at the source; replay accepts any value here">'
        f"$reproit <small>{text(', '.join(parts))}</small></span>"
    )


def identity_html(value: Mapping[str, Any]) -> str:
    """The notice for a value kept by identity only (size and SHA-256, no content)."""
    size = next((v for k, v in value.items() if str(k).endswith("Bytes")), None)
    digest = next((v for k, v in value.items() if str(k).endswith("Sha256")), None)
    return (
        '<span class="trunc" title="over the 8192-byte budget: only its size and digest were '
        f'recorded">truncated: {text(size)} bytes not recorded'
        f" <small>sha256 {text(digest)}</small></span>"
    )


def string_html(raw: str) -> str:
    """Escaped text with every ``$reproit`` text placeholder marked."""
    pieces = raw.split(TEXT_PLACEHOLDER)
    marker = '<mark class="ph" title="secret removed at the source">$reproit</mark>'
    return marker.join(text(piece) for piece in pieces)


def _pg_tagged(value: Mapping[str, Any]) -> str | None:
    tag = value.get("$pg")
    if not isinstance(tag, str) or set(value) - {"$pg", "v", "type", "keys"}:
        return None
    shown = value.get("v")
    inner = shown if isinstance(shown, str) else canonical_json(shown)
    return f'<span class="pg" title="PostgreSQL {text(tag)}">{string_html(inner)}</span>'


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        quoted = json.dumps(value, ensure_ascii=False)[1:-1]
        return f'<span class="j-str">"{string_html(quoted)}"</span>'
    if value is None:
        return '<span class="j-null">null</span>'
    if isinstance(value, bool):
        return f'<span class="j-bool">{"true" if value else "false"}</span>'
    return f'<span class="j-num">{text(canonical_json(value))}</span>'


def _short_scalars(values: list[Any]) -> bool:
    """A list small enough to print on one line: a few numbers, booleans, short strings."""
    if len(values) > 8:
        return False
    for value in values:
        if isinstance(value, str):
            if len(value) > 24:
                return False
        elif value is not None and not isinstance(value, (bool, int, float)):
            return False
    return True


def value_html(value: Any, depth: int = 0) -> str:
    """``value`` pretty-printed as HTML (for a ``<pre>``), placeholders and identities marked."""
    if is_placeholder(value):
        return placeholder_html(value)
    if is_identity(value):
        return identity_html(value)
    if isinstance(value, Mapping) and "$pg" in value:
        tagged = _pg_tagged(value)
        if tagged is not None:
            return tagged
    if depth >= MAX_DEPTH and isinstance(value, (Mapping, list)):
        return f'<span class="deep">{string_html(canonical_json(value))}</span>'
    pad = INDENT * (depth + 1)
    end = INDENT * depth
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = [
            f'{pad}<span class="j-key">"{string_html(str(key))}"</span>: '
            f"{value_html(child, depth + 1)}"
            for key, child in value.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{end}}}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if _short_scalars(value):
            return "[" + ", ".join(value_html(child, depth + 1) for child in value) + "]"
        return "[\n" + ",\n".join(pad + value_html(c, depth + 1) for c in value) + f"\n{end}]"
    return _scalar(value)


def body_html(body: Any) -> str:
    """A recorded body: JSON pretty-printed; text that parses as JSON too; other text as is."""
    if isinstance(body, str):
        stripped = body.strip()
        if stripped[:1] in ("{", "["):
            try:
                parsed = json.loads(stripped)
            except ValueError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                return value_html(parsed)
        return string_html(body)
    return value_html(body)


def pre(inner_html: str, css: str = "code") -> str:
    """A ``<pre>`` block around already-built HTML."""
    return f'<pre class="{text(css)}">{inner_html}</pre>'


def page(
    title: str,
    body_html: str,
    *,
    signed_in: bool = False,
    scripts: Iterable[str] = ("web.js",),
) -> str:
    """The whole document: head with the shipped stylesheet and scripts, header, body."""
    script_tags = "".join(f'<script src="/static/{text(name)}" defer></script>' for name in scripts)
    sign_out = (
        '<form method="post" action="/logout" class="signout">'
        '<button type="submit">Sign out</button></form>'
        if signed_in
        else ""
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{text(title)} · reproit-otel</title>"
        '<link rel="stylesheet" href="/static/web.css">'
        '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
        f"{script_tags}</head><body>"
        '<header class="top"><a class="brand" href="/">reproit-otel</a>'
        f'<span class="tag">ingest</span>{sign_out}</header>'
        f"<main>{body_html}</main></body></html>"
    )
