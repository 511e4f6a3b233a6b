"""The AWS adapters against a moto server over real HTTP.

Producer, dead-letter sender, outcome publisher and checkpoint store are built the way
production builds them (plain ``boto3.client(...)``, endpoint from ``AWS_ENDPOINT_URL``) unless a
test hands in a client to count calls. moto never fails single batch entries, so those two
paths (SendMessageBatch ``Failed``, PutEvents ``FailedEntryCount``) use botocore's Stubber.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pydantic import ValidationError

from serenity_allocator.adapters.eventbridge_outcomes import (
    EVENT_SOURCE,
    OUTCOME_DETAIL_TYPE,
    POOL_LOW_DETAIL_TYPE,
    OutcomePublisher,
    OutcomePublishError,
)
from serenity_allocator.adapters.s3_checkpoint_store import (
    CheckpointCorruptError,
    S3CheckpointStore,
    S3PreconditionFailedError,
    StoredCheckpoint,
)
from serenity_allocator.adapters.sqs_dead_letter import (
    BODY_ENCODING_ATTRIBUTE,
    MAX_REASON_CHARS,
    REASON_ATTRIBUTE,
    SOURCE_DEDUP_ID_ATTRIBUTE,
    SOURCE_MESSAGE_ID_ATTRIBUTE,
    DeadLetterError,
    DeadLetterSender,
    decode_dead_letter_body,
)
from serenity_allocator.domain.messages import (
    AllocationOutcome,
    EnsureRequest,
    ReleaseRequest,
    parse_request,
)
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep_model import StaleCheckpointError
from serenity_allocator.producer import (
    AllocationProducer,
    EnqueueError,
    build_ensure,
    build_release,
    is_metered_quota,
)
from serenity_tools.standins.moto_server import MotoServer, start_moto_server_process
from serenity_tools.standins.resources import LocalResources, local_client
from tests.conftest import OutcomeCapture

# ---------------------------------------------------------------- helpers


def _drain(queue_url: str, *, attribute_names: bool = False) -> list[dict[str, Any]]:
    """Receive (short polling) and delete everything visible on a queue, in receive order."""
    sqs = boto3.client("sqs")
    received: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"] if attribute_names else [],
        ).get("Messages", [])
        if not messages:
            return received
        for message in messages:
            received.append(message)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def _visible_count(queue_url: str) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def _counting_client(service: str, operation: str) -> tuple[Any, list[dict[str, Any]]]:
    """A real boto3 client (endpoint from the environment) that records each call's params."""
    client = boto3.client(service)  # type: ignore[call-overload]
    calls: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(params)

    client.meta.events.register(f"provide-client-params.{service}.{operation}", record)
    return client, calls


def _emf_lines(text: str) -> list[dict[str, Any]]:
    blobs = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line.startswith("{"):
            blob = json.loads(line)
            if "_aws" in blob:
                blobs.append(blob)
    return blobs


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
    [message] = _drain(local_resources.queue_url)
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
    bodies = [json.loads(m["Body"]) for m in _drain(local_resources.queue_url)]
    assert [b["request_id"] for b in bodies] == [first, second]
    assert bodies[0]["need"] == {"projects": 0, "prompts": 0}


def test_producer_enqueue_release_builds_a_release_message(
    local_resources: LocalResources,
) -> None:
    # Given a producer
    producer = AllocationProducer(local_resources.queue_url)

    # When the sweep enqueues a release with a floor and its run id
    request_id = producer.enqueue_release(
        " child-2 ",
        floor={"projects": 1, "prompts": 100},
        source="sweep",
        run_id="rs-1",
        request_id="req-release-1",
    )

    # Then the message is a release under the (stripped) child's group
    [message] = _drain(local_resources.queue_url)
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
    [message] = _drain(local_resources.queue_url)
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
    assert len(_drain(local_resources.queue_url)) == 1


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
    sqs, calls = _counting_client("sqs", "SendMessageBatch")
    producer = AllocationProducer(local_resources.queue_url, sqs=sqs)

    # When they are enqueued as a batch
    request_ids = producer.enqueue_many(requests)

    # Then three SendMessageBatch calls of 10, 10 and 5 entries carried them
    assert [len(call["Entries"]) for call in calls] == [10, 10, 5]
    assert request_ids == [r.request_id for r in requests]
    # And every message has group = workspace and dedup = request id, in order per child
    received = _drain(local_resources.queue_url)
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
    assert _visible_count(local_resources.queue_url) == 0


