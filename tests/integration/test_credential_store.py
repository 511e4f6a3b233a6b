"""The credentials table over moto (DynamoDB + KMS, real HTTP): put, read, roll, scrub, discard."""

from __future__ import annotations

import base64

import pytest

from serenity_allocator.adapters.credential_store import (
    PURPOSE,
    CredentialGoneError,
    CredentialReceipt,
    CredentialRecordNotOwnedError,
    CredentialRecordUnreadableError,
    CredentialStoreError,
    DynamoDbCredentialStore,
    KmsTokenCipher,
    StoredCredential,
    TokenCipherError,
)
from serenity_tools.standins.moto_server import MotoServer
from tests.integration.credentials_stack import CredentialsStack, create_credentials_stack

TOKEN = "sim-ims-pt-canary-PROMISE-0123456789abcdef"
ROLLED = "sim-ims-pt-canary-ROLLED-fedcba9876543210"


class WallClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stack(aws_env: MotoServer) -> CredentialsStack:
    return create_credentials_stack(aws_env)


@pytest.fixture
def clock() -> WallClock:
    return WallClock()


@pytest.fixture
def store(stack: CredentialsStack, clock: WallClock) -> DynamoDbCredentialStore:
    return stack.store(clock, ttl_s=3600)


def test_credential_store_put_then_read_round_trips_encrypted(
    stack: CredentialsStack, store: DynamoDbCredentialStore
) -> None:
    # Given a token written for a request
    receipt = store.put("r1", "c1", TOKEN)
    # Then the record holds only ciphertext, with its TTL
    item = stack.raw_item("r1")
    assert item is not None
    assert set(item) == {"request_id", "workspace_id", "promise_token", "expires_at", "written_at"}
    assert (item["workspace_id"], item["expires_at"]) == ({"S": "c1"}, {"N": "1800003600"})
    stored = bytes(item["promise_token"]["B"])
    assert TOKEN.encode() not in stored
    assert base64.b64encode(TOKEN.encode()) not in stored
    assert receipt == CredentialReceipt("r1", stored)
    # And a read for the same child decrypts it
    assert store.read("r1", "c1") == StoredCredential("r1", "c1", TOKEN, 1_800_003_600)


def test_credential_store_read_for_another_child_is_refused_before_any_decrypt(
    stack: CredentialsStack, store: DynamoDbCredentialStore
) -> None:
    # Given c1's record under r1 (and, for the KMS context, the same ciphertext labelled c2)
    store.put("r1", "c1", TOKEN)

    # When a message of c2 reads r1 / Then the record is another request's, not decrypted
    with pytest.raises(CredentialRecordNotOwnedError) as caught:
        store.read("r1", "c2")
    assert caught.value.request_id == "r1"
    assert TOKEN not in str(caught.value)
    # And a ciphertext relabelled for c2 still does not decrypt for it (the context binds it)
    item = stack.raw_item("r1")
    assert item is not None
    stack.dynamodb.put_item(TableName=stack.table_name, Item={**item, "workspace_id": {"S": "c2"}})
    with pytest.raises(TokenCipherError) as kms_refused:
        store.read("r1", "c2")
    assert kms_refused.value.reason == "InvalidCiphertextException"


def _rewrite(stack: CredentialsStack, request_id: str, **attributes: dict[str, object]) -> None:
    item = stack.raw_item(request_id)
    assert item is not None
    stack.dynamodb.put_item(TableName=stack.table_name, Item={**item, **attributes})


def test_credential_store_names_a_ciphertext_base64_encoded_twice_unreadable(
    stack: CredentialsStack, store: DynamoDbCredentialStore
) -> None:
    # Given a record whose ciphertext went through base64 once more (an AWS CLI v1 recipe
    # passing `base64 ciphertext` as a B value stores the base64 text's bytes)
    store.put("r1", "c1", TOKEN)
    item = stack.raw_item("r1")
    assert item is not None
    _rewrite(stack, "r1", promise_token={"B": base64.b64encode(bytes(item["promise_token"]["B"]))})

    # When the worker reads it / Then it is unreadable, naming the field (moto's KMS answers
    # such a blob AccessDeniedException, which alone would be a transient outage)
    with pytest.raises(CredentialRecordUnreadableError) as caught:
        store.read("r1", "c1")
    assert (caught.value.request_id, caught.value.field_name) == ("r1", "promise_token")


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("expires_at", {"S": "tomorrow"}),
        ("expires_at", {"N": "1.5"}),
        ("promise_token", {"S": "not-binary"}),
    ],
    ids=["expiry-text", "expiry-fraction", "token-as-text"],
)
def test_credential_store_names_a_malformed_attribute_unreadable(
    stack: CredentialsStack,
    store: DynamoDbCredentialStore,
    attribute: str,
    value: dict[str, object],
) -> None:
    # Given a record with one attribute of the wrong shape
    store.put("r1", "c1", TOKEN)
    _rewrite(stack, "r1", **{attribute: value})

    # When the worker reads it / Then the field is named, no traceback, no token
    with pytest.raises(CredentialRecordUnreadableError) as caught:
        store.read("r1", "c1")
    assert caught.value.field_name == attribute
    assert TOKEN not in str(caught.value)


