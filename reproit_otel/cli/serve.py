"""``reproit-otel serve``: run the ingest (capture batches, OTLP traces, occurrences, capsules).

::

    reproit-otel serve [--host 127.0.0.1] [--port 8765] [--db sqlite:///reproit-ingest.db]
                       [--api-key KEY ...] [--read-key KEY ...] [--max-body-bytes 4194304]
                       [--replay-exec COMMAND] [--no-web]

* ``--db``: ``sqlite:///path`` (default ``sqlite:///reproit-ingest.db`` in the working
  directory, or ``$REPROIT_INGEST_DB``) or ``postgresql://user@host:port/db`` for a database
  shared by several ingest instances.
* ``--api-key``: accepted bearer keys (repeatable); default ``$REPROIT_INGEST_API_KEYS``
  (comma separated), else ``$REPROIT_API_KEY``. Without any key the ingest is open (every
  request accepted) and a warning says so.
* ``--read-key``: keys that may only read: the web page and the ``GET`` occurrence API
  (``reproit-otel list/show/pull``), never send (repeatable); default
  ``$REPROIT_INGEST_READ_KEYS`` (comma separated).
* The web page at ``/`` (occurrences, their exchanges and how to replay them) asks for the
  ingest key or a read key; ``--replay-exec`` (default ``$REPROIT_INGEST_REPLAY_EXEC``) is
  the command that boots the service, shown in the page's ``reproit-otel check --exec``
  line; ``--no-web`` serves the API alone.
* ``--port 0`` picks a free port. Once listening, one line
  ``reproit-otel serve: listening on http://HOST:PORT`` is printed on stderr.

The application runs in uvicorn; SIGINT and SIGTERM stop it cleanly (in-flight requests
finish, the store is closed). Access logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from reproit_otel.errors import ConfigurationError

__all__ = ["register", "run"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_DB = "sqlite:///reproit-ingest.db"


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the ingest for capture batches and OTLP traces",
        description=(
            "Serve POST /v1/capture-batches, POST /v1/traces (OTLP/HTTP protobuf) and the "
            "occurrence API that `reproit-otel list/show/pull` read."
        ),
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"(default {DEFAULT_HOST})")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"0 picks a free port (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--db",
        default=None,
        help=f"sqlite:///path or postgresql://... (default $REPROIT_INGEST_DB or {DEFAULT_DB})",
    )
    parser.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        default=None,
        metavar="KEY",
        help="an accepted bearer key (repeatable)",
    )
    parser.add_argument(
        "--read-key",
        dest="read_keys",
        action="append",
        default=None,
        metavar="KEY",
        help="a key that may only read: web page and occurrence API (repeatable)",
    )
    parser.add_argument(
        "--replay-exec",
        default=None,
        metavar="COMMAND",
        help="the command that boots the service, shown in the page's replay instructions",
    )
    parser.add_argument(
        "--no-web", action="store_true", help="serve the API only, without the web page"
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest accepted request body, after decompression (default 4 MiB)",
    )
    parser.set_defaults(handler=run)


def _keys(args: argparse.Namespace) -> list[str]:
    if args.api_keys:
        return [key for key in args.api_keys if key]
    listed = os.environ.get("REPROIT_INGEST_API_KEYS", "")
    keys = [key.strip() for key in listed.split(",") if key.strip()]
    if keys:
        return keys
    single = os.environ.get("REPROIT_API_KEY", "").strip()
    return [single] if single else []


def _read_keys(args: argparse.Namespace) -> list[str]:
    if args.read_keys:
        return [key for key in args.read_keys if key]
    listed = os.environ.get("REPROIT_INGEST_READ_KEYS", "")
    return [key.strip() for key in listed.split(",") if key.strip()]


def _configure_logging() -> None:
    logger = logging.getLogger("reproit_otel.ingest")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def run(args: argparse.Namespace) -> int:
    """Execute ``serve``; returns the exit code once the server stopped."""
    # The server's dependencies (the `serve` extra) are imported only when serving.
    try:
        import uvicorn

        from reproit_otel.ingest.app import (
            DEFAULT_MAX_BODY_BYTES,
            create_app,
        )
        from reproit_otel.ingest.server import IngestServer
        from reproit_otel.ingest.store import open_store
    except ImportError as error:
        print(
            f"reproit-otel serve: {error}; install the server with "
            "`pip install 'reproit-otel[serve]'`",
            file=sys.stderr,
        )
        return 2
    _configure_logging()
    url = args.db or os.environ.get("REPROIT_INGEST_DB") or DEFAULT_DB
    try:
        store = open_store(url)
    except ConfigurationError as error:
        print(f"reproit-otel serve: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        print(f"reproit-otel serve: cannot open the store {url}: {error}", file=sys.stderr)
        return 2
    keys = _keys(args)
    read_keys = _read_keys(args)
    if not keys:
        print(
            "reproit-otel serve: no --api-key given: the ingest is open to every request; set "
            "keys before sharing it",
            file=sys.stderr,
        )
    app = create_app(
        store,
        api_keys=keys,
        read_keys=read_keys,
        max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        web=not args.no_web,
        replay_exec=args.replay_exec or os.environ.get("REPROIT_INGEST_REPLAY_EXEC") or None,
    )
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_config=None, access_log=False, lifespan="off"
    )
    server = IngestServer(config)
    try:
        server.run()
    finally:
        store.close()
    return 0 if server.started else 1
