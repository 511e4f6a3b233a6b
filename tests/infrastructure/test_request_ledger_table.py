"""The request ledger table as template.yaml declares it: durable, encrypted, expiring, retained."""

from __future__ import annotations

from typing import Any

import pytest

from ._template import load_template

LEDGER = "RequestLedgerTable"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def test_request_ledger_table_is_on_demand_keyed_by_request_id(template: dict[str, Any]) -> None:
    # Given the ledger table / Then it is billed per request and keyed by the request id only
    table = template["Resources"][LEDGER]
    props = table["Properties"]
    assert table["Type"] == "AWS::DynamoDB::Table"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [{"AttributeName": "request_id", "KeyType": "HASH"}]
    assert props["AttributeDefinitions"] == [{"AttributeName": "request_id", "AttributeType": "S"}]


def test_request_ledger_table_expires_encrypts_recovers_and_is_retained(
    template: dict[str, Any],
) -> None:
    # Given the ledger table / Then records expire on expires_at (the adapter's attribute),
    # it is encrypted, point-in-time recoverable, and survives stack deletion and replacement
    table = template["Resources"][LEDGER]
    props = table["Properties"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_only_the_allocator_role_touches_the_ledger(template: dict[str, Any]) -> None:
    # Given every IAM role in the template
    roles = {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::IAM::Role"
    }
    # When we collect the statements that name the ledger
    grants = {
        name: statement["Action"]
        for name, role in roles.items()
        for policy in role["Properties"].get("Policies", [])
        for statement in policy["PolicyDocument"]["Statement"]
        if LEDGER in str(statement.get("Resource"))
    }
    # Then only the Allocator may, and only item reads and conditional updates
    assert grants == {
        "AllocatorRole": ["dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:UpdateItem"]
    }
