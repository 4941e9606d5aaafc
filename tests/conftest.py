"""Session-wide test setup: strict internal guards and the PostgreSQL server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Defects inside reproit hooks must fail the tests instead of being swallowed.
os.environ.setdefault("REPROIT_STRICT_INTERNAL", "1")


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A libpq DSN of a running PostgreSQL server for this test session."""
    dsn = os.environ.get("REPROIT_TEST_PG_DSN")
    if dsn:
        yield dsn
        return
    from tests.pgserver import ThrowawayPostgres

    server = ThrowawayPostgres()
    server.start()
    try:
        yield server.dsn
    finally:
        server.stop()
