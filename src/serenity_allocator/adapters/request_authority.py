"""A request's user authority: handed over by a producer, taken by the worker; its token holder.

The producer side (:class:`CredentialHandover`, at the end): a producer hands a request's user
authority to the worker as a promise token on a record. The caller passes a
:class:`UserCredential`: the user's IMS access token (the producer mints a promise token with the
emitter pair) or a promise token the service minted itself. The token is written to the
credentials table, keyed by the request id, BEFORE the message is sent; the message itself
never carries it (message v1 has no token field). A send SQS refused outright takes the record
back; one whose answer was lost leaves it (the message may have been delivered) to its TTL.
Contract and the plain AWS calls of a non-Python service: docs/credentials.md.

The worker side: the request's session over the credentials table and IMS (IMS mode;
docs/credentials.md "Per-request token").

The Semrush client keeps one httpx client per container; its token provider here is a
:class:`RequestTokenHolder` bound to the current request's session (the worker handles one
record at a time per container). Unbound, ``get_token`` raises: no Semrush call runs without a
request's user. ``get_token(refresh=True)`` (the client's one retry after a 401) exchanges
again, stores the rolled token again, and answers the fresh access token. An access token
lives only as long as IMS's ``expires_in`` says (about five minutes, ims-promise-tokens.md):
``get_token`` exchanges again BEFORE a call that would outlive it, so no call presents a dead
token and none needs the 401 to find out.

The worker side logs nothing; no error, repr, log line or return value holds a token.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..domain.errors import (
    CredentialNotOwnedError,
    CredentialStoreUnavailableError,
    CredentialUnreadableError,
    MalformedExchangeError,
    NoCredentialError,
    SemrushScopeMissingError,
)
from ..domain.model import SEMRUSH_SCOPE, AccessLifetime, CredentialEnd, TokenFreshness
from .credential_store import (
    PLAINTEXT_NOT_TEXT,
    CredentialGoneError,
    CredentialRecordNotOwnedError,
    CredentialRecordUnreadableError,
    CredentialStoreError,
    StoredCredential,
    TokenCipherError,
)

if TYPE_CHECKING:
    # Types only: a service importing the producer does not load httpx unless it mints.
    from .credential_store import CredentialReceipt
    from .ims_client import ExchangedTokens, MintedPromise

_log = logging.getLogger(__name__)

UNDECRYPTABLE = "InvalidCiphertextException"
"""KMS's answer for a ciphertext that is "corrupted, missing, or otherwise invalid" (the KMS
Decrypt reference), its encryption context included: the record names this request and child,
so it was not made by our producer for them (copied, or base64-encoded once more by a CLI
recipe)."""
UNREADABLE_CIPHERTEXT = frozenset({UNDECRYPTABLE, "IncorrectKeyException", PLAINTEXT_NOT_TEXT})
"""Decrypt refusals that no retry changes: the record is unreadable (``credentialUnreadable``).
Any other KMS error (throttling, an outage, our own role refused) is transient."""


class CredentialStore(Protocol):
    """What the worker does with the credentials table (:class:`DynamoDbCredentialStore`)."""

    def read(self, request_id: str, workspace_id: str) -> StoredCredential | None:
        """The request's promise token, or None."""
        ...

    def roll(self, request_id: str, workspace_id: str, promise_token: str) -> None:
        """Replace the stored token with the rolled one."""
        ...

    def scrub(self, request_id: str) -> None:
        """Remove the token from the record (idempotent)."""
        ...


class PromiseExchanger(Protocol):
    """The consumer half of IMS (:class:`~.ims_client.ImsClient`)."""

    def exchange(self, promise_token: str) -> ExchangedTokens:
        """Exchange for an access token and a rolled promise token."""
        ...

    def invalidate(self, promise_token: str) -> bool:
        """Invalidate the chain; True when IMS confirmed."""
        ...


class UnboundTokenError(RuntimeError):
    """A Semrush call was attempted with no request's user bound (IMS mode fails closed)."""

    code = "noBoundCredential"

    def __init__(self) -> None:
        super().__init__("no request credential is bound: refusing the Semrush call")


@dataclass
class ImsSession:
    """One request's open authority: the access token and the current (rolled) promise."""

    request_id: str
    workspace_id: str
    access_token: str = field(repr=False)
    promise_token: str = field(repr=False)
    lifetime: AccessLifetime
    """Until when ``access_token`` may be presented (IMS's ``expires_in`` from the send)."""
    roll_stored: bool = True
    """False while the record may still hold the spent token (its roll is not stored yet, or
    could not be): the request goes on with the access token in hand;
    :meth:`ImsCredentialBroker.keep` stores the roll again when the request comes back."""
    storing: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Held by each store of the rolled token: a roll stored beside the request's calls and a
    re-exchange's store run one at a time, each storing the token current then, so the last
    write is always the chain's head."""


