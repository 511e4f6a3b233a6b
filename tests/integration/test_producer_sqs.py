"""The producer against a moto server over real HTTP, and the metered-quota check.

The producer is built the way production builds it (plain ``boto3.client(...)``, endpoint from
``AWS_ENDPOINT_URL``) unless a test hands in a client to count calls. moto never fails single
batch entries, so SendMessageBatch ``Failed`` uses botocore's Stubber.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pydantic import ValidationError

from serenity_allocator.domain import errors as domain_errors
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest, parse_request
from serenity_allocator.domain.model import Totals
from serenity_allocator.producer import (
    AllocationProducer,
    EnqueueError,
    build_ensure,
    build_release,
    is_metered_quota,
)
from serenity_tools.standins.resources import LocalResources
from tests.integration.moto_helpers import counting_client, drain_queue, emf_lines, visible_count

# ---------------------------------------------------------------- producer


def test_producer_enqueue_ensure_sets_group_to_workspace_and_dedup_to_request_id(
    local_resources: LocalResources,
) -> None:
    # Given a producer built the way a service builds it
    producer = AllocationProducer(local_resources.queue_url)

    # When it enqueues an ensure (need as a Totals, ceiling as a mapping)
    request_id = producer.enqueue_ensure(
        "child-1",
        "master-1",
        Totals(projects=0, prompts=250),
        include_drafted=True,
        ceiling={"projects": 10, "prompts": 5000},
        org_id="org-7",
    )

    # Then one message sits on the FIFO queue under the child's group, deduplicated by request id
    [message] = drain_queue(local_resources.queue_url)
    assert message["Attributes"]["MessageGroupId"] == "child-1"
    assert message["Attributes"]["MessageDeduplicationId"] == request_id
    request = parse_request(message["Body"])
    assert isinstance(request, EnsureRequest)
    assert request.request_id == request_id
    assert request.parent_workspace_id == "master-1"
    assert request.need.as_dict() == {"projects": 0, "prompts": 250}
    assert request.ceiling is not None and request.ceiling.prompts == 5000
    assert request.include_drafted is True
    assert request.org_id == "org-7"
    # And absent optionals are left out of the body, not sent as null
    assert "brand_id" not in json.loads(message["Body"])


def test_producer_enqueue_ensure_generates_a_uuid_request_id_when_absent(
    local_resources: LocalResources,
) -> None:
    # Given a producer
    producer = AllocationProducer(local_resources.queue_url)

    # When two ensures are enqueued without request ids
    first = producer.enqueue_ensure("child-1", "master-1")
    second = producer.enqueue_ensure("child-1", "master-1")

    # Then each got its own id, and both messages arrived (not deduplicated) in order
    assert first != second
    bodies = [json.loads(m["Body"]) for m in drain_queue(local_resources.queue_url)]
    assert [b["request_id"] for b in bodies] == [first, second]
    assert bodies[0]["need"] == {"projects": 0, "prompts": 0}


def test_producer_enqueue_release_builds_a_release_message(
    local_resources: LocalResources,
) -> None:
    # Given a producer
    producer = AllocationProducer(local_resources.queue_url)

    # When the sweep enqueues a release with a floor and its run id
    request_id = producer.enqueue_release(
        "child-2",
        floor={"projects": 1, "prompts": 100},
        source="sweep",
        run_id="rs-1",
        request_id="req-release-1",
    )

    # Then the message is a release under the child's group
    [message] = drain_queue(local_resources.queue_url)
    assert request_id == "req-release-1"
    assert message["Attributes"]["MessageGroupId"] == "child-2"
    assert message["Attributes"]["MessageDeduplicationId"] == "req-release-1"
    request = parse_request(message["Body"])
    assert isinstance(request, ReleaseRequest)
    assert (request.source, request.run_id) == ("sweep", "rs-1")
    assert request.floor is not None and request.floor.as_dict() == {"projects": 1, "prompts": 100}


def test_producer_enqueue_release_without_floor_leaves_it_out(
    local_resources: LocalResources,
) -> None:
    # Given a producer / When a service releases without a floor
    AllocationProducer(local_resources.queue_url).enqueue_release("child-3")

    # Then the body has no floor (the worker's blocks apply) and source is "service"
    [message] = drain_queue(local_resources.queue_url)
    body = json.loads(message["Body"])
    assert "floor" not in body
    assert body["source"] == "service"


def test_producer_same_request_id_twice_is_deduplicated_by_sqs(
    local_resources: LocalResources,
) -> None:
    # Given a service that retries a send with the same request id (say, after a timeout)
    producer = AllocationProducer(local_resources.queue_url)
    producer.enqueue_ensure("child-1", "master-1", {"prompts": 100}, request_id="req-dup")

    # When it sends again
    producer.enqueue_ensure("child-1", "master-1", {"prompts": 100}, request_id="req-dup")

    # Then the queue holds it once
    assert len(drain_queue(local_resources.queue_url)) == 1


def test_producer_enqueue_many_chunks_25_requests_into_3_batch_calls(
    local_resources: LocalResources,
) -> None:
    # Given 25 requests over 5 children, each child's requests in a known order
    requests: list[EnsureRequest | ReleaseRequest] = []
    for index in range(25):
        child = f"child-{index % 5}"
        if index % 7 == 6:
            requests.append(build_release(child, request_id=f"req-{index:02d}"))
        else:
            requests.append(
                build_ensure(child, "master-1", {"prompts": index}, request_id=f"req-{index:02d}")
            )
    sqs, calls = counting_client("sqs", "SendMessageBatch")
    producer = AllocationProducer(local_resources.queue_url, sqs=sqs)

    # When they are enqueued as a batch
    request_ids = producer.enqueue_many(requests)

    # Then three SendMessageBatch calls of 10, 10 and 5 entries carried them
    assert [len(call["Entries"]) for call in calls] == [10, 10, 5]
    assert request_ids == [r.request_id for r in requests]
    # And every message has group = workspace and dedup = request id, in order per child
    received = drain_queue(local_resources.queue_url)
    assert sorted(m["Attributes"]["MessageDeduplicationId"] for m in received) == sorted(
        request_ids
    )
    for message in received:
        body = json.loads(message["Body"])
        assert message["Attributes"]["MessageGroupId"] == body["workspace_id"]
        assert message["Attributes"]["MessageDeduplicationId"] == body["request_id"]
    for child in {r.workspace_id for r in requests}:
        sent_order = [r.request_id for r in requests if r.workspace_id == child]
        received_order = [
            m["Attributes"]["MessageDeduplicationId"]
            for m in received
            if m["Attributes"]["MessageGroupId"] == child
        ]
        assert received_order == sent_order


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda p: p.enqueue_ensure("child-1", "master-1", {"prompts": -1}), "need.prompts"),
        (lambda p: p.enqueue_ensure("child-1", "master-1", {"prompts": "250"}), "need.prompts"),
        (lambda p: p.enqueue_ensure("child-1", "master-1", {"tokens": 5}), "need.tokens"),
        (lambda p: p.enqueue_ensure("   ", "master-1"), "workspace_id"),
        (lambda p: p.enqueue_ensure("child-1", ""), "parent_workspace_id"),
        (lambda p: p.enqueue_ensure("child 1", "master-1"), "workspace_id"),
        (lambda p: p.enqueue_ensure("child-1", "m", request_id="réq"), "request_id"),
        (lambda p: p.enqueue_ensure("child-1", "m", ceiling={"projects": -2}), "ceiling.projects"),
        (lambda p: p.enqueue_release("child-1", source="cron"), "source"),
        (lambda p: p.enqueue_release("child-1", floor={"prompts": 1.5}), "floor.prompts"),
    ],
)
def test_producer_invalid_input_raises_naming_the_field_and_sends_nothing(
    local_resources: LocalResources, call: Callable[[AllocationProducer], str], field: str
) -> None:
    # Given a producer
    producer = AllocationProducer(local_resources.queue_url)

    # When it is called with an argument that breaks the contract
    with pytest.raises(ValidationError) as raised:
        call(producer)

    # Then the error names the field, and nothing reached the queue
    locations = [".".join(str(part) for part in error["loc"]) for error in raised.value.errors()]
    assert field in locations
    assert visible_count(local_resources.queue_url) == 0


def test_producer_enqueue_many_with_one_unusable_id_sends_nothing(
    local_resources: LocalResources,
) -> None:
    # Given a batch whose last request has an id SQS refuses as a deduplication id
    good = [build_ensure(f"child-{i}", "master-1", request_id=f"req-{i}") for i in range(12)]
    bad = EnsureRequest.model_construct(
        kind="ensure", request_id="req with spaces", workspace_id="c", parent_workspace_id="m"
    )
    sqs, calls = counting_client("sqs", "SendMessageBatch")

    # When it is enqueued
    with pytest.raises(ValidationError) as raised:
        AllocationProducer(local_resources.queue_url, sqs=sqs).enqueue_many([*good, bad])

    # Then the error names request_id, and no batch was sent at all
    assert raised.value.errors()[0]["loc"] == ("request_id",)
    assert calls == []
    assert visible_count(local_resources.queue_url) == 0


def test_producer_enqueue_to_a_missing_queue_raises_enqueue_error(
    local_resources: LocalResources,
) -> None:
    # Given a producer pointed at a queue that does not exist
    missing = local_resources.queue_url.replace(".fifo", "-missing.fifo")
    producer = AllocationProducer(missing)

    # When it enqueues / Then the botocore error is translated, naming the request
    with pytest.raises(EnqueueError) as raised:
        producer.enqueue_ensure("child-1", "master-1", request_id="req-lost")
    assert raised.value.failed_request_ids == ("req-lost",)
    assert isinstance(raised.value.__cause__, ClientError)

    # And the batch form lists every request that was not enqueued
    requests = [build_ensure("child-1", "master-1", request_id=f"req-{i}") for i in range(12)]
    with pytest.raises(EnqueueError) as raised_many:
        producer.enqueue_many(requests)
    assert raised_many.value.failed_request_ids == tuple(r.request_id for r in requests)


def _stubbed_sqs() -> tuple[Any, Stubber]:
    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        endpoint_url="http://stubbed.invalid",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return client, Stubber(client)


def test_producer_enqueue_many_retries_failed_entries_once_then_succeeds() -> None:
    # Given SQS fails one entry of the first call, then accepts it on the retry
    sqs, stubber = _stubbed_sqs()
    requests = [build_ensure(f"child-{i}", "master-1", request_id=f"req-{i}") for i in range(3)]
    stubber.add_response(
        "send_message_batch",
        {
            "Successful": [
                {"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "x"},
                {"Id": "2", "MessageId": "m2", "MD5OfMessageBody": "x"},
            ],
            "Failed": [{"Id": "1", "SenderFault": False, "Code": "InternalError"}],
        },
    )
    stubber.add_response(
        "send_message_batch",
        {"Successful": [{"Id": "1", "MessageId": "m1", "MD5OfMessageBody": "x"}], "Failed": []},
        expected_params={
            "QueueUrl": "q.fifo",
            "Entries": [
                {
                    "Id": "1",
                    "MessageBody": requests[1].model_dump_json(exclude_none=True),
                    "MessageGroupId": "child-1",
                    "MessageDeduplicationId": "req-1",
                }
            ],
        },
    )

    # When the batch is enqueued
    with stubber:
        request_ids = AllocationProducer("q.fifo", sqs=sqs).enqueue_many(requests)

    # Then only the failed entry was resent, and every id is returned
    assert request_ids == ["req-0", "req-1", "req-2"]
    stubber.assert_no_pending_responses()


def test_producer_enqueue_many_raises_listing_entries_that_fail_twice_and_the_unsent() -> None:
    # Given SQS fails the same entry of the first chunk twice
    sqs, stubber = _stubbed_sqs()
    requests = [build_ensure(f"child-{i}", "master-1", request_id=f"req-{i}") for i in range(12)]
    failure = {"Id": "3", "SenderFault": False, "Code": "InternalError"}
    ok = [
        {"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(10) if i != 3
    ]
    stubber.add_response("send_message_batch", {"Successful": ok, "Failed": [failure]})
    stubber.add_response("send_message_batch", {"Successful": [], "Failed": [failure]})

    # When the batch is enqueued
    with stubber, pytest.raises(EnqueueError) as raised:
        AllocationProducer("q.fifo", sqs=sqs).enqueue_many(requests)

    # Then the error lists the failed entry and the second chunk (not attempted), never silently
    assert raised.value.failed_request_ids == ("req-3", "req-10", "req-11")
    assert raised.value.reason == "InternalError"
    stubber.assert_no_pending_responses()


# ---------------------------------------------------------------- is_metered_quota


def test_the_producers_is_metered_quota_is_the_one_classifier_and_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a clean output
    capsys.readouterr()

    # When a disguised quota 405 (the bare nginx page), a JSON 405, a 422 and a 200 are classified
    verdicts = (
        is_metered_quota(405, "<html><head><title>405 Not Allowed</title></head></html>"),
        is_metered_quota(405, '{"message": "Method Not Allowed"}'),
        is_metered_quota(422, "quota"),
        is_metered_quota(200, ""),
    )

    # Then only the quota 405 matches, through the domain's one rule (one word, one meaning)
    assert verdicts == (True, False, False, False)
    assert is_metered_quota is domain_errors.is_metered_quota
    # And nothing was printed: the verdict is counted by the guard's recorder, which knows the
    # deployment's environment and the service's name (tests/unit/producer/test_good_guest.py)
    assert emf_lines(capsys.readouterr().out) == []
