"""The local queues, table and bus are the template's: what moto holds is what template.yaml says.

The expected values are read with cfn-lint's loader (the infrastructure tests' reading of the
template), not with the tooling's own reader, so a mistake in either shows up here. Only the
local overrides the tooling names (:data:`.template_resources.LOCAL_QUEUE_OVERRIDES`) differ.
"""

from __future__ import annotations

import json
from typing import Any

from serenity_tools.standins.resources import LocalResourceNames, LocalResources, local_client
from serenity_tools.standins.template_resources import LOCAL_QUEUE_OVERRIDES
from tests.infrastructure._template import load_template

_NOT_QUEUE_ATTRIBUTES = {"QueueName", "RedrivePolicy", "Tags"}


def _expected_attributes(properties: dict[str, Any]) -> dict[str, str]:
    def as_attribute(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return {
        name: as_attribute(value)
        for name, value in properties.items()
        if name not in _NOT_QUEUE_ATTRIBUTES and name not in LOCAL_QUEUE_OVERRIDES
    }


def _held(local_resources: LocalResources, queue_url: str) -> dict[str, str]:
    sqs = local_client("sqs", local_resources.endpoint("sqs"))
    attributes: dict[str, str] = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["All"]
    )["Attributes"]
    return attributes


def test_the_local_allocation_queue_has_every_attribute_the_template_sets(
    local_resources: LocalResources,
) -> None:
    template = load_template()
    properties = template["Resources"]["AllocationQueue"]["Properties"]
    held = _held(local_resources, local_resources.queue_url)

    expected = _expected_attributes(properties)
    # The template's high-throughput FIFO settings are among them
    assert expected["DeduplicationScope"] == "messageGroup"
    assert expected["FifoThroughputLimit"] == "perMessageGroupId"
    assert {name: held.get(name) for name in expected} == expected
    # And the redrive policy targets the local DLQ with the template's count
    count = template["Mappings"]["Constants"]["Queue"]["MaxReceiveCount"]
    assert json.loads(held["RedrivePolicy"]) == {
        "deadLetterTargetArn": local_resources.dlq_arn,
        "maxReceiveCount": count,
    }
    assert LocalResourceNames().max_receive_count == count


def test_the_local_dlq_has_every_attribute_the_template_sets(
    local_resources: LocalResources,
) -> None:
    properties = load_template()["Resources"]["AllocationDeadLetterQueue"]["Properties"]
    held = _held(local_resources, local_resources.dlq_url)

    expected = _expected_attributes(properties)
    assert expected["MessageRetentionPeriod"] == "1209600"
    assert {name: held.get(name) for name in expected} == expected


def test_the_local_ledger_table_has_the_template_keys_billing_and_ttl(
    local_resources: LocalResources,
) -> None:
    properties = load_template()["Resources"]["RequestLedgerTable"]["Properties"]
    dynamodb = local_client("dynamodb", local_resources.endpoint("dynamodb"))

    table = dynamodb.describe_table(TableName=local_resources.ledger_table)["Table"]
    ttl = dynamodb.describe_time_to_live(TableName=local_resources.ledger_table)[
        "TimeToLiveDescription"
    ]

    assert table["KeySchema"] == properties["KeySchema"]
    assert table["AttributeDefinitions"] == properties["AttributeDefinitions"]
    assert table["BillingModeSummary"]["BillingMode"] == properties["BillingMode"]
    assert ttl["AttributeName"] == properties["TimeToLiveSpecification"]["AttributeName"]
    assert ttl["TimeToLiveStatus"] == "ENABLED"


def test_the_local_bus_is_the_template_custom_bus(local_resources: LocalResources) -> None:
    template = load_template()
    assert template["Resources"]["OutcomeBus"]["Type"] == "AWS::Events::EventBus"
    events = local_client("events", local_resources.endpoint("events"))
    described = events.describe_event_bus(Name=local_resources.bus_name)
    assert described["Name"] == local_resources.bus_name
