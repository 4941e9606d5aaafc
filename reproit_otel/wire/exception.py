"""The exception of a failing operation, as a bounded and redacted JSON value.

A capture keeps *why* an operation failed next to *what it exchanged*: the exception its
request raised rides in the ``return`` event's ``output`` as ``{"error": EXCEPTION}`` (plus
``"body"`` when the error response also had a JSON body, see :func:`output_with_error`).
A replay reports the exception its replayed request raised in the same shape, and
``reproit-otel check`` compares the two (:func:`same_failure`).

``EXCEPTION`` is an object::

    {"type": "builtins.ZeroDivisionError",          # module.QualifiedName of the class
     "message": "division by zero",                  # str(exception), scrubbed and bounded
     "frames": [                                     # outermost first, as Python prints them
        {"file": "flask/app.py", "line": 880, "function": "Flask.full_dispatch_request",
         "library": true},
        {"file": "app.py", "line": 88, "function": "apply_coupon"}],
     "framesOmitted": 0,                             # only when frames were cut
     "cause": {... "chained": "cause"}}              # raise ... from / during handling

* ``file`` is relative to the directory it was found under: the application root for
  application code, the ``site-packages`` (or standard library) folder for library code,
  which is marked ``"library": true``; a file under neither stays absolute.
* Nothing of a frame but its code location is read: never its locals, never its source.
* The message has every configured secret value replaced and every secret-named
  ``name=value`` pair (a URL query parameter, a ``password=...`` in text) given the
  ``$reproit`` placeholder (decision D8), exactly as recorded strings elsewhere.

Bounds (:data:`MAX_FRAMES`, :data:`MAX_MESSAGE`, :data:`MAX_CHAIN`, :data:`MAX_EXCEPTION_BYTES`):
at most 48 frames per exception (the innermost are kept; ``framesOmitted`` counts the rest),
messages cut at 1024 code points, three chained exceptions, and 16 KiB of JSON in all (past
it the deepest cause is dropped, then frames are halved).

This module is pure: no OpenTelemetry import, no I/O beyond reading code locations of the
traceback it is given.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from reproit_otel.redaction.text import scrub_text

__all__ = [
    "MAX_CHAIN",
    "MAX_EXCEPTION_BYTES",
    "MAX_FRAMES",
    "MAX_MESSAGE",
    "FrameRoots",
    "describe_exception",
    "error_of_output",
    "exception_from_stacktrace",
    "exception_kind",
    "exception_record",
    "innermost_application_frame",
    "output_with_error",
    "same_failure",
    "short_type",
]

MAX_FRAMES = 48
"""Frames kept per exception (the innermost ones)."""
MAX_MESSAGE = 1024
"""Code points kept of an exception's message."""
MAX_CHAIN = 3
"""Exceptions kept in a chain (the failing one and two causes)."""
MAX_EXCEPTION_BYTES = 16384
"""Bytes of JSON the whole exception value may take."""
_MAX_FILE = 512
_MAX_FUNCTION = 256
_MAX_TYPE = 256


class FrameRoots:
    """Where application code and library code live, to name and mark frames.

    ``application`` is the application root (frames under it are application frames, named
    relative to it); ``libraries`` are the folders of installed and standard-library code
    (checked first, so a virtual environment inside the application root is library code).
    """

    def __init__(self, application: str, libraries: Iterable[str]) -> None:
        self.application = _folder(application)
        self.libraries = tuple(sorted({_folder(path) for path in libraries if path}, key=len))[::-1]

    def locate(self, filename: str) -> tuple[str, bool]:
        """``(shown file, is library)`` for a code object's file name."""
        if filename.startswith("<"):
            return filename[:_MAX_FILE], True  # <frozen importlib._bootstrap>, <string>
        path = os.path.normpath(filename) if os.path.isabs(filename) else filename
        for library in self.libraries:
            if path.startswith(library):
                return path[len(library) :][:_MAX_FILE], True
        if self.application and path.startswith(self.application):
            return path[len(self.application) :][:_MAX_FILE], False
        return path[:_MAX_FILE], False


def _folder(path: str) -> str:
    normalized = os.path.normpath(path)
    return normalized if normalized.endswith(os.sep) else normalized + os.sep


def short_type(type_name: str) -> str:
    """The type as Python prints it: ``builtins.`` and ``__main__.`` left out."""
    for prefix in ("builtins.", "__main__."):
        if type_name.startswith(prefix):
            return type_name[len(prefix) :]
    return type_name


