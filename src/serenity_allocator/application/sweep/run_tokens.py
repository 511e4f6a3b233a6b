"""A sweep run's promise token: handed over, exchanged and rolled at every batch, ended once.

The CLI hands the operator's token over onto the run's claim (:func:`hand_over_run_token`,
KMS-encrypted under the run's context) before it invokes. Each batch then holds a
:class:`RunTokenSession`: the batch's first Semrush call makes it read the claim, exchange the
token with the consumer pair and store the ROLLED token on the claim before that call is sent
(ims-promise-tokens.md: exchange first, persist at once); the access token serves the batch's
later calls for as long as IMS's ``expires_in`` says (about five minutes): a call, or a
release's mint (which presents it as ``authenticating_token``), that it would not outlive makes
the session exchange and roll again first (ADR 0025). When the run ends (done, aborted,
abandoned) :meth:`RunTokens.end` invalidates the token's chain (best effort) and scrubs it. A
dead promise (IMS 401/403) is scrubbed and stops the run with :class:`SweepNeedsReauthError`,
which says how to resume with a new token.

Every claim write is conditional on the version read, so two invocations of one run cannot both
roll: the loser invalidates what it got (or sees the token rolled under it) and stops with
``RunInProgressError`` instead of calling the promise dead.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Literal, NoReturn

from pydantic import ValidationError

from ...domain.errors import (
    ImsClientRefusedError,
    ImsUnavailableError,
    MalformedExchangeError,
    NeedsReauthError,
    OutOfTimeError,
    SemrushScopeMissingError,
)
from ...domain.model import SEMRUSH_SCOPE, AccessLifetime, TokenFreshness
from ...domain.observations import CredentialOutcome
from ...domain.ports import AllocationObserver
from ...domain.sweep.errors import (
    CheckpointCorruptError,
    RunInProgressError,
    StaleCheckpointError,
    SweepImsUnavailableError,
    SweepNeedsReauthError,
    SweepNoCredentialError,
)
from ...domain.sweep.run_claim import RunClaim, RunClaimEnd, run_claim_name, run_token_context
from .ports import CheckpointStore, ExchangedTokens, PromiseExchange, RunTokenCipher

_SCRUB_ATTEMPTS = 3
"""Conditional scrubs tried before giving up (each loses only to a concurrent claim write)."""


@dataclass(frozen=True)
class _ClaimRead:
    claim: RunClaim | None
    etag: str | None
    problem: str | None = None

    def why_empty(self) -> str:
        if self.problem is not None:
            return f"its claim is unreadable: {self.problem}"
        if self.claim is None:
            return "no token was handed over for it"
        if self.claim.ended is not None:
            return f"its token was scrubbed when the run stopped ({self.claim.ended})"
        return "its claim holds no token"


def _read(store: CheckpointStore, run_id: str) -> _ClaimRead:
    name = run_claim_name(run_id)
    try:
        stored = store.load(name)
    except CheckpointCorruptError as exc:
        return _ClaimRead(None, exc.etag, exc.problem)
    if stored is None:
        return _ClaimRead(None, None)
    try:
        claim = RunClaim.model_validate(stored.body)
    except ValidationError:
        return _ClaimRead(None, stored.etag, "it breaks the claim schema")
    if claim.run_id != run_id:
        return _ClaimRead(None, stored.etag, "it belongs to another run")
    return _ClaimRead(claim, stored.etag)


def _seal(cipher: RunTokenCipher, run_id: str, token: str) -> str:
    return base64.b64encode(cipher.encrypt(token, run_token_context(run_id))).decode("ascii")


def _open(cipher: RunTokenCipher, run_id: str, sealed: str) -> str:
    try:
        ciphertext = base64.b64decode(sealed, validate=True)
    except (binascii.Error, ValueError):
        raise SweepNoCredentialError(run_id, "its token is not valid base64") from None
    return cipher.decrypt(ciphertext, run_token_context(run_id))


def hand_over_run_token(
    store: CheckpointStore, cipher: RunTokenCipher, run_id: str, promise_token: str
) -> None:
    """Put a promise token on the run's claim for its next batch (the CLI, before invoking).

    The run's current token, if any, stays beside it until that batch has exchanged the new
    one, which then invalidates the old chain.

    Raises:
        RunInProgressError: the claim changed while it was being written (a batch rolled it).
    """
    read = _read(store, run_id)
    current = None if read.claim is None else read.claim.promise_token
    claim = RunClaim(
        run_id=run_id, promise_token=current, handover=_seal(cipher, run_id, promise_token)
    )
    try:
        store.save(run_claim_name(run_id), claim.model_dump(mode="json"), expected_etag=read.etag)
    except StaleCheckpointError as exc:
        raise RunInProgressError(run_id) from exc


class RunTokens:
    """The runs' promise tokens: a session per batch, and the end of a run's hold.

    Args:
        store: Where claims live (the sweep bucket, beside the checkpoints).
        cipher: KMS, for the run's context.
        ims: IMS with the consumer pair.
        observer: Where ``CredentialOutcome`` events go.
        freshness: The clock and the longest call presenting an access token (a Semrush call
            or a release's mint), to judge the exchanged token's age.
    """

    def __init__(
        self,
        store: CheckpointStore,
        cipher: RunTokenCipher,
        ims: PromiseExchange,
        observer: AllocationObserver,
        freshness: TokenFreshness,
    ) -> None:
        self._store = store
        self._cipher = cipher
        self._ims = ims
        self._observer = observer
        self.freshness = freshness

    def session(self, run_id: str) -> RunTokenSession:
        """A batch's hold on the run's authority (nothing is exchanged until it is asked)."""
        return RunTokenSession(self, run_id)

    def end(self, run_id: str, reason: Literal["done", "aborted", "abandoned"]) -> None:
        """Invalidate every token on the run's claim (best effort) and scrub them."""
        self.scrub(run_id, reason)

    # -- shared with the session ---------------------------------------------------------------

    def exchange(self, run_id: str) -> tuple[str, AccessLifetime]:
        """Exchange the claim's token, store the rolled one; the access token and its lifetime.

        Raises:
            SweepNoCredentialError: the claim holds no usable token.
            SweepNeedsReauthError: IMS refused the exchange (the claim is scrubbed).
            SweepImsUnavailableError: IMS could not answer in time (the claim is unchanged).
            ImsClientRefusedError: IMS refused the consumer pair (configuration; the claim is
                unchanged, the run resumes once the pair is fixed).
            SemrushScopeMissingError: the token lacks the ``semrush`` scope (the wrong pair;
                the claim holds the rolled token, the run resumes once the pair is fixed).
            RunInProgressError: another invocation rolled the token meanwhile.
        """
        read = _read(self._store, run_id)
        sealed = None if read.claim is None else read.claim.next_token()
        if read.claim is None or sealed is None:
            self._observer.record(CredentialOutcome("noCredential"))
            raise SweepNoCredentialError(run_id, read.why_empty())
        sent_at = self.freshness.clock()
        tokens = self._exchanged(run_id, read, sealed)
        self._roll(run_id, read, tokens.promise_token)
        if tokens.lacks_scope(SEMRUSH_SCOPE):
            # The wrong pair, not the operator: the claim keeps the rolled token (configuration).
            self._observer.record(CredentialOutcome("semrushScopeMissing"))
            raise SemrushScopeMissingError()
        self._observer.record(CredentialOutcome("exchanged"))
        superseded = read.claim.promise_token if read.claim.handover else None
        if superseded is not None:
            # The operator handed over a new token: the old chain must not stay alive.
            self._invalidate(run_id, superseded)
        return tokens.access_token, self.freshness.lifetime_of(sent_at, tokens.expires_in)

    def _exchanged(self, run_id: str, read: _ClaimRead, sealed: str) -> ExchangedTokens:
        """IMS's answer to exchanging the claim's ``sealed`` token.

        A refusal is raised as what it means for the run (see :meth:`exchange`).
        """
        try:
            return self._ims.exchange(_open(self._cipher, run_id, sealed))
        except NeedsReauthError:
            self._dead(run_id, read, sealed)
        except (ImsUnavailableError, OutOfTimeError):
            self._observer.record(CredentialOutcome("imsUnavailable"))
            raise SweepImsUnavailableError(run_id) from None
        except ImsClientRefusedError:
            # Our pair, not the operator's promise: the claim keeps its token (configuration).
            self._observer.record(CredentialOutcome("imsClientRefused"))
            raise
        except MalformedExchangeError as exc:
            # IMS rolled the token but sent no access token: keep the roll (the old one is
            # spent), stop the batch for now; the run resumes with a live token.
            self._roll(run_id, read, exc.rolled)
            self._observer.record(CredentialOutcome("imsUnavailable"))
            raise SweepImsUnavailableError(run_id) from None

    def _roll(self, run_id: str, read: _ClaimRead, rolled: str) -> None:
        claim = RunClaim(run_id=run_id, promise_token=_seal(self._cipher, run_id, rolled))
        try:
            self._store.save(
                run_claim_name(run_id), claim.model_dump(mode="json"), expected_etag=read.etag
            )
        except StaleCheckpointError as exc:
            # Another invocation wrote the claim first: what we got is stored nowhere.
            self._ims.invalidate(rolled)
            raise RunInProgressError(run_id) from exc

    def _dead(self, run_id: str, read: _ClaimRead, dead: str) -> NoReturn:
        """A refused exchange: scrub (unless another invocation rolled it) and stop the run."""
        if _read(self._store, run_id).etag != read.etag:
            # Rolled under us by a concurrent invocation: its token is alive, ours was not.
            raise RunInProgressError(run_id)
        self._observer.record(CredentialOutcome("needsReauth"))
        self.scrub(run_id, "needsReauth", already_dead=dead)
        raise SweepNeedsReauthError(run_id)

    def scrub(self, run_id: str, ended: RunClaimEnd, *, already_dead: str | None = None) -> None:
        """Invalidate the claim's live tokens (best effort), then write it without any."""
        for _ in range(_SCRUB_ATTEMPTS):
            read = _read(self._store, run_id)
            if read.etag is None:
                return  # no claim: nothing was ever handed over
            if read.claim is not None:
                if not read.claim.holds_token() and read.claim.ended is not None:
                    return  # scrubbed before
                for sealed in (read.claim.handover, read.claim.promise_token):
                    if sealed is not None and sealed != already_dead:
                        self._invalidate(run_id, sealed)
            scrubbed = RunClaim(run_id=run_id, ended=ended).model_dump(mode="json")
            try:
                self._store.save(run_claim_name(run_id), scrubbed, expected_etag=read.etag)
            except StaleCheckpointError:
                continue  # a handover or a roll landed meanwhile: read it again
            return

    def _invalidate(self, run_id: str, sealed: str) -> None:
        """Best effort: a failure is counted and logged, never raised (the token expires)."""
        try:
            confirmed = self._ims.invalidate(_open(self._cipher, run_id, sealed))
        except Exception:
            confirmed = False
        if not confirmed:
            self._observer.record(CredentialOutcome("invalidateFailed"))


class RunTokenSession:
    """One batch's hold on its run's authority, for the Semrush client's token holder.

    The first :meth:`access_token` exchanges (and rolls) the run's token; later calls reuse the
    access token while a call would end inside its lifetime, and exchange again once it would
    not; ``refresh=True`` (the client's one retry after a 401) exchanges again.
    """

    def __init__(self, tokens: RunTokens, run_id: str) -> None:
        self._tokens = tokens
        self.run_id = run_id
        self._access: str | None = None
        self._lifetime: AccessLifetime | None = None

    @property
    def exchanged(self) -> bool:
        """True once this batch has exchanged the run's token."""
        return self._access is not None

    def access_token(self, *, refresh: bool = False) -> str:
        """The operator's access token for this batch (see the class docstring)."""
        fresh = self._lifetime is not None and self._tokens.freshness.presentable(self._lifetime)
        if self._access is None or refresh or not fresh:
            self._access, self._lifetime = self._tokens.exchange(self.run_id)
        return self._access

    def __repr__(self) -> str:
        return f"RunTokenSession(run_id={self.run_id!r}, exchanged={self.exchanged})"
