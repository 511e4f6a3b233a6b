"""The per-record flow's own bookkeeping, one record at a time (handle_message over fakes).

What each path of :func:`handle_message` does besides its outcome: which credential it ends
or keeps (IMS mode), which park it ends, which events it reports, and when a coalesced run
splits. The broker is the in-memory one of tests/unit/handlers/test_allocator_credentials.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from serenity_allocator.application.allocator import (
    InboundMessage,
    WorkerConfig,
    WorkerPorts,
    handle_message,
    start_batch,
)
from serenity_allocator.application.allocator.dead_letter import InvalidMessageError, dead_letter
from serenity_allocator.application.allocator.invocation import BatchMessage, Invocation
from serenity_allocator.application.credentials.request_credentials import UnauthorizedError
from serenity_allocator.application.deadlines import Deadlines
from serenity_allocator.domain.errors import (
    AccessDeniedError,
    CredentialNotOwnedError,
    ImsUnavailableError,
    NoCredentialError,
    UpstreamError,
)
from serenity_allocator.domain.messages import EnsureRequest, build_outcome
from serenity_allocator.domain.model import DEFAULT_BLOCKS, Totals
from serenity_allocator.domain.observations import (
    Completed,
    CredentialOutcome,
    InvalidMessage,
    LedgerEvent,
    WorkerEvent,
)
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE
from tests.fakes import READ_RESOURCES, FakeClock, InMemoryGateway, RecordingDeadLetters
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger
from tests.unit.handlers.test_allocator_credentials import FakeBroker

MAX_RECEIVE_COUNT = 5


class Events:
    def __init__(self) -> None:
        self.events: list[WorkerEvent] = []

    def record(self, event: WorkerEvent, /) -> None:
        self.events.append(event)

    def flush(self) -> None:
        """Nothing buffered here."""


def _ensure(message_id: str, child: str = "c1", *, receive_count: int = 1) -> InboundMessage:
    body = EnsureRequest.model_validate(
        {
            "kind": "ensure",
            "request_id": f"req-{message_id}",
            "workspace_id": child,
            "parent_workspace_id": "m1",
            "need": {"projects": 0, "prompts": 10},
        }
    ).model_dump_json()
    return InboundMessage(message_id, child, body, receive_count=receive_count)


def _unreadable_child() -> InMemoryGateway:
    """A family whose child c1 answers its read with a 503 (a retry may succeed)."""
    gateway = _gateway("c1")
    gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(503, "unavailable", "read")])
    return gateway


def _gateway(*children: str) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master("m1", total=Totals(projects=50, prompts=10_000))
    for child in children:
        gateway.add_child(child, "m1", total=Totals(projects=1, prompts=100))
    return gateway


def _batch(
    inbound: Sequence[InboundMessage],
    *,
    gateway: InMemoryGateway | None = None,
    broker: FakeBroker | None = None,
    ledger: InMemoryRequestLedger | None = None,
    dynamic_allocation: bool = True,
) -> tuple[Invocation, Events]:
    clock = FakeClock()
    events = Events()
    config = WorkerConfig(
        dynamic_allocation=dynamic_allocation,
        blocks=DEFAULT_BLOCKS,
        max_receive_count=MAX_RECEIVE_COUNT,
        ensure_policy=FAIL_FAST,
        release_policy=SETTLE,
        aws_call_budget_s=1.0,
    )
    ports = WorkerPorts(
        gateway=gateway if gateway is not None else _gateway("c1"),
        clock=clock,
        sleep=clock.sleep,
        wall_clock_ms=lambda: 0.0,
        ledger=ledger,
        credentials=broker,
        dead_letters=RecordingDeadLetters(),
    )
    invocation = start_batch(config, ports, events, inbound, finish_deadline=clock() + 57.0)
    return invocation, events


def test_a_replay_ends_the_requests_credential_with_its_stored_outcome() -> None:
    # Given a request with a final record (IMS mode)
    ledger = InMemoryRequestLedger()
    request = EnsureRequest.model_validate_json(_ensure("m1").body)
    ledger.store_outcome(build_outcome(request, "topped-up", 1))
    broker = FakeBroker()
    invocation, _ = _batch([_ensure("m1", receive_count=2)], broker=broker, ledger=ledger)

    # When its record comes back / Then nothing is opened, and its promise is ended
    handle_message(invocation, "m1")
    assert (broker.opened, broker.ended) == ([], [("req-m1", False)])


@pytest.mark.parametrize(
    ("refusal", "metric"),
    [(AccessDeniedError(), "accessDenied"), (NoCredentialError(), "noCredential")],
)
def test_a_credential_refusal_is_counted_by_its_name(refusal: Exception, metric: str) -> None:
    # Given a request its user's credential refuses
    invocation, events = _batch([_ensure("m1")], broker=FakeBroker(refuse={"req-m1": refusal}))

    # When it is handled / Then it completes, counted under the refusal's name
    handle_message(invocation, "m1")
    assert [e for e in events.events if isinstance(e, CredentialOutcome)] == [
        CredentialOutcome(metric)  # type: ignore[arg-type]
    ]


def test_a_retryable_failure_forgets_the_batchs_session() -> None:
    # Given a request whose session opens, then whose child's read fails for now
    broker = FakeBroker()
    invocation, _ = _batch([_ensure("m1")], gateway=_unreadable_child(), broker=broker)

    # When it fails on an early receive
    with pytest.raises(UpstreamError):
        handle_message(invocation, "m1")

    # Then the batch forgets its session (the rolled token stays stored) and nothing ends
    assert invocation.state.credentials is not None
    assert "req-m1" not in invocation.state.credentials.sessions
    assert (broker.opened, broker.ended) == (["req-m1"], [])


def test_a_final_receive_failing_ends_its_park_and_is_not_reported_completed() -> None:
    # Given a parked request on its final receive whose child's read fails for now
    invocation, events = _batch(
        [_ensure("m1", receive_count=MAX_RECEIVE_COUNT)], gateway=_unreadable_child()
    )
    invocation.ports.parked.add("req-m1")

    # When it fails
    with pytest.raises(UpstreamError):
        handle_message(invocation, "m1")

    # Then its terminal outcome is recorded, its park ends, and no Completed is reported
    [(message_id, outcome)] = invocation.state.book.entries
    assert (message_id, outcome.status, outcome.dead_lettered) == ("m1", "failed", True)
    assert "req-m1" not in invocation.ports.parked
    assert not [e for e in events.events if isinstance(e, Completed)]


def test_an_ensure_with_dynamic_allocation_off_opens_no_credential() -> None:
    # Given IMS mode and dynamic allocation off
    broker = FakeBroker()
    invocation, _ = _batch([_ensure("m1")], broker=broker, dynamic_allocation=False)

    # When the ensure is handled / Then it completes disabled with no exchange
    handle_message(invocation, "m1")
    [(_, outcome)] = invocation.state.book.entries
    assert outcome.status == "disabled"
    assert broker.opened == []


def test_a_leader_whose_session_cannot_open_splits_its_run() -> None:
    # Given a coalesced run of two ensures whose leader's session cannot open
    broker = FakeBroker(refuse={"req-m1": ImsUnavailableError()})
    invocation, _ = _batch([_ensure("m1"), _ensure("m2")], broker=broker)
    run = invocation.plan.runs["m1"]
    assert run.combined

    # When the leader fails / Then the member behind it will make its own call
    with pytest.raises(ImsUnavailableError):
        handle_message(invocation, "m1")
    assert not run.combined


def test_a_member_refused_at_admission_leaves_the_run_and_its_failure_splits_nothing() -> None:
    # Given a run of three ensures whose middle member's session cannot open
    broker = FakeBroker(refuse={"req-m2": ImsUnavailableError()})
    invocation, _ = _batch([_ensure("m1"), _ensure("m2"), _ensure("m3")], broker=broker)
    run = invocation.plan.runs["m1"]

    # When the leader is served, Then the refused member left the run before the call,
    # and the combined call served the two that stayed (their 20 leave the unused child 80,
    # under two blocks: refilled ahead, a top-up)
    handle_message(invocation, "m1")
    assert run.members == ["m1", "m3"]
    [(_, leader)] = invocation.state.book.entries
    assert (leader.status, leader.coalesced) == ("topped-up", 2)
    assert run.result is not None

    # When the member's own turn fails, Then the run the others share stays whole
    with pytest.raises(ImsUnavailableError):
        handle_message(invocation, "m2")
    assert run.combined


def test_a_completed_request_with_a_ledger_is_not_reported_superseded() -> None:
    # Given a request with no record yet
    invocation, events = _batch([_ensure("m1")], ledger=InMemoryRequestLedger())

    # When it completes / Then its store is reported as nothing but a completion
    handle_message(invocation, "m1")
    assert [e for e in events.events if isinstance(e, LedgerEvent)] == []


def test_a_dead_letter_the_ledger_cannot_take_still_ends_the_credential() -> None:
    # Given a request refused for want of a credential, and a ledger down after the lookup
    ledger = InMemoryRequestLedger()
    broker = FakeBroker(refuse={"req-m1": NoCredentialError()})
    invocation, _ = _batch([_ensure("m1")], broker=broker, ledger=ledger)
    ledger.down = True

    # When it ends (its dead letter not stored, so not announced)
    handle_message(invocation, "m1")

    # Then its record is still scrubbed (the promise is dead)
    assert invocation.state.book.entries == []
    assert broker.scrubbed == ["req-m1"]


# ==== dead letters ==========================================================================


def _invalid(reason: str | None) -> BatchMessage:
    return BatchMessage(InboundMessage("m1", "c1", "{oops"), None, invalid_reason=reason)


def test_an_invalid_message_without_its_reason_is_dead_lettered_as_invalid() -> None:
    # Given an invalid record that names no reason / When it is dead-lettered
    sink = RecordingDeadLetters()
    events = Events()
    dead_letter(_invalid(None), sink=sink, deadlines=_deadlines(), observer=events)

    # Then it goes with the generic reason, unchanged, and is counted under it
    [sent] = sink.sent
    assert (sent.body, sent.reason, sent.dedup_id) == ("{oops", "invalid message", "m1")
    assert events.events == [InvalidMessage("invalid message")]


def test_an_invalid_message_without_a_dlq_fails_with_its_reason() -> None:
    # Given no DLQ wired / When an invalid record is dead-lettered, Then its record fails
    with pytest.raises(InvalidMessageError) as failed:
        dead_letter(_invalid("kind: unknown"), sink=None, deadlines=_deadlines(), observer=Events())
    assert str(failed.value) == "kind: unknown"


def _deadlines() -> Deadlines:
    clock = FakeClock()
    return Deadlines(clock=clock, applying=clock() + 10.0, finishing=clock() + 20.0, aws_call_s=1.0)


def test_a_credential_record_of_another_child_refuses_the_request_as_an_id_conflict() -> None:
    # Given a request whose request id names another child's credential record (IMS mode)
    broker = FakeBroker(refuse={"req-m1": CredentialNotOwnedError()})
    invocation, events = _batch([_ensure("m1", receive_count=2)], broker=broker)

    # When it is handled
    handle_message(invocation, "m1")

    # Then it completes rejected as a request id conflict, booked as held (never stored), and
    # the other request's credential is not ended
    request = EnsureRequest.model_validate_json(_ensure("m1").body)
    refused = build_outcome(request, "rejected", 2, error_code="requestIdConflict")
    assert invocation.state.book.entries == [("m1", refused)]
    assert [e for e in events.events if isinstance(e, (Completed, LedgerEvent))] == [
        Completed(refused),
        LedgerEvent("requestIdConflict"),
    ]
    assert broker.ended == []


@pytest.mark.parametrize(
    ("status", "raised", "counted"),
    [(401, UnauthorizedError, [CredentialOutcome("unauthorized")]), (503, UpstreamError, [])],
)
def test_a_401_on_an_early_receive_in_ims_mode_is_counted_as_unauthorized(
    status: int, raised: type[Exception], counted: list[CredentialOutcome]
) -> None:
    # Given a request whose child's read answers ``status`` (IMS mode, an early receive)
    gateway = _gateway("c1")
    gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(status, "refused", "read")])
    invocation, events = _batch([_ensure("m1")], gateway=gateway, broker=FakeBroker())

    # When it fails for now (a 401 without its body)
    with pytest.raises(raised):
        handle_message(invocation, "m1")

    # Then a 401 is counted as unauthorized (a burst pages), any other failure is not
    unauthorized = [
        e for e in events.events if isinstance(e, CredentialOutcome) and e.outcome != "exchanged"
    ]
    assert unauthorized == counted
