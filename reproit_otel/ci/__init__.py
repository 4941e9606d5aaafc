"""CI capture mode: failing tests become capsules a developer replays (PROTOCOL section 8).

The pytest plugin (:mod:`reproit_otel.pytest_plugin`, entry point ``reproit``) drives this
package; nothing here depends on pytest.

* :mod:`reproit_otel.ci.naming`: ``test:<suite>#<test>`` operations, CI trace contexts and the
  bounded failure text.
* :mod:`reproit_otel.ci.pipeline`: the recording pipeline that routes every exchange to the
  running test's trace, and :func:`current_test_trace` for test code that adds its own effects.
* :mod:`reproit_otel.ci.spool`: the version-2 capsule of a failing test and the spool directory
  with its byte cap and ``dropped.count``.
* :mod:`reproit_otel.ci.markers`: the ``REPROIT:CI-CAPSULE`` and ``REPROIT:CI-TEST`` lines,
  written to the real standard error.
"""

from __future__ import annotations

from reproit_otel.ci.naming import test_operation
from reproit_otel.ci.pipeline import CiRecordingPipeline, CiTrace, current_test_trace
from reproit_otel.ci.spool import Spool, SpoolStats, ci_capsule, ci_envelope, parse_spool_max

__all__ = [
    "CiRecordingPipeline",
    "CiTrace",
    "Spool",
    "SpoolStats",
    "ci_capsule",
    "ci_envelope",
    "current_test_trace",
    "parse_spool_max",
    "test_operation",
]
