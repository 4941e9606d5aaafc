"""How ``reproit-otel check`` prints a result for people (``--json`` is for programs).

* the first divergence as what the application sent next to what the recording expected at
  that point, side by side, field by field of their indented JSON (the rows of a differing
  field marked ``|`` in the middle, equal ones ``:``; recorded headers, never compared, are
  left out);
* the recorded and the replayed exception, one line each, and the headline
  ``REPRODUCED  ZeroDivisionError: division by zero  (app.py:88 in apply_coupon), as recorded``;
* the replayed exception's frames, and the application's own standard error (its traceback
  and log lines), bounded, after the verdict.

:func:`summary` puts these together into the page ``check`` prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reproit_otel.check.judgement import CheckResult
from reproit_otel.cli.terminal import shown
from reproit_otel.wire.exception import describe_exception, short_type

__all__ = [
    "COLUMN_WIDTH",
    "divergence_lines",
    "evidence_lines",
    "exception_lines",
    "side_by_side",
    "summary",
    "verdict_lines",
]

COLUMN_WIDTH = 58
"""Characters per column of the side-by-side view (longer lines wrap)."""
_MAX_ROWS = 60


def _wrap(lines: list[str], width: int) -> list[str]:
    wrapped: list[str] = []
    for line in lines:
        rest = line
        while len(rest) > width:
            wrapped.append(rest[:width])
            rest = "  " + rest[width:]
        wrapped.append(rest)
    return wrapped


def _json_lines(value: Any) -> list[str]:
    if value is None:
        return ["(nothing of this kind left in the recording)"]
    return [shown(line) for line in json.dumps(value, ensure_ascii=False, indent=2).splitlines()]


def _field_lines(name: str, value: Any, present: bool) -> list[str]:
    if not present:
        return []
    text = json.dumps(value, ensure_ascii=False, indent=2).splitlines()
    text[0] = f'"{name}": {text[0]}'
    return [shown(line) for line in text]


def side_by_side(
    left_title: str, left: Any, right_title: str, right: Any, width: int = COLUMN_WIDTH
) -> list[str]:
    """Two request objects in two columns, field by field (fields aligned); the rows of a
    field whose values differ are marked ``|``, equal ones ``:``. A side that is not an
    object is shown whole."""
    rows = [f"  {left_title:<{width}}   {right_title}", f"  {'-' * width}   {'-' * width}"]
    pairs: list[tuple[list[str], list[str], bool]] = []
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        names = list(left) + [name for name in right if name not in left]
        for name in names:
            same = name in left and name in right and left[name] == right[name]
            pairs.append(
                (
                    _field_lines(name, left.get(name), name in left),
                    _field_lines(name, right.get(name), name in right),
                    same,
                )
            )
    else:
        pairs.append((_json_lines(left), _json_lines(right), left == right))
    count = 0
    for left_raw, right_raw, same in pairs:
        left_lines, right_lines = _wrap(left_raw, width), _wrap(right_raw, width)
        for index in range(max(len(left_lines), len(right_lines))):
            a = left_lines[index] if index < len(left_lines) else ""
            b = right_lines[index] if index < len(right_lines) else ""
            count += 1
            if count <= _MAX_ROWS:
                rows.append(f"  {a:<{width}} {':' if same else '|'} {b}".rstrip())
    if count > _MAX_ROWS:
        rows.append(f"  ... {count - _MAX_ROWS} more lines (see --json)")
    return rows


def divergence_lines(divergences: list[dict[str, Any]]) -> list[str]:
    """One line per divergence, then the first one sent-versus-expected side by side."""
    lines = []
    for index, divergence in enumerate(divergences, 1):
        got = divergence.get("got") or {}
        parts = ("method", "url", "text", "tool", "op", "address", "port")
        described = " ".join(str(got.get(part)) for part in parts if got.get(part) is not None)
        lines.append(f"divergence {index}: {shown(divergence.get('protocol'))} {shown(described)}")
    if divergences:
        first = divergences[0]
        lines.append(
            f"first divergence ({first.get('consumed')} of {first.get('total')} recorded "
            "exchanges served before it):"
        )
        expected = first.get("expected")
        if isinstance(expected, Mapping) and "headers" in expected:
            # Recorded, shown in --json, never compared: left out of the comparison here.
            expected = {name: value for name, value in expected.items() if name != "headers"}
        lines.extend(
            side_by_side(
                "the application sent", first.get("got"), "the recording expected", expected
            )
        )
        if first.get("bodyDelta") is not None:
            lines.append(f"  body differs: {shown(json.dumps(first['bodyDelta']))}")
    return lines


def exception_lines(error: Mapping[str, Any], title: str) -> list[str]:
    """The exception's frames, innermost last as Python prints them, then its chain."""
    lines = [f"{title} (most recent call last):"]
    current: Mapping[str, Any] | None = error
    depth = 0
    while isinstance(current, Mapping) and depth < 4:
        omitted = current.get("framesOmitted")
        if omitted:
            lines.append(f"  ... {omitted} outer frames not recorded")
        for frame in current.get("frames") or ():
            if not isinstance(frame, Mapping):
                continue
            tag = "  [library]" if frame.get("library") else ""
            where = f"{frame.get('file')}:{frame.get('line')} in {frame.get('function')}"
            lines.append(f"  {shown(where)}{tag}")
        head = shown(short_type(str(current.get("type"))))
        message = current.get("message")
        lines.append(f"{head}: {shown(message)}" if message else head)
        cause = current.get("cause")
        if isinstance(cause, Mapping):
            lines.append(
                "caused by (raise ... from):"
                if cause.get("chained") == "cause"
                else "raised while handling:"
            )
        current = cause if isinstance(cause, Mapping) else None
        depth += 1
    return lines


