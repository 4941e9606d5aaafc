"""One occurrence on the ingest's web page (``GET /occurrences/{id}``).

Read from the occurrence's latest capture batch (PROTOCOL 5.5), in this order:

* what failed: status, operation, failure summary and signature, counts, first and last seen,
  build, commit; the exception, its kinds and the timeline of the exchanges
  (``webfailure.py``);
* how to replay it: ``reproit-otel pull`` then ``reproit-otel check --exec`` (copy button),
  the capsule download, and ``reproit-otel regression`` to keep it fixed (copy button);
* completeness: each capability the batch declares (a ``partial`` one with its ``detail``),
  and whether the service saw every effect (``effectsComplete``);
* the input: the inbound request (query, headers, body) the trigger event carries;
* every exchange in recorded order: HTTP request and response (headers, bodies, streamed
  chunks), SQL statement with its parameters and rows as a table (or its error), invoke
  boundary calls; effects recorded only structurally are listed without a replayable value;
* the return (status, output, success) and the determinism envelope.

An occurrence only seen over OTLP has no batch: the page says so and offers no capsule.
"""

from __future__ import annotations

import shlex
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reproit_otel.ingest.failure_kinds import FailureKind
from reproit_otel.ingest.store import Occurrence
from reproit_otel.ingest.webexchanges import capsule_effects, exchanges_section
from reproit_otel.ingest.webfailure import exception_section, kinds_section, timeline_section
from reproit_otel.ingest.webhtml import (
    body_html,
    is_identity,
    is_placeholder,
    pre,
    string_html,
    text,
    value_html,
)
from reproit_otel.ingest.weblist import short_commit, status_badge
from reproit_otel.redaction.core import TEXT_PLACEHOLDER
from reproit_otel.wire.exception import error_of_output, exception_kind

__all__ = ["BatchView", "occurrence_html", "regression_command", "replay_commands"]

DEFAULT_EXEC = "<command that starts the service on $PORT>"
MAX_OPEN_CHUNKS = 16


@dataclass
class BatchView:
    """The parts of a capture batch the page shows."""

    batch_id: str = ""
    observed_at: str = ""
    emitter: str = ""
    capabilities: list[Mapping[str, Any]] = field(default_factory=list)
    input: Any = None
    envelope: Mapping[str, Any] | None = None
    effects: list[Mapping[str, Any]] = field(default_factory=list)
    returned: Mapping[str, Any] | None = None
    failure: Mapping[str, Any] | None = None

    @classmethod
    def read(cls, batch: Mapping[str, Any]) -> BatchView:
        """Pick the page's parts out of a stored batch (tolerant of missing pieces)."""
        view = cls(
            batch_id=str(batch.get("batchId", "")),
            observed_at=str(batch.get("observedAt", "")),
        )
        emitter = batch.get("emitter")
        if isinstance(emitter, Mapping):
            view.emitter = str(emitter.get("id", ""))
        capabilities = batch.get("capabilities")
        if isinstance(capabilities, list):
            view.capabilities = [c for c in capabilities if isinstance(c, Mapping)]
        events = batch.get("events")
        for wrapper in events if isinstance(events, list) else []:
            event = wrapper.get("event") if isinstance(wrapper, Mapping) else None
            if isinstance(event, Mapping):
                view._take(event)
        return view

    def _take(self, event: Mapping[str, Any]) -> None:
        kind = event.get("kind")
        value = event.get("value")
        replayable = (
            value.get("value")
            if isinstance(value, Mapping) and value.get("representation") == "replayable"
            else None
        )
        if kind == "trigger" and self.input is None:
            self.input = replayable
        elif kind == "checkpoint" and event.get("name") == "determinism-envelope":
            attributes = event.get("attributes")
            if self.envelope is None and isinstance(attributes, Mapping):
                self.envelope = attributes
        elif kind == "effect" and event.get("subject") == "operation-return":
            if self.returned is None and isinstance(replayable, Mapping):
                self.returned = replayable
        elif kind in ("dependency", "state-access", "effect"):
            self.effects.append(event)
        elif kind == "observation" and self.failure is None:
            failure = event.get("failure")
            if isinstance(failure, Mapping):
                self.failure = failure


