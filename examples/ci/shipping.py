"""Code under test: pick the cheapest shipping quote from the quotes service.

``cheapest_quote`` asks ``GET <base>/quotes?weight=<kg>`` for a list of
``{"carrier", "cents"}`` quotes. Its bug: it takes the first quote, as if the service sorted
them by price. The service promises no order, so a test of it passes or fails depending on the
order of the answer: a flaky test whose cause is in the upstream's answer.
"""

from __future__ import annotations

from typing import Any

import requests


def quotes(base_url: str, weight_kg: int) -> list[dict[str, Any]]:
    """Every carrier's quote for a parcel of ``weight_kg``."""
    answer = requests.get(f"{base_url}/quotes", params={"weight": weight_kg}, timeout=5)
    answer.raise_for_status()
    listed: list[dict[str, Any]] = answer.json()["quotes"]
    return listed


def cheapest_quote(base_url: str, weight_kg: int) -> dict[str, Any]:
    """The cheapest quote. The bug: the first one is not always the cheapest."""
    return quotes(base_url, weight_kg)[0]


def price_label(cents: int) -> str:
    """``1234`` -> ``"12.34 EUR"``."""
    return f"{cents // 100}.{cents % 100:02d} EUR"
