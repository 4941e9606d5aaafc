"""Every ``REPROIT_*`` variable reproit-otel knows: the settings table and the tools' own.

The capture pipeline's settings are :data:`reproit_otel.config.SETTINGS`. Other variables are
read by one tool or mode each (the ingest server, the occurrence commands, the invoke
boundaries, the test suite); they are the rows of :data:`OTHER_VARIABLES`. Both tables are
rendered into ``docs/configuration.md`` (:func:`render_other_markdown` for this one, between
``<!-- variables:begin -->`` and ``<!-- variables:end -->``) and ``reproit-otel doctor`` takes
its list of known names from :func:`known_variables`, so the three cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OTHER_VARIABLES", "Variable", "known_variables", "render_other_markdown"]


@dataclass(frozen=True)
class Variable:
    """One environment variable outside the settings table."""

    name: str
    read_by: str
    """Which tool or mode reads it (Markdown)."""
    meaning: str
    """One line for the reference (Markdown)."""


OTHER_VARIABLES: tuple[Variable, ...] = (
    Variable(
        "REPROIT_TOOLS",
        "invoke boundaries",
        "`record` runs every boundary call and writes its outcome to a fixture; `replay` never "
        "runs the call and serves the fixture (a missing one raises `MissingFixtureError`); "
        "unset or `off` calls live. See [boundary.md](boundary.md).",
    ),
    Variable(
        "REPROIT_FIXTURES",
        "invoke boundaries, `reproit-otel doctor`",
        "Where fixtures live (default `.reproit/fixtures`).",
    ),
    Variable(
        "REPROIT_INGEST_DB",
        "`reproit-otel serve`",
        "The store when `--db` is not given (default `sqlite:///reproit-ingest.db`).",
    ),
    Variable(
        "REPROIT_INGEST_API_KEYS",
        "`reproit-otel serve`",
        "Accepted bearer keys, comma separated, when no `--api-key` is given; else "
        "`REPROIT_API_KEY` is the one key.",
    ),
    Variable(
        "REPROIT_INGEST_READ_KEYS",
        "`reproit-otel serve`",
        "Read-only keys, comma separated, when no `--read-key` is given.",
    ),
    Variable(
        "REPROIT_INGEST_REPLAY_EXEC",
        "`reproit-otel serve`",
        "The boot command shown in the web page's replay line, when no `--replay-exec` is given.",
    ),
    Variable(
        "REPROIT_INGEST_PUBLIC_URL",
        "`reproit-otel serve`",
        "The address clients reach the ingest at, named by the web page's replay line, when no "
        "`--public-url` is given (default: the address it listens on).",
    ),
    Variable(
        "REPROIT_INGEST_URL",
        "`reproit-otel list`, `show`, `pull`, `check`",
        "The ingest when no `--ingest` is given (default `http://127.0.0.1:8765`).",
    ),
    Variable(
        "REPROIT_API_KEY",
        "`reproit-otel list`, `show`, `pull`, `check`",
        "The bearer key when no `--api-key` is given (the same variable the SDK uploads with).",
    ),
    Variable(
        "REPROIT_STRICT_INTERNAL",
        "every hook",
        "`1` makes a defect inside reproit-otel raise instead of being logged and swallowed. "
        "For reproit-otel's own test suite; never set it in production.",
    ),
    Variable(
        "REPROIT_DEMO_RUN",
        "`reproit-otel demo`",
        "Set by the demo, to its work folder, in the environment of every process it starts, "
        "so a leftover process can be found. Not read by anything.",
    ),
    Variable(
        "REPROIT_VECTORS_DIR",
        "reproit-otel's test suite",
        "Another folder of contract vectors to test against instead of `tests/vectors/`.",
    ),
    Variable(
        "REPROIT_TEST_PG_DSN",
        "reproit-otel's test suite",
        "A running PostgreSQL to test against instead of a throwaway one the suite starts.",
    ),
)
"""Variables read outside the capture pipeline, in documentation order."""


def known_variables() -> frozenset[str]:
    """Every ``REPROIT_*`` name reproit-otel reads or documents."""
    from reproit_otel.config import SETTINGS

    return frozenset(
        {setting.env for setting in SETTINGS}
        | {n for setting in SETTINGS for n in setting.fallbacks if n.startswith("REPROIT_")}
        | {variable.name for variable in OTHER_VARIABLES}
    )


def render_other_markdown() -> str:
    """The table of :data:`OTHER_VARIABLES` (``docs/configuration.md`` embeds it)."""
    lines = ["| Variable | Read by | Meaning |", "|---|---|---|"]
    lines += [f"| `{v.name}` | {v.read_by} | {v.meaning} |" for v in OTHER_VARIABLES]
    return "\n".join(lines) + "\n"
