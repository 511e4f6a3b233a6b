"""The request ledger use case over the in-memory ledger (kept true by a contract test)."""

from __future__ import annotations

from typing import Any

import pytest

from serenity_allocator.application.allocator.apply_release import ReleaseCall, apply_release
from serenity_allocator.application.allocator.invocation import WorkerConfig
from serenity_allocator.application.allocator.request_ledger import (
    FINAL_RECEIVE_UNFINISHED,
    LedgerView,
    Replay,
    mark_final_receive,
    read_ledger,
    record_transfer_intent,
    store_terminal,
)
from serenity_allocator.application.deadlines import LedgerDeadlines
from serenity_allocator.domain.errors import OutOfTimeError
from serenity_allocator.domain.ledger import (
    LedgerConflictError,
    LedgerEntry,
    LedgerUnavailableError,
    TransferIntent,
)
from serenity_allocator.domain.messages import AllocationOutcome, ReleaseRequest
from serenity_allocator.domain.model import DEFAULT_BLOCKS, Totals
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE, TransferContext
from tests.fakes import InMemoryGateway
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger

BEFORE = Totals(projects=3, prompts=500)
TARGET = Totals(projects=1, prompts=100)
RELEASE = ReleaseRequest(kind="release", request_id="req-1", workspace_id="child-1")
BOUND: dict[str, Any] = {"workspace_id": "child-1", "kind": "release"}
"""The binding every record of RELEASE carries."""


def _outcome(status: str = "released", **fields: object) -> AllocationOutcome:
    return AllocationOutcome.model_validate(
        {
            "request_id": "req-1",
            "kind": "release",
            "workspace_id": "child-1",
            "status": status,
            "receive_count": 1,
            **fields,
        }
    )


DEAD = _outcome("failed", error_code="workspaceBusy", dead_lettered=True, receive_count=5)


def _deadlines(*, apply_by: float, finish_by: float) -> LedgerDeadlines:
    # The invocation's clock stands at 0 s and one ledger call may take 1 s.
    return LedgerDeadlines(
        clock=lambda: 0.0,
        sleep=lambda _s: None,
        apply_by=apply_by,
        finish_by=finish_by,
        call_budget_s=1.0,
    )


NO_TIME = _deadlines(apply_by=0.5, finish_by=0.5)
FINISH_ONLY = _deadlines(apply_by=0.5, finish_by=2.0)


def _view(ledger: InMemoryRequestLedger, *ids: str) -> LedgerView:
    return read_ledger(ledger, ids or ["req-1"])


# -- read_ledger -----------------------------------------------------------------------------


def test_read_ledger_looks_up_duplicate_request_ids_once_in_order() -> None:
    # Given a batch in which one request id arrives twice
    ledger = InMemoryRequestLedger()
    ledger.store_outcome(_outcome())

    # When the batch reads the ledger
    view = read_ledger(ledger, ["req-2", "req-1", "req-2"])

    # Then one lookup asks for each id once, and the view holds what is stored
    assert ledger.lookups == [["req-2", "req-1"]]
    assert list(view.entries) == ["req-1"]
    assert view.error is None


def test_read_ledger_without_ledger_or_ids_reads_nothing() -> None:
    # Given a ledger and a batch with no valid request
    ledger = InMemoryRequestLedger()

    # When the batch reads the ledger, or there is no ledger at all
    empty = read_ledger(ledger, [])
    unconfigured = read_ledger(None, ["req-1"])

    # Then nothing is looked up and both views are empty and usable
    assert ledger.lookups == []
    assert (empty.entries, empty.error, empty.ledger) == ({}, None, ledger)
    assert (unconfigured.entries, unconfigured.error, unconfigured.ledger) == ({}, None, None)
    unconfigured.check("req-1")


def test_read_ledger_keeps_the_lookup_error_for_check() -> None:
    # Given a ledger that is down
    ledger = InMemoryRequestLedger()
    ledger.down = True

    # When the batch reads it
    view = read_ledger(ledger, ["req-1"])

    # Then the error is kept and raised for each request that checks
    assert view.entries == {}
    with pytest.raises(LedgerUnavailableError, match="ConnectTimeoutError"):
        view.check("req-1")


# -- replay ----------------------------------------------------------------------------------


def test_ledger_view_replays_only_a_final_outcome() -> None:
    # Given a final record, an intent, and a published dead letter
    ledger = InMemoryRequestLedger()
    final = _outcome(request_id="req-final")
    ledger.store_outcome(final)
    ledger.record_intent(
        "req-intent", TransferIntent(before=BEFORE, target=TARGET), workspace_id="child-1"
    )
    ledger.store_outcome(DEAD.model_copy(update={"request_id": "req-dead"}), dead_lettered=True)

    # When the batch asks which requests to replay
    view = read_ledger(ledger, ["req-final", "req-intent", "req-dead", "req-new"])
    decisions = [
        view.decide(
            RELEASE.model_copy(update={"request_id": rid}),
            first=None,
            receive_count=1,
            final_receive=False,
        )
        for rid in ("req-final", "req-intent", "req-dead", "req-new")
    ]
    replays = [d.outcome if isinstance(d, Replay) else None for d in decisions]

    # Then only the final outcome is replayed, exactly as stored
    assert replays == [final, None, None, None]


