"""The worker's view of the ledger: nothing is announced that the ledger does not hold."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from serenity_allocator.application.allocator.invocation import OutcomeBook
from serenity_allocator.application.allocator.request_ledger import (
    FINAL_RECEIVE_UNFINISHED,
    Apply,
    LedgerDecision,
    LedgerView,
    Replay,
    confirm_announced,
    mark_final_receive,
    read_ledger,
    replay_invalid,
    store_terminal,
)
from serenity_allocator.application.deadlines import LedgerDeadlines
from serenity_allocator.domain.errors import OutOfTimeError
from serenity_allocator.domain.ledger import (
    CallDeadline,
    LedgerEntry,
    LedgerRead,
    LedgerRecordUnreadableError,
    LedgerUnavailableError,
    TransferIntent,
)
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, build_outcome
from serenity_allocator.domain.model import Totals
from tests.fakes import FakeClock
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger, intent_entry


class DownLedger:
    """A ledger that cannot be reached (every call fails as the adapter reports it)."""

    def read_batch(
        self, request_ids: Sequence[str], deadline: CallDeadline | None = None
    ) -> LedgerRead:
        raise LedgerUnavailableError("ConnectTimeoutError")

    def record_intent(self, request_id: str, intent: TransferIntent, *, workspace_id: str) -> None:
        raise LedgerUnavailableError("ConnectTimeoutError")

    def mark_announced(self, request_ids: Sequence[str]) -> None:
        raise LedgerUnavailableError("ConnectTimeoutError")

    def store_outcome(
        self,
        outcome: AllocationOutcome,
        *,
        dead_lettered: bool = False,
        provisional: bool = False,
        source_message_id: str | None = None,
    ) -> AllocationOutcome:
        raise LedgerUnavailableError("ConnectTimeoutError")


def _outcome(**fields: object) -> AllocationOutcome:
    return AllocationOutcome.model_validate(
        {
            "request_id": "req-1",
            "kind": "ensure",
            "workspace_id": "child-1",
            "status": "failed",
            "error_code": "workspaceBusy",
            **fields,
        }
    )


def test_outcome_book_does_not_announce_a_dead_letter_the_ledger_could_not_take() -> None:
    # Given a batch whose ledger went down after its lookup
    book = OutcomeBook(ledger=LedgerView(DownLedger()))

    # When a final receive's dead letter is recorded
    held = book.record("m-1", _outcome(dead_lettered=True))

    # Then it is not announced (what is published always equals the ledger)
    assert held is None
    assert book.entries == []


def test_outcome_book_fails_a_completed_request_the_ledger_could_not_take() -> None:
    # Given the same ledger / When a completed request's outcome is recorded
    book = OutcomeBook(ledger=LedgerView(DownLedger()))

    # Then the record fails (it comes back), and nothing is announced
    with pytest.raises(LedgerUnavailableError):
        book.record("m-1", _outcome(status="topped-up", error_code=None))
    assert book.entries == []


def test_ledger_view_with_no_time_left_fails_a_write_and_drops_a_dead_letter() -> None:
    # Given a ledger view whose invocation has no time for another call
    no_time = LedgerDeadlines(
        clock=lambda: 10.0, sleep=lambda _s: None, apply_by=0.0, finish_by=0.0, call_budget_s=1.0
    )
    view = LedgerView(DownLedger(), no_time)
    book = OutcomeBook(ledger=view)

    # When a completed outcome, then a dead letter, are recorded
    with pytest.raises(OutOfTimeError):
        book.record("m-1", _outcome(status="topped-up", error_code=None))
    assert book.record("m-2", _outcome(dead_lettered=True)) is None

    # Then neither is announced
    assert book.entries == []


def test_read_ledger_keeps_a_lookup_failure_for_each_request() -> None:
    # Given a ledger that cannot be read / When the batch looks its requests up
    view = read_ledger(DownLedger(), ["req-1", "req-2"])

    # Then the batch goes on, and each valid request fails when it checks availability
    assert view.entries == {}
    with pytest.raises(LedgerUnavailableError):
        view.check("req-1")


# ==== the ledger's deadlines, a terminal store's copy, and confirming announcements ========


def _deadlines(clock: FakeClock, *, apply_in: float, finish_in: float) -> LedgerDeadlines:
    return LedgerDeadlines(
        clock=clock,
        sleep=clock.sleep,
        apply_by=clock() + apply_in,
        finish_by=clock() + finish_in,
        call_budget_s=4.0,
    )


def test_ledger_deadlines_fit_a_call_that_ends_exactly_at_the_deadline() -> None:
    # Given 4 s left before applying must end, and 4 s for one ledger call
    clock = FakeClock()
    deadlines = _deadlines(clock, apply_in=4.0, finish_in=10.0)

    # When asked / Then it fits exactly; a moment later it does not (finishing still does)
    assert deadlines.has_time(False) is True
    clock.advance(0.5)
    assert (deadlines.has_time(False), deadlines.has_time(True)) == (False, True)


def test_ledger_deadlines_bound_the_lookup_by_the_applying_deadline_on_the_same_clock() -> None:
    # Given the batch's ledger deadlines / When the lookup's deadline is asked
    clock = FakeClock()
    deadlines = _deadlines(clock, apply_in=20.0, finish_in=30.0)

    # Then it is the applying deadline, on the invocation's clock and sleep, per attempt 4 s
    assert deadlines.lookup_deadline() == CallDeadline(clock, clock.sleep, deadlines.apply_by, 4.0)


def test_store_terminal_refuses_an_unreadable_record_saying_why() -> None:
    # Given a batch whose lookup found req-1's record unreadable
    view = LedgerView(InMemoryRequestLedger(), unreadable={"req-1": "record: unreadable state"})

    # When its completed outcome is stored / Then it is refused with the record's reason
    with pytest.raises(LedgerRecordUnreadableError, match="record: unreadable state"):
        store_terminal(view, _outcome(status="topped-up", error_code=None))


def test_store_terminal_keeps_the_batchs_copy_with_its_kind() -> None:
    # Given a view over an empty ledger / When an ensure's and a release's outcomes are stored
    view = LedgerView(InMemoryRequestLedger())
    store_terminal(view, _outcome(status="topped-up", error_code=None))
    store_terminal(
        view, _outcome(request_id="req-2", kind="release", status="released", error_code=None)
    )

    # Then the batch's copies are final and carry each request's kind
    assert [(view.entries[rid].state, view.entries[rid].kind) for rid in ("req-1", "req-2")] == [
        ("final", "ensure"),
        ("final", "release"),
    ]


def test_confirm_announced_flags_only_outcomes_equal_to_their_terminal_record() -> None:
    # Given a batch holding req-1 as an intent, req-2 final with another outcome, and
    # req-3 final with the very outcome announced
    ledger = InMemoryRequestLedger()
    view = LedgerView(ledger)
    intent = TransferIntent(before=Totals(projects=2), target=Totals(projects=1))
    view.entries["req-1"] = intent_entry("req-1", "child-1", "ensure", intent.before, intent.target)
    for rid in ("req-2", "req-3"):
        store_terminal(view, _outcome(request_id=rid, status="topped-up", error_code=None))
    announced = [
        _outcome(request_id="req-1", status="topped-up", error_code=None),
        _outcome(request_id="req-2", status="hot-path", error_code=None),
        _outcome(request_id="req-3", status="topped-up", error_code=None),
    ]

    # When the batch confirms what it announced
    confirm_announced(view, announced)

    # Then only req-3 is flagged, past the two it skipped
    assert ledger.announced_calls == [["req-3"]]


def test_confirm_announced_may_use_the_finishing_deadline() -> None:
    # Given a final record, and time left only before the finishing deadline
    clock = FakeClock()
    ledger = InMemoryRequestLedger()
    view = LedgerView(ledger, _deadlines(clock, apply_in=1.0, finish_in=10.0))
    outcome = _outcome(status="topped-up", error_code=None)
    store_terminal(LedgerView(ledger), outcome)
    view.entries["req-1"] = ledger.entries["req-1"]

    # When the batch confirms it / Then it is flagged (announcing may use the finishing time)
    confirm_announced(view, [outcome])
    assert ledger.announced_calls == [["req-1"]]


class RecordingLookupLedger(InMemoryRequestLedger):
    """The in-memory ledger, keeping the deadline each batch lookup was given."""

    def __init__(self) -> None:
        super().__init__()
        self.deadlines: list[CallDeadline | None] = []

    def read_batch(
        self, request_ids: Sequence[str], deadline: CallDeadline | None = None
    ) -> LedgerRead:
        self.deadlines.append(deadline)
        return super().read_batch(request_ids, deadline)


def test_read_ledger_gives_the_lookup_the_applying_deadline() -> None:
    # Given the batch's ledger deadlines / When its ids are read
    clock = FakeClock()
    ledger = RecordingLookupLedger()
    deadlines = _deadlines(clock, apply_in=20.0, finish_in=30.0)
    read_ledger(ledger, ["req-1"], deadlines)

    # Then the one lookup was bounded by the applying deadline
    assert ledger.deadlines == [deadlines.lookup_deadline()]


def test_read_ledger_starts_no_lookup_past_the_applying_deadline() -> None:
    # Given time left before the finishing deadline only / When the batch's ids are read
    clock = FakeClock()
    ledger = RecordingLookupLedger()
    view = read_ledger(ledger, ["req-1"], _deadlines(clock, apply_in=1.0, finish_in=10.0))

    # Then no lookup is made and every request of the batch fails for now (out of time)
    assert ledger.deadlines == []
    assert isinstance(view.error, OutOfTimeError)
    with pytest.raises(OutOfTimeError):
        view.check("req-1")


def test_ledger_view_keeps_unreadable_and_unanswered_ids_out_of_the_batch_and_says_why() -> None:
    # Given a lookup that found req-1 unreadable and left req-2 unanswered
    view = LedgerView(
        InMemoryRequestLedger(), unreadable={"req-1": "record: bad state"}, unanswered={"req-2"}
    )

    # When asked / Then both are settled apart from the batch, and req-1 fails saying why
    assert view.answered([]) == frozenset({"req-1", "req-2"})
    with pytest.raises(LedgerRecordUnreadableError, match="record: bad state"):
        view.check("req-1")


# ==== a dead letter the worker sent itself is bound to its message (ADR 0020) ================


def _ensure_request(request_id: str = "req-1") -> EnsureRequest:
    return EnsureRequest.model_validate(
        {
            "kind": "ensure",
            "request_id": request_id,
            "workspace_id": "child-1",
            "parent_workspace_id": "master-1",
            "need": {"prompts": 5},
        }
    )


def _refusal() -> AllocationOutcome:
    return _outcome(error_code="needsReauth", receive_count=2, dead_lettered=True)


def _decide(ledger: InMemoryRequestLedger, message_id: str) -> LedgerDecision:
    """What a first copy of req-1's ensure, delivered as ``message_id``, is told to do."""
    return read_ledger(ledger, ["req-1"]).decide(
        _ensure_request(), message_id=message_id, first=None, receive_count=2, final_receive=False
    )


