"""ensure_headroom over the in-memory gateway: the required totals, top-ups, refusals, retries."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureRules,
    ensure_headroom,
    required_totals,
)
from serenity_allocator.domain.errors import (
    BrandAiLimitError,
    OrgPoolExhaustedError,
    UpstreamError,
    WiringError,
    WorkspaceBusyError,
)
from serenity_allocator.domain.model import AiResources, Totals
from serenity_allocator.domain.sizing import Ceiling
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE, TransferPolicy
from tests.fakes import READ_RESOURCES, TRANSFER, FakeClock, RecordingObserver, transfer_context
from tests.unit.domain.allocation_rig import (
    BIG_POOL,
    CHILD,
    MASTER,
    dimension_usage,
    one_child_family,
)

# ==== ensure_headroom ======================================================================


@pytest.mark.parametrize(("child_id", "parent_id"), [("", MASTER), ("  ", MASTER), (CHILD, "")])
def test_ensure_headroom_blank_id_raises_wiring_error_before_any_call(
    child_id: str, parent_id: str
) -> None:
    # Given a blank child or parent id (a wiring bug, never a user input)
    gateway = one_child_family(child_total=Totals(projects=1, prompts=100))

    # When ensuring / Then a wiring error, and the gateway was never called
    with pytest.raises(WiringError):
        ensure_headroom(
            gateway,
            EnsureAsk(child_id, parent_id, Totals(prompts=1), include_drafted=False),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock()),
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
    child = AiResources(
        projects=dimension_usage(2, 5, drafted=4), prompts=dimension_usage(150, 300, drafted=30)
    )

    # When the requirement for one more project and 10 prompts is computed
    required = required_totals(child, Totals(projects=1, prompts=10), include_drafted)

    # Then drafted counts only for prompts, and only when asked
    assert required == expected


def test_ensure_headroom_short_dimension_rises_to_required_plus_four_blocks() -> None:
    # Given a child whose prompts are full (100 of 100) and whose projects are covered
    gateway = one_child_family(
        child_total=Totals(projects=3, prompts=100), child_used=Totals(projects=1, prompts=100)
    )

    # When 60 more prompts are needed
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=60), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
    )

    # Then prompts rise to 160 plus four blocks of 100 from a pool with room (560, more than
    # the 60 asked again); projects (two to spare) keep 3
    assert result.after == Totals(projects=3, prompts=560)
    assert gateway.totals_of(CHILD) == Totals(projects=3, prompts=560)


def test_ensure_headroom_covered_dimension_keeps_its_total() -> None:
    # Given a child short of projects but with plenty of prompts (odd, non-block total)
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=437), child_used=Totals(projects=1, prompts=12)
    )

    # When one more project and a few prompts are needed
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(projects=1, prompts=5), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
    )

    # Then only projects rise (to the 2 needed plus four blocks of one: 6); prompts (420 left,
    # over two blocks) keep their total exactly (not rounded, not lowered)
    assert result.after == Totals(projects=6, prompts=437)


@pytest.mark.parametrize("need", [Totals(), Totals(projects=2)])
def test_ensure_headroom_hot_path_makes_exactly_one_read(need: Totals) -> None:
    # Given a child that already covers the need with two blocks of prompts to spare (the
    # refill mark) and at least two projects beyond either need (the projects' refill mark)
    gateway = one_child_family(
        child_total=Totals(projects=5, prompts=350), child_used=Totals(projects=1, prompts=150)
    )
    observer = RecordingObserver()

    # When ensuring
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, need, include_drafted=False),
        EnsureRules(policy=SETTLE),
        transfer_context(FakeClock(), observer),
    )

    # Then one read of the child: no pool read, no transfer, no status poll
    assert gateway.calls == [(READ_RESOURCES, CHILD)]
    assert result.outcome == "hot-path"
    assert result.before == result.after == Totals(projects=5, prompts=350)
    assert observer.calls == [("headroom_checked", ("hot-path",))]


def test_ensure_headroom_exact_need_above_ceiling_raises_brand_ai_limit_without_transfer() -> None:
    # Given a child at 200 prompts under a brand ceiling of 250
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=200), child_used=Totals(prompts=200)
    )
    observer = RecordingObserver()

    # When 60 more prompts are needed (the exact need, 260, passes the ceiling)
    with pytest.raises(BrandAiLimitError) as raised:
        ensure_headroom(
            gateway,
            EnsureAsk(
                CHILD,
                MASTER,
                Totals(prompts=60),
                include_drafted=False,
                ceiling=Ceiling(projects=5, prompts=250),
            ),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock(), observer),
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
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100)
    )
    observer = RecordingObserver()

    # When ensuring
    ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=1), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )

    # Then the child is read, the parent pool is read and reported, then one transfer
    assert gateway.calls == [(READ_RESOURCES, CHILD), (READ_RESOURCES, MASTER), (TRANSFER, CHILD)]
    [(parent_id, pool)] = observer.args_of("pool_checked")
    assert parent_id == MASTER
    assert isinstance(pool, AiResources)
    assert pool.prompts.total == BIG_POOL.prompts


def test_ensure_headroom_pool_that_cannot_cover_the_exact_need_refuses_without_a_transfer() -> None:
    # Given a pool reporting 0 free prompts (used == total)
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=400),
        pool_used=Totals(prompts=400),
    )
    observer = RecordingObserver()

    # When ensuring / Then refused on the pool read made a moment before: no transfer that
    # could only be refused (ADR 0027)
    with pytest.raises(OrgPoolExhaustedError):
        ensure_headroom(
            gateway,
            EnsureAsk(CHILD, MASTER, Totals(prompts=1), include_drafted=False),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock(), observer),
        )
    assert gateway.calls_of(TRANSFER) == []
    assert observer.names() == ["pool_checked", "headroom_checked", "rejected"]


def test_ensure_headroom_transfer_sends_both_dimensions() -> None:
    # Given a child short only of prompts
    gateway = one_child_family(
        child_total=Totals(projects=4, prompts=100), child_used=Totals(projects=2, prompts=90)
    )

    # When ensuring
    ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=20), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
    )

    # Then the one absolute body carries projects (unchanged, two to spare) AND prompts (raised
    # to the 110 needed plus four blocks)
    assert gateway.transfers == [(CHILD, Totals(projects=4, prompts=510))]


def test_ensure_headroom_pool_exhausted_raises_and_reports_rejection() -> None:
    # Given a pool with fewer free prompts than the need
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=5),
    )
    observer = RecordingObserver()

    # When a top-up of 10 is needed
    with pytest.raises(OrgPoolExhaustedError):
        ensure_headroom(
            gateway,
            EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock(), observer),
        )

    # Then refused as pool exhaustion, with nothing moved
    assert observer.args_of("rejected") == [("orgPoolExhausted",)]
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=100)
    assert observer.names() == ["pool_checked", "headroom_checked", "rejected"]


@pytest.mark.parametrize(
    ("policy", "transfers", "sleeps"), [(FAIL_FAST, 1, []), (SETTLE, 4, [1.0, 2.0, 3.0])]
)
def test_ensure_headroom_not_ready_retried_per_policy_then_workspace_busy(
    policy: TransferPolicy, transfers: int, sleeps: list[float]
) -> None:
    # Given a child that stays settling
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100)
    )
    gateway.script_not_ready(CHILD, transfers=99)
    clock, observer = FakeClock(), RecordingObserver()

    # When ensuring / Then busy, after as many transfers and sleeps as the policy allows
    with pytest.raises(WorkspaceBusyError):
        ensure_headroom(
            gateway,
            EnsureAsk(CHILD, MASTER, Totals(prompts=1), include_drafted=False),
            EnsureRules(policy=policy),
            transfer_context(clock, observer),
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
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100)
    )
    gateway.script_errors(TRANSFER, CHILD, [error])
    observer = RecordingObserver()

    # When ensuring / Then the very same error propagates, and no business rejection is counted
    with pytest.raises(UpstreamError) as raised:
        ensure_headroom(
            gateway,
            EnsureAsk(CHILD, MASTER, Totals(prompts=1), include_drafted=False),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock(), observer),
        )
    assert raised.value is error
    assert observer.args_of("rejected") == []


def test_ensure_headroom_top_up_returns_outcome_before_and_after() -> None:
    # Given a short child
    gateway = one_child_family(
        child_total=Totals(projects=2, prompts=100), child_used=Totals(projects=2, prompts=60)
    )
    observer = RecordingObserver()

    # When one project and 50 prompts are needed
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(projects=1, prompts=50), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
    )

    # Then the result tells what happened (projects: the 3 needed plus four blocks of one;
    # prompts: 110 plus four blocks), and the units came out of the pool (5 and 410)
    assert result.outcome == "topped-up"
    assert result.topped_up
    assert result.before == Totals(projects=2, prompts=100)
    assert result.after == Totals(projects=7, prompts=510)
    assert result.attempts == 1
    assert not result.used_exact_fallback
    assert gateway.totals_of(MASTER) == Totals(projects=45, prompts=9_590)
    assert observer.args_of("headroom_checked") == [("topped-up",)]
    assert observer.args_of("transfer_timed") == [("fail-fast", 0.0)]
