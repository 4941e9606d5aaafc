"""The async service ``benchmarks/capture_async.py`` measures: a FastAPI app called as ASGI.

``GET /order?id=N`` makes one ``httpx.AsyncClient`` call to the upstream (``BENCH_UPSTREAM``,
one pooled keep-alive client) and one query through a psycopg 3 ``AsyncConnection``
(``BENCH_PG_DSN``, one connection, opened by the first request), and answers JSON: 200, or
500 with ``fail=1``. The async twin of ``benchmarks/_service.py``.

``BENCH_SHAPE`` chooses what is installed, each adding to the previous one:

``bare``         FastAPI alone;
``otel``         OpenTelemetry SDK: FastAPI, httpx and psycopg instrumentations, a
                 ``BatchSpanProcessor`` with an exporter that drops every span;
``reproit``      plus ``reproit_otel.bootstrap.install()``, configured by the ``REPROIT_*``
                 environment (no ``REPROIT_ENDPOINT``: capture off; with it: capture on).
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import psycopg
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from benchmarks._common import dropping_provider

SHAPE = os.environ.get("BENCH_SHAPE", "bare")
UPSTREAM = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:9")
DSN = os.environ.get("BENCH_PG_DSN", "")

app = FastAPI()
_state: dict[str, Any] = {}
processor: Any = None
"""reproit-otel's span processor in the ``reproit`` shape (its stats), else None."""


async def _connection() -> psycopg.AsyncConnection[Any]:
    connection: psycopg.AsyncConnection[Any] | None = _state.get("connection")
    if connection is None or connection.closed:
        connection = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
        _state["connection"] = connection
    return connection


def _client() -> httpx.AsyncClient:
    client: httpx.AsyncClient | None = _state.get("client")
    if client is None:
        client = _state["client"] = httpx.AsyncClient(timeout=5)
    return client


@app.get("/order")
async def order(id: int = 1, fail: int = 0) -> Any:
    rate = (await _client().get(f"{UPSTREAM}/rate")).json()
    async with (await _connection()).cursor() as cursor:
        await cursor.execute("SELECT id, name, price FROM bench_items WHERE id = %s", (id,))
        row = await cursor.fetchone()
    assert row is not None
    body = {"id": row[0], "name": row[1], "price": row[2] * rate["rate"]}
    if fail == 1:
        return JSONResponse({"error": "pricing failed", **body}, status_code=500)
    return body


async def close() -> None:
    """Close the client and the connection (at the end of a run)."""
    client = _state.pop("client", None)
    if client is not None:
        await client.aclose()
    connection = _state.pop("connection", None)
    if connection is not None:
        await connection.close()


def _install_opentelemetry() -> Any:
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    provider = dropping_provider()
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    return provider


if SHAPE in ("otel", "reproit"):
    _provider = _install_opentelemetry()
    if SHAPE == "reproit":
        import reproit_otel.bootstrap

        processor = reproit_otel.bootstrap.install(_provider)
        if processor is None:
            raise SystemExit("reproit-otel did not install; check the REPROIT_* environment")
elif SHAPE != "bare":
    raise SystemExit(f"unknown BENCH_SHAPE {SHAPE!r}: expected bare, otel or reproit")
