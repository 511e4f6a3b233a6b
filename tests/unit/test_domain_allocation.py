"""The two use cases over the in-memory gateway: ensure headroom and release surplus."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serenity_allocator.domain.allocation import (
    ensure_headroom,
    plan_release,
    release_surplus,
    required_totals,
)
from serenity_allocator.domain.ceiling import Ceiling
from serenity_allocator.domain.errors import (
    BrandAiLimitError,
    MalformedResponseError,
    OrgPoolExhaustedError,
    UpstreamError,
    UpstreamUnavailableError,
    WiringError,
    WorkspaceBusyError,
)
from serenity_allocator.domain.model import (
    AiResources,
    Blocks,
    Dimension,
    DimensionUsage,
    Totals,
)
from serenity_allocator.domain.resources import round_up_to_block
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE, TransferPolicy
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

MASTER = "master-1"
CHILD = "child-1"
BIG_POOL = Totals(projects=50, prompts=10_000)


def _family(
    *,
    child_total: Totals,
    child_used: Totals | None = None,
    child_drafted: Totals | None = None,
    pool_total: Totals = BIG_POOL,
    pool_used: Totals | None = None,
) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=pool_total, used=pool_used)
    gateway.add_child(CHILD, MASTER, total=child_total, used=child_used, drafted=child_drafted)
    return gateway


def _usage(used: int, total: int, drafted: int = 0) -> DimensionUsage:
    return DimensionUsage(used=used, drafted=drafted, total=total)


# ==== ensure_headroom ======================================================================


@pytest.mark.parametrize(("child_id", "parent_id"), [("", MASTER), ("  ", MASTER), (CHILD, "")])
def test_ensure_headroom_blank_id_raises_wiring_error_before_any_call(
    child_id: str, parent_id: str
) -> None:
    # Given a blank child or parent id (a wiring bug, never a user input)
    gateway = _family(child_total=Totals(projects=1, prompts=100))

    # When ensuring / Then a wiring error, and the gateway was never called
    with pytest.raises(WiringError):
        ensure_headroom(
            gateway,
            child_id,
            parent_id,
            Totals(prompts=1),
            transfer_context(FakeClock()),
            policy=FAIL_FAST,
        )
    assert gateway.calls == []


@pytest.mark.parametrize(
    ("include_drafted", "expected"),
    [(False, Totals(projects=3, prompts=160)), (True, Totals(projects=3, prompts=190))],
)
def test_ensure_headroom_required_is_used_plus_need_plus_drafted_prompts_when_asked(
    include_drafted: bool, expected: Totals
) -> None:
    # Given a child with drafted work in both dimensions
    child = AiResources(projects=_usage(2, 5, drafted=4), prompts=_usage(150, 300, drafted=30))

    # When the requirement for one more project and 10 prompts is computed
    required = required_totals(child, Totals(projects=1, prompts=10), include_drafted)

    # Then drafted counts only for prompts, and only when asked
    assert required == expected


def test_ensure_headroom_short_dimension_rises_to_required_rounded_up_to_block() -> None:
    # Given a child whose prompts are full (100 of 100) and whose projects are covered
    gateway = _family(
        child_total=Totals(projects=3, prompts=100), child_used=Totals(projects=1, prompts=100)
    )

    # When 101 more prompts are needed
    result = ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(prompts=101),
        transfer_context(FakeClock()),
        policy=FAIL_FAST,
    )

    # Then prompts rise to 201 rounded up to whole blocks of 100 (300); projects keep 3
    assert result.after == Totals(projects=3, prompts=300)
    assert gateway.totals_of(CHILD) == Totals(projects=3, prompts=300)


def test_ensure_headroom_covered_dimension_keeps_its_total() -> None:
    # Given a child short of projects but with plenty of prompts (odd, non-block total)
    gateway = _family(
        child_total=Totals(projects=1, prompts=437), child_used=Totals(projects=1, prompts=12)
    )

    # When one more project and a few prompts are needed
    result = ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(projects=1, prompts=5),
        transfer_context(FakeClock()),
        policy=FAIL_FAST,
    )

    # Then only projects rise; prompts keep their total exactly (not rounded, not lowered)
    assert result.after == Totals(projects=2, prompts=437)


@pytest.mark.parametrize("need", [None, Totals(), Totals(projects=2, prompts=50)])
def test_ensure_headroom_hot_path_makes_exactly_one_read(need: Totals | None) -> None:
    # Given a child that already covers the need
    gateway = _family(
        child_total=Totals(projects=3, prompts=200), child_used=Totals(projects=1, prompts=150)
    )
    observer = RecordingObserver()

    # When ensuring
    result = ensure_headroom(
        gateway, CHILD, MASTER, need, transfer_context(FakeClock(), observer), policy=SETTLE
    )

    # Then one read of the child: no pool read, no transfer, no status poll
    assert gateway.calls == [(READ_RESOURCES, CHILD)]
    assert result.outcome == "hot-path"
    assert result.before == result.after == Totals(projects=3, prompts=200)
    assert observer.calls == [("headroom_checked", ("hot-path",))]


def test_ensure_headroom_exact_need_above_ceiling_raises_brand_ai_limit_without_transfer() -> None:
    # Given a child at 200 prompts under a brand ceiling of 250
    gateway = _family(child_total=Totals(projects=1, prompts=200), child_used=Totals(prompts=200))
    observer = RecordingObserver()

    # When 60 more prompts are needed (the exact need, 260, passes the ceiling)
    with pytest.raises(BrandAiLimitError) as raised:
        ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            Totals(prompts=60),
            transfer_context(FakeClock(), observer),
            ceiling=Ceiling(projects=5, prompts=250),
            policy=FAIL_FAST,
        )

    # Then refused with the dimension and the exact need on the error, and nothing transferred
    assert (raised.value.dimension, raised.value.requested, raised.value.ceiling) == (
        "prompts",
        260,
        250,
    )
    assert gateway.calls_of(TRANSFER) == []
    assert observer.args_of("rejected") == [("brandAiLimit",)]


def test_ensure_headroom_top_up_reads_the_parent_pool_as_advisory_check() -> None:
    # Given a short child and a pool with room
    gateway = _family(child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100))
    observer = RecordingObserver()

    # When ensuring
    ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(prompts=1),
        transfer_context(FakeClock(), observer),
        policy=FAIL_FAST,
    )

    # Then the child is read, the parent pool is read and reported, then one transfer
    assert gateway.calls == [(READ_RESOURCES, CHILD), (READ_RESOURCES, MASTER), (TRANSFER, CHILD)]
    [(parent_id, pool)] = observer.args_of("pool_checked")
    assert parent_id == MASTER
    assert isinstance(pool, AiResources)
    assert pool.prompts.total == BIG_POOL.prompts


def test_ensure_headroom_low_pool_never_blocks_the_transfer_attempt() -> None:
    # Given a pool reporting 0 free prompts (used == total)
    gateway = _family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=400),
        pool_used=Totals(prompts=400),
    )
    observer = RecordingObserver()

    # When ensuring / Then the transfer is still attempted; only its 422 refuses
    with pytest.raises(OrgPoolExhaustedError):
        ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            Totals(prompts=1),
            transfer_context(FakeClock(), observer),
            policy=FAIL_FAST,
        )
    assert gateway.calls_of(TRANSFER) == [CHILD]
    assert "pool_checked" in observer.names()


def test_ensure_headroom_transfer_sends_both_dimensions() -> None:
    # Given a child short only of prompts
    gateway = _family(
        child_total=Totals(projects=4, prompts=100), child_used=Totals(projects=2, prompts=90)
    )

    # When ensuring
    ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(prompts=20),
        transfer_context(FakeClock()),
        policy=FAIL_FAST,
    )

    # Then the one absolute body carries projects (unchanged) AND prompts (raised)
    assert gateway.transfers == [(CHILD, Totals(projects=4, prompts=200))]


def test_ensure_headroom_pool_exhausted_raises_and_reports_rejection() -> None:
    # Given a pool with fewer free prompts than one block
    gateway = _family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=50),
    )
    observer = RecordingObserver()

    # When a top-up of one block is needed
    with pytest.raises(OrgPoolExhaustedError):
        ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            Totals(prompts=10),
            transfer_context(FakeClock(), observer),
            policy=FAIL_FAST,
        )

    # Then refused as pool exhaustion, with nothing moved
    assert observer.args_of("rejected") == [("orgPoolExhausted",)]
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=100)
    assert observer.names() == ["pool_checked", "headroom_checked", "transfer_timed", "rejected"]


@pytest.mark.parametrize(
    ("policy", "transfers", "sleeps"), [(FAIL_FAST, 1, []), (SETTLE, 4, [1.0, 2.0, 3.0])]
)
def test_ensure_headroom_not_ready_retried_per_policy_then_workspace_busy(
    policy: TransferPolicy, transfers: int, sleeps: list[float]
) -> None:
    # Given a child that stays settling
    gateway = _family(child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100))
    gateway.script_not_ready(CHILD, transfers=99)
    clock, observer = FakeClock(), RecordingObserver()

    # When ensuring / Then busy, after as many transfers and sleeps as the policy allows
    with pytest.raises(WorkspaceBusyError):
        ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            Totals(prompts=1),
            transfer_context(clock, observer),
            policy=policy,
        )
    assert len(gateway.calls_of(TRANSFER)) == transfers
    assert clock.sleeps == sleeps
    assert observer.args_of("rejected") == [("workspaceBusy",)]


@pytest.mark.parametrize(
    "error",
    [
        UpstreamError(500, "Internal Server Error", TRANSFER),
        UpstreamError(403, '{"message": "invalid access attempt"}', TRANSFER),
    ],
)
def test_ensure_headroom_unexpected_upstream_error_propagates_unchanged(
    error: UpstreamError,
) -> None:
    # Given a transfer that fails in a way no rule claims
    gateway = _family(child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100))
    gateway.script_errors(TRANSFER, CHILD, [error])
    observer = RecordingObserver()

    # When ensuring / Then the very same error propagates, and no business rejection is counted
    with pytest.raises(UpstreamError) as raised:
        ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            Totals(prompts=1),
            transfer_context(FakeClock(), observer),
            policy=FAIL_FAST,
        )
    assert raised.value is error
    assert observer.args_of("rejected") == []


def test_ensure_headroom_top_up_returns_outcome_before_and_after() -> None:
    # Given a short child
    gateway = _family(
        child_total=Totals(projects=2, prompts=100), child_used=Totals(projects=2, prompts=60)
    )
    observer = RecordingObserver()

    # When one project and 50 prompts are needed
    result = ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(projects=1, prompts=50),
        transfer_context(FakeClock(), observer),
        policy=FAIL_FAST,
    )

    # Then the result tells what happened, and the units came out of the pool
    assert result.outcome == "topped-up"
    assert result.topped_up
    assert result.before == Totals(projects=2, prompts=100)
    assert result.after == Totals(projects=3, prompts=200)
    assert result.attempts == 1
    assert not result.used_exact_fallback
    assert gateway.totals_of(MASTER) == Totals(projects=49, prompts=9_900)
    assert observer.args_of("headroom_checked") == [("topped-up",)]
    assert observer.args_of("transfer_timed") == [("fail-fast", 0.0)]


def test_ensure_headroom_exact_fallback_saves_a_tight_pool() -> None:
    # Given a pool with exactly the 10 prompts needed, but not a whole block of 100
    gateway = _family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=10),
    )
    observer = RecordingObserver()

    # When ensuring with the exact fallback on
    result = ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(prompts=10),
        transfer_context(FakeClock(), observer),
        policy=FAIL_FAST,
        exact_fallback=True,
    )

    # Then the block transfer was refused, the exact one went through
    assert gateway.transfers == [
        (CHILD, Totals(projects=1, prompts=200)),
        (CHILD, Totals(projects=1, prompts=110)),
    ]
    assert result.outcome == "topped-up"
    assert result.after == Totals(projects=1, prompts=110)
    assert result.used_exact_fallback
    assert observer.args_of("tight_pool_fallback") == [("saved",)]
    assert observer.args_of("rejected") == []


def test_ensure_headroom_exact_fallback_is_skipped_when_the_pool_read_cannot_cover_it() -> None:
    # Given a pool with 9 free prompts, one short of the exact need
    gateway = _family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=9),
    )
    observer = RecordingObserver()

    # When ensuring with the exact fallback on / Then refused after the block attempt only:
    # the pool read moments before shows the exact raise cannot fit either
    with pytest.raises(OrgPoolExhaustedError):
        ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            Totals(prompts=10),
            transfer_context(FakeClock(), observer),
            policy=FAIL_FAST,
            exact_fallback=True,
        )
    assert len(gateway.transfers) == 1
    assert observer.args_of("tight_pool_fallback") == [("rejected",)]
    assert observer.args_of("rejected") == [("orgPoolExhausted",)]
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=100)


def test_ensure_headroom_exact_fallback_refused_upstream_is_rejected() -> None:
    # Given a pool whose read says the exact raise fits, but the upstream refuses it anyway
    # (another child took the units between the read and the transfer)
    gateway = _family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=50),
    )
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted(), pool_exhausted()])
    observer = RecordingObserver()

    # When ensuring with the exact fallback on
    with pytest.raises(OrgPoolExhaustedError):
        ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            Totals(prompts=10),
            transfer_context(FakeClock(), observer),
            policy=FAIL_FAST,
            exact_fallback=True,
        )

    # Then both attempts were made (block, then exact) and the request is rejected
    assert len(gateway.calls_of(TRANSFER)) == 2
    assert observer.args_of("tight_pool_fallback") == [("rejected",)]
    assert observer.args_of("rejected") == [("orgPoolExhausted",)]
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=100)


def test_ensure_headroom_unmetered_parent_skips_the_transfer() -> None:
    # Given a short child under a parent that does not meter AI writes
    gateway = _family(child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100))
    asked: list[str] = []

    def is_unmetered(parent_id: str) -> bool:
        asked.append(parent_id)
        return True

    # When ensuring
    result = ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(prompts=10),
        transfer_context(FakeClock()),
        policy=FAIL_FAST,
        is_unmetered=is_unmetered,
    )

    # Then no units were carved: the outcome says unmetered and nothing moved
    assert result.outcome == "unmetered"
    assert asked == [MASTER]
    assert gateway.calls_of(TRANSFER) == []
    assert result.before == result.after == Totals(projects=1, prompts=100)


@pytest.mark.parametrize(
    ("include_drafted", "outcome", "after"),
    [
        (False, "hot-path", Totals(projects=1, prompts=100)),
        (True, "topped-up", Totals(projects=1, prompts=200)),
    ],
)
def test_ensure_headroom_counts_drafts_only_when_asked(
    include_drafted: bool, outcome: str, after: Totals
) -> None:
    # Given a child using 50 of 100 prompts with 80 more drafted
    gateway = _family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(projects=1, prompts=50),
        child_drafted=Totals(projects=0, prompts=80),
    )

    # When 10 prompts are ensured, with or without counting the drafts
    result = ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(prompts=10),
        transfer_context(FakeClock()),
        include_drafted=include_drafted,
        policy=FAIL_FAST,
    )

    # Then 60 fit as they are; 140 (drafts counted) need the next whole block
    assert (result.outcome, result.after) == (outcome, after)
    assert gateway.totals_of(CHILD) == after


def test_ensure_headroom_hot_path_does_not_consult_is_unmetered() -> None:
    # Given a child that covers the need
    gateway = _family(child_total=Totals(projects=1, prompts=100))

    def is_unmetered(parent_id: str) -> bool:
        raise AssertionError("the hot path must not consult the parent")

    # When ensuring / Then the hot path returns on its one read
    result = ensure_headroom(
        gateway,
        CHILD,
        MASTER,
        Totals(prompts=10),
        transfer_context(FakeClock()),
        policy=FAIL_FAST,
        is_unmetered=is_unmetered,
    )
    assert result.outcome == "hot-path"
    assert gateway.calls == [(READ_RESOURCES, CHILD)]


@settings(max_examples=200, deadline=None)
@given(
    used=st.tuples(st.integers(0, 20), st.integers(0, 2_000)),
    total=st.tuples(st.integers(0, 20), st.integers(0, 2_000)),
    need=st.tuples(st.integers(0, 10), st.integers(0, 1_000)),
    pool=st.tuples(st.integers(0, 30), st.integers(0, 3_000)),
    exact_fallback=st.booleans(),
)
def test_ensure_headroom_conserves_units_and_covers_the_need_when_it_succeeds(
    used: tuple[int, int],
    total: tuple[int, int],
    need: tuple[int, int],
    pool: tuple[int, int],
    exact_fallback: bool,
) -> None:
    # Given any child and pool
    gateway = _family(
        child_total=Totals(projects=total[0], prompts=total[1]),
        child_used=Totals(projects=used[0], prompts=used[1]),
        pool_total=Totals(projects=pool[0], prompts=pool[1]),
    )
    units_before = gateway.family_units(MASTER)
    wanted = Totals(projects=need[0], prompts=need[1])

    # When ensuring
    try:
        result = ensure_headroom(
            gateway,
            CHILD,
            MASTER,
            wanted,
            transfer_context(FakeClock()),
            policy=FAIL_FAST,
            exact_fallback=exact_fallback,
        )
    except OrgPoolExhaustedError:
        result = None

    # Then units are conserved, and a success leaves room for used + need in every dimension
    assert gateway.family_units(MASTER) == units_before
    if result is not None:
        after = gateway.totals_of(CHILD)
        assert after == result.after
        assert after.projects >= used[0] + need[0]
        assert after.prompts >= used[1] + need[1]


# ==== release_surplus ======================================================================


@pytest.mark.parametrize(
    ("child", "floor", "expected_target"),
    [
        # used + drafted = 130 -> 200 by blocks of 100; floor 100 is lower
        (AiResources(projects=_usage(3, 10), prompts=_usage(100, 900, 30)), None, (3, 200)),
        # nothing used: the floor (one block by default) wins
        (AiResources(projects=_usage(0, 10), prompts=_usage(0, 900)), None, (1, 100)),
        # an explicit floor above usage wins
        (
            AiResources(projects=_usage(1, 10), prompts=_usage(10, 900)),
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
    gateway = _family(
        child_total=Totals(projects=10, prompts=900),
        child_used=Totals(projects=3, prompts=100),
        child_drafted=Totals(prompts=30),
    )
    units_before = gateway.family_units(MASTER)
    observer = RecordingObserver()

    # When releasing
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock(), observer))

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
    gateway = _family(
        child_total=Totals(projects=1, prompts=500),
        child_used=Totals(projects=1, prompts=80),
        child_drafted=Totals(prompts=150),
    )

    # When releasing
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock()))

    # Then the target covers used + drafted (230 -> 300), not used alone (80 -> 100):
    # a deliberate change from the first allocator, so a publish never finds its units gone
    assert result.plan is not None
    assert result.plan.target.prompts == 300
    assert result.plan.drafted == Totals(prompts=150)


def test_release_surplus_lowers_only_dimensions_below_total_and_above_zero() -> None:
    # Given a child with prompt surplus and projects exactly at their target
    gateway = _family(
        child_total=Totals(projects=2, prompts=600), child_used=Totals(projects=2, prompts=150)
    )

    # When releasing
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock()))

    # Then only prompts are lowered; projects keep their total in the absolute body
    assert result.plan is not None
    assert result.plan.lowered == (Dimension.PROMPTS,)
    assert gateway.transfers == [(CHILD, Totals(projects=2, prompts=200))]


def test_release_surplus_would_be_zero_keeps_total_and_requires_decommission() -> None:
    # Given an idle child and a zero floor: both targets would be 0
    gateway = _family(child_total=Totals(projects=3, prompts=400))
    observer = RecordingObserver()

    # When releasing
    result = release_surplus(
        gateway, CHILD, transfer_context(FakeClock(), observer), floor=Totals()
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
    gateway = _family(child_total=Totals(projects=3, prompts=900), child_used=Totals(prompts=250))

    # When releasing
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock()), floor=Totals())

    # Then prompts are released, projects keep their total and are flagged for decommission
    assert result.outcome == "released"
    assert result.plan is not None
    assert result.plan.requires_decommission == (Dimension.PROJECTS,)
    assert gateway.transfers == [(CHILD, Totals(projects=3, prompts=300))]


def test_release_surplus_nothing_to_release() -> None:
    # Given a child at its target already
    gateway = _family(
        child_total=Totals(projects=1, prompts=200), child_used=Totals(projects=1, prompts=120)
    )

    # When releasing
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock()))

    # Then one read, no transfer
    assert result.outcome == "nothing-to-release"
    assert gateway.calls == [(READ_RESOURCES, CHILD)]


def test_release_surplus_dry_run_reads_and_reports_the_exact_target() -> None:
    # Given a child with surplus
    gateway = _family(
        child_total=Totals(projects=5, prompts=800), child_used=Totals(projects=2, prompts=310)
    )
    observer = RecordingObserver()

    # When dry-running
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock(), observer), dry_run=True)

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
    gateway = _family(child_total=Totals(projects=5, prompts=800))
    script(gateway)
    observer = RecordingObserver()

    # When releasing
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock(), observer))

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
    gateway = _family(child_total=Totals(projects=5, prompts=800))
    gateway.script_errors(op, CHILD, [error])

    # When releasing / Then the very same error propagates
    with pytest.raises(type(error)) as raised:
        release_surplus(gateway, CHILD, transfer_context(FakeClock()))
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
    gateway = _family(child_total=Totals(projects=5, prompts=800))
    gateway.script_errors(op, CHILD, [error])
    observer = RecordingObserver()

    # When releasing / Then the error propagates, and the release was still counted as one
    with pytest.raises(type(error)):
        release_surplus(gateway, CHILD, transfer_context(FakeClock(), observer))
    assert observer.args_of("release_finished") == [("error",)]


def test_release_surplus_dry_run_with_nothing_to_release_reports_its_natural_outcome() -> None:
    # Given a child already at the floor
    gateway = _family(child_total=Totals(projects=1, prompts=100))
    observer = RecordingObserver()

    # When dry-running / Then the preview counts as what a real release would report
    result = release_surplus(gateway, CHILD, transfer_context(FakeClock(), observer), dry_run=True)
    assert result.outcome == "dry-run"
    assert observer.args_of("release_finished") == [("nothing-to-release",)]


def test_release_surplus_blank_id_raises_wiring_error_before_any_call() -> None:
    # Given a blank child id
    gateway = _family(child_total=Totals(projects=5, prompts=800))

    # When releasing / Then a wiring error, and no call
    with pytest.raises(WiringError):
        release_surplus(gateway, " ", transfer_context(FakeClock()))
    assert gateway.calls == []


def test_release_surplus_retries_a_settling_child_on_the_settle_path() -> None:
    # Given a child still settling from a previous change for one transfer
    gateway = _family(child_total=Totals(projects=5, prompts=800))
    gateway.script_errors(TRANSFER, CHILD, [not_ready()])
    clock = FakeClock()

    # When releasing (settle policy by default)
    result = release_surplus(gateway, CHILD, transfer_context(clock))

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
    gateway = _family(
        child_total=Totals(projects=total[0], prompts=total[1]),
        child_used=Totals(projects=used[0], prompts=used[1]),
        child_drafted=Totals(prompts=drafted),
    )
    units_before = gateway.family_units(MASTER)

    # When releasing
    result = release_surplus(
        gateway,
        CHILD,
        transfer_context(FakeClock()),
        floor=Totals(projects=floor[0], prompts=floor[1]),
    )

    # Then the family holds the same units, and the child holds what the plan targeted
    assert gateway.family_units(MASTER) == units_before
    assert result.plan is not None
    assert gateway.totals_of(CHILD) == result.plan.target
    assert all(body.get(dim) > 0 for _, body in gateway.transfers for dim in result.plan.lowered)
