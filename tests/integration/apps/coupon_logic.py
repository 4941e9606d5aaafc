"""The coupon logic the three coupon apps share, with a planted bug in a helper function.

``quote(upstream, code)`` asks the pricing upstream for the rate, then applies the coupon; it
prints what it quotes (``print``, unflushed: many applications log to standard output).
The planted bug: :func:`apply_coupon` divides by a zero discount and re-raises the failure
as a ``ValueError`` whose message holds a secret (:data:`PLANTED_SECRET`, configured as a
secret value) and a URL with a secret query parameter. Variants, by environment:

* ``COUPON_FIXED=1``: the bug is fixed, the quote is returned;
* ``COUPON_OTHER=1``: another helper fails first, with a ``KeyError``;
* ``COUPON_CURRENCY=USD``: the rate is asked for in that currency (a call the capture lacks).
"""

from __future__ import annotations

import os
from typing import Any

import requests

PLANTED_SECRET = "sk_live_planted_4242"
"""A secret value the capture must never carry (``REPROIT_SECRET_VALUES``)."""


def quote(upstream: str, code: str) -> dict[str, Any]:
    currency = os.environ.get("COUPON_CURRENCY")
    query = f"?currency={currency}" if currency else ""
    rate = requests.get(f"{upstream}/json{query}", timeout=5).json()["rate"]
    print(f"quoting coupon {code} at rate {rate}")
    if os.environ.get("COUPON_OTHER") == "1":
        return lookup_discount(code)
    if os.environ.get("COUPON_FIXED") == "1":
        return {"code": code, "price": rate * 100}
    return apply_coupon(upstream, rate, code)


def apply_coupon(upstream: str, rate: float, code: str) -> dict[str, Any]:
    discounts: dict[str, int] = {}
    try:
        return {"code": code, "price": rate * 100 / discounts.get(code, 0)}  # BUG: no discount
    except ZeroDivisionError as error:
        raise ValueError(
            f"coupon {code} failed for account {PLANTED_SECRET} "
            f"(priced by {upstream}/json?api_key=hunter2hunter2&currency=EUR)"
        ) from error


def lookup_discount(code: str) -> dict[str, Any]:
    return {"code": code, "discount": {}[code]}  # OTHER BUG