# -- store_terminal --------------------------------------------------------------------------


def test_store_terminal_stores_once_and_returns_the_held_outcome() -> None:
    # Given a request whose first delivery stored its outcome
    ledger = InMemoryRequestLedger()
    first = _outcome()
    view = _view(ledger)
    assert store_terminal(view, first) == first

    # When a second delivery in a later batch completes differently
    second = store_terminal(_view(ledger), _outcome("nothing-to-release", receive_count=2))

    # Then the ledger wrote once and the first outcome is what gets published
    assert second == first
    assert ledger.writes == 1
    assert view.entries["req-1"] == LedgerEntry(
        request_id="req-1", state="final", outcome=first, **BOUND
    )


def test_store_terminal_for_a_duplicate_id_in_one_batch_returns_the_first_outcome() -> None:
    # Given a batch in which the same request id completes twice
    ledger = InMemoryRequestLedger()
    view = _view(ledger)
    first = _outcome(coalesced=1)

    # When both are stored through the batch's view
    held = [view.store(first), view.store(_outcome(coalesced=2))]

    # Then both return the first outcome (one record, one content)
    assert held == [first, first]
    assert ledger.writes == 1


def test_store_terminal_stores_a_dead_letter_as_dead_lettered() -> None:
    # Given a request on its final receive that recorded a release intent
    ledger = InMemoryRequestLedger()
    view = _view(ledger)
    record_transfer_intent(view, RELEASE, BEFORE, TARGET)

    # When the worker dead-letters it
    held = store_terminal(view, DEAD)

    # Then the ledger and the view hold a published dead letter that keeps the intent
    intent = TransferIntent(before=BEFORE, target=TARGET)
    assert held == DEAD
    stored = ledger.entries["req-1"]
    assert (stored.state, stored.provisional, stored.outcome) == ("deadLettered", False, DEAD)
    assert ledger.dead_letters["req-1"] == DEAD
    assert view.entries["req-1"] == LedgerEntry(
        request_id="req-1", state="deadLettered", outcome=DEAD, intent=intent, **BOUND
    )


def test_store_terminal_without_a_ledger_returns_the_outcome() -> None:
    # Given no ledger configured, When an outcome is stored, Then it is returned as is
    assert store_terminal(LedgerView(), _outcome()) == _outcome()


def test_store_terminal_marks_a_redrive_as_superseding_the_dead_letter() -> None:
    # Given a request the ledger announced as dead-lettered
    ledger = InMemoryRequestLedger()
    ledger.store_outcome(DEAD, dead_lettered=True)
    view = _view(ledger)

    # When its redriven delivery completes
    held = store_terminal(view, _outcome())

    # Then the stored and published outcome says it supersedes the dead letter
    superseding = _outcome(supersedes="deadLettered")
    assert held == superseding
    assert ledger.entries["req-1"].state == "final"
    assert ledger.entries["req-1"].outcome == superseding
    assert ledger.dead_letters["req-1"] == DEAD


def test_store_terminal_does_not_mark_a_dead_letter_as_superseding() -> None:
    # Given a request with a provisional dead letter (its final receive crashed)
    ledger = InMemoryRequestLedger()
    ledger.store_outcome(DEAD, provisional=True)
    view = _view(ledger)

    # When the worker dead-letters it again
    again = DEAD.model_copy(update={"error_code": "receivesExhausted"})
    held = store_terminal(view, again)

    # Then it replaces the provisional record unchanged (no supersedes)
    assert held == again
    assert held is not None and held.supersedes is None
    assert ledger.entries["req-1"].provisional is False


def test_store_terminal_with_no_time_left_drops_a_dead_letter_and_fails_a_result() -> None:
    # Given a view whose invocation has no time for one more ledger call
    ledger = InMemoryRequestLedger()
    view = LedgerView(ledger, NO_TIME)

    # When a dead letter and a completed result are stored
    dropped = store_terminal(view, DEAD)
    with pytest.raises(OutOfTimeError):
        store_terminal(view, _outcome())

    # Then nothing is written
    assert dropped is None
    assert ledger.writes == 0


