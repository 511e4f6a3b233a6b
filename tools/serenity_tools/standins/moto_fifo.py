"""A FIFO-correct local broker: moto, single-threaded, with its redelivery order fixed.

moto 5.x breaks FIFO order when several in-flight messages of one group become visible again
together (a consumer failed or crashed on a batch holding two or more messages of the group).
``SQSBackend.receive_message`` snapshots the "groups in flight" set, then walks the queue and
frees each expired message only when it reaches it, recomputing the set each time: every
message but the LAST of the group is skipped as "group still in flight", and the last one is
delivered alone, ahead of its predecessors. Measured on moto 5.2.5: send m0, m1, m2 to one
group, receive all three, let the visibility timeout pass, receive again: moto returns
``[m2]``. Real SQS returns ``[m0, m1, m2]``.

:func:`patch_moto_fifo_redelivery` frees every expired in-flight message of the queue BEFORE
moto takes its snapshot, so the group is free and its messages come back in order. It also
holds moto's clock still for the length of one receive: otherwise a message whose visibility
ends DURING the receive (the group's messages expire a few milliseconds apart, and a busy
machine stretches the receive) is freed by moto's own loop, one at a time, and the same bug
delivers the group's last message first. Measured under ``make stress``: a group of three
failed messages, the third delivered alone. It changes nothing else (visibility, receive
counts and the redrive to the DLQ are moto's).

The same receive returns each group's messages together (AWS groups them; moto interleaves).
:func:`patch_moto_fifo_dedup` and :func:`patch_moto_fifo_receipt_handles` model the other FIFO
rules AWS documents and stock moto skips: the 5-minute deduplication window after a delete,
deduplication per message group, increasing sequence numbers, and expired receipt handles
refused. docs/reliability.md has the side-by-side table (AWS / moto / ours / LocalStack).

The launchers in :mod:`.moto_server` apply them all (:func:`patch_moto_fifo`) by default;
``fifo_fix=False`` keeps the stock broker available to show the violations.
"""

from __future__ import annotations

import functools
from typing import Any

_PATCH_MARK = "_serenity_fifo_redelivery_fix"
_CLOCK = "unix_time_millis"
"""moto's SQS clock: message visibility is computed from it."""


def patch_moto_fifo_redelivery() -> bool:
    """Make moto's SQS receive free expired in-flight FIFO messages first (idempotent).

    Affects the moto backends of THIS process only.

    Returns:
        True when the patch was installed now, False when it already was.
    """
    from moto.sqs import models
    from moto.sqs.models import SQSBackend

    original = SQSBackend.receive_message
    if getattr(original, _PATCH_MARK, False):
        return False

    @functools.wraps(original)
    def receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = self.get_queue(queue_name)
        if not queue.fifo_queue:
            return original(self, queue_name, *args, **kwargs)
        clock = getattr(models, _CLOCK)
        now = clock()

        def frozen(dt: Any = None) -> Any:
            return now if dt is None else clock(dt)

        # One instant for the whole receive (the server is single-threaded): what is visible
        # when the snapshot is taken stays so, and nothing else becomes so half-way through.
        # (A long poll then sees newly visible messages on its next receive only; the local
        # consumers use short polling.)
        setattr(models, _CLOCK, frozen)
        try:
            # An in-flight message whose visibility timeout has passed no longer holds its
            # group; free them all before moto snapshots the groups in flight.
            for message in [m for m in queue.pending_messages if m.visible]:
                queue.pending_messages.discard(message)
            return _grouped(original(self, queue_name, *args, **kwargs))
        finally:
            setattr(models, _CLOCK, clock)

    setattr(receive_message, _PATCH_MARK, True)
    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]
    return True


DEDUPLICATION_WINDOW_MS = 5 * 60 * 1000
"""SQS FIFO: a deduplication id is remembered for 5 minutes from its first send."""
_DEDUP_MARK = "_serenity_fifo_dedup_fix"


def _grouped(messages: list[Any]) -> list[Any]:
    """One receive's messages with each group's together, groups in first-seen order.

    AWS "first attempts to return as many messages with the same message group ID as
    possible"; moto returns them interleaved in send order. Only the order within one receive
    is modelled: which messages a receive of 10 picks over more than 10 is still moto's.
    """
    first_seen: dict[Any, int] = {}
    for index, message in enumerate(messages):
        first_seen.setdefault(message.group_id, index)
    return sorted(messages, key=lambda m: first_seen[m.group_id])


