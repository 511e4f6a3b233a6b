"""The Allocator's use cases on their own, over fake ports: no Lambda event, no Powertools.

tests/unit/handlers/test_allocator*.py drive the same rules through the real handler; these
pin the rules that live in the application layer (deadlines, verdict metrics, final receives,
publishing and FIFO hold-back) one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from serenity_allocator.application.allocator import (
    InboundMessage,
    WorkerConfig,
    WorkerPorts,
    finish_batch,
    start_batch,
)
from serenity_allocator.application.allocator.apply_ensure import AttemptObserver
from serenity_allocator.application.allocator.final_receive import (
    Failure,
    failure_of,
    skipped_final_receives,
)
from serenity_allocator.application.allocator.invocation import Invocation
from serenity_allocator.application.deadlines import Deadlines
from serenity_allocator.domain.errors import (
    AccessDeniedError,
    CredentialNotOwnedError,
    NeedsReauthError,
    NoCredentialError,
    OutOfTimeError,
    ParentMismatchError,
    ParkedForReclaimError,
    UpstreamError,
    WorkspaceBusyError,
)
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import DEFAULT_BLOCKS
from serenity_allocator.domain.observations import (
    HeadroomChecked,
    MessageStarted,
    OutcomesNotPublished,
    RecordFailed,
    Rejected,
    TightPoolFallback,
    WorkerEvent,
)
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE
from tests.fakes import FakeClock, InMemoryGateway, RecordingOutcomes, event_name

MAX_RECEIVE_COUNT = 5
AWS_CALL_BUDGET_S = 10.0


@dataclass(frozen=True)
class Flush:
    """Marks where the reporter was flushed among the events."""


class RecordingReporter:
    """The worker's observer, in memory: every event (and each flush), in order."""

    def __init__(self) -> None:
        self.events: list[WorkerEvent | Flush] = []

    def names(self) -> list[str]:
        return [event_name(event) for event in self.events]

    def record(self, event: WorkerEvent, /) -> None:
        self.events.append(event)

    def flush(self) -> None:
        self.events.append(Flush())


def _failed(request: EnsureRequest | ReleaseRequest) -> AllocationOutcome:
    """A terminal outcome to book: the request's out of time on its final receive."""
    outcome = failure_of(request, OutOfTimeError(), 1, ims=False, final_receive=True).outcome
    assert outcome is not None
    return outcome


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
    assert invocation.deadlines.finishing == clock() + 57.0
    assert (
        invocation.deadlines.applying == invocation.deadlines.finishing - chunks * AWS_CALL_BUDGET_S
    )


def test_start_batch_without_an_outcome_sink_keeps_nothing_for_publishing() -> None:
    # Given no outcome sink wired / When the batch starts / Then applying may use all the time
    invocation, _ = _invocation([_inbound("m1", "c1")], outcomes=None)
    assert invocation.deadlines.applying == invocation.deadlines.finishing


def test_fits_aws_call_checks_the_phase_deadline() -> None:
    # Given 25 s to finish, of which the last 10 s are kept for publishing
    clock = FakeClock()
    invocation, _ = _invocation(
        [_inbound("m1", "c1")], outcomes=RecordingOutcomes(), clock=clock, finish_in_s=25.0
    )

    # When 6 s have passed / Then a 10 s call still fits while applying (6 + 10 <= 15)
    clock.advance(5.0)
    assert invocation.deadlines.fits_aws_call() is True
    clock.advance(1.0)
    assert invocation.deadlines.fits_aws_call() is False
    # ... and while finishing, up to the invocation's own deadline (6 + 10 <= 25)
    assert invocation.deadlines.fits_aws_call(finishing=True) is True


def test_fits_aws_call_uses_the_finishing_deadline_once_the_batch_is_announced() -> None:
    # Given 25 s to finish, of which the last 10 s are kept for publishing, and 6 s gone
    clock = FakeClock()
    invocation, _ = _invocation(
        [_inbound("m1", "c1")], outcomes=RecordingOutcomes(), clock=clock, finish_in_s=25.0
    )
    clock.advance(6.0)
    assert invocation.deadlines.fits_aws_call() is False

    # When every record was handed over / Then any call may use the time up to the end
    invocation.deadlines.start_announcing()
    assert invocation.deadlines.fits_aws_call() is True