def test_producer_enqueue_many_with_one_unusable_id_sends_nothing(
    local_resources: LocalResources,
) -> None:
    # Given a batch whose last request has an id SQS refuses as a deduplication id
    good = [build_ensure(f"child-{i}", "master-1", request_id=f"req-{i}") for i in range(12)]
    bad = EnsureRequest(
        kind="ensure", request_id="req with spaces", workspace_id="c", parent_workspace_id="m"
    )
    sqs, calls = _counting_client("sqs", "SendMessageBatch")

    # When it is enqueued
    with pytest.raises(ValidationError) as raised:
        AllocationProducer(local_resources.queue_url, sqs=sqs).enqueue_many([*good, bad])

    # Then the error names request_id, and no batch was sent at all
    assert raised.value.errors()[0]["loc"] == ("request_id",)
    assert calls == []
    assert _visible_count(local_resources.queue_url) == 0


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


def test_is_metered_quota_counts_405s_by_match_and_ignores_other_statuses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a service in the "test" environment
    capsys.readouterr()

    # When it classifies a disguised quota 405 (the bare nginx page), a JSON 405 and a 422
    quota = is_metered_quota(
        405, "<html><head><title>405 Not Allowed</title></head></html>", environment="test"
    )
    plain = is_metered_quota(405, '{"message": "Method Not Allowed"}', environment="test")
    other = is_metered_quota(422, "quota", environment="test")

    # Then only the quota 405 matches
    assert (quota, plain, other) == (True, False, False)
    # And exactly two EMF blobs were printed, one per 405, with the catalog's dimensions
    blobs = _emf_lines(capsys.readouterr().out)
    assert len(blobs) == 2
    for blob in blobs:
        [directive] = blob["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "SerenityAllocator"
        assert directive["Metrics"] == [{"Name": "MeteredQuotaClassifier", "Unit": "Count"}]
        assert set(directive["Dimensions"][0]) == {"service", "Environment", "Matched"}
        assert blob["Environment"] == "test"
        assert blob["MeteredQuotaClassifier"] in (1.0, [1.0])
    assert [blob["Matched"] for blob in blobs] == ["true", "false"]


def test_is_metered_quota_prints_nothing_for_non_405(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a clean output / When a 500 and a 200 are classified
    capsys.readouterr()
    assert is_metered_quota(500, "quota") is False
    assert is_metered_quota(200, "") is False

    # Then no metric was printed
    assert _emf_lines(capsys.readouterr().out) == []


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
    [message] = _drain(local_resources.dlq_url, attribute_names=True)
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
    [message] = _drain(local_resources.dlq_url, attribute_names=True)
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
    [message] = _drain(local_resources.dlq_url, attribute_names=True)
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


# ---------------------------------------------------------------- outcomes


def _outcome(index: int) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=f"req-{index:02d}",
        kind="ensure",
        workspace_id=f"child-{index % 4}",
        status="topped-up",
        totals_before=Totals(projects=1, prompts=100),
        totals_after=Totals(projects=1, prompts=300),
        receive_count=1,
    )


def test_outcome_publisher_chunks_and_the_capture_sees_every_event(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given 23 outcomes and a publisher on the test's bus
    outcomes = [_outcome(i) for i in range(23)]
    events_client, calls = _counting_client("events", "PutEvents")
    publisher = OutcomePublisher(local_resources.bus_name, events=events_client)

    # When they are published
    publisher.publish(outcomes)

    # Then PutEvents carried them 10, 10, 3
    assert [len(call["Entries"]) for call in calls] == [10, 10, 3]
    # And the bus delivered one event per outcome with the contract's source, type and detail
    events = outcome_capture.events()
    assert len(events) == 23
    assert {event["source"] for event in events} == {EVENT_SOURCE}
    assert {event["detail-type"] for event in events} == {OUTCOME_DETAIL_TYPE}
    by_request = {event["detail"]["request_id"]: event["detail"] for event in events}
    for outcome in outcomes:
        assert by_request[outcome.request_id] == json.loads(
            outcome.model_dump_json(exclude_none=True)
        )
    # And no event carries the Semrush token or a null field
    dumped = json.dumps(events)
    assert "tok-local-test" not in dumped
    assert "error_code" not in by_request["req-00"]


def test_outcome_publisher_publishes_pool_low(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given a publisher / When a pool-low warning is published
    OutcomePublisher(local_resources.bus_name).publish_pool_low(
        {"parent_workspace_id": "master-1", "dim": "prompts", "free": 50, "total": 1000}
    )

    # Then it arrives with its own detail-type under the same source
    [event] = outcome_capture.events()
    assert (event["source"], event["detail-type"]) == (EVENT_SOURCE, POOL_LOW_DETAIL_TYPE)
    assert event["detail"] == {
        "parent_workspace_id": "master-1",
        "dim": "prompts",
        "free": 50,
        "total": 1000,
    }


def test_outcome_publisher_raises_listing_request_ids_when_the_bus_is_missing(
    local_resources: LocalResources,
) -> None:
    # Given a publisher on a bus that does not exist
    publisher = OutcomePublisher(f"{local_resources.bus_name}-missing")

    # When outcomes are published / Then every request id is reported, nothing is swallowed
    with pytest.raises(OutcomePublishError) as raised:
        publisher.publish([_outcome(1), _outcome(2)])
    assert raised.value.request_ids == ("req-01", "req-02")
    with pytest.raises(OutcomePublishError):
        publisher.publish_pool_low({"dim": "projects"})


def test_outcome_publisher_retries_failed_entries_once_then_raises() -> None:
    # Given EventBridge fails the second entry twice (moto never fails single entries)
    client = boto3.client(
        "events",
        region_name="us-east-1",
        endpoint_url="http://stubbed.invalid",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    stubber = Stubber(client)
    stubber.add_response(
        "put_events",
        {
            "FailedEntryCount": 1,
            "Entries": [{"EventId": "e1"}, {"ErrorCode": "ThrottlingException"}, {"EventId": "e3"}],
        },
    )
    stubber.add_response(
        "put_events", {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "ThrottlingException"}]}
    )

    # When three outcomes are published
    with stubber, pytest.raises(OutcomePublishError) as raised:
        OutcomePublisher("bus", events=client).publish([_outcome(1), _outcome(2), _outcome(3)])

    # Then only the failed one is reported, with the code
    assert raised.value.request_ids == ("req-02",)
    assert raised.value.reason == "ThrottlingException"
    stubber.assert_no_pending_responses()


# ---------------------------------------------------------------- checkpoints


def test_checkpoint_store_creates_loads_and_updates(local_resources: LocalResources) -> None:
    # Given a store on the test's bucket, and a run without a checkpoint
    store = S3CheckpointStore(local_resources.bucket)
    assert store.load("rs-1") is None

    # When the first checkpoint is created and then updated with the ETag it returned
    first_etag = store.save(
        "rs-1", {"processed": ["c1"], "counts": {"enqueued": 1}}, expected_etag=None
    )
    loaded = store.load("rs-1")
    assert loaded == StoredCheckpoint(
        body={"processed": ["c1"], "counts": {"enqueued": 1}}, etag=first_etag
    )
    second_etag = store.save("rs-1", {"processed": ["c1", "c2"]}, expected_etag=loaded.etag)

    # Then the stored body is the update, under the documented key, with a new ETag
    assert second_etag != first_etag
    assert store.load("rs-1") == StoredCheckpoint(
        body={"processed": ["c1", "c2"]}, etag=second_etag
    )
    s3 = boto3.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=local_resources.bucket)["Contents"]]
    assert keys == ["sweep/rs-1.json"]
    assert store.location("rs-1") == f"s3://{local_resources.bucket}/sweep/rs-1.json"


