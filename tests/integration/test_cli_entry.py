"""The ``reproit-otel`` entry points: console script and ``python -m reproit_otel``."""

from __future__ import annotations

import subprocess
import sys

from reproit_otel import __version__
from reproit_otel.cli import build_parser, main


def test_python_dash_m_runs_the_same_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "reproit_otel", "--version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, f"reproit-otel {__version__}\n")


def test_every_subcommand_module_present_is_registered() -> None:
    parser = build_parser()
    choices = next(action.choices for action in parser._actions if action.dest == "command")
    assert {"serve", "list", "show", "pull", "check"} <= set(choices)


def test_no_subcommand_prints_help_and_exits_2() -> None:
    assert main([]) == 2
