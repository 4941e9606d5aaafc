"""The coupon app on FastAPI under uvicorn (``coupon_logic.py``); ``PORT``, ``UPSTREAM``."""

from __future__ import annotations

import os
from typing import Any

import uvicorn
from coupon_logic import quote
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

app = FastAPI()
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")


@app.get("/", response_class=PlainTextResponse)
def health() -> str:
    return "ok"


@app.get("/coupon")
def coupon(code: str = "") -> dict[str, Any]:
    return quote(UPSTREAM, code)  # VIEW


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
