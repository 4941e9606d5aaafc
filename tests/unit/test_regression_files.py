"""The files of a regression test: names, the pretty capsule, the module, the settings table.

The generated module is checked with the real ``ruff`` (its defaults, ``--isolated``), and
:func:`assert_fixed`'s refusals and its *stale* answer to an application that never boots run
for real (a shell command that exits at once).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reproit_otel.errors import ConfigurationError, RegressionFailed
from reproit_otel.regression import (
    RegressionSettings,
    capsule_file_text,
    default_name,
    module_text,
    read_settings,
    settings_table,
    unique_name,
)
from reproit_otel.testing import assert_fixed
from reproit_otel.wire._jsparse import js_json_parse
from reproit_otel.wire.canonical import ordered_json
from reproit_otel.wire.capsule import capsule_from_batch
from tests.integration.capture_helpers import built_batch

RUFF = Path(sys.executable).with_name("ruff")


def _capsule(operation: str, output: Any = None, status: int = 500) -> dict[str, Any]:
    start = {"kind": "start", "operation": operation, "sequence": 1, "input": {}}
    effect = {
        "kind": "effect",
        "sequence": 2,
        "exchange": {"protocol": "http", "request": {"method": "GET", "url": "http://u/x"}},
    }
    returned = {"kind": "return", "sequence": 3, "status": status, "output": output}
    return {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": operation,
        "events": [start, effect, returned],
    }


def _error(type_name: str, file: str = "app.py", function: str = "create") -> dict[str, Any]:
    frames = [
        {"file": "flask/app.py", "line": 9, "function": "dispatch", "library": True},
        {"file": file, "line": 12, "function": function},
    ]
    return {"error": {"type": type_name, "message": "boom", "frames": frames}}


@pytest.mark.parametrize(
    ("capsule", "name"),
    [
        (_capsule("POST /orders", _error("builtins.KeyError")), "post_orders_keyerror"),
        (
            _capsule("GET /api/v2/Items/{id}", _error("shop.errors.PricingError")),
            "get_api_v2_items_id_pricingerror",
        ),
        (_capsule("DELETE /carts/7", {"error": "payment failed"}, 503), "delete_carts_7_http503"),
        (_capsule("test:tests.test_cart#test_cart_total[eu]", {"error": "x"}), "cart_total_eu"),
        (_capsule("test:suite#TestCart::test_total", {"error": "x"}), "testcart_test_total"),
        (_capsule("test:suite#test_", {"error": "x"}), "ci_test"),
        (_capsule("/" * 5, None), "http500"),
        (  # cut to 60 characters, the exception kept
            _capsule("POST /" + "very_long_segment/" * 10, _error("builtins.ValueError")),
            "post_very_long_segment_very_long_segment_very_lon_valueerror",
        ),
    ],
)
def test_the_default_name_is_operation_and_exception(capsule: dict[str, Any], name: str) -> None:
    assert default_name(capsule) == name


def test_a_taken_name_gets_a_number(tmp_path: Path) -> None:
    assert unique_name(tmp_path, "post_orders_keyerror") == "post_orders_keyerror"
    (tmp_path / "test_post_orders_keyerror.py").write_text("", encoding="utf-8")
    (tmp_path / "post_orders_keyerror_2.capsule.json").write_text("", encoding="utf-8")
    assert unique_name(tmp_path, "post_orders_keyerror") == "post_orders_keyerror_3"


def test_the_capsule_file_is_the_same_json_one_member_per_line() -> None:
    text = '{"b":[1,2.5,1e21,{}],"a":{"2":"x","10":"y","k":[]},"s":"\\u2028\\"q\\""}'
    value = js_json_parse(text)
    pretty = capsule_file_text(value)
    assert pretty == (
        "{\n"
        '  "b": [\n'
        "    1,\n"
        "    2.5,\n"
        "    1e+21,\n"
        "    {}\n"
        "  ],\n"
        '  "a": {\n'
        '    "2": "x",\n'
        '    "10": "y",\n'
        '    "k": []\n'
        "  },\n"
        '  "s": "\u2028\\"q\\""\n'
        "}\n"
    )
    assert ordered_json(js_json_parse(pretty)) == ordered_json(value)


def _ruff_clean(folder: Path) -> None:
    for command in (["check", "--isolated", "."], ["format", "--isolated", "--check", "."]):
        done = subprocess.run(
            [str(RUFF), *command], cwd=folder, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "command",
    [
        None,
        "python app.py",
        "opentelemetry-instrument gunicorn -b 127.0.0.1:$PORT app:app",  # hugged on its own line
        "opentelemetry-instrument gunicorn --workers 1 --bind 127.0.0.1:$PORT shop.wsgi:app",
        'sh -c "echo \\"quoted\\" && python app.py"',
        "sh -c 'echo \"it\\'s\"' && python app.py",
    ],
)
def test_the_module_passes_ruff_defaults(tmp_path: Path, command: str | None) -> None:
    capsule = _capsule('POST /x"""\\', _error("builtins.KeyError", 'we"ird\\.py'))
    text = module_text(capsule, "post_x_keyerror", command)
    (tmp_path / "test_post_x_keyerror.py").write_text(text, encoding="utf-8")
    _ruff_clean(tmp_path)
    namespace: dict[str, Any] = {"__file__": str(tmp_path / "test_post_x_keyerror.py")}
    exec(compile(text, "test_post_x_keyerror.py", "exec"), namespace)
    assert namespace["CAPSULE"] == tmp_path / "post_x_keyerror.capsule.json"
    if command is None:
        assert text.endswith("\n    assert_fixed(CAPSULE)\n")
    else:  # the command is the one given, as one Python string
        call = text.split("def test_post_x_keyerror() -> None:\n", 1)[1]
        assert eval(call.split("command=", 1)[1].rsplit(")", 1)[0].strip().rstrip(",")) == command


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n' + table, encoding="utf-8")
    folder = tmp_path / "tests" / "regressions"
    folder.mkdir(parents=True)
    return folder