def replay_commands(
    occurrence_id: str, base_url: str, exec_command: str | None
) -> tuple[str, bool]:
    """The shell lines that pull and replay the occurrence, and whether ``--exec`` is a stand-in.

    The key is never shown: ``pull`` reads it from ``$REPROIT_API_KEY``.
    """
    capsule = f"{occurrence_id}.capsule.json"
    given = bool(exec_command)
    lines = (
        f"reproit-otel pull {shlex.quote(occurrence_id)} -o {shlex.quote(capsule)} "
        f"--ingest {shlex.quote(base_url)}\n"
        f"reproit-otel check {shlex.quote(capsule)} "
        f"--exec {shlex.quote(exec_command or DEFAULT_EXEC)}"
    )
    return lines, not given


def regression_command(occurrence_id: str, exec_command: str | None) -> str:
    """The line that turns the pulled capsule into a committed pytest regression test."""
    capsule = f"{occurrence_id}.capsule.json"
    return (
        f"reproit-otel regression {shlex.quote(capsule)} "
        f"--exec {shlex.quote(exec_command or DEFAULT_EXEC)}"
    )


def _dl(pairs: Sequence[tuple[str, str]], css: str = "meta") -> str:
    rows = "".join(f"<dt>{text(name)}</dt><dd>{shown}</dd>" for name, shown in pairs)
    return f'<dl class="{css}">{rows}</dl>'


def _headers(headers: Any) -> str:
    if not isinstance(headers, Mapping) or not headers:
        return ""
    rows = "".join(
        f"<tr><th>{text(name)}</th><td>"
        + (value_html(value) if not isinstance(value, str) else string_html(value))
        + "</td></tr>"
        for name, value in headers.items()
    )
    redacted = any(
        not isinstance(value, str) or TEXT_PLACEHOLDER in value for value in headers.values()
    )
    return (
        f'<details class="headers"{" open" if redacted else ""}>'
        f"<summary>{len(headers)} header(s)</summary>"
        f'<table class="kv">{rows}</table></details>'
    )


def _utf8_chunks(body: str, sizes: Sequence[Any]) -> list[str] | None:
    data = body.encode("utf-8")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes):
        return None
    if sum(sizes) != len(data):
        return None
    chunks, start = [], 0
    for size in sizes:
        chunks.append(data[start : start + size].decode("utf-8", errors="replace"))
        start += size
    return chunks


def _stream(stream: Any, body: Any) -> str:
    if not isinstance(stream, Mapping):
        return ""
    sizes = stream.get("chunks")
    sizes = sizes if isinstance(sizes, list) else []
    note = (
        ' <span class="trunc">more than 128 chunks: the rest were counted, not recorded</span>'
        if stream.get("truncated") is True
        else ""
    )
    head = f'<div class="stream-head">streamed in {len(sizes)} chunk(s){note}</div>'
    split = _utf8_chunks(body, sizes) if isinstance(body, str) else None
    if split is None:  # the sizes do not cut this text (a truncated stream): body, then sizes
        listed = ", ".join(text(size) for size in sizes)
        shown = pre(body_html(body)) if body is not None else ""
        return (
            f'<div class="stream">{head}<div class="muted">bytes per chunk: {listed}</div>'
            f"{shown}</div>"
        )
    items = "".join(
        f'<li><span class="chunk-size">{text(size)} B</span>{pre(string_html(chunk), "chunk")}</li>'
        for size, chunk in zip(sizes, split, strict=True)
    )
    # A long stream is folded: its chunk count is in the heading, the text one click away.
    opened = " open" if len(sizes) <= MAX_OPEN_CHUNKS else ""
    return (
        f'<div class="stream">{head}<details class="chunks"{opened}>'
        f'<summary>chunks</summary><ol class="chunks">{items}</ol></details></div>'
    )


def _body(part: Mapping[str, Any], label: str = "body") -> str:
    if is_identity(part):
        return f'<div class="body"><div class="label">{text(label)}</div>{value_html(part)}</div>'
    if "body" not in part:
        return f'<div class="body muted">no {text(label)}</div>'
    return (
        f'<div class="body"><div class="label">{text(label)}</div>'
        f"{pre(body_html(part.get('body')))}</div>"
    )


