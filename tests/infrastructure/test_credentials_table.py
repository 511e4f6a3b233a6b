"""The credentials table, its KMS key and the producer policy, read after SAM's transform.

A producer may write a credential record and take it back, and encrypt for that purpose only:
never read a record, never decrypt. No role of this stack touches either yet (the worker's
exchange is wired next); the outcome reader's GetItem on the ledger reaches no token.
"""

from __future__ import annotations

from typing import Any

import pytest

from serenity_allocator.adapters.kms_token_cipher import PURPOSE
from tests.infrastructure._expanded import Renderer, as_list, expanded_template, role_statements

TABLE = "CredentialsTable"
KEY = "CredentialsKey"
POLICY = "ProducerCredentialsPolicy"


@pytest.fixture(scope="module")
def expanded() -> dict[str, Any]:
    return expanded_template()


@pytest.fixture(scope="module")
def render(expanded: dict[str, Any]) -> Renderer:
    return Renderer(expanded)


def test_credentials_table_is_keyed_by_request_id_expires_and_keeps_no_backups(
    expanded: dict[str, Any],
) -> None:
    table = expanded["Resources"][TABLE]
    props = table["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "request_id", "KeyType": "HASH"}]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    # expires_at: the store's TTL attribute (adapters/dynamodb_credential_store.py)
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    # Backups would keep tokens' ciphertext long after their records were scrubbed
    assert "PointInTimeRecoverySpecification" not in props
    assert "StreamSpecification" not in props


def test_credentials_key_is_customer_managed_symmetric_and_rotated(
    expanded: dict[str, Any],
) -> None:
    key = expanded["Resources"][KEY]
    props = key["Properties"]
    assert key["Type"] == "AWS::KMS::Key"
    assert props["EnableKeyRotation"] is True
    assert props.get("KeySpec", "SYMMETRIC_DEFAULT") == "SYMMETRIC_DEFAULT"
    assert props.get("KeyUsage", "ENCRYPT_DECRYPT") == "ENCRYPT_DECRYPT"


def test_producer_policy_writes_and_encrypts_never_reads_or_decrypts(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the producer policy as deployed
    statements = as_list(expanded["Resources"][POLICY]["Properties"]["PolicyDocument"]["Statement"])
    granted = [
        (action, render.render(statement["Resource"]), render.render(statement.get("Condition")))
        for statement in statements
        if statement["Effect"] == "Allow"
        for action in as_list(statement["Action"])
    ]
    # Then it puts and deletes records of the credentials table, and encrypts with the key
    # only under the promise-token purpose: no GetItem, Query, Scan or Decrypt anywhere
    table, key = render.arn(TABLE), render.arn(KEY)
    purpose = {"StringEquals": {"kms:EncryptionContext:purpose": PURPOSE}}
    assert sorted(granted, key=lambda g: g[0]) == [
        ("dynamodb:DeleteItem", table, None),
        ("dynamodb:PutItem", table, None),
        ("kms:Encrypt", key, purpose),
    ]


def test_no_role_of_the_stack_reads_credentials_yet(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given every role's statements after the transform
    table, key = render.arn(TABLE), render.arn(KEY)
    touching = [
        (role, statement["Action"])
        for role, statements in role_statements(expanded).items()
        for statement in statements
        if {table, key} & set(as_list(render.render(statement["Resource"])))
    ]
    # Then none names the credentials table or the key (the worker's grants come with its
    # exchange; the outcome reader's GetItem is on the ledger, which holds no token)
    assert touching == []


def test_outputs_name_the_table_the_key_and_the_policy(expanded: dict[str, Any]) -> None:
    outputs = expanded["Outputs"]
    assert outputs["CredentialsTableName"]["Value"] == {"Ref": TABLE}
    assert outputs["CredentialsKeyArn"]["Value"] == {"Fn::GetAtt": [KEY, "Arn"]}
    assert outputs["ProducerCredentialsPolicyArn"]["Value"] == {"Ref": POLICY}
