"""The exceptions reproit-otel raises.

::

    ReproitError                 base of everything below
    ├── TraceError               a trace rejected a call (.code: InvalidOperation,
    │                            AlreadyFinished, TooManyEvents, HeaderTooLarge)
    ├── CapsuleError             a capsule or capture batch file is unusable (not JSON,
    │                            wrong format, unsupported version, no events)
    ├── DivergedError            replay met a call the recording does not hold
    │   └── MissingFixtureError  an invoke boundary call has no recorded outcome
    ├── ToolCallError            a recorded invoke-boundary failure, raised again in replay
    ├── RecordedPgError          a recorded database error, raised again in replay (.code)
    ├── ConfigurationError       a setting is present but unusable
    └── RegressionFailed         a regression test's failure came back, or its recording is
                                 stale (also an AssertionError, so test runners report it)

Every class says when it is raised; messages say what happened, what was expected and
what to do next.
"""

from __future__ import annotations

from typing import Any, Literal

TraceErrorCode = Literal["InvalidOperation", "AlreadyFinished", "TooManyEvents", "HeaderTooLarge"]


class ReproitError(Exception):
    """Base class of every exception reproit-otel raises on purpose."""


class TraceError(ReproitError):
    """Raised by :class:`~reproit_otel.BackendTrace` when it refuses a call.

    ``code`` is one of ``InvalidOperation``, ``AlreadyFinished``, ``TooManyEvents`` or
    ``HeaderTooLarge`` (PROTOCOL section 2.4).
    """

    def __init__(self, code: TraceErrorCode) -> None:
        super().__init__(f"reproit trace rejected input: {code}")
        self.code: TraceErrorCode = code


class CapsuleError(ReproitError):
    """Raised when a capsule (``reproit-backend-capture``) or a capture batch cannot be used."""


class DivergedError(ReproitError):
    """Raised in replay when a call has no matching recorded exchange.

    ``line`` holds the exact ``REPROIT:DIVERGENCE`` line that was written to stderr, when one
    was written.
    """

    def __init__(self, message: str, *, line: str | None = None) -> None:
        super().__init__(message)
        self.line = line


class MissingFixtureError(DivergedError):
    """Raised in replay when an invoke boundary call has no recorded outcome for its input."""


class ToolCallError(ReproitError):
    """A dependency call failed with an HTTP-style status.

    Raise it from an invoke boundary to have the failure recorded; replay raises it again with
    the recorded ``code``, ``status``, ``message`` and the cause's message and status.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        cause_message: str | None = None,
        cause_status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.cause_message = cause_message
        self.cause_status = cause_status


class RecordedPgError(ReproitError):
    """Raised in replay when the recorded ``pg`` call failed: the capture's error, again.

    ``message`` is the recorded message (``recorded pg error`` when none was kept) and
    ``code`` the recorded SQLSTATE (``pgcode``, e.g. ``"23505"``), or ``None`` when the
    recording has none.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ConfigurationError(ReproitError):
    """Raised when a ``REPROIT_*`` setting is present but cannot be used."""


class RegressionFailed(ReproitError, AssertionError):
    """Raised by :func:`reproit_otel.testing.assert_fixed` when the test must fail.

    ``stale`` is false when the recorded failure came back (*reproduced*), true when the
    recording no longer matches the code (*diverged* or *inconclusive*); ``result`` is the
    :class:`~reproit_otel.check.judgement.CheckResult` of the replay.
    """

    def __init__(self, message: str, *, result: Any, stale: bool) -> None:
        super().__init__(message)
        self.result = result
        self.stale = stale
