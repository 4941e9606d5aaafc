"""Serve ``gc_app`` in this process and fire requests at it; a hang ends in a thread dump.

``python -m tests.reliability.gc_run --paths /abandon --repeat 10 --thresholds 100,1,1 ...``

Starts the loopback upstream, imports :mod:`tests.reliability.gc_app` (reproit-otel installed
or not, as the ``REPROIT_*`` environment says), serves it with werkzeug's threaded server and,
for each ``--thresholds`` setting in turn (``gc.set_threshold``), sends every path of
``--paths`` ``--repeat`` times from ``--clients`` threads. Each request must answer within
``--timeout`` seconds. Prints one JSON object on stdout: the answers in request order
(``[path, status, headers without date, body as latin-1 text]``), and with ``--dumps`` the
number of captures reproit-otel handed to its debug dump.

Never hangs: a request that does not answer in time makes the run dump every thread's stack
to stderr and exit with status 3; ``faulthandler.dump_traceback_later`` does the same (and
exits) if the whole run outlives ``--watchdog`` seconds, whatever is stuck.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import http.client
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HUNG = 3


def _fetch(base: str, path: str, timeout: float) -> list[Any]:
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        headers = [[k.lower(), v] for k, v in response.getheaders() if k.lower() != "date"]
        return [path, response.status, headers, response.read().decode("latin-1")]
    finally:
        connection.close()


def _settled_count(folder: str) -> int:
    """How many dumps ``folder`` holds once no new one has come for a second (at most 10 s).

    A response goes out as the application yields it, so the client can have the last byte
    before the server's thread has ended the body and written the operation's dump."""
    deadline = time.monotonic() + 10
    count, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = len([name for name in os.listdir(folder) if name.endswith(".json")])
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= 1:
            break
        time.sleep(0.05)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--paths", required=True, help="comma-separated request paths")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--thresholds", nargs="*", default=[], help="a,b,c for gc.set_threshold")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--watchdog", type=float, default=120.0)
    args = parser.parse_args(argv)
    faulthandler.dump_traceback_later(args.watchdog, exit=True)

    from tests.integration.upstream import Upstream

    upstream = Upstream()
    os.environ["UPSTREAM"] = upstream.base
    from tests.integration.pipeline_support import ServedWSGI
    from tests.reliability import gc_app

    gc.freeze()  # what pre-fork servers do after loading the app; full collections then run often
    server = ServedWSGI(gc_app.app)
    paths = args.paths.split(",")
    answers: list[Any] = []
    settings = [tuple(int(n) for n in t.split(",")) for t in args.thresholds] or [None]
    with ThreadPoolExecutor(max_workers=args.clients) as pool:
        for setting in settings:
            if setting is not None:
                gc.set_threshold(*setting)
            wanted = [path for _ in range(args.repeat) for path in paths]
            futures = [pool.submit(_fetch, server.base, path, args.timeout) for path in wanted]
            for path, future in zip(wanted, futures, strict=True):
                try:
                    answers.append(future.result())
                except (TimeoutError, OSError) as error:
                    gc.set_threshold(700, 10, 10)
                    print(
                        f"{path} did not answer within {args.timeout} s "
                        f"(gc thresholds {setting}): {error!r}; every thread's stack:",
                        file=sys.stderr,
                        flush=True,
                    )
                    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                    sys.stderr.flush()
                    os._exit(HUNG)  # the stuck server threads would keep a clean exit waiting
    gc.set_threshold(700, 10, 10)
    result: dict[str, Any] = {"answers": answers}
    dump = os.environ.get("REPROIT_DEBUG_DUMP")
    if dump:
        result["dumps"] = _settled_count(dump)
    print(json.dumps(result), flush=True)
    faulthandler.cancel_dump_traceback_later()
    server.stop()
    upstream.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
