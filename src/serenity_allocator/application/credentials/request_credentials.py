"""A request's user authority through one batch (IMS mode; docs/credentials.md, ADR 0016).

Per request, before its first Semrush call: open (read the record, exchange, store the rolled
token) and bind its access token; after its calls: unbind. A terminal outcome ends it
(invalidate the current promise, scrub the record; a dead or missing promise is only
scrubbed); a retryable failure keeps the rolled token on the record for the next receive.

Sessions are opened ahead, concurrently, at the batch's start (with the container's bounded
pool), so every exchange has the applying phase before it, not what the records ahead of it
left. An exchange starts only when a whole IMS call (and the store of the rolled token) fits
before the invocation's own deadline (``Deadlines.fits_ims_exchange``); otherwise the record
fails out of time with its still-valid token and comes back. A session opened ahead is the
request's as soon as IMS answered: its roll is stored beside the request's first Semrush calls
(reads), and is waited for before anything is applied for it (:meth:`rolls_stored`, before a
transfer), before its record comes back (``keep``) and before its record is scrubbed. Ends
(the invalidation and the scrub, side by side) run beside the rest of the batch and are waited
for before the invocation returns.

A coalesced run admits a member only when its own token can read the child, at the leader's
turn, before the combined transfer; a member that fails leaves the run and, at its own turn,
ends alone with what refused it, fails again with what kept its session from opening (its
record comes back), or tries alone with the session opened at admission (a transient read).

IMS refusing the consumer pair itself (``invalid_client``: ``imsClientRefused``) is our
configuration, never the user's: transient (the record comes back with its promise), counted
and alarmed, and on the final receive it ends ``failed / imsClientRefused`` with the promise
KEPT, so a redrive after the pair is fixed runs; so is an exchanged token IMS says lacks the
``semrush`` scope (``semrushScopeMissing``: the wrong pair), told apart from a non-member
before any Semrush call. Refusals: ``noCredential``, ``needsReauth`` and
``credentialUnreadable`` (a record the worker cannot read) end ``failed`` and dead-lettered
with that reason; Semrush 403 ends ``rejected / accessDenied``; a record written for another
child ends ``rejected / requestIdConflict`` and is left to its own request. A 401 after one
re-exchange is transient
(counted ``unauthorized``, alarmed) until the final receive, which ends it ``accessDenied``.

Its ports are its own, declared here (:class:`CredentialBroker`, :class:`CredentialSession`:
open, bind, end; the adapter ``adapters.request_authority`` implements them). No method returns
or raises a token. Static mode (local tools) wires no broker at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Protocol

from ...domain.coalescing import EnsureRun
from ...domain.errors import (
    AccessDeniedError,
    AllocationError,
    CredentialNotOwnedError,
    CredentialUnreadableError,
    ImsClientRefusedError,
    ImsUnavailableError,
    NeedsReauthError,
    NoCredentialError,
    OutOfTimeError,
    SemrushScopeMissingError,
    UpstreamError,
)
from ...domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from ...domain.model import CredentialEnd
from ...domain.observations import CredentialNotScrubbed, CredentialOutcome
from ...domain.ports import WorkspaceGateway
from ..deadlines import Deadlines
from ..ports import WorkerObserver

Request = EnsureRequest | ReleaseRequest


class CredentialSession(Protocol):
    """One request's open authority: its access token and its current (rolled) promise."""

    @property
    def request_id(self) -> str:
        """The request this authority belongs to."""
        ...