def test_outcome_book_binds_a_completing_dead_letter_to_its_message_and_replays_only_it() -> None:
    # Given a dead letter the worker sent itself, recorded as its record completes
    ledger = InMemoryRequestLedger()
    book = OutcomeBook(ledger=LedgerView(ledger))
    held = book.record("m-1", _refusal(), completes=True)
    [entry] = read_ledger(ledger, ["req-1"]).entries.values()

    # When the batches that follow look it up: the same message again, and another one
    same = _decide(ledger, "m-1")
    other = _decide(ledger, "m-2")

    # Then the record is bound to m-1: m-1 replays the stored outcome, m-2 (a redrive) applies
    assert (entry.state, entry.source_message_id) == ("deadLettered", "m-1")
    assert same == Replay(_refusal()) and held == _refusal()
    assert other == Apply()


def test_a_redrive_of_a_bound_dead_letter_supersedes_it_and_clears_the_binding() -> None:
    # Given a dead letter bound to m-1
    ledger = InMemoryRequestLedger()
    OutcomeBook(ledger=LedgerView(ledger)).record("m-1", _refusal(), completes=True)

    # When an operator's redrive (m-2) completes with a topped-up outcome
    view = read_ledger(ledger, ["req-1"])
    held = OutcomeBook(ledger=view).record(
        "m-2", _outcome(status="topped-up", error_code=None), completes=True
    )

    # Then it supersedes the dead letter, and the final record is bound to no message
    assert held is not None and held.supersedes == "deadLettered"
    entry = ledger.entries["req-1"]
    assert (entry.state, entry.source_message_id) == ("final", None)
    assert view.entries["req-1"].source_message_id is None