def _http(exchange: Mapping[str, Any]) -> str:
    request = exchange.get("request")
    response = exchange.get("response")
    request = request if isinstance(request, Mapping) else {}
    response = response if isinstance(response, Mapping) else {}
    status = response.get("status")
    stream = response.get("stream")
    return (
        '<div class="pair"><div class="req"><h4>Request</h4>'
        f'<div class="line"><b>{text(request.get("method", ""))}</b> '
        f'<span class="url">{string_html(str(request.get("url", "")))}</span></div>'
        f"{_headers(request.get('headers'))}{_body(request)}</div>"
        '<div class="res"><h4>Response</h4>'
        f'<div class="line">{status_badge(status if isinstance(status, int) else None)}</div>'
        f"{_headers(response.get('headers'))}"
        f"{_body(response) if stream is None else _stream(stream, response.get('body'))}"
        f"{'' if stream is None or 'body' in response else _body(response)}</div></div>"
    )


def _column_names(response: Mapping[str, Any], rows: list[Any]) -> list[str]:
    names: list[str] = []
    columns = response.get("columns")
    for column in columns if isinstance(columns, list) else []:
        name = column[0] if isinstance(column, list) and column else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    for row in rows:
        if isinstance(row, Mapping):
            names.extend(str(k) for k in row if str(k) not in names)
    return names


def _rows(response: Mapping[str, Any]) -> str:
    rows = response.get("rows")
    rows = rows if isinstance(rows, list) else []
    count = response.get("rowCount")
    head = (
        f'<div class="line"><b>{text(response.get("command") or "")}</b> '
        f'<span class="muted">rowCount {text(count)}</span></div>'
    )
    if not rows:
        return head
    names = _column_names(response, rows)
    header = "".join(f"<th>{text(name)}</th>" for name in names)
    body = []
    for row in rows:
        if isinstance(row, Mapping):
            cells = "".join(f"<td>{_cell(row.get(name))}</td>" for name in names)
        else:
            cells = f'<td colspan="{max(1, len(names))}">{_cell(row)}</td>'
        body.append(f"<tr>{cells}</tr>")
    more = (
        '<div class="trunc">more than 64 rows: only the first 64 were recorded</div>'
        if response.get("truncated") is True
        else ""
    )
    return (
        f'{head}<div class="scroll"><table class="rows"><thead><tr>{header}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>{more}"
    )


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return string_html(value)
    if isinstance(value, Mapping) and ("$pg" in value or is_placeholder(value)):
        return value_html(value)
    if isinstance(value, (Mapping, list)):
        return f'<pre class="cell">{value_html(value)}</pre>'
    return value_html(value)


def _sql(exchange: Mapping[str, Any]) -> str:
    request = exchange.get("request")
    response = exchange.get("response")
    request = request if isinstance(request, Mapping) else {}
    response = response if isinstance(response, Mapping) else {}
    values = (
        f'<div class="label">parameters</div>{pre(value_html(request["values"]))}'
        if "values" in request
        else ""
    )
    error = response.get("error")
    if isinstance(error, Mapping):
        answer = (
            '<div class="line"><span class="status s5">error</span> '
            f"<code>{text(error.get('code') or '')}</code></div>"
            f"{pre(string_html(str(error.get('message', ''))), 'code err')}"
        )
    else:
        answer = _rows(response)
    return (
        '<div class="pair"><div class="req"><h4>Statement</h4>'
        f"{pre(string_html(str(request.get('text', ''))), 'code sql')}{values}</div>"
        f'<div class="res"><h4>Result</h4>{answer}</div></div>'
    )


def _invoke(exchange: Mapping[str, Any]) -> str:
    request = exchange.get("request")
    response = exchange.get("response")
    return (
        '<div class="pair"><div class="req"><h4>Call</h4>'
        f"{pre(value_html(request))}</div>"
        f'<div class="res"><h4>Outcome</h4>{pre(value_html(response))}</div></div>'
    )


