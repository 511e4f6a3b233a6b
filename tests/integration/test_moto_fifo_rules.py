"""The FIFO rules the allocator relies on, on the stack's moto (patched as AWS documents them).

AWS (SQS Developer Guide, "Using the message deduplication ID"; SendMessage): a dedup id is
remembered for the 5-minute interval from its first send, whether or not the message was
deleted since; with ``DeduplicationScope=messageGroup`` it is remembered per message group; and
``SequenceNumber`` keeps increasing within a group; a FIFO delete with an expired receipt handle
is refused ("The receipt handle has expired", AWS Knowledge Center) and the message stays.
Stock moto 5.x does none of these.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

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


def test_a_delete_with_an_expired_receipt_handle_is_refused_and_the_message_stays(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.sqs import models

    # Given a message received with a 5 s visibility timeout
    sqs, url = _queue(moto_server, VisibilityTimeout="5")
    _send(sqs, url, "slow", "child-1", "req-1")
    (first,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]

    # When its visibility timeout has passed (moto's clock moved on 6 s) before the delete
    real_clock = models.unix_time_millis
    monkeypatch.setattr(
        models, "unix_time_millis", lambda dt=None: real_clock(dt) + (6000 if dt is None else 0)
    )
    with pytest.raises(ClientError) as refused:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    batch = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": first["ReceiptHandle"]}]
    )

    # Then both are refused and the message comes back, to be deleted with its new handle
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "The receipt handle has expired" in refused.value.response["Error"]["Message"]
    assert [entry["Id"] for entry in batch.get("Failed", [])] == ["0"]
    (again,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
    assert again["MessageId"] == first["MessageId"]
    # And the handle of the earlier receive stays refused even within the new visibility
    with pytest.raises(ClientError):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []


def test_one_receive_returns_each_groups_messages_together(moto_server: MotoServer) -> None:
    # Given two groups whose messages were sent interleaved
    sqs, url = _queue(moto_server)
    for i in range(3):
        _send(sqs, url, f"a{i}", "child-a", f"a{i}")
        _send(sqs, url, f"b{i}", "child-b", f"b{i}")

    # When one receive takes them all, then each group's come together, in group order
    assert [m["Body"] for m in _receive_and_delete(sqs, url)] == [
        "a0",
        "a1",
        "a2",
        "b0",
        "b1",
        "b2",
    ]
