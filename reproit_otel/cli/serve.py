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
* Without any key the ingest refuses to listen on anything but a loopback address (it would
  take batches from, and show captures to, the whole network).
* ``--public-url`` (default ``$REPROIT_INGEST_PUBLIC_URL``, else the address it listens on)
  is the address the page's replay line names; the request's ``Host`` header never is.
* ``--allowed-host`` (repeatable; ``*`` for any): the ``Host`` names requests may carry.
  Always allowed: the bind address, ``localhost``, ``127.0.0.1``, ``[::1]`` and the host of
  ``--public-url``. Others are refused (DNS rebinding).
* ``--retain-batches N`` (20) and ``--retain-days D`` (30): batch bodies beyond the newest
  ``N`` of an occurrence, or older than ``D`` days, are pruned (0: no limit); every count is
  kept, and artifacts no kept batch names are deleted (:mod:`reproit_otel.ingest.retention`).
* ``--header-timeout`` (10 s), ``--body-timeout`` (30 s) and
  ``--max-connections-per-client`` (32) bound slow and greedy clients; a client address that
  fails authentication 10 times in a minute is refused until the minute has passed.
* ``--max-artifact-bytes`` (2 GiB) and ``--max-artifact-bytes-per-key`` (512 MiB): the bytes
  of stored artifacts in all and per ingest key; an upload past either is refused (``429``).

The application runs in uvicorn; SIGINT and SIGTERM stop it cleanly (in-flight requests
finish, the store is closed). Access logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from typing import Any

from reproit_otel.errors import ConfigurationError
from reproit_otel.ingest.retention import DEFAULT_RETAIN_BATCHES, DEFAULT_RETAIN_DAYS

__all__ = ["register", "run"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_DB = "sqlite:///reproit-ingest.db"
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_CONNECTIONS_PER_CLIENT = 32
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0 to 3600")
    return value


def _positive_count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 100000")
    return int(text)


def _count_or_zero(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to 1000000")
    return int(text)


def _days_or_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 36500:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days from 0 to 36500")
    return value


def _is_loopback(host: str) -> bool:
    import ipaddress

    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _allowed_hosts(args: argparse.Namespace, public_url: str | None) -> list[str] | None:
    """The Host names requests may carry; None when ``--allowed-host '*'`` accepts any."""
    extra = list(args.allowed_hosts or [])
    if "*" in extra:
        return None
    hosts = [args.host, *LOOPBACK_NAMES, *extra]
    if ":" in args.host and not args.host.startswith("["):
        hosts.append(f"[{args.host}]")
    if public_url:
        from urllib.parse import urlsplit

        netloc = urlsplit(public_url).netloc.rpartition("@")[2]
        if netloc:
            hosts.append(netloc)
    return hosts


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
        "--public-url",
        default=None,
        metavar="URL",
        help="the address clients reach this ingest at, named by the page's replay line "
        "(default $REPROIT_INGEST_PUBLIC_URL, else the listening address)",
    )
    parser.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        default=None,
        metavar="HOST",
        help="a Host name requests may carry besides the bind address and loopback names "
        "(repeatable; '*' accepts any)",
    )
    parser.add_argument(
        "--header-timeout",
        type=_positive_seconds,
        default=DEFAULT_HEADER_TIMEOUT_S,
        metavar="SECONDS",
        help=f"close a connection whose request head takes longer (default "
        f"{DEFAULT_HEADER_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--body-timeout",
        type=_positive_seconds,
        default=DEFAULT_BODY_TIMEOUT_S,
        metavar="SECONDS",
        help=f"answer 408 when a request body stalls this long (default "
        f"{DEFAULT_BODY_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-connections-per-client",
        type=_positive_count,
        default=DEFAULT_CONNECTIONS_PER_CLIENT,
        metavar="N",
        help=f"connections one client address may hold open (default "
        f"{DEFAULT_CONNECTIONS_PER_CLIENT})",
    )
    parser.add_argument(
        "--retain-batches",
        type=_count_or_zero,
        default=DEFAULT_RETAIN_BATCHES,
        metavar="N",
        help=f"batch bodies kept per occurrence, the newest; 0 keeps all (default "
        f"{DEFAULT_RETAIN_BATCHES}). Counts are always kept",
    )
    parser.add_argument(
        "--retain-days",
        type=_days_or_zero,
        default=DEFAULT_RETAIN_DAYS,
        metavar="D",
        help=f"days a batch body is kept; 0 keeps them however old (default "
        f"{DEFAULT_RETAIN_DAYS:g}). Counts are always kept",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest accepted request body, after decompression (default 4 MiB)",
    )
    parser.add_argument(
        "--max-artifact-bytes",
        type=int,
        default=None,
        help="bytes of artifacts the ingest stores in all (default 2 GiB)",
    )
    parser.add_argument(
        "--max-artifact-bytes-per-key",
        type=int,
        default=None,
        help="bytes of artifacts one ingest key may have stored (default 512 MiB)",
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
    from reproit_otel._stderr import scrub_log_records

    scrub_log_records()  # what the ingest logs passes through the one scrubber too
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
            DEFAULT_MAX_ARTIFACT_BYTES,
            DEFAULT_MAX_ARTIFACT_BYTES_PER_KEY,
            DEFAULT_MAX_BODY_BYTES,
            create_app,
        )
        from reproit_otel.ingest.artifact_store import ArtifactQuota
        from reproit_otel.ingest.connections import guarded_protocol
        from reproit_otel.ingest.retention import RetentionRules, prune_periodically
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
    if not keys and not _is_loopback(args.host):
        store.close()
        print(
            f"reproit-otel serve: without --api-key the ingest listens on loopback only, not on "
            f"{args.host}: give keys (--api-key, $REPROIT_INGEST_API_KEYS) to serve others, or "
            "drop --host",
            file=sys.stderr,
        )
        return 2
    if not keys:
        print(
            "reproit-otel serve: no --api-key given: the ingest is open to every request on "
            "this machine; set keys before sharing it",
            file=sys.stderr,
        )
    public_url = args.public_url or os.environ.get("REPROIT_INGEST_PUBLIC_URL") or None
    app = create_app(
        store,
        api_keys=keys,
        read_keys=read_keys,
        max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        web=not args.no_web,
        replay_exec=args.replay_exec or os.environ.get("REPROIT_INGEST_REPLAY_EXEC") or None,
        allowed_hosts=_allowed_hosts(args, public_url),
        public_url=public_url,
        body_timeout=args.body_timeout,
        artifact_quota=ArtifactQuota(
            args.max_artifact_bytes or DEFAULT_MAX_ARTIFACT_BYTES,
            args.max_artifact_bytes_per_key or DEFAULT_MAX_ARTIFACT_BYTES_PER_KEY,
        ),
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        lifespan="off",
        http=guarded_protocol(
            header_timeout=args.header_timeout,
            max_per_client=args.max_connections_per_client,
        ),
    )
    server = IngestServer(config)
    server.app_state = app.state
    store.retention = RetentionRules(args.retain_batches, args.retain_days)
    stop_pruning = threading.Event()
    pruner = prune_periodically(store, stop_pruning)
    try:
        server.run()
    finally:
        stop_pruning.set()
        pruner.join(30)
        store.close()
    return 0 if server.started else 1