ROLL_ATTEMPTS = 2
"""Stores of a rolled token within one open (each a bounded boto3 call, retries included):
throttling is normal for DynamoDB and KMS, so one throttled store does not end the chain."""


def token_user(access_token: str) -> str | None:
    """The ``user_id`` claim of an IMS access token (a JWT), or None when it carries none.

    Read without verifying the signature: the token came straight from IMS over TLS, and the
    claim is only compared (two requests of one user), never trusted for more. A token that is
    not a JWT with a string ``user_id`` (the shared doc does not say IMS's are) answers None:
    its request is then read on its own (the safe side).
    """
    parts = access_token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    user = claims.get("user_id") if isinstance(claims, dict) else None
    return user if isinstance(user, str) and user else None


class ImsCredentialBroker:
    """Opens, binds and ends request sessions: the application's ``CredentialBroker``.

    Args:
        store: The credentials table (read, roll, scrub).
        ims: The IMS client with the consumer pair.
        holder: The token holder the Semrush client reads.
        freshness: The clock and the longest Semrush call, to judge an access token's age.
    """

    def __init__(
        self,
        store: CredentialStore,
        ims: PromiseExchanger,
        holder: RequestTokenHolder,
        freshness: TokenFreshness | None = None,
    ) -> None:
        self._store = store
        self._ims = ims
        self._holder = holder
        self._freshness = freshness or TokenFreshness(time.monotonic)

    def open(self, request_id: str, workspace_id: str) -> ImsSession:
        """Read, exchange, store the rolled token (before anything else); nothing bound."""
        session = self.exchange(request_id, workspace_id)
        self._roll(session)
        return session

    def exchange(self, request_id: str, workspace_id: str) -> ImsSession:
        """Read and exchange; the rolled token is NOT stored yet (:meth:`store_roll` does).

        Only an answer that fails the request here has its roll stored before it raises (one
        without an access token, one lacking the ``semrush`` scope): it comes back with that.
        """
        stored = self._read(request_id, workspace_id)
        if stored is None:
            raise NoCredentialError()
        sent_at = self._freshness.clock()
        try:
            tokens = self._ims.exchange(stored.promise_token)
        except MalformedExchangeError as exc:
            self._keep_rolled(request_id, workspace_id, exc)
            raise
        session = ImsSession(
            request_id,
            workspace_id,
            tokens.access_token,
            tokens.promise_token,
            self._freshness.lifetime_of(sent_at, tokens.expires_in),
            roll_stored=False,
        )
        if tokens.lacks_scope(SEMRUSH_SCOPE):
            self._roll(session)  # the promise is kept for the redrive: its head is stored
            raise SemrushScopeMissingError()
        return session

    def store_roll(self, session: object) -> None:
        """Store the session's rolled token (tried twice; not stored: ``roll_stored`` False).

        Raises:
            NoCredentialError: the record is gone (the fresh chain was invalidated).
        """
        if isinstance(session, ImsSession):
            self._roll(session)

    def refresh(self, session: ImsSession) -> str:
        """Exchange the session's current promise again; store the roll; the new access token.

        After a Semrush 401, or before a call its access token would not outlive.
        """
        sent_at = self._freshness.clock()
        try:
            tokens = self._ims.exchange(session.promise_token)
        except MalformedExchangeError as exc:
            session.promise_token = exc.rolled  # the one passed in is spent: end this one
            self._roll(session)  # under the session's lock: after any store still under way
            raise
        session.access_token = tokens.access_token
        session.promise_token = tokens.promise_token
        session.lifetime = self._freshness.lifetime_of(sent_at, tokens.expires_in)
        self._roll(session)
        _check_scope(tokens)
        return session.access_token

    def presentable(self, session: ImsSession) -> str:
        """The session's access token, exchanged again first if a call would outlive it."""
        if self._freshness.presentable(session.lifetime):
            return session.access_token
        return self.refresh(session)

    def user_of(self, session: object) -> str | None:
        """The user IMS's access token names (its ``user_id`` claim), else None."""
        return token_user(session.access_token) if isinstance(session, ImsSession) else None

    def keep(self, session: object) -> None:
        """The request comes back: store the session's roll if the open could not."""
        if isinstance(session, ImsSession) and not session.roll_stored:
            # Still not stored: the record keeps what it holds; its next receive replays that.
            with contextlib.suppress(NoCredentialError):
                self._roll(session)

    def bind(self, session: object | None) -> None:
        """Bind ``session`` (one of ours) for the Semrush client; None unbinds."""
        if session is not None and not isinstance(session, ImsSession):
            raise TypeError("not a session of this broker")
        self._holder.bound = session

    def end(
        self, request_id: str, workspace_id: str | None, session: object | None
    ) -> CredentialEnd:
        """Invalidate the session's promise (else the stored one), then scrub; never raises."""
        token = session.promise_token if isinstance(session, ImsSession) else None
        if token is None and workspace_id is not None:
            token = self._stored_token(request_id, workspace_id)
        if self._holder.bound is session and session is not None:
            self._holder.bound = None
        invalidated = self._ims.invalidate(token) if token is not None else None
        return CredentialEnd(invalidated, self.scrub(request_id).scrub_error)

    def invalidate(self, session: object) -> bool | None:
        """Invalidate the session's current promise token at IMS (True: confirmed).

        Never raises; None for a session that is not one of ours.
        """
        if not isinstance(session, ImsSession):
            return None
        return self._ims.invalidate(session.promise_token)

    def scrub(self, request_id: str) -> CredentialEnd:
        """Remove the token from the record; the failure's reason when it could not."""
        try:
            self._store.scrub(request_id)
        except CredentialStoreError as exc:
            return CredentialEnd(None, exc.reason)
        return CredentialEnd(None)

    def _read(self, request_id: str, workspace_id: str) -> StoredCredential | None:
        try:
            return self._store.read(request_id, workspace_id)
        except CredentialRecordNotOwnedError:
            raise CredentialNotOwnedError() from None
        except CredentialRecordUnreadableError:
            raise CredentialUnreadableError() from None
        except TokenCipherError as exc:
            if exc.reason in UNREADABLE_CIPHERTEXT:
                raise CredentialUnreadableError() from None
            raise CredentialStoreUnavailableError() from None
        except CredentialStoreError:
            raise CredentialStoreUnavailableError() from None

    def _stored_token(self, request_id: str, workspace_id: str) -> str | None:
        try:
            stored = self._store.read(request_id, workspace_id)
        except (
            TokenCipherError,
            CredentialStoreError,
            CredentialRecordUnreadableError,
            CredentialRecordNotOwnedError,
        ):
            return None  # still scrubbed; the token dies with its IMS time to live
        return stored.promise_token if stored is not None else None

    def _keep_rolled(self, request_id: str, workspace_id: str, exc: MalformedExchangeError) -> None:
        """An answer without an access token still rolled the promise: store the new token.

        The request fails for now and comes back with a live promise instead of a spent one.
        """
        kept = ImsSession(request_id, workspace_id, "", exc.rolled, AccessLifetime(0.0))
        self._roll(kept)

    def _roll(self, session: ImsSession) -> None:
        # Before anything else: a crash from here on replays with the new token (the one just
        # exchanged is spent). A store that fails (throttled twice, or no answer) is tried once
        # more; if it still fails, the request goes on with the access token in hand and ends
        # the chain at its terminal state (invalidating the rolled token): never needsReauth
        # for our store's trouble. Only a record that is gone (scrubbed, never written) ends it.
        with session.storing:
            for attempt in range(ROLL_ATTEMPTS):
                try:
                    self._store.roll(
                        session.request_id, session.workspace_id, session.promise_token
                    )
                except CredentialGoneError:
                    self._ims.invalidate(session.promise_token)
                    raise NoCredentialError() from None
                except (CredentialStoreError, TokenCipherError):
                    if attempt + 1 == ROLL_ATTEMPTS:
                        session.roll_stored = False
                        return
                    continue
                session.roll_stored = True
                return

    def __repr__(self) -> str:
        return "ImsCredentialBroker()"


