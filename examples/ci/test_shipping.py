"""A sample suite: two steady tests and one flaky test whose outcome depends on an upstream."""

from __future__ import annotations

from shipping import cheapest_quote, price_label, quotes


def test_price_label() -> None:
    assert [price_label(450), price_label(1205)] == ["4.50 EUR", "12.05 EUR"]


def test_every_carrier_quotes(quotes_url: str) -> None:
    carriers = sorted(quote["carrier"] for quote in quotes(quotes_url, 2))
    assert carriers == ["courier", "drone", "postal"]


def test_cheapest_quote(quotes_url: str) -> None:
    # Flaky: passes when the service happens to list the cheapest carrier first.
    cheapest = cheapest_quote(quotes_url, 2)
    assert (cheapest["carrier"], cheapest["cents"]) == ("postal", 450)
