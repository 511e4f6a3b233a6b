"""Handle one message of the batch: the per-request flow every record goes through.

1. Report the record (log keys, queue lag).
2. An invalid record is dead-lettered with its reason and completes (:mod:`.dead_letter`).
3. LEDGER SEAM, before applying: this is where a request ledger looks up a stored terminal
   outcome for ``request.request_id``; when there is one, it goes through :func:`_finish`
   unchanged (published again, identical) and the request is not applied a second time.
4. Apply: an ensure (:mod:`.apply_ensure`) or a release (:mod:`.apply_release`).
5. A terminal result, or a failure a retry cannot fix (:mod:`.final_receive`), completes the
   record through :func:`_finish`; a failure a retry could fix raises, so Powertools fails the
   record and SQS redelivers it, after recording the terminal outcome when this is the final
   receive.
6. LEDGER SEAM, when terminal: :func:`_finish` is the one place a terminal outcome is reached
   here (the other is a skipped final receive in :mod:`.finish_batch`); both go through
   :meth:`.OutcomeBook.record`, where a ledger stores the outcome once.
"""

from __future__ import annotations

from ..domain.errors import AllocationError, UpstreamError
from ..domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from .apply_ensure import apply_ensure
from .apply_release import apply_release
from .batch_plan import BatchMessage
from .dead_letter import dead_letter
from .final_receive import final_receive_outcome, terminal_failure
from .invocation import Invocation
from .outcomes import ReleaseIncompleteError, error_code


def handle_message(inv: Invocation, message_id: str) -> None:
    """Apply one record; raise to fail it (SQS redelivers), return to complete it."""
    message = inv.plan.message(message_id)
    inv.handled.add(message_id)
    request = message.request
    inv.observer.message_started(
        message_id,
        request.workspace_id if request else message.group_id,
        request.request_id if request else None,
        request.kind if request else None,
        message.receive_count,
    )
    _report_queue_lag(inv, message)
    if request is None:
        dead_letter(inv, message)
        return
    try:
        outcome = _apply(inv, message, request)
    except Exception as exc:
        terminal = terminal_failure(request, exc, message.receive_count)
        if terminal is None:
            _note_retry(inv, message, request, exc)
            raise
        outcome = terminal
    _finish(inv, message, outcome)


def _apply(
    inv: Invocation, message: BatchMessage, request: EnsureRequest | ReleaseRequest
) -> AllocationOutcome:
    if isinstance(request, ReleaseRequest):
        return apply_release(inv, request, message.receive_count)
    return apply_ensure(inv, message, request)


def _finish(inv: Invocation, message: BatchMessage, outcome: AllocationOutcome) -> None:
    """The ledger seam when terminal: the request's outcome, recorded once."""
    _forget_park(inv, outcome.request_id)
    inv.observer.completed(outcome)
    inv.book.record(message.message_id, outcome)


def _forget_park(inv: Invocation, request_id: str) -> None:
    # Any terminal outcome ends a park, not only a served one: otherwise a warm container keeps
    # every rejected id forever (and would label a later request reusing that idempotency key
    # as served after reclaim).
    inv.ports.parked.discard(request_id)


def _note_retry(
    inv: Invocation,
    message: BatchMessage,
    request: EnsureRequest | ReleaseRequest,
    exc: Exception,
) -> None:
    final_receive = inv.is_final_receive(message.receive_count)
    inv.observer.will_retry(
        error_code(exc),
        final_receive=final_receive,
        expected=isinstance(exc, AllocationError | ReleaseIncompleteError | UpstreamError),
        error=exc,
    )
    if final_receive:
        # Terminal outcome now; SQS's redrive then moves the message to the DLQ.
        _forget_park(inv, request.request_id)
        inv.book.record(
            message.message_id, final_receive_outcome(request, exc, message.receive_count)
        )


def _report_queue_lag(inv: Invocation, message: BatchMessage) -> None:
    sent = message.inbound.sent_timestamp_ms
    if sent:
        inv.observer.queue_lag(max(0.0, inv.ports.wall_clock_ms() - sent))
