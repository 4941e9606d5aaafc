"""A Flask articles API whose one route fails in three different ways (no reproit-otel code).

Run under ``opentelemetry-instrument`` as ``python articles_app.py PORT``; ``UPSTREAM`` is the
base URL of the upstream it asks for the author's profile. ``GET /`` answers ``ok``.
``POST /api/articles`` reads the profile from the upstream, then, depending on the JSON body
it was sent, fails with one of three exceptions raised in three places, the way one endpoint
of a real application fails for unrelated reasons:

* ``{"title": ...}`` without ``author``: ``KeyError`` in ``parse_article``;
* ``{"author": ..., "tags": null}``: ``TypeError`` in ``slug_for`` (iterating ``None``);
* ``{"author": ..., "tags": [...], "title": ""}``: ``ValueError`` in ``save_article``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import requests
from flask import Flask, jsonify, request
from werkzeug.serving import make_server

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")


def parse_article(payload: dict[str, Any]) -> dict[str, Any]:
    return {"author": payload["author"], "title": payload.get("title"), "tags": payload["tags"]}


def slug_for(article: dict[str, Any]) -> str:
    return "-".join(tag.lower() for tag in article["tags"])


def save_article(article: dict[str, Any], slug: str) -> dict[str, Any]:
    if not article["title"]:
        raise ValueError("an article needs a title")
    return {"slug": slug, **article}


@app.get("/")
def health() -> tuple[str, int]:
    return "ok", 200


@app.post("/api/articles")
def create_article() -> Any:
    profile = requests.get(f"{UPSTREAM}/json", timeout=5).json()
    article = parse_article(request.get_json(force=True))
    saved = save_article(article, slug_for(article))
    return jsonify({"article": saved, "profile": profile}), 201


if __name__ == "__main__":
    server = make_server("127.0.0.1", int(sys.argv[1]), app, threaded=True)
    server.serve_forever()
