"""Failures: which are terminal now, and what a request says on its last receive.

:func:`failure_of` reads a request's failure once, into a :class:`Failure`: the outcome to
record now, if any, and whether the record comes back. :func:`failure_now` reads it for a
record of the batch and does what it says now: a failure that ends the request is
dead-lettered as its outcome says; one that comes back is counted, and its rolled token kept.

SQS moves a message to the DLQ once its receive count reaches the redrive policy's
maxReceiveCount; a request that fails on that receive gets its terminal outcome first, so the
service that sent it always hears back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ...domain.errors import (
    AccessDeniedError,
    AllocationError,
    CredentialNotOwnedError,
    OrgPoolExhaustedError,
    ParentMismatchError,
    ParkedForReclaimError,
    UpstreamError,
    error_code_of,
)
from ...domain.ledger import (
    LedgerConflictError,
    LedgerRecordUnreadableError,
    LedgerUnavailableError,
    RequestIdConflictError,
)
from ...domain.messages import (
    AllocationOutcome,
    EnsureRequest,
    OutcomeStatus,
    ReleaseRequest,
    build_outcome,
)
from ...domain.observations import CredentialOutcome, LedgerEvent, WillRetry
from ..credentials.request_credentials import (
    DEAD_LETTERED_REFUSALS,
    credential_refusal,
    is_unauthorized,
)
from .apply_release import ReleaseIncompleteError
from .dead_letter import DeadLetterRoute, dead_letter_failed
from .invocation import BatchMessage, RequestContext

TERMINAL_UPSTREAM_STATUSES = frozenset({400, 403, 404, 405, 409, 410, 413, 415})
"""Upstream answers a retry cannot fix: the request completes with a ``failed`` outcome."""
_EXPECTED_FAILURES = (
    AllocationError
    | ReleaseIncompleteError
    | UpstreamError
    | LedgerUnavailableError
    | LedgerConflictError
    | LedgerRecordUnreadableError
    | RequestIdConflictError
)
"""Failures the worker expects now and then (``WillRetry``'s ``expected``); others are bugs."""


@dataclass(frozen=True)
class Failure:
    """What a request's failure means now: an outcome to record, and whether it comes back."""

    outcome: AllocationOutcome | None
    """The terminal outcome to record now; None: nothing yet (a retry may still succeed)."""
    retry: bool
    """True: the record fails and SQS redelivers it (or, on its final receive, dead-letters
    it, with :attr:`outcome` recorded first)."""
    invalid_reason: str | None = None
    """Set when the failure makes the message invalid: its body goes to the DLQ as invalid,
    with this reason."""
    refused: bool = False
    """True: the request's id is another request's (its credential record is another child's):
    refused like an id the ledger binds elsewhere, its :attr:`outcome` neither stored nor
    dead-lettered, and that request's credential not ended."""


def failure_of(
    request: EnsureRequest | ReleaseRequest,
    exc: Exception,
    receive_count: int,
    *,
    ims: bool,
    final_receive: bool,
) -> Failure:
    """What ``exc`` means for ``request``: one answer, its outcome built in one place.

    Terminal now: a credential record under the request's id that is another child's
    (``rejected / requestIdConflict``, refused: :attr:`Failure.refused`), a parent that is not
    the child's (``invalid``, dead-lettered as an invalid message), a credential refusal (IMS
    mode only: ``noCredential``/``needsReauth`` end ``failed`` and dead-lettered,
    ``accessDenied`` ends ``rejected``), or an upstream answer no retry fixes (``failed``).
    Anything else comes back; on the final receive it records what the request ends with first,
    dead-lettered.
    """
    terminal = _terminal_now(exc, ims)
    if terminal is None and ims and final_receive and is_unauthorized(exc):
        # The 401s lasted every receive: the request ends as its user's refusal.
        terminal = "rejected", AccessDeniedError.code, False
    if terminal is not None:
        status, code, dead = terminal
    elif not final_receive:
        return Failure(None, retry=True)
    else:
        status, code = _final_receive_status(exc, error_code_of(exc))
        dead = True
    outcome = build_outcome(request, status, receive_count, error_code=code)
    return Failure(
        dead_lettered(outcome) if dead else outcome,
        retry=terminal is None,
        invalid_reason=str(exc) if isinstance(exc, ParentMismatchError) else None,
        refused=isinstance(exc, CredentialNotOwnedError),
    )


def failure_now(
    message: BatchMessage,
    request: EnsureRequest | ReleaseRequest,
    exc: Exception,
    context: RequestContext,
) -> Failure:
    """What ``exc`` means for the message's request (:func:`failure_of`), acted on now.

    A failure that ends the request now and is not refused is dead-lettered as its outcome
    says (:func:`.dead_letter_failed`): the returned :attr:`Failure.outcome` is the one to
    record. One that comes back is counted (``WillRetry``; in IMS mode a Semrush 401, whose
    burst pages; an unreadable record); when nothing is recorded now its rolled token stays
    stored.

    Raises:
        Whatever :func:`.dead_letter_failed` raises (the record fails and comes back).
    """
    final_receive = context.config.is_final_receive(message.receive_count)
    ims = context.credentials is not None
    failure = failure_of(request, exc, message.receive_count, ims=ims, final_receive=final_receive)
    outcome = failure.outcome
    if not failure.retry and outcome is not None:
        if failure.refused:
            return failure
        route = DeadLetterRoute(context.ports.dead_letters, context.deadlines, context.observer)
        sent = dead_letter_failed(
            message, outcome, invalid_reason=failure.invalid_reason, route=route
        )
        return replace(failure, outcome=sent)
    observer = context.observer
    observer.record(
        WillRetry(error_code_of(exc), final_receive, isinstance(exc, _EXPECTED_FAILURES), exc)
    )
    if ims and is_unauthorized(exc):
        observer.record(CredentialOutcome("unauthorized"))  # a burst pages (an incident)
    if isinstance(exc, LedgerRecordUnreadableError):
        observer.record(LedgerEvent("unreadable"))
    if outcome is None and context.credentials is not None:
        context.credentials.keep(request.request_id)  # the rolled token stays stored
    return failure


def _terminal_now(exc: Exception, ims: bool) -> tuple[OutcomeStatus, str, bool] | None:
    """(status, code, dead-lettered) of a failure no retry fixes; None when one could."""
    if isinstance(exc, CredentialNotOwnedError):
        return "rejected", exc.code, False
    if isinstance(exc, ParentMismatchError):
        return "invalid", exc.code, True
    refusal = credential_refusal(exc) if ims else None
    if refusal is not None:
        dead = refusal.code in DEAD_LETTERED_REFUSALS
        return ("failed" if dead else "rejected"), refusal.code, dead
    if isinstance(exc, UpstreamError) and exc.status in TERMINAL_UPSTREAM_STATUSES:
        return "failed", error_code_of(exc), False
    return None


def _final_receive_status(exc: Exception, code: str) -> tuple[OutcomeStatus, str]:
    # A busy child is a rejection; an ensure still parked for reclaim ends with the pool
    # exhaustion it was waiting out; anything else is ``failed`` with its code.
    if isinstance(exc, ParkedForReclaimError):
        return "rejected", OrgPoolExhaustedError.code
    return ("rejected" if code == "workspaceBusy" else "failed"), code


def dead_lettered(outcome: AllocationOutcome) -> AllocationOutcome:
    """``outcome`` marked as the request's end in the DLQ (until an operator redrives it)."""
    return outcome.model_copy(update={"dead_lettered": True})


def skipped_final_receives(
    messages: Iterable[BatchMessage], *, max_receive_count: int
) -> list[tuple[str, AllocationOutcome]]:
    """``groupBlocked`` outcomes for valid final-receive records skipped behind a failed group.

    SQS moves such a record to the DLQ next; without this its service would never hear back.
    """
    return [
        (
            message.message_id,
            dead_lettered(
                build_outcome(
                    message.request, "failed", message.receive_count, error_code="groupBlocked"
                )
            ),
        )
        for message in messages
        if message.request is not None
        and message.duplicate_of is None
        and message.receive_count >= max_receive_count
    ]
