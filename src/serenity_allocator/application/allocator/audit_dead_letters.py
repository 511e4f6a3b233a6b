"""Audit the DLQ: every valid request there gets a terminal record, announced once.

A request whose final receive never ran our code (the container died before the handler, or
during a batch that other records failed) reaches the DLQ with no terminal record: nothing in
the worker could see it go. The audit reads the DLQ without consuming it (operators triage and
redrive from it) and, for each valid request:

- without a terminal record: stores and announces a ``failed / receivesExhausted`` dead
  letter; one whose final receive died after leaving its provisional dead letter gets that
  record confirmed and announced; a refusal the worker dead-lettered with its code as the
  reason (``noCredential``, ``needsReauth``) whose own store failed gets ``failed`` with that
  code;
- a record a receive may still be writing (an intent or a provisional dead letter younger than
  ``PROVISIONAL_GRACE_S``): a live request's copy, left alone and reported ``live``;
- a provisional dead letter beside an intent that moves the child: the transfer may have
  landed, so nothing is confirmed and it is reported ``transfer_unconfirmed`` (a redrive's
  receive reads the child and reports what landed);
- with a terminal record whose announcement is not confirmed (its ``announced`` flag is
  unset: the worker's publish failed, or an earlier audit ran without a bus or failed to
  publish): announces the stored outcome again, unchanged;
- with an announced terminal record: leaves it alone.

After each publish the records are flagged ``announced``, so running the audit again announces
nothing twice. What it cannot act on it reports and goes past: a DLQ body that is not a valid
request (invalid messages the worker sent carry their reason), a ledger record that does not
parse (``ledgerRecordUnreadable``), an id bound to another workspace or kind, an id the
ledger left unanswered. Nothing here raises for one message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from ...domain.errors import error_code_of
from ...domain.ledger import (
    LedgerEntry,
    LedgerRecordUnreadableError,
    LedgerUnavailableError,
    RequestIdConflictError,
    RequestLedger,
    TransferIntent,
)
from ...domain.messages import (
    AllocationOutcome,
    EnsureRequest,
    ReleaseRequest,
    build_outcome,
    parse_request,
)
from ..credentials.request_credentials import DEAD_LETTERED_REFUSALS
from ..ports import OutcomeSink

RECEIVES_EXHAUSTED = "receivesExhausted"
"""The error code of a dead letter the audit recorded (the worker never saw the last receive)."""
PUBLISH_CHUNK = 10

Request = EnsureRequest | ReleaseRequest


@dataclass(frozen=True)
class DeadLetterCopy:
    """One message seen in the DLQ (left there)."""

    message_id: str
    body: str
    reason: str | None
    """The worker's invalid reason attribute; None for a message the redrive policy moved."""
    receive_count: int
    """Receives on the source queue (the DLQ's own receive count, less this read)."""
    group_id: str = ""


@dataclass(frozen=True)
class _Letter:
    """A valid request found in the DLQ, and the refusal code it was dead-lettered with."""

    request: Request
    receive_count: int
    refusal: str | None


@dataclass
class DeadLetterAudit:
    """What one audit found and did."""

    recorded: list[AllocationOutcome] = field(default_factory=list)
    """Dead letters stored by this audit (announced too, when a sink was given)."""
    reannounced: list[AllocationOutcome] = field(default_factory=list)
    """Terminal records whose announcement was not confirmed, published again unchanged."""
    already_terminal: int = 0
    """Requests with an announced terminal record, left alone."""
    invalid: int = 0
    unparseable: list[str] = field(default_factory=list)
    """Message ids of DLQ bodies without a reason that are not a valid request."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Request id -> why its ledger record does not parse (repair: the ledger runbook)."""
    conflicts: list[str] = field(default_factory=list)
    """Request ids bound in the ledger to another workspace or kind (nothing written)."""
    unanswered: list[str] = field(default_factory=list)
    """Request ids the ledger could not read or write now (run the audit again)."""
    unannounced: list[str] = field(default_factory=list)
    """Request ids whose outcome could not be published or confirmed (run it again)."""
    live: list[str] = field(default_factory=list)
    """Request ids a receive may still be writing (copies of live requests): not announced."""
    transfer_unconfirmed: list[str] = field(default_factory=list)
    """Request ids whose final receive recorded a transfer and no outcome: nothing confirmed
    (redrive: the receive reads the child against the intent)."""
    unconfirmed_intents: dict[str, TransferIntent] = field(default_factory=dict)
    """The recorded transfer of each of :attr:`transfer_unconfirmed`: the child's totals
    before and the target (the child holding the target means it landed)."""
    announced: bool = False
    """True when every outcome to announce was published."""


def audit_dead_letters(
    letters: Sequence[DeadLetterCopy],
    ledger: RequestLedger,
    outcomes: OutcomeSink | None,
    *,
    now_s: float,
) -> DeadLetterAudit:
    """Give each valid request in ``letters`` a terminal record, and announce it once.

    Without ``outcomes`` nothing is announced or flagged: a later run with a bus does it.
    ``now_s`` (epoch seconds) ages the records a receive may still be writing.

    Raises:
        LedgerUnavailableError: the ledger could not be read at all.
    """
    audit = DeadLetterAudit()
    requests = _valid_requests(letters, audit)
    read = ledger.read_batch(list(requests))
    audit.unreadable = dict(read.unreadable)
    audit.unanswered = sorted(read.unanswered)
    to_announce: list[AllocationOutcome] = []
    for request_id, letter in requests.items():
        if request_id in read.unreadable or request_id in read.unanswered:
            continue
        outcome = _settle(ledger, read.entries.get(request_id), letter, now_s, audit)
        if outcome is not None:
            to_announce.append(outcome)
    if outcomes is not None and to_announce:
        _announce(to_announce, ledger, outcomes, audit)
    return audit


