"""The FIFO rules the allocator relies on, on the stack's moto (patched as AWS documents them).

AWS (SQS Developer Guide, "Using the message deduplication ID"; SendMessage): a dedup id is
remembered for the 5-minute interval from its first send, whether or not the message was
deleted since; with ``DeduplicationScope=messageGroup`` it is remembered per message group; and
``SequenceNumber`` keeps increasing within a group. Stock moto 5.x does none of the three.
"""

from __future__ import annotations

import uuid
from typing import Any

from serenity_tools.standins.moto_server import MotoServer
from serenity_tools.standins.resources import local_client


def _queue(server: MotoServer, **attributes: str) -> tuple[Any, str]:
    sqs = local_client("sqs", server.endpoint_url)
    url = sqs.create_queue(
        QueueName=f"rules-{uuid.uuid4().hex[:10]}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false", **attributes},
    )["QueueUrl"]
    return sqs, url


def _send(sqs: Any, url: str, body: str, group: str, dedup: str) -> dict[str, Any]:
    sent: dict[str, Any] = sqs.send_message(
        QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup
    )
    return sent


def _receive_and_delete(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    ).get("Messages", [])
    for message in messages:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return messages


def test_a_resend_after_the_delete_is_still_deduplicated_within_the_window(
    moto_server: MotoServer,
) -> None:
    # Given a message sent, received and deleted
    sqs, url = _queue(moto_server)
    _send(sqs, url, "first", "child-1", "req-1")
    assert [m["Body"] for m in _receive_and_delete(sqs, url)] == ["first"]

    # When the producer resends it with the same dedup id (a retry after a lost response)
    _send(sqs, url, "first again", "child-1", "req-1")

    # Then it is accepted but not delivered again: the id is remembered for 5 minutes
    assert _receive_and_delete(sqs, url) == []


def test_deduplication_is_per_group_when_the_queue_says_so(moto_server: MotoServer) -> None:
    # Given the template's scope (per message group) and the queue-wide default
    per_group, per_group_url = _queue(
        moto_server, DeduplicationScope="messageGroup", FifoThroughputLimit="perMessageGroupId"
    )
    per_queue, per_queue_url = _queue(moto_server)

    # When one dedup id is sent in two groups of each
    for sqs, url in ((per_group, per_group_url), (per_queue, per_queue_url)):
        _send(sqs, url, "to child-1", "child-1", "same-id")
        _send(sqs, url, "to child-2", "child-2", "same-id")

    # Then the per-group queue delivers both, the queue-wide one only the first
    assert sorted(m["Body"] for m in _receive_and_delete(per_group, per_group_url)) == [
        "to child-1",
        "to child-2",
    ]
    assert [m["Body"] for m in _receive_and_delete(per_queue, per_queue_url)] == ["to child-1"]


def test_sequence_numbers_increase_within_a_group(moto_server: MotoServer) -> None:
    # Given five messages of one group
    sqs, url = _queue(moto_server)
    sent = [_send(sqs, url, f"m{i}", "child-1", f"req-{i}")["SequenceNumber"] for i in range(5)]

    # When they are received
    received = _receive_and_delete(sqs, url)

    # Then their sequence numbers are the ones SendMessage returned, increasing as integers
    assert [m["Attributes"]["SequenceNumber"] for m in received] == sent
    assert [int(s) for s in sent] == sorted(int(s) for s in sent)
    assert len(set(sent)) == 5
