"""``reproit-otel check CAPSULE [--exec COMMAND] [--json]``: replay and give the verdict.

Exit codes: 0 fixed, 1 reproduced, 3 diverged or inconclusive, 2 for an unusable capsule.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from reproit_otel.errors import CapsuleError
from reproit_otel.verdict import BOOT_TIMEOUT_S, CI_RUN_TIMEOUT_S, CheckResult, check_capsule

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``check`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="replay a capsule with every dependency served and give the verdict",
        description=(
            "Replay CAPSULE (a reproit-backend-capture file, or a capture batch) with "
            "REPROIT_REPLAY set. For a CI capsule, COMMAND is the test command; for a "
            "production capsule it boots the application, which must listen on $PORT. "
            "Exit 0 fixed, 1 reproduced, 3 diverged or inconclusive, 2 unusable capsule."
        ),
    )
    parser.add_argument("capsule", help="path of the capsule or capture batch file")
    parser.add_argument(
        "--exec",
        dest="command",
        metavar="COMMAND",
        help="shell command to run under replay (without it: offline re-evaluation)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=CI_RUN_TIMEOUT_S,
        help=f"seconds a test command may run (default {CI_RUN_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--boot-timeout",
        type=float,
        default=BOOT_TIMEOUT_S,
        help=f"seconds to wait for the application to answer HTTP (default {BOOT_TIMEOUT_S:g})",
    )
    parser.set_defaults(handler=run)


def _summary(result: CheckResult) -> str:
    lines = [
        f"operation:   {result.operation}",
        f"mode:        {result.mode}",
        f"recorded:    {result.recorded_failure or '(no failure text recorded)'}",
        f"observed:    {json.dumps(result.observed, ensure_ascii=False)}",
    ]
    for index, divergence in enumerate(result.divergences, 1):
        got = divergence.get("got") or {}
        described = " ".join(
            str(got.get(part)) for part in ("method", "url", "text") if got.get(part)
        )
        lines.append(f"divergence {index}: {divergence.get('protocol')} {described}")
    lines.append(f"verdict:     {result.verdict.value.upper()} ({result.reason})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Execute ``check`` and return the exit code."""
    try:
        result = check_capsule(
            args.capsule,
            args.command,
            echo=None if args.json else sys.stderr,
            timeout=args.timeout,
            boot_timeout=args.boot_timeout,
        )
    except CapsuleError as error:
        print(f"reproit-otel check: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False, indent=2))
    else:
        print(_summary(result))
    return result.verdict.exit_code
