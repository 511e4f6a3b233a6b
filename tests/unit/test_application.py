"""The Allocator's use cases on their own, over fake ports: no Lambda event, no Powertools.

tests/unit/test_allocator_handler*.py drive the same rules through the real handler; these
pin the rules that live in the application layer (deadlines, verdict metrics, final receives,
publishing and FIFO hold-back) one by one.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from serenity_allocator.application import (
    InboundMessage,
    WorkerConfig,
    WorkerPorts,
    finish_batch,
    start_batch,
)
from serenity_allocator.application.attempt_observer import AttemptObserver
from serenity_allocator.application.final_receive import (
    final_receive_outcome,
    skipped_final_receives,
    terminal_failure,
)
from serenity_allocator.application.invocation import Invocation
from serenity_allocator.domain.errors import (
    OutOfTimeError,
    ParkedForReclaimError,
    UpstreamError,
    WorkspaceBusyError,
)
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest
from serenity_allocator.domain.model import DEFAULT_BLOCKS, AiResources
from serenity_allocator.domain.pool_watch import PoolLowWarning
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE
from tests.fakes import FakeClock, InMemoryGateway, RecordingOutcomes

MAX_RECEIVE_COUNT = 5
AWS_CALL_BUDGET_S = 10.0


class RecordingReporter:
    """The worker's observer, in memory: every report as (name, argument)."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, object]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.reports]

    def _add(self, name: str, argument: object = None) -> None:
        self.reports.append((name, argument))

    def headroom_checked(self, outcome: str) -> None:
        self._add("headroom_checked", outcome)

    def transfer_timed(self, path: str, latency_ms: float) -> None:
        self._add("transfer_timed", path)

    def pool_checked(self, parent_id: str, pool: AiResources) -> None:
        self._add("pool_checked", parent_id)

    def rejected(self, reason: str) -> None:
        self._add("rejected", reason)

    def not_ready_retry(self) -> None:
        self._add("not_ready_retry")

    def release_finished(self, outcome: str) -> None:
        self._add("release_finished", outcome)

    def tight_pool_fallback(self, result: str) -> None:
        self._add("tight_pool_fallback", result)

    def tiered_met(self, role: str) -> None:
        self._add("tiered_met", role)

    def message_started(
        self,
        message_id: str,
        workspace_id: str,
        request_id: str | None,
        kind: str | None,
        receive_count: int,
    ) -> None:
        self._add("message_started", message_id)

    def queue_lag(self, lag_ms: float) -> None:
        self._add("queue_lag", lag_ms)

    def invalid_message(self, reason: str) -> None:
        self._add("invalid_message", reason)

    def disabled_noop(self) -> None:
        self._add("disabled_noop")

    def coalesced(self, extra_requests: int) -> None:
        self._add("coalesced", extra_requests)

    def reclaim(self, result: str, count: int = 1) -> None:
        self._add("reclaim", (result, count))

    def parked_for_reclaim(self, siblings: Sequence[str]) -> None:
        self._add("parked_for_reclaim", tuple(siblings))

    def completed(self, outcome: AllocationOutcome) -> None:
        self._add("completed", outcome.request_id)

    def ledger_event(self, event: str) -> None:
        self._add("ledger_event", event)

    def will_retry(
        self, error_code: str, *, final_receive: bool, expected: bool, error: Exception
    ) -> None:
        self._add("will_retry", (error_code, final_receive, expected))

    def outcomes_not_published(self, error: Exception) -> None:
        self._add("outcomes_not_published", type(error).__name__)

    def pool_low(self, warning: PoolLowWarning) -> None:
        self._add("pool_low", warning.parent_workspace_id)

    def pool_low_not_published(self, error: Exception) -> None:
        self._add("pool_low_not_published", type(error).__name__)

    def flush(self) -> None:
        self._add("flush")


def _config() -> WorkerConfig:
    return WorkerConfig(
        dynamic_allocation=True,
        blocks=DEFAULT_BLOCKS,
        max_receive_count=MAX_RECEIVE_COUNT,
        ensure_policy=FAIL_FAST,
        release_policy=SETTLE,
        aws_call_budget_s=AWS_CALL_BUDGET_S,
    )


