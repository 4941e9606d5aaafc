"""``reproit-otel list``, ``show`` and ``pull``: read occurrences and capsules from an ingest.

::

    reproit-otel list [--operation OP] [--status N] [--project P | --all-projects]
                      [--limit N] [--offset N]
    reproit-otel show OCC
    reproit-otel pull OCC [--batch N] [-o FILE]

Every command takes ``--ingest URL`` (default ``$REPROIT_INGEST_URL``, else
``http://127.0.0.1:8765``), ``--api-key KEY`` (default ``$REPROIT_API_KEY``) and ``--json``
(the server's JSON, for scripts; ``pull`` always writes the capsule itself). ``pull`` writes
the capsule bytes exactly as served (canonical JSON, no trailing newline) to ``FILE`` or
standard output, ready for ``reproit-otel check``: the latest batch's, or with ``--batch N``
that of batch ``N`` (``show`` lists an occurrence's batches with their numbers).

``list`` shows the project of the current configuration (``$REPROIT_APP_ID``) when one is set;
``--project P`` names another, ``--all-projects`` shows every project.

Every read from the ingest is bounded: at most :data:`MAX_ANSWER_BYTES` bytes, and
``--timeout`` seconds for the whole request (connecting, the answer's head and its body
together, however slowly the bytes trickle in).

Exit codes: 0 on success; 2 with one clear line on stderr when the ingest refuses the key,
the occurrence is unknown (or has no capsule), no ingest answers at the URL, or its answer
is too large or too slow.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import ssl
import sys
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reproit_otel.cli.terminal import json_text, say, shown, terminal_capsule

__all__ = [
    "DEFAULT_INGEST_URL",
    "MAX_ANSWER_BYTES",
    "IngestClient",
    "IngestClientError",
    "client_for",
    "fetch_capsule",
    "register",
]

DEFAULT_INGEST_URL = "http://127.0.0.1:8765"
INGEST_URL_ENV = "REPROIT_INGEST_URL"
API_KEY_ENV = "REPROIT_API_KEY"
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The most bytes read of one answer of the ingest (a capsule is at most a few MiB)."""
_CHUNK = 65536
APP_ID_ENV = "REPROIT_APP_ID"


class IngestClientError(Exception):
    """A request to the ingest failed; the message is what the user reads."""


