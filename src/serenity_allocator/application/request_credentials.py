"""A request's user authority through one batch (IMS mode; docs/credentials.md, ADR 0016).

Per request, before its first Semrush call: open (read the record, exchange, store the rolled
token) and bind its access token; after its calls: unbind. A terminal outcome ends it
(invalidate the current promise, scrub the record; a dead or missing promise is only
scrubbed); a retryable failure keeps the rolled token on the record for the next receive.

An exchange starts only when a whole IMS call (and the store of the rolled token) fits before
the applying deadline (``Deadlines.fits_ims_exchange``); otherwise the record fails out of time
with its still-valid token and comes back.

A coalesced run admits a member only when its own token can read the child, at the leader's
turn, before the combined transfer; a member that fails leaves the run and, at its own turn,
ends alone with what refused it, fails again with what kept its session from opening (its
record comes back), or tries alone with the session opened at admission (a transient read).

Refusals: ``noCredential`` and ``needsReauth`` end ``failed`` and dead-lettered with that
reason; Semrush 403, or 401 after one re-exchange, ends ``rejected / accessDenied``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..domain.coalescing import EnsureRun
from ..domain.errors import (
    AccessDeniedError,
    AllocationError,
    ImsUnavailableError,
    NeedsReauthError,
    NoCredentialError,
    OutOfTimeError,
    UpstreamError,
)
from ..domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from ..domain.observations import CredentialOutcome
from ..domain.ports import WorkspaceGateway
from ..domain.worker_events import CredentialNotScrubbed
from .credential_ports import CredentialBroker, CredentialEnd, CredentialSession
from .deadlines import Deadlines
from .ports import WorkerObserver

Request = EnsureRequest | ReleaseRequest

REFUSED_UPSTREAM_STATUSES = frozenset({401, 403})
"""Semrush answers that mean "this user cannot reach this workspace" with a fresh token (the
client re-exchanges once after a 401 before it raises one)."""
DEAD_LETTERED_REFUSALS = frozenset({NoCredentialError.code, NeedsReauthError.code})
"""Refusals that go to the DLQ with their reason: a human re-mints, then redrives."""


@dataclass
class RequestCredentials:
    """The batch's open sessions over the broker, and the members a probe refused."""

    broker: CredentialBroker
    observer: WorkerObserver
    deadlines: Deadlines
    sessions: dict[str, CredentialSession] = field(default_factory=dict)
    refused: dict[str, Exception] = field(default_factory=dict)
    """Request ids a coalescing probe refused, or whose session could not be opened there:
    each raises this at its own turn (a refusal ends it; anything else fails its record, which
    comes back), so one batch never opens a request's session twice."""

    def act_as(self, request: Request) -> None:
        """Open the request's session (unless open already) and bind its access token."""
        refused = self.refused.pop(request.request_id, None)
        if refused is not None:
            raise refused
        session = self.sessions.get(request.request_id)
        if session is None:
            session = self._open(request)
        self.broker.bind(session)

    def step_aside(self) -> None:
        """Unbind: no Semrush call runs until the next request is bound."""
        self.broker.bind(None)

    def keep(self, request_id: str) -> None:
        """A retryable failure: the batch forgets the session.

        The rolled token stays on the record; the next receive exchanges it.
        """
        self.sessions.pop(request_id, None)

    def end(self, outcome: AllocationOutcome, *, invalidate: bool = True) -> None:
        """The request is terminal: invalidate its promise (best effort) and scrub the record.

        ``invalidate=False`` only scrubs (after the applying phase, when no IMS call fits).
        """
        request_id = outcome.request_id
        session = self.sessions.pop(request_id, None)
        self.refused.pop(request_id, None)
        if not self.deadlines.fits_aws_call():
            # Never outlive the function for a cleanup: the record expires with its TTL.
            self.observer.record(CredentialNotScrubbed(request_id, OutOfTimeError.code))
            return
        if outcome.error_code in DEAD_LETTERED_REFUSALS or not invalidate:
            ended = self.broker.scrub(request_id)  # the promise is dead or was never usable
        else:
            ended = self.broker.end(request_id, outcome.workspace_id, session)
        self._report_end(request_id, ended)

    def admit(self, run: EnsureRun, gateway: WorkspaceGateway) -> None:
        """Keep in ``run`` only the members whose own token can read the child.

        At the leader's turn, before the combined transfer; the leader's token is bound again
        afterwards (the combined transfer is made with it).
        """
        leader = run.requests[0]
        leaving: list[str] = []
        for message_id, request in list(zip(run.members, run.requests, strict=True))[1:]:
            try:
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
                leaving.append(message_id)
        try:
            self.act_as(leader)
        finally:
            for message_id in leaving:
                run.leave(message_id)

    def _open(self, request: Request) -> CredentialSession:
        if not self.deadlines.fits_ims_exchange():
            # Never cut an exchange short: the record fails with its still-valid token.
            raise OutOfTimeError()
        try:
            session = self.broker.open(request.request_id, request.workspace_id)
        except ImsUnavailableError:
            self.observer.record(CredentialOutcome("imsUnavailable"))
            raise
        self.sessions[request.request_id] = session
        self.observer.record(CredentialOutcome("exchanged"))
        return session

    def _report_end(self, request_id: str, ended: CredentialEnd) -> None:
        if ended.invalidated is False:
            self.observer.record(CredentialOutcome("invalidateFailed", reason="notConfirmed"))
        if ended.scrub_error is not None:
            self.observer.record(CredentialNotScrubbed(request_id, ended.scrub_error))


def credential_refusal(exc: Exception) -> AllocationError | None:
    """The terminal credential refusal ``exc`` stands for (IMS mode), or None (not one).

    Its outcome (:func:`.failure_of`): ``noCredential``/``needsReauth`` end ``failed`` and
    dead-lettered (:data:`DEAD_LETTERED_REFUSALS`), ``accessDenied`` ends ``rejected``.
    """
    if isinstance(exc, NoCredentialError | NeedsReauthError | AccessDeniedError):
        return exc
    if isinstance(exc, UpstreamError) and exc.status in REFUSED_UPSTREAM_STATUSES:
        return AccessDeniedError()
    return None
