"""What template.yaml declares for the queues, tables, bus and credentials key, as API input.

The local stack creates its resources from these (one source of truth): a setting added to the
template reaches every local run, and ``tests/infrastructure/test_local_resources_mirror.py``
fails when what a local endpoint holds differs from the template.

Only the deliberate local differences are applied on top, each named in
:data:`LOCAL_QUEUE_OVERRIDES` and by the caller: a short visibility timeout (so a failed
message comes back within a demo's patience), short polling (the single-threaded broker), and
the redrive count when a scenario asks for another one. Encryption at rest (``SqsManagedSse``,
the table's SSE and point-in-time recovery) is an AWS-side property with no local behaviour;
it is mirrored where the endpoint accepts it (SQS) and left out where it does not (DynamoDB's
SSE and PITR are separate API calls that change nothing a local run can observe).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TEMPLATE_PATH = Path(__file__).resolve().parents[3] / "template.yaml"
QUEUE_ID = "AllocationQueue"
DLQ_ID = "AllocationDeadLetterQueue"
LEDGER_TABLE_ID = "RequestLedgerTable"
CREDENTIALS_TABLE_ID = "CredentialsTable"
CREDENTIALS_KEY_ID = "CredentialsKey"
BUS_ID = "OutcomeBus"

_QUEUE_ATTRIBUTES = (
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
    "MessageRetentionPeriod",
)
"""Template properties of AWS::SQS::Queue that are CreateQueue attributes of the same name."""

LOCAL_QUEUE_OVERRIDES = ("VisibilityTimeout", "ReceiveMessageWaitTimeSeconds")
"""Queue attributes the local stack sets on purpose to other values than the template."""


class TemplateMirrorError(Exception):
    """template.yaml lacks, or writes in an unexpected form, a resource the local stack needs."""


@dataclass(frozen=True)
class TableSpec:
    """A DynamoDB table's CreateTable input and TTL, as the template declares them."""

    key_schema: tuple[Mapping[str, str], ...]
    attribute_definitions: tuple[Mapping[str, str], ...]
    billing_mode: str
    ttl: Mapping[str, Any]
    """``{"AttributeName": ..., "Enabled": ...}``."""


@dataclass(frozen=True)
class KeySpec:
    """The credentials key's CreateKey input (key policy and rotation are AWS-side only)."""

    description: str
    key_usage: str
    key_spec: str


@dataclass(frozen=True)
class TemplateResources:
    """The template's queue, DLQ, table and bus settings, in the shape the APIs take."""

    queue_attributes: Mapping[str, str]
    """CreateQueue attributes of the allocation queue (RedrivePolicy without its target)."""
    max_receive_count: int
    dlq_attributes: Mapping[str, str]
    table_key_schema: tuple[Mapping[str, str], ...]
    table_attribute_definitions: tuple[Mapping[str, str], ...]
    table_billing_mode: str
    table_ttl: Mapping[str, Any]
    """``{"AttributeName": ..., "Enabled": ...}``."""
    credentials_table: TableSpec
    credentials_key: KeySpec

    @property
    def ledger_table(self) -> TableSpec:
        """The request ledger table's settings as a :class:`TableSpec`."""
        return TableSpec(
            self.table_key_schema,
            self.table_attribute_definitions,
            self.table_billing_mode,
            self.table_ttl,
        )

    def queue_create_attributes(
        self, dlq_arn: str, *, visibility_timeout_s: int, max_receive_count: int
    ) -> dict[str, str]:
        """The allocation queue's CreateQueue attributes with the local overrides applied."""
        return {
            **self.queue_attributes,
            "VisibilityTimeout": str(visibility_timeout_s),
            # Short polling only: a long poll would hold the single-threaded broker.
            "ReceiveMessageWaitTimeSeconds": "0",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
            ),
        }


def _attribute_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise TemplateMirrorError(f"queue attribute value {value!r} is not a literal")


def _queue_attributes(properties: Mapping[str, Any]) -> dict[str, str]:
    return {
        name: _attribute_value(properties[name]) for name in _QUEUE_ATTRIBUTES if name in properties
    }


def _resource(template: Mapping[str, Any], logical_id: str, kind: str) -> Mapping[str, Any]:
    resource = template.get("Resources", {}).get(logical_id)
    if not isinstance(resource, Mapping) or resource.get("Type") != kind:
        raise TemplateMirrorError(f"template.yaml: {logical_id} is not a {kind}")
    properties: Mapping[str, Any] = resource.get("Properties") or {}
    return properties


def _max_receive_count(template: Mapping[str, Any], redrive: Mapping[str, Any]) -> int:
    count = redrive.get("maxReceiveCount")
    if isinstance(count, Mapping) and "Fn::FindInMap" in count:
        top, second, third = count["Fn::FindInMap"]
        count = template["Mappings"][top][second][third]
    if not isinstance(count, int):
        raise TemplateMirrorError(f"{QUEUE_ID}.RedrivePolicy.maxReceiveCount: {count!r}")
    return count


def _table_spec(table: Mapping[str, Any]) -> TableSpec:
    ttl = table.get("TimeToLiveSpecification") or {}
    return TableSpec(
        key_schema=tuple(table["KeySchema"]),
        attribute_definitions=tuple(table["AttributeDefinitions"]),
        billing_mode=str(table["BillingMode"]),
        ttl={"AttributeName": ttl.get("AttributeName"), "Enabled": ttl.get("Enabled")},
    )


def _key_spec(key: Mapping[str, Any]) -> KeySpec:
    # KMS's defaults where the template leaves them out: a symmetric encrypt/decrypt key.
    return KeySpec(
        description=str(key.get("Description", "")),
        key_usage=str(key.get("KeyUsage", "ENCRYPT_DECRYPT")),
        key_spec=str(key.get("KeySpec", "SYMMETRIC_DEFAULT")),
    )


def read_template_resources(template: Mapping[str, Any]) -> TemplateResources:
    """The settings of a parsed template (long-form intrinsics, :func:`.invoke.load_template`)."""
    queue = _resource(template, QUEUE_ID, "AWS::SQS::Queue")
    dlq = _resource(template, DLQ_ID, "AWS::SQS::Queue")
    table = _resource(template, LEDGER_TABLE_ID, "AWS::DynamoDB::Table")
    credentials = _resource(template, CREDENTIALS_TABLE_ID, "AWS::DynamoDB::Table")
    key = _resource(template, CREDENTIALS_KEY_ID, "AWS::KMS::Key")
    _resource(template, BUS_ID, "AWS::Events::EventBus")
    redrive = queue.get("RedrivePolicy") or {}
    if redrive.get("deadLetterTargetArn") != {"Fn::GetAtt": [DLQ_ID, "Arn"]}:
        raise TemplateMirrorError(f"{QUEUE_ID}.RedrivePolicy does not target {DLQ_ID}")
    ledger = _table_spec(table)
    return TemplateResources(
        queue_attributes=_queue_attributes(queue),
        max_receive_count=_max_receive_count(template, redrive),
        dlq_attributes=_queue_attributes(dlq),
        table_key_schema=ledger.key_schema,
        table_attribute_definitions=ledger.attribute_definitions,
        table_billing_mode=ledger.billing_mode,
        table_ttl=ledger.ttl,
        credentials_table=_table_spec(credentials),
        credentials_key=_key_spec(key),
    )


@cache
def template_resources(path: Path = TEMPLATE_PATH) -> TemplateResources:
    """The settings of template.yaml (read once per process)."""
    from serenity_tools.standins.invoke import load_template

    return read_template_resources(load_template(path))