class IngestClient:
    """The occurrence API of one ingest, over the standard library's HTTP client."""

    def __init__(self, base_url: str, api_key: str | None, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def get(self, path: str, query: dict[str, str] | None = None) -> bytes:
        """GET ``path``; raises :class:`IngestClientError` with a user-facing message.

        The whole request takes at most ``timeout`` seconds and its answer at most
        :data:`MAX_ANSWER_BYTES` bytes: past either the connection is shut and the request
        fails (a per-read timeout alone lets a trickling server hold it forever).
        """
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise IngestClientError(f"--ingest {self.base_url!r} is not an http(s):// URL")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"accept": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                parts.hostname,
                parts.port,
                timeout=self.timeout,
                context=ssl.create_default_context(),
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname, parts.port, timeout=self.timeout
            )
        expired = threading.Event()
        opened: list[socket.socket] = []  # the connection hands its socket to the response

        def expire() -> None:
            expired.set()
            for sock in opened:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(self.timeout, expire)
        timer.daemon = True
        detach = _suppressed()
        timer.start()
        try:
            connection.connect()
            if connection.sock is not None:
                opened.append(connection.sock)
            if expired.is_set():
                raise IngestClientError(self._too_slow())
            connection.request("GET", target, headers=headers)
            response = connection.getresponse()
            body = self._bounded_body(response, expired)
            if response.status >= 400:
                raise IngestClientError(self._refusal(response.status, url, body))
            return body
        except (http.client.HTTPException, OSError) as error:
            if expired.is_set():
                raise IngestClientError(self._too_slow()) from None
            raise IngestClientError(
                f"no ingest answers at {self.base_url} ({error}); start one with "
                "`reproit-otel serve` or point --ingest (or REPROIT_INGEST_URL) at it"
            ) from None
        finally:
            timer.cancel()
            connection.close()
            detach()

    def _too_slow(self) -> str:
        return (
            f"the ingest at {self.base_url} did not answer within {self.timeout:g} s "
            "(--timeout); is it overloaded or is --ingest another server?"
        )

    def _bounded_body(self, response: http.client.HTTPResponse, expired: threading.Event) -> bytes:
        declared = response.getheader("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > MAX_ANSWER_BYTES:
            raise IngestClientError(self._too_large())
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = response.read(_CHUNK)
            if expired.is_set():
                raise IngestClientError(self._too_slow())
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise IngestClientError(self._too_large())
            chunks.append(chunk)

    def _too_large(self) -> str:
        return (
            f"the ingest at {self.base_url} sent more than {MAX_ANSWER_BYTES} bytes in one "
            "answer; refused (is --ingest an ingest URL?)"
        )

    def get_json(self, path: str, query: dict[str, str] | None = None) -> Any:
        """GET ``path`` and parse the JSON answer."""
        body = self.get(path, query)
        try:
            return json.loads(body)
        except ValueError:
            raise IngestClientError(
                f"{self.base_url}{path} did not answer JSON; is --ingest an ingest URL?"
            ) from None

    def _refusal(self, status: int, url: str, body: bytes) -> str:
        message = ""
        try:
            detail = json.loads(body)
            message = str(detail.get("error", {}).get("message", ""))
        except (ValueError, AttributeError, RecursionError):
            pass
        if status == 401:
            return (
                f"the ingest at {self.base_url} refused the API key; pass --api-key or set "
                f"{API_KEY_ENV} to a key the ingest accepts"
            )
        if status == 404:
            return message or f"{url} was not found on {self.base_url}"
        suffix = f": {message}" if message else ""
        return f"the ingest at {self.base_url} answered HTTP {status}{suffix}"


def _suppressed() -> Callable[[], None]:
    """Keep the CLI's own requests out of any OpenTelemetry instrumentation in this process."""
    try:
        from opentelemetry.context import (
            _SUPPRESS_INSTRUMENTATION_KEY,
            attach,
            detach,
            set_value,
        )
    except ImportError:  # pragma: no cover
        return lambda: None
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    return lambda: detach(token)


def add_ingest_arguments(parser: argparse.ArgumentParser, what: str = "the ingest") -> None:
    """``--ingest URL`` and ``--api-key KEY``, for every subcommand that talks to an ingest."""
    parser.add_argument(
        "--ingest",
        default=None,
        metavar="URL",
        help=f"{what} (default ${INGEST_URL_ENV}, else {DEFAULT_INGEST_URL})",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help=f"bearer key for the ingest (default ${API_KEY_ENV})",
    )


def _common(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    add_ingest_arguments(parser)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print the server's JSON")


def register(subparsers: Any) -> None:
    """Add the ``list``, ``show`` and ``pull`` subcommands."""
    listing: argparse.ArgumentParser = subparsers.add_parser(
        "list", help="list the occurrences an ingest holds, most recent first"
    )
    _common(listing)
    listing.add_argument("--operation", default=None, help="only this operation (METHOD /path)")
    listing.add_argument("--status", type=int, default=None, help="only this HTTP status")
    listing.add_argument(
        "--project",
        default=None,
        help=f"only this project (app id; default ${APP_ID_ENV} when it is set)",
    )
    listing.add_argument(
        "--all-projects",
        action="store_true",
        help=f"every project, even when ${APP_ID_ENV} is set",
    )
    listing.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many (default 0)")
    listing.set_defaults(handler=run_list)

    show: argparse.ArgumentParser = subparsers.add_parser("show", help="show one occurrence")
    _common(show)
    show.add_argument("occurrence", metavar="OCC", help="occurrence id (occ_...)")
    show.set_defaults(handler=run_show)

    pull: argparse.ArgumentParser = subparsers.add_parser(
        "pull", help="download an occurrence's capsule for `reproit-otel check`"
    )
    _common(pull, json_flag=False)
    pull.add_argument("occurrence", metavar="OCC", help="occurrence id (occ_...)")
    pull.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="N",
        help="the capsule of batch N (as `show` lists them; default: the latest)",
    )
    pull.add_argument("-o", "--output", default=None, metavar="FILE", help="default: stdout")
    pull.set_defaults(handler=run_pull)


def client_for(
    ingest: str | None = None, api_key: str | None = None, *, timeout: float = 10.0
) -> IngestClient:
    """The client for ``ingest`` (else ``$REPROIT_INGEST_URL``, else the local default) and
    ``api_key`` (else ``$REPROIT_API_KEY``)."""
    url = ingest or os.environ.get(INGEST_URL_ENV) or DEFAULT_INGEST_URL
    key = api_key or os.environ.get(API_KEY_ENV) or None
    return IngestClient(url, key, timeout=timeout)


def fetch_capsule(client: IngestClient, occurrence: str, batch: int | None = None) -> bytes:
    """The capsule bytes of ``occurrence`` (its latest batch, or batch ``batch``), exactly as
    the ingest serves them.

    Raises :class:`IngestClientError` (unknown occurrence or batch, no capsule, refused key,
    no ingest).
    """
    query = None if batch is None else {"batch": str(batch)}
    return client.get(_occurrence_path(occurrence) + "/capsule", query)


def _client(args: argparse.Namespace) -> IngestClient:
    return client_for(args.ingest, args.api_key, timeout=args.timeout)


def _fail(command: str, error: IngestClientError) -> int:
    say(f"reproit-otel {command}: {shown(error)}", file=sys.stderr)
    return 2


def _occurrence_path(occurrence: str) -> str:
    return "/v1/occurrences/" + urllib.parse.quote(occurrence, safe="")


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("ID", "COUNT", "STATUS", "LAST SEEN", "CAPSULE", "OPERATION")
    lines = [header]
    for row in rows:
        lines.append(
            (
                shown(row.get("id")),
                shown(row.get("count")),
                "-" if row.get("status") is None else shown(row.get("status")),
                shown(row.get("lastSeen")),
                "yes" if row.get("capsuleAvailable") else "no",
                shown(row.get("operation")),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])) + "  " + line[-1]
        for line in lines
    )


