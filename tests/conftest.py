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


# --- a summary line saying how many shared vector cases ran ----------------------------------

_vector_outcomes: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}


def _is_vector_case(value: object) -> bool:
    """A case read from tests/vectors: a dict with a name and an input or expectation."""
    return isinstance(value, dict) and "name" in value and ("input" in value or "expect" in value)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and not (report.when == "setup" and report.skipped):
        return
    if not getattr(report, "_reproit_vector", False):
        return
    outcome = "passed" if report.passed else "failed" if report.failed else "skipped"
    _vector_outcomes[outcome] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    report._reproit_vector = any(_is_vector_case(value) for value in params)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = sum(_vector_outcomes.values())
    if total:
        terminalreporter.write_line(
            f"shared vector cases executed: {total} "
            f"({_vector_outcomes['passed']} passed, {_vector_outcomes['failed']} failed, "
            f"{_vector_outcomes['skipped']} skipped)"
        )