def test_start_batch_keeps_a_whole_ims_exchange_from_the_configured_budget() -> None:
    # Given an IMS budget of 5 s, and left to apply just that plus one AWS call (no outcome sink)
    clock = FakeClock()
    config = dataclasses.replace(_config(), ims_call_budget_s=5.0)
    ports = WorkerPorts(
        gateway=InMemoryGateway(), clock=clock, sleep=clock.sleep, wall_clock_ms=lambda: 0.0
    )
    inbound = [_inbound("m1", "c1")]
    invocation = start_batch(
        config,
        ports,
        RecordingReporter(),
        inbound,
        finish_deadline=clock() + 5.0 + AWS_CALL_BUDGET_S,
    )

    # Then an exchange fits exactly, and not a moment later
    assert invocation.deadlines.ims_call_s == 5.0
    assert invocation.deadlines.fits_ims_exchange() is True
    clock.advance(0.001)
    assert invocation.deadlines.fits_ims_exchange() is False


def test_deadlines_for_a_batch_reserve_no_ims_time_unless_told() -> None:
    clock = FakeClock()

    deadlines = Deadlines.for_batch(clock, finish_by=clock() + 2.0, publish_calls=0, aws_call_s=2.0)

    assert deadlines.ims_call_s == 0.0
    assert deadlines.fits_ims_exchange() is True


# ==== verdicts count only when they stand ==================================================


def test_attempt_observer_holds_verdicts_until_committed() -> None:
    # Given an attempt that measured a check and was refused
    reporter = RecordingReporter()
    observer = AttemptObserver(reporter, None, [])
    observer.record(HeadroomChecked("topped-up"))
    observer.record(Rejected("orgPoolExhausted"))
    observer.record(TightPoolFallback("rejected"))

    # Then the measurement went out at once, the verdicts not yet
    assert reporter.events == [HeadroomChecked("topped-up")]

    # When the result stands / Then the verdicts follow, in order, once
    observer.commit()
    observer.commit()
    assert reporter.events == [
        HeadroomChecked("topped-up"),
        Rejected("orgPoolExhausted"),
        TightPoolFallback("rejected"),
    ]


def test_attempt_observer_discard_forgets_the_verdicts() -> None:
    # Given a refused attempt that was overturned (a parked ensure, a split run)
    reporter = RecordingReporter()
    observer = AttemptObserver(reporter, None, [])
    observer.record(Rejected("orgPoolExhausted"))

    # When discarded, then committed / Then no rejection was ever reported
    observer.discard()
    observer.commit()
    assert reporter.events == []


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
def test_failure_of_says_what_the_request_ends_with_on_its_final_receive(
    error: Exception, status: str, code: str
) -> None:
    # Given a request failing on its last receive / When its outcome is made
    failure = failure_of(ENSURE, error, MAX_RECEIVE_COUNT, ims=False, final_receive=True)
    outcome = failure.outcome

    # Then it carries its end, and says it ends in the DLQ
    assert failure.retry is True
    assert outcome is not None
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        status,
        code,
        MAX_RECEIVE_COUNT,
    )
    assert outcome.dead_lettered is True


@pytest.mark.parametrize("status", [400, 403, 404, 405, 409, 410, 413, 415])
def test_failure_of_completes_on_an_answer_no_retry_fixes(status: int) -> None:
    # Given an upstream answer a retry cannot fix / Then the request completes as failed
    failure = failure_of(
        ENSURE, UpstreamError(status, "no", "read"), 1, ims=False, final_receive=False
    )
    outcome = failure.outcome
    assert failure.retry is False
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("failed", f"upstream{status}")


@pytest.mark.parametrize("final_receive", [False, True])
def test_failure_of_refuses_a_request_whose_credential_is_another_childs(
    final_receive: bool,
) -> None:
    # Given the credential record under the request's id is another child's
    failure = failure_of(
        ENSURE, CredentialNotOwnedError(), 2, ims=True, final_receive=final_receive
    )

    # Then it is refused now, like an id the ledger binds elsewhere: never dead-lettered
    outcome = failure.outcome
    assert (failure.refused, failure.retry, failure.invalid_reason) == (True, False, None)
    assert outcome is not None
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        "rejected",
        "requestIdConflict",
        2,
    )
    assert outcome.dead_lettered is None


def test_failure_of_refuses_nothing_else() -> None:
    # Given any other failure / Then it is not read as a refusal
    for error in (NoCredentialError(), AccessDeniedError(), OutOfTimeError()):
        assert failure_of(ENSURE, error, 1, ims=True, final_receive=True).refused is False


