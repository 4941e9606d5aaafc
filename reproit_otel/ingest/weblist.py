"""The occurrence list of the ingest's web page (``GET /``).

One row per occurrence, that is per distinct failure of an operation of a project (its
signature and fingerprint: the exception's type and innermost application frame, else the
status): status, operation, the failure summary and signature, how many times it was seen
(capture batches and OpenTelemetry spans), first and last seen (UTC), the service build and
commit last seen. Most recently seen first, :data:`PAGE_SIZE` rows a page.

Query parameters: ``operation`` (exact), ``status`` (an integer), ``project``, ``exception``
(an exception kind: type and innermost application frame, ``failure_kinds.py``) and ``page``
(1-based). The *Exception* column lists each occurrence's exception kinds. Each filter is an
indexed lookup in the store and a page is ``LIMIT``/``OFFSET``
over the ``last_seen_ms`` index, so the page stays fast with many thousands of occurrences.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from reproit_otel.ingest.numbers import ascii_int
from reproit_otel.ingest.store import Occurrence, OccurrenceFacets, OccurrencePage
from reproit_otel.ingest.webexchanges import page_number
from reproit_otel.ingest.webhtml import text

__all__ = ["PAGE_SIZE", "ListQuery", "list_html"]

PAGE_SIZE = 50


@dataclass(frozen=True)
class ListQuery:
    """The filters and page of one list request."""

    operation: str | None = None
    status: int | None = None
    project: str | None = None
    exception: str | None = None
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> ListQuery:
        """Read the query string.

        Raises :class:`ValueError` naming the parameter when ``status`` or ``page`` is given
        but is not ASCII digits within its range (``status=²``, 5,000 digits).
        """
        status_text = (params.get("status") or "").strip()
        page_text = (params.get("page") or "").strip()
        status = ascii_int(status_text, high=65535)
        if status_text and status is None:
            raise ValueError("status must be ASCII digits from 0 to 65535")
        return cls(
            operation=params.get("operation") or None,
            status=status,
            project=params.get("project") or None,
            exception=params.get("exception") or None,
            page=page_number(page_text),
        )

    @property
    def offset(self) -> int:
        return (self.page - 1) * PAGE_SIZE

    def url(self, **changes: object) -> str:
        """This list's URL with some parameters changed (``None`` drops one)."""
        values: dict[str, object] = {
            "operation": self.operation,
            "status": self.status,
            "project": self.project,
            "exception": self.exception,
            "page": self.page if self.page > 1 else None,
        }
        values.update(changes)
        kept = {k: str(v) for k, v in values.items() if v is not None and v != ""}
        return "/" + ("?" + urllib.parse.urlencode(kept) if kept else "")


def status_badge(status: int | None) -> str:
    """The coloured status label."""
    if status is None:
        return '<span class="status s-none">no status</span>'
    family = "s5" if status >= 500 else "s4" if status >= 400 else "s2"
    return f'<span class="status {family}">{text(status)}</span>'


def short_commit(commit: str | None) -> str:
    if not commit:
        return '<span class="muted">none</span>'
    return f'<code title="{text(commit)}">{text(commit[:12])}</code>'


def _time(rfc3339: str) -> str:
    shown = rfc3339.replace("T", " ").removesuffix("Z")[:19]
    return f'<time datetime="{text(rfc3339)}">{text(shown)}</time>'


def _kind_filter(query: ListQuery, kinds: list[tuple[str, int]]) -> str:
    if not kinds and not query.exception:
        return ""
    choices = ['<option value="">any exception</option>']
    for kind, count in kinds:
        selected = " selected" if kind == query.exception else ""
        choices.append(f'<option value="{text(kind)}"{selected}>{text(kind)} ({count})</option>')
    if query.exception and all(query.exception != kind for kind, _ in kinds):
        choices.append(
            f'<option value="{text(query.exception)}" selected>{text(query.exception)} (0)</option>'
        )
    return (
        '<label>Exception <select name="exception" id="f-exception">'
        + "".join(choices)
        + "</select></label>"
    )


def _filters(
    query: ListQuery, facets: OccurrenceFacets, kinds: list[tuple[str, int]] | None = None
) -> str:
    options = "".join(
        f'<option value="{text(name)}">{text(count)} occurrence(s)</option>'
        for name, count in facets.operations
    )
    statuses = ['<option value="">any status</option>']
    for status, count in facets.statuses:
        if status is None:
            continue
        selected = " selected" if status == query.status else ""
        statuses.append(f'<option value="{status}"{selected}>{status} ({text(count)})</option>')
    if query.status is not None and all(query.status != s for s, _ in facets.statuses):
        statuses.append(f'<option value="{query.status}" selected>{query.status} (0)</option>')
    project = ""
    if len(facets.projects) > 1 or query.project:
        choices = ['<option value="">any project</option>']
        for name, count in facets.projects:
            selected = " selected" if name == query.project else ""
            choices.append(
                f'<option value="{text(name)}"{selected}>{text(name)} ({text(count)})</option>'
            )
        project = (
            '<label>Project <select name="project" id="f-project">'
            + "".join(choices)
            + "</select></label>"
        )
    return (
        '<form class="filters" method="get" action="/" role="search">'
        '<label>Operation <input type="search" name="operation" id="f-operation" '
        f'list="operations" value="{text(query.operation or "")}" '
        'placeholder="GET /orders/{id}" autocomplete="off"></label>'
        f'<datalist id="operations">{options}</datalist>'
        f'<label>Status <select name="status" id="f-status">{"".join(statuses)}</select></label>'
        f"{project}{_kind_filter(query, kinds or [])}"
        '<button type="submit" id="f-apply">Filter</button>'
        '<a class="clear" href="/">Clear</a></form>'
    )


