"""Audit the DLQ: give every valid request there a terminal ``deadLettered`` record, once.

A request whose final receive never ran our code (the container died before the handler, or
during a batch that other records failed) reaches the DLQ with no terminal record: nothing in
the worker could see it go. The audit reads the DLQ without consuming it (operators triage and
redrive from it) and, for each valid request that has no terminal ledger record, stores and
announces a ``failed / receivesExhausted`` dead letter; one whose final receive died after
leaving its provisional dead letter gets that record confirmed and announced. A request with a
published terminal record is left alone; invalid messages (sent by the worker with a reason) have no
request to record. Running the audit again changes nothing: the records it wrote are terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from ..domain.ledger import LedgerEntry, RequestLedger
from ..domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest, parse_request
from ..domain.outcomes import build_outcome
from .ports import OutcomeSink

RECEIVES_EXHAUSTED = "receivesExhausted"
"""The error code of a dead letter the audit recorded (the worker never saw the last receive)."""


@dataclass(frozen=True)
class DeadLetterCopy:
    """One message seen in the DLQ (left there)."""

    message_id: str
    body: str
    reason: str | None
    """The worker's invalid reason attribute; None for a message the redrive policy moved."""
    receive_count: int
    """Receives on the source queue (the DLQ's own receive count, less this read)."""


@dataclass
class DeadLetterAudit:
    """What one audit found and did."""

    recorded: list[AllocationOutcome] = field(default_factory=list)
    """Dead letters stored (and announced, when a sink was given) by this audit."""
    already_terminal: int = 0
    invalid: int = 0
    announced: bool = False


def audit_dead_letters(
    letters: Sequence[DeadLetterCopy], ledger: RequestLedger, outcomes: OutcomeSink | None
) -> DeadLetterAudit:
    """Record a terminal dead letter for each valid request in ``letters`` that lacks one.

    Raises:
        LedgerUnavailableError: the ledger could not be read or written.
        Whatever the outcome sink raises: the records are stored; rerunning announces nothing
            twice, so announce failures are the caller's to report.
    """
    audit = DeadLetterAudit()
    requests = _valid_requests(letters, audit)
    entries = ledger.lookup(list(requests))
    for request_id, (request, receive_count) in requests.items():
        entry = entries.get(request_id)
        if entry is not None and entry.is_terminal and not entry.provisional:
            audit.already_terminal += 1
            continue
        outcome = _dead_letter_outcome(entry, request, receive_count)
        held = ledger.store_outcome(outcome, dead_lettered=True)
        if held == outcome:
            audit.recorded.append(held)
        else:
            audit.already_terminal += 1  # a late receive or another audit got there first
    if outcomes is not None and audit.recorded:
        for start in range(0, len(audit.recorded), 10):
            outcomes.publish(audit.recorded[start : start + 10])
        audit.announced = True
    return audit


def _valid_requests(
    letters: Sequence[DeadLetterCopy], audit: DeadLetterAudit
) -> dict[str, tuple[EnsureRequest | ReleaseRequest, int]]:
    """The valid requests among the letters (first copy of each), counting the invalid ones."""
    requests: dict[str, tuple[EnsureRequest | ReleaseRequest, int]] = {}
    for letter in letters:
        request = _request(letter)
        if request is None:
            audit.invalid += 1
            continue
        requests.setdefault(request.request_id, (request, letter.receive_count))
    return requests


def _dead_letter_outcome(
    entry: LedgerEntry | None, request: EnsureRequest | ReleaseRequest, receive_count: int
) -> AllocationOutcome:
    if entry is not None and entry.provisional and entry.outcome is not None:
        # Its final receive died after leaving the provisional record: announce that one.
        return entry.outcome
    return build_outcome(
        request, "failed", receive_count, error_code=RECEIVES_EXHAUSTED
    ).model_copy(update={"dead_lettered": True})


def _request(letter: DeadLetterCopy) -> EnsureRequest | ReleaseRequest | None:
    if letter.reason is not None:
        return None
    try:
        return parse_request(letter.body)
    except ValidationError:
        return None
