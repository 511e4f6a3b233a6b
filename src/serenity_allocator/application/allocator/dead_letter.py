"""Dead-letter a record's body: an invalid message, or a request its user's credential refused.

Either can never succeed as it stands, so it leaves its group at once, with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...domain.errors import OutOfTimeError
from ...domain.messages import AllocationOutcome
from ...domain.observations import CredentialOutcome, CredentialOutcomeName, InvalidMessage
from ..deadlines import Deadlines
from ..ports import DeadLetterSink, WorkerObserver
from .invocation import BatchMessage

_REFUSALS: dict[str, CredentialOutcomeName] = {
    "noCredential": "noCredential",
    "needsReauth": "needsReauth",
    "accessDenied": "accessDenied",
}
"""The credential refusals a request ends with, each counted as its own credential outcome."""


class InvalidMessageError(Exception):
    """An invalid message with no DLQ configured: fail it so the redrive policy moves it."""


def dead_letter(
    message: BatchMessage,
    *,
    sink: DeadLetterSink | None,
    deadlines: Deadlines,
    observer: WorkerObserver,
) -> None:
    """Send the original body to the DLQ with its reason (the record then completes).

    Raises:
        InvalidMessageError: No DLQ is wired; the record fails and SQS's redrive moves it.
        OutOfTimeError: The send would not fit before the deadline; the record comes back.
        Whatever the DLQ sender raises: the record fails and comes back (nothing dropped).
    """
    reason = message.invalid_reason or "invalid message"
    observer.record(InvalidMessage(reason))
    if sink is None:
        raise InvalidMessageError(reason)
    _send(message, reason, sink, deadlines)


@dataclass(frozen=True)
class DeadLetterRoute:
    """Where a dead letter goes, and under what.

    ``sink``: the DLQ (None: none wired); ``deadlines``: the batch's, the send must fit them;
    ``observer``: hears of an invalid message.
    """

    sink: DeadLetterSink | None
    deadlines: Deadlines
    observer: WorkerObserver


def dead_letter_failed(
    message: BatchMessage,
    outcome: AllocationOutcome,
    *,
    invalid_reason: str | None,
    route: DeadLetterRoute,
) -> AllocationOutcome:
    """Send a request that failed for good to the DLQ as its outcome says; the outcome to record.

    A failure that made the message invalid (``invalid_reason``: its parent is not the child's)
    goes as an invalid message (:func:`dead_letter`). A dead-lettered refusal goes with its
    code as the reason, its body unchanged; with no DLQ wired it is not dead-lettered (the
    returned outcome says so). Any other outcome sends nothing.

    A credential refusal (``noCredential``, ``needsReauth``, ``accessDenied``) is counted on
    the route's observer once it is sent (or not dead-lettered at all).

    Raises:
        InvalidMessageError: An invalid message and no DLQ (the redrive policy moves it).
        OutOfTimeError: The send would not fit; the record comes back (nothing is lost).
        Whatever the DLQ sender raises: the record fails and comes back.
    """
    sent = _send_failed(message, outcome, invalid_reason, route)
    metric = _REFUSALS.get(sent.error_code or "")
    if metric is not None:
        route.observer.record(CredentialOutcome(metric))
    return sent


def _send_failed(
    message: BatchMessage,
    outcome: AllocationOutcome,
    invalid_reason: str | None,
    route: DeadLetterRoute,
) -> AllocationOutcome:
    if invalid_reason is not None:
        dead_letter(
            replace(message, invalid_reason=invalid_reason),
            sink=route.sink,
            deadlines=route.deadlines,
            observer=route.observer,
        )
        return outcome
    if not outcome.dead_lettered:
        return outcome
    if route.sink is None:
        return outcome.model_copy(update={"dead_lettered": False})  # no DLQ wired
    _send(message, outcome.error_code or "", route.sink, route.deadlines)
    return outcome


def _send(message: BatchMessage, reason: str, sink: DeadLetterSink, deadlines: Deadlines) -> None:
    if not deadlines.fits_aws_call():
        raise OutOfTimeError()
    sink.send_invalid(
        message.inbound.body,
        reason=reason,
        group_id=message.group_id or None,
        dedup_id=message.message_id,
        source_message_id=message.message_id,
    )
