"""The write guard's ensures as they land on the real (moto) FIFO queue."""

from __future__ import annotations

import json

from serenity_allocator.producer import AllocationProducer, WriteGuard
from serenity_tools.standins.resources import LocalResources, local_client


def test_write_guard_front_enqueues_an_ensure_counting_drafts_with_fifo_ids(
    local_resources: LocalResources,
) -> None:
    # Given a guard on the real producer, with a partial ceiling
    producer = AllocationProducer(local_resources.queue_url)
    guard = WriteGuard(producer, "child-1", "master-1", ceiling={"prompts": 5000})

    # When a 250-prompt batch is fronted
    request_id = guard.front({"prompts": 250})

    # Then one version-1 ensure is queued: drafts counted, need as given, the ceiling partial
    sqs = local_client("sqs", local_resources.endpoint_url)
    [message] = sqs.receive_message(
        QueueUrl=local_resources.queue_url,
        AttributeNames=["MessageGroupId", "MessageDeduplicationId"],
    )["Messages"]
    assert json.loads(message["Body"]) == {
        "version": 1,
        "kind": "ensure",
        "request_id": request_id,
        "workspace_id": "child-1",
        "parent_workspace_id": "master-1",
        "need": {"projects": 0, "prompts": 250},
        "include_drafted": True,
        "ceiling": {"prompts": 5000},
    }
    assert message["Attributes"]["MessageGroupId"] == "child-1"
    assert message["Attributes"]["MessageDeduplicationId"] == request_id
