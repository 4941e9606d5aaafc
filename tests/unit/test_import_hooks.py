"""Post-import hooks (``reproit_otel/_import_hooks.py``) on real imports of real files.

Each test writes its modules into a fresh directory on ``sys.path`` under names no other test
uses, so every import here is a first import through the real importlib machinery.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from reproit_otel import _import_hooks
from reproit_otel._import_hooks import forget, pending, when_imported


class Calls:
    """A hook that remembers each module it was called with, and in which thread."""

    def __init__(self) -> None:
        self.seen: list[tuple[ModuleType, str]] = []
        self.lock = threading.Lock()

    def __call__(self, module: ModuleType) -> None:
        with self.lock:
            self.seen.append((module, threading.current_thread().name))

    @property
    def modules(self) -> list[ModuleType]:
        return [module for module, _ in self.seen]


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path; the modules imported from it are forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in set(sys.modules) - before:
            del sys.modules[name]
        importlib.invalidate_caches()


@pytest.fixture(autouse=True)
def no_hook_left() -> Iterator[None]:
    yield
    assert pending() == {}
    assert _finder_placed() is False


def _finder_placed() -> bool:
    return any(entry is _import_hooks._FINDER for entry in sys.meta_path)


def _name(stem: str) -> str:
    return f"{stem}_{uuid.uuid4().hex[:10]}"


def _write(directory: Path, relative: str, text: str) -> None:
    path = directory / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_an_imported_module_runs_the_hook_at_once() -> None:
    calls = Calls()
    when_imported("json", calls)
    assert calls.seen == [(sys.modules["json"], threading.current_thread().name)]
    assert (pending(), _finder_placed()) == ({}, False)


def test_a_later_import_runs_the_hook_once_after_the_module_ran(place: Path) -> None:
    name = _name("later")
    _write(place, f"{name}.py", "VALUE = 42\n")
    seen_values: list[int] = []
    when_imported(name, lambda module: seen_values.append(module.VALUE))
    assert (seen_values, pending(), _finder_placed()) == ([], {name: 1}, True)
    # Looking the module up (doctor does) is not importing it.
    found = importlib.util.find_spec(name)
    assert found is not None and found.loader.get_source(name) == "VALUE = 42\n"
    assert (seen_values, pending()) == ([], {name: 1})
    module = importlib.import_module(name)
    assert seen_values == [42]
    assert (pending(), _finder_placed()) == ({}, False)
    # Nothing of ours stays on the module: its loader is importlib's own.
    assert type(module.__loader__) is importlib.machinery.SourceFileLoader
    assert module.__spec__.loader is module.__loader__
    importlib.reload(module)
    assert seen_values == [42]  # a hook runs once


def test_a_submodule_runs_its_hook_when_it_is_imported(place: Path) -> None:
    package = _name("package")
    _write(place, f"{package}/__init__.py", "")
    _write(place, f"{package}/handlers/__init__.py", "")
    _write(place, f"{package}/handlers/wsgi.py", "class Handler:\n    pass\n")
    importlib.import_module(package)
    importlib.import_module(f"{package}.handlers")
    calls = Calls()
    when_imported(f"{package}.handlers.wsgi", calls)
    assert calls.seen == []
    submodule = importlib.import_module(f"{package}.handlers.wsgi")
    assert calls.modules == [submodule]


def test_a_hook_on_a_package_waits_for_the_package_not_its_parent(place: Path) -> None:
    package = _name("outer")
    _write(place, f"{package}/__init__.py", "")
    _write(place, f"{package}/inner.py", "")
    calls = Calls()
    when_imported(f"{package}.inner", calls)
    importlib.import_module(package)
    assert (calls.seen, pending()) == ([], {f"{package}.inner": 1})
    inner = importlib.import_module(f"{package}.inner")
    assert calls.modules == [inner]


def test_a_failing_import_runs_nothing_and_raises_unchanged(place: Path) -> None:
    name = _name("broken")
    _write(place, f"{name}.py", "raise LookupError('the module refuses to load')\n")
    calls = Calls()
    when_imported(name, calls)
    with pytest.raises(LookupError) as raised:
        importlib.import_module(name)
    assert raised.value.args == ("the module refuses to load",)
    assert raised.traceback[-1].path == place / f"{name}.py"
    assert (calls.seen, name in sys.modules, pending()) == ([], False, {name: 1})
    # Mended, its next import runs the hook.
    _write(place, f"{name}.py", "MENDED = True\n")
    importlib.invalidate_caches()
    module = importlib.import_module(name)
    assert calls.modules == [module]
    assert module.MENDED is True


def test_a_missing_module_leaves_the_hook_pending(place: Path) -> None:
    name = _name("absent")
    calls = Calls()
    when_imported(name, calls)
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(name)
    assert raised.value.name == name
    assert (calls.seen, pending()) == ([], {name: 1})
    forget(name, calls)


def test_threads_importing_at_once_run_the_hook_once(place: Path) -> None:
    name = _name("contended")
    # The module's code waits until every thread has asked for it: all of them import at once.
    _write(place, f"{name}.py", "import time\ntime.sleep(0.2)\nREADY = True\n")
    calls = Calls()
    when_imported(name, calls)
    start = threading.Barrier(6)
    got: list[ModuleType] = []

    def load() -> None:
        start.wait()
        got.append(importlib.import_module(name))

    threads = [threading.Thread(target=load, name=f"importer-{n}") for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    module = sys.modules[name]
    assert got == [module] * 6
    assert calls.modules == [module]
    assert module.READY is True


def test_registering_while_another_thread_runs_the_module_runs_the_hook_once(
    place: Path,
) -> None:
    name, gate = _name("racing"), ModuleType(_name("gate"))
    gate.started, gate.go = threading.Event(), threading.Event()  # type: ignore[attr-defined]
    sys.modules[gate.__name__] = gate
    _write(
        place, f"{name}.py", f"import {gate.__name__} as gate\ngate.started.set()\ngate.go.wait()\n"
    )
    importer = threading.Thread(target=importlib.import_module, args=(name,), name="importer")
    importer.start()
    assert gate.started.wait(30)  # type: ignore[attr-defined]
    calls = Calls()
    # The module is in sys.modules but still running: the hook waits for it to complete.
    registering = threading.Thread(target=when_imported, args=(name, calls), name="registering")
    registering.start()
    gate.go.set()  # type: ignore[attr-defined]
    importer.join()
    registering.join()
    assert calls.seen == [(sys.modules[name], "registering")]


def test_forget_drops_pending_hooks_and_the_finder(place: Path) -> None:
    first, second = _name("first"), _name("second")
    _write(place, f"{first}.py", "")
    calls, other = Calls(), Calls()
    when_imported(first, calls)
    when_imported(first, other)
    when_imported(second, calls)
    assert (pending(), _finder_placed()) == ({first: 2, second: 1}, True)
    forget(first, calls)
    assert pending() == {first: 1, second: 1}
    forget(first, other)
    forget(second, calls)
    assert (pending(), _finder_placed()) == ({}, False)
    importlib.import_module(first)
    assert (calls.seen, other.seen) == ([], [])
    forget(first, calls)  # no longer pending: nothing to do


def test_a_failing_hook_is_logged_and_the_import_goes_on(
    place: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("REPROIT_STRICT_INTERNAL")
    name = _name("hooked")
    _write(place, f"{name}.py", "VALUE = 7\n")
    calls = Calls()

    def failing(module: ModuleType) -> None:
        raise RuntimeError("our defect")

    when_imported(name, failing)
    when_imported(name, calls)
    module = importlib.import_module(name)
    assert module.VALUE == 7
    assert calls.modules == [module]
    [record] = [r for r in caplog.records if r.name == "reproit_otel"]
    assert record.getMessage() == (
        f"reproit-otel internal error in import_hooks[{name}] (occurrence 1); "
        "the request continues untraced"
    )


def test_namespace_packages_zip_imports_and_reload_work_while_hooks_wait(place: Path) -> None:
    spaced, zipped = _name("spaced"), _name("zipped")
    _write(place, f"{spaced}/part.py", "WHERE = 'namespace'\n")
    archive = place / "modules.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr(f"{zipped}.py", "WHERE = 'zip'\n")
    sys.path.insert(0, str(archive))
    try:
        calls = Calls()
        when_imported(f"{spaced}.part", calls)
        when_imported(zipped, calls)
        when_imported(_name("never"), calls)  # keeps the finder in place throughout
        part = importlib.import_module(f"{spaced}.part")
        from_zip = importlib.import_module(zipped)
        assert (part.WHERE, from_zip.WHERE) == ("namespace", "zip")
        assert calls.modules == [part, from_zip]
        assert type(from_zip.__loader__).__name__ == "zipimporter"
        assert importlib.reload(from_zip) is from_zip
        assert importlib.reload(sys.modules[spaced]) is sys.modules[spaced]
    finally:
        sys.path.remove(str(archive))
        for name in list(pending()):
            forget(name, calls)


def test_a_legacy_loader_runs_the_hook_after_load_module(place: Path) -> None:
    name = _name("legacy")

    class LegacyLoader:
        """A loader of the old protocol: ``load_module`` only."""

        def load_module(self, fullname: str) -> ModuleType:
            module = ModuleType(fullname)
            module.ORIGIN = "legacy"  # type: ignore[attr-defined]
            module.__loader__ = self
            sys.modules[fullname] = module
            return module

    class LegacyFinder:
        def find_spec(self, fullname: str, path: object, target: object = None) -> object:
            if fullname != name:
                return None
            return importlib.machinery.ModuleSpec(fullname, LegacyLoader())

    finder = LegacyFinder()
    sys.meta_path.append(finder)  # type: ignore[arg-type]
    try:
        calls = Calls()
        when_imported(name, calls)
        with pytest.warns(ImportWarning):  # importlib's own word on load_module
            module = importlib.import_module(name)
        assert calls.modules == [module]
        assert (module.ORIGIN, type(module.__loader__)) == ("legacy", LegacyLoader)
    finally:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