def test_dead_letters_sqs_redrives_are_never_bound_to_a_message() -> None:
    # Given a final receive's dead letter (the record fails: SQS's redrive moves it) and the
    # provisional one a final receive leaves first
    ledger = InMemoryRequestLedger()
    OutcomeBook(ledger=LedgerView(ledger)).record("m-1", _outcome(dead_lettered=True))
    failed = ledger.entries["req-1"]
    mark_final_receive(LedgerView(ledger), _ensure_request("req-2"), 5)
    provisional = ledger.entries["req-2"]

    # When the same message id comes back / Then neither is replayed: both are applied
    assert (failed.state, failed.source_message_id) == ("deadLettered", None)
    assert (provisional.provisional, provisional.source_message_id) == (True, None)
    assert _decide(ledger, "m-1") == Apply()
    assert not provisional.is_replayed_for("m-1")


def test_only_a_published_dead_letter_is_replayed_for_its_message() -> None:
    # Given records that name m-1 as their source (as a hand edit or another version could)
    outcome = _refusal()
    bound = LedgerEntry(
        request_id="req-1", state="deadLettered", outcome=outcome, source_message_id="m-1"
    )
    provisional = bound.model_copy(update={"provisional": True})
    final = bound.model_copy(
        update={"state": "final", "outcome": _outcome(status="topped-up", error_code=None)}
    )

    # When asked which deliveries replay them / Then only m-1 replays the dead letter; a
    # provisional record never; a final record always (the binding adds nothing to it)
    assert (bound.is_replayed_for("m-1"), bound.is_replayed_for("m-2")) == (True, False)
    assert bound.is_replayed_for(None) is False
    assert provisional.is_replayed_for("m-1") is False
    assert (final.is_replayed_for("m-1"), final.is_replayed_for("m-2")) == (True, True)


