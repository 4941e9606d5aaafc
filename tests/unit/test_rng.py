"""The replay random stream (PROTOCOL 7.7, decision D2) against ``rng-s.json``.

Each case gives a ``replaySeed`` and the first draws of the standard xorshift64* stream, as
53-bit integers and as floats in [0, 1); both must match exactly.
"""

from __future__ import annotations

from typing import Any

import pytest

from reproit_otel.wire.rng import ReplayRNG, parse_seed
from tests.vectors import load_vector

RNG_CASES: list[dict[str, Any]] = load_vector("rng-s.json")


@pytest.mark.parametrize("case", RNG_CASES, ids=[c["name"] for c in RNG_CASES])
def test_rng_s_stream(case: dict[str, Any]) -> None:
    seed = case["input"]["replaySeed"]
    integers = ReplayRNG(seed)
    assert [integers.draw53() for _ in case["expect"]["draws53"]] == case["expect"]["draws53"]
    floats = ReplayRNG(seed)
    assert [floats.random() for _ in case["expect"]["draws"]] == case["expect"]["draws"]


def test_seed_parsing_pads_cuts_and_sets_the_low_bit() -> None:
    assert parse_seed("abc") == 0xABC0000000000000 | 1
    assert parse_seed("deadbeefcafebabe0011") == 0xDEADBEEFCAFEBABF
    assert parse_seed("0000000000000000") == 1


@pytest.mark.parametrize("seed", ["", "xyz", " 0123", "0x12", "-1", "12_34"])
def test_invalid_seed_is_refused(seed: str) -> None:
    with pytest.raises(ValueError, match="not hexadecimal"):
        ReplayRNG(seed)


def test_getrandbits_joins_32_bit_slices_and_keeps_the_top_bits() -> None:
    slices = ReplayRNG("00ff00ff00ff00ff")
    first = int(slices.random() * 2**32)
    second = int(slices.random() * 2**32)
    bits = ReplayRNG("00ff00ff00ff00ff")
    assert bits.getrandbits(40) == ((first << 32) | second) >> 24
    assert ReplayRNG("00ff00ff00ff00ff").getrandbits(32) == first
    assert ReplayRNG("00ff00ff00ff00ff").getrandbits(0) == 0


def test_random_api_draws_from_the_stream_and_ignores_reseeding() -> None:
    reference = ReplayRNG("00ff00ff00ff00ff")
    expected = [reference.random() for _ in range(3)]
    rng = ReplayRNG("00ff00ff00ff00ff")
    rng.seed(12345)
    assert [rng.random() for _ in range(3)] == expected
    state = rng.getstate()
    drawn = [rng.randint(1, 6), rng.choice("abcdef"), rng.uniform(0, 1)]
    rng.setstate(state)
    assert [rng.randint(1, 6), rng.choice("abcdef"), rng.uniform(0, 1)] == drawn
    items = list(range(10))
    rng.shuffle(items)
    assert sorted(items) == list(range(10))