def verdict_lines(
    verdict: str,
    reason: str,
    recorded: Mapping[str, Any] | None,
    replayed: Mapping[str, Any] | None,
    different: bool,
) -> list[str]:
    """The verdict, with the exceptions when there are any."""
    lines = []
    if recorded is not None:
        lines.append(f"recorded exception: {shown(describe_exception(recorded))}")
    if replayed is not None:
        lines.append(f"replayed exception: {shown(describe_exception(replayed))}")
    lines.append(f"verdict:     {verdict.upper()} ({shown(reason)})")
    if different:
        lines.append("DIFFERENT FAILURE")
        if recorded is not None:
            lines.append(f"  recorded: {shown(describe_exception(recorded))}")
        if replayed is not None:
            lines.append(f"  replayed: {shown(describe_exception(replayed))}")
    elif verdict == "reproduced" and replayed is not None and recorded is not None:
        lines.append(f"REPRODUCED  {shown(describe_exception(replayed))}, as recorded")
    return lines


def _call(call: Mapping[str, Any]) -> str:
    names = ("method", "url", "text", "tool", "op", "address", "port")
    parts = [str(call[name]) for name in names if call.get(name) is not None]
    return shown(" ".join([str(call.get("protocol")), *parts]))


def evidence_lines(
    qualifier: str | None,
    first_new_call: Mapping[str, Any] | None,
    unused_calls: list[dict[str, Any]],
    likely_cause: str | None,
) -> list[str]:
    """What a verdict rests on beyond its reason: the qualifier and the first call past the
    recording of a *fixed beyond the recording*, or the recorded calls a replay never made and
    why it probably stopped short."""
    lines = []
    if qualifier:
        lines.append(f"qualifier:   {shown(qualifier)}")
    if first_new_call:
        lines.append(f"first new call (production never made it): {_call(first_new_call)}")
    if unused_calls:
        lines.append("recorded calls the replay never made:")
        lines.extend(f"  {call.get('position')}: {_call(call)}" for call in unused_calls)
    if likely_cause:
        lines.append(f"likely cause: {shown(likely_cause)}")
    return lines


_BODY_SHOWN = 300


def summary(result: CheckResult, *, verbose: bool = False) -> str:
    """The verdict for a person; every captured text in it goes through :func:`shown`."""
    observed = dict(result.observed)
    body = observed.pop("body", None)
    recorded = result.recorded_failure
    lines = [
        f"operation:   {shown(result.operation)}",
        f"mode:        {shown(result.mode)}",
        f"recorded:    {shown(recorded) if recorded else '(no failure text recorded)'}",
        f"observed:    {shown(json.dumps(observed, ensure_ascii=False))}",
    ]
    if isinstance(body, str) and body:
        text = " ".join(body.split())
        cut = "..." if len(text) > _BODY_SHOWN else ""
        lines.append(f"body:        {shown(text[:_BODY_SHOWN])}{cut}")
    lines.extend(divergence_lines(result.divergences))
    usage = result.usage
    if usage:
        lines.append(
            f"usage:       {usage.get('consumed')} of {usage.get('dataExchanges')} recorded data "
            f"exchanges used, {usage.get('ambient')} connection-scope calls answered, "
            f"{usage.get('beforeRequest')} calls before the request"
        )
    lines.extend(
        verdict_lines(
            result.verdict.value,
            result.reason,
            result.recorded_exception,
            result.replayed_exception,
            result.different_failure,
        )
    )
    lines.extend(
        evidence_lines(
            result.qualifier, result.first_new_call, result.unused_calls, result.likely_cause
        )
    )
    if result.replayed_exception is not None:
        lines.extend(exception_lines(result.replayed_exception, "replayed exception"))
    if not verbose:
        # Standard output first: the traceback, on standard error, ends the page.
        for name, kept in (
            ("stdout", result.application_stdout),
            ("stderr", result.application_stderr),
        ):
            if kept:
                lines.append(
                    f"application {name} (last {len(kept)} lines; --verbose shows it as it runs):"
                )
                lines.extend(f"  {shown(line)}" for line in kept)
    return "\n".join(lines)