def _message_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # a broken __str__ must not hide the failure itself
        return f"<unprintable {type(error).__name__}>"


def _head(text: str) -> str:
    """The part of a message that can be kept, with room for a secret straddling the cut
    (scrubbing a megabyte-long message would cost the failing request for nothing)."""
    return text if len(text) <= 4 * MAX_MESSAGE else text[: 4 * MAX_MESSAGE]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _frames_of(tb: TracebackType | None, roots: FrameRoots) -> tuple[list[dict[str, Any]], int]:
    """The frames of ``tb`` (outermost first), the innermost :data:`MAX_FRAMES` of them."""
    locations: list[tuple[str, int, str]] = []
    total = 0
    while tb is not None:
        code = tb.tb_frame.f_code
        # Only the code location is read: the frame's locals are never touched.
        function = getattr(code, "co_qualname", code.co_name)
        locations.append((code.co_filename, tb.tb_lineno, function))
        if len(locations) > MAX_FRAMES:
            del locations[0]
        total += 1
        tb = tb.tb_next
    frames = []
    for filename, line, function in locations:
        shown, library = roots.locate(filename)
        frame: dict[str, Any] = {
            "file": shown,
            "line": line,
            "function": _cut(function, _MAX_FUNCTION),
        }
        if library:
            frame["library"] = True
        frames.append(frame)
    return frames, total - len(frames)


def _type_name(error: BaseException) -> str:
    cls = type(error)
    return _cut(f"{cls.__module__}.{cls.__qualname__}", _MAX_TYPE)


def exception_record(
    error: BaseException, roots: FrameRoots, secrets: Iterable[str] = ()
) -> dict[str, Any]:
    """The bounded, scrubbed JSON value of ``error`` and its chained causes (see above)."""
    secret_values = tuple(secrets)
    chain: list[tuple[BaseException, str | None]] = []
    seen: set[int] = set()
    current: BaseException | None = error
    how: str | None = None
    while current is not None and id(current) not in seen and len(chain) < MAX_CHAIN:
        seen.add(id(current))
        chain.append((current, how))
        if current.__cause__ is not None:
            current, how = current.__cause__, "cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, how = current.__context__, "context"
        else:
            current = None
    records = []
    for item, chained in chain:
        frames, omitted = _frames_of(item.__traceback__, roots)
        record: dict[str, Any] = {
            "type": _type_name(item),
            "message": _cut(scrub_text(_head(_message_of(item)), secret_values), MAX_MESSAGE),
            "frames": frames,
        }
        if omitted:
            record["framesOmitted"] = omitted
        if chained is not None:
            record["chained"] = chained
        records.append(record)
    for outer, inner in zip(records[-2::-1], records[:0:-1], strict=True):
        outer["cause"] = inner
    return _bounded(records[0])


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _bounded(record: dict[str, Any]) -> dict[str, Any]:
    """Shrink ``record`` until its JSON fits :data:`MAX_EXCEPTION_BYTES`."""
    while _size(record) > MAX_EXCEPTION_BYTES:
        deepest, parent = record, None
        while isinstance(deepest.get("cause"), dict):
            parent, deepest = deepest, deepest["cause"]
        if parent is not None:
            del parent["cause"]
            continue
        frames = record["frames"]
        if len(frames) > 1:
            keep = len(frames) // 2
            record["framesOmitted"] = record.get("framesOmitted", 0) + len(frames) - keep
            record["frames"] = frames[len(frames) - keep :]
            continue
        record["message"] = _cut(record["message"], max(16, len(record["message"]) // 2))
        if len(record["message"]) <= 16:
            record["frames"] = []
            break
    return record


_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>.+)$')


def exception_from_stacktrace(
    type_name: str, message: str, stacktrace: str, roots: FrameRoots, secrets: Iterable[str] = ()
) -> dict[str, Any]:
    """The exception value from what an OpenTelemetry ``exception`` span event carries.

    ``type_name`` is the event's ``exception.type`` (a bare class name), ``stacktrace`` the
    formatted traceback. The module comes from the traceback's last line when it names one;
    only the final exception's frames are read (its causes are not: use the live exception
    where there is one).
    """
    lines = stacktrace.rstrip("\n").splitlines()
    qualified = type_name
    if lines:
        last = lines[-1]
        head = last.split(":", 1)[0].strip()
        if head == type_name or head.endswith("." + type_name):
            qualified = head
    if "." not in qualified:
        qualified = f"builtins.{qualified}"
    # The final exception's traceback starts after the last chaining sentence.
    start = 0
    for index, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last):"):
            start = index
    locations = []
    for line in lines[start:]:
        match = _FRAME_LINE.match(line)
        if match:
            locations.append((match["file"], int(match["line"]), match["function"].strip()))
    omitted = max(0, len(locations) - MAX_FRAMES)
    frames = []
    for filename, line_number, function in locations[omitted:]:
        shown, library = roots.locate(filename)
        frame: dict[str, Any] = {
            "file": shown,
            "line": line_number,
            "function": _cut(function, _MAX_FUNCTION),
        }
        if library:
            frame["library"] = True
        frames.append(frame)
    record: dict[str, Any] = {
        "type": _cut(qualified, _MAX_TYPE),
        "message": _cut(scrub_text(_head(message), tuple(secrets)), MAX_MESSAGE),
        "frames": frames,
    }
    if omitted:
        record["framesOmitted"] = omitted
    return _bounded(record)


