"""The cross-SDK behaviour vectors, ``capture-behavior-v1.json``, read at test time.

Groups run here (role ``capture``): ``constants``, ``bounds`` (``bounds.cases`` and
``bounds.atLimitSha256``), ``headers`` (``headers.cases``), ``redaction.secretParts``,
``redaction.typeCases``, ``redaction.foldingCases``, ``redaction.nestingCases``,
``redaction.structureCases``, ``causalRedaction`` (``causalRedaction.foldingCases``, see its
test for how it applies to a capture SDK), ``encoding`` and ``vocabularies``.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import pytest

from reproit_otel.redaction.core import (
    PLACEHOLDER_KEY,
    SECRET_PARTS,
    is_secret_key,
    placeholder,
    redact,
)
from reproit_otel.wire.bounds import (
    MAX_BODY_BYTES,
    MAX_HEADERS,
    MAX_PG_ROWS,
    bounded_body,
    bounded_headers,
)
from reproit_otel.wire.canonical import canonical_json, canonical_json_bytes
from tests.vectors import d13_secret, load_vector, with_d13

VECTORS: dict[str, Any] = load_vector("capture-behavior-v1.json")


def _ids(cases: list[dict[str, Any]], key: str = "name") -> list[str]:
    return [str(case.get(key, index)) for index, case in enumerate(cases)]


# ------------------------------------------------------------------------------ constants


def test_constants() -> None:
    constants = VECTORS["constants"]
    assert constants["maxExchangeBodyBytes"] == MAX_BODY_BYTES
    assert constants["maxExchangeHeaders"] == MAX_HEADERS
    assert constants["maxPgRows"] == MAX_PG_ROWS
    assert constants["placeholderKey"] == PLACEHOLDER_KEY
    # divergenceMarker is the replay layer's constant; its tests pin the marker line.
    assert constants["divergenceMarker"] == "REPROIT:DIVERGENCE "


# --------------------------------------------------------------------------------- bounds

BOUNDS_CASES: list[dict[str, Any]] = VECTORS["bounds"]["cases"]


def _expand(value: Any) -> Any:
    """``{"repeat": [unit, count]}`` stands for the unit repeated count times."""
    if isinstance(value, dict) and set(value) == {"repeat"}:
        unit, count = value["repeat"]
        return unit * count
    return value


@pytest.mark.parametrize("case", BOUNDS_CASES, ids=_ids(BOUNDS_CASES))
def test_bounds_cases(case: dict[str, Any]) -> None:
    case_input = case["input"]
    if "bodyRepeat" in case_input:
        unit, count = case_input["bodyRepeat"]
        body = unit * count
    else:
        body = case_input["body"]
    expected = {key: _expand(value) for key, value in case["expect"].items()}
    assert bounded_body(body, case_input["contentType"]) == expected


def test_bounds_at_limit_sha256() -> None:
    """``bounds.atLimitSha256`` is the identity of the at-limit body (8192 ``a``)."""
    at_limit = next(case for case in BOUNDS_CASES if case["name"] == "atLimit")
    unit, count = at_limit["input"]["bodyRepeat"]
    body = unit * count
    assert count == MAX_BODY_BYTES
    assert bounded_body(body) == {"body": body}
    assert hashlib.sha256(body.encode("utf-8")).hexdigest() == VECTORS["bounds"]["atLimitSha256"]
    # One byte more and that identity is all that is kept.
    over = bounded_body(body + unit)
    assert over["truncated"] is True and over["bodyBytes"] == MAX_BODY_BYTES + 1


# -------------------------------------------------------------------------------- headers

HEADER_CASES: list[dict[str, Any]] = VECTORS["headers"]["cases"]


@pytest.mark.parametrize("case", HEADER_CASES, ids=_ids(HEADER_CASES))
def test_headers_cases(case: dict[str, Any]) -> None:
    if "inputGenerated" in case:
        generated = case["inputGenerated"]
        names = [generated["namePattern"] % index for index in range(generated["headerCount"])]
        expect = case["expect"]
        results = []
        for seed in range(5):  # scrambled differently each time, identical result each time
            scrambled = names[:]
            random.Random(seed).shuffle(scrambled)
            table = bounded_headers(dict.fromkeys(scrambled, generated["value"]))["headers"]
            assert len(table) == expect["headerCount"]
            assert min(table) == expect["firstName"]
            assert max(table) == expect["lastName"]
            assert list(table) == sorted(table)
            results.append(table)
        assert all(result == results[0] for result in results)
    else:
        assert bounded_headers(case["input"]["headers"]) == case["expect"]


# ------------------------------------------------------------------------------ redaction

REDACTION: dict[str, Any] = VECTORS["redaction"]


def test_redaction_secretParts() -> None:
    assert list(SECRET_PARTS) == REDACTION["secretParts"]
    shape = REDACTION["placeholderShape"]
    assert set(shape) == set(placeholder("x")) == {PLACEHOLDER_KEY}
    assert set(shape[PLACEHOLDER_KEY]) == set(placeholder("x")[PLACEHOLDER_KEY])


@pytest.mark.parametrize("case", REDACTION["typeCases"], ids=_ids(REDACTION["typeCases"]))
def test_redaction_typeCases(case: dict[str, Any]) -> None:
    expected, _ = with_d13(case["expect"], placeholder)  # decision D13, by the documented list
    assert redact(case["input"]) == expected
    assert canonical_json(redact(case["input"])) == canonical_json(expected)


@pytest.mark.parametrize(
    "case", REDACTION["foldingCases"], ids=_ids(REDACTION["foldingCases"], "field")
)
def test_redaction_foldingCases(case: dict[str, Any]) -> None:
    # Decision D13: the names of the documented list are secret whatever the vector pins.
    assert is_secret_key(case["field"]) is (case["secret"] or d13_secret(case["field"]))


@pytest.mark.parametrize("case", REDACTION["nestingCases"], ids=_ids(REDACTION["nestingCases"]))
def test_redaction_nestingCases(case: dict[str, Any]) -> None:
    assert redact(case["input"]) == with_d13(case["expect"], placeholder)[0]


@pytest.mark.parametrize("case", REDACTION["structureCases"], ids=_ids(REDACTION["structureCases"]))
def test_redaction_structureCases(case: dict[str, Any]) -> None:
    expected, _ = with_d13(case["expect"], placeholder)  # decision D13, by the documented list
    assert redact(case["input"]) == expected
    assert canonical_json(redact(case["input"])) == canonical_json(expected)


# ------------------------------------------------------------------------ causalRedaction

CAUSAL: dict[str, Any] = VECTORS["causalRedaction"]
_FOLD = re.compile(r"[^A-Za-z0-9]+")


def _runner_is_secret(name: str) -> bool:
    """The runner-wire predicate the vector describes: same folding, its own parts."""
    folded = _FOLD.sub("", name).lower()
    return any(part in folded for part in CAUSAL["secretParts"])


@pytest.mark.parametrize("case", CAUSAL["foldingCases"], ids=_ids(CAUSAL["foldingCases"], "field"))
def test_causalRedaction_foldingCases(case: dict[str, Any]) -> None:
    """``causalRedaction`` pins the frozen runner wire, which reproit-otel does not speak (it
    records capture batches with ``$reproit`` objects, never ``<reproit:secret>`` strings).
    What applies to a capture SDK is the documented relation between the two predicates:
    the runner predicate gives the vector's answer, and ours agrees with it on every name
    except those whose fold contains ``idempotencykey`` (capture-only on purpose)."""
    field = case["field"]
    assert _runner_is_secret(field) is case["secret"]
    capture_only = "idempotencykey" in _FOLD.sub("", field).lower()
    # Decision D13: the names of the documented list are secret on the capture wire.
    assert is_secret_key(field) is (case["secret"] or capture_only or d13_secret(field))
    if capture_only:
        assert case["secret"] is False and is_secret_key(field) is True


def test_causalRedaction_parts_differ_by_exactly_idempotencykey() -> None:
    assert list(SECRET_PARTS) == [*CAUSAL["secretParts"], "idempotencykey"]
    assert CAUSAL["placeholder"] == "<reproit:secret>"
    assert "<reproit:secret>" not in canonical_json(redact({"password": "p", "n": [{"token": 1}]}))


# ------------------------------------------------------------------------------- encoding


def test_encoding() -> None:
    encoding = VECTORS["encoding"]
    assert encoding["byteOrderMark"] == "forbidden"
    first_byte = int(encoding["firstByteMustBe"], 16)
    written = canonical_json_bytes(
        redact({"format": "reproit-backend-capture", "token": "t", "note": "\ufeffé"})
    )
    assert written[0] == first_byte
    assert not written.startswith(b"\xef\xbb\xbf")
    written.decode("utf-8")  # UTF-8 throughout


# --------------------------------------------------------------------------- vocabularies


def test_vocabularies() -> None:
    """Informational for a backend SDK: we speak the body vocabulary (placeholder objects),
    for headers too, and the structured ``REPROIT:DIVERGENCE`` marker only."""
    vocabulary = VECTORS["vocabularies"]
    redaction = vocabulary["redaction"]
    assert redaction["bodyPlaceholderKey"] == PLACEHOLDER_KEY
    assert redaction["bodyPlaceholderIsAnObject"] is True
    assert redaction["headerPlaceholderIsAString"] is True
    recorded = redact(bounded_headers({"Cookie": "a=b"}))
    assert recorded == {"headers": {"cookie": placeholder("a=b")}}
    assert redaction["headerPlaceholder"] not in canonical_json(recorded)
    markers = vocabulary["divergenceMarkers"]
    assert markers["structured"] == VECTORS["constants"]["divergenceMarker"]
    assert markers["runnerContract"] == "CAPSULE:MISS"
