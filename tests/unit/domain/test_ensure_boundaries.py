"""ensure_headroom and plan_release at their edges: exact fits, the ceiling's boundary, zeros."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureRules,
    ensure_headroom,
    plan_release,
    required_totals,
)
from serenity_allocator.domain.errors import BrandAiLimitError, WiringError
from serenity_allocator.domain.model import AiResources, Blocks, Dimension, DimensionUsage, Totals
from serenity_allocator.domain.sizing import Ceiling
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE
from tests.fakes import (
    READ_RESOURCES,
    TRANSFER,
    FakeClock,
    InMemoryGateway,
    RecordingObserver,
    pool_exhausted,
    transfer_context,
)

MASTER = "master-1"
CHILD = "child-1"
POOL = Totals(projects=50, prompts=10_000)


def _child(
    total: Totals, used: Totals, drafted: Totals | None = None
) -> tuple[InMemoryGateway, RecordingObserver]:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=POOL)
    gateway.add_child(CHILD, MASTER, total=total, used=used, drafted=drafted)
    return gateway, RecordingObserver()


# ==== the ceiling's exact boundary ==========================================================


def _ensure_prompts(
    need: int, ceiling: Ceiling, *, total: int = 200, used: int = 200
) -> tuple[InMemoryGateway, RecordingObserver, Totals]:
    # Two projects to spare (the projects' refill mark): none is refilled ahead, only prompts
    # move.
    gateway, observer = _child(
        Totals(projects=3, prompts=total), used=Totals(projects=1, prompts=used)
    )
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=need), include_drafted=False, ceiling=ceiling),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )
    return gateway, observer, result.after


@pytest.mark.parametrize(
    ("limit", "after_prompts"),
    [
        (250, 250),  # the exact need (200 + 50) is the ceiling: topped up to it, not refused
        (251, 251),  # the planned 650 (250 + four blocks) passes it: capped to the ceiling
        (649, 649),
        (650, 650),  # the planned target is the ceiling: sent as planned
        (651, 650),  # under the ceiling: the ceiling plays no part
    ],
)
def test_ensure_headroom_need_at_or_under_the_ceiling_is_topped_up_to_at_most_it(
    limit: int, after_prompts: int
) -> None:
    # Given a full child at 200 prompts and a prompts ceiling / When 50 more are needed
    gateway, observer, after = _ensure_prompts(50, Ceiling(prompts=limit))

    # Then one transfer to the planned target held under the ceiling, nothing refused
    assert after == Totals(projects=3, prompts=after_prompts)
    assert gateway.transfers == [(CHILD, Totals(projects=3, prompts=after_prompts))]
    assert observer.args_of("rejected") == []


def test_ensure_headroom_need_one_over_the_ceiling_is_refused_without_transfer() -> None:
    # Given a full child at 200 prompts under a ceiling of 249
    gateway, observer = _child(
        Totals(projects=1, prompts=200), used=Totals(projects=1, prompts=200)
    )

    # When 50 more are needed (exactly 250: one over)
    with pytest.raises(BrandAiLimitError) as raised:
        ensure_headroom(
            gateway,
            EnsureAsk(
                CHILD,
                MASTER,
                Totals(prompts=50),
                include_drafted=False,
                ceiling=Ceiling(prompts=249),
            ),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock(), observer),
        )

    # Then brandAiLimit names the exact need and the cap; only the child was read, nothing
    # moved, the rejection counted once
    assert (raised.value.dimension, raised.value.requested, raised.value.ceiling) == (
        "prompts",
        250,
        249,
    )
    assert gateway.calls == [(READ_RESOURCES, CHILD)]
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=200)
    assert observer.args_of("rejected") == [("brandAiLimit",)]


@pytest.mark.parametrize("ceiling", [Ceiling(prompts=1_000), Ceiling(projects=0, prompts=1_000)])
def test_ensure_headroom_dimension_the_ceiling_leaves_out_is_not_enforced(
    ceiling: Ceiling,
) -> None:
    # Given a child using all of its 3 projects under a ceiling that caps prompts only (a
    # projects value of 0 is "not enforced", never a cap of 0)
    gateway, observer = _child(Totals(projects=3, prompts=200), used=Totals(projects=3, prompts=0))

    # When 4 more projects are needed
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(projects=4), include_drafted=False, ceiling=ceiling),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )

    # Then projects rise to the 7 needed plus the 4 asked again (11), uncapped, and prompts
    # keep their total
    assert result.after == Totals(projects=11, prompts=200)
    assert gateway.calls_of(TRANSFER) == [CHILD]
    assert observer.args_of("rejected") == []


def test_ensure_headroom_dimension_already_over_the_ceiling_is_kept_when_not_raised() -> None:
    # Given a child holding 500 prompts (over a later-lowered ceiling of 300) and full projects
    gateway, observer = _child(Totals(projects=1, prompts=500), used=Totals(projects=1, prompts=10))

    # When one more project is needed
    result = ensure_headroom(
        gateway,
        EnsureAsk(
            CHILD,
            MASTER,
            Totals(projects=1),
            include_drafted=False,
            ceiling=Ceiling(projects=5, prompts=300),
        ),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )

    # Then projects rise (the 2 needed plus four blocks: 6, capped at 5) and prompts keep 500:
    # a cap never lowers nor refuses what is not raised
    assert result.after == Totals(projects=5, prompts=500)
    assert gateway.transfers == [(CHILD, Totals(projects=5, prompts=500))]
    assert observer.args_of("rejected") == []


def test_ensure_headroom_projects_need_exactly_at_the_ceiling_is_served() -> None:
    # Given a child using its one project under a projects ceiling of 2
    gateway, observer = _child(Totals(projects=1, prompts=100), used=Totals(projects=1, prompts=0))

    # When one more project is needed (exactly the ceiling)
    result = ensure_headroom(
        gateway,
        EnsureAsk(
            CHILD, MASTER, Totals(projects=1), include_drafted=False, ceiling=Ceiling(projects=2)
        ),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )

    # Then it is served (the planned 2 + four blocks capped at 2), and its 100 unused prompts,
    # under two blocks, are refilled ahead to four blocks in the same transfer
    assert result.after == Totals(projects=2, prompts=400)
    assert gateway.totals_of(CHILD) == Totals(projects=2, prompts=400)


def test_ensure_headroom_projects_need_one_over_the_ceiling_is_refused() -> None:
    # Given a child using its one project under a projects ceiling of 1
    gateway, observer = _child(Totals(projects=1, prompts=100), used=Totals(projects=1, prompts=0))

    # When one more project is needed (one over)
    with pytest.raises(BrandAiLimitError) as raised:
        ensure_headroom(
            gateway,
            EnsureAsk(
                CHILD,
                MASTER,
                Totals(projects=1),
                include_drafted=False,
                ceiling=Ceiling(projects=1),
            ),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock(), observer),
        )

    # Then refused, naming projects, with nothing transferred
    assert (raised.value.dimension, raised.value.requested, raised.value.ceiling) == (
        "projects",
        2,
        1,
    )
    assert gateway.transfers == []


# ==== exact fits, defaults and zeros ========================================================


@pytest.mark.parametrize(
    ("child_id", "parent_id", "field"), [(" ", MASTER, "child_id"), (CHILD, "", "parent_id")]
)
def test_ensure_headroom_blank_id_error_names_the_field(
    child_id: str, parent_id: str, field: str
) -> None:
    # Given a blank id / When ensuring / Then the wiring error names the field that is blank
    gateway, observer = _child(Totals(projects=1, prompts=100), used=Totals())
    with pytest.raises(WiringError, match=f"^{field} must be a non-blank workspace id$"):
        ensure_headroom(
            gateway,
            EnsureAsk(child_id, parent_id, Totals(prompts=1), include_drafted=False),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock(), observer),
        )


def test_ensure_headroom_need_that_exactly_fills_an_odd_total_is_refilled_ahead() -> None:
    # Given a child holding 437 prompts (not a whole number of blocks), using 400, a project
    # to spare, and a pool with room
    gateway, observer = _child(
        Totals(projects=2, prompts=437), used=Totals(projects=1, prompts=400)
    )

    # When exactly the 37 left are needed
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=37), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )

    # Then the write fits as it is, and the child is refilled ahead of its next one: to the
    # need plus four blocks (837), and its one spare project (under two) to 1 + 4 = 5
    assert (result.outcome, result.after) == ("topped-up", Totals(projects=5, prompts=837))
    assert gateway.transfers == [(CHILD, Totals(projects=5, prompts=837))]
    assert observer.args_of("headroom_checked") == [("refilled",)]


def test_ensure_headroom_ignores_drafted_prompts_by_default() -> None:
    # Given a child using 50 of 270 prompts with 80 more drafted (and two projects to spare)
    gateway, observer = _child(
        Totals(projects=3, prompts=270),
        used=Totals(projects=1, prompts=50),
        drafted=Totals(prompts=80),
    )

    # When 10 prompts are needed and include_drafted is not given
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )

    # Then the drafts do not count: 60 of 270 fits with 210 to spare, over the two-block refill
    # mark (counting them, 140 would leave 130: refilled)
    assert result.outcome == "hot-path"


def test_ensure_headroom_top_up_reports_its_attempts() -> None:
    # Given a full child that settles once (one 422 not ready) before taking the transfer
    gateway, observer = _child(
        Totals(projects=1, prompts=100), used=Totals(projects=1, prompts=100)
    )
    gateway.script_not_ready(CHILD, transfers=1)

    # When 1 more prompt is needed under the settle policy
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=1), include_drafted=False),
        EnsureRules(policy=SETTLE),
        transfer_context(FakeClock(), observer),
    )

    # Then the result says two transfers were sent
    assert (result.outcome, result.attempts) == ("topped-up", 2)
    assert gateway.calls_of(TRANSFER) == [CHILD, CHILD]


def test_required_totals_of_an_idle_child_with_no_need_is_zero() -> None:
    # Given a child that uses and drafts nothing / When nothing more is needed
    child = AiResources(
        projects=DimensionUsage(used=0, total=0), prompts=DimensionUsage(used=0, total=0)
    )

    # Then nothing is required (never a minimum of one)
    assert required_totals(child, Totals(), include_drafted=True) == Totals(projects=0, prompts=0)


def test_plan_release_dimension_already_at_zero_needs_no_decommission() -> None:
    # Given a child holding no projects at all and 100 unused prompts, with a zero floor
    child = AiResources(
        projects=DimensionUsage(used=0, total=0), prompts=DimensionUsage(used=0, total=100)
    )

    # When planned
    plan = plan_release(child, Totals(projects=0, prompts=0), Blocks())

    # Then only prompts would go to zero (decommission); projects, already 0, are not reported
    assert plan.requires_decommission == (Dimension.PROMPTS,)
    assert plan.lowered == ()


def test_plan_release_reports_drafted_units_of_both_dimensions() -> None:
    # Given a child with drafts in both dimensions
    child = AiResources(
        projects=DimensionUsage(used=1, drafted=2, total=5),
        prompts=DimensionUsage(used=100, drafted=30, total=500),
    )

    # When planned / Then the plan carries both drafted counts
    assert plan_release(child, Totals(projects=1, prompts=100), Blocks()).drafted == Totals(
        projects=2, prompts=30
    )


def test_ensure_headroom_exact_fallback_reports_the_attempts_of_its_transfer() -> None:
    # Given a pool whose read shows 50 free, drained before the sized transfer lands
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=Totals(projects=5, prompts=50))
    gateway.add_child(
        CHILD, MASTER, total=Totals(projects=1, prompts=100), used=Totals(projects=1, prompts=100)
    )
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])

    # When 10 more prompts are needed with the exact fallback on
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
        EnsureRules(policy=FAIL_FAST, exact_fallback=True),
        transfer_context(FakeClock()),
    )

    # Then the saved top-up counts the one transfer that landed (the refused sized one is not)
    assert (result.after, result.used_exact_fallback, result.attempts) == (
        Totals(projects=1, prompts=110),
        True,
        1,
    )


def test_plan_release_unused_single_unit_goes_to_decommission_not_to_zero() -> None:
    # Given a child holding one unused project (and one unused prompt block), floor 0
    child = AiResources(
        projects=DimensionUsage(used=0, total=1), prompts=DimensionUsage(used=0, total=100)
    )

    # When planned
    plan = plan_release(child, Totals(projects=0, prompts=0), Blocks())

    # Then neither is lowered to 0 (the gateway would ignore it): both need decommission
    assert plan.lowered == ()
    assert plan.requires_decommission == (Dimension.PROJECTS, Dimension.PROMPTS)
    assert plan.target == Totals(projects=1, prompts=100)