def run_list(args: argparse.Namespace) -> int:
    """Execute ``list``."""
    query = {"limit": str(args.limit), "offset": str(args.offset)}
    project = args.project
    if project is None and not args.all_projects:
        project = os.environ.get(APP_ID_ENV) or None
    for name, value in (("operation", args.operation), ("status", args.status)):
        if value is not None:
            query[name] = str(value)
    if project is not None:
        query["project"] = project
    try:
        page = _client(args).get_json("/v1/occurrences", query)
    except IngestClientError as error:
        return _fail("list", error)
    if args.json:
        say(json_text(page))
        return 0
    rows = page.get("occurrences", [])
    if not rows:
        say("no occurrences" + (f" of project {shown(project)}" if project is not None else ""))
        return 0
    if project is not None and args.project is None:
        say(
            f"project {shown(project)} (${APP_ID_ENV}; --all-projects for every project)",
            file=sys.stderr,
        )
    say(_table(rows))
    listed = page.get("offset", 0) + len(rows)
    if page.get("nextOffset") is not None:
        say(
            f"({shown(listed)} of {shown(page.get('total'))}; "
            f"next page: --offset {shown(page['nextOffset'])})"
        )
    return 0


_SHOW_FIELDS = (
    ("id", "occurrence"),
    ("projectId", "project"),
    ("operation", "operation"),
    ("status", "status"),
    ("fingerprint", "failure"),
    ("signature", "signature"),
    ("summary", "summary"),
    ("count", "count"),
    ("batches", "capture batches"),
    ("traces", "OTLP spans"),
    ("capsuleAvailable", "capsule"),
    ("firstSeen", "first seen"),
    ("lastSeen", "last seen"),
    ("build", "build"),
    ("commit", "commit"),
)


def run_show(args: argparse.Namespace) -> int:
    """Execute ``show``."""
    client = _client(args)
    try:
        occurrence = client.get_json(_occurrence_path(args.occurrence))
    except IngestClientError as error:
        return _fail("show", error)
    if args.json:
        say(json_text(occurrence))
        return 0
    width = max(len(label) for _, label in _SHOW_FIELDS)
    for key, label in _SHOW_FIELDS:
        value = occurrence.get(key)
        if isinstance(value, bool):
            text = "yes" if value else "no (seen over OTLP only: no exchanges)"
        else:
            text = "-" if value is None else shown(value)
        say(f"{label.ljust(width)}  {text}")
    if occurrence.get("capsuleAvailable"):
        for line in _exception_lines(client, str(occurrence.get("id"))):
            say(line)
        for line in _batch_lines(client, str(occurrence.get("id"))):
            say(line)
        say(f"\npull it: reproit-otel pull {shown(occurrence.get('id'))} -o capsule.json")
    return 0


def _batch_lines(client: IngestClient, occurrence: str) -> list[str]:
    """The occurrence's batches, most recent first, each with the number ``pull --batch``
    takes."""
    try:
        listed = client.get_json(_occurrence_path(occurrence) + "/batches")
    except IngestClientError:
        return []
    batches = listed.get("batches") if isinstance(listed, dict) else None
    if not isinstance(batches, list) or not batches:
        return []
    lines = ["", "batches (most recent first; pull one with --batch N):"]
    for batch in batches:
        if not isinstance(batch, dict):
            continue
        kept = "" if batch.get("kept") else "  (pruned by retention)"
        exception = batch.get("exception")
        about = f"  {shown(exception)}" if exception else ""
        lines.append(
            f"  {shown(batch.get('batch')):>6}  {shown(batch.get('received'))}{about}{kept}"
        )
    return lines


def _exception_lines(client: IngestClient, occurrence: str) -> list[str]:
    """The latest capture's exception (``wire/exception.py``) as ``show`` prints it."""
    from reproit_otel.check.exceptions import recorded_exception
    from reproit_otel.check.report import exception_lines
    from reproit_otel.wire.exception import describe_exception

    try:
        capsule = json.loads(fetch_capsule(client, occurrence))
    except (IngestClientError, ValueError):
        return []
    events = capsule.get("events") if isinstance(capsule, dict) else None
    error = recorded_exception(events if isinstance(events, list) else [])
    if error is None:
        return []
    return [
        "",
        f"exception:  {shown(describe_exception(error))}",
        *exception_lines(error, "traceback"),
    ]


def run_pull(args: argparse.Namespace) -> int:
    """Execute ``pull``."""
    try:
        capsule = fetch_capsule(_client(args), args.occurrence, args.batch)
    except IngestClientError as error:
        return _fail("pull", error)
    if args.output:
        Path(args.output).write_bytes(capsule)
        say(f"wrote {shown(args.output)} ({len(capsule)} bytes)", file=sys.stderr)
    elif sys.stdout.isatty():
        # The same JSON value with terminal-unsafe characters escaped; redirected output
        # stays the capsule's exact bytes.
        sys.stdout.write(terminal_capsule(capsule))
        sys.stdout.flush()
    else:
        sys.stdout.buffer.write(capsule)
        sys.stdout.flush()
    return 0
