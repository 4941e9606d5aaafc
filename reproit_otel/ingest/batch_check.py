"""Which capture batches the ingest stores (PROTOCOL section 5.8).

:func:`check_batch` runs :func:`~reproit_otel.wire.validate.validate_capture_batch`:

* a batch that breaks the schema (an unknown field, a bad token, a broken envelope checkpoint
  shape, ...) is **refused**; the first problem becomes the ``400`` answer's ``rule``,
  ``field`` and ``message`` and every problem is listed;
* a batch without a signed failure observation (``no-failure-observation``,
  ``no-runtime-oracle``) is refused too: it names no occurrence; so is a batch whose
  ``determinism-envelope`` checkpoint is broken: replay could not pin what it describes;
* the other findings of the portable assessment are **warnings**: the batch is stored and the
  ``202`` answer lists them. A batch whose effects were trimmed to the 48 KiB bound (decision
  D3) declares a ``partial`` capability and fails that assessment, yet it is still the best
  record of the failure; refusing it would lose the failure altogether.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reproit_otel.wire.validate import BatchProblem, validate_capture_batch

__all__ = ["REFUSED_ASSESSMENT_RULES", "BatchCheck", "check_batch", "problem_json"]

REFUSED_ASSESSMENT_RULES = frozenset(
    {"no-failure-observation", "no-runtime-oracle", "determinism-envelope"}
)
"""Portable-assessment rules that refuse a batch: it would name no occurrence, or no replay."""


@dataclass(frozen=True)
class BatchCheck:
    """The outcome: ``refused`` problems (first one answered) and accepted ``warnings``."""

    refused: list[BatchProblem] = field(default_factory=list)
    warnings: list[BatchProblem] = field(default_factory=list)


def problem_json(problem: BatchProblem) -> dict[str, str]:
    """A problem as the ingest answers it."""
    return {"rule": problem.rule, "field": problem.field, "message": problem.message}


def check_batch(batch: Any) -> BatchCheck:
    """Decide whether a parsed batch is stored (see the module docstring)."""
    schema = validate_capture_batch(batch, portable=False)
    if schema:
        return BatchCheck(refused=schema)
    assessment = validate_capture_batch(batch, portable=True)
    refused = [problem for problem in assessment if problem.rule in REFUSED_ASSESSMENT_RULES]
    if refused:
        return BatchCheck(refused=refused)
    return BatchCheck(warnings=assessment)
