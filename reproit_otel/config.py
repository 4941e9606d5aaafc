"""reproit-otel configuration: one table of settings, read once into a frozen object.

Every setting is a row of :data:`SETTINGS` (attribute, environment variable, default, parser,
documentation). :func:`load_config` reads the environment once and returns a frozen
:class:`ReproitConfig`; components receive that object and never read ``os.environ`` on their
own. The configuration reference in ``docs/`` is generated from the same table
(:func:`render_markdown`), and a test keeps the two in step.

Usage::

    from reproit_otel.config import load_config

    config = load_config()          # never raises; problems disable capture, logged once
    if config.capture_enabled: ...

    config = read_config(environ)   # raises ConfigurationError for an unusable setting

Failure policy: a setting that is present but unusable (``REPROIT_FLUSH_INTERVAL_MS=soon``,
``REPROIT_EFFECTS_COMPLETE=maybe``) is a :class:`~reproit_otel.errors.ConfigurationError`
from :func:`read_config`; :func:`load_config` turns it into a configuration with
``disabled=True`` and ``problems`` set, and logs one line through the ``reproit_otel`` logger
saying what is wrong and what to do. The application is never affected. Capture (uploads)
additionally needs an endpoint, an API key and an application id
(:attr:`ReproitConfig.capture_problem` says which one is missing, PROTOCOL section 5.1).
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reproit_otel.config_parsers import (
    CAPTURE_BUDGET_CEILING,
    CAPTURE_BUDGET_DEFAULT,
    CAPTURE_MAX_EVENTS_CEILING,
    CAPTURE_MAX_EVENTS_FLOOR,
    SPOOL_MAX_CEILING,
    SPOOL_MAX_DEFAULT,
    SPOOL_MAX_FLOOR,
    at_least,
    clamped,
    parse_exactly_one,
    parse_flag,
    parse_path,
    parse_secret_text,
    parse_secret_values,
    parse_spool_max,
    parse_text,
    parse_token,
)
from reproit_otel.errors import ConfigurationError
from reproit_otel.wire.batch_environment import is_token

__all__ = [
    "CAPTURE_BUDGET_CEILING",
    "CAPTURE_BUDGET_DEFAULT",
    "CAPTURE_MAX_EVENTS_CEILING",
    "CAPTURE_MAX_EVENTS_FLOOR",
    "REPROIT_API_KEY",
    "REPROIT_APP_ID",
    "REPROIT_BUILD",
    "REPROIT_CAPTURE_BUDGET",
    "REPROIT_CAPTURE_MAX_EVENTS",
    "REPROIT_CI_CAPTURE",
    "REPROIT_CI_SPOOL",
    "REPROIT_CI_SPOOL_MAX",
    "REPROIT_COMMIT",
    "REPROIT_DEBUG_DUMP",
    "REPROIT_DISABLED",
    "REPROIT_EFFECTS_COMPLETE",
    "REPROIT_ENDPOINT",
    "REPROIT_FLUSH_INTERVAL_MS",
    "REPROIT_IMAGE_DIGEST",
    "REPROIT_REPLAY",
    "REPROIT_REQUEST_TIMEOUT_MS",
    "REPROIT_RETRY_LIMIT",
    "REPROIT_SCAN",
    "REPROIT_SCAN_TOKEN",
    "REPROIT_SECRET_VALUES",
    "SETTINGS",
    "SPOOL_MAX_CEILING",
    "SPOOL_MAX_DEFAULT",
    "SPOOL_MAX_FLOOR",
    "EffectsCompleteMode",
    "ReproitConfig",
    "Setting",
    "given_secret_values",
    "load_config",
    "parse_spool_max",
    "read_config",
    "render_markdown",
]

_log = logging.getLogger("reproit_otel")

# --- environment variable names -------------------------------------------------------------

REPROIT_ENDPOINT = "REPROIT_ENDPOINT"
"""URL the capture batches are POSTed to, used verbatim (e.g. ``http://127.0.0.1:8765/v1/capture-batches``)."""
REPROIT_API_KEY = "REPROIT_API_KEY"
"""API key sent as ``Authorization: Bearer <key>`` with every upload."""
REPROIT_APP_ID = "REPROIT_APP_ID"
"""Application id; becomes the batch ``projectId``. Must be a token."""
REPROIT_BUILD = "REPROIT_BUILD"
"""Build or version of the running service; the deployment ``version`` and the trace ``build``."""
REPROIT_COMMIT = "REPROIT_COMMIT"
"""Commit of the running service; when it is not a token, ``GITHUB_SHA`` is tried."""
GITHUB_SHA = "GITHUB_SHA"
"""Fallback commit, set by GitHub Actions."""
REPROIT_IMAGE_DIGEST = "REPROIT_IMAGE_DIGEST"
"""Container image digest; recorded in the determinism envelope when it is a token."""
REPROIT_FLUSH_INTERVAL_MS = "REPROIT_FLUSH_INTERVAL_MS"
"""Delay between a captured failure and its upload, in ms (default 3000, floor 100)."""
REPROIT_REQUEST_TIMEOUT_MS = "REPROIT_REQUEST_TIMEOUT_MS"
"""Timeout of one upload request, in ms (default 5000)."""
REPROIT_RETRY_LIMIT = "REPROIT_RETRY_LIMIT"
"""Retries after a failed upload (default 2, clamped to 0..5; 4xx is never retried)."""
REPROIT_CAPTURE_BUDGET = "REPROIT_CAPTURE_BUDGET"
"""Bytes of one failing operation uploaded whole as an artifact past the batch bounds (0: off)."""
REPROIT_CAPTURE_MAX_EVENTS = "REPROIT_CAPTURE_MAX_EVENTS"
"""Events one heavy capture holds (default 16384, clamped to 256..16384); past it, counted."""
REPROIT_SCAN = "REPROIT_SCAN"
"""``1`` enables scan mode: a trusted ``x-reproit-trace`` request header is honoured (D12)."""
REPROIT_SCAN_TOKEN = "REPROIT_SCAN_TOKEN"
"""When set, scan requests must also carry this value in ``x-reproit-scan-token`` (D12)."""
REPROIT_SECRET_VALUES = "REPROIT_SECRET_VALUES"
"""Secret values to scrub from every recorded string: comma separated, or a JSON array (D8)."""
REPROIT_EFFECTS_COMPLETE = "REPROIT_EFFECTS_COMPLETE"
"""``auto`` computes effectsComplete from the spans seen; ``never`` always reports false (D4)."""
REPROIT_DISABLED = "REPROIT_DISABLED"
"""``1`` turns reproit-otel off entirely: no processor, no recorders, no replay."""
REPROIT_REPLAY = "REPROIT_REPLAY"
"""Path of a capsule: the process replays it hermetically instead of capturing (section 7)."""
REPROIT_CI_CAPTURE = "REPROIT_CI_CAPTURE"
"""Exactly ``1`` turns on CI capture mode (section 8)."""
REPROIT_CI_SPOOL = "REPROIT_CI_SPOOL"
"""Directory CI capsules are spooled to (default ``.reproit/ci-spool``)."""
REPROIT_CI_SPOOL_MAX = "REPROIT_CI_SPOOL_MAX"
"""Total bytes the CI spool may hold (default 16 MiB, clamped to 4 KiB..64 MiB)."""
REPROIT_DEBUG_DUMP = "REPROIT_DEBUG_DUMP"
"""Directory where every finished operation's events are written as canonical JSON (debugging)."""
REPROIT_TOOLS = "REPROIT_TOOLS"
"""``record`` or ``replay`` switches invoke boundaries to fixtures; unset or ``off`` calls live."""
REPROIT_FIXTURES = "REPROIT_FIXTURES"
"""Directory of invoke-boundary fixtures (default ``.reproit/fixtures``)."""

DEFAULT_FIXTURES_DIR = ".reproit/fixtures"


class EffectsCompleteMode(str, enum.Enum):
    """How the ``effectsComplete`` flag of a finished operation is decided (D4)."""

    AUTO = "auto"
    """Computed: every CLIENT and database span of the operation has a recorded exchange."""
    NEVER = "never"
    """Always false: the service has persistent effects OpenTelemetry cannot see."""

    @classmethod
    def parse(cls, text: str) -> EffectsCompleteMode:
        """The mode named by ``text`` (case-insensitive); lists the valid values otherwise."""
        value = text.strip().lower()
        for mode in cls:
            if mode.value == value:
                return mode
        valid = ", ".join(mode.value for mode in cls)
        raise ConfigurationError(f"unknown mode {text!r}; expected one of: {valid}")


class ToolsMode(str, enum.Enum):
    """What invoke boundaries do with fixtures (``REPROIT_TOOLS``)."""

    OFF = "off"
    """Call live; fixtures are neither read nor written."""
    RECORD = "record"
    """Call live and write every recordable outcome to its fixture."""
    REPLAY = "replay"
    """Never call: serve fixtures, a missing one is a MissingFixtureError."""

    @classmethod
    def parse(cls, text: str) -> ToolsMode:
        """The mode named by ``text`` (case-insensitive, empty is ``off``)."""
        value = text.strip().lower() or "off"
        for mode in cls:
            if mode.value == value:
                return mode
        valid = ", ".join(mode.value for mode in cls)
        raise ConfigurationError(
            f"{REPROIT_TOOLS}={text!r} is not a mode; expected one of: {valid}"
        )


@dataclass(frozen=True)
class Setting:
    """One row of the configuration table."""

    attribute: str
    """Field name on :class:`ReproitConfig`."""
    env: str
    """Environment variable read."""
    default: Any
    """Value when the variable is absent (or empty, for text settings)."""
    parse: Callable[[str], Any]
    """Turns the raw text into the value; raises :class:`ConfigurationError` when unusable."""
    doc: str
    """One line for the configuration reference."""
    fallbacks: tuple[str, ...] = ()
    """Further variables tried in order when ``env`` gives no usable value."""
    secret: bool = False
    """Never printed (``repr``, docs show no value, log lines do not echo it)."""


def _row(
    attribute: str,
    env: str,
    default: Any,
    parse: Callable[[str], Any],
    doc: str,
    *,
    fallbacks: tuple[str, ...] = (),
    secret: bool = False,
) -> Setting:
    return Setting(attribute, env, default, parse, doc, fallbacks, secret)


SETTINGS: tuple[Setting, ...] = (
    _row(
        "endpoint",
        REPROIT_ENDPOINT,
        None,
        parse_text,
        "URL the capture batches are POSTed to, used verbatim "
        "(e.g. `http://127.0.0.1:8765/v1/capture-batches`).",
    ),
    _row(
        "api_key",
        REPROIT_API_KEY,
        None,
        parse_secret_text,
        "API key sent as `Authorization: Bearer <key>` with every upload.",
        secret=True,
    ),
    _row(
        "app_id",
        REPROIT_APP_ID,
        None,
        parse_text,
        "Application id; becomes the batch `projectId`. Must be a token.",
    ),
    _row(
        "build",
        REPROIT_BUILD,
        None,
        parse_text,
        "Build or version of the service: deployment `version` and trace `build`.",
    ),
    _row(
        "commit",
        REPROIT_COMMIT,
        None,
        parse_token,
        "Commit of the service: the first token of `REPROIT_COMMIT`, `GITHUB_SHA`.",
        fallbacks=(GITHUB_SHA,),
    ),
    _row(
        "image_digest",
        REPROIT_IMAGE_DIGEST,
        None,
        parse_text,
        "Container image digest, kept in the determinism envelope when it is a token.",
    ),
    _row(
        "flush_interval_ms",
        REPROIT_FLUSH_INTERVAL_MS,
        3000,
        at_least(100),
        "Delay in ms between a captured failure and its upload (floor 100).",
    ),
    _row(
        "request_timeout_ms",
        REPROIT_REQUEST_TIMEOUT_MS,
        5000,
        at_least(1),
        "Timeout in ms of one upload request.",
    ),
    _row(
        "retry_limit",
        REPROIT_RETRY_LIMIT,
        2,
        clamped(0, 5),
        "Retries after a failed upload, clamped to 0..5; a 4xx answer is never retried.",
    ),
    _row(
        "capture_budget",
        REPROIT_CAPTURE_BUDGET,
        CAPTURE_BUDGET_DEFAULT,
        clamped(0, CAPTURE_BUDGET_CEILING),
        "Bytes (canonical JSON of the capsule) up to which a failing operation too big for one "
        "batch is still uploaded whole, as a content-addressed artifact; `0` turns it off "
        "(clamped to 0..64 MiB).",
    ),
    _row(
        "capture_max_events",
        REPROIT_CAPTURE_MAX_EVENTS,
        CAPTURE_MAX_EVENTS_CEILING,
        clamped(CAPTURE_MAX_EVENTS_FLOOR, CAPTURE_MAX_EVENTS_CEILING),
        "Events (start, effects, return) one failing operation may hold while the capture "
        "budget is on; later exchanges are counted, not kept, and the batch is `partial` "
        "(clamped to 256..16384).",
    ),
    _row(
        "scan",
        REPROIT_SCAN,
        False,
        parse_flag,
        "`1` honours a trusted `x-reproit-trace` request header (scan mode, D12).",
    ),
    _row(
        "scan_token",
        REPROIT_SCAN_TOKEN,
        None,
        parse_secret_text,
        "When set, scan requests must also carry this value in `x-reproit-scan-token`.",
        secret=True,
    ),
    _row(
        "secret_values",
        REPROIT_SECRET_VALUES,
        (),
        parse_secret_values,
        "Values scrubbed from every recorded string: comma separated, or a JSON array of "
        "strings (D8).",
        secret=True,
    ),
    _row(
        "effects_complete",
        REPROIT_EFFECTS_COMPLETE,
        EffectsCompleteMode.AUTO,
        EffectsCompleteMode.parse,
        "`auto` computes effectsComplete from the spans seen; `never` always reports false (D4).",
    ),
    _row(
        "disabled",
        REPROIT_DISABLED,
        False,
        parse_flag,
        "`1` turns reproit-otel off: no processor, no recorders, no replay.",
    ),
    _row(
        "replay",
        REPROIT_REPLAY,
        None,
        parse_path,
        "Path of a capsule: the process replays it hermetically instead of capturing.",
    ),
    _row(
        "ci_capture",
        REPROIT_CI_CAPTURE,
        False,
        parse_exactly_one,
        "Exactly `1` turns on CI capture mode.",
    ),
    _row(
        "ci_spool",
        REPROIT_CI_SPOOL,
        ".reproit/ci-spool",
        parse_path,
        "Directory CI capsules are spooled to.",
    ),
    _row(
        "ci_spool_max",
        REPROIT_CI_SPOOL_MAX,
        SPOOL_MAX_DEFAULT,
        parse_spool_max,
        "Total bytes the CI spool may hold, clamped to 4096..67108864.",
    ),
    _row(
        "debug_dump",
        REPROIT_DEBUG_DUMP,
        None,
        parse_path,
        "Directory where each finished operation's events are written as a canonical JSON "
        "file named `<traceId>.json` (debugging aid).",
    ),
    _row(
        "tools",
        REPROIT_TOOLS,
        ToolsMode.OFF,
        ToolsMode.parse,
        "Invoke boundaries: `record` writes each outcome to a fixture, `replay` serves "
        "fixtures and never calls, `off` calls live.",
    ),
    _row(
        "fixtures",
        REPROIT_FIXTURES,
        DEFAULT_FIXTURES_DIR,
        parse_path,
        "Directory of invoke-boundary fixtures.",
    ),
)
"""The configuration table, in documentation order."""


@dataclass(frozen=True)
class ReproitConfig:
    """The settings in effect, read once (:func:`load_config`). Frozen."""

    endpoint: str | None = None
    api_key: str | None = field(default=None, repr=False)
    app_id: str | None = None
    build: str | None = None
    commit: str | None = None
    image_digest: str | None = None
    flush_interval_ms: int = 3000
    request_timeout_ms: int = 5000
    retry_limit: int = 2
    capture_budget: int = CAPTURE_BUDGET_DEFAULT
    capture_max_events: int = CAPTURE_MAX_EVENTS_CEILING
    scan: bool = False
    scan_token: str | None = field(default=None, repr=False)
    secret_values: tuple[str, ...] = field(default=(), repr=False)
    effects_complete: EffectsCompleteMode = EffectsCompleteMode.AUTO
    disabled: bool = False
    replay: str | None = None
    ci_capture: bool = False
    ci_spool: str = ".reproit/ci-spool"
    ci_spool_max: int = SPOOL_MAX_DEFAULT
    debug_dump: str | None = None
    tools: ToolsMode = ToolsMode.OFF
    fixtures: str = DEFAULT_FIXTURES_DIR
    problems: tuple[str, ...] = ()
    """What made the configuration unusable (then ``disabled`` is true)."""

    @property
    def capture_problem(self) -> str | None:
        """Why uploads are off (section 5.1), or None when they can run."""
        if self.disabled:
            return "reproit-otel is disabled"
        if not self.endpoint:
            return f"{REPROIT_ENDPOINT} is not set"
        if not self.api_key:
            return f"{REPROIT_API_KEY} is not set"
        if not self.app_id or not is_token(self.app_id):
            return f"{REPROIT_APP_ID} must be a token (got {self.app_id!r})"
        if self.build is not None and not is_token(self.build):
            return f"{REPROIT_BUILD} must be a token (got {self.build!r})"
        return None

    @property
    def capture_enabled(self) -> bool:
        """True when failing operations can be uploaded."""
        return self.capture_problem is None

    @property
    def usable_image_digest(self) -> str | None:
        """``image_digest`` when it is a token (section 5.6), else None."""
        digest = self.image_digest
        return digest if digest is not None and is_token(digest) else None


def _read(setting: Setting, environ: Mapping[str, str]) -> Any:
    names = (setting.env, *setting.fallbacks)
    first_error: ConfigurationError | None = None
    for name in names:
        raw = environ.get(name)
        if raw is None:
            continue
        try:
            value = setting.parse(raw)
        except ConfigurationError as exc:
            # A fallback chain takes the first usable value (REPROIT_COMMIT then GITHUB_SHA).
            first_error = first_error or exc
            continue
        if value is None and setting.fallbacks:
            continue
        return setting.default if value is None else value
    if first_error is not None and not setting.fallbacks:
        raise first_error
    return setting.default


def read_setting(env: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of one setting of the table, read now (default ``os.environ``).

    For settings a component must see change at run time (the fixture mode, which a test
    may switch). Raises :class:`ConfigurationError` when the value is unusable.
    """
    for setting in SETTINGS:
        if setting.env == env:
            return _read(setting, os.environ if environ is None else environ)
    raise KeyError(f"{env} is not a reproit-otel setting")


def read_config(environ: Mapping[str, str] | None = None) -> ReproitConfig:
    """Read every setting from ``environ`` (default ``os.environ``).

    Raises :class:`ConfigurationError` naming the variable, the value's problem and what
    is expected, for the first unusable setting.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        try:
            values[setting.attribute] = _read(setting, env)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{setting.env}: {exc}") from None
    return ReproitConfig(**values)


def given_secret_values(given: Any) -> tuple[str, ...]:
    """The secret values a replay instrumentor was given (``instrument(secret_values=...)``),
    else the configured ones (``REPROIT_SECRET_VALUES``)."""
    return tuple(load_config().secret_values if given is None else given)


def load_config(environ: Mapping[str, str] | None = None) -> ReproitConfig:
    """Like :func:`read_config`, but never raises.

    Unusable settings produce a disabled configuration listing the ``problems``; one log line
    (warning) says what was wrong and that reproit-otel is off.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems: list[str] = []
    for setting in SETTINGS:
        try:
            values[setting.attribute] = _read(setting, env)
        except ConfigurationError as exc:
            problems.append(f"{setting.env}: {exc}")
            values[setting.attribute] = setting.default
    if problems:
        values["disabled"] = True
        values["problems"] = tuple(problems)
        _log.warning(
            "reproit-otel is disabled because its configuration is unusable (%s); "
            "fix the variable(s) and restart, the application itself is unaffected",
            "; ".join(problems),
        )
    return ReproitConfig(**values)


def _default_text(setting: Setting) -> str:
    default = setting.default
    if default is None or default == ():
        return "unset"
    if isinstance(default, bool):
        return "`1`" if default else "`0`"
    if isinstance(default, enum.Enum):
        return f"`{default.value}`"
    return f"`{default}`"


def render_markdown() -> str:
    """The configuration reference as a Markdown table (``docs/configuration.md`` embeds it)."""
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for setting in SETTINGS:
        env = f"`{setting.env}`"
        if setting.fallbacks:
            env += " (then " + ", ".join(f"`{name}`" for name in setting.fallbacks) + ")"
        lines.append(f"| {env} | {_default_text(setting)} | {setting.doc} |")
    return "\n".join(lines) + "\n"
