"""``reproit-otel regression CAPSULE|OCC [--exec COMMAND] [-o DIR] [--name NAME] [--refresh]``.

Turns a captured failure into a committed pytest regression test: writes
``DIR/test_<name>.py`` and ``DIR/<name>.capsule.json`` (default ``DIR`` ``tests/regressions``,
see :mod:`reproit_otel.regression` for the files and :mod:`reproit_otel.testing` for what the
test asserts). ``CAPSULE`` is a capsule or capture-batch file (a production capture, or a CI
capsule spooled by the pytest plugin) or an occurrence id pulled from the ingest as ``check``
pulls it (``--ingest``, ``--api-key``).

The name defaults to the operation and the exception (``post_orders_keyerror``; a CI capsule:
the test's name), made unique in ``DIR``. An existing regression is never overwritten, except
its capsule with ``--refresh`` (the test module is kept).

The command is stored once per project: ``--exec`` is written as ``exec`` of a new
``[tool.reproit]`` table appended to the project's ``pyproject.toml`` when it has none; when
it holds that command already it is not repeated; otherwise (no ``pyproject.toml``, another
command there) the module passes ``command=`` itself. Without ``--exec`` the table's ``exec``
must exist (production capsules); CI capsules default to ``python -m pytest``.

Exit codes: 0 written, 2 nothing written (unusable capsule, occurrence that cannot be pulled,
no command, a regression that exists without ``--refresh`` or is missing with it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from reproit_otel.cli.occurrences import add_ingest_arguments
from reproit_otel.cli.terminal import say, shown
from reproit_otel.errors import CapsuleError, ConfigurationError
from reproit_otel.regression import (
    DEFAULT_FOLDER,
    RegressionSettings,
    capsule_file_text,
    capsule_path,
    default_name,
    is_ci_capsule,
    module_text,
    read_settings,
    settings_table,
    test_module_path,
    unique_name,
)

__all__ = ["register", "run"]

_NAME = re.compile(r"[A-Za-z0-9_]{1,80}")


class _Refused(Exception):
    """Nothing is written; the message says why and what to do."""


def register(subparsers: Any) -> None:
    """Add the ``regression`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "regression",
        help="turn a captured failure into a pytest regression test",
        description=(
            "Write DIR/test_<name>.py and DIR/<name>.capsule.json: a pytest test that replays "
            "CAPSULE (a capsule or capture batch file, or an occurrence id pulled from the "
            "ingest) hermetically, fails while the recorded failure comes back, passes once it "
            "is fixed and fails as stale when the recording no longer matches the code. Exit 0 "
            "written, 2 nothing written."
        ),
    )
    parser.add_argument(
        "capsule",
        metavar="CAPSULE",
        help="capsule or capture batch file (production or CI), or an occurrence id (occ_...)",
    )
    parser.add_argument(
        "--exec",
        dest="command",
        metavar="COMMAND",
        help="the command that boots the application on $PORT (a CI capsule: the test "
        "command); stored once in pyproject.toml [tool.reproit] exec (default: that value)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        default=str(DEFAULT_FOLDER),
        help=f"folder of the regression tests (default {DEFAULT_FOLDER})",
    )
    parser.add_argument(
        "--name",
        metavar="NAME",
        default=None,
        help="the regression's name: test_NAME.py and NAME.capsule.json (default: operation "
        "and exception, e.g. post_orders_keyerror, made unique)",
    )
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="replace the capsule of the existing regression NAME with CAPSULE, keeping its test",
    )
    add_ingest_arguments(parser, "the ingest to pull an occurrence from")
    parser.set_defaults(handler=run)


def _module_command(
    capsule: dict[str, Any], settings: RegressionSettings, command: str | None
) -> tuple[str | None, list[str]]:
    """The ``command=`` the module passes (``None``: the project's table), and notes to print.

    May append a ``[tool.reproit]`` table to the project's ``pyproject.toml``.
    """
    if is_ci_capsule(capsule):
        if command is None or command == settings.test_command():
            return None, []
        return command, []
    if command is None:
        if settings.exec is None:
            where = settings.pyproject or "pyproject.toml"
            raise _Refused(
                "give the command that boots the application on $PORT with --exec "
                f'"opentelemetry-instrument python app.py" (or set [tool.reproit] exec in {where})'
            )
        return None, []
    if command == settings.exec:
        return None, []
    if settings.pyproject is not None and not settings.found:
        text = settings.pyproject.read_text(encoding="utf-8")
        separator = (
            "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
        )
        settings.pyproject.write_text(text + separator + settings_table(command), encoding="utf-8")
        try:
            stored = read_settings(settings.pyproject).exec
        except ConfigurationError:
            stored = None  # a `tool = {...}` inline table cannot take another table
        if stored == command:
            return None, [f"stored the command in {settings.pyproject} [tool.reproit] exec"]
        settings.pyproject.write_text(text, encoding="utf-8")
        return command, [
            f"{settings.pyproject} cannot take a [tool.reproit] table appended (left as it "
            "was): this test names its command"
        ]
    if settings.pyproject is None:
        note = (
            "no pyproject.toml above the folder: the test names its command; put it once in a "
            "[tool.reproit] table (exec = ...) to share it between regressions"
        )
    else:
        note = (
            f"{settings.pyproject} [tool.reproit] holds another exec; this test names its own "
            "command"
        )
    return command, [note]


def _write(args: argparse.Namespace) -> list[str]:
    from reproit_otel.check.run import load_check_target
    from reproit_otel.cli.check import resolve_target

    target = resolve_target(
        args.capsule, ingest=args.ingest, api_key=args.api_key, command="regression"
    )
    capsule = load_check_target(target)
    folder = Path(args.output)
    if args.name is not None and _NAME.fullmatch(args.name) is None:
        raise _Refused(f"--name {args.name!r}: use letters, digits and _ only (up to 80)")
    if args.refresh:
        name = args.name or default_name(capsule)
        module = test_module_path(folder, name)
        if not module.exists():
            raise _Refused(
                f"there is no regression {name} to refresh ({module} does not exist); give its "
                "name with --name, or leave out --refresh to make a new one"
            )
        old = capsule_path(folder, name)
        try:
            previous: dict[str, Any] | None = load_check_target(old)
        except CapsuleError:
            previous = None  # missing or unreadable: the refresh is what mends it
        if previous is not None and is_ci_capsule(previous) != is_ci_capsule(capsule):
            raise _Refused(
                f"{old} holds a {'CI' if is_ci_capsule(previous) else 'production'} capsule "
                f"({previous['operation']}); {target} is of the other kind "
                f"({capsule['operation']}): make a new regression instead"
            )
        old.write_text(capsule_file_text(capsule), encoding="utf-8")
        return [f"refreshed {old} from {target} (kept {module})"]
    settings = read_settings(folder.resolve())
    if args.name is not None:
        name = args.name
        for existing in (test_module_path(folder, name), capsule_path(folder, name)):
            if existing.exists():
                raise _Refused(
                    f"{existing} exists; give another --name, or --refresh to replace the "
                    "capsule of that regression"
                )
    else:
        name = unique_name(folder, default_name(capsule))
    command, notes = _module_command(capsule, settings, args.command)
    folder.mkdir(parents=True, exist_ok=True)
    written_capsule = capsule_path(folder, name)
    written_capsule.write_text(capsule_file_text(capsule), encoding="utf-8")
    module = test_module_path(folder, name)
    module.write_text(module_text(capsule, name, command), encoding="utf-8")
    return [
        f"wrote {module}",
        f"wrote {written_capsule}",
        *notes,
        f"run it: pytest {module} (it fails until the failure is fixed)",
    ]


def run(args: argparse.Namespace) -> int:
    """Execute ``regression`` and return the exit code."""
    try:
        lines = _write(args)
    except (CapsuleError, ConfigurationError, _Refused) as error:
        say(f"reproit-otel regression: {shown(error)}", file=sys.stderr)
        return 2
    for line in lines:
        say(shown(line))
    return 0
