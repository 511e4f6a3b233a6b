"""The local queues, table and bus are the template's: what moto holds is what template.yaml says.

The expected values are read with cfn-lint's loader (the infrastructure tests' reading of the
template), not with the tooling's own reader, so a mistake in either shows up here. Only the
local overrides the tooling names (:data:`.template_resources.LOCAL_QUEUE_OVERRIDES`) differ.
"""

from __future__ import annotations

import json
from typing import Any

from serenity_tools.standins.resources import (
    LocalResourceNames,
    LocalResources,
    create_local_resources,
    local_client,
)
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


def test_the_local_credentials_table_and_key_are_the_template_ones(
    local_resources: LocalResources,
) -> None:
    # Given the template's credentials table and key
    template = load_template()["Resources"]
    properties = template["CredentialsTable"]["Properties"]
    dynamodb = local_client("dynamodb", local_resources.endpoint("dynamodb"))
    kms = local_client("kms", local_resources.endpoint("kms"))

    # When what the local endpoint holds is described
    table = dynamodb.describe_table(TableName=local_resources.credentials_table)["Table"]
    ttl = dynamodb.describe_time_to_live(TableName=local_resources.credentials_table)[
        "TimeToLiveDescription"
    ]
    key = kms.describe_key(KeyId=local_resources.credentials_key_arn)["KeyMetadata"]

    # Then the table has the template's key, billing mode and TTL attribute
    assert table["KeySchema"] == properties["KeySchema"]
    assert table["AttributeDefinitions"] == properties["AttributeDefinitions"]
    assert table["BillingModeSummary"]["BillingMode"] == properties["BillingMode"]
    assert ttl == {"AttributeName": "expires_at", "TimeToLiveStatus": "ENABLED"}
    # And the key is a symmetric encrypt/decrypt key with the template's description
    assert template["CredentialsKey"]["Type"] == "AWS::KMS::Key"
    assert key["Description"] == template["CredentialsKey"]["Properties"]["Description"]
    assert (key["KeyUsage"], key["KeySpec"], key["Enabled"]) == (
        "ENCRYPT_DECRYPT",
        "SYMMETRIC_DEFAULT",
        True,
    )
    assert key["Arn"] == local_resources.credentials_key_arn


def test_creating_the_local_resources_twice_finds_the_same_credentials_key(
    aws_env: Any,
) -> None:
    # Given resources created once with a consumer pair
    names = LocalResourceNames().with_suffix()
    pair = {"client_id": "sim-consumer", "client_secret": "sim-consumer-secret"}
    first = create_local_resources(aws_env.endpoint_url, names, ims_consumer=pair)

    # When they are created again on the same endpoint (``local up`` twice)
    second = create_local_resources(aws_env.endpoint_url, names, ims_consumer=pair)

    # Then the key is found again, and the consumer secret holds the pair as JSON
    assert second.credentials_key_arn == first.credentials_key_arn
    secrets = local_client("secretsmanager", aws_env.endpoint_url)
    assert second.consumer_secret_id == names.consumer_secret_id
    stored = secrets.get_secret_value(SecretId=names.consumer_secret_id)["SecretString"]
    assert json.loads(stored) == pair
    assert second.credential_environment() == {
        "IMS_CONSUMER_SECRET_ID": names.consumer_secret_id,
        "CREDENTIALS_TABLE": names.credentials_table,
        "CREDENTIALS_KEY_ARN": first.credentials_key_arn,
    }
