"""The application output a check shows: the bounded tail, whole tracebacks, markers left out."""

from __future__ import annotations

import io
import subprocess
import sys

from reproit_otel.check.output import (
    LINE_CHARS,
    TAIL_LINES,
    TRACEBACK_LINES,
    OutputPump,
    output_tail,
)

HEAD = "Traceback (most recent call last):"
CAUSE = "The above exception was the direct cause of the following exception:"


def frames(count: int, name: str) -> list[str]:
    lines = []
    for number in range(count):
        lines += [f'  File "/app/{name}.py", line {number}, in f{number}', f"    call_{number}()"]
    return lines


def chained(depth: int) -> list[str]:
    """A logged traceback: the log line, a short cause, then a deep stack of ``depth`` frames."""
    return [
        "Exception in ASGI application",
        HEAD,
        *frames(1, "logic"),
        "ZeroDivisionError: float division by zero",
        "",
        CAUSE,
        "",
        HEAD,
        *frames(depth, "stack"),
        "ValueError: coupon failed",
    ]


def test_short_output_is_kept_whole_without_markers() -> None:
    lines = ["booting", 'REPROIT:REPLAY {"exchanges":1}', "ready"]
    assert output_tail(lines) == ["booting", "ready"]


def test_the_last_lines_are_kept_and_long_lines_cut() -> None:
    lines = [f"line {n}" for n in range(TAIL_LINES + 20)] + ["x" * (LINE_CHARS + 5)]
    tail = output_tail(lines)
    assert tail == [f"line {n}" for n in range(21, TAIL_LINES + 20)] + ["x" * LINE_CHARS + "..."]


def test_a_traceback_the_window_begins_inside_is_shown_from_its_announcement() -> None:
    trace = chained(60)  # 6 + 1 + 120 + 1 lines: longer than the window
    lines = ["served GET /", "served GET /health", *trace]
    assert len(trace) > TAIL_LINES
    assert output_tail(lines) == trace


def test_a_window_beginning_at_a_chain_sentence_takes_the_earlier_traceback() -> None:
    trace = chained(1)
    lines = ["noise"] * 10 + trace + [f"after {n}" for n in range(TAIL_LINES - 8)]
    # The window begins at the blank line before the chain sentence.
    assert output_tail(lines) == trace + [f"after {n}" for n in range(TAIL_LINES - 8)]


def test_a_window_beginning_at_a_plain_line_is_not_moved() -> None:
    lines = [*chained(1), *(f"after {n}" for n in range(TAIL_LINES))]
    assert output_tail(lines) == [f"after {n}" for n in range(TAIL_LINES)]


def test_the_reach_back_is_bounded() -> None:
    # Its first line lies further back than the reach: the plain tail, innermost frames last.
    trace = chained(TRACEBACK_LINES)
    assert output_tail(["before", *trace]) == trace[-TAIL_LINES:]
    # Within reach, the earlier traceback of a chain is left out when it lies beyond it.
    deep = chained(TRACEBACK_LINES // 2 - 4)
    assert len(deep) == TRACEBACK_LINES + 2
    assert output_tail(deep) == deep[8:]  # from the second traceback's first line


def test_the_pump_keeps_every_line_and_echoes_all_but_markers() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "print('one'); print('REPROIT:REPLAY {}'); print('two')"],
        stdout=subprocess.PIPE,
    )
    echo = io.StringIO()
    pump = OutputPump(child.stdout, echo)
    child.wait(30)
    pump.join(30)
    assert pump.lines == ["one", "REPROIT:REPLAY {}", "two"]
    assert echo.getvalue() == "one\ntwo\n"
