"""``reproit-otel check CAPSULE|OCC [--exec COMMAND] [--json]``: replay and give the verdict.

``CAPSULE`` is a capsule or capture-batch file. An argument that names no existing file (and
does not look like a path: no ``/``, no ``.json`` ending) is an occurrence id: its capsule is
pulled from the ingest (``--ingest URL``, default ``$REPROIT_INGEST_URL``, else
``http://127.0.0.1:8765``; ``--api-key KEY``, default ``$REPROIT_API_KEY``) and saved as
``.reproit/capsules/<id>.json`` under the current folder, which is printed on standard error
and kept, so the same capsule can be checked again (or shared) without the ingest. It is
written through a new file renamed into place, never through a symbolic link: a link planted
at that file or its folders is refused (exit 2).

The application's standard output and standard error are shown after the verdict (the last
lines of each, the standard error last), or as it runs with ``--verbose`` (both on check's
standard error, so its own standard output holds only the summary or the ``--json``
document); ``REPROIT:`` marker lines are never echoed.

``--header 'Name: value'`` and ``--cookie 'name=value'`` (repeatable) change the request a
production check sends: each replaces the recorded header (or cookie pair) of that name, or is
added (for a credential minted by hand on the replay machine).

A check that fired the recorded request keeps what it saw in ``.reproit/last-check.json``
under the current folder (the capsule, the verdict, the status and the likely cause), replaced
by the next such check: ``reproit-otel doctor`` reads it to say when the replayed request was
refused as not logged in (and points at ``--header``/``--cookie``).

Exit codes: 0 fixed, 1 reproduced, 3 diverged or inconclusive, 2 for an unusable capsule
(not JSON, wrong format or version, no events, no exchange with ``--exec``) or an occurrence
that cannot be pulled (unknown, without a capsule, key refused, no ingest answering).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any

from reproit_otel.check.judgement import CheckResult, last_check_record
from reproit_otel.check.report import summary
from reproit_otel.check.request import (
    RequestOverrides,
    parse_cookie_override,
    parse_header_override,
)
from reproit_otel.check.run import (
    BOOT_TIMEOUT_S,
    CI_RUN_TIMEOUT_S,
    ReplayNotArmedError,
    check_capsule,
)
from reproit_otel.cli.occurrences import add_ingest_arguments
from reproit_otel.cli.terminal import json_text, say, shown
from reproit_otel.errors import CapsuleError

__all__ = ["CAPSULE_FOLDER", "LAST_CHECK", "register", "resolve_target", "run"]

CAPSULE_FOLDER = Path(".reproit") / "capsules"
"""Where a capsule pulled by occurrence id is saved, relative to the current folder."""
LAST_CHECK = Path(".reproit") / "last-check.json"
"""What the last check that fired a request saw, relative to the current folder (for doctor)."""


def register(subparsers: Any) -> None:
    """Add the ``check`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="replay a capsule with every dependency served and give the verdict",
        description=(
            "Replay CAPSULE (a reproit-backend-capture file, or a capture batch, or the id of "
            "an occurrence whose capsule is pulled from the ingest into "
            ".reproit/capsules/<id>.json) with REPROIT_REPLAY set. For a CI capsule, COMMAND "
            "is the test command; for a production capsule it boots the application, which "
            "must listen on $PORT. Exit 0 fixed, 1 reproduced, 3 diverged or inconclusive, 2 "
            "unusable capsule or occurrence."
        ),
    )
    parser.add_argument(
        "capsule",
        metavar="CAPSULE",
        help="capsule or capture batch file, or an occurrence id (occ_...) on the ingest",
    )
    parser.add_argument(
        "--exec",
        dest="command",
        metavar="COMMAND",
        help="shell command to run under replay (without it: offline re-evaluation)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the application's standard output and error as it runs, on standard error "
        "(default: their last lines after the verdict)",
    )
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
    add_ingest_arguments(parser, "the ingest to pull an occurrence from")
    parser.add_argument(
        "--header",
        dest="headers",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="send this header instead of the recorded one of that name, or in addition "
        "(repeatable; for a credential minted by hand)",
    )
    parser.add_argument(
        "--cookie",
        dest="cookies",
        action="append",
        default=[],
        metavar="'NAME=VALUE'",
        help="send this cookie instead of the recorded one of that name, or in addition "
        "(repeatable)",
    )
    parser.set_defaults(handler=run)


def _overrides(args: argparse.Namespace) -> RequestOverrides | None:
    """The ``--header``/``--cookie`` overrides; ValueError for a malformed one."""
    headers = [parse_header_override(text) for text in args.headers]
    cookies = [parse_cookie_override(text) for text in args.cookies]
    if not headers and not cookies:
        return None
    return RequestOverrides(headers=headers, cookies=cookies)


def _looks_like_path(argument: str) -> bool:
    separators = {"/", os.sep, os.altsep or "/"}
    return any(mark in argument for mark in separators) or argument.lower().endswith(".json")


def _write_without_links(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` without following a symbolic link anywhere on the way.

    A link planted at the target or at a folder of :data:`CAPSULE_FOLDER` is refused (it
    would send the pulled bytes elsewhere). The bytes go to a new file created beside the
    target (``O_EXCL``, ``O_NOFOLLOW``) that is then renamed over it, so a link raced in
    after the check is replaced, never written through.
    """
    folder = target.parent
    for step in (*reversed(folder.parents[:-1]), folder, target):
        if step.is_symlink():
            raise CapsuleError(
                f"{step} is a symbolic link: refusing to write the pulled capsule through it"
            )
    folder.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    temporary = folder / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    descriptor = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def resolve_target(
    argument: str,
    *,
    ingest: str | None = None,
    api_key: str | None = None,
    command: str = "check",
) -> Path:
    """The capsule file ``argument`` names: the file itself, or an occurrence's pulled capsule.

    ``command`` is the subcommand named in the line announcing a pull. Raises
    :class:`~reproit_otel.errors.CapsuleError` (one line) when the argument is a missing path
    or the occurrence cannot be pulled.
    """
    path = Path(argument)
    if path.exists() or _looks_like_path(argument):
        return path  # a missing path is reported by the capsule loader
    if not argument.strip():
        raise CapsuleError("give a capsule file or an occurrence id")
    from reproit_otel.cli.occurrences import IngestClientError, client_for, fetch_capsule

    client = client_for(ingest, api_key)
    try:
        body = fetch_capsule(client, argument)
    except IngestClientError as error:
        raise CapsuleError(
            f"{argument} is no file, and occurrence {argument} cannot be pulled: {error}"
        ) from None
    target = CAPSULE_FOLDER / (re.sub(r"[^A-Za-z0-9_.-]", "_", argument) + ".json")
    _write_without_links(target, body)
    say(
        f"reproit-otel {command}: pulled occurrence {shown(argument)} from {shown(client.base_url)}"
        f" into {shown(target)}",
        file=sys.stderr,
    )
    return target


def run(args: argparse.Namespace) -> int:
    """Execute ``check`` and return the exit code."""
    try:
        overrides = _overrides(args)
    except ValueError as error:
        say(f"reproit-otel check: {error}", file=sys.stderr)
        return 2
    try:
        target = resolve_target(args.capsule, ingest=args.ingest, api_key=args.api_key)
        result = check_capsule(
            target,
            args.command,
            echo=sys.stderr if args.verbose and not args.json else None,
            timeout=args.timeout,
            boot_timeout=args.boot_timeout,
            overrides=overrides,
        )
    except (CapsuleError, ReplayNotArmedError) as error:
        say(f"reproit-otel check: {shown(error)}", file=sys.stderr)
        return 2
    _remember(result, target)
    if args.json:
        say(json_text(result.to_json()))
    else:
        say(summary(result, verbose=args.verbose))
    return result.verdict.exit_code


def _remember(result: CheckResult, target: Path) -> None:
    """Keep what a check that fired a request saw in :data:`LAST_CHECK`; a folder that cannot
    be written (or a link planted there) only loses doctor's hint, never the verdict."""
    record = last_check_record(result, str(target))
    if record is None:
        return
    with contextlib.suppress(OSError, CapsuleError):
        _write_without_links(LAST_CHECK, (json_text(record) + "\n").encode("utf-8"))
