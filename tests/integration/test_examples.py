"""The example shops (Flask, FastAPI, FastAPI async) against their real upstreams and a real
PostgreSQL.

No reproit-otel capture here: these tests pin what the examples do, so the demo and the
READMEs can rely on it (a normal order answers 200, the gift card answers 500 after storing
the order, the tax service's refusal 422, an unknown SKU 404).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
SHOPS = {
    "flask": "examples/shop/app.py",
    "fastapi": "examples/shop_fastapi/app.py",
    "fastapi-async": "examples/fastapi_async/app.py",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Upstreams:
    """``examples/shop/upstreams.py all --port 0`` in a subprocess."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", "examples/shop/upstreams.py", "all", "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.addresses: dict[str, str] = {}
        for _ in range(3):
            name, _, address = self.process.stdout.readline().strip().partition(" listening on ")
            self.addresses[name] = address

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(10)


@pytest.fixture(scope="module")
def upstreams() -> Iterator[Upstreams]:
    served = Upstreams()
    yield served
    assert served.stop() == 0


def _shop_env(upstreams: Upstreams, dsn: str, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "PORT": str(port),
        "SHOP_DATABASE_URL": dsn,
        "PRICING_URL": upstreams.addresses["pricing"],
        "ASSISTANT_URL": upstreams.addresses["assistant"],
        "TAX_ADDRESS": upstreams.addresses["tax"],
    }


@pytest.fixture(params=sorted(SHOPS))
def shop(request: Any, upstreams: Upstreams, postgres_dsn: str) -> Iterator[str]:
    port = _free_port()
    env = _shop_env(upstreams, postgres_dsn, port)
    script = SHOPS[request.param]
    subprocess.run([sys.executable, script, "--init-db"], cwd=ROOT, env=env, check=True)
    process = subprocess.Popen(
        [sys.executable, "-u", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if requests.get(base, timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.05)
        yield base
    finally:
        process.terminate()
        process.wait(10)


def _orders_of(dsn: str, sku: str) -> int:
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM shop_orders WHERE sku = %s", (sku,))
        (count,) = cursor.fetchone()
    connection.close()
    return int(count)


def test_the_health_check_needs_no_dependency(shop: str) -> None:
    answer = requests.get(shop, timeout=5)
    assert (answer.status_code, answer.json()) == (200, {"service": "shop", "ok": True})


def test_a_normal_order_answers_200_and_is_stored(shop: str) -> None:
    answer = requests.post(
        f"{shop}/orders", json={"sku": "tea", "quantity": 3, "country": "FR"}, timeout=10
    )
    body = answer.json()
    order_id = body.pop("order")
    assert answer.status_code == 200
    assert isinstance(order_id, int)
    assert body == {
        "sku": "tea",
        "quantity": 3,
        "country": "FR",
        "total_cents": 2295,
        "discount": "-10%",
        "tax_cents": 459,
        "note": "Pack 3 x tea with care",
    }
    stored = requests.get(f"{shop}/orders/{order_id}", timeout=5)
    assert stored.json() == {
        "order": order_id,
        "sku": "tea",
        "quantity": 3,
        "country": "FR",
        "total_cents": 2295,
        "tax_cents": 459,
        "note": "Pack 3 x tea with care",
    }


def test_the_gift_card_is_stored_then_answers_500(shop: str, postgres_dsn: str) -> None:
    before = _orders_of(postgres_dsn, "gift-card")
    answer = requests.post(
        f"{shop}/orders", json={"sku": "gift-card", "quantity": 1, "country": "DE"}, timeout=10
    )
    assert answer.status_code == 500
    assert _orders_of(postgres_dsn, "gift-card") == before + 1


@pytest.mark.parametrize(
    ("order", "status", "body"),
    [
        ({"sku": "mug", "country": "XX"}, 422, {"error": "no tax rate for XX"}),
        ({"sku": "nope"}, 404, {"error": "unknown sku nope"}),
    ],
)
def test_refusals_answer_their_status(
    shop: str, order: dict[str, Any], status: int, body: dict[str, str]
) -> None:
    answer = requests.post(f"{shop}/orders", json=order, timeout=10)
    assert (answer.status_code, answer.json()) == (status, body)


def test_the_upstreams_answer_as_documented(upstreams: Upstreams) -> None:
    pricing = requests.get(f"{upstreams.addresses['pricing']}/prices/gift-card", timeout=5)
    assert (pricing.status_code, pricing.json()) == (
        200,
        {"sku": "gift-card", "unit_cents": 2500, "discount_percent": None},
    )
    with requests.post(
        f"{upstreams.addresses['assistant']}/v1/notes",
        json={"sku": "mug", "quantity": 2},
        stream=True,
        timeout=5,
    ) as notes:
        assert notes.headers["content-type"] == "text/event-stream"
        lines = [line for line in notes.iter_lines(decode_unicode=True) if line]
    words = ["Pack", "2", "x", "mug", "with", "care"]
    assert lines == [*(f"data: {json.dumps({'text': word})}" for word in words), "data: [DONE]"]
    host, _, port = upstreams.addresses["tax"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(b"RATE DE\nRATE XX\nHELLO\n")
        reader = connection.makefile("rb")
        answers = [reader.readline() for _ in range(3)]
    assert answers == [b"OK 0.19\n", b"ERR no tax rate for XX\n", b"ERR expected: RATE <country>\n"]
