"""The dead-letter sender against a moto server over real HTTP."""

from __future__ import annotations

import base64

import pytest
from botocore.exceptions import ClientError

from serenity_allocator.adapters.sqs import (
    BODY_ENCODING_ATTRIBUTE,
    MAX_REASON_CHARS,
    REASON_ATTRIBUTE,
    SOURCE_DEDUP_ID_ATTRIBUTE,
    SOURCE_MESSAGE_ID_ATTRIBUTE,
    DeadLetterError,
    DeadLetterSender,
    decode_dead_letter_body,
)
from serenity_tools.standins.resources import LocalResources
from tests.integration.moto_helpers import drain_queue

# ---------------------------------------------------------------- dead letters


def test_dead_letter_sender_preserves_the_body_and_sets_the_reason(
    local_resources: LocalResources,
) -> None:
    # Given an invalid message as it came off the allocation queue
    body = '{"version": 1, "kind": "ensure", "workspace_id": "c1", "bogus": true}'
    sender = DeadLetterSender(local_resources.dlq_url)

    # When it is dead-lettered
    sender.send_invalid(
        body,
        reason="1 validation error for EnsureRequest\nbogus: Extra inputs are not permitted",
        group_id="c1",
        dedup_id="req-1",
        source_message_id="5b1c3a8e-0000-4000-8000-000000000001",
    )

    # Then the DLQ holds the body unchanged, with the reason and the source ids attached
    [message] = drain_queue(local_resources.dlq_url, attribute_names=True)
    assert message["Body"] == body
    attributes = message["MessageAttributes"]
    assert attributes[REASON_ATTRIBUTE]["StringValue"].startswith("1 validation error")
    assert attributes[REASON_ATTRIBUTE]["DataType"] == "String"
    assert (
        attributes[SOURCE_MESSAGE_ID_ATTRIBUTE]["StringValue"]
        == "5b1c3a8e-0000-4000-8000-000000000001"
    )
    assert attributes[SOURCE_DEDUP_ID_ATTRIBUTE]["StringValue"] == "req-1"
    assert BODY_ENCODING_ATTRIBUTE not in attributes
    assert message["Attributes"]["MessageGroupId"] == "c1"
    assert message["Attributes"]["MessageDeduplicationId"] == "5b1c3a8e-0000-4000-8000-000000000001"


def test_dead_letter_sender_uses_invalid_group_and_dedups_a_redelivered_message(
    local_resources: LocalResources,
) -> None:
    # Given a non-JSON message without a group id
    sender = DeadLetterSender(local_resources.dlq_url)

    # When the same source message is dead-lettered twice (a crash before its delete)
    for _ in range(2):
        sender.send_invalid(
            "not json at all",
            reason="x" * 5000,
            group_id="  ",
            dedup_id="",
            source_message_id="m-9",
        )

    # Then the DLQ holds it once, in the "invalid" group, with the reason truncated
    [message] = drain_queue(local_resources.dlq_url, attribute_names=True)
    assert message["Body"] == "not json at all"
    assert message["Attributes"]["MessageGroupId"] == "invalid"
    assert len(message["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"]) == MAX_REASON_CHARS
    assert SOURCE_DEDUP_ID_ATTRIBUTE not in message["MessageAttributes"]


@pytest.mark.parametrize("body", ['\x00{"kind": 1}', "bell \x07 and \ud800 surrogate", ""])
def test_dead_letter_sender_encodes_bodies_sqs_would_refuse(
    local_resources: LocalResources, body: str
) -> None:
    # Given a body holding characters SQS refuses (or none at all)
    sender = DeadLetterSender(local_resources.dlq_url)

    # When it is dead-lettered (a reason that echoes the bad characters, too)
    sender.send_invalid(
        body, reason=f"bad: {body!s}", group_id="c1", dedup_id="d", source_message_id="m-1"
    )

    # Then it arrives encoded, marked, and decodes back to the exact original
    [message] = drain_queue(local_resources.dlq_url, attribute_names=True)
    encoding = message["MessageAttributes"][BODY_ENCODING_ATTRIBUTE]["StringValue"]
    assert encoding in {"base64", "empty"}
    assert decode_dead_letter_body(message["Body"], encoding) == body
    if encoding == "base64":
        base64.b64decode(message["Body"], validate=True)


def test_dead_letter_sender_to_a_missing_queue_raises_dead_letter_error(
    local_resources: LocalResources,
) -> None:
    # Given a sender pointed at a DLQ that does not exist
    sender = DeadLetterSender(local_resources.dlq_url.replace(".fifo", "-missing.fifo"))

    # When it sends / Then the caller gets a typed error (and must not complete the message)
    with pytest.raises(DeadLetterError) as raised:
        sender.send_invalid("x", reason="r", group_id="g", dedup_id="d", source_message_id="m")
    assert isinstance(raised.value.__cause__, ClientError)