class CredentialBroker(Protocol):
    """Opens, binds and ends requests' user authority (the credentials table + IMS)."""

    def open(self, request_id: str, workspace_id: str) -> CredentialSession:
        """Read the record, exchange the promise, store the rolled one; nothing bound yet.

        Raises:
            NoCredentialError: No usable record (absent, expired, scrubbed, undecryptable).
            NeedsReauthError: IMS refused the exchange (401/403).
            ImsUnavailableError: IMS 429/5xx/unreachable within the retries and the deadline.
            CredentialStoreUnavailableError: the table or the key could not be used.
            OutOfTimeError: no time left for the exchange.
        """
        ...

    def exchange(self, request_id: str, workspace_id: str) -> CredentialSession:
        """Read the record and exchange the promise; the rolled one is not stored yet.

        ``open`` in two halves: :meth:`store_roll` stores the roll, beside the request's first
        Semrush calls. An answer that fails the request here (no access token, no ``semrush``
        scope) has its roll stored before it raises. Raises as ``open`` does.
        """
        ...

    def store_roll(self, session: CredentialSession) -> None:
        """Store an exchanged session's rolled token (tried twice; then kept for ``keep``).

        Raises:
            NoCredentialError: The record is gone (its fresh chain was invalidated).
        """
        ...

    def invalidate(self, session: CredentialSession) -> bool | None:
        """Invalidate the session's current promise token at IMS; never raises.

        True when IMS confirmed. ``end``'s first half: the scrub (:meth:`scrub`) may run
        beside it.
        """
        ...

    def user_of(self, session: CredentialSession) -> str | None:
        """Who IMS says the session's token acts for, when its token says so (else None).

        Never a token: a user id, compared only (requests of one user on one child are
        admitted by one read).
        """
        ...

    def keep(self, session: CredentialSession) -> None:
        """The request comes back: make sure the record holds the session's rolled token.

        A roll the open could not store is tried again here; never raises.
        """
        ...

    def bind(self, session: CredentialSession | None) -> None:
        """Make ``session``'s access token the gateway's (None: unbound, calls fail closed)."""
        ...

    def end(
        self, request_id: str, workspace_id: str | None, session: CredentialSession | None
    ) -> CredentialEnd:
        """Invalidate the current promise token, then scrub the record; never raises.

        The token is the session's, else the stored one (when ``workspace_id`` is known). A
        failed invalidate or scrub is reported in the answer.
        """
        ...

    def scrub(self, request_id: str) -> CredentialEnd:
        """Scrub the record without invalidating (the promise is dead or was never usable)."""
        ...


REFUSED_UPSTREAM_STATUSES = frozenset({403})
"""Semrush answers that mean "this user cannot reach this workspace" with a fresh token."""
UNAUTHORIZED_STATUS = 401
"""Semrush refused the bearer itself, after the client's one re-exchange: in a burst this is a
credential incident of ours or IMS's (the fresh token not taken), not a non-member. Transient:
the record comes back with its rolled token, counted (``unauthorized``, alarmed), and only the
final receive ends it ``rejected / accessDenied``."""
DEAD_LETTERED_REFUSALS = frozenset(
    {NoCredentialError.code, NeedsReauthError.code, CredentialUnreadableError.code}
)
"""Refusals that go to the DLQ with their reason: a human re-mints, then redrives. Their
records are scrubbed, never invalidated (the promise is dead, absent or unreadable)."""
KEPT_AT_THE_END = frozenset({ImsClientRefusedError.code, SemrushScopeMissingError.code})
"""Terminal outcomes that are our configuration's fault, not the user's: the promise is kept
(neither invalidated nor scrubbed), so the redrive after the pair is fixed runs with it."""