def _effect(index: int, event: Mapping[str, Any]) -> str:
    value = event.get("value")
    raw = (
        value.get("value")
        if isinstance(value, Mapping) and value.get("representation") == "replayable"
        else None
    )
    subject = str(event.get("subject", ""))
    if not isinstance(raw, Mapping) or not isinstance(raw.get("exchange"), Mapping):
        shape = value.get("shape") if isinstance(value, Mapping) else None
        kind = event.get("effect") or event.get("operation") or event.get("kind")
        detail = pre(value_html(shape)) if shape is not None else ""
        return (
            f'<article class="exchange structural" id="x{index}"><h3><span class="n">#{index}'
            f'</span> {text(kind)} <span class="subject">{text(subject)}</span>'
            ' <span class="pill">not replayable: recorded as a shape only</span></h3>'
            f"{detail}</article>"
        )
    exchange = raw["exchange"]
    protocol = str(exchange.get("protocol", ""))
    if protocol == "http":
        inner = _http(exchange)
    elif protocol in ("pg", "db"):
        inner = _sql(exchange)
    elif protocol == "invoke":
        inner = _invoke(exchange)
    else:
        inner = pre(value_html(exchange))
    return (
        f'<article class="exchange p-{text(protocol)}" id="x{index}">'
        f'<h3><span class="n">#{index}</span> <span class="proto">{text(protocol)}</span> '
        f'{text(raw.get("effect", ""))} <span class="subject">{text(subject)}</span> '
        f'<code class="key">{string_html(str(raw.get("key", "")))}</code></h3>{inner}</article>'
    )


def _input(operation: str, value: Any) -> str:
    if not isinstance(value, Mapping):
        return pre(value_html(value)) if value is not None else '<p class="muted">no input</p>'
    query = value.get("query")
    parts = [f'<div class="line"><b>{text(operation)}</b></div>']
    if isinstance(query, Mapping) and query:
        parts.append(f'<div class="label">query</div>{pre(value_html(query))}')
    parts.append(_headers(value.get("headers")))
    parts.append(_body(value))
    others = {k: v for k, v in value.items() if k not in ("query", "headers", "body")}
    if others:
        parts.append(pre(value_html(others)))
    return "".join(parts)


def _returned(returned: Mapping[str, Any] | None) -> str:
    if returned is None:
        return '<p class="muted">no return recorded</p>'
    status = returned.get("status")
    pairs = [
        ("status", status_badge(status if isinstance(status, int) else None)),
        ("success", value_html(returned.get("success"))),
        ("effectsComplete", value_html(returned.get("effectsComplete"))),
    ]
    output = returned.get("output")
    return (
        f'{_dl(pairs)}<div class="label">output</div>'
        f"{pre(body_html(output)) if output is not None else '<p class=muted>null</p>'}"
    )


def _completeness(view: BatchView) -> str:
    items = []
    partial = False
    for capability in view.capabilities:
        state = str(capability.get("completeness", ""))
        partial = partial or state != "complete"
        detail = capability.get("detail")
        items.append(
            f'<li class="cap c-{text(state)}"><b>{text(capability.get("capability", ""))}</b> '
            f'<span class="pill">{text(state)}</span>'
            + (f' <span class="detail">{text(detail)}</span>' if detail else "")
            + "</li>"
        )
    complete = view.returned.get("effectsComplete") if view.returned else None
    verdict = (
        '<p class="partial"><b>Partial capture.</b> Some of what the operation did was not '
        "recorded (see the capabilities marked partial): a replay may diverge where the "
        "missing parts are needed.</p>"
        if partial or complete is False
        else '<p class="complete">Complete: every effect the service observed was recorded '
        "with its exchange.</p>"
    )
    return f'{verdict}<ul class="caps">{"".join(items)}</ul>'


