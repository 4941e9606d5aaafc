"""The command-line reference of ``docs/configuration.md``, generated from the parsers.

:func:`render_cli_markdown` walks the ``reproit-otel`` parser (:func:`reproit_otel.cli.
build_parser`) and writes one table per subcommand: every argument and flag, its default and
its help text, so the documentation holds exactly what ``--help`` says. The settings table
comes from :func:`reproit_otel.config.render_markdown` the same way, and the table of the
other variables from :func:`reproit_otel.variables.render_other_markdown`.

They live between markers in ``docs/configuration.md``::

    <!-- settings:begin --> ... <!-- settings:end -->
    <!-- variables:begin --> ... <!-- variables:end -->
    <!-- cli:begin --> ... <!-- cli:end -->

and a test fails when any is stale. Regenerate both in place with::

    python -m reproit_otel.cli.reference docs/configuration.md

This module is not a subcommand (it has no ``register``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["render_cli_markdown", "replace_section", "update_configuration_doc"]

_SECTION = re.compile(r"(<!-- (?P<name>[a-z]+):begin -->\n)(.*?)(<!-- (?P=name):end -->)", re.S)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.option_strings and action.nargs == 0:
        return "off"  # a switch
    default = action.default
    if default is None or default == argparse.SUPPRESS:
        return "unset" if action.option_strings else "required"
    if isinstance(default, list) and not default:
        return "unset"
    return f"`{default}`"


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes_value = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if takes_value else "")
    if action.choices is not None and not action.metavar:
        metavar = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    shown = [
        f"`{flag} {metavar}`" if takes_value else f"`{flag}`" for flag in action.option_strings
    ]
    return ", ".join(shown)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def render_cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """Every subcommand's arguments as Markdown tables (``-h/--help`` left out)."""
    if parser is None:
        from reproit_otel.cli import build_parser

        parser = build_parser()
    blocks: list[str] = []
    for name, subparser in _subcommands(parser):
        lines = [f"### `reproit-otel {name}`", ""]
        if subparser.description:
            lines += [_cell(subparser.description), ""]
        lines += ["| Argument | Default | Meaning |", "|---|---|---|"]
        for action in subparser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            help_text = action.help or ""
            if "%(" in help_text:
                help_text = help_text % {**vars(action), "prog": subparser.prog}
            lines.append(f"| {_argument(action)} | {_default(action)} | {_cell(help_text)} |")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with the section between ``<!-- name:begin/end -->`` replaced by ``body``."""
    found = False

    def swap(match: re.Match[str]) -> str:
        nonlocal found
        if match.group("name") != name:
            return match.group(0)
        found = True
        return match.group(1) + body + match.group(4)

    updated = _SECTION.sub(swap, text)
    if not found:
        raise ValueError(f"no <!-- {name}:begin --> ... <!-- {name}:end --> section")
    return updated


def update_configuration_doc(path: Path) -> bool:
    """Regenerate the generated sections of ``path``; returns True when the file changed."""
    from reproit_otel.config import render_markdown
    from reproit_otel.variables import render_other_markdown

    text = path.read_text(encoding="utf-8")
    updated = replace_section(text, "settings", render_markdown())
    updated = replace_section(updated, "variables", render_other_markdown())
    updated = replace_section(updated, "cli", render_cli_markdown())
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reproit_otel.cli.reference docs/configuration.md``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m reproit_otel.cli.reference docs/configuration.md", file=sys.stderr)
        return 2
    changed = update_configuration_doc(Path(args[0]))
    print(f"{args[0]}: {'updated' if changed else 'already up to date'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
