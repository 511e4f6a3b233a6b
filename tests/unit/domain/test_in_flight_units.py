"""Units on their way: what a child's recent ensures made room for that its use does not show
yet, and how an ensure carves them beside its own need (ADR 0027, concurrent fronts)."""

from __future__ import annotations

from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureHooks,
    EnsureResult,
    EnsureRules,
    ensure_headroom,
)
from serenity_allocator.domain.container_memory import IN_FLIGHT_S, InFlightUnits
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sizing import Ceiling
from serenity_allocator.domain.transfer import FAIL_FAST
from tests.fakes import TRANSFER, FakeClock, InMemoryGateway, pool_exhausted, transfer_context
from tests.unit.domain.allocation_rig import CHILD, MASTER, one_child_family


def _prompts(n: int) -> Totals:
    return Totals(prompts=n)


# ==== the memory ===========================================================================


def test_pending_is_what_was_served_less_what_the_childs_use_grew_by() -> None:
    # Given two ensures served for a child using 100 prompts: 30, then 20
    clock = FakeClock()
    units = InFlightUnits(clock)
    units.note(CHILD, _prompts(100), _prompts(30))
    units.note(CHILD, _prompts(100), _prompts(20))

    # Then all 50 are on their way while nothing is written; 20 once 30 are; none once all are
    assert units.pending(CHILD, _prompts(100)) == _prompts(50)
    assert units.pending(CHILD, _prompts(130)) == _prompts(20)
    assert units.pending(CHILD, _prompts(150)) == Totals()
    # And once everything was written the child starts afresh: its use alone counts
    assert units.pending(CHILD, _prompts(100)) == Totals()


def test_a_served_ensure_counts_for_the_window_and_then_no_more() -> None:
    # Given an ensure of 30 served now
    clock = FakeClock()
    units = InFlightUnits(clock)
    units.note(CHILD, _prompts(100), _prompts(30))

    # Then it is on its way until its guard's deadline has passed, not a moment longer
    clock.advance(IN_FLIGHT_S - 0.1)
    assert units.pending(CHILD, _prompts(100)) == _prompts(30)
    clock.advance(0.1)
    assert units.pending(CHILD, _prompts(100)) == Totals()


def test_a_release_forgets_the_childs_units_and_no_other_childs() -> None:
    clock = FakeClock()
    units = InFlightUnits(clock)
    units.note(CHILD, _prompts(100), _prompts(30))
    units.note("child-2", Totals(projects=1), Totals(projects=1))

    units.forget(CHILD)

    assert units.pending(CHILD, _prompts(100)) == Totals()
    assert units.pending("child-2", Totals(projects=1)) == Totals(projects=1)


def test_children_whose_ensures_all_expired_are_forgotten_as_others_are_noted() -> None:
    # Given two children served long ago, and one of them touched since
    clock = FakeClock()
    units = InFlightUnits(clock)
    units.note("old-1", _prompts(0), _prompts(5))
    units.note("old-2", _prompts(0), _prompts(5))
    clock.advance(IN_FLIGHT_S)  # exactly the window: expired, as in pending()

    # When a third child is served
    units.note(CHILD, _prompts(0), _prompts(5))

    # Then the memory holds the third alone
    assert list(units._served) == [CHILD]


def test_an_ensure_that_asked_nothing_is_not_remembered() -> None:
    clock = FakeClock()
    units = InFlightUnits(clock)
    units.note(CHILD, _prompts(90), Totals())
    units.note(CHILD, _prompts(100), _prompts(10))

    # Its use then (90) is no baseline: growth counts from the ensure that asked for units
    assert units.pending(CHILD, _prompts(105)) == _prompts(5)


# ==== the ensure ===========================================================================


def _tight_family(pool_prompts: int) -> InMemoryGateway:
    # A child using all of its 100 prompts and its one project, in a pool shared by ten
    # children: every fair level is under four blocks, so top-ups are exact (no headroom).
    return one_child_family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(projects=1, prompts=100),
        pool_total=Totals(projects=1, prompts=pool_prompts),
    )


class _TenChildren:
    def is_parent_of(self, parent_id: str, child_id: str) -> bool:
        return (parent_id, child_id) == (MASTER, CHILD)

    def children_of(self, parent_id: str) -> int:
        return 10


def _ensure(
    gateway: InMemoryGateway, units: InFlightUnits | None, need: int, ceiling: Ceiling | None = None
) -> EnsureResult:
    return ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, _prompts(need), ceiling=ceiling),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
        EnsureHooks(family=_TenChildren(), in_flight=units),
    )


