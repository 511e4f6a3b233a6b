"""Capture what the Allocator publishes on its EventBridge bus, through a rule into SQS.

moto keeps no record of put events, but it does deliver them to an SQS target synchronously
inside PutEvents (checked on moto 5.2.5: the event is in the target queue when PutEvents
returns). So a rule on ``source = serenity.allocator`` with a STANDARD queue as its target is a
faithful capture. Its arrival order is NOT publication order in general: AWS EventBridge
promises no delivery order (LocalStack delivers each entry on its own thread), so whoever
orders a child's outcomes sorts them by their order key (``sequence_number``), and a capture
built with ``shuffle`` hands them out shuffled to prove a check does.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

from serenity_allocator.adapters.eventbridge_outcomes import EVENT_SOURCE, OUTCOME_DETAIL_TYPE
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.resources import local_client

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

CAPTURE_RULE_NAME = "serenity-local-outcome-capture"


class OutcomeCapture:
    """Everything published on one bus, read back from the capture queue.

    Reading drains the capture queue (short polling: the local broker serves one request at a
    time) and keeps what it read, so :meth:`events` is cumulative.

    Args:
        sqs: An SQS client on the local endpoint.
        queue_url: The capture queue.
        shuffle: Deliver out of order, as a bus may: every read's new events are shuffled
            with this generator before they join the captured list.
    """

    def __init__(
        self, sqs: SQSClient, queue_url: str, *, shuffle: random.Random | None = None
    ) -> None:
        self._sqs = sqs
        self.queue_url = queue_url
        self._shuffle = shuffle
        self._captured: list[dict[str, Any]] = []

    def events(self) -> list[dict[str, Any]]:
        """Every event captured so far (EventBridge envelopes), in arrival order."""
        arrived: list[dict[str, Any]] = []
        while True:
            messages = self._sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            ).get("Messages", [])
            if not messages:
                if self._shuffle is not None:
                    self._shuffle.shuffle(arrived)
                self._captured.extend(arrived)
                return list(self._captured)
            arrived.extend(json.loads(message["Body"]) for message in messages)
            self._sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
                    for index, message in enumerate(messages)
                ],
            )

    def outcome_details(self) -> list[dict[str, Any]]:
        """The ``detail`` of every allocation outcome event, in arrival order."""
        return [
            event["detail"]
            for event in self.events()
            if event.get("detail-type") == OUTCOME_DETAIL_TYPE
        ]

    def outcomes(self) -> list[AllocationOutcome]:
        """Every allocation outcome, parsed, in arrival order (sort by ``sequence_number``)."""
        return [AllocationOutcome.model_validate(detail) for detail in self.outcome_details()]

    def clear(self) -> None:
        """Forget everything captured so far (the queue is drained first)."""
        self.events()
        self._captured.clear()


def create_outcome_capture(endpoint_url: str, bus_name: str, queue_name: str) -> OutcomeCapture:
    """Create the capture queue and the rule routing the bus's ``serenity.allocator`` events to it.

    Args:
        endpoint_url: The local AWS endpoint (moto).
        bus_name: The outcome bus.
        queue_name: Name of the standard capture queue to create.
    """
    sqs: SQSClient = local_client("sqs", endpoint_url)
    events = local_client("events", endpoint_url)
    queue_url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events.put_rule(
        Name=CAPTURE_RULE_NAME,
        EventBusName=bus_name,
        EventPattern=json.dumps({"source": [EVENT_SOURCE]}),
        State="ENABLED",
    )
    events.put_targets(
        Rule=CAPTURE_RULE_NAME,
        EventBusName=bus_name,
        Targets=[{"Id": "capture-queue", "Arn": queue_arn}],
    )
    return OutcomeCapture(sqs, queue_url)
