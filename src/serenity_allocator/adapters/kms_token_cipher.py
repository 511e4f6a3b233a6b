"""Encrypt and decrypt a promise token with a customer-managed KMS key, bound to its request.

Every ciphertext carries an encryption context (``purpose``, ``request_id``, ``workspace_id``):
KMS authenticates it, so a ciphertext copied onto another request's record, or read for another
child, does not decrypt. A producer's role holds ``kms:Encrypt`` only, so whatever it can write
or see of a record it can never turn back into a token (docs/decisions/0016-promise-tokens-
on-a-credentials-table.md).

KMS ``Encrypt`` takes at most 4096 bytes of plaintext (the AWS API limit); a longer token is
refused here with a clear error rather than by KMS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from .aws_clients import AWS_CALL_BUDGET_S, LazyClient, aws_error_code, client_config

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
        build: Callable[[], KmsClient] = lambda: kms_client(call_budget_s)  # noqa: E731
        self._kms = LazyClient(build, kms)

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