def test_checkpoint_store_refuses_a_stale_etag_write(local_resources: LocalResources) -> None:
    # Given two invocations of one run that both read the same checkpoint
    store = S3CheckpointStore(local_resources.bucket, prefix="runs/")
    store.save("rs-2", {"processed": []}, expected_etag=None)
    read_by_a = store.load("rs-2")
    read_by_b = store.load("rs-2")
    assert read_by_a is not None and read_by_b is not None

    # When A saves first, then B saves with the ETag it read (now stale)
    store.save("rs-2", {"processed": ["from-a"]}, expected_etag=read_by_a.etag)
    with pytest.raises(S3PreconditionFailedError) as raised:
        store.save("rs-2", {"processed": ["from-b"]}, expected_etag=read_by_b.etag)

    # Then B is refused (the domain's StaleCheckpointError), and A's checkpoint stands intact
    assert isinstance(raised.value, StaleCheckpointError)
    assert raised.value.name == "rs-2"
    stored = store.load("rs-2")
    assert stored is not None and stored.body == {"processed": ["from-a"]}


def test_checkpoint_store_refuses_to_create_over_an_existing_run(
    local_resources: LocalResources,
) -> None:
    # Given a run that already has a checkpoint
    store = S3CheckpointStore(local_resources.bucket)
    store.save("rs-3", {"processed": ["c1"]}, expected_etag=None)

    # When a second runner tries to start the same run from scratch / Then it is refused
    with pytest.raises(S3PreconditionFailedError):
        store.save("rs-3", {"processed": []}, expected_etag=None)
    stored = store.load("rs-3")
    assert stored is not None and stored.body == {"processed": ["c1"]}