@dataclass
class RequestCredentials:
    """The batch's open sessions over the broker, and the members a probe refused.

    With ``workers`` (a bounded thread pool of the container's), sessions are opened ahead,
    all at once at the batch's start (:meth:`open_ahead`), and ends run beside the rest of the
    batch; :meth:`await_ends` waits for all of them before the invocation returns. Without it,
    each call runs in place. Only the calling thread binds and records observations.
    """

    broker: CredentialBroker
    observer: WorkerObserver
    deadlines: Deadlines
    workers: Executor | None = None
    sessions: dict[str, CredentialSession] = field(default_factory=dict)
    refused: dict[str, Exception] = field(default_factory=dict)
    """Request ids a coalescing probe refused, or whose session could not be opened there:
    each raises this at its own turn (a refusal ends it; anything else fails its record, which
    comes back), so one batch never opens a request's session twice."""
    opening: dict[str, Future[CredentialSession]] = field(default_factory=dict)
    """Sessions opened ahead, by request id, until their request's turn takes them."""
    rolling: dict[str, Future[None]] = field(default_factory=dict)
    """The stores of the rolled tokens of sessions opened ahead, by request id, until waited
    for; one raises :class:`NoCredentialError` when its record is gone."""
    ending: list[tuple[str, Future[CredentialEnd], Future[bool | None] | None]] = field(
        default_factory=list
    )
    """Ends under way beside the batch (the scrub, and the invalidation beside it when one
    was sent), reported by :meth:`await_ends`."""

    def open_ahead(self, requests: Iterable[Request]) -> None:
        """Start opening these requests' sessions now, concurrently (with ``workers`` only).

        At the batch's start every exchange still has the whole applying phase before it, so
        none fails out of time for waiting behind the records ahead of it.
        """
        if self.workers is None:
            return
        for request in requests:
            if request.request_id not in self.opening:
                opened: Future[CredentialSession] = Future()
                self.opening[request.request_id] = opened
                self.rolling[request.request_id] = self.workers.submit(
                    self._exchange_then_roll, request.request_id, request.workspace_id, opened
                )

    def rolls_stored(self, requests: Sequence[Request]) -> None:
        """Before anything is applied for ``requests`` (the acting one first): rolls stored.

        Waits for the stores still under way (they ran beside the reads). A record found gone
        ends its request ``noCredential`` with nothing applied, as a roll inside the open did.

        Raises:
            NoCredentialError: the acting request's record is gone.
            MemberRecordGoneError: a member's is (the run splits; it is refused at its turn).
        """
        members_gone = False
        for position, request in enumerate(requests):
            failure = self._roll_failure(request.request_id)
            if failure is None:
                continue
            if position == 0:
                raise failure
            self.refused[request.request_id] = failure
            members_gone = True
        if members_gone:
            raise MemberRecordGoneError()

    def act_as(self, request: Request) -> None:
        """Open the request's session (unless open already) and bind its access token."""
        self.broker.bind(self._session(request))

    def step_aside(self) -> None:
        """Unbind: no Semrush call runs until the next request is bound."""
        self.broker.bind(None)

    def keep(self, request_id: str) -> None:
        """A retryable failure: the batch forgets the session.

        The rolled token stays on the record (stored again now if the open could not store
        it); the next receive exchanges it.
        """
        session = self.sessions.pop(request_id, None)
        # A store still under way lands before keep looks; a record it found gone has nothing
        # to keep (its fresh chain was invalidated there).
        gone = self._roll_failure(request_id) is not None
        if session is not None and not gone:
            self.broker.keep(session)

    def end(self, outcome: AllocationOutcome, *, invalidate: bool = True) -> None:
        """The request is terminal: invalidate its promise (best effort) and scrub the record.

        ``invalidate=False`` only scrubs (after the applying phase, when no IMS call fits).
        """
        request_id = outcome.request_id
        if outcome.error_code in KEPT_AT_THE_END:
            self.refused.pop(request_id, None)
            self.keep(request_id)
            return
        session = self._taken(request_id)
        self.refused.pop(request_id, None)
        if not self.deadlines.fits_aws_call():
            # Never outlive the function for a cleanup: the record expires with its TTL.
            self.observer.record(CredentialNotScrubbed(request_id, OutOfTimeError.code))
            return
        only_scrub = outcome.error_code in DEAD_LETTERED_REFUSALS or not invalidate
        if self.workers is None:
            self._report_end(request_id, self._ended(request_id, outcome, session, only_scrub))
            return
        if session is None:
            # The token to invalidate is the stored one: read before the scrub, in one call.
            ending = self.workers.submit(self._ended, request_id, outcome, None, only_scrub)
            self.ending.append((request_id, ending, None))
            return
        # The session's token is in hand: its invalidation and the scrub run side by side
        # (neither waits for the other); the scrub after the roll's store, never before it.
        invalidation = None if only_scrub else self.workers.submit(self.broker.invalidate, session)
        rolled = self.rolling.pop(request_id, None)
        self.ending.append(
            (request_id, self.workers.submit(self._scrubbed, request_id, rolled), invalidation)
        )

    def await_ends(self) -> None:
        """Wait for every open and end still under way; report what they did.

        Before the invocation returns: a thread frozen with the function mid-exchange would
        lose the answer (a spent promise on the record). Sessions opened ahead for records that
        never had a turn keep their rolled token on the record; they come back.
        """
        for request_id in list(self.opening):
            with contextlib.suppress(Exception):  # its record comes back; nothing to end
                self._session_of(request_id)
            self.sessions.pop(request_id, None)
        for rolled in self.rolling.values():
            rolled.exception()  # no store left under way: waited for, its failure is its own
        self.rolling.clear()
        for request_id, scrubbed, invalidation in self.ending:
            ended = scrubbed.result()
            if invalidation is not None:
                ended = CredentialEnd(invalidation.result(), ended.scrub_error)
            self._report_end(request_id, ended)
        self.ending.clear()

    def admit(self, run: EnsureRun, gateway: WorkspaceGateway) -> None:
        """Keep in ``run`` only the members whose own user can read the child.

        At the leader's turn, before the combined transfer. A member acting for the leader's
        user (as IMS's token says) is admitted without a read of its own: the leader's read,
        made before the combined transfer, answers for that user; every other user's token
        reads the child once. The leader's token is bound again afterwards (the combined
        transfer is made with it).
        """
        leader = run.requests[0]
        admitted_users: set[str] = set()
        leaving: list[str] = []
        try:
            leader_user = self._user_of(leader)
        except Exception:
            leader_user = None
        if leader_user is not None:
            admitted_users.add(leader_user)
        for message_id, request in list(zip(run.members, run.requests, strict=True))[1:]:
            if not self._admitted(request, gateway, admitted_users):
                leaving.append(message_id)
        try:
            self.act_as(leader)
        finally:
            for message_id in leaving:
                run.leave(message_id)

    def _admitted(
        self, request: EnsureRequest, gateway: WorkspaceGateway, admitted_users: set[str]
    ) -> bool:
        try:
            user = self._user_of(request)
            if user is not None and user in admitted_users:
                return True
            self.act_as(request)
            gateway.read_resources(request.workspace_id)
        except Exception as exc:
            refusal = credential_refusal(exc)
            if refusal is not None:
                self.refused[request.request_id] = refusal
            elif request.request_id not in self.sessions:
                # Not opened (IMS unavailable, out of time): its own turn does not exchange
                # the stored token again (a lost answer may have spent it already).
                self.refused[request.request_id] = exc
            return False
        if user is not None:
            admitted_users.add(user)
        return True

    def _user_of(self, request: Request) -> str | None:
        return self.broker.user_of(self._session(request))

    def _session(self, request: Request) -> CredentialSession:
        """The request's open session: opened ahead, earlier in the batch, or now."""
        refused = self.refused.pop(request.request_id, None)
        if refused is not None:
            raise refused
        if request.request_id in self.opening or request.request_id in self.sessions:
            return self._session_of(request.request_id)
        return self._open(request)

    def _session_of(self, request_id: str) -> CredentialSession:
        future = self.opening.pop(request_id, None)
        if future is None:
            return self.sessions[request_id]
        return self._opened(request_id, future.result)

    def _taken(self, request_id: str) -> CredentialSession | None:
        """The request's session, leaving the batch (an open under way is waited for)."""
        if request_id in self.opening:
            try:
                self._session_of(request_id)
            except Exception:
                return None
        return self.sessions.pop(request_id, None)

    def _open(self, request: Request) -> CredentialSession:
        """Open now, in place: read, exchange and the roll's store, one after the other."""

        def opening() -> CredentialSession:
            self._check_exchange_fits()
            return self.broker.open(request.request_id, request.workspace_id)

        return self._opened(request.request_id, opening)

    def _opened(
        self, request_id: str, opening: Callable[[], CredentialSession]
    ) -> CredentialSession:
        """The session ``opening`` gives (an open under way, or one now), counted either way."""
        try:
            session = opening()
        except ImsUnavailableError:
            self.observer.record(CredentialOutcome("imsUnavailable"))
            raise
        except ImsClientRefusedError:
            self.observer.record(CredentialOutcome("imsClientRefused"))
            raise
        except SemrushScopeMissingError:
            self.observer.record(CredentialOutcome("semrushScopeMissing"))
            raise
        self.sessions[request_id] = session
        self.observer.record(CredentialOutcome("exchanged"))
        return session

    def _check_exchange_fits(self) -> None:
        if not self.deadlines.fits_ims_exchange():
            # Never cut an exchange short: the record fails with its still-valid token.
            raise OutOfTimeError()

    def _exchange_then_roll(
        self, request_id: str, workspace_id: str, opened: Future[CredentialSession]
    ) -> None:
        """On a worker: the session is the request's once IMS answered; then the roll's store.

        Raises what the store raises (a record gone), into :attr:`rolling`.
        """
        try:
            self._check_exchange_fits()
            session = self.broker.exchange(request_id, workspace_id)
        except Exception as exc:
            opened.set_exception(exc)
            return
        opened.set_result(session)
        self.broker.store_roll(session)

    def _roll_failure(self, request_id: str) -> Exception | None:
        """Wait for the request's roll still under way, if any; what it raised, else None."""
        rolled = self.rolling.pop(request_id, None)
        failure = rolled.exception() if rolled is not None else None
        if failure is not None and not isinstance(failure, Exception):
            raise failure  # not a store's failure (an interrupt): never swallowed
        return failure

    def _scrubbed(self, request_id: str, rolled: Future[None] | None) -> CredentialEnd:
        # On a worker. The roll's task is running already (its session was taken from it), so
        # this wait ends; a gone record is scrubbed all the same (idempotent).
        if rolled is not None:
            rolled.exception()
        return self.broker.scrub(request_id)

    def _ended(
        self,
        request_id: str,
        outcome: AllocationOutcome,
        session: CredentialSession | None,
        only_scrub: bool,
    ) -> CredentialEnd:
        if only_scrub:
            return self.broker.scrub(request_id)  # the promise is dead or was never usable
        return self.broker.end(request_id, outcome.workspace_id, session)

    def _report_end(self, request_id: str, ended: CredentialEnd) -> None:
        if ended.invalidated is False:
            self.observer.record(CredentialOutcome("invalidateFailed", reason="notConfirmed"))
        if ended.scrub_error is not None:
            self.observer.record(CredentialNotScrubbed(request_id, ended.scrub_error))


