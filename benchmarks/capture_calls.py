"""How many calls and bytecode instructions reproit-otel's own code runs per request:
``python -m benchmarks.capture_calls``.

Timings of a few dozen microseconds move with the machine's other work; the number of
function calls our code makes does not. On CPython each call (of a Python function, of a C
function or method, of a property) costs a fraction of a microsecond, and on the healthy
capture path the calls are most of what capture costs, so this count is the steady measure of
it: it tells which module a change made cheaper, to the call.

The same in-process service as ``benchmarks/capture_path.py`` (one ``requests`` call, one
psycopg2 query, called as a WSGI application) runs in one fresh process per shape:
``reproit-off`` (installed, capture not configured) and ``reproit-on`` (capture configured,
healthy requests). After 300 warm-up requests, a profile hook counts, over N requests, every
call made from a frame of ``reproit_otel`` (calls into the libraries it wraps included, the
libraries' own calls not). Prints calls per request by module, and with ``--functions`` the
functions that make the most. A third child, ``floor`` (OpenTelemetry and the reference-keeping
stand-in of ``benchmarks/_floor.py`` switched on, as ``capture_paired.py`` measures it), counts
the calls made from the floor's frames the same way: the bar capture's count is held against.
Then a trace hook counts, over N more requests, the bytecode instructions run in those frames
(the floor's in its own): a call is one event however much it does, and the instructions are
the rest of what the Python of a healthy request costs, so the two counts together say how far
capture is from the floor without a clock. Prints both tables (instructions by module after
calls), and ``--functions N`` lists the N functions making the most of each.
Writes nothing. Deterministic: the same code and Python give the same counts on any machine.

``--child SHAPE N`` is the child's own entry point.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from benchmarks._common import PYTHON, ROOT, in_process_environment

SHAPES = ("reproit-off", "reproit-on")
# What a child counts: its key in the child's document, the title of its table, its name.
_COUNTS = {
    "calls": ("calls per request", "calls"),
    "opcodes": ("bytecode instructions per request", "bytecode instructions"),
}
_PACKAGE = "reproit_otel/"
_FLOOR = "benchmarks/_floor.py"


def _owner(frame: FrameType) -> str | None:
    """``module.py:function`` when ``frame`` runs reproit-otel's code, else None."""
    path = frame.f_code.co_filename
    at = path.rfind(_PACKAGE)
    if at < 0:
        return None
    return f"{path[at + len(_PACKAGE) :]}:{frame.f_code.co_name}"


def _floor_owner(frame: FrameType) -> str | None:
    """``_floor.py:function`` when ``frame`` runs the floor's code, else None."""
    if not frame.f_code.co_filename.endswith(_FLOOR):
        return None
    return f"_floor.py:{frame.f_code.co_name}"


def _child(shape: str, count: int) -> dict[str, Any]:
    from benchmarks.capture_path import in_process_driver

    owner = _owner
    if shape == "floor":
        from benchmarks import _floor

        one = in_process_driver("otel")
        _floor.install()  # before the first request: the service connects on its first
        _floor.state.active = True
        owner = _floor_owner
    else:
        one = in_process_driver(shape)
    for index in range(300):
        one(index)
    counts: collections.Counter[str] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            caller = frame.f_back
            name = None if caller is None else owner(caller)
        elif event == "c_call":
            name = owner(frame)
        else:
            return
        if name is not None:
            counts[name] += 1

    _run_hooked(sys.setprofile, profile, one, count)
    return {
        "shape": shape,
        "requests": count,
        "calls": dict(counts),
        "opcodes": _opcodes(one, count, owner),
    }


def _opcodes(
    one: Callable[[int], None], count: int, owner: Callable[[FrameType], str | None]
) -> dict[str, int]:
    """Bytecode instructions run in frames ``owner`` names, by function, over ``count`` more
    requests. A call counts as one event whatever it does; the instructions say how much
    Python runs in it, the rest of what a healthy request pays for."""
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        name = owner(frame)
        if name is None:
            return None  # no local tracing of a frame that is not ours
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "opcode":
                counts[name] += 1
            return local

        return local

    _run_hooked(sys.settrace, tracer, one, count)
    return dict(counts)


def _run_hooked(
    set_hook: Callable[[Any], None], hook: Any, one: Callable[[int], None], count: int
) -> None:
    """``count`` requests with ``hook`` set by ``set_hook`` (``sys.setprofile`` or
    ``sys.settrace``), which is cleared again whatever happens."""
    set_hook(hook)
    try:
        for index in range(count):
            one(index)
    finally:
        set_hook(None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--functions",
        type=int,
        default=0,
        metavar="N",
        help="also list the N functions that make the most calls (capture on)",
    )
    parser.add_argument("--child", nargs=2, metavar=("SHAPE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]))))
        return
    # Per count ("calls", "opcodes"), per shape, per function: the count per request.
    counted: dict[str, dict[str, dict[str, float]]] = {kind: {} for kind in _COUNTS}
    with in_process_environment() as env:
        for shape in (*SHAPES, "floor"):
            command = [PYTHON, "-m", "benchmarks.capture_calls"]
            command += ["--child", shape, str(args.requests)]
            output = subprocess.run(
                command, cwd=ROOT, env=env, check=True, capture_output=True, text=True
            ).stdout
            document = json.loads(output.strip().splitlines()[-1])
            for kind, shapes in counted.items():
                shapes[shape] = {
                    name: count / document["requests"] for name, count in document[kind].items()
                }
    for kind, (title, _) in _COUNTS.items():
        floor = counted[kind].pop("floor")
        _table(title, counted[kind])
        print(f"{'the floor (benchmarks/_floor.py), on':<44}{'':>12}{sum(floor.values()):>12.1f}")
    if args.functions:
        for kind, (_, what) in _COUNTS.items():
            print(f"\nfunctions running the most {what}, capture on (per request):")
            ranked = sorted(counted[kind]["reproit-on"].items(), key=lambda item: -item[1])
            for name, count in ranked[: args.functions]:
                print(f"{count:8.1f}  {name}")


def _table(title: str, per_request: dict[str, dict[str, float]]) -> None:
    """Per module, capture off and on, then the totals."""
    modules: dict[str, dict[str, float]] = {shape: {} for shape in SHAPES}
    for shape, counted in per_request.items():
        for name, count in counted.items():
            module = name.split(":", 1)[0]
            modules[shape][module] = modules[shape].get(module, 0.0) + count
    names = sorted(
        set(modules["reproit-on"]) | set(modules["reproit-off"]),
        key=lambda name: -modules["reproit-on"].get(name, 0.0),
    )
    print(f"\n{title:<44}{'capture off':>12}{'capture on':>12}")
    for name in names:
        off, on = modules["reproit-off"].get(name, 0.0), modules["reproit-on"].get(name, 0.0)
        print(f"{name:<44}{off:>12.1f}{on:>12.1f}")
    totals = {shape: sum(counted.values()) for shape, counted in per_request.items()}
    print(f"{'total':<44}{totals['reproit-off']:>12.1f}{totals['reproit-on']:>12.1f}")


if __name__ == "__main__":
    main()
