"""How a producer hands a request's user authority to the worker: a promise token on a record.

The caller passes a :class:`UserCredential`: the user's IMS access token (the producer mints a
promise token with the emitter pair) or a promise token the service minted itself. The token is
written to the credentials table, keyed by the request id, BEFORE the message is sent; the
message itself never carries it (message v1 has no token field). A send SQS refused outright
takes the record back; one whose answer was lost leaves it (the message may have been
delivered) to its TTL. Contract and the plain AWS calls of a non-Python service:
docs/credentials.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .dynamodb_credential_store import CredentialStoreError
from .kms_token_cipher import TokenCipherError

if TYPE_CHECKING:
    # Types only: a service importing the producer does not load httpx unless it mints.
    from .dynamodb_credential_store import CredentialReceipt
    from .ims_client import MintedPromise

_log = logging.getLogger(__name__)


class PromiseMinter(Protocol):
    """Mints a promise token from a user's access token (:class:`.ims_client.ImsClient`)."""

    def mint(self, access_token: str) -> MintedPromise:
        """A promise token of the access token's user."""
        ...


class CredentialWriter(Protocol):
    """Writes and takes back a record (:class:`.dynamodb_credential_store.DynamoDbCredentialStore`).

    Deliberately without a read: a producer never reads a credential back.
    """

    def put(
        self, request_id: str, workspace_id: str, promise_token: str
    ) -> CredentialReceipt | None:
        """Store the token unless a live one is stored; the receipt of what was written."""
        ...

    def discard(self, receipt: CredentialReceipt) -> bool:
        """Delete what ``put`` wrote, if it is still there."""
        ...


@dataclass(frozen=True)
class UserCredential:
    """The user authority a request runs under: exactly one of the two tokens.

    Build it with :meth:`access` or :meth:`promise`; neither token shows in a repr.
    """

    access_token: str | None = field(default=None, repr=False)
    promise_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        given = [t for t in (self.access_token, self.promise_token) if t is not None]
        if len(given) != 1:
            raise ValueError("credential: give exactly one of access_token and promise_token")
        if not given[0].strip():
            raise ValueError("credential: the token is blank")

    @classmethod
    def access(cls, token: str) -> UserCredential:
        """The user's IMS access token: the producer mints a promise token from it."""
        return cls(access_token=token)

    @classmethod
    def promise(cls, token: str) -> UserCredential:
        """A promise token the service minted itself (with the emitter pair)."""
        return cls(promise_token=token)


class CredentialHandoverError(RuntimeError):
    """The record could not be written; names the request and the AWS code, never a token."""

    def __init__(self, request_id: str, reason: str) -> None:
        self.request_id = request_id
        self.reason = reason
        super().__init__(f"credential for request {request_id} not stored ({reason})")


class CredentialHandover:
    """Writes a request's promise token before its message is sent, and takes it back.

    Args:
        store: Where the record goes (write and discard only).
        minter: Mints from an access token; None when callers always bring a promise token.
    """

    def __init__(self, store: CredentialWriter, minter: PromiseMinter | None = None) -> None:
        self._store = store
        self._minter = minter

    def write(
        self, request_id: str, workspace_id: str, credential: UserCredential
    ) -> CredentialReceipt | None:
        """Mint if needed, then store; None when the request already holds a live token.

        Raises:
            ValueError: An access token but no minter, or a token KMS cannot take.
            NeedsReauthError: IMS refused the access token at mint (the user logs in again).
            ImsUnavailableError: IMS could not mint in time (try again).
            CredentialHandoverError: DynamoDB or KMS refused the write.
        """
        token = credential.promise_token
        if token is None:
            if self._minter is None:
                raise ValueError("credential: this producer cannot mint (no IMS emitter pair)")
            token = self._minter.mint(credential.access_token or "").promise_token
        try:
            return self._store.put(request_id, workspace_id, token)
        except (CredentialStoreError, TokenCipherError) as exc:
            raise CredentialHandoverError(request_id, exc.reason) from None

    def take_back(self, receipt: CredentialReceipt) -> None:
        """Remove a record whose message was never sent (best effort: it expires anyway)."""
        try:
            self._store.discard(receipt)
        except CredentialStoreError as exc:
            _log.warning(
                "credential record of an unsent request not removed",
                extra={"request_id": receipt.request_id, "reason": exc.reason},
            )

    def __repr__(self) -> str:
        return f"CredentialHandover(store={self._store!r}, mints={self._minter is not None})"
