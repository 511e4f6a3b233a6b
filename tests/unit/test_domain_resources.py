"""Block math: a top-up or a release target is a whole number of blocks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serenity_allocator.domain.model import round_up_to_block

# ---- block math ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("units", "block", "expected"),
    [(1, 100, 100), (100, 100, 100), (101, 100, 200), (250, 100, 300), (3, 1, 3)],
)
def test_round_up_to_block_rounds_up_to_the_next_whole_block(
    units: int, block: int, expected: int
) -> None:
    # Given a unit count and a block size / When rounded / Then the next whole block
    assert round_up_to_block(units, block) == expected


@pytest.mark.parametrize("units", [0, -1, -250])
def test_round_up_to_block_zero_or_negative_gives_zero(units: int) -> None:
    # Given no (or negative) units / When rounded / Then nothing is asked for
    assert round_up_to_block(units, 100) == 0


@settings(max_examples=200, deadline=None)
@given(units=st.integers(min_value=1, max_value=10**9), block=st.integers(1, 10_000))
def test_round_up_to_block_is_the_smallest_covering_multiple(units: int, block: int) -> None:
    # Given any positive count and block / When rounded
    rounded = round_up_to_block(units, block)

    # Then it is a whole number of blocks, covers the units, and wastes less than one block
    assert rounded % block == 0
    assert units <= rounded < units + block