class MemberRecordGoneError(Exception):
    """A coalesced member's record was gone when its roll was stored: the run splits.

    Raised before the combined transfer, so nothing was applied for anyone; the leader applies
    alone, and the member is refused (``noCredential``) at its own turn.
    """


class UnauthorizedError(AllocationError):
    """Semrush answered 401 to a fresh token, twice: transient until the final receive.

    Stands in for the upstream error, whose body may echo the tokens just exchanged (the
    client redacts only the bearer it sent): nothing of it is logged or raised.
    """

    code = "upstreamUnauthorized"
    message = "Semrush refused a freshly exchanged token as unauthenticated"
    transient = True


def is_unauthorized(exc: Exception) -> bool:
    """True for Semrush's 401 with a fresh token (transient until the final receive)."""
    if isinstance(exc, UnauthorizedError):
        return True
    return isinstance(exc, UpstreamError) and exc.status == UNAUTHORIZED_STATUS


def without_echo(exc: Exception) -> Exception:
    """``exc``, or for a Semrush 401 an :class:`UnauthorizedError` that carries no body."""
    if isinstance(exc, UpstreamError) and exc.status == UNAUTHORIZED_STATUS:
        clean = UnauthorizedError()
        clean.__suppress_context__ = True  # the 401's text never reaches a traceback
        return clean
    return exc


def credential_refusal(exc: Exception) -> AllocationError | None:
    """The terminal credential refusal ``exc`` stands for (IMS mode), or None (not one).

    Its outcome (:func:`.failure_of`): ``noCredential``/``needsReauth`` end ``failed`` and
    dead-lettered (:data:`DEAD_LETTERED_REFUSALS`), ``accessDenied`` ends ``rejected``.
    """
    if isinstance(
        exc,
        NoCredentialError
        | NeedsReauthError
        | AccessDeniedError
        | CredentialUnreadableError
        | CredentialNotOwnedError,
    ):
        return exc
    if isinstance(exc, UpstreamError) and exc.status in REFUSED_UPSTREAM_STATUSES:
        return AccessDeniedError()
    return None