def test_the_settings_come_from_the_nearest_pyproject(tmp_path: Path) -> None:
    folder = _project(
        tmp_path,
        '[tool.reproit]\nexec = "python app.py"\ntest-exec = "pytest -x"\nboot-timeout = 5\n',
    )
    assert read_settings(folder / "x.capsule.json") == RegressionSettings(
        root=tmp_path,
        exec="python app.py",
        test_exec="pytest -x",
        boot_timeout=5.0,
        found=True,
        pyproject=tmp_path / "pyproject.toml",
    )
    (tmp_path / "other").mkdir()
    appended = _project(tmp_path / "other", "\n" + settings_table('python "my app".py'))
    assert read_settings(appended).exec == 'python "my app".py'


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[tool.reproit]\nexec = 3\n", "[tool.reproit] exec must be a non-empty string"),
        ("[tool.reproit]\nexecute = 'x'\n", "[tool.reproit] has unknown keys ['execute']"),
        ("[tool.reproit]\nboot-timeout = 0\n", "[tool.reproit] boot-timeout must be a positive"),
        ("[tool.reproit\n", "cannot read"),
    ],
)
def test_an_unusable_table_is_a_configuration_error(
    tmp_path: Path, table: str, message: str
) -> None:
    folder = _project(tmp_path, table)
    with pytest.raises(ConfigurationError) as raised:
        read_settings(folder)
    assert message in str(raised.value)
    assert str(tmp_path / "pyproject.toml") in str(raised.value)


def _write_capsule(folder: Path) -> Path:
    capsule = capsule_from_batch(built_batch("POST /orders", trace_id="regression-unit"))
    assert capsule is not None
    capsule["events"][-1]["output"] = _error("builtins.KeyError")
    path = folder / "post_orders_keyerror.capsule.json"
    path.write_text(capsule_file_text(capsule), encoding="utf-8")
    return path


def test_without_a_command_assert_fixed_says_where_to_put_it(tmp_path: Path) -> None:
    path = _write_capsule(_project(tmp_path, ""))
    with pytest.raises(ConfigurationError) as raised:
        assert_fixed(path)
    assert str(raised.value) == (
        f"no command boots the application for {path}: set it once for the project in "
        f'{tmp_path / "pyproject.toml"} (`[tool.reproit]` `exec = "opentelemetry-instrument '
        'python app.py"`, the command that serves the application on $PORT), or pass '
        "command=... to assert_fixed"
    )


