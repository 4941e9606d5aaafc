"""Serve ``gc_app``, abandon a stream in one request, then send no other: who settles it?

``python -m tests.reliability.idle_run --bound 10``

Starts the loopback upstream, imports :mod:`tests.reliability.gc_app` with capture configured
by the ``REPROIT_*`` environment, serves it with werkzeug's threaded server, turns automatic
collections off (so none lands inside the request, where the request's own hooks would settle
what it hands over) and sends ``GET /partial`` once: the view reads one chunk of a streamed
upstream body and drops the response unclosed, leaving it to the cyclic collector. Once the
answer is in, a full collection on this (main) thread finalizes the response, as a background
thread's allocation would in an idle worker, and a probe is handed over after that work. No
other request is sent. The run then waits at most ``--bound`` seconds for the handed-over work
to be settled and prints one JSON object on stdout:

* ``status``: the answer's status;
* ``handed_over``: how much work waited right after the collection;
* ``settled``: whether it was all settled within the bound, and ``settled_by``: the name of
  the thread that ran the probe;
* ``incomplete_reasons``: the span processor's reasons once settled (the stream's exchange,
  finished after the response, is counted there).

``faulthandler`` dumps every thread and exits if the run outlives ``--watchdog`` seconds.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import sys
import threading
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bound", type=float, default=10.0)
    parser.add_argument("--watchdog", type=float, default=60.0)
    args = parser.parse_args(argv)
    faulthandler.dump_traceback_later(args.watchdog, exit=True)

    from tests.integration.upstream import Upstream

    upstream = Upstream()
    os.environ["UPSTREAM"] = upstream.base
    from reproit_otel.capture import recording
    from tests.integration.pipeline_support import ServedWSGI
    from tests.reliability import gc_app
    from tests.reliability.gc_run import _fetch

    assert gc_app.processor is not None, "reproit-otel is not installed: set REPROIT_*"
    gc.collect()
    gc.disable()
    server = ServedWSGI(gc_app.app)
    _, status, _, _ = _fetch(server.base, "/partial", 10)
    gc.collect()  # the abandoned response's finalizer runs here and hands its finish over
    waiting = len(recording.handed_over)
    ran_on: list[str] = []
    recording.hand_over(lambda: ran_on.append(threading.current_thread().name))
    deadline = time.monotonic() + args.bound
    while not ran_on and time.monotonic() < deadline:  # the probe runs after the work before it
        time.sleep(0.05)
    result: dict[str, Any] = {
        "status": status,
        "handed_over": waiting,
        "settled": bool(ran_on) and not recording.handed_over,
        "settled_by": ran_on[0] if ran_on else None,
        "incomplete_reasons": gc_app.processor.stats()["incomplete_reasons"],
    }
    gc.enable()
    print(json.dumps(result), flush=True)
    faulthandler.cancel_dump_traceback_later()
    server.stop()
    upstream.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
