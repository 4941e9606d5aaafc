"""Fixtures of the sample suite: the quotes service, started once for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from quotes_service import QuotesService


@pytest.fixture(scope="module")
def quotes_url() -> Iterator[str]:
    # Starting the server makes no HTTP call, so nothing of it is recorded into a test.
    service = QuotesService()
    yield service.base_url
    service.stop()
