"""Promise tokens at rest: sealed with KMS, one record per request id on a DynamoDB table.

Not the request ledger: services that read outcomes (``GetItem`` on the ledger) have no
permission on this table, and the token is encrypted client-side with a customer-managed KMS
key (:class:`KmsTokenCipher`, at the end) that a producer may only encrypt with. Decision and
the caller contract: docs/decisions/0016-promise-tokens-on-a-credentials-table.md,
docs/credentials.md.

Item shape (table key ``request_id``, a string)::

    request_id     S  the request's idempotency key (the message's deduplication id)
    workspace_id   S  the child the request is for (also in the KMS encryption context)
    promise_token  B  the KMS ciphertext of the promise token; removed by a scrub
    expires_at     N  epoch seconds; the table's TTL attribute, moved on at every roll
    written_at     N  epoch seconds of the first write
    rolled_at      N  epoch seconds of the last roll (absent before the first)
    scrubbed_at    N  epoch seconds of the scrub (absent while a token is held)

A record is written only where none holds a live token (a producer never overwrites one), a
roll only where one still does, and a scrub is idempotent. DynamoDB's TTL deletes lazily, so
a read treats a record past ``expires_at`` as absent.

At the end, the cipher: a promise token is encrypted and decrypted with a customer-managed KMS
key, bound to its request. Every ciphertext carries an encryption context (``purpose``,
``request_id``, ``workspace_id``): KMS authenticates it, so a ciphertext copied onto another
request's record, or read for another child, does not decrypt. A producer's role holds
``kms:Encrypt`` only, so whatever it can write or see of a record it can never turn back into
a token. KMS ``Encrypt`` takes at most 4096 bytes of plaintext (the AWS API limit); a longer
token is refused here with a clear error rather than by KMS. The Sweep seals its run claim's
token with the same cipher.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from .aws_clients import (
    AWS_CALL_BUDGET_S,
    LazyClient,
    aws_error_code,
    client_config,
    dynamodb_client,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

DEFAULT_TTL_S: Final = 24 * 3600
"""A day: a promise token unexchanged for longer than its IMS time to live (an hour in the
simulator; IMS's own figure is not in the shared doc) is dead anyway, so holding it longer
only keeps a credential at rest."""

_CONDITION_FAILED: Final = "ConditionalCheckFailedException"
# Write only where no live token is held: a new request, one whose token was scrubbed (a
# re-mint), or one past its expiry that DynamoDB's lazy TTL has not deleted yet.
_PUT_CONDITION: Final = (
    "attribute_not_exists(request_id) OR attribute_not_exists(promise_token) OR expires_at <= :now"
)


class TokenCipher(Protocol):
    """Encrypts and decrypts a token under an encryption context (:class:`KmsTokenCipher`)."""

    def encrypt(self, token: str, context: Mapping[str, str]) -> bytes:
        """The ciphertext of ``token``."""
        ...

    def decrypt(self, ciphertext: bytes, context: Mapping[str, str]) -> str:
        """The token, when ``context`` matches."""
        ...


class CredentialStoreError(RuntimeError):
    """DynamoDB refused or could not be reached; names the request, never the token.

    Attributes:
        request_id: The request whose record was being written, read or changed.
        reason: The AWS error code or the kind of failure.
        unanswered: DynamoDB gave no answer (a timeout, a dropped connection): the change may
            have been applied all the same.
    """

    def __init__(
        self, operation: str, request_id: str, reason: str, *, unanswered: bool = False
    ) -> None:
        self.request_id = request_id
        self.reason = reason
        self.unanswered = unanswered
        super().__init__(f"credential {operation} for request {request_id} failed ({reason})")


class CredentialRecordUnreadableError(RuntimeError):
    """The record is there but malformed: names the request and the field, never a token."""

    def __init__(self, request_id: str, field_name: str) -> None:
        self.request_id = request_id
        self.field_name = field_name
        super().__init__(f"credential record of request {request_id}: unreadable {field_name}")


class CredentialRecordNotOwnedError(RuntimeError):
    """The record under this request id was written for another workspace (not this request's)."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        super().__init__(f"credential record of request {request_id} belongs to another workspace")


class CredentialGoneError(CredentialStoreError):
    """A roll found no token to replace: the record was scrubbed, discarded or never written."""

    def __init__(self, request_id: str) -> None:
        super().__init__("roll", request_id, "noCredential")


@dataclass(frozen=True)
class CredentialReceipt:
    """What :meth:`DynamoDbCredentialStore.put` wrote: lets the writer take it back exactly."""

    request_id: str
    ciphertext: bytes = field(repr=False)


@dataclass(frozen=True)
class StoredCredential:
    """A request's promise token, decrypted (the worker's view; a producer never gets one)."""

    request_id: str
    workspace_id: str
    promise_token: str = field(repr=False)
    expires_at: int


@dataclass(frozen=True)
class CredentialStoreConfig:
    """How a :class:`DynamoDbCredentialStore` keeps records and calls DynamoDB.

    ``call_budget_s``: the longest one call may take, retries included. ``ttl_s``: how long a
    record lives after its last write or roll. ``wall_clock``: epoch seconds (injected so
    tests control expiry).
    """

    call_budget_s: float = AWS_CALL_BUDGET_S
    ttl_s: int = DEFAULT_TTL_S
    wall_clock: Callable[[], float] = time.time


CREDENTIAL_STORE_DEFAULTS = CredentialStoreConfig()
"""The AWS call budget; records live a day; real time."""


class DynamoDbCredentialStore:
    """The credentials table over boto3, the token encrypted by ``cipher``.

    Args:
        table_name: The credentials table (``CREDENTIALS_TABLE``).
        cipher: Encrypts tokens (a :class:`KmsTokenCipher`).
        client: An optional ready DynamoDB client; otherwise one is built on first use.
        config: The call budget, the records' lifetime and the injected time
            (:class:`CredentialStoreConfig`).
    """

    def __init__(
        self,
        table_name: str,
        cipher: TokenCipher,
        client: DynamoDBClient | None = None,
        *,
        config: CredentialStoreConfig = CREDENTIAL_STORE_DEFAULTS,
    ) -> None:
        if not table_name.strip():
            raise ValueError("the credentials table name is blank")
        if config.ttl_s <= 0:
            raise ValueError("the credential TTL must be positive")
        self._table = table_name
        self._cipher = cipher
        self._dynamodb = LazyClient(lambda: dynamodb_client(config.call_budget_s), client)
        self._ttl_s = config.ttl_s
        self._clock = config.wall_clock

    def put(
        self, request_id: str, workspace_id: str, promise_token: str
    ) -> CredentialReceipt | None:
        """Store a request's promise token, encrypted, unless a live one is already stored.

        Returns:
            The receipt of what was written, or None when the request already holds a token
            (a retried enqueue: the stored one stays, nothing is overwritten).

        Raises:
            CredentialStoreError: DynamoDB refused or could not be reached.
            TokenCipherError: KMS refused.
        """
        ciphertext = self._encrypted(promise_token, request_id, workspace_id)
        now = int(self._clock())
        written = self._conditional(
            "put",
            request_id,
            lambda: self._dynamodb.get().put_item(
                TableName=self._table,
                Item={
                    "request_id": {"S": request_id},
                    "workspace_id": {"S": workspace_id},
                    "promise_token": {"B": ciphertext},
                    "expires_at": {"N": str(now + self._ttl_s)},
                    "written_at": {"N": str(now)},
                },
                ConditionExpression=_PUT_CONDITION,
                ExpressionAttributeValues={":now": {"N": str(now)}},
            ),
        )
        return CredentialReceipt(request_id, ciphertext) if written else None

    def discard(self, receipt: CredentialReceipt) -> bool:
        """Delete the record :meth:`put` wrote, only if it still holds that very token.

        Returns:
            True when deleted; False when the record holds something else by now (not ours).

        Raises:
            CredentialStoreError: DynamoDB refused or could not be reached.
        """
        return self._conditional(
            "discard",
            receipt.request_id,
            lambda: self._dynamodb.get().delete_item(
                TableName=self._table,
                Key={"request_id": {"S": receipt.request_id}},
                ConditionExpression="promise_token = :ours",
                ExpressionAttributeValues={":ours": {"B": receipt.ciphertext}},
            ),
        )

    def read(self, request_id: str, workspace_id: str) -> StoredCredential | None:
        """The request's promise token, or None when there is none (missing, scrubbed, expired).

        Consistent read: a worker right after the producer's write sees it.

        Raises:
            CredentialRecordNotOwnedError: The record names another workspace: it is another
                request's (the id reused), checked before anything is decrypted.
            CredentialRecordUnreadableError: The record is malformed (its workspace, token or
                expiry attribute missing or of the wrong type).
            CredentialStoreError: DynamoDB refused or could not be reached.
            TokenCipherError: KMS refused: ``InvalidCiphertextException`` when the ciphertext
                is not one our key made for this request (copied, corrupted, or base64-encoded
                once more by a CLI recipe).
        """
        item = self._item(request_id)
        sealed = None if item is None else _sealed(item, request_id, workspace_id)
        if sealed is None or sealed.expires_at <= self._clock():
            return None  # none, scrubbed or expired
        token = self._opened(request_id, workspace_id, sealed.ciphertext)
        return StoredCredential(request_id, workspace_id, token, sealed.expires_at)

    def _item(self, request_id: str) -> Mapping[str, AttributeValueTypeDef] | None:
        try:
            answer = self._dynamodb.get().get_item(
                TableName=self._table,
                Key={"request_id": {"S": request_id}},
                ConsistentRead=True,
            )
        except (ClientError, BotoCoreError) as exc:
            raise CredentialStoreError("read", request_id, aws_error_code(exc)) from None
        item: Mapping[str, AttributeValueTypeDef] | None = answer.get("Item")
        return item

    def _opened(self, request_id: str, workspace_id: str, ciphertext: bytes) -> str:
        try:
            return self._cipher.decrypt(ciphertext, encryption_context(request_id, workspace_id))
        except TokenCipherError:
            if is_base64_text(ciphertext):
                # Base64 text, not a ciphertext: a recipe encoded KMS's blob once more (the
                # AWS CLI v1 reads a B value as base64). Unreadable whatever KMS answered.
                raise CredentialRecordUnreadableError(request_id, "promise_token") from None
            raise

    def roll(self, request_id: str, workspace_id: str, promise_token: str) -> None:
        """Replace the stored token with the one an exchange just returned; restart the TTL.

        Raises:
            CredentialGoneError: No token is held any more (scrubbed or never written).
            CredentialStoreError: DynamoDB refused or could not be reached.
            TokenCipherError: KMS refused.
        """
        ciphertext = self._encrypted(promise_token, request_id, workspace_id)
        now = int(self._clock())
        try:
            self._dynamodb.get().update_item(
                TableName=self._table,
                Key={"request_id": {"S": request_id}},
                UpdateExpression="SET promise_token = :token, expires_at = :exp, rolled_at = :now",
                ConditionExpression="attribute_exists(promise_token) AND workspace_id = :ws",
                ExpressionAttributeValues={
                    ":token": {"B": ciphertext},
                    ":exp": {"N": str(now + self._ttl_s)},
                    ":now": {"N": str(now)},
                    ":ws": {"S": workspace_id},
                },
            )
        except ClientError as exc:
            if aws_error_code(exc) == _CONDITION_FAILED:
                raise CredentialGoneError(request_id) from None
            raise CredentialStoreError("roll", request_id, aws_error_code(exc)) from None
        except BotoCoreError as exc:
            reason = aws_error_code(exc)
            raise CredentialStoreError("roll", request_id, reason, unanswered=True) from None

    def scrub(self, request_id: str) -> None:
        """Remove the token from the record (terminal states); idempotent, no record is fine.

        Raises:
            CredentialStoreError: DynamoDB refused or could not be reached.
        """
        # A failed condition is no record: nothing to scrub.
        self._conditional(
            "scrub",
            request_id,
            lambda: self._dynamodb.get().update_item(
                TableName=self._table,
                Key={"request_id": {"S": request_id}},
                UpdateExpression="REMOVE promise_token SET scrubbed_at = :now",
                ConditionExpression="attribute_exists(request_id)",
                ExpressionAttributeValues={":now": {"N": str(int(self._clock()))}},
            ),
        )

    def _encrypted(self, promise_token: str, request_id: str, workspace_id: str) -> bytes:
        # Bound to the request and its child: a ciphertext copied to another record won't open.
        return self._cipher.encrypt(promise_token, encryption_context(request_id, workspace_id))

    def _conditional(self, operation: str, request_id: str, write: Callable[[], object]) -> bool:
        """Run one conditional write; False when its condition did not hold.

        Raises:
            CredentialStoreError: DynamoDB refused or could not be reached.
        """
        try:
            write()
        except ClientError as exc:
            if aws_error_code(exc) == _CONDITION_FAILED:
                return False
            raise CredentialStoreError(operation, request_id, aws_error_code(exc)) from None
        except BotoCoreError as exc:
            raise CredentialStoreError(operation, request_id, aws_error_code(exc)) from None
        return True

    def __repr__(self) -> str:
        return f"DynamoDbCredentialStore(table={self._table!r})"


_BASE64_TEXT: Final = re.compile(rb"[A-Za-z0-9+/]+={0,2}")


def is_base64_text(blob: bytes) -> bool:
    """True when ``blob`` is base64 text, not the binary ciphertext our producer stores.

    What a record holds when KMS's blob was encoded once more.
    """
    return len(blob) % 4 == 0 and _BASE64_TEXT.fullmatch(blob) is not None


def _whole_number(item: Mapping[str, AttributeValueTypeDef], name: str) -> int | None:
    """The attribute as a whole number; None when absent, not a number, or not whole."""
    value = item.get(name, {}).get("N")
    if not isinstance(value, str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


@dataclass(frozen=True)
class _Sealed:
    """A record's encrypted token and its expiry, read from its attributes."""

    ciphertext: bytes
    expires_at: int


def _sealed(
    item: Mapping[str, AttributeValueTypeDef], request_id: str, workspace_id: str
) -> _Sealed | None:
    """The record's sealed token, None once scrubbed; another child's or malformed, refused.

    The owner is checked before anything is decrypted.
    """
    owner = item.get("workspace_id", {}).get("S")
    if owner is not None and owner != workspace_id:
        raise CredentialRecordNotOwnedError(request_id)
    if "promise_token" not in item:
        return None  # scrubbed
    ciphertext = item["promise_token"].get("B")
    if owner is None:
        raise CredentialRecordUnreadableError(request_id, "workspace_id")
    if not isinstance(ciphertext, bytes | bytearray) or not ciphertext:
        raise CredentialRecordUnreadableError(request_id, "promise_token")
    expires_at = _whole_number(item, "expires_at")
    if expires_at is None:
        raise CredentialRecordUnreadableError(request_id, "expires_at")
    return _Sealed(bytes(ciphertext), expires_at)


PURPOSE: Final = "serenity-allocator/promise-token"
"""The ``purpose`` of every encryption context: the key policy and IAM conditions name it."""
MAX_PLAINTEXT_BYTES: Final = 4096
"""KMS Encrypt's plaintext limit."""
PLAINTEXT_NOT_TEXT: Final = "PlaintextNotUtf8"
"""The reason of a decrypt whose plaintext is not UTF-8: not a promise token we encrypted."""


class KmsClient(Protocol):
    """The two KMS calls used here (boto3's client; typed locally, no stubs needed)."""

    def encrypt(self, **kwargs: Any) -> Mapping[str, Any]:
        """KMS Encrypt."""
        ...

    def decrypt(self, **kwargs: Any) -> Mapping[str, Any]:
        """KMS Decrypt."""
        ...


class TokenCipherError(RuntimeError):
    """KMS refused or could not be reached; carries the error code, never the token.

    Attributes:
        reason: The KMS error code (``InvalidCiphertextException`` for a context mismatch or a
            ciphertext that is not ours) or the kind of failure.
    """

    def __init__(self, operation: str, reason: str) -> None:
        self.reason = reason
        super().__init__(f"KMS {operation} of a promise token failed ({reason})")


def encryption_context(request_id: str, workspace_id: str) -> dict[str, str]:
    """The context a token of ``request_id`` on ``workspace_id`` is encrypted under."""
    return {"purpose": PURPOSE, "request_id": request_id, "workspace_id": workspace_id}


def kms_client(budget_s: float = AWS_CALL_BUDGET_S) -> KmsClient:
    """A KMS client with the bounded configuration of :mod:`.aws_clients`."""
    import boto3

    client: KmsClient = boto3.client("kms", config=client_config(budget_s))
    return client


class KmsTokenCipher:
    """Client-side KMS encryption of promise tokens.

    Args:
        key_id: The customer-managed key (id, ARN or alias) tokens are encrypted with; decrypt
            is pinned to it as well.
        kms: An optional ready KMS client; otherwise one is built on first use (honours
            ``AWS_ENDPOINT_URL``, so it talks to moto locally).
        call_budget_s: The longest one call may take, retries included.
    """

    def __init__(
        self,
        key_id: str,
        kms: KmsClient | None = None,
        *,
        call_budget_s: float = AWS_CALL_BUDGET_S,
    ) -> None:
        if not key_id.strip():
            raise ValueError("the credentials KMS key id is blank")
        self._key_id = key_id
        self._kms = LazyClient(lambda: kms_client(call_budget_s), kms)

    def encrypt(self, token: str, context: Mapping[str, str]) -> bytes:
        """The ciphertext of ``token`` under ``context``.

        Raises:
            ValueError: A blank token, or one longer than KMS Encrypt accepts.
            TokenCipherError: KMS refused or could not be reached.
        """
        plaintext = token.encode("utf-8") if isinstance(token, str) else b""
        if not plaintext.strip():
            raise ValueError("the promise token is blank")
        if len(plaintext) > MAX_PLAINTEXT_BYTES:
            raise ValueError(f"the promise token is longer than {MAX_PLAINTEXT_BYTES} bytes")
        try:
            answer = self._kms.get().encrypt(
                KeyId=self._key_id, Plaintext=plaintext, EncryptionContext=dict(context)
            )
        except (ClientError, BotoCoreError) as exc:
            raise TokenCipherError("Encrypt", aws_error_code(exc)) from None
        return bytes(answer["CiphertextBlob"])

    def decrypt(self, ciphertext: bytes, context: Mapping[str, str]) -> str:
        """The token ``ciphertext`` holds, when ``context`` is the one it was encrypted under.

        Raises:
            TokenCipherError: KMS refused (a context mismatch is ``InvalidCiphertextException``)
                or could not be reached.
        """
        try:
            answer = self._kms.get().decrypt(
                KeyId=self._key_id, CiphertextBlob=ciphertext, EncryptionContext=dict(context)
            )
        except (ClientError, BotoCoreError) as exc:
            # from None: a botocore message never holds the plaintext, but the chain is not
            # needed and keeps tracebacks short.
            raise TokenCipherError("Decrypt", aws_error_code(exc)) from None
        try:
            return bytes(answer["Plaintext"]).decode("utf-8")
        except UnicodeDecodeError:
            # Not a token we encrypted (ours are UTF-8 text): the record is unreadable.
            raise TokenCipherError("Decrypt", PLAINTEXT_NOT_TEXT) from None

    def __repr__(self) -> str:
        return f"KmsTokenCipher(key_id={self._key_id!r})"
