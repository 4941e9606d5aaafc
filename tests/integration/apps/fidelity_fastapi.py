"""The request-fidelity app on FastAPI (``fidelity_logic.py``), for uvicorn.

Served as ``uvicorn fidelity_fastapi:app``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fidelity_logic import read_body, served_at

app = FastAPI()


@app.get("/")
def health() -> dict[str, str]:
    return {"ok": "yes"}


@app.post("/body/{case}")
async def body(case: str, request: Request) -> Any:
    status, answer = read_body(case, await request.body())
    return JSONResponse(answer, status_code=status)


@app.get("/server")
def server(request: Request) -> Any:
    host, port = request.scope["server"]
    status, answer = served_at(host, port)
    return JSONResponse(answer, status_code=status)
