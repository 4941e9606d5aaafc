"""The exchange list of the occurrence page: every exchange, a page of them at a time.

A heavy operation's batch carries only the exchanges that fit its bound; the whole capsule is
the artifact the batch names (:mod:`reproit_otel.wire.artifacts`). The page then lists the
capsule's exchanges instead (:func:`capsule_effects` gives them the shape of batch events), so
it shows every exchange the operation made, :data:`EXCHANGES_PER_PAGE` at a time
(``?page=N``), numbered in recorded order across pages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reproit_otel.ingest.numbers import ascii_int
from reproit_otel.ingest.webhtml import text

__all__ = ["EXCHANGES_PER_PAGE", "capsule_effects", "exchanges_section", "page_number"]

EXCHANGES_PER_PAGE = 100


def capsule_effects(capsule: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The capsule's effect events as the batch events the page renders (replayable values)."""
    effects: list[dict[str, Any]] = []
    for event in capsule.get("events") or []:
        if isinstance(event, Mapping) and event.get("kind") == "effect":
            subject = event.get("resource") or event.get("event") or "backend-effect"
            effects.append(
                {
                    "kind": "dependency",
                    "subject": str(subject),
                    "value": {"representation": "replayable", "value": dict(event)},
                }
            )
    return effects


def page_number(raw: str | None) -> int:
    """The page asked for by ``?page=`` (1 when absent, empty or 0).

    Raises :class:`ValueError` when it is not ASCII digits up to 10**9 (``²``, 5,000 digits):
    the page answers 400 naming the parameter, never 500.
    """
    text = (raw or "").strip()
    number = ascii_int(text, high=10**9)
    if text and number is None:
        raise ValueError("page must be ASCII digits from 1 to 1000000000")
    return max(1, number or 1)


def exchanges_section(
    effects: Sequence[Mapping[str, Any]],
    render: Callable[[int, Mapping[str, Any]], str],
    *,
    page: int = 1,
    whole: bool = False,
) -> str:
    """The ``#exchanges`` section: one page of ``effects`` rendered by ``render(index, event)``.

    ``whole`` says the list comes from the capsule artifact (every exchange) rather than the
    batch.
    """
    total = len(effects)
    pages = max(1, -(-total // EXCHANGES_PER_PAGE))
    page = min(max(1, page), pages)
    start = (page - 1) * EXCHANGES_PER_PAGE
    shown = effects[start : start + EXCHANGES_PER_PAGE]
    items = "".join(render(start + offset, event) for offset, event in enumerate(shown, 1))
    source = ", all of them, from the capture's artifact" if whole else ""
    nav = ""
    if pages > 1:
        links = [
            f'<a href="?page={n}#exchanges"{" aria-current=page" if n == page else ""}>{n}</a>'
            for n in range(1, pages + 1)
        ]
        nav = (
            f'<nav class="pages">exchanges {start + 1} to {start + len(shown)} of {total}: '
            f"{' '.join(links)}</nav>"
        )
    return (
        f'<section id="exchanges"><h2>Exchanges <small>{text(str(total))}, in recorded order'
        f"{text(source)}</small></h2>{nav}{items or '<p class=muted>none</p>'}{nav}</section>"
    )
