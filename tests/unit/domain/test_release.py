"""release_surplus and plan_release over the in-memory gateway: targets, failures, conservation."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serenity_allocator.domain.allocation import ReleaseAsk, plan_release, release_surplus
from serenity_allocator.domain.errors import (
    MalformedResponseError,
    UpstreamError,
    UpstreamUnavailableError,
    WiringError,
)
from serenity_allocator.domain.model import (
    AiResources,
    Blocks,
    Dimension,
    DimensionUsage,
    Totals,
    round_up_to_block,
)
from tests.fakes import (
    READ_RESOURCES,
    READ_STATUS,
    TRANSFER,
    FakeClock,
    InMemoryGateway,
    RecordingObserver,
    not_ready,
    pool_exhausted,
    transfer_context,
)
from tests.unit.domain.allocation_rig import CHILD, MASTER, dimension_usage, one_child_family

# ==== release_surplus ======================================================================


@pytest.mark.parametrize(
    ("child", "floor", "expected_target"),
    [
        # used + drafted = 130 -> 200 by blocks of 100; floor 100 is lower
        (
            AiResources(projects=dimension_usage(3, 10), prompts=dimension_usage(100, 900, 30)),
            None,
            (3, 200),
        ),
        # nothing used: the floor (one block by default) wins
        (
            AiResources(projects=dimension_usage(0, 10), prompts=dimension_usage(0, 900)),
            None,
            (1, 100),
        ),
        # an explicit floor above usage wins
        (
            AiResources(projects=dimension_usage(1, 10), prompts=dimension_usage(10, 900)),
            Totals(projects=4, prompts=500),
            (4, 500),
        ),
    ],
)
def test_release_surplus_target_is_floor_or_used_plus_drafted_in_blocks(
    child: AiResources, floor: Totals | None, expected_target: tuple[int, int]
) -> None:
    # Given a child with surplus / When the release is planned
    plan = plan_release(child, floor or Blocks().as_totals(), Blocks())

    # Then each target is max(floor, round_up(used + drafted, block))
    assert plan.target == Totals(projects=expected_target[0], prompts=expected_target[1])


def test_release_surplus_released_lowers_to_target_and_returns_units() -> None:
    # Given a child holding 900 prompts while using 130 (with drafted work) and 10 projects for 3
    gateway = one_child_family(
        child_total=Totals(projects=10, prompts=900),
        child_used=Totals(projects=3, prompts=100),
        child_drafted=Totals(prompts=30),
    )
    units_before = gateway.family_units(MASTER)
    observer = RecordingObserver()

    # When releasing
    result = release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(FakeClock(), observer))

    # Then one transfer to the target, the surplus back in the pool, units conserved
    assert result.outcome == "released"
    assert result.plan is not None
    assert result.plan.target == Totals(projects=3, prompts=200)
    assert result.plan.units_returned == Totals(projects=7, prompts=700)
    assert gateway.transfers == [(CHILD, Totals(projects=3, prompts=200))]
    assert gateway.totals_of(MASTER) == Totals(projects=57, prompts=10_700)
    assert gateway.family_units(MASTER) == units_before
    assert observer.args_of("release_finished") == [("released",)]


def test_release_surplus_drafted_units_are_kept() -> None:
    # Given a child whose drafted prompts (staged, not yet published) push it over a block
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=500),
        child_used=Totals(projects=1, prompts=80),
        child_drafted=Totals(prompts=150),
    )

    # When releasing
    result = release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(FakeClock()))

    # Then the target covers used + drafted (230 -> 300), not used alone (80 -> 100):
    # a deliberate change from the first allocator, so a publish never finds its units gone
    assert result.plan is not None
    assert result.plan.target.prompts == 300
    assert result.plan.drafted == Totals(prompts=150)


def test_release_surplus_lowers_only_dimensions_below_total_and_above_zero() -> None:
    # Given a child with prompt surplus and projects exactly at their target
    gateway = one_child_family(
        child_total=Totals(projects=2, prompts=600), child_used=Totals(projects=2, prompts=150)
    )

    # When releasing
    result = release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(FakeClock()))

    # Then only prompts are lowered; projects keep their total in the absolute body
    assert result.plan is not None
    assert result.plan.lowered == (Dimension.PROMPTS,)
    assert gateway.transfers == [(CHILD, Totals(projects=2, prompts=200))]


def test_release_surplus_would_be_zero_keeps_total_and_requires_decommission() -> None:
    # Given an idle child and a zero floor: both targets would be 0
    gateway = one_child_family(child_total=Totals(projects=3, prompts=400))
    observer = RecordingObserver()

    # When releasing
    result = release_surplus(
        gateway, ReleaseAsk(CHILD, floor=Totals()), transfer_context(FakeClock(), observer)
    )

    # Then no transfer (a 0 would be silently ignored), and the result says decommission
    assert result.outcome == "requires-decommission"
    assert result.plan is not None
    assert result.plan.requires_decommission == (Dimension.PROJECTS, Dimension.PROMPTS)
    assert result.plan.target == Totals(projects=3, prompts=400)
    assert gateway.transfers == []
    assert observer.args_of("release_finished") == [("requires-decommission",)]


def test_release_surplus_mixed_zero_and_surplus_never_sends_a_zero() -> None:
    # Given no projects in use (target 0) but prompts in use with surplus, zero floor
    gateway = one_child_family(
        child_total=Totals(projects=3, prompts=900), child_used=Totals(prompts=250)
    )

    # When releasing
    result = release_surplus(
        gateway, ReleaseAsk(CHILD, floor=Totals()), transfer_context(FakeClock())
    )

    # Then prompts are released, projects keep their total and are flagged for decommission
    assert result.outcome == "released"
    assert result.plan is not None
    assert result.plan.requires_decommission == (Dimension.PROJECTS,)
    assert gateway.transfers == [(CHILD, Totals(projects=3, prompts=300))]


def test_release_surplus_nothing_to_release() -> None:
    # Given a child at its target already
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=200), child_used=Totals(projects=1, prompts=120)
    )

    # When releasing
    result = release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(FakeClock()))

    # Then one read, no transfer
    assert result.outcome == "nothing-to-release"
    assert gateway.calls == [(READ_RESOURCES, CHILD)]


def test_release_surplus_dry_run_reads_and_reports_the_exact_target() -> None:
    # Given a child with surplus
    gateway = one_child_family(
        child_total=Totals(projects=5, prompts=800), child_used=Totals(projects=2, prompts=310)
    )
    observer = RecordingObserver()

    # When dry-running
    result = release_surplus(
        gateway, ReleaseAsk(CHILD, dry_run=True), transfer_context(FakeClock(), observer)
    )

    # Then the read happened, nothing was transferred, and the exact target is reported
    assert result.outcome == "dry-run"
    assert result.plan is not None
    assert result.plan.target == Totals(projects=2, prompts=400)
    assert result.plan.natural_outcome == "released"
    assert gateway.calls == [(READ_RESOURCES, CHILD)]
    assert observer.args_of("release_finished") == [("dry-run",)]


def _script_busy(gateway: InMemoryGateway) -> None:
    gateway.script_not_ready(CHILD, transfers=99)


def _script_pool_exhausted(gateway: InMemoryGateway) -> None:
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])


def _script_rate_limited(gateway: InMemoryGateway) -> None:
    gateway.script_errors(TRANSFER, CHILD, [UpstreamError(429, "Too Many Requests", TRANSFER)])


def _script_unavailable(gateway: InMemoryGateway) -> None:
    gateway.script_errors(TRANSFER, CHILD, [UpstreamUnavailableError()])


def _script_never_settles(gateway: InMemoryGateway) -> None:
    gateway.set_status(CHILD, "not ready")


@pytest.mark.parametrize(
    ("script", "error_code", "rejections"),
    [
        (_script_busy, "workspaceBusy", [("workspaceBusy",)]),
        (_script_pool_exhausted, "orgPoolExhausted", [("orgPoolExhausted",)]),
        (_script_rate_limited, "rateLimited", []),
        (_script_unavailable, "upstreamUnavailable", []),
        (_script_never_settles, "settleTimeout", []),
    ],
)
def test_release_surplus_expected_failure_is_an_error_outcome_with_a_typed_code(
    script: Callable[[InMemoryGateway], None],
    error_code: str,
    rejections: list[tuple[str]],
) -> None:
    # Given a child with surplus and an expected upstream failure
    gateway = one_child_family(child_total=Totals(projects=5, prompts=800))
    script(gateway)
    observer = RecordingObserver()

    # When releasing
    result = release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(FakeClock(), observer))

    # Then no exception: an error outcome carrying the typed code, and the plan it tried
    assert result.outcome == "error"
    assert result.error_code == error_code
    assert result.plan is not None and result.plan.would_release
    assert observer.args_of("release_finished") == [("error",)]
    # ... and a busy child or a dry pool is a rejection on the release path too
    assert observer.args_of("rejected") == rejections


@pytest.mark.parametrize(
    ("op", "error"),
    [
        (READ_RESOURCES, MalformedResponseError("product_resources.ai.resources is missing")),
        (TRANSFER, UpstreamError(500, "Internal Server Error", TRANSFER)),
        (READ_STATUS, UpstreamError(500, "Internal Server Error", READ_STATUS)),
    ],
)
def test_release_surplus_unexpected_error_propagates(op: str, error: Exception) -> None:
    # Given a child with surplus and a failure no rule expects
    gateway = one_child_family(child_total=Totals(projects=5, prompts=800))
    gateway.script_errors(op, CHILD, [error])

    # When releasing / Then the very same error propagates
    with pytest.raises(type(error)) as raised:
        release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(FakeClock()))
    assert raised.value is error


@pytest.mark.parametrize(
    ("op", "error"),
    [
        (TRANSFER, UpstreamError(500, "Internal Server Error", TRANSFER)),
        (READ_STATUS, UpstreamError(500, "Internal Server Error", READ_STATUS)),
    ],
)
def test_release_surplus_uncoded_failure_of_the_transfer_still_reports_an_error_outcome(
    op: str, error: Exception
) -> None:
    # Given a release whose transfer (or its settle poll) fails with no error code
    gateway = one_child_family(child_total=Totals(projects=5, prompts=800))
    gateway.script_errors(op, CHILD, [error])
    observer = RecordingObserver()

    # When releasing / Then the error propagates, and the release was still counted as one
    with pytest.raises(type(error)):
        release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(FakeClock(), observer))
    assert observer.args_of("release_finished") == [("error",)]


def test_release_surplus_dry_run_with_nothing_to_release_reports_its_natural_outcome() -> None:
    # Given a child already at the floor
    gateway = one_child_family(child_total=Totals(projects=1, prompts=100))
    observer = RecordingObserver()

    # When dry-running / Then the preview counts as what a real release would report
    result = release_surplus(
        gateway, ReleaseAsk(CHILD, dry_run=True), transfer_context(FakeClock(), observer)
    )
    assert result.outcome == "dry-run"
    assert observer.args_of("release_finished") == [("nothing-to-release",)]


def test_release_surplus_blank_id_raises_wiring_error_before_any_call() -> None:
    # Given a blank child id
    gateway = one_child_family(child_total=Totals(projects=5, prompts=800))

    # When releasing / Then a wiring error, and no call
    with pytest.raises(WiringError):
        release_surplus(gateway, ReleaseAsk(" "), transfer_context(FakeClock()))
    assert gateway.calls == []


def test_release_surplus_retries_a_settling_child_on_the_settle_path() -> None:
    # Given a child still settling from a previous change for one transfer
    gateway = one_child_family(child_total=Totals(projects=5, prompts=800))
    gateway.script_errors(TRANSFER, CHILD, [not_ready()])
    clock = FakeClock()

    # When releasing (settle policy by default)
    result = release_surplus(gateway, ReleaseAsk(CHILD), transfer_context(clock))

    # Then it retried once after a 1 s sleep and released
    assert result.outcome == "released"
    assert result.attempts == 2
    assert clock.sleeps == [1.0]


_usage_strategy = st.builds(
    DimensionUsage,
    used=st.integers(0, 5_000),
    drafted=st.integers(0, 1_000),
    total=st.integers(0, 10_000),
)


@settings(max_examples=200, deadline=None)
@given(
    child=st.builds(AiResources, projects=_usage_strategy, prompts=_usage_strategy),
    floor=st.builds(Totals, projects=st.integers(0, 500), prompts=st.integers(0, 500)),
    blocks=st.builds(Blocks, projects=st.integers(1, 50), prompts=st.integers(1, 500)),
)
def test_plan_release_target_stays_within_bounds(
    child: AiResources, floor: Totals, blocks: Blocks
) -> None:
    # Given any child, floor and blocks / When a release is planned
    plan = plan_release(child, floor, blocks)

    # Then per dimension: never above the total; a lowered dimension is never below
    # used + drafted in blocks, never below the floor, never 0; others keep their total
    for dim in Dimension:
        usage, target = child.get(dim), plan.target.get(dim)
        assert target <= usage.total
        if dim in plan.lowered:
            assert target >= round_up_to_block(usage.used + usage.drafted, blocks.get(dim))
            assert target >= floor.get(dim)
            assert target > 0
        else:
            assert target == usage.total
        if dim in plan.requires_decommission:
            assert usage.used + usage.drafted == 0
            assert floor.get(dim) == 0
            assert dim not in plan.lowered


@settings(max_examples=200, deadline=None)
@given(
    used=st.tuples(st.integers(0, 20), st.integers(0, 2_000)),
    drafted=st.integers(0, 500),
    total=st.tuples(st.integers(0, 20), st.integers(0, 2_000)),
    floor=st.tuples(st.integers(0, 3), st.integers(0, 300)),
)
def test_release_surplus_conserves_units_in_the_gateway(
    used: tuple[int, int], drafted: int, total: tuple[int, int], floor: tuple[int, int]
) -> None:
    # Given any child of a family
    gateway = one_child_family(
        child_total=Totals(projects=total[0], prompts=total[1]),
        child_used=Totals(projects=used[0], prompts=used[1]),
        child_drafted=Totals(prompts=drafted),
    )
    units_before = gateway.family_units(MASTER)

    # When releasing
    result = release_surplus(
        gateway,
        ReleaseAsk(CHILD, floor=Totals(projects=floor[0], prompts=floor[1])),
        transfer_context(FakeClock()),
    )

    # Then the family holds the same units, and the child holds what the plan targeted
    assert gateway.family_units(MASTER) == units_before
    assert result.plan is not None
    assert gateway.totals_of(CHILD) == result.plan.target
    assert all(body.get(dim) > 0 for _, body in gateway.transfers for dim in result.plan.lowered)
