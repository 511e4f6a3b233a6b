"""The sizing rule (ADR 0027): fair headroom from the pool, refill ahead, surplus back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serenity_allocator.domain.model import AiResources, Blocks, Dimension, DimensionUsage, Totals
from serenity_allocator.domain.sizing import (
    PoolShare,
    demand_of,
    fair_headroom,
    is_tight,
    needs_pool,
    plan_sizing,
)

BLOCKS = Blocks()  # 1 project, 100 prompts


def _child(prompts: tuple[int, int], projects: tuple[int, int] = (1, 5)) -> AiResources:
    """A child from (used, total) per dimension."""
    return AiResources(
        projects=DimensionUsage(used=projects[0], total=projects[1]),
        prompts=DimensionUsage(used=prompts[0], total=prompts[1]),
    )


def _share(prompts: int, children: int = 1, projects: int = 1_000) -> PoolShare:
    return PoolShare(free=Totals(projects=projects, prompts=prompts), children=children)


@pytest.mark.parametrize(
    ("free", "children", "headroom"),
    [
        (100_000, 1, 100_000),  # a level of 4 blocks or more: the level itself
        (4_000, 10, 400),  # exactly 4 blocks of level: a pool with room
        (2_000, 10, 25),  # 200 of level: 200² / 1600
        (400, 10, 1),  # the gold pool's 40 of level: 40² / 1600
        (90, 10, 0),  # a level (9) below the 10 the child lacks: exact
    ],
)
def test_fair_headroom_is_the_level_on_a_pool_with_room_and_shrinks_with_its_square(
    free: int, children: int, headroom: int
) -> None:
    # Given a child that lacks 10 prompts, from a pool with ``free`` among ``children``
    share = _share(free + 10, children)

    # Then its headroom is the fair level, or its square's share of four blocks when tight
    assert fair_headroom(share, 10, Dimension.PROMPTS, BLOCKS) == headroom


def test_a_short_child_of_a_pool_with_room_rises_to_its_need_plus_four_blocks() -> None:
    # Given a child using all of its 100 prompts, a pool with room, 10 more needed
    plan = plan_sizing(_child((100, 100)), Totals(projects=1, prompts=110), BLOCKS, _share(9_000))

    # Then 110 + four blocks of headroom: 510 (projects keep their 5)
    assert (plan.target, plan.sizing) == (Totals(projects=5, prompts=510), "topped-up")


def test_a_short_child_of_a_tight_pool_rises_to_its_need_plus_half_a_block_in_blocks() -> None:
    # Given the same child under a pool whose level is 399 (one under four blocks: tight, fair
    # headroom 399² / 1600 = 99), and the same under a level of exactly 400 (room)
    tight = plan_sizing(_child((100, 100)), Totals(projects=1, prompts=110), BLOCKS, _share(409))
    roomy = plan_sizing(_child((100, 100)), Totals(projects=1, prompts=110), BLOCKS, _share(410))

    # Then the tight pool keeps the block-rounded top-up (110 + 50 up to whole blocks: 200, under
    # its 99 of fair headroom); one more unit of level gives the four blocks: 510
    assert (tight.target.prompts, tight.sizing) == (200, "topped-up")
    assert (roomy.target.prompts, roomy.sizing) == (510, "topped-up")


@pytest.mark.parametrize(
    ("required", "target"),
    [
        (250, 650),  # asks 150, under four blocks: 250 + 400
        (600, 1_100),  # asks 500, more than four blocks: the demand wins, 600 + 500
    ],
)
def test_a_request_keeps_four_blocks_or_as_much_again_as_it_asked_when_that_is_more(
    required: int, target: int
) -> None:
    # Given a child using all of its 100 prompts and a request of ``required - 100`` at once
    plan = plan_sizing(
        _child((100, 100)), Totals(projects=1, prompts=required), BLOCKS, _share(9_000)
    )

    # Then the child holds what it asked plus the larger of four blocks and what it asked
    assert (plan.target.prompts, plan.sizing) == (target, "topped-up")


def test_max_min_fairness_a_short_pool_serves_every_child_its_exact_need() -> None:
    # Given a pool with 300 prompts free among 10 children, each using all it holds, and each
    # asking for 30 in turn (demand 300: exactly what is free)
    free, targets = 300, []
    for _ in range(10):
        share = _share(free, children=10)
        plan = plan_sizing(_child((100, 100)), Totals(projects=1, prompts=130), BLOCKS, share)
        free -= plan.target.prompts - 100
        targets.append(plan.target.prompts)

    # Then every child is carved exactly its need: what is left never covers every child's
    # lack, so nobody holds headroom another child would be refused for (blocks of 100
    # would have served three and refused seven)
    assert targets == [130] * 10
    assert free == 0


def test_on_a_pool_with_room_every_child_gets_the_same_headroom_within_the_level() -> None:
    # Given a pool with 8,000 free among 10 children (level 799), two children asking 10
    share = _share(8_000, children=10)
    small = plan_sizing(_child((100, 100)), Totals(projects=1, prompts=110), BLOCKS, share)
    large = plan_sizing(_child((4_000, 4_000)), Totals(projects=1, prompts=4_010), BLOCKS, share)

    # Then each gets its need plus four blocks (under the level), whatever it already uses:
    # the share is of what is free, not of what was used
    assert (small.target.prompts - 110, large.target.prompts - 4_010) == (400, 400)


def test_a_need_that_fits_under_two_blocks_is_refilled_ahead_from_a_pool_with_room() -> None:
    # Given a child with 120 of 150 used and a request of 10 (20 left, under two blocks)
    plan = plan_sizing(_child((120, 150)), Totals(projects=1, prompts=130), BLOCKS, _share(9_000))

    # Then it is refilled now, to 130 + four blocks, before its next write needs it
    assert (plan.target.prompts, plan.sizing) == (530, "refilled")


def test_no_refill_ahead_from_a_tight_pool() -> None:
    # Given the same child under a tight pool (level 30, under four blocks)
    share = _share(300, children=10)
    plan = plan_sizing(_child((120, 150)), Totals(projects=1, prompts=130), BLOCKS, share)

    # Then nothing moves: its write fits, the pool's units stay free for the others
    assert (plan.target.prompts, plan.sizing) == (150, "hot-path")
    assert is_tight(share, 0, Dimension.PROMPTS, BLOCKS)


def test_surplus_above_two_blocks_goes_back_to_a_tight_pool() -> None:
    # Given a child carved 500 the old way, using 100, needing 10 more, under a tight pool
    share = _share(300, children=10)
    plan = plan_sizing(_child((100, 500)), Totals(projects=1, prompts=110), BLOCKS, share)

    # Then it keeps its need plus the fair headroom (30² / 1600 = 0): 110, the rest goes back
    assert (plan.target.prompts, plan.sizing) == (110, "rightsized")


def test_surplus_stays_with_a_child_of_a_pool_with_room() -> None:
    # Given the same child under a pool with room
    plan = plan_sizing(_child((100, 500)), Totals(projects=1, prompts=110), BLOCKS, _share(9_000))

    # Then nothing moves
    assert (plan.target.prompts, plan.sizing) == (500, "hot-path")


def test_surplus_back_never_sends_a_zero() -> None:
    # Given a child holding 300 prompts and using none, with no prompt need, under a tight pool
    share = _share(300, children=10)
    plan = plan_sizing(_child((0, 300)), Totals(projects=1, prompts=0), BLOCKS, share)

    # Then its prompts keep their total: a 0 is ignored by the gateway, never reported as moved
    assert plan.target.prompts == 300


def test_a_dimension_that_may_not_move_keeps_its_total() -> None:
    # Given a child under its refill mark in prompts whose prompts may not move (tiered)
    plan = plan_sizing(
        _child((120, 150)),
        Totals(projects=1, prompts=130),
        BLOCKS,
        _share(9_000),
        movable=(Dimension.PROJECTS,),
    )

    # Then prompts keep 150
    assert plan.target.prompts == 150


@pytest.mark.parametrize(
    ("child", "last", "expected"),
    [
        # Two projects spare throughout: exactly the projects' refill mark, never under it
        (_child((100, 310), (1, 3)), None, False),  # 200 left (two blocks): the hot path
        (_child((100, 309), (1, 3)), None, True),  # 199 left, under two blocks: worth a read
        (_child((100, 310), (1, 3)), _share(300, 10), False),  # a tight pool moves nothing here
        (_child((100, 130), (1, 3)), None, True),  # 20 left: a refill is worth a read
        (_child((100, 130), (1, 3)), _share(300, 10), False),  # ... not from a tight pool
        (_child((100, 500), (1, 3)), None, False),  # surplus, a pool not known to be tight
        (_child((100, 500), (1, 3)), _share(300, 10), True),  # surplus of a tight pool
        (_child((100, 110), (1, 3)), _share(300, 10), False),  # 0 left: fits, nothing to move
        (_child((100, 310), (1, 3)), _share(300, 10), False),  # exactly two blocks over: kept
        (_child((100, 311), (1, 3)), _share(300, 10), True),  # one over two blocks: surplus
        (_child((100, 130), (1, 3)), _share(400), True),  # a level of exactly 4 blocks has room
        (_child((100, 310), (1, 2)), None, True),  # one project spare, under two: worth a read
    ],
)
def test_the_pool_is_read_only_when_the_read_may_move_something(
    child: AiResources, last: PoolShare | None, expected: bool
) -> None:
    assert needs_pool(child, Totals(projects=1, prompts=110), BLOCKS, last) is expected


@given(
    used=st.integers(0, 2_000),
    held=st.integers(0, 500),
    need=st.integers(0, 500),
    free=st.integers(0, 10_000),
    children=st.integers(1, 50),
)
def test_a_raise_never_exceeds_what_the_pool_shows_free_and_a_need_is_always_covered(
    used: int, held: int, need: int, free: int, children: int
) -> None:
    # Given any child, need and pool
    child = _child((used, used + held))
    required = Totals(projects=1, prompts=used + need)
    plan = plan_sizing(child, required, BLOCKS, _share(free, children))

    # Then the target covers the need whenever the pool can, and never raises more than is free
    # beyond the exact lack (the transfer's 422 judges a lack the read says cannot fit)
    raise_by = plan.target.prompts - child.prompts.total
    assert raise_by <= max(free, need - held)
    if need - held <= free:
        assert plan.target.prompts >= used + need


def test_a_pool_share_counts_an_overdrawn_pool_as_nothing_free_and_at_least_one_child() -> None:
    # Given a pool using more than it holds in both dimensions, and no known child
    pool = AiResources(
        projects=DimensionUsage(used=7, total=5), prompts=DimensionUsage(used=120, total=100)
    )

    # Then nothing is free (not a negative count) and the share is among one child
    assert PoolShare.of(pool, 0) == PoolShare(free=Totals(projects=0, prompts=0), children=1)


def test_a_level_is_zero_once_the_lack_takes_all_that_is_free() -> None:
    # Given 10 prompts free for one child
    share = _share(10)

    # Then a lack of 10 or more leaves it no level at all, never a negative one
    assert (share.level(Dimension.PROMPTS, 10), share.level(Dimension.PROMPTS, 25)) == (0, 0)
    assert share.level(Dimension.PROMPTS, 4) == 6


def test_a_level_equal_to_the_lack_still_gives_its_squared_headroom() -> None:
    # Given a child lacking 40 prompts of a pool with 80 free: a level of exactly 40
    # Then what is left does cover every child's lack: 40² / 1600 = 1 of headroom, not exact
    assert fair_headroom(_share(80), 40, Dimension.PROMPTS, BLOCKS) == 1
    assert fair_headroom(_share(79), 40, Dimension.PROMPTS, BLOCKS) == 0


def test_demand_is_what_the_request_asks_beyond_what_is_used_and_drafted_never_negative() -> None:
    usage = DimensionUsage(used=100, drafted=20, total=200)

    assert [demand_of(usage, required) for required in (0, 110, 120, 125)] == [0, 0, 0, 5]


def test_a_level_of_exactly_four_blocks_is_a_pool_with_room_and_refills_ahead() -> None:
    # Given the child with 20 left, under two blocks, under a pool whose level is exactly 400
    share = _share(400)
    plan = plan_sizing(_child((120, 150)), Totals(projects=1, prompts=130), BLOCKS, share)

    # Then the pool has room: refilled to 130 + four blocks; one unit less and it is tight
    assert (plan.target.prompts, plan.sizing) == (530, "refilled")
    assert not is_tight(share, 0, Dimension.PROMPTS, BLOCKS)
    assert is_tight(_share(399), 0, Dimension.PROMPTS, BLOCKS)


def test_no_refill_from_a_tight_pool_even_when_its_headroom_would_raise_the_child() -> None:
    # Given a pool with 300 free for one child (level 300: tight, headroom 300² / 1600 = 56) and
    # a child with 20 left, under two blocks, whose need plus headroom (186) tops its 150
    plan = plan_sizing(_child((120, 150)), Totals(projects=1, prompts=130), BLOCKS, _share(300))

    # Then nothing moves: no refill from a tight pool
    assert (plan.target.prompts, plan.sizing) == (150, "hot-path")


def test_a_child_left_exactly_two_blocks_is_not_refilled_and_one_unit_less_is() -> None:
    # Given children left 200 (two blocks exactly) and 199 after their need, a pool with room
    kept = plan_sizing(_child((100, 310)), Totals(projects=1, prompts=110), BLOCKS, _share(9_000))
    refilled = plan_sizing(
        _child((100, 309)), Totals(projects=1, prompts=110), BLOCKS, _share(9_000)
    )

    # Then two blocks left is the hot path; under it the child is refilled to 110 + four blocks
    assert (kept.target.prompts, kept.sizing) == (310, "hot-path")
    assert (refilled.target.prompts, refilled.sizing) == (510, "refilled")


def test_no_refill_from_a_pool_one_unit_under_four_blocks_of_level() -> None:
    # Given a child left 20 after its need, under a pool whose level is 399: tight
    plan = plan_sizing(_child((120, 150)), Totals(projects=1, prompts=130), BLOCKS, _share(399))

    # Then nothing moves: its write fits, and a tight pool refills nobody ahead
    assert (plan.target.prompts, plan.sizing) == (150, "hot-path")


def test_low_water_of_an_odd_block_rounds_down_to_whole_units() -> None:
    # Given blocks of 101 prompts (low water 50, not 50.5), a child using all of its 150 and
    # needing 152, under a tight pool (level 403, one under four blocks: headroom 403² / 1616
    # = 100)
    blocks = Blocks(prompts=101)
    plan = plan_sizing(_child((150, 150)), Totals(projects=1, prompts=152), blocks, _share(405))

    # Then 152 + 50 is exactly two blocks: 202 (a low water of 50.5 would round up to 303 and
    # take all 100 of the headroom: 252)
    assert (plan.target, plan.sizing) == (Totals(projects=5, prompts=202), "topped-up")


@pytest.mark.parametrize(
    ("block", "used", "need", "free", "target"),
    [
        # block 3: low water 1; 101 + 1 is 102, whole blocks (a low water of 2 would round to
        # 105 and take both units of the fair headroom: 103)
        (3, 100, 101, 12, 102),
        # block 6: low water 3; 100 + 3 rounds to 108, capped by the fair headroom 23² / 96 = 5
        # (a low water of 2 would round 102 to 102 itself: 102)
        (6, 99, 100, 24, 105),
    ],
)
def test_low_water_is_half_a_small_block_on_a_tight_pool(
    block: int, used: int, need: int, free: int, target: int
) -> None:
    # Given a child short by one unit under a tight pool (level one under four blocks) with
    # blocks of ``block`` prompts, asking one unit beyond its use
    plan = plan_sizing(
        _child((used, used)), Totals(projects=1, prompts=need), Blocks(prompts=block), _share(free)
    )

    # Then the need plus half a block rounds up to whole blocks, within the fair headroom
    assert (plan.target, plan.sizing) == (Totals(projects=5, prompts=target), "topped-up")


def test_a_refill_that_would_set_the_total_it_has_is_the_hot_path() -> None:
    # Given a request of 500 prompts into a child holding 900, none used (400 left, under the
    # 500 it asked), and a pool whose level (400) caps the headroom at exactly those 400
    plan = plan_sizing(_child((0, 900)), Totals(projects=1, prompts=500), BLOCKS, _share(400))

    # Then the refill would set 900 again: nothing moves, and it is reported as the hot path
    assert (plan.target, plan.sizing) == (Totals(projects=5, prompts=900), "hot-path")


def test_a_surplus_is_given_back_down_to_a_single_unit_of_headroom() -> None:
    # Given a child holding 300 prompts and using none, with no prompt need, under a tight pool
    # whose level (40) leaves 40² / 1600 = 1 of headroom
    plan = plan_sizing(_child((0, 300)), Totals(projects=1, prompts=0), BLOCKS, _share(40))

    # Then it keeps that one unit: 1 is sent (only a 0 is never sent)
    assert (plan.target.prompts, plan.sizing) == (1, "rightsized")


def test_surplus_of_exactly_two_blocks_stays_and_one_more_goes_back() -> None:
    # Given a child using 100, needing 10 more, under a tight pool (level 30, no headroom)
    share = _share(300, children=10)
    kept = plan_sizing(_child((100, 310)), Totals(projects=1, prompts=110), BLOCKS, share)
    given_back = plan_sizing(_child((100, 311)), Totals(projects=1, prompts=110), BLOCKS, share)

    # Then 200 over its need is kept; 201 is more than two blocks and goes back down to 110
    assert (kept.target.prompts, kept.sizing) == (310, "hot-path")
    assert (given_back.target.prompts, given_back.sizing) == (110, "rightsized")


@given(
    used=st.integers(0, 2_000),
    held=st.integers(0, 1_000),
    need=st.integers(0, 1_000),
    free=st.integers(0, 20_000),
    children=st.integers(1, 50),
)
def test_a_moved_total_never_holds_more_headroom_than_the_fair_level(
    used: int, held: int, need: int, free: int, children: int
) -> None:
    # Given any child, need and pool
    child = _child((used, used + held))
    required = Totals(projects=1, prompts=used + need)
    share = _share(free, children)
    plan = plan_sizing(child, required, BLOCKS, share)

    # Then whatever moved holds at most the fair level above its need: four blocks of a pool
    # with room never pass a fair share
    lack = max(0, need - held)
    if plan.target.prompts != child.prompts.total:
        assert plan.target.prompts - (used + need) <= share.level(Dimension.PROMPTS, lack)