def _settle(
    ledger: RequestLedger,
    entry: LedgerEntry | None,
    letter: _Letter,
    now_s: float,
    audit: DeadLetterAudit,
) -> AllocationOutcome | None:
    """The outcome to announce for one request (None: nothing to announce)."""
    request = letter.request
    if entry is not None and _left_open(entry, request, now_s, audit):
        return None
    if entry is not None and entry.is_terminal and not entry.provisional:
        if entry.announced or entry.outcome is None:
            audit.already_terminal += 1
            return None
        audit.reannounced.append(entry.outcome)
        return entry.outcome
    return _record(ledger, _dead_letter_outcome(entry, letter), audit)


def _left_open(entry: LedgerEntry, request: Request, now_s: float, audit: DeadLetterAudit) -> bool:
    """True (and reported) when the audit must not complete this record now.

    Bound to another request, still being written by a receive (a live request's copy), or a
    final receive's transfer whose landing only a read of the child can tell.
    """
    if not entry.belongs_to(request.workspace_id, request.kind):
        audit.conflicts.append(request.request_id)
    elif entry.is_live(now_s):
        audit.live.append(request.request_id)
    elif entry.may_have_transferred and entry.intent is not None:
        audit.transfer_unconfirmed.append(request.request_id)
        audit.unconfirmed_intents[request.request_id] = entry.intent
    else:
        return False
    return True


def _record(
    ledger: RequestLedger, outcome: AllocationOutcome, audit: DeadLetterAudit
) -> AllocationOutcome | None:
    """Store a dead letter; the outcome to announce, or None (reported instead)."""
    request_id = outcome.request_id
    try:
        held = ledger.store_outcome(outcome, dead_lettered=True)
    except RequestIdConflictError:
        audit.conflicts.append(request_id)
        return None
    except LedgerRecordUnreadableError as exc:
        audit.unreadable[request_id] = str(exc)
        return None
    except LedgerUnavailableError:
        audit.unanswered.append(request_id)
        return None
    if held == outcome:
        audit.recorded.append(held)
        return held
    audit.already_terminal += 1  # a late receive or another audit got there first
    return None


def _announce(
    to_announce: list[AllocationOutcome],
    ledger: RequestLedger,
    outcomes: OutcomeSink,
    audit: DeadLetterAudit,
) -> None:
    for start in range(0, len(to_announce), PUBLISH_CHUNK):
        chunk = [outcome.request_id for outcome in to_announce[start : start + PUBLISH_CHUNK]]
        try:
            outcomes.publish(to_announce[start : start + PUBLISH_CHUNK])
            ledger.mark_announced(chunk)
        except Exception as exc:  # reported; the flag stays unset, so the next run retries
            audit.unannounced.extend(f"{rid}: {error_code_of(exc)}" for rid in chunk)
    audit.announced = not audit.unannounced


def _valid_requests(
    letters: Sequence[DeadLetterCopy], audit: DeadLetterAudit
) -> dict[str, _Letter]:
    """The valid requests among the letters (first copy of each), counting the others.

    A letter with a reason is an invalid message the worker dead-lettered, unless the reason
    is a refusal's code (its body is the valid request, unchanged).
    """
    requests: dict[str, _Letter] = {}
    for letter in letters:
        refusal = letter.reason if letter.reason in DEAD_LETTERED_REFUSALS else None
        if letter.reason is not None and refusal is None:
            audit.invalid += 1  # the worker dead-lettered it with its reason
            continue
        request = _request(letter.body)
        if request is None:
            audit.invalid += 1
            audit.unparseable.append(letter.message_id)
            continue
        requests.setdefault(request.request_id, _Letter(request, letter.receive_count, refusal))
    return requests


def _dead_letter_outcome(entry: LedgerEntry | None, letter: _Letter) -> AllocationOutcome:
    if letter.refusal is not None:
        # The worker refused it for good; only the store of that refusal failed.
        code = letter.refusal
    elif entry is not None and entry.provisional and entry.outcome is not None:
        # Its final receive died after leaving the provisional record: announce that one.
        return entry.outcome
    else:
        code = RECEIVES_EXHAUSTED
    return build_outcome(
        letter.request, "failed", letter.receive_count, error_code=code
    ).model_copy(update={"dead_lettered": True, "sequence_number": _order_key(entry)})


def _order_key(entry: LedgerEntry | None) -> str | None:
    """The source message's SQS SequenceNumber as a receive of it recorded it (ADR 0018).

    Never the DLQ copy's own ``SequenceNumber``: SQS does not document that a message moved
    by the redrive policy keeps its source queue's number (a FIFO DLQ enqueues it anew; the
    stack's moto numbers it in the DLQ's own sequence), and numbers of two queues do not
    compare. None when no receive of the message reached the ledger.
    """
    if entry is None or entry.outcome is None:
        return None
    return entry.outcome.sequence_number


def _request(body: str) -> Request | None:
    try:
        return parse_request(body)
    except (ValidationError, ValueError, RecursionError):
        return None
