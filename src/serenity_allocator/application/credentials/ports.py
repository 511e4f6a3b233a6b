"""The port of a request's user authority (IMS mode): open, bind, end.

The worker acts as the user who asked (docs/credentials.md, ADR 0016): before a request's
first Semrush call its promise token is exchanged and the rolled one stored (``open``), the
access token is bound for that request's calls (``bind``), and at its terminal state the
promise is invalidated and the record scrubbed (``end``). No method returns or raises a token.
Static mode (local tools) wires no broker at all.
"""

from __future__ import annotations

from typing import Protocol

from ...domain.credentials import CredentialEnd

__all__ = ["CredentialBroker", "CredentialEnd", "CredentialSession"]


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