def test_checkpoint_store_refuses_an_update_after_the_checkpoint_vanished(
    local_resources: LocalResources,
) -> None:
    # Given a checkpoint that was read and then deleted by someone else
    store = S3CheckpointStore(local_resources.bucket)
    etag = store.save("rs-4", {"processed": []}, expected_etag=None)
    boto3.client("s3").delete_object(Bucket=local_resources.bucket, Key="sweep/rs-4.json")

    # When the runner saves with the ETag it holds / Then it is refused, not silently recreated
    with pytest.raises(S3PreconditionFailedError):
        store.save("rs-4", {"processed": ["c1"]}, expected_etag=etag)


def test_checkpoint_store_reports_a_corrupt_checkpoint(local_resources: LocalResources) -> None:
    # Given an object at the run's key that is not a JSON object
    boto3.client("s3").put_object(
        Bucket=local_resources.bucket, Key="sweep/rs-5.json", Body=b"[1, 2"
    )

    # When it is loaded / Then the store says so instead of resuming from garbage
    with pytest.raises(CheckpointCorruptError):
        S3CheckpointStore(local_resources.bucket).load("rs-5")


def test_checkpoint_store_rejects_run_ids_that_escape_the_prefix() -> None:
    # Given a store / When a run id holds a slash or is blank / Then it is refused up front
    store = S3CheckpointStore("bucket")
    for name in ("../other", " ", "a//b", "dry/..", ""):
        with pytest.raises(ValueError, match="checkpoint name"):
            store.key(name)


# ---------------------------------------------------------------- local stack


def test_moto_server_serves_one_request_at_a_time(moto_server: MotoServer) -> None:
    # Given the session's moto server / Then it is a plain (not threading) werkzeug server
    from werkzeug.serving import BaseWSGIServer, ThreadedWSGIServer

    assert moto_server.threaded is False
    assert isinstance(moto_server.wsgi_server, BaseWSGIServer)
    assert not isinstance(moto_server.wsgi_server, ThreadedWSGIServer)
    assert moto_server.wsgi_server.multithread is False
    assert moto_server.wsgi_server.multiprocess is False


def test_moto_server_process_serves_and_stops() -> None:
    # Given a moto server in its own OS process
    with start_moto_server_process() as server:
        assert server.pid is not None
        # When a client creates and lists a queue through it
        sqs = local_client("sqs", server.endpoint_url)
        sqs.create_queue(QueueName="probe")
        # Then the process answers
        assert any(url.endswith("/probe") for url in sqs.list_queues()["QueueUrls"])
    # And once stopped it no longer accepts connections
    with pytest.raises(Exception):  # noqa: B017 - any connection error will do
        local_client("sqs", server.endpoint_url).list_queues()


