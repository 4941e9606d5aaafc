"""The psycopg2 recorder's effect kind is ``effect_kind`` of the statement, computed cheaply."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from reproit_otel.instrumentation import _pg_record
from reproit_otel.instrumentation._pg_common import effect_kind

# Letters of the read heads in both cases, JavaScript white space and look-alikes (characters
# whose upper case is an ASCII letter, Python-only white space), so every branch is reached.
ALPHABET = "SELECTHOWselecthow \t\n\u3000\ufeff\u2028\x1c\x85\u017f\u1e97\u1e96ab;("
TEXTS = st.text(alphabet=ALPHABET, max_size=12)


class _Recorder:
    counts_held = False  # as ExchangeRecorder: no capture budget

    def __init__(self) -> None:
        self.effects: list[str] = []

    def finish_deferred(self, effect: str, build: Any, held: int = 0) -> None:
        self.effects.append(effect)


@given(TEXTS)
def test_the_recorded_effect_is_effect_kind_of_the_text(text: str) -> None:
    statement = _pg_record._statement(text, None)
    recorder = _Recorder()
    _pg_record._finish(recorder, statement)  # type: ignore[arg-type]
    assert recorder.effects == [effect_kind(text)]


def test_heads_that_need_trimming_or_case_mapping() -> None:
    texts = [
        "select 1",
        "SeLeCt 1",
        "show all",
        "  SELECT 1",
        "\ufeffSHOW x",
        "\u3000select",
        "\u017felect 1",  # LATIN SMALL LETTER LONG S upper-cases to S
        "SELEC\u1e97",  # upper-cases to "SELECT" and a combining mark
        "SHOW",
        "",
        "INSERT INTO t VALUES (1)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
    ]
    kinds = []
    for text in texts:
        recorder = _Recorder()
        _pg_record._finish(recorder, _pg_record._statement(text, None))  # type: ignore[arg-type]
        kinds.append(recorder.effects[0])
    assert kinds == [effect_kind(text) for text in texts]
    assert kinds == [
        "read",
        "read",
        "read",
        "read",
        "read",
        "read",
        "read",
        "read",
        "read",
        "write",
        "write",
        "write",
    ]