def _ensure_body(request_id: str, child: str) -> str:
    return EnsureRequest(
        kind="ensure", request_id=request_id, workspace_id=child, parent_workspace_id="m1"
    ).model_dump_json()


def _inbound(message_id: str, child: str, *, receive_count: int = 1) -> InboundMessage:
    return InboundMessage(
        message_id=message_id,
        group_id=child,
        body=_ensure_body(f"req-{message_id}", child),
        receive_count=receive_count,
    )


def _invocation(
    inbound: Sequence[InboundMessage],
    *,
    outcomes: RecordingOutcomes | None = None,
    clock: FakeClock | None = None,
    finish_in_s: float = 57.0,
) -> tuple[Invocation, RecordingReporter]:
    clock = clock or FakeClock()
    reporter = RecordingReporter()
    ports = WorkerPorts(
        gateway=InMemoryGateway(),
        clock=clock,
        sleep=clock.sleep,
        wall_clock_ms=lambda: 0.0,
        outcomes=outcomes,
    )
    invocation = start_batch(
        _config(), ports, reporter, inbound, finish_deadline=clock() + finish_in_s
    )
    return invocation, reporter


# ==== the deadlines ========================================================================


@pytest.mark.parametrize(("messages", "chunks"), [(1, 1), (10, 1), (11, 2), (20, 2)])
def test_start_batch_keeps_one_aws_call_per_publish_chunk_for_finishing(
    messages: int, chunks: int
) -> None:
    # Given a batch of n messages and an outcome sink / When the batch starts
    clock = FakeClock()
    inbound = [_inbound(f"m{i}", f"c{i}") for i in range(messages)]
    invocation, _ = _invocation(inbound, outcomes=RecordingOutcomes(), clock=clock)

    # Then applying ends one publish call per chunk of 10 before the invocation must be done
    assert invocation.finish_deadline == clock() + 57.0
    assert invocation.deadline == invocation.finish_deadline - chunks * AWS_CALL_BUDGET_S


def test_start_batch_without_an_outcome_sink_keeps_nothing_for_publishing() -> None:
    # Given no outcome sink wired / When the batch starts / Then applying may use all the time
    invocation, _ = _invocation([_inbound("m1", "c1")], outcomes=None)
    assert invocation.deadline == invocation.finish_deadline


def test_has_time_to_call_aws_checks_the_phase_deadline() -> None:
    # Given 25 s to finish, of which the last 10 s are kept for publishing
    clock = FakeClock()
    invocation, _ = _invocation(
        [_inbound("m1", "c1")], outcomes=RecordingOutcomes(), clock=clock, finish_in_s=25.0
    )

    # When 6 s have passed / Then a 10 s call still fits while applying (6 + 10 <= 15)
    clock.advance(5.0)
    assert invocation.has_time_to_call_aws() is True
    clock.advance(1.0)
    assert invocation.has_time_to_call_aws() is False
    # ... and while finishing, up to the invocation's own deadline (6 + 10 <= 25)
    assert invocation.has_time_to_call_aws(finishing=True) is True


# ==== verdicts count only when they stand ==================================================


def test_attempt_observer_holds_verdicts_until_committed() -> None:
    # Given an attempt that measured a check and was refused
    reporter = RecordingReporter()
    observer = AttemptObserver(reporter, None, [])
    observer.headroom_checked("topped-up")
    observer.rejected("orgPoolExhausted")
    observer.tight_pool_fallback("rejected")

    # Then the measurement went out at once, the verdicts not yet
    assert reporter.reports == [("headroom_checked", "topped-up")]

    # When the result stands / Then the verdicts follow, in order, once
    observer.commit()
    observer.commit()
    assert reporter.reports == [
        ("headroom_checked", "topped-up"),
        ("rejected", "orgPoolExhausted"),
        ("tight_pool_fallback", "rejected"),
    ]


def test_attempt_observer_discard_forgets_the_verdicts() -> None:
    # Given a refused attempt that was overturned (a parked ensure, a split run)
    reporter = RecordingReporter()
    observer = AttemptObserver(reporter, None, [])
    observer.rejected("orgPoolExhausted")

    # When discarded, then committed / Then no rejection was ever reported
    observer.discard()
    observer.commit()
    assert reporter.reports == []


# ==== the final receive ====================================================================