def patch_moto_fifo_dedup() -> bool:
    """Make moto's FIFO deduplication and sequence numbers behave as AWS documents (idempotent).

    Stock moto 5.x compares a dedup id only with the messages still IN the queue, so a message
    deleted a second ago no longer deduplicates its resend (AWS remembers the id for the
    5-minute interval from the first send, delete or not); it compares across the whole queue
    even when ``DeduplicationScope`` is ``messageGroup`` (AWS then deduplicates per group);
    and it hands out random sequence numbers (AWS: ``SequenceNumber`` keeps increasing within
    a message group, which the outcome order key relies on). With this patch each FIFO queue
    keeps its own record of dedup ids for the window, scoped as the queue says, and numbers
    its messages with an increasing 20-digit sequence (compare them as integers).

    Returns:
        True when the patch was installed now, False when it already was.
    """
    from moto.sqs.models import Queue

    original = Queue.add_message
    if getattr(original, _DEDUP_MARK, False):
        return False

    @functools.wraps(original)
    def add_message(self: Any, message: Any) -> None:
        dedup_id = message.deduplication_id
        if not self.fifo_queue or dedup_id is None:
            return original(self, message)
        if _seen_within_window(self, message):
            return None  # accepted, not delivered: a duplicate inside the interval
        self._serenity_sequence = getattr(self, "_serenity_sequence", 0) + 1
        message.sequence_number = f"{self._serenity_sequence:020d}"
        # Our record decides; moto's own scan (queue-wide, forgetful) is skipped.
        message.deduplication_id = None
        try:
            return original(self, message)
        finally:
            message.deduplication_id = dedup_id

    setattr(add_message, _DEDUP_MARK, True)
    Queue.add_message = add_message  # type: ignore[method-assign]
    return True


def _seen_within_window(queue: Any, message: Any) -> bool:
    per_group = queue.attributes.get("DeduplicationScope") == "messageGroup"
    key = (message.group_id if per_group else None, message.deduplication_id)
    seen: dict[tuple[str | None, str], int] = queue.__dict__.setdefault("_serenity_dedup", {})
    now = int(message.sent_timestamp)
    for old in [k for k, first in seen.items() if now - first >= DEDUPLICATION_WINDOW_MS]:
        del seen[old]
    if key in seen:
        return True
    seen[key] = now
    return False


_RECEIPT_MARK = "_serenity_fifo_receipt_fix"


def patch_moto_fifo_receipt_handles() -> bool:
    """Refuse a FIFO delete whose receipt handle has expired, as AWS does (idempotent).

    AWS answers ``InvalidParameterValue: ... The receipt handle has expired.`` when a FIFO
    message is deleted after its visibility timeout passed (or with the handle of an earlier
    receive), and the message stays in the queue; stock moto deletes it. The refusal raises
    moto's ``ReceiptHandleIsInvalid`` family, so a ``DeleteMessageBatch`` reports the entry
    as failed instead of failing the call.

    Returns:
        True when the patch was installed now, False when it already was.
    """
    from moto.sqs.exceptions import ReceiptHandleIsInvalid, SQSException
    from moto.sqs.models import Queue

    original = Queue.delete_message
    if getattr(original, _RECEIPT_MARK, False):
        return False

    class ExpiredReceiptHandle(ReceiptHandleIsInvalid):
        def __init__(self, receipt_handle: str) -> None:
            SQSException.__init__(
                self,
                "InvalidParameterValue",
                f"Value {receipt_handle} for parameter ReceiptHandle is invalid. Reason: "
                "The receipt handle has expired.",
            )

    @functools.wraps(original)
    def delete_message(self: Any, receipt_handle: str) -> None:
        if self.fifo_queue and _expired(self, receipt_handle):
            raise ExpiredReceiptHandle(receipt_handle)
        return original(self, receipt_handle)

    setattr(delete_message, _RECEIPT_MARK, True)
    Queue.delete_message = delete_message  # type: ignore[method-assign]
    return True


def _expired(queue: Any, receipt_handle: str) -> bool:
    for message in list(queue._messages):
        if message.had_receipt_handle(receipt_handle):
            return bool(message.receipt_handle != receipt_handle or message.visible)
    return False


def patch_moto_fifo() -> None:
    """Every FIFO fix: redelivery order, deduplication and sequence numbers, receipt handles."""
    patch_moto_fifo_redelivery()
    patch_moto_fifo_dedup()
    patch_moto_fifo_receipt_handles()
