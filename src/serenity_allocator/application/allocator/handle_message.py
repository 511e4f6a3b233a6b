"""Handle one message of the batch: the per-request flow every record goes through.

1. Report the record (log keys, queue lag).
2. An invalid record is dead-lettered with its reason and completes (:mod:`.dead_letter`);
   when its request id can be read, its ``invalid`` outcome is stored and announced too.
3. A second record of the batch with an earlier record's request id is not applied: it
   completes with the first (no outcome of its own), or fails with it.
4. The request ledger (:mod:`.request_ledger`), read once for the batch, answers in one call
   (:meth:`.LedgerView.decide`) what happens before applying: a request whose id is bound to
   another workspace or kind (in the ledger or earlier in the batch) is refused,
   ``rejected / requestIdConflict``, nothing applied; a later copy follows the first; a
   request with a final record, or with a dead letter this same message sent itself (a
   redelivery after a crash, ADR 0020; an invalid message's too), is replayed (its stored
   outcome published again, identical) and not applied or dead-lettered again; one whose
   record could not be read (unreadable, or unanswered under throttling) fails alone.
5. On a final receive, a provisional dead letter is in the ledger first, with the message's
   order key (written as the batch starts, :func:`.mark_final_receives_ahead`; in that same
   call if that write failed), so a crash from there on still leaves the request a terminal
   record. A final receive's terminal store that fails is tried once more (no redelivery
   would read the child against its intent).
6. Apply (:func:`.apply_request`, as the request's user in IMS mode): an ensure
   (:mod:`.apply_ensure`) or a release (:mod:`.apply_release`). An ensure
   that needs a top-up first checks its parent against the upstream (:class:`.ParentLinks`):
   a parent that is not the child's real parent makes the message invalid (to the DLQ with
   reason ``parentMismatch``, outcome ``invalid``), before any transfer, reclaim or
   unmetered shortcut.
7. A terminal result, or a failure a retry cannot fix (read and acted on once,
   :func:`.failure_now`: dead-lettered as its outcome says, or a retry counted), completes
   the record through :func:`_finish`, the one place a record's outcome is recorded; a
   failure a retry could fix raises, so Powertools fails the record and SQS redelivers it,
   after recording the terminal outcome when this is the final receive. An ensure parked for
   sibling reclaim is failed in :func:`.apply_request`, the one place a record is failed on
   purpose. Why each record failed is kept for :func:`.finish_batch`, which logs one line per
   failed record.
8. Every terminal outcome goes through :meth:`.OutcomeBook.record`, which stores it in the
   ledger once before it is announced.
9. IMS mode (:mod:`.request_credentials`): before a request's first Semrush call its promise
   is exchanged and the rolled one stored, and its access token is bound for its calls only;
   every terminal outcome (a replay and a dead letter included) then invalidates the promise
   and scrubs the record, except an invalid message's (the id it names may be another
   request's); a retryable failure keeps the rolled token on the record.
   ``noCredential``/``needsReauth`` end ``failed`` in the DLQ with that reason,
   ``accessDenied`` ends ``rejected``; a Semrush 401 with a fresh token comes back (counted
   ``unauthorized``) until its final receive.
"""

from __future__ import annotations

from ...domain.errors import error_code_of
from ...domain.ledger import LedgerUnavailableError
from ...domain.messages import AllocationOutcome
from ...domain.observations import Completed, LedgerEvent, QueueLag
from ..credentials.request_credentials import without_echo
from .apply_request import apply_request
from .dead_letter import dead_letter
from .final_receive import Failure, failure_now
from .invocation import BatchMessage, Invocation, RequestContext, message_keys
from .request_ledger import Apply, FollowFirst, Refuse, Replay


class DuplicateRequestError(Exception):
    """An earlier record with this request id did not complete; this one comes back with it."""

    code = "duplicateRequestPending"


def handle_message(inv: Invocation, message_id: str) -> None:
    """Apply one record; raise to fail it (SQS redelivers), return to complete it."""
    inv.state.handled.add(message_id)
    try:
        _handle(inv, inv.plan.message(message_id))
    except Exception as exc:
        inv.state.failure_reasons[message_id] = error_code_of(exc)
        raise


def _handle(inv: Invocation, message: BatchMessage) -> None:
    _report_start(inv, message)
    outcome = _terminal_outcome(inv, message)
    if outcome is not None:
        _finish(inv, message, outcome)


def _terminal_outcome(inv: Invocation, message: BatchMessage) -> AllocationOutcome | None:
    """The outcome the record ends with, to record; None when nothing is left to record.

    Raises when the record must fail (a retry could fix it, or a later copy waits for its first).
    """
    request = message.request
    if request is None:
        return _invalid_outcome(inv, message)
    first = inv.plan.message(message.duplicate_of).request if message.duplicate_of else None
    state = inv.state
    context = RequestContext(
        config=inv.config,
        ports=inv.ports,
        observer=inv.observer,
        deadlines=inv.deadlines,
        ledger=state.ledger,
        pool_warnings=state.pool_warnings,
        credentials=state.credentials,
    )
    try:
        decision = state.ledger.decide(
            request,
            message_id=message.message_id,
            first=first,
            receive_count=message.receive_count,
            final_receive=inv.config.is_final_receive(message.receive_count),
        )
        if isinstance(decision, Apply):
            return apply_request(message, request, inv.plan.runs.get(message.message_id), context)
    except Exception as exc:
        if state.credentials is not None:
            exc = without_echo(exc)
        failure = failure_now(message, request, exc, context)
        return _ended_or_raise(inv, message, failure, exc)
    _settle(inv, message, decision)
    return None