ENSURE = EnsureRequest(
    kind="ensure", request_id="req-1", workspace_id="c1", parent_workspace_id="m1"
)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (WorkspaceBusyError(), "rejected", "workspaceBusy"),
        (ParkedForReclaimError(), "rejected", "orgPoolExhausted"),
        (OutOfTimeError(), "failed", "outOfTime"),
        (UpstreamError(503, "unavailable", "read"), "failed", "upstream503"),
        (KeyError("bug"), "failed", "KeyError"),
    ],
)
def test_final_receive_outcome_says_what_the_request_ends_with(
    error: Exception, status: str, code: str
) -> None:
    # Given a request failing on its last receive / When its outcome is made
    outcome = final_receive_outcome(ENSURE, error, MAX_RECEIVE_COUNT)

    # Then it carries its end, and says it ends in the DLQ
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        status,
        code,
        MAX_RECEIVE_COUNT,
    )
    assert outcome.dead_lettered is True


@pytest.mark.parametrize("status", [400, 403, 404, 405, 409, 410, 413, 415])
def test_terminal_failure_completes_on_an_answer_no_retry_fixes(status: int) -> None:
    # Given an upstream answer a retry cannot fix / Then the request completes as failed
    outcome = terminal_failure(ENSURE, UpstreamError(status, "no", "read"), 1)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("failed", f"upstream{status}")


@pytest.mark.parametrize(
    "error", [UpstreamError(429, "slow down", "read"), UpstreamError(500, "boom", "read")]
)
def test_terminal_failure_leaves_a_retryable_answer_to_the_queue(error: Exception) -> None:
    # Given an answer a retry may fix / Then there is no terminal outcome yet
    assert terminal_failure(ENSURE, error, 1) is None


def test_skipped_final_receives_get_group_blocked_only_on_their_last_receive() -> None:
    # Given three skipped records: one on its last receive, one earlier, one invalid
    invocation, _ = _invocation(
        [
            _inbound("last", "c1", receive_count=MAX_RECEIVE_COUNT),
            _inbound("early", "c1", receive_count=2),
            InboundMessage("bad", "c1", "{oops", receive_count=MAX_RECEIVE_COUNT),
        ]
    )

    # When the skipped records are given their outcomes
    skipped = skipped_final_receives(
        invocation.plan.messages.values(), max_receive_count=MAX_RECEIVE_COUNT
    )

    # Then only the valid one on its last receive hears back, as blocked by its group
    assert [(mid, o.status, o.error_code) for mid, o in skipped] == [
        ("last", "failed", "groupBlocked")
    ]


# ==== finishing ============================================================================


def test_finish_batch_holds_back_a_group_from_its_first_unpublished_outcome() -> None:
    # Given eleven completed messages (two publish chunks) in groups g1 and g2, and a bus that
    # refuses the second chunk, which holds m11 (group g1)
    inbound = [_inbound(f"m{i}", "g1" if i % 2 else "g2") for i in range(1, 12)]
    invocation, reporter = _invocation(inbound, outcomes=RecordingOutcomes(fail_calls=[2]))
    for message in invocation.plan.messages.values():
        assert message.request is not None
        outcome = final_receive_outcome(message.request, OutOfTimeError(), 1)
        invocation.book.record(message.message_id, outcome)

    # When the batch finishes with no failure of its own
    failed = finish_batch(invocation, [])

    # Then only m11 fails: its group's earlier messages were announced and must not repeat
    assert failed == ["m11"]
    assert reporter.names()[-2:] == ["outcomes_not_published", "flush"]


def test_finish_batch_fails_the_records_whose_publish_no_longer_fits() -> None:
    # Given a completed message and no time left for a publish call's worst case
    clock = FakeClock()
    sink = RecordingOutcomes()
    invocation, reporter = _invocation(
        [_inbound("m1", "c1")], outcomes=sink, clock=clock, finish_in_s=AWS_CALL_BUDGET_S - 1
    )
    assert invocation.plan.message("m1").request is not None
    invocation.book.record("m1", final_receive_outcome(ENSURE, OutOfTimeError(), 1))

    # When the batch finishes / Then the record fails at once, and nothing was sent
    assert finish_batch(invocation, []) == ["m1"]
    assert (sink.publish_calls, reporter.reports[0]) == (
        0,
        ("outcomes_not_published", "OutOfTimeError"),
    )