def test_credential_store_never_overwrites_a_live_token(store: DynamoDbCredentialStore) -> None:
    store.put("r1", "c1", TOKEN)
    assert store.put("r1", "c1", ROLLED) is None
    assert store.read("r1", "c1") == StoredCredential("r1", "c1", TOKEN, 1_800_003_600)


def test_credential_store_writes_again_after_a_scrub_or_past_expiry(
    store: DynamoDbCredentialStore, clock: WallClock
) -> None:
    store.put("r1", "c1", TOKEN)
    store.scrub("r1")
    assert store.read("r1", "c1") is None
    assert store.put("r1", "c1", ROLLED) is not None
    assert store.read("r1", "c1") is not None
    store.put("r2", "c1", TOKEN)
    clock.now += 3600  # expired, not yet deleted by DynamoDB's lazy TTL
    assert store.read("r2", "c1") is None
    assert store.put("r2", "c1", ROLLED) is not None
    credential = store.read("r2", "c1")
    assert credential is not None and credential.promise_token == ROLLED


def test_credential_store_roll_replaces_the_token_and_restarts_the_ttl(
    stack: CredentialsStack, store: DynamoDbCredentialStore, clock: WallClock
) -> None:
    store.put("r1", "c1", TOKEN)
    clock.now += 1000
    store.roll("r1", "c1", ROLLED)
    assert store.read("r1", "c1") == StoredCredential("r1", "c1", ROLLED, 1_800_004_600)
    item = stack.raw_item("r1")
    assert item is not None and item["rolled_at"] == {"N": "1800001000"}


def test_credential_store_roll_without_a_token_is_gone(store: DynamoDbCredentialStore) -> None:
    with pytest.raises(CredentialGoneError) as never_written:
        store.roll("r1", "c1", ROLLED)
    assert (never_written.value.request_id, never_written.value.reason) == ("r1", "noCredential")
    store.put("r2", "c1", TOKEN)
    with pytest.raises(CredentialGoneError):
        store.roll("r2", "c2", ROLLED)  # another child's record is never rolled
    store.scrub("r2")
    with pytest.raises(CredentialGoneError):
        store.roll("r2", "c1", ROLLED)


def test_credential_store_scrub_removes_the_token_and_is_idempotent(
    stack: CredentialsStack, store: DynamoDbCredentialStore
) -> None:
    store.put("r1", "c1", TOKEN)
    store.scrub("r1")
    store.scrub("r1")
    store.scrub("never-written")
    item = stack.raw_item("r1")
    assert item is not None
    assert "promise_token" not in item
    assert item["scrubbed_at"] == {"N": "1800000000"}
    assert stack.raw_item("never-written") is None


def test_credential_store_discard_deletes_only_what_it_wrote(
    stack: CredentialsStack, store: DynamoDbCredentialStore
) -> None:
    first = store.put("r1", "c1", TOKEN)
    assert first is not None
    store.scrub("r1")
    second = store.put("r1", "c1", ROLLED)
    assert second is not None
    assert store.discard(first) is False  # the record holds another token by now
    assert store.read("r1", "c1") is not None
    assert store.discard(second) is True
    assert stack.raw_item("r1") is None


def test_credential_store_errors_name_the_request_never_the_token(
    stack: CredentialsStack,
) -> None:
    missing = DynamoDbCredentialStore("no-such-table", KmsTokenCipher(stack.key_id))
    with pytest.raises(CredentialStoreError) as caught:
        missing.put("r1", "c1", TOKEN)
    assert str(caught.value) == "credential put for request r1 failed (ResourceNotFoundException)"
    assert caught.value.__cause__ is None
    bad_key = DynamoDbCredentialStore(stack.table_name, KmsTokenCipher("alias/none"))
    with pytest.raises(TokenCipherError) as refused:
        bad_key.put("r1", "c1", TOKEN)
    assert TOKEN not in str(refused.value) and TOKEN not in repr(refused.value)


def test_credential_store_refuses_blank_and_oversized_tokens(
    store: DynamoDbCredentialStore,
) -> None:
    with pytest.raises(ValueError, match="blank"):
        store.put("r1", "c1", " ")
    with pytest.raises(ValueError, match="longer than 4096 bytes"):
        store.put("r1", "c1", "x" * 4097)


def test_kms_ciphertext_is_bound_to_the_purpose(stack: CredentialsStack) -> None:
    cipher = KmsTokenCipher(stack.key_id)
    context = {"purpose": PURPOSE, "request_id": "r1", "workspace_id": "c1"}
    blob = cipher.encrypt(TOKEN, context)
    assert cipher.decrypt(blob, context) == TOKEN
    with pytest.raises(TokenCipherError):
        cipher.decrypt(blob, {**context, "purpose": "something-else"})


def test_credential_reprs_hold_no_token(store: DynamoDbCredentialStore) -> None:
    receipt = store.put("r1", "c1", TOKEN)
    credential = store.read("r1", "c1")
    shown = " ".join(repr(value) for value in (receipt, credential, store))
    assert TOKEN not in shown
    assert (
        repr(credential)
        == "StoredCredential(request_id='r1', workspace_id='c1', expires_at=1800003600)"
    )