def test_local_resources_match_the_template(local_resources: LocalResources) -> None:
    # Given the resources the fixture created
    sqs = boto3.client("sqs")

    # When the queue's attributes are read
    attributes = sqs.get_queue_attributes(
        QueueUrl=local_resources.queue_url, AttributeNames=["All"]
    )["Attributes"]
    dlq_attributes = sqs.get_queue_attributes(
        QueueUrl=local_resources.dlq_url, AttributeNames=["All"]
    )["Attributes"]

    # Then both queues are FIFO with content-based dedup off, and the redrive targets the DLQ
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == "false"
    assert dlq_attributes["FifoQueue"] == "true"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": local_resources.dlq_arn,
        "maxReceiveCount": 5,
    }
    assert attributes["VisibilityTimeout"] == "30"
    # And the bucket, bus and secret exist
    boto3.client("s3").head_bucket(Bucket=local_resources.bucket)
    boto3.client("events").describe_event_bus(Name=local_resources.bus_name)
    assert local_resources.secret_id is not None
    secret = boto3.client("secretsmanager").get_secret_value(SecretId=local_resources.secret_id)
    assert secret["SecretString"] == "tok-local-test"
    assert local_resources.environment()["QUEUE_URL"] == local_resources.queue_url


def test_moto_server_queues_concurrent_clients_instead_of_dropping_them(
    local_resources: LocalResources,
) -> None:
    # Given eight producers, each with its own client, sending to one FIFO queue at once
    from concurrent.futures import ThreadPoolExecutor

    # Clients are made up front: boto3's default session is not safe to build clients in threads.
    clients = [boto3.client("sqs") for _ in range(8)]

    def produce(worker: int) -> list[str]:
        producer = AllocationProducer(local_resources.queue_url, sqs=clients[worker])
        return [
            producer.enqueue_ensure(f"child-{worker}", "master-1", request_id=f"w{worker}-{i}")
            for i in range(5)
        ]

    # When they all send
    with ThreadPoolExecutor(max_workers=8) as pool:
        sent = [rid for ids in pool.map(produce, range(8)) for rid in ids]

    # Then the single-threaded server served every request, and each group kept its order
    received = _drain(local_resources.queue_url)
    assert sorted(m["Attributes"]["MessageDeduplicationId"] for m in received) == sorted(sent)
    for worker in range(8):
        order = [
            m["Attributes"]["MessageDeduplicationId"]
            for m in received
            if m["Attributes"]["MessageGroupId"] == f"child-{worker}"
        ]
        assert order == [f"w{worker}-{i}" for i in range(5)]


def test_producer_honours_the_service_specific_endpoint_variable(
    local_resources: LocalResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the global endpoint pointing nowhere and only AWS_ENDPOINT_URL_SQS at moto
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", local_resources.endpoint_url)

    # When a producer is built without a client and sends
    request_id = AllocationProducer(local_resources.queue_url).enqueue_ensure("child-1", "m-1")

    # Then the message reached moto (boto3 picked the SQS-specific endpoint)
    sqs = local_client("sqs", local_resources.endpoint_url)
    [message] = sqs.receive_message(
        QueueUrl=local_resources.queue_url, MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert message["Attributes"]["MessageDeduplicationId"] == request_id


def test_create_local_resources_is_idempotent_and_updates_the_secret(
    local_resources: LocalResources,
) -> None:
    # Given resources that already exist under some names
    from serenity_tools.standins.resources import LocalResourceNames, create_local_resources

    names = LocalResourceNames().with_suffix()
    first = create_local_resources(local_resources.endpoint_url, names, token="tok-one")

    # When they are created again with a new token
    second = create_local_resources(local_resources.endpoint_url, names, token="tok-two")

    # Then the same resources come back and the secret holds the new token
    assert (second.queue_url, second.dlq_arn, second.bucket) == (
        first.queue_url,
        first.dlq_arn,
        first.bucket,
    )
    assert second.secret_id is not None
    secrets = local_client("secretsmanager", local_resources.endpoint_url)
    assert secrets.get_secret_value(SecretId=second.secret_id)["SecretString"] == "tok-two"