def test_an_application_that_never_boots_is_a_stale_failure(tmp_path: Path) -> None:
    folder = _project(tmp_path, "[tool.reproit]\nexec = \"echo 'no app here' >&2; exit 4\"\n")
    path = _write_capsule(folder)
    with pytest.raises(RegressionFailed) as raised:
        assert_fixed(path)
    failure = raised.value
    assert (failure.stale, failure.result.verdict.value, isinstance(failure, AssertionError)) == (
        True,
        "inconclusive",
        True,
    )
    lines = str(failure).splitlines()
    assert lines[0].startswith("the recording no longer matches the code (inconclusive): ")
    assert lines[1:4] == [
        "  operation: POST /orders",
        "  capsule:   tests/regressions/post_orders_keyerror.capsule.json",
        "  recorded:  KeyError: boom  (app.py:12 in create)",
    ]
    assert lines[4:] == [
        "the application's standard error (last 1 lines):",
        "  no app here",
        "The recording is stale: this test cannot tell whether the failure is fixed. Refresh it:",
        "capture the failure again (production: the new occurrence; CI: the failing test run "
        "with REPROIT_CI_CAPTURE=1), then",
        "  reproit-otel regression NEW_CAPSULE --name post_orders_keyerror -o tests/regressions "
        "--refresh",
        "(or delete this regression if the failure can no longer happen).",
    ]


def _regression(
    cwd: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    from reproit_otel.cli import main

    monkeypatch.chdir(cwd)
    code = main(["regression", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_where_the_command_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No pyproject.toml above: the module names its command, and says how to share it.
    bare = tmp_path / "bare"
    bare.mkdir()
    capsule = _write_capsule(bare)
    code, out, err = _regression(bare, capsys, monkeypatch, str(capsule), "--exec", "python a.py")
    assert (code, err, out.splitlines()[2]) == (
        0,
        "",
        "no pyproject.toml above the folder: the test names its command; put it once in a "
        "[tool.reproit] table (exec = ...) to share it between regressions",
    )
    module = (bare / "tests" / "regressions" / "test_post_orders_keyerror.py").read_text("utf-8")
    assert module.endswith('\n    assert_fixed(CAPSULE, command="python a.py")\n')

    # A table without exec and no --exec: nothing is written.
    (tmp_path / "p").mkdir()
    folder = _project(tmp_path / "p", "[tool.reproit]\nboot-timeout = 5\n")
    capsule = _write_capsule(folder.parent)
    code, out, err = _regression(tmp_path / "p", capsys, monkeypatch, str(capsule))
    assert (code, out) == (2, "")
    assert err == (
        "reproit-otel regression: give the command that boots the application on $PORT with "
        '--exec "opentelemetry-instrument python app.py" (or set [tool.reproit] exec in '
        f"{tmp_path / 'p' / 'pyproject.toml'})\n"
    )
    assert sorted(path.name for path in folder.iterdir()) == []

    # A table holding another exec: this module names its own.
    (tmp_path / "p" / "pyproject.toml").write_text(
        '[tool.reproit]\nexec = "python other.py"\n', encoding="utf-8"
    )
    code, out, err = _regression(
        tmp_path / "p", capsys, monkeypatch, str(capsule), "--exec", "python a.py"
    )
    assert (code, err, out.splitlines()[2]) == (
        0,
        "",
        f"{tmp_path / 'p' / 'pyproject.toml'} [tool.reproit] holds another exec; this test "
        "names its own command",
    )
    # The same exec as the table: not repeated.
    code, out, err = _regression(
        tmp_path / "p", capsys, monkeypatch, str(capsule), "--exec", "python other.py"
    )
    assert (code, out.splitlines()[0]) == (
        0,
        "wrote tests/regressions/test_post_orders_keyerror_2.py",
    )
    assert (
        (folder / "test_post_orders_keyerror_2.py")
        .read_text("utf-8")
        .endswith("\n    assert_fixed(CAPSULE)\n")
    )


def test_a_pyproject_that_cannot_take_the_table_is_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = "tool = { ruff = { line-length = 100 } }\n"
    (tmp_path / "pyproject.toml").write_text(original, encoding="utf-8")
    capsule = _write_capsule(tmp_path)
    code, out, err = _regression(
        tmp_path, capsys, monkeypatch, str(capsule), "--exec", "python a.py"
    )
    assert (code, err, out.splitlines()[2]) == (
        0,
        "",
        f"{tmp_path / 'pyproject.toml'} cannot take a [tool.reproit] table appended (left as it "
        "was): this test names its command",
    )
    assert (tmp_path / "pyproject.toml").read_text(encoding="utf-8") == original
    module = (tmp_path / "tests" / "regressions" / "test_post_orders_keyerror.py").read_text(
        "utf-8"
    )
    assert module.endswith('\n    assert_fixed(CAPSULE, command="python a.py")\n')
