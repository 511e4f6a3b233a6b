"""ensure_headroom past the hot path without a shortage: refills ahead, surplus back, and the
hooks that decide whether the pool is read at all (ADR 0027)."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureHooks,
    EnsureResult,
    EnsureRules,
    ensure_headroom,
)
from serenity_allocator.domain.errors import OrgPoolExhaustedError
from serenity_allocator.domain.model import AiResources, DimensionUsage, PromptTiers, Totals
from serenity_allocator.domain.sizing import Ceiling
from serenity_allocator.domain.transfer import FAIL_FAST
from tests.fakes import (
    READ_RESOURCES,
    TRANSFER,
    FakeClock,
    InMemoryGateway,
    RecordingObserver,
    pool_exhausted,
    transfer_context,
)
from tests.unit.domain.allocation_rig import CHILD, MASTER, one_child_family

# A child holding 200 prompts with 180 used: a need of 10 leaves 10, under the refill mark (two
# blocks: 200).
LOW_TOTAL, LOW_USED = Totals(projects=5, prompts=200), Totals(projects=1, prompts=180)
NEED = Totals(prompts=10)


class _Family:
    """A family of ``children`` under MASTER that confirms (or refuses) every parent link."""

    def __init__(self, children: int, *, confirms: bool = True) -> None:
        self.children, self.confirms = children, confirms

    def is_parent_of(self, parent_id: str, child_id: str) -> bool:
        return self.confirms and (parent_id, child_id) == (MASTER, CHILD)

    def children_of(self, parent_id: str) -> int:
        return self.children if parent_id == MASTER else 1


def _ensure(
    gateway: InMemoryGateway,
    observer: RecordingObserver,
    hooks: EnsureHooks,
    ceiling: Ceiling | None = None,
) -> EnsureResult:
    return ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, NEED, include_drafted=False, ceiling=ceiling),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer),
        hooks,
    )


def test_a_refill_ahead_is_announced_sent_and_reported_as_a_top_up() -> None:
    # Given a child left under its refill mark by its need, and a pool with room
    gateway = one_child_family(child_total=LOW_TOTAL, child_used=LOW_USED)
    observer, announced = RecordingObserver(), []
    hooks = EnsureHooks(before_transfer=lambda before, target: announced.append((before, target)))

    # When ensuring
    result = _ensure(gateway, observer, hooks)

    # Then it rises to 190 + 400 (the need plus four blocks): one transfer, announced first,
    # reported as refilled and returned as a top-up
    target = Totals(projects=5, prompts=590)
    assert announced == [(LOW_TOTAL, target)]
    assert gateway.transfers == [(CHILD, target)]
    assert (result.outcome, result.before, result.after, result.attempts) == (
        "topped-up",
        LOW_TOTAL,
        target,
        1,
    )
    assert observer.args_of("headroom_checked") == [("refilled",)]


def test_surplus_given_back_to_a_tight_pool_is_a_rightsized_ensure() -> None:
    # Given a child holding 500 prompts, using 100, under a pool with 50 free (tight: 50² / 1600
    # is 1 of headroom), last read as tight too
    gateway = one_child_family(
        child_total=Totals(projects=5, prompts=500),
        child_used=Totals(projects=1, prompts=100),
        pool_total=Totals(projects=50, prompts=600),
        pool_used=Totals(prompts=550),
    )
    observer = RecordingObserver()

    last = Totals(projects=50, prompts=50)

    # When 10 more are needed
    result = _ensure(gateway, observer, EnsureHooks(last_pool_free=lambda parent: last))

    # Then it keeps 110 + 1 and the rest goes back, reported as rightsized
    assert (result.outcome, result.after) == ("rightsized", Totals(projects=5, prompts=111))
    assert gateway.transfers == [(CHILD, Totals(projects=5, prompts=111))]
    assert observer.args_of("headroom_checked") == [("rightsized",)]


@pytest.mark.parametrize("error", [pool_exhausted(), OrgPoolExhaustedError()])
def test_a_refill_the_pool_refuses_leaves_the_child_on_the_hot_path(error: Exception) -> None:
    # Given a child under its refill mark whose refill the pool refuses (drained since its read)
    gateway = one_child_family(child_total=LOW_TOTAL, child_used=LOW_USED)
    gateway.script_errors(TRANSFER, CHILD, [error])
    observer = RecordingObserver()

    # When ensuring
    result = _ensure(gateway, observer, EnsureHooks())

    # Then the request's room is there: the hot path, nothing moved
    assert (result.outcome, result.before, result.after) == ("hot-path", LOW_TOTAL, LOW_TOTAL)
    assert gateway.totals_of(CHILD) == LOW_TOTAL
    assert observer.names() == ["pool_checked", "transfer_timed", "headroom_checked"]
    assert observer.args_of("headroom_checked") == [("hot-path",)]


def test_a_refill_past_the_ceiling_keeps_what_the_child_holds() -> None:
    # Given a child holding 200 prompts under a ceiling of 150 (lowered since), its need fitting
    gateway = one_child_family(child_total=LOW_TOTAL, child_used=LOW_USED)
    observer = RecordingObserver()

    # When ensuring
    result = _ensure(gateway, observer, EnsureHooks(), ceiling=Ceiling(prompts=150))

    # Then no refill and no refusal: the hot path
    assert (result.outcome, result.after) == ("hot-path", LOW_TOTAL)
    assert gateway.calls_of(TRANSFER) == []
    assert observer.args_of("headroom_checked") == [("hot-path",)]


def test_a_fitting_request_under_a_parent_that_is_not_the_childs_stays_on_the_hot_path() -> None:
    # Given a child under its refill mark and a family that does not confirm the parent
    gateway = one_child_family(child_total=LOW_TOTAL, child_used=LOW_USED)
    observer = RecordingObserver()

    # When ensuring
    result = _ensure(gateway, observer, EnsureHooks(family=_Family(1, confirms=False)))

    # Then nothing moves and the pool is never read
    assert (result.outcome, result.after) == ("hot-path", LOW_TOTAL)
    assert gateway.calls == [(READ_RESOURCES, CHILD)]
    assert observer.calls == [("headroom_checked", ("hot-path",))]


def test_a_fitting_request_under_an_unmetered_parent_stays_on_the_hot_path() -> None:
    # Given a child under its refill mark whose parent does not meter AI writes
    gateway = one_child_family(child_total=LOW_TOTAL, child_used=LOW_USED)
    observer = RecordingObserver()

    # When ensuring
    result = _ensure(gateway, observer, EnsureHooks(is_unmetered=lambda parent: parent == MASTER))

    # Then a hot path (not "unmetered": nothing was needed), the pool never read
    assert (result.outcome, result.after) == ("hot-path", LOW_TOTAL)
    assert gateway.calls == [(READ_RESOURCES, CHILD)]
    assert observer.calls == [("headroom_checked", ("hot-path",))]


def _last_free(prompts: int) -> EnsureHooks:
    free = Totals(projects=1_000, prompts=prompts)
    return EnsureHooks(
        family=_Family(10),
        last_pool_free=lambda parent: free if parent == MASTER else None,
    )


def test_a_pool_last_read_tight_among_its_children_spares_a_refill_its_read() -> None:
    # Given a child under its refill mark, and its pool last read with 3,000 prompts free among 10
    # children (a level of 300: tight, no refill)
    gateway = one_child_family(child_total=LOW_TOTAL, child_used=LOW_USED)
    observer = RecordingObserver()

    # When ensuring
    result = _ensure(gateway, observer, _last_free(3_000))

    # Then one read of the child: the hot path, the pool not read again
    assert result.outcome == "hot-path"
    assert gateway.calls == [(READ_RESOURCES, CHILD)]


def test_a_pool_last_read_with_room_among_its_children_is_read_for_a_refill() -> None:
    # Given the same child, its pool last read with 4,000 free among 10 (a level of 400: room)
    gateway = one_child_family(child_total=LOW_TOTAL, child_used=LOW_USED)
    observer = RecordingObserver()

    # When ensuring
    _ensure(gateway, observer, _last_free(4_000))

    # Then the pool is read, and the refill sent
    assert gateway.calls_of(READ_RESOURCES) == [CHILD, MASTER]
    assert gateway.calls_of(TRANSFER) == [CHILD]


def test_a_top_up_the_pool_refuses_on_transfer_is_rejected_without_a_fallback() -> None:
    # Given a short child, a pool read with room, and a transfer the pool then refuses (422)
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100)
    )
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])
    observer = RecordingObserver()

    # When ensuring without the exact fallback / Then refused, and counted as pool exhaustion
    with pytest.raises(OrgPoolExhaustedError):
        _ensure(gateway, observer, EnsureHooks())
    assert observer.args_of("rejected") == [("orgPoolExhausted",)]


class _TieredPoolGateway(InMemoryGateway):
    """The in-memory family with a tiered pool: its prompts come in daily and weekly tiers."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[Totals, bool]] = []

    def read_resources(self, workspace_id: str) -> AiResources:
        resources = super().read_resources(workspace_id)
        if workspace_id != MASTER:
            return resources
        tier = DimensionUsage(used=0, total=10_000)
        return resources.model_copy(update={"prompt_tiers": PromptTiers(daily=tier, weekly=tier)})

    def transfer(self, workspace_id: str, totals: Totals, *, include_prompts: bool = True) -> None:
        self.sent.append((totals, include_prompts))
        super().transfer(workspace_id, totals)


