"""Dead-letter an invalid message: it can never succeed, so it leaves its group at once."""

from __future__ import annotations

from ..domain.errors import OutOfTimeError
from ..domain.worker_events import InvalidMessage
from .batch_plan import BatchMessage
from .deadlines import Deadlines
from .ports import DeadLetterSink, WorkerObserver


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
    if not deadlines.fits_aws_call():
        raise OutOfTimeError()
    sink.send_invalid(
        message.inbound.body,
        reason=reason,
        group_id=message.group_id or None,
        dedup_id=message.message_id,
        source_message_id=message.message_id,
    )
