"""Failures: which are terminal now, and what a request says on its last receive.

SQS moves a message to the DLQ once its receive count reaches the redrive policy's
maxReceiveCount; a request that fails on that receive gets its terminal outcome first, so the
service that sent it always hears back.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..domain.errors import (
    OrgPoolExhaustedError,
    ParkedForReclaimError,
    UpstreamError,
    error_code_of,
)
from ..domain.messages import AllocationOutcome, EnsureRequest, OutcomeStatus, ReleaseRequest
from ..domain.outcomes import build_outcome
from .batch_plan import BatchMessage

TERMINAL_UPSTREAM_STATUSES = frozenset({400, 403, 404, 405, 409, 410, 413, 415})
"""Upstream answers a retry cannot fix: the request completes with a ``failed`` outcome."""


def terminal_failure(
    request: EnsureRequest | ReleaseRequest, exc: Exception, receive_count: int
) -> AllocationOutcome | None:
    """A ``failed`` outcome for an upstream answer a retry cannot fix; None when one could."""
    if isinstance(exc, UpstreamError) and exc.status in TERMINAL_UPSTREAM_STATUSES:
        return build_outcome(request, "failed", receive_count, error_code=error_code_of(exc))
    return None


def final_receive_outcome(
    request: EnsureRequest | ReleaseRequest, exc: Exception, receive_count: int
) -> AllocationOutcome:
    """The terminal outcome of a request failing on its final receive.

    A busy child is a rejection (``workspaceBusy``); an ensure still parked for reclaim ends
    with the pool exhaustion it was waiting out; anything else is ``failed`` with its code.
    """
    code = error_code_of(exc)
    status: OutcomeStatus = "rejected" if code == "workspaceBusy" else "failed"
    if isinstance(exc, ParkedForReclaimError):
        status, code = "rejected", OrgPoolExhaustedError.code
    return dead_lettered(build_outcome(request, status, receive_count, error_code=code))


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
