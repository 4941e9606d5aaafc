"""The ``reproit-otel`` command line (also ``python -m reproit_otel``).

::

    reproit-otel serve                     run the ingest (capture batches, OTLP, occurrences)
    reproit-otel list [--operation OP] [--status N] [--json]
    reproit-otel show OCC [--json]
    reproit-otel pull OCC [-o FILE]        the occurrence's capsule
    reproit-otel check CAPSULE [--exec CMD]
    reproit-otel regression CAPSULE [--exec CMD] [-o DIR] [--name NAME] [--refresh]
    reproit-otel doctor | demo             when installed with the package

Each subcommand lives in its own module of this package exposing ``register(subparsers)``;
``register`` adds its parser(s) and sets ``handler`` to a function ``(args) -> exit code``.
A subcommand module that is not part of this installation is simply left out.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from reproit_otel._version import __version__
from reproit_otel.cli.terminal import silence

__all__ = ["SUBCOMMAND_MODULES", "build_parser", "main"]

SUBCOMMAND_MODULES = ("serve", "occurrences", "check", "regression", "doctor", "demo")
"""Modules of ``reproit_otel.cli`` that contribute subcommands, in help order."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="reproit-otel",
        description="Make production failures reproducible from the OpenTelemetry a "
        "service already runs.",
    )
    parser.add_argument("--version", action="version", version=f"reproit-otel {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        qualified = f"{__name__}.{name}"
        try:
            module = importlib.import_module(qualified)
        except ModuleNotFoundError as error:
            if error.name == qualified:
                continue  # not part of this installation
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = handler(args)
    except BrokenPipeError:  # output written straight to a pipe whose reader went away
        silence(sys.stdout)
        return 1
    return code
