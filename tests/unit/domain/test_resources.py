"""Block math: a top-up or a release target is a whole number of blocks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serenity_allocator.domain.model import DimensionUsage, PromptTiers, round_up_to_block

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


@pytest.mark.parametrize("block", [0, -100])
def test_round_up_to_block_refuses_a_block_below_one_by_name(block: int) -> None:
    with pytest.raises(ValueError) as caught:
        round_up_to_block(250, block)
    assert str(caught.value) == "block must be a positive whole number"


# ---- the tiered prompt shape ----------------------------------------------------------------


def _tiers(daily_free: int, weekly_free: int) -> PromptTiers:
    return PromptTiers(
        daily=DimensionUsage(used=100, total=100 + daily_free),
        weekly=DimensionUsage(used=700, total=700 + weekly_free),
    )


def test_prompt_tiers_tightest_is_the_tier_with_fewer_free_prompts_daily_on_a_tie() -> None:
    assert _tiers(daily_free=50, weekly_free=20).tightest().total == 720
    assert _tiers(daily_free=20, weekly_free=50).tightest().total == 120
    assert _tiers(daily_free=30, weekly_free=30).tightest().total == 130
