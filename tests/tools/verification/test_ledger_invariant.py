"""Invariant 6: one terminal ledger record per request; every outcome event equals its record."""

from __future__ import annotations

from typing import Any

from serenity_allocator.domain.ledger import LedgerEntry, TransferIntent
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import Totals
from serenity_tools.verification.ledger_check import check_ledger

ENSURE = EnsureRequest(
    kind="ensure", request_id="req-e", workspace_id="child-1", parent_workspace_id="master-1"
)
RELEASE = ReleaseRequest(kind="release", request_id="req-r", workspace_id="child-1")


def _outcome(request_id: str, status: Any = "topped-up", **fields: Any) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id, kind="ensure", workspace_id="child-1", status=status, **fields
    )


def _final(outcome: AllocationOutcome, state: Any = "final") -> LedgerEntry:
    return LedgerEntry(request_id=outcome.request_id, state=state, outcome=outcome)


def test_check_ledger_passes_when_every_request_has_one_equal_record() -> None:
    # Given two requests, each with a terminal record equal to what was published (twice: a replay)
    ensure, release = _outcome("req-e"), _outcome("req-r", "released")
    ledger = {"req-e": _final(ensure), "req-r": _final(release)}

    # When checked / Then it passes and says what it covered
    result = check_ledger([ENSURE, RELEASE], [ensure, release, ensure], ledger)
    assert result.passed
    assert result.detail == (
        "2 requests with one terminal record each (0 in the DLQ); "
        "3 outcome events equal their record"
    )


def test_check_ledger_flags_a_request_without_a_terminal_record() -> None:
    # Given a release left at its intent, and an ensure with no record at all
    intent = LedgerEntry(
        request_id="req-r",
        state="intent",
        intent=TransferIntent(before=Totals(prompts=500), target=Totals(prompts=100)),
    )

    # When checked / Then both are named
    result = check_ledger([ENSURE, RELEASE], [], {"req-r": intent})
    assert not result.passed
    assert result.violations == (
        "req-e: no record, not one terminal record",
        "req-r: state intent, not one terminal record",
    )


def test_check_ledger_flags_an_outcome_that_differs_from_its_record() -> None:
    # Given a record saying released, and an event saying nothing-to-release (the old replay)
    held = _outcome("req-r", "released")
    published = _outcome("req-r", "nothing-to-release")

    # When checked / Then the difference is named
    result = check_ledger([RELEASE], [published], {"req-r": _final(held)})
    assert result.violations == (
        "req-r: published nothing-to-release/None but the ledger holds released/None",
    )


def test_check_ledger_accepts_a_dead_letter_a_redrive_superseded() -> None:
    # Given a dead-lettered outcome published, then replaced by a redrive's outcome
    dead = _outcome("req-e", "rejected", error_code="workspaceBusy", dead_lettered=True)
    redriven = _outcome("req-e", supersedes="deadLettered")

    # When checked / Then both events are consistent with the record
    assert check_ledger([ENSURE], [dead, redriven], {"req-e": _final(redriven)}).passed


def test_check_ledger_accepts_a_completed_request_whose_message_reached_the_dlq() -> None:
    # Given a request that completed, whose message the DLQ got anyway (a crash after the
    # handler, before the delete, on its final receive)
    done = _outcome("req-e")

    # When checked / Then its final record is its one terminal record
    result = check_ledger([ENSURE], [done], {"req-e": _final(done)}, dead_lettered={"req-e"})
    assert result.passed
    assert result.detail.startswith("1 requests with one terminal record each (1 in the DLQ)")


def test_check_ledger_flags_a_dlq_request_without_a_record() -> None:
    # Given a request in the DLQ that no receive of ours ever recorded
    # When checked / Then it is named
    result = check_ledger([ENSURE], [], {}, dead_lettered={"req-e"})
    assert result.violations == ("req-e: no record, not one terminal record",)
