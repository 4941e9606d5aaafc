"""The words of the ``capture-batch-v1`` contract and the shape of a refusal (PROTOCOL 5.8).

The closed vocabularies the ingest accepts (emitter kinds, capabilities, trigger, state,
dependency and environment kinds, outcomes, observation kinds and authorities, redaction
states, defect and artifact kinds) and, for triggers and state kinds, the capability that must
be complete to replay them. :class:`BatchProblem` is one reason a batch is refused;
:class:`BatchValidationError` raises one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from reproit_otel.errors import ReproitError

__all__ = [
    "AMBIGUOUS_EFFECTS",
    "ARTIFACT_KINDS",
    "ARTIFACT_POLICIES",
    "AUTHORITIES",
    "CAPABILITIES",
    "COLLECTION_METHODS",
    "COMPLETENESS",
    "CONSENT_CLASSES",
    "DEFECT_KINDS",
    "DEPENDENCY_OPERATIONS",
    "EMITTER_KINDS",
    "ENVIRONMENT_KINDS",
    "OBSERVATION_KINDS",
    "OUTCOMES",
    "REDACTIONS",
    "STATE_KINDS",
    "STATE_OPERATIONS",
    "TRIGGER_KINDS",
    "BatchProblem",
    "BatchValidationError",
]


@dataclass(frozen=True)
class BatchProblem:
    """One reason a batch is refused: the ``rule`` broken, the ``field`` path, a sentence."""

    rule: str
    field: str
    message: str


class BatchValidationError(ReproitError):
    """Raised by :func:`check_capture_batch`: ``rule`` and ``field`` name what was refused."""

    def __init__(self, problem: BatchProblem) -> None:
        super().__init__(
            f"capture batch refused ({problem.rule}) at {problem.field}: {problem.message}"
        )
        self.rule = problem.rule
        self.field = problem.field
        self.problem = problem


EMITTER_KINDS: Final = frozenset(
    {
        "host-collector",
        "runtime-sdk",
        "browser-sdk",
        "device-sdk",
        "platform-adapter",
        "imported-evidence",
        "telemetry-adapter",
    }
)
CONSENT_CLASSES: Final = frozenset(
    {"application-telemetry", "support-export", "local-analysis", "preproduction"}
)
CAPABILITIES: Final = frozenset(
    {
        "process-tree",
        "commands",
        "standard-streams",
        "filesystem",
        "environment",
        "network",
        "http",
        "rpc",
        "database",
        "cache",
        "queue",
        "object-store",
        "jobs",
        "timers",
        "user-interface",
        "device",
        "crash-diagnostics",
        "resource-pressure",
        "clock",
        "randomness",
        "concurrency",
        "imported-diagnostics",
    }
)
COMPLETENESS: Final = frozenset({"complete", "partial", "unavailable"})
TRIGGER_KINDS: Final[Mapping[str, str]] = {
    # trigger -> the capability that must be complete to replay it
    "ui-action": "user-interface",
    "http-request": "http",
    "rpc-request": "rpc",
    "command": "commands",
    "message": "queue",
    "timer": "timers",
    "process-startup": "process-tree",
    "installer": "commands",
    "upgrade": "commands",
    "migration": "commands",
    "filesystem-event": "filesystem",
    "signal": "process-tree",
    "resource-pressure": "resource-pressure",
    "concurrency-schedule": "concurrency",
    "device-interaction": "device",
}
STATE_KINDS: Final[Mapping[str, str]] = {
    "filesystem": "filesystem",
    "registry": "environment",
    "database": "database",
    "cache": "cache",
    "queue": "queue",
    "object-store": "object-store",
    "application-storage": "filesystem",
    "device": "device",
}
STATE_OPERATIONS: Final = frozenset(
    {"read", "write", "create", "delete", "rename", "list", "lock", "unlock"}
)
DEPENDENCY_OPERATIONS: Final = frozenset(
    {"call", "return", "publish", "consume", "connect", "disconnect"}
)
AMBIGUOUS_EFFECTS: Final = frozenset(
    {"read", "write", "delete", "call", "return", "publish", "consume", "connect", "disconnect"}
)
ENVIRONMENT_KINDS: Final = frozenset(
    {
        "operating-system",
        "architecture",
        "runtime",
        "locale",
        "timezone",
        "clock",
        "wall-clock",
        "monotonic-clock",
        "randomness",
        "random-seed",
        "random-bytes",
        "network",
        "concurrency",
        "device",
        "driver",
        "graphics",
        "hardware",
        "kernel",
        "performance",
    }
)
OUTCOMES: Final = frozenset({"succeeded", "failed", "cancelled", "timed-out", "unknown"})
OBSERVATION_KINDS: Final = frozenset(
    {
        "exception",
        "crash",
        "exit",
        "hang",
        "diagnostic",
        "contract-violation",
        "data-corruption",
        "performance",
        "user-report",
    }
)
AUTHORITIES: Final = frozenset(
    {"source-claim", "runtime-diagnosis", "authored-contract", "published-standard"}
)
REDACTIONS: Final = frozenset({"not-required", "redacted-at-source", "redacted-before-storage"})
DEFECT_KINDS: Final = frozenset(
    {
        "dropped",
        "unavailable",
        "unsupported",
        "truncated",
        "sampled-out",
        "rejected",
        "clock-uncertain",
        "sequence-gap",
    }
)
ARTIFACT_KINDS: Final = frozenset(
    {
        "structured-log",
        "text-log",
        "trace-graph",
        "crash-dump",
        "core-dump",
        "diagnostic-report",
        "environment-inventory",
        "configuration-inventory",
        "process-lifecycle",
        "interaction-trace",
        "request-trace",
        "message-trace",
        "state-manifest",
        "filesystem-manifest",
        "database-manifest",
        "module-symbol-manifest",
        "screenshot",
        "recording",
        "other",
    }
)
ARTIFACT_POLICIES: Final = frozenset({"exportable", "local-analysis-only", "environment-bound"})
COLLECTION_METHODS: Final = frozenset(
    {
        "flight-recorder",
        "crash-collector",
        "support-collector",
        "telemetry-export",
        "manual-attachment",
        "derived",
    }
)
