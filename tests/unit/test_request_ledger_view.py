"""The worker's view of the ledger: nothing is announced that the ledger does not hold."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from serenity_allocator.application.outcomes import OutcomeBook
from serenity_allocator.application.request_ledger import (
    LedgerDeadlines,
    LedgerView,
    read_ledger,
)
from serenity_allocator.domain.errors import OutOfTimeError
from serenity_allocator.domain.ledger import (
    CallDeadline,
    LedgerRead,
    LedgerUnavailableError,
    ReleaseIntent,
)
from serenity_allocator.domain.messages import AllocationOutcome


class DownLedger:
    """A ledger that cannot be reached (every call fails as the adapter reports it)."""

    def read_batch(
        self, request_ids: Sequence[str], deadline: CallDeadline | None = None
    ) -> LedgerRead:
        raise LedgerUnavailableError("ConnectTimeoutError")

    def record_intent(self, request_id: str, intent: ReleaseIntent, *, workspace_id: str) -> None:
        raise LedgerUnavailableError("ConnectTimeoutError")

    def mark_announced(self, request_ids: Sequence[str]) -> None:
        raise LedgerUnavailableError("ConnectTimeoutError")

    def store_outcome(
        self, outcome: AllocationOutcome, *, dead_lettered: bool = False, provisional: bool = False
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