def test_store_terminal_gives_a_dead_letter_the_time_kept_for_announcing() -> None:
    # Given a view past its applying deadline but before the function's own
    ledger = InMemoryRequestLedger()
    view = LedgerView(ledger, FINISH_ONLY)

    # When a dead letter and a completed result are stored
    held = store_terminal(view, DEAD)
    with pytest.raises(OutOfTimeError):
        store_terminal(view, _outcome())

    # Then the dead letter is written (it may use the publish's time), the result is not
    assert held == DEAD
    assert ledger.writes == 1


def test_store_terminal_with_the_ledger_down_drops_a_dead_letter_and_fails_a_result() -> None:
    # Given a batch whose ledger went down after its lookup
    ledger = InMemoryRequestLedger()
    view = _view(ledger)
    ledger.down = True

    # When a dead letter and a completed result are stored
    dropped = store_terminal(view, DEAD)

    # Then the dead letter is not announced and the result fails (it comes back)
    assert dropped is None
    with pytest.raises(LedgerUnavailableError):
        store_terminal(view, _outcome())
    assert view.entries == {}


# -- mark_final_receive ----------------------------------------------------------------------


def test_mark_final_receive_leaves_a_provisional_dead_letter() -> None:
    # Given a release on its final receive
    ledger = InMemoryRequestLedger()
    view = _view(ledger)

    # When the receive begins
    mark_final_receive(view, RELEASE, 5)

    # Then a provisional dead letter naming the unfinished receive is stored
    entry = ledger.entries["req-1"]
    assert (entry.state, entry.provisional) == ("deadLettered", True)
    assert entry.outcome == _outcome(
        "failed",
        error_code=FINAL_RECEIVE_UNFINISHED,
        dead_lettered=True,
        receive_count=5,
        source="service",
    )
    assert FINAL_RECEIVE_UNFINISHED == "finalReceiveUnfinished"


def test_mark_final_receive_then_completing_replaces_the_provisional_record() -> None:
    # Given a final receive that left its provisional dead letter
    ledger = InMemoryRequestLedger()
    mark_final_receive(_view(ledger), RELEASE, 5)

    # When the same receive completes (its view read the ledger before the mark)
    view = LedgerView(ledger)
    held = store_terminal(view, _outcome(receive_count=5))

    # Then the final outcome replaces it, with no supersedes
    assert held == _outcome(receive_count=5)
    assert (ledger.entries["req-1"].state, ledger.entries["req-1"].provisional) == ("final", False)


def test_mark_final_receive_with_no_time_left_to_apply_writes_nothing() -> None:
    # Given a view past its applying deadline (the finishing one still ahead)
    ledger = InMemoryRequestLedger()
    view = LedgerView(ledger, FINISH_ONLY)

    # When a final receive begins, Then it fails before writing its provisional dead letter
    with pytest.raises(OutOfTimeError):
        mark_final_receive(view, RELEASE, 5)
    assert (ledger.writes, ledger.entries) == (0, {})


def test_mark_final_receive_without_a_ledger_does_nothing() -> None:
    # Given no ledger
    view = LedgerView()

    # When a final receive begins
    mark_final_receive(view, RELEASE, 5)

    # Then no provisional record is kept, and the receive's own outcome is what completes it
    assert view.entries == {}
    decision = view.decide(RELEASE, first=None, receive_count=5, final_receive=False)
    assert not isinstance(decision, Replay)
    assert store_terminal(view, _outcome(receive_count=5)) == _outcome(receive_count=5)
    assert view.entries == {}


# -- release intent and replay ---------------------------------------------------------------


def test_record_transfer_intent_writes_it_and_keeps_it_in_the_view() -> None:
    # Given a release about to transfer
    ledger = InMemoryRequestLedger()
    view = _view(ledger)

    # When its intent is recorded
    record_transfer_intent(view, RELEASE, BEFORE, TARGET)

    # Then the ledger and the batch's view both hold it
    intent = TransferIntent(before=BEFORE, target=TARGET)
    assert ledger.entries["req-1"].intent == intent
    assert view.entries["req-1"] == LedgerEntry(
        request_id="req-1", state="intent", intent=intent, **BOUND
    )
    assert view.entries["req-1"].intent == intent


def test_record_transfer_intent_beside_a_dead_letter_keeps_the_terminal_view_entry() -> None:
    # Given a redriven release whose record is a published dead letter
    ledger = InMemoryRequestLedger()
    ledger.store_outcome(DEAD, dead_lettered=True)
    view = _view(ledger)

    # When its intent is recorded
    record_transfer_intent(view, RELEASE, BEFORE, TARGET)

    # Then the ledger adds the intent and the view still sees the dead letter
    assert ledger.entries["req-1"].state == "deadLettered"
    assert ledger.entries["req-1"].intent == TransferIntent(before=BEFORE, target=TARGET)
    assert view.entries["req-1"].state == "deadLettered"


