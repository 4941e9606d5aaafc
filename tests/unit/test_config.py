"""The configuration table: parsing, failure policy and the generated reference."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from reproit_otel.config import (
    SETTINGS,
    EffectsCompleteMode,
    ReproitConfig,
    load_config,
    read_config,
    render_markdown,
)
from reproit_otel.errors import ConfigurationError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_defaults_follow_the_protocol() -> None:
    assert read_config({}) == ReproitConfig(
        endpoint=None,
        api_key=None,
        app_id=None,
        build=None,
        commit=None,
        image_digest=None,
        flush_interval_ms=3000,
        request_timeout_ms=5000,
        retry_limit=2,
        scan=False,
        scan_token=None,
        secret_values=(),
        effects_complete=EffectsCompleteMode.AUTO,
        disabled=False,
        replay=None,
        ci_capture=False,
        ci_spool=".reproit/ci-spool",
        ci_spool_max=16777216,
        debug_dump=None,
        problems=(),
    )


def test_every_setting_is_read_and_normalized() -> None:
    config = read_config(
        {
            "REPROIT_ENDPOINT": " http://127.0.0.1:8765/v1/capture-batches ",
            "REPROIT_API_KEY": "key-1",
            "REPROIT_APP_ID": "shop",
            "REPROIT_BUILD": "1.2.3",
            "REPROIT_COMMIT": "not a token",
            "GITHUB_SHA": "abc123",
            "REPROIT_IMAGE_DIGEST": "sha256:00ff",
            "REPROIT_FLUSH_INTERVAL_MS": "20",
            "REPROIT_REQUEST_TIMEOUT_MS": "750",
            "REPROIT_RETRY_LIMIT": "9",
            "REPROIT_SCAN": "1",
            "REPROIT_SCAN_TOKEN": "t0k",
            "REPROIT_SECRET_VALUES": '["a,b", "c", "c", ""]',
            "REPROIT_EFFECTS_COMPLETE": "NEVER",
            "REPROIT_DISABLED": "0",
            "REPROIT_REPLAY": "capsule.json",
            "REPROIT_CI_CAPTURE": "1",
            "REPROIT_CI_SPOOL": "spool",
            "REPROIT_CI_SPOOL_MAX": "1e9",
            "REPROIT_DEBUG_DUMP": "/tmp/dump",
        }
    )
    assert config == ReproitConfig(
        endpoint="http://127.0.0.1:8765/v1/capture-batches",
        api_key="key-1",
        app_id="shop",
        build="1.2.3",
        commit="abc123",
        image_digest="sha256:00ff",
        flush_interval_ms=100,
        request_timeout_ms=750,
        retry_limit=5,
        scan=True,
        scan_token="t0k",
        secret_values=("a,b", "c"),
        effects_complete=EffectsCompleteMode.NEVER,
        disabled=False,
        replay="capsule.json",
        ci_capture=True,
        ci_spool="spool",
        ci_spool_max=67108864,
        debug_dump="/tmp/dump",
    )
    assert config.capture_problem is None
    assert config.usable_image_digest == "sha256:00ff"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", 4096),
        ("10", 4096),
        ("5000", 5000),
        ("1e6", 1000000),
        ("7.5", 16777216),
        ("x", 16777216),
    ],
)
def test_the_spool_cap_follows_number_parsing(raw: str, expected: int) -> None:
    assert read_config({"REPROIT_CI_SPOOL_MAX": raw}).ci_spool_max == expected


def test_comma_separated_secret_values() -> None:
    assert read_config({"REPROIT_SECRET_VALUES": " s1 , s2,,s1"}).secret_values == ("s1", "s2")


def test_ci_capture_needs_exactly_one() -> None:
    assert [read_config({"REPROIT_CI_CAPTURE": v}).ci_capture for v in ("1", "true", " 1")] == [
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"REPROIT_EFFECTS_COMPLETE": "maybe"},
            "REPROIT_EFFECTS_COMPLETE: unknown mode 'maybe'; expected one of: auto, never",
        ),
        (
            {"REPROIT_FLUSH_INTERVAL_MS": "soon"},
            "REPROIT_FLUSH_INTERVAL_MS: 'soon' is not a whole number",
        ),
        ({"REPROIT_SCAN": "perhaps"}, "REPROIT_SCAN: 'perhaps' is not a switch; expected 1 or 0"),
        (
            {"REPROIT_SECRET_VALUES": "[1]"},
            "REPROIT_SECRET_VALUES: not a JSON array of strings",
        ),
    ],
)
def test_unusable_settings_are_named_with_what_was_expected(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        read_config(environ)
    assert str(raised.value) == message


def test_an_unusable_configuration_disables_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="reproit_otel"):
        config = load_config({"REPROIT_SCAN": "perhaps", "REPROIT_RETRY_LIMIT": "x"})
    assert (config.disabled, config.problems) == (
        True,
        (
            "REPROIT_RETRY_LIMIT: 'x' is not a whole number",
            "REPROIT_SCAN: 'perhaps' is not a switch; expected 1 or 0",
        ),
    )
    assert [record.getMessage() for record in caplog.records] == [
        "reproit-otel is disabled because its configuration is unusable "
        "(REPROIT_RETRY_LIMIT: 'x' is not a whole number; "
        "REPROIT_SCAN: 'perhaps' is not a switch; expected 1 or 0); "
        "fix the variable(s) and restart, the application itself is unaffected"
    ]
    assert config.capture_problem == "reproit-otel is disabled"


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({}, "REPROIT_ENDPOINT is not set"),
        ({"REPROIT_ENDPOINT": "http://x"}, "REPROIT_API_KEY is not set"),
        (
            {"REPROIT_ENDPOINT": "http://x", "REPROIT_API_KEY": "k", "REPROIT_APP_ID": "my app"},
            "REPROIT_APP_ID must be a token (got 'my app')",
        ),
        (
            {
                "REPROIT_ENDPOINT": "http://x",
                "REPROIT_API_KEY": "k",
                "REPROIT_APP_ID": "app",
                "REPROIT_BUILD": "v 1",
            },
            "REPROIT_BUILD must be a token (got 'v 1')",
        ),
    ],
)
def test_capture_needs_endpoint_key_and_token_ids(environ: dict[str, str], problem: str) -> None:
    assert read_config(environ).capture_problem == problem


def test_secrets_never_show_in_repr() -> None:
    text = repr(read_config({"REPROIT_API_KEY": "k-9", "REPROIT_SCAN_TOKEN": "t-9"}))
    assert "k-9" not in text and "t-9" not in text


def test_every_setting_has_a_name_constant_and_a_doc() -> None:
    import reproit_otel.config as module

    for setting in SETTINGS:
        assert getattr(module, setting.env, setting.env) == setting.env
        assert setting.doc.endswith(".")
        assert setting.attribute in ReproitConfig.__dataclass_fields__
    assert len({s.env for s in SETTINGS}) == len(SETTINGS)


def test_the_configuration_reference_is_generated_from_the_table() -> None:
    text = DOCS.read_text("utf-8")
    match = re.search(r"<!-- settings:begin -->\n(.*)<!-- settings:end -->", text, flags=re.DOTALL)
    assert match is not None, "docs/configuration.md lost its generated table markers"
    assert match.group(1) == render_markdown(), (
        "docs/configuration.md is stale: regenerate the table with "
        "python -c 'from reproit_otel.config import render_markdown; print(render_markdown())'"
    )
