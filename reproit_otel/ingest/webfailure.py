"""Why an occurrence failed and when each exchange happened, on its web page.

Three parts of ``GET /occurrences/{id}`` (``webview.py`` places them):

* **Exception**: the exception the capture's ``return`` carries (``wire/exception.py``):
  type and message, where it was raised (the innermost application frame), the application
  frames (innermost first), every frame with library frames marked, and the chained causes;
* **Exception kinds**: the occurrence's failures told apart by exception type and innermost
  application frame (``failure_kinds.py``), each with its count, a link to its latest
  failure and to the list filtered by it;
* **Timeline**: one bar per exchange over the request's duration. The request runs from its
  ``start`` (``monoNs`` 0) to its ``return``; an exchange's event is stamped when it
  completes, so its bar runs from the previous step's stamp to its own (calls made one after
  the other are drawn exactly; concurrent ones are drawn one after the other). A failed
  exchange (HTTP 5xx, a transport or SQL error) is drawn red; a slow one stands out by its
  length. Drawn as inline SVG, whose geometry attributes the page's Content Security Policy
  allows (it forbids inline styles).

Every recorded string goes through :func:`~reproit_otel.ingest.webhtml.text`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from reproit_otel.ingest.failure_kinds import FailureKind
from reproit_otel.ingest.webhtml import text
from reproit_otel.wire.exception import (
    describe_exception,
    error_of_output,
    innermost_application_frame,
    short_type,
)

__all__ = ["exception_section", "kinds_section", "timeline_section"]

_MAX_CHAIN_SHOWN = 4
MAX_BARS = 200
"""Exchanges drawn on the timeline (the first ones; a heavy operation has more)."""


def _frame_line(frame: Mapping[str, Any]) -> str:
    tag = ' <span class="pill">library</span>' if frame.get("library") else ""
    return (
        f'<li class="{"lib" if frame.get("library") else "app"}"><code>'
        f"{text(frame.get('file'))}:{text(frame.get('line'))}</code> in "
        f"<code>{text(frame.get('function'))}</code>{tag}</li>"
    )


def _one_exception(error: Mapping[str, Any], index: int) -> str:
    frames = [f for f in error.get("frames") or () if isinstance(f, Mapping)]
    application = [f for f in frames if not f.get("library")]
    where = innermost_application_frame(error)
    raised = (
        f'<p class="raised">raised at <code>{text(where.get("file"))}:'
        f"{text(where.get('line'))}</code> in <code>{text(where.get('function'))}</code></p>"
        if where
        else ""
    )
    omitted = error.get("framesOmitted")
    note = f'<li class="muted">{text(omitted)} outer frames not recorded</li>' if omitted else ""
    app_list = "".join(_frame_line(f) for f in reversed(application))
    return (
        f'<div class="exception" id="exception-{index}">'
        f'<p class="exc-head"><code class="exc-type">{text(short_type(str(error.get("type"))))}'
        f'</code>: <span class="exc-message">{text(error.get("message"))}</span></p>{raised}'
        f'<h4>Application frames, innermost first</h4><ol class="frames app-frames">'
        f"{app_list or '<li class=muted>none</li>'}</ol>"
        f"<details><summary>All {len(frames)} frames, outermost first</summary>"
        f'<ol class="frames">{note}{"".join(_frame_line(f) for f in frames)}</ol></details>'
        "</div>"
    )


def exception_section(returned: Mapping[str, Any] | None) -> str:
    """The *Exception* section, or ``""`` when the capture carries no exception."""
    error = error_of_output(returned.get("output")) if returned else None
    if error is None:
        return ""
    parts = [_one_exception(error, 0)]
    current = error.get("cause")
    depth = 1
    while isinstance(current, Mapping) and depth < _MAX_CHAIN_SHOWN:
        how = (
            "The above was raised from (raise ... from):"
            if current.get("chained") == "cause"
            else "The above was raised while handling:"
        )
        parts.append(f'<p class="chain">{how}</p>{_one_exception(current, depth)}')
        current = current.get("cause")
        depth += 1
    return (
        '<section id="exception"><h2>Exception <small>'
        f"{text(describe_exception(error))}</small></h2>{''.join(parts)}</section>"
    )


def kinds_section(
    occurrence_id: str, kinds: Sequence[FailureKind], selected: str | None, shown_kind: str | None
) -> str:
    """The *Exception kinds* table, or ``""`` when the occurrence has none recorded."""
    if not kinds:
        return ""
    quoted = urllib.parse.quote(occurrence_id, safe="")
    rows = []
    for kind in kinds:
        mark = ' class="shown"' if kind.kind == shown_kind else ""
        view = f"/occurrences/{quoted}?" + urllib.parse.urlencode({"exception": kind.kind})
        listed = "/?" + urllib.parse.urlencode({"exception": kind.kind})
        rows.append(
            f"<tr{mark}><td><code>{text(kind.kind)}</code></td><td class=num>{kind.count}</td>"
            f'<td><a class="kind-view" href="{text(view)}">latest failure</a> · '
            f'<a href="{text(listed)}">occurrences with it</a></td></tr>'
        )
    note = ""
    if selected is not None and selected != shown_kind:
        note = (
            f'<p class="muted">No failure of kind <code>{text(selected)}</code> here; '
            "showing the latest capture.</p>"
        )
    differing = (
        '<p class="partial">These failures share a signature but not an exception: they may be '
        "different bugs.</p>"
        if len(kinds) > 1
        else ""
    )
    return (
        '<section id="kinds"><h2>Exception kinds <small>type and innermost application frame'
        f"</small></h2>{differing}{note}"
        '<table class="kinds"><thead><tr><th>Kind</th><th>Captures</th><th></th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _failed(raw: Mapping[str, Any]) -> bool:
    exchange = raw.get("exchange")
    if not isinstance(exchange, Mapping):
        return False
    response = exchange.get("response")
    if isinstance(response, Mapping):
        status = response.get("status")
        if isinstance(status, int) and status >= 500:
            return True
        if response.get("error") is not None:
            return True
    return exchange.get("error") is not None


def _label(raw: Mapping[str, Any]) -> str:
    exchange = raw.get("exchange")
    request = exchange.get("request") if isinstance(exchange, Mapping) else None
    if isinstance(request, Mapping):
        if request.get("text") is not None:
            return str(request.get("text"))
        if request.get("method") is not None:
            return f"{request.get('method')} {request.get('url')}"
    key = raw.get("key")
    return str(key) if key is not None else str(raw.get("effect") or "effect")


def _ms(nanoseconds: int) -> str:
    return f"{nanoseconds / 1e6:.1f} ms"


def timeline_section(
    effects: Sequence[Mapping[str, Any]], returned: Mapping[str, Any] | None
) -> str:
    """The *Timeline* section, or ``""`` when the events carry no ``monoNs`` stamps."""
    steps: list[tuple[Mapping[str, Any], int]] = []
    for event in effects:
        value = event.get("value")
        raw = value.get("value") if isinstance(value, Mapping) else None
        if isinstance(raw, Mapping) and isinstance(raw.get("monoNs"), int):
            steps.append((raw, int(raw["monoNs"])))
    end = returned.get("monoNs") if returned else None
    if not isinstance(end, int) or isinstance(end, bool):
        end = max((stamp for _, stamp in steps), default=0)
    if not steps or end <= 0:
        return ""
    total = len(steps)
    steps = steps[:MAX_BARS]
    row_height, label_rows = 22, []
    bars = []
    previous = 0
    for index, (raw, stamp) in enumerate(steps):
        begin = min(max(previous, 0), end)
        finish = min(max(stamp, begin), end)
        x = 100.0 * begin / end
        width = max(100.0 * (finish - begin) / end, 0.4)
        css = "bar failed" if _failed(raw) else "bar"
        label = _label(raw)
        y = index * row_height
        bars.append(
            f'<rect class="{css}" x="{x:.3f}%" y="{y + 4}" width="{width:.3f}%" height="14">'
            f"<title>{text(label)}: {_ms(finish - begin)}</title></rect>"
        )
        label_rows.append(
            f'<li class="{"failed" if css != "bar" else ""}"><code>{text(label[:120])}</code> '
            f'<span class="muted">{_ms(finish - begin)}, done at {_ms(finish)}</span></li>'
        )
        previous = stamp
    height = len(steps) * row_height + 4
    return (
        '<section id="timeline"><h2>Timeline <small>each exchange over the request\'s '
        f"{_ms(end)}</small></h2>"
        '<div class="timeline"><ol class="timeline-labels">'
        f"{''.join(label_rows)}</ol>"
        f'<svg class="timeline-bars" width="100%" height="{height}" role="img" '
        f'aria-label="exchanges over the request duration">{"".join(bars)}</svg></div>'
        + (
            f'<p class="muted">The first {MAX_BARS} of {total} exchanges are drawn.</p>'
            if total > MAX_BARS
            else ""
        )
        + '<p class="muted">A bar runs from the previous step to the moment the exchange '
        "completed; red ones failed.</p></section>"
    )
