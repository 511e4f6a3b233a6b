"""ensure_headroom at the edges: the tight-pool exact fallback, unmetered parents, drafted
prompts, and unit conservation as a property.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureHooks,
    EnsureRules,
    ensure_headroom,
)
from serenity_allocator.domain.errors import OrgPoolExhaustedError
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.transfer import FAIL_FAST
from tests.fakes import (
    READ_RESOURCES,
    TRANSFER,
    FakeClock,
    RecordingObserver,
    pool_exhausted,
    transfer_context,
)
from tests.unit.domain.allocation_rig import CHILD, MASTER, one_child_family


def test_ensure_headroom_exact_fallback_saves_a_pool_drained_since_its_read() -> None:
    # Given a pool whose read shows 50 free prompts, drained by another child before the
    # sized transfer lands (its first transfer is refused), with the exact 10 still free
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=50),
    )
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])
    observer = RecordingObserver()

    # When ensuring with the exact fallback on
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
        EnsureRules(policy=FAIL_FAST, exact_fallback=True),
        transfer_context(FakeClock(), observer),
    )

    # Then the sized transfer was refused, the exact one went through
    assert len(gateway.calls_of(TRANSFER)) == 2
    assert gateway.transfers == [(CHILD, Totals(projects=1, prompts=110))]
    assert result.outcome == "topped-up"
    assert result.after == Totals(projects=1, prompts=110)
    assert result.used_exact_fallback
    assert observer.args_of("tight_pool_fallback") == [("saved",)]
    assert observer.args_of("rejected") == []


def test_ensure_headroom_announces_each_transfer_before_sending_it() -> None:
    # Given a pool drained between its read and the sized transfer
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=50),
    )
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])
    announced: list[tuple[Totals, Totals, int]] = []

    def before_transfer(before: Totals, target: Totals) -> None:
        announced.append((before, target, len(gateway.calls_of(TRANSFER))))

    # When ensuring with the exact fallback on, told before each transfer
    ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
        EnsureRules(policy=FAIL_FAST, exact_fallback=True),
        transfer_context(FakeClock()),
        EnsureHooks(before_transfer=before_transfer),
    )

    # Then each transfer was announced with the child's totals before and its target, just
    # before it was sent: the refused sized top-up (need + the tight pool's 40² / 1600 = 1
    # of headroom: a level of 40, under four blocks; its one unused project, under two, refilled
    # to four blocks from the 5 free, a level with room), then the exact one
    before = Totals(projects=1, prompts=100)
    assert announced == [
        (before, Totals(projects=4, prompts=111), 0),
        (before, Totals(projects=1, prompts=110), 1),
    ]


def test_ensure_headroom_pool_short_of_the_exact_need_is_refused_after_one_exact_transfer() -> None:
    # Given a pool with 9 free prompts, one short of the exact need
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100),
        child_used=Totals(prompts=100),
        pool_total=Totals(projects=5, prompts=9),
    )
    observer = RecordingObserver()

    # When ensuring with the exact fallback on / Then refused on the pool read: even the exact
    # need cannot fit, so neither the sized transfer nor a fallback is sent
    with pytest.raises(OrgPoolExhaustedError):
        ensure_headroom(
            gateway,
            EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
            EnsureRules(policy=FAIL_FAST, exact_fallback=True),
            transfer_context(FakeClock(), observer),
        )
    assert gateway.calls_of(TRANSFER) == []
    assert observer.args_of("tight_pool_fallback") == []
    assert observer.args_of("rejected") == [("orgPoolExhausted",)]
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=100)


def test_ensure_headroom_exact_fallback_refused_upstream_is_rejected() -> None:
    # Given a pool whose read says the exact raise fits, but the upstream refuses it anyway
    # (another child took the units between the read and the transfer)
    gateway = one_child_family(
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
            EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
            EnsureRules(policy=FAIL_FAST, exact_fallback=True),
            transfer_context(FakeClock(), observer),
        )

    # Then both attempts were made (block, then exact) and the request is rejected
    assert len(gateway.calls_of(TRANSFER)) == 2
    assert observer.args_of("tight_pool_fallback") == [("rejected",)]
    assert observer.args_of("rejected") == [("orgPoolExhausted",)]
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=100)


def test_ensure_headroom_unmetered_parent_skips_the_transfer() -> None:
    # Given a short child under a parent that does not meter AI writes
    gateway = one_child_family(
        child_total=Totals(projects=1, prompts=100), child_used=Totals(prompts=100)
    )
    asked: list[str] = []

    def is_unmetered(parent_id: str) -> bool:
        asked.append(parent_id)
        return True

    # When ensuring
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
        EnsureHooks(is_unmetered=is_unmetered),
    )

    # Then no units were carved: the outcome says unmetered and nothing moved
    assert result.outcome == "unmetered"
    assert asked == [MASTER]
    assert gateway.calls_of(TRANSFER) == []
    assert result.before == result.after == Totals(projects=1, prompts=100)


@pytest.mark.parametrize(
    ("include_drafted", "outcome", "after"),
    [
        (False, "hot-path", Totals(projects=3, prompts=270)),
        (True, "topped-up", Totals(projects=3, prompts=540)),
    ],
)
def test_ensure_headroom_counts_drafts_only_when_asked(
    include_drafted: bool, outcome: str, after: Totals
) -> None:
    # Given a child using 50 of 270 prompts with 80 more drafted (and two projects to spare)
    gateway = one_child_family(
        child_total=Totals(projects=3, prompts=270),
        child_used=Totals(projects=1, prompts=50),
        child_drafted=Totals(projects=0, prompts=80),
    )

    # When 10 prompts are ensured, with or without counting the drafts
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=include_drafted),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
    )

    # Then 60 fit as they are (210 to spare, over the two-block refill mark); 140 (drafts
    # counted) leave 130, under it: refilled to 140 plus four blocks
    assert (result.outcome, result.after) == (outcome, after)
    assert gateway.totals_of(CHILD) == after


def test_ensure_headroom_hot_path_does_not_consult_is_unmetered() -> None:
    # Given a child that covers the need with two blocks of prompts and two projects to spare
    gateway = one_child_family(child_total=Totals(projects=2, prompts=210))

    def is_unmetered(parent_id: str) -> bool:
        raise AssertionError("the hot path must not consult the parent")

    # When ensuring / Then the hot path returns on its one read
    result = ensure_headroom(
        gateway,
        EnsureAsk(CHILD, MASTER, Totals(prompts=10), include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock()),
        EnsureHooks(is_unmetered=is_unmetered),
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
    gateway = one_child_family(
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
            EnsureAsk(CHILD, MASTER, wanted, include_drafted=False),
            EnsureRules(policy=FAIL_FAST, exact_fallback=exact_fallback),
            transfer_context(FakeClock()),
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