def _attribute(name: str, value: Any) -> str:
    shown = text(value) if isinstance(value, str) else value_html(value)
    if name == "observedAtMs" and isinstance(value, int) and not isinstance(value, bool):
        moment = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(value // 1000))
        shown += f' <span class="muted">({moment}.{value % 1000:03d}Z)</span>'
    return shown


def occurrence_html(
    occurrence: Occurrence,
    batch: Mapping[str, Any] | None,
    *,
    base_url: str,
    exec_command: str | None,
    capsule: Mapping[str, Any] | None = None,
    page: int = 1,
    kinds: Sequence[FailureKind] = (),
    selected_kind: str | None = None,
) -> str:
    """The occurrence page's main content.

    ``capsule`` is the whole capsule of a heavy operation (the artifact its batch names): the
    exchanges are then listed from it, every one of them. ``page`` is the page of exchanges.
    ``kinds`` are the occurrence's exception kinds; ``selected_kind`` the kind asked for,
    whose latest capture ``batch`` is.
    """
    data = occurrence.to_json()
    quoted = urllib.parse.quote(occurrence.id, safe="")
    seen = f"{occurrence.count} ({occurrence.batch_count} captured"
    seen += f", {occurrence.trace_count} span(s) only)" if occurrence.trace_count else ")"
    meta = [
        ("signature", f"<code>{text(occurrence.signature)}</code>"),
        ("failure", f"<code>{text(occurrence.fingerprint)}</code>"),
        ("oracle", text(occurrence.oracle)),
        ("project", text(occurrence.project_id)),
        ("seen", text(seen)),
        ("first seen", text(data["firstSeen"])),
        ("last seen", text(data["lastSeen"])),
        ("build", text(occurrence.build or "none")),
        ("commit", short_commit(occurrence.commit)),
    ]
    head = (
        '<nav class="crumbs"><a href="/">Occurrences</a> / '
        f"<code>{text(occurrence.id)}</code></nav>"
        f'<h1>{status_badge(occurrence.status)} <span class="op">'
        f"{text(occurrence.operation)}</span></h1>"
        f'<p class="summary">{text(occurrence.summary)}</p>{_dl(meta)}'
    )
    if batch is None:
        return head + (
            '<section id="replay"><h2>No capture</h2><p>This failure was only seen as an '
            "OpenTelemetry span: it carries no exchanges, so there is no capsule to replay. "
            "Install reproit-otel in the service to capture the next one.</p></section>"
        )
    view = BatchView.read(batch)
    commands, stand_in = replay_commands(occurrence.id, base_url, exec_command)
    hint = (
        '<p class="muted">Replace the <code>--exec</code> command with the one that starts '
        "the service listening on <code>$PORT</code>. <code>pull</code> reads the key from "
        "<code>$REPROIT_API_KEY</code>.</p>"
        if stand_in
        else '<p class="muted"><code>pull</code> reads the key from '
        "<code>$REPROIT_API_KEY</code>.</p>"
    )
    replay = (
        '<section id="replay"><h2>Replay it</h2>'
        '<div class="command"><pre id="replay-command">'
        f"{text(commands)}</pre>"
        '<button type="button" class="copy" data-copy="replay-command">Copy</button></div>'
        f'{hint}<p><a class="download" id="capsule-link" href="/occurrences/{text(quoted)}'
        f'/capsule" download="{text(occurrence.id)}.capsule.json">Download the capsule</a>'
        f' <span class="muted">latest capture {text(view.batch_id)}, {text(view.observed_at)}'
        f"{', ' + text(view.emitter) if view.emitter else ''}</span></p>"
        "<p>Once it is fixed, keep it fixed: a pytest test, to commit with the fix, that fails "
        "if the failure comes back.</p>"
        '<div class="command"><pre id="regression-command">'
        f"{text(regression_command(occurrence.id, exec_command))}</pre>"
        '<button type="button" class="copy" data-copy="regression-command">Copy</button></div>'
        "</section>"
    )
    effects = view.effects if capsule is None else capsule_effects(capsule)
    exchanges = exchanges_section(effects, _effect, page=page, whole=capsule is not None)
    envelope = (
        _dl([(str(k), _attribute(k, v)) for k, v in view.envelope.items()], "meta envelope")
        if view.envelope
        else '<p class="muted">no determinism envelope recorded</p>'
    )
    error = error_of_output(view.returned.get("output")) if view.returned else None
    shown_kind = exception_kind(error) if error is not None else None
    return (
        head
        + exception_section(view.returned)
        + kinds_section(occurrence.id, kinds, selected_kind, shown_kind)
        + replay
        + timeline_section(effects, view.returned)
        + f'<section id="completeness"><h2>Completeness</h2>{_completeness(view)}</section>'
        + f'<section id="input"><h2>Input</h2>{_input(occurrence.operation, view.input)}'
        "</section>"
        + exchanges
        + f'<section id="return"><h2>Return</h2>{_returned(view.returned)}</section>'
        + f'<section id="envelope"><h2>Determinism envelope</h2>{envelope}</section>'
    )