def _check_scope(tokens: ExchangedTokens) -> None:
    """Refuse a token IMS says lacks the ``semrush`` scope (after its roll is stored).

    Semrush would refuse it for every request like a non-member; said here, before any call,
    it is the configuration fault it is. An answer without ``scope`` is not judged.
    """
    if tokens.lacks_scope(SEMRUSH_SCOPE):
        raise SemrushScopeMissingError()


class RequestTokenHolder:
    """The Semrush client's token provider in IMS mode: the bound request's access token."""

    def __init__(self) -> None:
        self.bound: ImsSession | None = None
        self.broker: ImsCredentialBroker | None = None

    def get_token(self, *, refresh: bool = False) -> str:
        """The bound request's access token; ``refresh`` exchanges again first.

        A token a call would outlive (its IMS lifetime, less the longest call) is exchanged
        again first too: never presented past its ``expires_in``.

        Raises:
            UnboundTokenError: No request is bound (fail closed).
        """
        session = self.bound
        if session is None:
            raise UnboundTokenError()
        if self.broker is None:
            return session.access_token
        if refresh:
            return self.broker.refresh(session)
        return self.broker.presentable(session)

    def __repr__(self) -> str:
        return f"RequestTokenHolder(bound={self.bound.request_id if self.bound else None!r})"


# -- the producer side: the hand-over --------------------------------------------------------


class PromiseMinter(Protocol):
    """Mints a promise token from a user's access token (:class:`.ims_client.ImsClient`)."""

    def mint(self, access_token: str) -> MintedPromise:
        """A promise token of the access token's user."""
        ...


class CredentialWriter(Protocol):
    """Writes and takes back a record (:class:`.credential_store.DynamoDbCredentialStore`).

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