def test_record_transfer_intent_over_a_final_record_conflicts() -> None:
    # Given a release another delivery completed
    ledger = InMemoryRequestLedger()
    ledger.store_outcome(_outcome())
    view = _view(ledger)

    # When this delivery records an intent, Then it is refused
    with pytest.raises(LedgerConflictError):
        record_transfer_intent(view, RELEASE, BEFORE, TARGET)
    assert ledger.entries["req-1"].intent is None


def test_record_transfer_intent_with_no_time_left_writes_nothing() -> None:
    # Given a view past its applying deadline (the finishing one still ahead)
    ledger = InMemoryRequestLedger()
    view = LedgerView(ledger, FINISH_ONLY)

    # When a release's intent is recorded, Then it fails before writing
    with pytest.raises(OutOfTimeError):
        record_transfer_intent(view, RELEASE, BEFORE, TARGET)
    assert (ledger.writes, view.entries) == (0, {})


def test_record_transfer_intent_without_a_ledger_does_nothing() -> None:
    # Given no ledger, When an intent is recorded, Then the view stays empty
    view = LedgerView()
    record_transfer_intent(view, RELEASE, BEFORE, TARGET)
    assert view.entries == {}


def _child_at(totals: Totals) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master("master-1", total=Totals(projects=50, prompts=10_000))
    gateway.add_child("child-1", "master-1", total=totals)
    return gateway


def test_request_ledger_release_replay_after_a_partial_application_reports_true_totals() -> None:
    # Given a delivery that recorded its intent, transferred, and died before storing
    ledger = InMemoryRequestLedger()
    record_transfer_intent(_view(ledger), RELEASE, BEFORE, TARGET)

    # When the redelivery reads the lowered child and replays
    view = _view(ledger)
    replayed = apply_release(
        RELEASE,
        2,
        config=WorkerConfig(
            dynamic_allocation=True,
            blocks=DEFAULT_BLOCKS,
            max_receive_count=5,
            ensure_policy=FAIL_FAST,
            release_policy=SETTLE,
        ),
        ledger=view,
        call=ReleaseCall(
            _child_at(TARGET), TransferContext(clock=lambda: 0.0, sleep=lambda _s: None)
        ),
    )
    held = store_terminal(view, replayed)

    # Then it reports released with the recorded before and after, stored once
    expected = _outcome(
        "released", receive_count=2, totals_before=BEFORE, totals_after=TARGET, source="service"
    )
    assert replayed == expected
    assert held == expected
    intent = TransferIntent(before=BEFORE, target=TARGET)
    assert ledger.entries["req-1"].state == "final"
    assert ledger.entries["req-1"].intent == intent
    # and the batch's view keeps the intent beside the final outcome
    assert view.entries["req-1"] == LedgerEntry(
        request_id="req-1", state="final", outcome=expected, intent=intent, **BOUND
    )


def test_landed_is_none_when_the_transfer_did_not_land() -> None:
    # Given recorded intents, one a no-op (target equals before)
    ledger = InMemoryRequestLedger()
    record_transfer_intent(_view(ledger), RELEASE, BEFORE, TARGET)
    record_transfer_intent(
        _view(ledger), RELEASE.model_copy(update={"request_id": "req-noop"}), BEFORE, BEFORE
    )
    view = _view(ledger, "req-1", "req-noop", "req-none")

    # When the child does not hold the target, the intent is a no-op, or there is no intent
    not_landed = view.landed(RELEASE, _child_at(BEFORE))
    noop = view.landed(RELEASE.model_copy(update={"request_id": "req-noop"}), _child_at(BEFORE))
    none = view.landed(RELEASE.model_copy(update={"request_id": "req-none"}), _child_at(TARGET))

    # Then nothing is replayed: the release is applied again
    assert (not_landed, noop, none) == (None, None, None)


def test_apply_release_of_an_unused_child_with_no_floor_requires_decommission() -> None:
    # Given an unused child and a release that asks for no floor (a transfer to 0 is ignored)
    view = _view(InMemoryRequestLedger())
    request = RELEASE.model_copy(update={"floor": Totals()})

    # When the release is applied
    outcome = apply_release(
        request,
        1,
        config=WorkerConfig(
            dynamic_allocation=True,
            blocks=DEFAULT_BLOCKS,
            max_receive_count=5,
            ensure_policy=FAIL_FAST,
            release_policy=SETTLE,
        ),
        ledger=view,
        call=ReleaseCall(
            _child_at(TARGET), TransferContext(clock=lambda: 0.0, sleep=lambda _s: None)
        ),
    )

    # Then it says so, with the child's totals unchanged, and records no intent
    assert (outcome.status, outcome.totals_before, outcome.totals_after) == (
        "requires-decommission",
        TARGET,
        TARGET,
    )
    assert view.entries == {}