def test_a_second_front_tops_up_for_the_first_ones_units_still_on_their_way() -> None:
    # Given a front of 30 served for the child (topped up to 130), nothing written yet
    gateway = _tight_family(pool_prompts=400)
    units = InFlightUnits(FakeClock())
    first = _ensure(gateway, units, 30)

    # When a second request's front of 20 comes
    second = _ensure(gateway, units, 20)

    # Then the child holds room for both (150), not only for the second (which 130 covers,
    # so it would end on the hot path and its writes would take the first one's units)
    assert gateway.transfers == [
        (CHILD, Totals(projects=1, prompts=130)),
        (CHILD, Totals(projects=1, prompts=150)),
    ]
    assert (first.outcome, second.outcome) == ("topped-up", "topped-up")


def test_without_the_memory_the_second_front_finds_the_first_ones_units_free() -> None:
    gateway = _tight_family(pool_prompts=400)
    _ensure(gateway, None, 30)

    second = _ensure(gateway, None, 20)

    assert second.outcome == "hot-path"
    assert len(gateway.transfers) == 1


def test_units_the_childs_use_shows_are_not_carved_again() -> None:
    # Given a front of 30 served and then written (the child now uses 130 of its 130)
    gateway = _tight_family(pool_prompts=400)
    units = InFlightUnits(FakeClock())
    _ensure(gateway, units, 30)
    gateway.set_usage(CHILD, used=Totals(projects=1, prompts=130))

    # When the next ensure re-checks with no need of its own
    result = _ensure(gateway, units, 0)

    # Then the child already holds what it uses: the hot path, no transfer
    assert result.outcome == "hot-path"
    assert len(gateway.transfers) == 1


def test_units_the_pool_cannot_cover_never_refuse_a_request_whose_own_need_fits() -> None:
    # Given a pool with 22 prompts free, 20 of them carved by a first front (child at 120)
    gateway = _tight_family(pool_prompts=22)
    units = InFlightUnits(FakeClock())
    _ensure(gateway, units, 20)

    # When a second front of 5 comes (both need 125: 5 more than the 2 left free)
    result = _ensure(gateway, units, 5)

    # Then it is served for its own need, which the child holds (105 of 120): no refusal
    assert result.outcome == "hot-path"
    assert gateway.transfers == [(CHILD, Totals(projects=1, prompts=120))]


def test_units_written_as_drafts_count_as_written() -> None:
    # Given a front of 30 served, then written as drafts (used stays 100, 30 drafted)
    gateway = _tight_family(pool_prompts=400)
    units = InFlightUnits(FakeClock())
    _ensure(gateway, units, 30)
    gateway.set_usage(CHILD, drafted=_prompts(30))

    # When the next ensure re-checks (drafts counted, as the write gate counts them)
    result = _ensure(gateway, units, 0)

    # Then the 30 are in use, none on their way: the hot path
    assert result.outcome == "hot-path"
    assert len(gateway.transfers) == 1


def test_units_on_their_way_that_would_pass_the_ceiling_are_not_carved() -> None:
    # Given a ceiling of 140 prompts, a front of 30 served (the child at 130), 20 of it written
    gateway = _tight_family(pool_prompts=400)
    units = InFlightUnits(FakeClock())
    ceiling = Ceiling(prompts=140)
    _ensure(gateway, units, 30, ceiling)
    gateway.set_usage(CHILD, used=Totals(projects=1, prompts=120))

    # When a second front of 20 comes (short: 140 of 130; with the 10 on their way, 150)
    result = _ensure(gateway, units, 20, ceiling)

    # Then it is topped up for its own need, to the ceiling, not refused for the others' 10
    assert result.outcome == "topped-up"
    assert gateway.transfers[-1] == (CHILD, Totals(projects=1, prompts=140))


def test_a_top_up_for_units_on_their_way_the_pool_refuses_leaves_the_request_its_room() -> None:
    # Given a front of 30 served (the child at 130), and a pool that refuses the next transfer
    gateway = _tight_family(pool_prompts=400)
    units = InFlightUnits(FakeClock())
    _ensure(gateway, units, 30)
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])

    # When a second front of 20 comes (the read showed room for both; the transfer is refused)
    result = _ensure(gateway, units, 20)

    # Then this request's own room is there: the hot path, not a refusal
    assert (result.outcome, result.after) == ("hot-path", Totals(projects=1, prompts=130))