@pytest.mark.parametrize(
    "error", [UpstreamError(429, "slow down", "read"), UpstreamError(500, "boom", "read")]
)
def test_failure_of_leaves_a_retryable_answer_to_the_queue(error: Exception) -> None:
    # Given an answer a retry may fix / Then there is no terminal outcome yet
    assert failure_of(ENSURE, error, 1, ims=False, final_receive=False) == Failure(None, retry=True)


@pytest.mark.parametrize(
    ("error", "status", "code", "dead_lettered"),
    [
        (NoCredentialError(), "failed", "noCredential", True),
        (NeedsReauthError(), "failed", "needsReauth", True),
        (AccessDeniedError(), "rejected", "accessDenied", None),
        (UpstreamError(403, "forbidden", "read"), "rejected", "accessDenied", None),
    ],
)
def test_failure_of_ends_a_credential_refusal_in_ims_mode(
    error: Exception, status: str, code: str, dead_lettered: bool | None
) -> None:
    # Given a request its user's credential refuses (IMS mode), on an early receive
    failure = failure_of(ENSURE, error, 1, ims=True, final_receive=False)

    # Then it ends now: a missing or dead promise in the DLQ, a denied user rejected
    outcome = failure.outcome
    assert failure.retry is False
    assert outcome is not None
    assert (outcome.status, outcome.error_code, outcome.dead_lettered) == (
        status,
        code,
        dead_lettered,
    )
    assert failure.invalid_reason is None


def test_failure_of_a_terminal_upstream_answer_is_not_dead_lettered() -> None:
    # Given an upstream answer no retry fixes / Then it completes, and not in the DLQ
    failure = failure_of(
        ENSURE, UpstreamError(404, "gone", "read"), 1, ims=False, final_receive=True
    )
    assert failure.outcome is not None
    assert (failure.retry, failure.outcome.dead_lettered) == (False, None)


def test_failure_of_a_parent_mismatch_makes_the_message_invalid() -> None:
    # Given an ensure whose parent is not its child's
    error = ParentMismatchError()
    failure = failure_of(ENSURE, error, 2, ims=True, final_receive=False)

    # Then it ends now as invalid, in the DLQ as an invalid message with the error's text
    assert failure.outcome is not None
    assert (failure.outcome.status, failure.outcome.error_code) == ("invalid", "parentMismatch")
    assert (failure.outcome.dead_lettered, failure.retry) == (True, False)
    assert failure.invalid_reason == str(error)


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
        outcome = _failed(message.request)
        invocation.state.book.record(message.message_id, outcome)

    # When the batch finishes with no failure of its own
    failed = finish_batch(invocation, [])

    # Then only m11 fails: its group's earlier messages were announced and must not repeat
    assert failed == ["m11"]
    assert reporter.names()[-3:] == ["outcomes_not_published", "record_failed", "flush"]


def test_finish_batch_reports_a_failed_id_the_plan_does_not_hold_by_its_id_alone() -> None:
    # Given a batch of m1, and a failure handed in for an id it did not plan
    invocation, reporter = _invocation([_inbound("m1", "c1")])

    # When the batch finishes
    failed = finish_batch(invocation, ["stray"])

    # Then that id fails, reported with its id and nothing it does not know (skipped: no
    # reason of its own)
    assert failed == ["stray"]
    assert [e for e in reporter.events if isinstance(e, RecordFailed)] == [
        RecordFailed(MessageStarted("stray", "", None, None, 0), "skippedBehindFailedGroup")
    ]


def test_finish_batch_fails_the_records_whose_publish_no_longer_fits() -> None:
    # Given a completed message and no time left for a publish call's worst case
    clock = FakeClock()
    sink = RecordingOutcomes()
    invocation, reporter = _invocation(
        [_inbound("m1", "c1")], outcomes=sink, clock=clock, finish_in_s=AWS_CALL_BUDGET_S - 1
    )
    assert invocation.plan.message("m1").request is not None
    invocation.state.book.record("m1", _failed(ENSURE))

    # When the batch finishes / Then the record fails at once, and nothing was sent
    assert finish_batch(invocation, []) == ["m1"]
    [first, *_] = reporter.events
    assert isinstance(first, OutcomesNotPublished)
    assert (sink.publish_calls, type(first.error)) == (0, OutOfTimeError)
