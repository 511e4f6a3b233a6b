"""Sibling reclaim: which siblings give surplus back, and never too much."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from serenity_allocator.domain.allocation import ReclaimRules, choose_reclaim_siblings, plan_release
from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.model import Blocks, Totals
from tests.fakes import READ_RESOURCES, InMemoryGateway

MASTER = "master-1"
CHILD = "child-asking"
BLOCKS = Blocks(projects=1, prompts=100)
FLOOR = BLOCKS.as_totals()


def _family() -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=Totals(projects=0, prompts=0))
    # The asking child holds a lot, but it is never its own donor.
    gateway.add_child(CHILD, MASTER, total=Totals(projects=9, prompts=5_000))
    gateway.add_child(
        "big", MASTER, total=Totals(projects=1, prompts=1_000), used=Totals(projects=1, prompts=100)
    )
    gateway.add_child(
        "mid", MASTER, total=Totals(projects=1, prompts=600), used=Totals(projects=1, prompts=150)
    )
    gateway.add_child(
        "projects-only",
        MASTER,
        total=Totals(projects=4, prompts=100),
        used=Totals(projects=1, prompts=100),
    )
    gateway.add_child(
        "drafting",
        MASTER,
        total=Totals(projects=1, prompts=3_000),
        drafted=Totals(projects=0, prompts=10),
    )
    gateway.add_child("zombie", MASTER, total=Totals(projects=1, prompts=4_000), status="not ready")
    # 150 total, 60 used: target 100, so only 50 to give, under one block.
    gateway.add_child(
        "crumbs", MASTER, total=Totals(projects=1, prompts=150), used=Totals(projects=1, prompts=60)
    )
    # A grandchild is not a sibling of CHILD.
    gateway.add_child("grandchild", "big", total=Totals(projects=1, prompts=2_000))
    return gateway


def _choose(gateway: InMemoryGateway, max_siblings: int = 10) -> list[tuple[str, Totals]]:
    chosen = choose_reclaim_siblings(
        gateway, MASTER, CHILD, ReclaimRules(floor=FLOOR, blocks=BLOCKS, max_siblings=max_siblings)
    )
    return [(c.workspace_id, c.units) for c in chosen]


def test_choose_reclaim_siblings_orders_by_most_surplus() -> None:
    # Given a family with donors of different sizes and several non-donors
    gateway = _family()

    # When choosing
    chosen = _choose(gateway)

    # Then only the eligible siblings come back, biggest prompt surplus first
    assert chosen == [
        ("big", Totals(projects=0, prompts=900)),
        ("mid", Totals(projects=0, prompts=400)),
        ("projects-only", Totals(projects=3, prompts=0)),
    ]


def test_choose_reclaim_siblings_bounded_by_max_siblings() -> None:
    # Given the same family / When at most one sibling may be asked
    chosen = _choose(_family(), max_siblings=1)

    # Then the one with the most surplus
    assert [workspace for workspace, _ in chosen] == ["big"]


def test_choose_reclaim_siblings_skips_self_parent_drafts_zombies_crumbs_grandchildren() -> None:
    # Given the family / When choosing
    chosen = {workspace for workspace, _ in _choose(_family())}

    # Then exactly the eligible ones: not the asker, the parent, the drafting sibling, the
    # zombie, the one with crumbs nor the grandchild
    assert chosen == {"big", "mid", "projects-only"}


def test_choose_reclaim_siblings_never_reads_a_sibling_that_is_not_created() -> None:
    # Given a zombie sibling / When choosing
    gateway = _family()
    _choose(gateway)

    # Then exactly the created siblings' resources are read: never the zombie's (its status
    # already disqualifies it), the asker's, the parent's nor the grandchild's
    assert sorted(gateway.calls_of(READ_RESOURCES)) == [
        "big",
        "crumbs",
        "drafting",
        "mid",
        "projects-only",
    ]


def test_choose_reclaim_siblings_nothing_to_give_returns_empty() -> None:
    # Given siblings already at their floor
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=Totals())
    gateway.add_child(CHILD, MASTER, total=FLOOR)
    gateway.add_child("lean", MASTER, total=FLOOR, used=FLOOR)

    # When choosing / Then nobody is asked
    assert _choose(gateway) == []


_usage = st.integers(min_value=0, max_value=3_000)


@settings(max_examples=60, deadline=None)
@given(
    siblings=st.lists(
        st.tuples(_usage, _usage, st.integers(min_value=0, max_value=6), st.integers(0, 6)),
        min_size=1,
        max_size=6,
    ),
    floor_prompts=st.sampled_from([0, 100, 300]),
)
def test_choose_reclaim_siblings_never_below_floor_or_used(
    siblings: list[tuple[int, int, int, int]], floor_prompts: int
) -> None:
    # Given siblings with arbitrary used / total (totals at least what they use)
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=Totals())
    gateway.add_child(CHILD, MASTER)
    for index, (used_p, extra_p, used_j, extra_j) in enumerate(siblings):
        gateway.add_child(
            f"s{index}",
            MASTER,
            total=Totals(projects=used_j + extra_j, prompts=used_p + extra_p),
            used=Totals(projects=used_j, prompts=used_p),
        )
    floor = Totals(projects=1, prompts=floor_prompts)

    # When choosing
    chosen = choose_reclaim_siblings(
        gateway, MASTER, CHILD, ReclaimRules(floor=floor, blocks=BLOCKS, max_siblings=10)
    )

    # Then every proposal is exactly what plan_release would return, and what stays behind is
    # at least the floor and at least used + drafted in every dimension that is lowered
    for candidate in chosen:
        resources = gateway.read_resources(candidate.workspace_id)
        plan = plan_release(resources, floor, BLOCKS)
        assert candidate.units == plan.units_returned
        for dim_name in ("projects", "prompts"):
            given_back = getattr(candidate.units, dim_name)
            usage = getattr(resources, dim_name)
            remaining = usage.total - given_back
            assert given_back >= 0
            if given_back:
                assert remaining >= getattr(floor, dim_name)
                assert remaining >= usage.used + usage.drafted
        assert candidate.units.prompts >= BLOCKS.prompts or candidate.units.projects >= 1
    # and every sibling with at least one block to give is proposed (none of them drafts)
    givers = set()
    for index in range(len(siblings)):
        returned = plan_release(gateway.read_resources(f"s{index}"), floor, BLOCKS).units_returned
        if returned.prompts >= BLOCKS.prompts or returned.projects >= BLOCKS.projects:
            givers.add(f"s{index}")
    assert {candidate.workspace_id for candidate in chosen} == givers


def test_choose_reclaim_siblings_keeps_looking_past_every_kind_of_skip() -> None:
    # Given siblings that are each skipped for a different reason, listed BEFORE the one donor
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=Totals())
    gateway.add_child(CHILD, MASTER, total=FLOOR)
    gateway.add_child("zombie", MASTER, total=Totals(projects=1, prompts=4_000), status="x")
    gateway.add_child("unreadable", MASTER, total=Totals(projects=1, prompts=4_000))
    gateway.script_errors(READ_RESOURCES, "unreadable", [UpstreamError(500, "boom", "read")])
    gateway.add_child(
        "drafting", MASTER, total=Totals(projects=1, prompts=3_000), drafted=Totals(prompts=10)
    )
    gateway.add_child(
        "crumbs", MASTER, total=Totals(projects=1, prompts=150), used=Totals(projects=1, prompts=60)
    )
    gateway.add_child(
        "donor", MASTER, total=Totals(projects=1, prompts=500), used=Totals(projects=1, prompts=50)
    )

    # When choosing / Then the donor listed last is still found
    assert _choose(gateway) == [("donor", Totals(projects=0, prompts=400))]


def test_choose_reclaim_siblings_exactly_one_block_to_give_is_enough() -> None:
    # Given a sibling holding 200 prompts and using 100: exactly one block (100) to give
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=Totals())
    gateway.add_child(CHILD, MASTER, total=FLOOR)
    gateway.add_child(
        "one-block",
        MASTER,
        total=Totals(projects=1, prompts=200),
        used=Totals(projects=1, prompts=100),
    )

    # When choosing / Then it is asked
    assert _choose(gateway) == [("one-block", Totals(projects=0, prompts=100))]
