"""A credentials table and its KMS key on the moto server, as the template declares them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from serenity_allocator.adapters.credential_store import (
    CredentialStoreConfig,
    DynamoDbCredentialStore,
    KmsTokenCipher,
)
from serenity_tools.standins.moto_server import MotoServer
from serenity_tools.standins.resources import local_client


@dataclass
class CredentialsStack:
    """The table, the key and clients on them (the raw DynamoDB client reads items as stored)."""

    table_name: str
    key_id: str
    dynamodb: Any
    kms: Any

    def store(self, clock: Any = None, ttl_s: int = 3600) -> DynamoDbCredentialStore:
        cipher = KmsTokenCipher(self.key_id)
        if clock is None:
            return DynamoDbCredentialStore(
                self.table_name, cipher, config=CredentialStoreConfig(ttl_s=ttl_s)
            )
        return DynamoDbCredentialStore(
            self.table_name, cipher, config=CredentialStoreConfig(ttl_s=ttl_s, wall_clock=clock)
        )

    def raw_item(self, request_id: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.dynamodb.get_item(
            TableName=self.table_name, Key={"request_id": {"S": request_id}}, ConsistentRead=True
        ).get("Item")
        return item


def create_credentials_stack(server: MotoServer) -> CredentialsStack:
    """A fresh table (on demand, TTL on ``expires_at``) and a symmetric customer-managed key."""
    dynamodb = local_client("dynamodb", server.endpoint_url)
    kms = local_client("kms", server.endpoint_url)
    table_name = f"credentials-{uuid.uuid4().hex[:12]}"
    dynamodb.create_table(
        TableName=table_name,
        AttributeDefinitions=[{"AttributeName": "request_id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "request_id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.update_time_to_live(
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
    )
    key_id = kms.create_key(Description="credentials", KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"][
        "KeyId"
    ]
    return CredentialsStack(table_name, key_id, dynamodb, kms)