def _kinds_cell(kinds: list[str]) -> str:
    if not kinds:
        return '<td class="exc"><span class="muted">none recorded</span></td>'
    items = "".join(
        f'<li><a href="{text(ListQuery(exception=kind).url())}"><code>{text(kind)}</code></a></li>'
        for kind in kinds[:3]
    )
    more = f'<li class="muted">+{len(kinds) - 3} more</li>' if len(kinds) > 3 else ""
    return f'<td class="exc"><ul class="kinds">{items}{more}</ul></td>'


def _row(item: Occurrence, kinds: list[str] | None = None) -> str:
    link = f"/occurrences/{urllib.parse.quote(item.id, safe='')}"
    data = item.to_json()
    seen = f"{text(item.count)}×"
    parts = []
    if item.batch_count:
        parts.append(f"{item.batch_count} captured")
    if item.trace_count:
        parts.append(f"{item.trace_count} span(s) only")
    capsule = (
        '<span class="pill ok" title="a capsule can be pulled and replayed">capsule</span>'
        if item.batch_count
        else '<span class="pill" title="seen over OTLP only: no exchanges">span only</span>'
    )
    return (
        f'<tr class="occ" data-id="{text(item.id)}">'
        f"<td>{status_badge(item.status)}</td>"
        f'<td class="what"><a class="op" href="{text(link)}">{text(item.operation)}</a>'
        f'<div class="summary">{text(item.summary)}</div>'
        f'<div class="sig"><code>{text(item.signature)}</code> {capsule}</div></td>'
        f"{_kinds_cell(kinds or [])}"
        f'<td class="num" title="{text(", ".join(parts))}">{seen}</td>'
        f"<td>{_time(data['firstSeen'])}</td><td>{_time(data['lastSeen'])}</td>"
        f"<td>{text(item.build) if item.build else '<span class=muted>none</span>'}</td>"
        f"<td>{short_commit(item.commit)}</td>"
        f"<td>{text(item.project_id)}</td></tr>"
    )


def _pager(query: ListQuery, page: OccurrencePage, *, top: bool) -> str:
    range_id = ' id="range"' if top else ""
    pages = max(1, -(-page.total // PAGE_SIZE))
    first = page.offset + 1
    last = page.offset + len(page.items)
    shown = f"{first}–{last}" if page.items else "none"
    links = []
    if query.page > 1:
        links.append(f'<a rel="prev" href="{text(query.url(page=query.page - 1))}">← Newer</a>')
    if last < page.total:
        links.append(f'<a rel="next" href="{text(query.url(page=query.page + 1))}">Older →</a>')
    return (
        f'<nav class="pager" aria-label="pages"><span{range_id}>{shown} of '
        f"{page.total} · page {query.page} of {pages}</span> {' '.join(links)}</nav>"
    )


def list_html(
    query: ListQuery,
    page: OccurrencePage,
    facets: OccurrenceFacets,
    kinds: dict[str, list[str]] | None = None,
    kind_facets: list[tuple[str, int]] | None = None,
) -> str:
    """The list page's main content (``kinds``: each listed occurrence's exception kinds;
    ``kind_facets``: every kind with its number of occurrences, for the filter)."""
    kinds = kinds or {}
    if page.items:
        rows = "".join(_row(item, kinds.get(item.id)) for item in page.items)
        table = (
            '<table class="occurrences"><thead><tr><th>Status</th><th>Failure</th>'
            "<th>Exception</th><th>Seen</th><th>First seen (UTC)</th><th>Last seen (UTC)</th>"
            "<th>Build</th>"
            f"<th>Commit</th><th>Project</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    elif (
        query.operation
        or query.status is not None
        or query.project
        or query.exception
        or query.page > 1
    ):
        table = '<p class="empty">No occurrence matches these filters.</p>'
    else:
        table = (
            '<p class="empty">No failure received yet. Point a service at this ingest '
            "(<code>REPROIT_ENDPOINT=&lt;this address&gt;/v1/capture-batches</code>) and its "
            "failing requests appear here.</p>"
        )
    return (
        "<h1>Occurrences <small>one per distinct failure, most recently seen first</small>"
        f"</h1>{_filters(query, facets, kind_facets)}{_pager(query, page, top=True)}{table}"
        f"{_pager(query, page, top=False) if page.items else ''}"
    )
