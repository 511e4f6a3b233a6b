"""What Lambda's SQS event source mapping does around a handler, done over real HTTP.

The mapping receives up to 10 messages (all system attributes), hands them to the function as an
``aws:sqs`` event, then deletes every record that is not listed in ``batchItemFailures``; the
listed ones stay in flight until their visibility timeout ends. The event itself is built by the
local stack's consumer (:func:`serenity_tools.standins.consumer.build_sqs_event`), so these
tests and the local stack hand the handler the same shape. Tests cannot wait for a visibility
timeout (never sleep for real), so :func:`make_visible` ends it with ChangeMessageVisibility.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from serenity_tools.standins.consumer import (
    MAX_MESSAGES_PER_RECEIVE,
    build_sqs_event,
    failed_message_ids,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

__all__ = [
    "build_sqs_event",
    "delete_completed",
    "failed_ids",
    "make_visible",
    "receive_messages",
]


def receive_messages(
    sqs: SQSClient, queue_url: str, *, max_messages: int = MAX_MESSAGES_PER_RECEIVE
) -> list[MessageTypeDef]:
    """One short-polled ReceiveMessage with every system and message attribute.

    Short polling: a long poll would hold the single-threaded moto server.
    """
    answer = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=max_messages,
        WaitTimeSeconds=0,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    return list(answer.get("Messages", []))


def failed_ids(response: Mapping[str, Any]) -> list[str]:
    """The ``itemIdentifier`` of every batch item failure, in response order."""
    return [str(item["itemIdentifier"]) for item in response.get("batchItemFailures", [])]


def delete_completed(
    sqs: SQSClient, queue_url: str, event: Mapping[str, Any], response: Any
) -> list[str]:
    """Delete the records the mapping counts as done; return their message ids.

    As the mapping does, a malformed response or an unknown identifier keeps the whole batch.
    """
    batch_ids = [record["messageId"] for record in event["Records"]]
    failed = failed_message_ids(response, batch_ids)
    completed = [record for record in event["Records"] if record["messageId"] not in failed]
    for record in completed:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=record["receiptHandle"])
    return [record["messageId"] for record in completed]


def make_visible(
    sqs: SQSClient, queue_url: str, event: Mapping[str, Any], response: Mapping[str, Any]
) -> None:
    """End the visibility timeout of the failed records now, as if it had run out.

    Each failed record is changed twice: moto frees a message's hold on its FIFO group only when
    a ChangeMessageVisibility call finds it already visible (see local/moto_fifo.py for what
    happens otherwise), and the second pass makes that independent of the clock's granularity.
    """
    failed = set(failed_ids(response))
    handles = [r["receiptHandle"] for r in event["Records"] if r["messageId"] in failed]
    for _pass in range(2):
        for handle in handles:
            sqs.change_message_visibility(
                QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=0
            )