def test_a_completing_outcome_that_is_not_a_dead_letter_is_bound_to_nothing() -> None:
    # Given a completing topped-up outcome / When it is stored
    ledger = InMemoryRequestLedger()
    OutcomeBook(ledger=LedgerView(ledger)).record(
        "m-1", _outcome(status="topped-up", error_code=None), completes=True
    )

    # Then the final record names no message (a final record is replayed for every delivery)
    assert ledger.entries["req-1"].source_message_id is None


def test_replay_invalid_replays_only_the_dead_letter_the_same_invalid_message_sent() -> None:
    # Given an invalid message's outcome, dead-lettered and stored as m-1 completed
    ledger = InMemoryRequestLedger()
    invalid = _outcome(status="invalid", error_code="invalidMessage", dead_lettered=True)
    OutcomeBook(ledger=LedgerView(ledger)).record("m-1", invalid, completes=True)
    view = read_ledger(ledger, ["req-1"])

    # When the same message, another one, and one of another workspace ask
    foreign = invalid.model_copy(update={"workspace_id": "child-2"})

    # Then only the same message, of the same workspace, replays it
    assert replay_invalid(view, invalid, "m-1") == invalid
    assert replay_invalid(view, invalid, "m-2") is None
    assert replay_invalid(view, foreign, "m-1") is None
    assert replay_invalid(view, None, "m-1") is None


def test_a_final_receive_the_ahead_pass_did_not_mark_leaves_its_dead_letter_at_its_turn() -> None:
    # Given a batch whose ahead pass left no provisional dead letter for req-1 (best effort),
    # delivered as m-1 with its order key, on its final (fifth) receive
    ledger = InMemoryRequestLedger()
    view = read_ledger(ledger, ["req-1"])
    view.sequence_numbers = {"m-0": "41", "m-1": "42"}

    # When it is decided
    decision = view.decide(
        _ensure_request(), message_id="m-1", first=None, receive_count=5, final_receive=True
    )

    # Then it is applied, after a provisional dead letter with its receive count and order key
    assert isinstance(decision, Apply)
    [entry] = read_ledger(ledger, ["req-1"]).entries.values()
    unfinished = build_outcome(
        _ensure_request(), "failed", 5, error_code=FINAL_RECEIVE_UNFINISHED
    ).model_copy(update={"dead_lettered": True, "sequence_number": "42"})
    assert (entry.state, entry.provisional, entry.outcome) == ("deadLettered", True, unfinished)