def _tiered_family(child_total: Totals, child_used: Totals) -> _TieredPoolGateway:
    gateway = _TieredPoolGateway()
    gateway.add_master(MASTER, total=Totals(projects=50, prompts=10_000))
    gateway.add_child(CHILD, MASTER, total=child_total, used=child_used)
    return gateway


def test_a_refill_ahead_from_a_tiered_pool_sends_projects_only() -> None:
    # Given a child with no project to spare after its need, under a tiered pool with room
    gateway = _tiered_family(Totals(projects=2, prompts=500), Totals(projects=1, prompts=10))

    # When one more project is needed
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(projects=1), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
    )

    # Then projects are refilled to the 2 needed plus four blocks of one (6), in a body without
    # prompts
    assert result.after == Totals(projects=6, prompts=500)
    assert gateway.sent == [(Totals(projects=6, prompts=500), False)]


def test_the_exact_fallback_from_a_tiered_pool_sends_projects_only() -> None:
    # Given a child short of a project under a tiered pool that refuses the sized top-up
    gateway = _tiered_family(Totals(projects=1, prompts=500), Totals(projects=1, prompts=10))
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])

    # When one more project is needed, with the exact fallback on
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(projects=1), include_drafted=False),
        EnsureRules(policy=FAIL_FAST, exact_fallback=True),
        transfer_context(FakeClock()),
    )

    # Then the exact need (2 projects) is sent after the sized 6 (2 + four blocks of one), both
    # without prompts
    assert (result.after, result.used_exact_fallback) == (Totals(projects=2, prompts=500), True)
    assert gateway.sent == [
        (Totals(projects=6, prompts=500), False),
        (Totals(projects=2, prompts=500), False),
    ]