def _is_exception(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("type"), str)
        and isinstance(value.get("frames"), list)
    )


def output_with_error(output: Any, error: Mapping[str, Any]) -> dict[str, Any]:
    """The ``return`` output carrying ``error``: ``{"error": E}``, plus ``"body"`` when the
    error response had a JSON body of its own (kept whole under that key)."""
    if output is None:
        return {"error": dict(error)}
    return {"error": dict(error), "body": output}


def error_of_output(output: Any) -> dict[str, Any] | None:
    """The exception a ``return`` output carries (:func:`output_with_error`), else ``None``.

    A CI capsule's ``{"error": "<text>"}`` and an application's own ``{"error": ...}`` body are
    not exceptions: only an object with a string ``type`` and a ``frames`` list is.
    """
    if isinstance(output, Mapping):
        error = output.get("error")
        if isinstance(error, Mapping) and _is_exception(error):
            return dict(error)
    return None


def innermost_application_frame(error: Mapping[str, Any]) -> dict[str, Any] | None:
    """The innermost frame not marked ``library``, else the innermost frame, else ``None``."""
    frames = error.get("frames")
    if not isinstance(frames, Sequence) or not frames:
        return None
    for frame in reversed(frames):
        if isinstance(frame, Mapping) and not frame.get("library"):
            return dict(frame)
    last = frames[-1]
    return dict(last) if isinstance(last, Mapping) else None


def same_failure(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> bool:
    """Whether two exceptions are the same failure: the same type, raised from the same
    innermost application frame (file and function; the line may move with an edit, and a
    file named from another folder matches when one path ends with the other)."""
    if recorded.get("type") != replayed.get("type"):
        return False
    first = innermost_application_frame(recorded)
    second = innermost_application_frame(replayed)
    if first is None or second is None:
        return first is None and second is None
    return _same_file(first.get("file"), second.get("file")) and first.get(
        "function"
    ) == second.get("function")


def _same_file(first: Any, second: Any) -> bool:
    """Equal, or one path ends with the other (an application run from another folder)."""
    if not isinstance(first, str) or not isinstance(second, str):
        return bool(first == second)
    if first == second:
        return True
    shorter, longer = sorted((first, second), key=len)
    return longer.endswith("/" + shorter.lstrip("/"))


def describe_exception(error: Mapping[str, Any]) -> str:
    """One line: ``ZeroDivisionError: division by zero  (app.py:88 in apply_coupon)``."""
    type_name = short_type(str(error.get("type") or "Exception"))
    message = str(error.get("message") or "")
    head = f"{type_name}: {message}" if message else type_name
    head = " ".join(head.split("\n"))
    frame = innermost_application_frame(error)
    if frame is None:
        return head
    function = frame.get("function")
    where = f"{frame.get('file')}:{frame.get('line')}"
    return f"{head}  ({where} in {function})" if function else f"{head}  ({where})"


def exception_kind(error: Mapping[str, Any]) -> str:
    """The sub-group an exception falls in: its type and innermost application frame, as
    :func:`same_failure` compares them (``ValueError @ coupon.py in apply_coupon``)."""
    head = short_type(str(error.get("type") or "Exception"))
    frame = innermost_application_frame(error)
    if frame is None:
        return head
    return f"{head} @ {frame.get('file')} in {frame.get('function')}"
