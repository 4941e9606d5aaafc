"""What the three request-fidelity apps share: each view reads the request as the framework
hands it over and fails in a way that depends on what it read.

* ``read_body(case, data)``: the bytes the application read, answered as their SHA-256 and
  length with status 500 (after one query, so the operation has a dependency to replay);
* ``greet(language, tenant)``: a French request of the ``acme`` tenant takes the broken branch
  (500); any other answers 200;
* ``sign_up(payload)``: hashes the password (``str.encode``), checks the e-mail and inserts the
  account; the e-mail is taken, so PostgreSQL refuses it (500);
* ``served_at(host, port)``: the site the request was received on, looked up by the server's
  host and port as the framework reports them (as Wagtail finds its ``Site``), answered with
  status 500;
* ``items(key)``: an API key of the right shape is looked up in ``api_keys``, then forwarded to
  the upstream in ``X-Api-Key``; the owner's items are missing (500). A key of another shape
  answers 401.

``prepare(dsn)`` creates the tables with the planted key and the taken e-mail.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

import psycopg2
import requests

PLANTED_KEY = "Zk9+q/Wm=Rt7xYb2Lp4Nc8Vd1Hs6Jg3Ff0Qa5"
"""The API key production sends; the capture must never carry it."""
TAKEN_EMAIL = "ada.lovelace@analytical.example"
PLANTED_PASSWORD = "S3cret pässwörd/+1"
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
_KEY_SHAPE = re.compile(r"[A-Za-z0-9+/=]{32,64}")


def _connect() -> Any:
    return psycopg2.connect(os.environ["DATABASE_URL"])


def prepare(dsn: str) -> None:
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS api_keys (api_key text PRIMARY KEY, owner text);"
            "CREATE TABLE IF NOT EXISTS accounts (email text UNIQUE, password_hash text, "
            "name text)"
        )
        cursor.execute("INSERT INTO api_keys VALUES (%s, %s)", (PLANTED_KEY, "ada"))
        cursor.execute("INSERT INTO accounts VALUES (%s, %s, %s)", (TAKEN_EMAIL, "x", "Ada"))


def read_body(case: str, data: bytes) -> tuple[int, dict[str, Any]]:
    with _connect() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM api_keys WHERE owner = %s", (case,))
        cursor.fetchone()
    return 500, {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


def served_at(host: object, port: object) -> tuple[int, dict[str, Any]]:
    site = f"{host}:{port}"
    with _connect() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM api_keys WHERE owner = %s", (site,))
        cursor.fetchone()
    return 500, {"site": site}


def greet(language: str | None, tenant: str | None) -> tuple[int, dict[str, Any]]:
    with _connect() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM accounts")
        count = cursor.fetchone()[0]
    if (language or "").startswith("fr") and tenant == "acme":
        raise RuntimeError(f"the French acme greeting broke after {count} accounts")
    return 200, {"hello": "world", "accounts": count}


def set_password(password: str) -> str:
    return hashlib.sha256(password.encode("utf-8")).hexdigest()


def sign_up(payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    hashed = set_password(payload["password"])
    email = payload["email"]
    if "@" not in email:
        return 400, {"error": "not an e-mail address"}
    with _connect() as connection, connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO accounts (email, password_hash, name) VALUES (%s, %s, %s)",
            (email, hashed, payload.get("name")),
        )
    return 201, {"created": email}


def items(key: str | None) -> tuple[int, dict[str, Any]]:
    if key is None or _KEY_SHAPE.fullmatch(key) is None:
        return 401, {"error": "no valid API key"}
    with _connect() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT owner FROM api_keys WHERE api_key = %s", (key,))
        row = cursor.fetchone()
    if row is None:
        return 403, {"error": "unknown API key"}
    rate = requests.get(f"{UPSTREAM}/json", headers={"X-Api-Key": key}, timeout=5).json()
    shelf: dict[str, list[str]] = {}
    return 200, {"owner": row[0], "rate": rate["rate"], "items": shelf[row[0]]}
