"""``reproit-otel demo [--app flask|fastapi] [--workdir DIR] [--examples DIR]``.

Capture a failing request of the example shop and reproduce it with every dependency stopped
(see :mod:`reproit_otel.demo.run`). Exit 0 when the replay reproduced the failure and the fixed
copy replayed as fixed, 1 for any other verdict, 2 when a stage could not run, 130 when
interrupted.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand."""
    from reproit_otel.demo.run import APPS

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="capture a failing request of the example shop and reproduce it offline",
        description=(
            "Start a throwaway PostgreSQL, the local ingest, the shop's upstreams and the shop "
            "under opentelemetry-instrument; send traffic including a failing order; stop "
            "every dependency; pull the capsule and replay it with `reproit-otel check` "
            "(reproduced), then against a copy of the shop with the bug fixed (fixed). "
            "Exit 0 when both verdicts are as expected."
        ),
    )
    parser.add_argument(
        "--app",
        choices=sorted(APPS),
        default="flask",
        help="which shop to run: examples/shop (flask, default), examples/shop_fastapi "
        "(fastapi) or examples/fastapi_async (fastapi-async)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder for the capsule, the verdict, the ingest database and the logs "
        "(default: a new temporary folder, kept)",
    )
    parser.add_argument(
        "--examples",
        type=Path,
        default=None,
        metavar="DIR",
        help="the repository's examples folder (default: ./examples, or the one beside "
        "the installed package)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``demo``."""
    from reproit_otel.demo.run import DemoOptions, run_demo

    return run_demo(DemoOptions(workdir=args.workdir, app=args.app, examples=args.examples))
