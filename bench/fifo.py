"""An in-process model of an SQS FIFO queue feeding a Lambda event source mapping.

Only what the measurements need, and faithful on those points:
- a message group is served in send order, and a group whose head failed waits until that
  message is visible again (the visibility timeout, counted here in delivered batches);
- a receive returns as many messages of one group as it can, then fills from the next groups
  (SQS's documented FIFO receive behaviour), at most ``batch_size``;
- deduplication by MessageDeduplicationId within a group (the template's high-throughput mode:
  DeduplicationScope=messageGroup);
- a message received ``max_receive_count`` times and failed again goes to the dead letters.

It also answers the two SQS calls ``AllocationProducer`` makes (``send_message`` and
``send_message_batch``), so the real producer (the services' side, and the worker's own for
sibling reclaim) enqueues into it unchanged.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:bench-allocation.fifo"


@dataclass
class QueuedMessage:
    """One message in the queue."""

    seq: int
    message_id: str
    group_id: str
    dedup_id: str
    body: str
    sent_ms: int
    receive_count: int = 0
    visible_at_tick: int = 0


class FifoQueue:
    """A FIFO queue, consumed one batch at a time by one sequential poller."""

    def __init__(self, *, visibility_ticks: int = 2, max_receive_count: int = 5) -> None:
        self._pending: list[QueuedMessage] = []
        self._dedup: set[tuple[str, str]] = set()
        self._seq = itertools.count(1)
        self._tick = 0
        self._visibility_ticks = visibility_ticks
        self._max_receive_count = max_receive_count
        self.dead_letters: list[QueuedMessage] = []
        self.sent = 0
        self.deliveries = 0

    # -- the SQS client surface the producer uses ----------------------------------------------

    # boto3's keyword names (QueueUrl, MessageBody, ...) arrive as **request.

    def send_message(self, **request: Any) -> dict[str, Any]:
        message_id = self._put(
            request["MessageBody"], request["MessageGroupId"], request["MessageDeduplicationId"]
        )
        return {"MessageId": message_id}

    def send_message_batch(self, **request: Any) -> dict[str, Any]:
        entries: Sequence[Mapping[str, str]] = request["Entries"]
        successful = []
        for entry in entries:
            message_id = self._put(
                entry["MessageBody"], entry["MessageGroupId"], entry["MessageDeduplicationId"]
            )
            successful.append({"Id": entry["Id"], "MessageId": message_id})
        return {"Successful": successful, "Failed": []}

    def _put(self, body: str, group_id: str, dedup_id: str) -> str:
        seq = next(self._seq)
        message_id = f"msg-{seq:08d}"
        if (group_id, dedup_id) in self._dedup:
            return message_id  # SQS accepts a duplicate and does not deliver it again
        self._dedup.add((group_id, dedup_id))
        self._pending.append(
            QueuedMessage(seq, message_id, group_id, dedup_id, body, int(time.time() * 1000))
        )
        self.sent += 1
        return message_id

    # -- the poller's side ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._pending)

    def receive(self, batch_size: int = 10) -> list[QueuedMessage]:
        """The next batch; waits out visibility timeouts (in ticks) when only those remain."""
        if not self._pending:
            return []
        self._tick += 1
        batch = self._visible_batch(batch_size)
        if not batch:
            self._tick = min(m.visible_at_tick for m in self._pending)
            batch = self._visible_batch(batch_size)
        for message in batch:
            message.receive_count += 1
        self.deliveries += len(batch)
        return batch

    def _visible_batch(self, batch_size: int) -> list[QueuedMessage]:
        by_group: dict[str, list[QueuedMessage]] = {}
        for message in self._pending:  # in send order
            by_group.setdefault(message.group_id, []).append(message)
        batch: list[QueuedMessage] = []
        for messages in by_group.values():
            if messages[0].visible_at_tick > self._tick:
                continue  # the group's head is waiting out its visibility timeout
            for message in messages:
                if len(batch) == batch_size:
                    return batch
                batch.append(message)
        return batch

    def settle(self, batch: Sequence[QueuedMessage], failed_ids: set[str]) -> None:
        """Delete the processed messages; failed ones come back after the visibility timeout."""
        for message in batch:
            if message.message_id not in failed_ids:
                self._pending.remove(message)
            elif message.receive_count >= self._max_receive_count:
                self._pending.remove(message)  # the redrive policy moves it
                self.dead_letters.append(message)
            else:
                message.visible_at_tick = self._tick + self._visibility_ticks


def lambda_event(batch: Sequence[QueuedMessage]) -> dict[str, Any]:
    """The event the SQS event source mapping hands to the function for ``batch``."""
    now_ms = int(time.time() * 1000)
    return {
        "Records": [
            {
                "messageId": m.message_id,
                "receiptHandle": f"rh-{m.message_id}-{m.receive_count}",
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": str(m.receive_count),
                    "SentTimestamp": str(m.sent_ms),
                    "SenderId": "AROABENCH:bench",
                    "ApproximateFirstReceiveTimestamp": str(now_ms),
                    "SequenceNumber": f"{m.seq:020d}",
                    "MessageGroupId": m.group_id,
                    "MessageDeduplicationId": m.dedup_id,
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(m.body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": _QUEUE_ARN,
                "awsRegion": "us-east-1",
            }
            for m in batch
        ]
    }
