"""The outcome publisher against a moto server over real HTTP.

moto never fails single PutEvents entries, so ``FailedEntryCount`` uses botocore's Stubber.
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from serenity_allocator.adapters.eventbridge_outcomes import (
    EVENT_SOURCE,
    OUTCOME_DETAIL_TYPE,
    POOL_LOW_DETAIL_TYPE,
    OutcomePublisher,
    OutcomePublishError,
)
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.resources import LocalResources
from tests.conftest import OutcomeCapture
from tests.integration.moto_helpers import counting_client

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
    events_client, calls = counting_client("events", "PutEvents")
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
