"""One absolute transfer under the fail-fast and settle policies."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.errors import (
    OrgPoolExhaustedError,
    OutOfTimeError,
    RateLimitedError,
    SettleTimeoutError,
    UpstreamError,
    WorkspaceBusyError,
)
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE, TransferTarget, apply_transfer
from tests.fakes import (
    READ_STATUS,
    TRANSFER,
    FakeClock,
    InMemoryGateway,
    RecordingObserver,
    pool_exhausted,
    transfer_context,
)

MASTER = "master-1"
CHILD = "child-1"
RAISED = Totals(projects=2, prompts=200)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gateway() -> InMemoryGateway:
    fake = InMemoryGateway()
    fake.add_master(MASTER, total=Totals(projects=10, prompts=1_000))
    fake.add_child(CHILD, MASTER, total=Totals(projects=1, prompts=100))
    return fake


# ---- fail-fast ----------------------------------------------------------------------------


def test_apply_transfer_fail_fast_makes_one_attempt_and_never_polls(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a child that accepts the transfer
    # When sent on the request path
    attempts = apply_transfer(
        gateway, TransferTarget(CHILD, RAISED), FAIL_FAST, transfer_context(clock)
    )

    # Then one transfer, no status read, no sleep, and the totals are set
    assert attempts == 1
    assert gateway.calls == [(TRANSFER, CHILD)]
    assert clock.sleeps == []
    assert gateway.totals_of(CHILD) == RAISED


def test_apply_transfer_fail_fast_not_ready_is_busy_at_once(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a settling child
    gateway.script_not_ready(CHILD, transfers=1)
    observer = RecordingObserver()

    # When sent on the request path / Then busy after the one attempt, without waiting
    with pytest.raises(WorkspaceBusyError):
        apply_transfer(
            gateway, TransferTarget(CHILD, RAISED), FAIL_FAST, transfer_context(clock, observer)
        )
    assert gateway.calls == [(TRANSFER, CHILD)]
    assert clock.sleeps == []
    assert observer.names() == ["transfer_timed"]  # no not_ready_retry


# ---- settle -------------------------------------------------------------------------------


def test_apply_transfer_settle_retries_not_ready_sleeping_interval_times_attempt(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a child not ready for three transfers, then accepting
    gateway.script_not_ready(CHILD, transfers=3)
    observer = RecordingObserver()

    # When sent on the settle path
    attempts = apply_transfer(
        gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock, observer)
    )

    # Then four transfers with sleeps of 1, 2 and 3 s between them, one retry event each,
    # then one status poll finding the child created
    assert attempts == 4
    assert clock.sleeps == [1.0, 2.0, 3.0]
    assert observer.names().count("not_ready_retry") == 3
    assert gateway.calls == [(TRANSFER, CHILD)] * 4 + [(READ_STATUS, CHILD)]
    assert gateway.totals_of(CHILD) == RAISED


def test_apply_transfer_settle_still_not_ready_after_retries_is_busy(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a child not ready for longer than the policy retries
    gateway.script_not_ready(CHILD, transfers=10)
    observer = RecordingObserver()

    # When sent on the settle path / Then busy after 1 + 3 transfers, and nothing moved
    with pytest.raises(WorkspaceBusyError):
        apply_transfer(
            gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock, observer)
        )
    assert gateway.calls_of(TRANSFER) == [CHILD] * 4
    assert gateway.calls_of(READ_STATUS) == []
    assert clock.sleeps == [1.0, 2.0, 3.0]
    assert observer.names().count("not_ready_retry") == 3
    assert gateway.totals_of(CHILD) == Totals(projects=1, prompts=100)


def test_apply_transfer_settle_polls_status_until_created(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a child that reads "not ready" twice after the transfer, then "created"
    gateway.script_statuses(CHILD, ["not ready", "not ready", "created"])

    # When sent on the settle path
    apply_transfer(gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock))

    # Then it polled three times, 1 s apart
    assert gateway.calls_of(READ_STATUS) == [CHILD] * 3
    assert clock.sleeps == [1.0, 1.0]


def test_apply_transfer_settle_status_never_created_is_settle_timeout(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a child stuck "not ready" after an accepted transfer
    gateway.set_status(CHILD, "not ready")
    observer = RecordingObserver()

    # When sent on the settle path / Then it gives up after 30 polls 1 s apart (the upstream's
    # 30 x 1 s: settling can outlast 15 s)
    with pytest.raises(SettleTimeoutError):
        apply_transfer(
            gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock, observer)
        )
    assert gateway.calls_of(READ_STATUS) == [CHILD] * 30
    assert clock.sleeps == [1.0] * 29
    assert observer.args_of("transfer_timed") == [("settle", 0.0)]  # the call, not the polls


def test_apply_transfer_deadline_too_close_is_out_of_time_before_any_call(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given less time left than one attempt may take
    ctx = transfer_context(clock, deadline=clock() + SETTLE.attempt_budget_s - 0.5)

    # When sent / Then out of time, with no call and no sleep
    with pytest.raises(OutOfTimeError):
        apply_transfer(gateway, TransferTarget(CHILD, RAISED), SETTLE, ctx)
    assert gateway.calls == []
    assert clock.sleeps == []


@pytest.mark.parametrize("slack_s", [0.0, 0.5, 1.0, 2.5, 3.0, 6.0, 8.0, 12.0])
def test_apply_transfer_never_sleeps_past_the_deadline(
    gateway: InMemoryGateway, clock: FakeClock, slack_s: float
) -> None:
    # Given a persistently settling child and a deadline a little beyond one attempt budget
    gateway.script_not_ready(CHILD, transfers=10)
    gateway.set_status(CHILD, "not ready")
    deadline = clock() + SETTLE.attempt_budget_s + slack_s

    # When sent on the settle path / Then it fails typed, and no sleep went past the deadline
    with pytest.raises((WorkspaceBusyError, OutOfTimeError)):
        apply_transfer(
            gateway,
            TransferTarget(CHILD, RAISED),
            SETTLE,
            transfer_context(clock, deadline=deadline),
        )
    assert clock() <= deadline
    assert sum(clock.sleeps) <= slack_s


def test_apply_transfer_times_every_call_without_sleeps_or_polls(clock: FakeClock) -> None:
    # Given a gateway where each call takes 0.25 s
    gateway = InMemoryGateway(clock=clock, latency_s=0.25)
    gateway.add_master(MASTER, total=Totals(projects=10, prompts=1_000))
    gateway.add_child(CHILD, MASTER, total=Totals(projects=1, prompts=100))
    gateway.script_not_ready(CHILD, transfers=1)
    observer = RecordingObserver()

    # When sent on the settle path (a refused transfer, 1 s sleep, the accepted one, 1 poll)
    apply_transfer(
        gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock, observer)
    )

    # Then both calls were timed, the refused one too, each without the sleep or the poll
    assert observer.args_of("transfer_timed") == [("settle", 250.0), ("settle", 250.0)]


def test_apply_transfer_times_a_refused_call(gateway: InMemoryGateway, clock: FakeClock) -> None:
    # Given a pool that refuses the transfer
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])
    observer = RecordingObserver()

    # When sent fail-fast / Then it is refused, and the call was still timed on its path
    with pytest.raises(OrgPoolExhaustedError):
        apply_transfer(
            gateway, TransferTarget(CHILD, RAISED), FAIL_FAST, transfer_context(clock, observer)
        )
    assert observer.args_of("transfer_timed") == [("fail-fast", 0.0)]


def test_apply_transfer_pool_exhausted_is_terminal(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a raise beyond the pool's free units
    too_much = Totals(projects=1, prompts=5_000)

    # When sent on the settle path / Then exhaustion, after one attempt and no sleep
    with pytest.raises(OrgPoolExhaustedError):
        apply_transfer(gateway, TransferTarget(CHILD, too_much), SETTLE, transfer_context(clock))
    assert gateway.calls == [(TRANSFER, CHILD)]
    assert clock.sleeps == []


def test_apply_transfer_rate_limited_is_typed(gateway: InMemoryGateway, clock: FakeClock) -> None:
    # Given an upstream still answering 429 after the client's own retries
    gateway.script_errors(TRANSFER, CHILD, [UpstreamError(429, "Too Many Requests", TRANSFER)])

    # When sent / Then a typed, transient rate-limit error
    with pytest.raises(RateLimitedError):
        apply_transfer(gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock))


@pytest.mark.parametrize("status", [500, 403, 400])
def test_apply_transfer_other_upstream_error_propagates_unchanged(
    gateway: InMemoryGateway, clock: FakeClock, status: int
) -> None:
    # Given an answer no classifier claims
    error = UpstreamError(status, '{"message": "boom"}', TRANSFER)
    gateway.script_errors(TRANSFER, CHILD, [error])

    # When sent / Then the very same error propagates, not retried
    with pytest.raises(UpstreamError) as raised:
        apply_transfer(gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock))
    assert raised.value is error
    assert gateway.calls == [(TRANSFER, CHILD)]


def test_apply_transfer_exhaustion_text_is_not_mistaken_for_not_ready(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given the pool-exhausted 422 scripted on a child that would otherwise accept
    gateway.script_errors(TRANSFER, CHILD, [pool_exhausted()])

    # When sent on the settle path / Then no retry: the two 422s are told apart by text
    with pytest.raises(OrgPoolExhaustedError):
        apply_transfer(gateway, TransferTarget(CHILD, RAISED), SETTLE, transfer_context(clock))
    assert clock.sleeps == []


def test_transfer_context_work_that_ends_exactly_at_the_deadline_fits() -> None:
    # Given a context whose deadline is 10 s away
    clock = FakeClock()
    ctx = transfer_context(clock, deadline=clock() + 10.0)

    # When asked about 10 s and a little more / Then exactly 10 s fits, more does not
    assert (ctx.has_time_for(10.0), ctx.has_time_for(10.001)) == (True, False)


def test_apply_transfer_settle_polls_again_under_a_deadline_with_room(
    gateway: InMemoryGateway, clock: FakeClock
) -> None:
    # Given a child that reads "not ready" once after the transfer, then "created"
    gateway.script_statuses(CHILD, ["not ready", "created"])

    # When sent on the release path with a deadline a minute away
    attempts = apply_transfer(
        gateway,
        TransferTarget(CHILD, RAISED),
        SETTLE,
        transfer_context(clock, deadline=clock() + 60.0),
    )

    # Then one transfer, two status reads one poll interval apart
    assert attempts == 1
    assert gateway.calls == [(TRANSFER, CHILD), (READ_STATUS, CHILD), (READ_STATUS, CHILD)]
    assert clock.sleeps == [SETTLE.settle_poll_interval_s]