def _invalid_outcome(inv: Invocation, message: BatchMessage) -> AllocationOutcome | None:
    """An invalid message: dead-lettered, its ``invalid`` outcome (if its id reads) to record."""
    replayed = inv.state.invalid_replays.get(message.message_id)
    if replayed is not None:
        # This very message was dead-lettered before a crash: its outcome is replayed.
        _settle(inv, message, Replay(replayed))
        return None
    dead_letter(
        message, sink=inv.ports.dead_letters, deadlines=inv.deadlines, observer=inv.observer
    )
    return message.invalid_outcome


def _settle(
    inv: Invocation, message: BatchMessage, decision: Refuse | Replay | FollowFirst
) -> None:
    """Complete a record the ledger answered: nothing applied, nothing stored."""
    match decision:
        case Refuse(outcome):
            # Nothing of the other request told: this request's own ids and a code. Not stored
            # either (the id's record is the other request's), so it is booked as already held,
            # and the other request's credential is not ended.
            inv.state.book.record(message.message_id, outcome, replayed=True)
            inv.observer.record(Completed(outcome))
            inv.observer.record(LedgerEvent("requestIdConflict"))
        case Replay(outcome):
            inv.state.book.record(message.message_id, outcome, replayed=True)
            inv.observer.record(LedgerEvent("replayed"))
            if inv.state.credentials is not None and message.request is not None:
                inv.state.credentials.end(outcome)  # terminal: the promise is ended too
        case FollowFirst():
            # One request, two records: the first one's outcome is the request's. Complete
            # with it when it has one; otherwise fail, so this copy comes back with it (never
            # applied twice).
            first_id = message.duplicate_of
            if not any(message_id == first_id for message_id, _ in inv.state.book.entries):
                raise DuplicateRequestError(first_id)
            inv.observer.record(LedgerEvent("duplicate"))


def _ended_or_raise(
    inv: Invocation, message: BatchMessage, failure: Failure, exc: Exception
) -> AllocationOutcome | None:
    """The outcome a failure ends the record with; re-raises ``exc`` when a retry could fix it.

    None: the request was refused (:attr:`.Failure.refused`) and its record completed here. A
    failure that comes back on its final receive records its terminal outcome first
    (dead-lettered: a store that fails drops it, never raises); SQS's redrive then moves the
    message to the DLQ.
    """
    outcome = failure.outcome
    if not failure.retry and outcome is not None:
        if failure.refused:
            _settle(inv, message, Refuse(outcome))
            return None
        return outcome
    if outcome is not None:
        _finish(inv, message, outcome, completed=False)
    raise exc


def _report_start(inv: Invocation, message: BatchMessage) -> None:
    inv.observer.record(message_keys(message))
    sent = message.inbound.sent_timestamp_ms
    if sent:
        inv.observer.record(QueueLag(max(0.0, inv.ports.wall_clock_ms() - sent)))


def _finish(
    inv: Invocation, message: BatchMessage, outcome: AllocationOutcome, *, completed: bool = True
) -> None:
    """Record the request's terminal outcome: stored once in the ledger, then reported.

    ``completed=False`` for a final receive's outcome as its record fails (not ``Completed``).
    """
    held = _stored(inv, message, outcome, completed)
    # Any terminal outcome ends a park, not only a served one: otherwise a warm container keeps
    # every rejected id forever (and would label a later request reusing that idempotency key
    # as served after reclaim).
    inv.ports.parked.discard(outcome.request_id)
    if held is not None:
        if completed:
            inv.observer.record(Completed(held))
        if inv.state.ledger.ledger is not None and held.dead_lettered:
            inv.observer.record(LedgerEvent("deadLettered"))
        elif inv.state.ledger.ledger is not None and held.supersedes is not None:
            inv.observer.record(LedgerEvent("superseded"))
    if inv.state.credentials is not None and message.request is not None:
        # Terminal, whatever the status: the user's promise is invalidated and scrubbed. Not
        # for an unreadable message: the id it names may be another request's (its record stays
        # to that request, or to its TTL).
        inv.state.credentials.end(held or outcome)


def _stored(
    inv: Invocation, message: BatchMessage, outcome: AllocationOutcome, completed: bool
) -> AllocationOutcome | None:
    """The outcome the book holds once stored (None: a dead letter the ledger did not take).

    A final receive's store that fails is tried once more, from the time kept for publishing:
    no redelivery will read the child against the intent for it, so without this an applied
    transfer whose store was throttled ends in the DLQ unreported (issue 36 item 5). A store
    whose answer was lost but which landed is read back as the ledger's own outcome.

    Raises:
        LedgerUnavailableError: the store failed (twice on a final receive); the record fails.
    """
    book = inv.state.book
    try:
        return book.record(message.message_id, outcome, completes=completed)
    except LedgerUnavailableError:
        final_receive = inv.config.is_final_receive(message.receive_count)
        if not (completed and final_receive and inv.deadlines.fits_aws_call(finishing=True)):
            raise
        return book.record(message.message_id, outcome, completes=completed, finishing=True)
