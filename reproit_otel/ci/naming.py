"""Names, trace contexts and failure text of CI traces (PROTOCOL section 8.2, decision D7).

Every test runs under the operation ``test:<suite>#<test>``. Each name is trimmed (JavaScript
``String.prototype.trim``) and cut to its first 120 code points, so the operation is at most
246 code points and always fits the 256 bound of an operation. The span id of such an
operation may still exceed 128 code points; :meth:`BackendTrace.begin` then shortens it as
decision D7 says (``<traceId>:sha256:<24 hex>``), so a long test name never fails a test. The
reference SDK counts the 120 in UTF-16 units; Python counts code points, which differs only
for names with characters outside the Basic Multilingual Plane.

The failure text recorded for a failing test (and reported by replay) is Python's equivalent
of the reference's ``String(err.message ?? err)``: ``str(exception)``, the text an exception
was raised with (``AssertionError`` from a rewritten ``assert`` gives pytest's ``assert 7 ==
8`` explanation), cut to 2048 code points. It must be the same text in the capture run and the
replay run for ``reproit-otel check`` to say *reproduced*: a message carrying a memory address
(``<Order object at 0x7f...>``) changes between runs and makes the verdict *inconclusive*.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from typing import Final

from reproit_otel.redaction.text import scrub_text
from reproit_otel.wire._js import code_point_cut, js_trim
from reproit_otel.wire.trace import TraceContext

__all__ = [
    "CI_ORACLE",
    "MAX_CI_ERROR",
    "MAX_CI_NAME",
    "TEST_TRIGGER_PREFIX",
    "bound_name",
    "ci_trace_context",
    "exception_text",
    "failure_text",
    "test_operation",
]

TEST_TRIGGER_PREFIX: Final = "test:"
"""Every CI operation starts with this; ``reproit-otel check`` routes on it."""
CI_ORACLE: Final = "backend-authored-invariant"
"""The oracle of every CI capsule: the test's own assertions."""
MAX_CI_NAME: Final = 120
"""Code points kept of a suite or test name (after trimming)."""
MAX_CI_ERROR: Final = 2048
"""Code points kept of a failure text."""

_trace_numbers = itertools.count(1)
_trace_numbers_lock = threading.Lock()


def bound_name(name: str) -> str:
    """A suite or test name as it enters the operation: trimmed, first 120 code points."""
    return code_point_cut(js_trim(name), MAX_CI_NAME)


def test_operation(suite: str, test: str) -> str:
    """``test:<suite>#<test>`` with both names bounded by :func:`bound_name`."""
    return f"{TEST_TRIGGER_PREFIX}{bound_name(suite)}#{bound_name(test)}"


test_operation.__test__ = False  # type: ignore[attr-defined]  # not a test for pytest


_MAX_SCRUBBED = 65536  # code points read of a failure text: scrubbed first, then cut


def failure_text(text: str, secrets: Iterable[str] = ()) -> str:
    """A failure text as recorded and reported: scrubbed (``scrub_text``, with ``secrets``),
    then its first 2048 code points (scrubbing first: a cut never halves a secret)."""
    return code_point_cut(scrub_text(text[:_MAX_SCRUBBED], secrets), MAX_CI_ERROR)


def exception_text(error: BaseException, secrets: Iterable[str] = ()) -> str:
    """``str(error)`` bounded by :func:`failure_text`; an unprintable error names its type."""
    try:
        text = str(error)
    except Exception:
        text = f"<unprintable {type(error).__name__}>"
    return failure_text(text, secrets)


def ci_trace_context(now_ms: int, build: str | None) -> TraceContext:
    """The context of the next CI trace: ``ci-<now_ms>-<n>``, counting traces from 1.

    ``build`` is the commit (``REPROIT_COMMIT`` or ``GITHUB_SHA`` when a token). The context
    carries the capture envelope (events get ``at`` and ``monoNs``) but no replay seed.
    """
    with _trace_numbers_lock:
        number = next(_trace_numbers)
    return TraceContext(
        trace_id=f"ci-{now_ms}-{number}",
        actor=None,
        action_index=0,
        build=build,
        config_contract=None,
        capture_envelope=True,
        replay_seed=None,
    )
