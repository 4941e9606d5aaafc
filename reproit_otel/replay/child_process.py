"""Child processes in a replay: started only when they arm the same replay themselves.

A child process is out of reach of the replayed process's patches: a ``curl``, a shell or a
Python started without reproit-otel would reach the network freely. So while a replay is
installed, :func:`install_process_guard` checks every way Python starts a program:
:class:`subprocess.Popen` (and everything built on it: ``subprocess.run``, ``os.popen``,
asyncio's subprocesses) and :mod:`multiprocessing`'s ``spawn``/``forkserver`` starts (all
through ``_posixsubprocess.fork_exec`` or :func:`os.posix_spawn`), :func:`os.posix_spawn`,
:func:`os.posix_spawnp`, :func:`os.system`, the ``os.spawn*`` functions and the ``os.exec*``
functions (``os.execv`` and ``os.execve``, which the others call).

A child is **allowed** when it inherits the replay: it is this Python interpreter
(``sys.executable``), its environment keeps ``REPROIT_REPLAY`` naming the same capsule, and
its ``PYTHONPATH`` holds OpenTelemetry's auto-instrumentation directory (what
``opentelemetry-instrument`` puts there, so the child runs the launcher's ``sitecustomize``,
which arms the replay in the child, tripwire included, or stops it: replay fails closed).
Multiprocessing workers and a server's re-executed workers under the launcher pass.

Every other child is **refused** before it starts: the call raises :class:`PermissionError`
(``EPERM``) saying that reproit replay refused it, and one ``REPROIT:DIVERGENCE`` line with
``protocol: "process"`` and ``got: {"program": <the program's file name>}`` goes to standard
error (the arguments are left out: they may hold secrets). ``os.fork`` alone starts no new
program and is not checked.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reproit_otel.replay.session import active_session, note_quiet_refusal, report_divergence

__all__ = [
    "PROCESS_PROTOCOL",
    "child_inherits_replay",
    "install_process_guard",
    "uninstall_process_guard",
]

PROCESS_PROTOCOL = "process"
"""The ``protocol`` of the DIVERGENCE line a refused child process writes."""

_AUTO_INSTRUMENTATION = os.path.join("opentelemetry", "instrumentation", "auto_instrumentation")

_lock = threading.Lock()
# (owner, name) -> the original attribute
_originals: dict[tuple[Any, str], Any] = {}


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return os.fsdecode(value)
    return str(value)


def _same_interpreter(program: Any) -> bool:
    try:
        return os.path.realpath(_text(program)) == os.path.realpath(sys.executable)
    except (OSError, ValueError):
        return False


def _environment(env: Any) -> Mapping[str, str]:
    """The child's environment as a mapping (``None``: this process's)."""
    if env is None:
        return os.environ
    if isinstance(env, Mapping):
        return {_text(key): _text(value) for key, value in env.items()}
    found: dict[str, str] = {}
    for item in env:  # fork_exec's list of b"KEY=VALUE"
        key, _, value = _text(item).partition("=")
        found[key] = value
    return found


def child_inherits_replay(programs: Iterable[Any], env: Any) -> bool:
    """Whether a child running one of ``programs`` with ``env`` arms this replay itself."""
    if not any(_same_interpreter(program) for program in programs):
        return False
    environment = _environment(env)
    replay = os.environ.get("REPROIT_REPLAY")
    if not replay or environment.get("REPROIT_REPLAY") != replay:
        return False
    paths = environment.get("PYTHONPATH", "").split(os.pathsep)
    return any(path.rstrip(os.sep).endswith(_AUTO_INSTRUMENTATION) for path in paths)


def _suppressed() -> bool:
    from reproit_otel.capture.recording import is_suppressed

    return is_suppressed()


def _refuse(program: Any) -> PermissionError:
    """Report a refused child (a DIVERGENCE line) and build its exception."""
    name = os.path.basename(_text(program)) or _text(program)
    if _suppressed():
        note_quiet_refusal()
    else:
        session = active_session()
        if session is not None:
            line = session.diverge(PROCESS_PROTOCOL, {"program": name})
            if session.on_divergence is None:
                report_divergence(line)
    return PermissionError(
        errno.EPERM,
        f"reproit replay refused to start {name!r}: a child process that does not arm the "
        "same replay (this Python under opentelemetry-instrument, with REPROIT_REPLAY) could "
        "reach live systems",
    )


def _check(programs: list[Any], env: Any) -> None:
    if not child_inherits_replay(programs, env):
        raise _refuse(programs[0] if programs else "?")


def _popen_init(original: Callable[..., Any]) -> Callable[..., Any]:
    def __init__(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        executable = kwargs.get("executable", rest[1] if len(rest) > 1 else None)
        # Popen(args, bufsize, executable, stdin, stdout, stderr, preexec_fn, close_fds,
        #       shell, cwd, env, ...)
        env = kwargs.get("env", rest[9] if len(rest) > 9 else None)
        shell = kwargs.get("shell", rest[7] if len(rest) > 7 else False)
        if isinstance(args, (str, bytes, os.PathLike)):
            first: Any = args
        else:
            argv = list(args)
            first = argv[0] if argv else "?"
        if shell:
            first = "/bin/sh"
        _check([executable if executable is not None else first], env)
        original(self, args, *rest, **kwargs)

    __init__.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return __init__


def _fork_exec(original: Callable[..., Any]) -> Callable[..., Any]:
    def fork_exec(args: Any, executables: Any, *rest: Any) -> Any:
        env = rest[3] if len(rest) > 3 else None  # close_fds, pass_fds, cwd, env, ...
        _check(list(executables or args or ["?"]), env)
        return original(args, executables, *rest)

    fork_exec.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return fork_exec


def _spawn_with_env(original: Callable[..., Any]) -> Callable[..., Any]:
    # posix_spawn(path, argv, env, ...), execve(path, args, env), spawnve(mode, path, args, env)
    def spawn(*args: Any, **kwargs: Any) -> Any:
        offset = 1 if original.__name__.startswith("spawn") else 0
        env = kwargs.get("env", args[offset + 2] if len(args) > offset + 2 else None)
        _check([args[offset] if len(args) > offset else "?"], env)
        return original(*args, **kwargs)

    spawn.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return spawn


def _spawn_inherit(original: Callable[..., Any]) -> Callable[..., Any]:
    # execv(path, args), spawnv(mode, path, args): the child gets this environment
    def spawn(*args: Any, **kwargs: Any) -> Any:
        offset = 1 if original.__name__.startswith("spawn") else 0
        _check([args[offset] if len(args) > offset else "?"], None)
        return original(*args, **kwargs)

    spawn.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return spawn


def _system(original: Callable[..., Any]) -> Callable[..., Any]:
    def system(command: Any) -> Any:
        raise _refuse("/bin/sh")  # a shell never arms the replay

    system.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return system


def _targets() -> list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    targets: list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
        (subprocess.Popen, "__init__", _popen_init),
        (os, "system", _system),
        (os, "execv", _spawn_inherit),
        (os, "execve", _spawn_with_env),
    ]
    for name in ("posix_spawn", "posix_spawnp", "spawnve", "spawnvpe"):
        if hasattr(os, name):
            targets.append((os, name, _spawn_with_env))
    for name in ("spawnv", "spawnvp"):
        if hasattr(os, name):
            targets.append((os, name, _spawn_inherit))
    try:
        import _posixsubprocess
    except ImportError:  # not POSIX
        return targets
    targets.append((_posixsubprocess, "fork_exec", _fork_exec))
    return targets


def install_process_guard() -> None:
    """Refuse child processes that do not arm this replay (see the module doc). Idempotent."""
    with _lock:
        if _originals:
            return
        for owner, name, wrap in _targets():
            original = getattr(owner, name)
            _originals[(owner, name)] = original
            setattr(owner, name, wrap(original))


def uninstall_process_guard() -> None:
    """Restore every patched function; leaves alone one wrapped again by someone else."""
    with _lock:
        for (owner, name), original in _originals.items():
            if getattr(getattr(owner, name), "__reproit_tripwire__", False):
                setattr(owner, name, original)
        _originals.clear()
