"""The Sweep's Semrush token in IMS mode: whatever batch session is bound.

The client keeps one httpx client per container and asks its ``TokenProvider`` for the bearer
on every call. In IMS mode that provider is this holder: a request (a worker message, a sweep
batch) binds its session before its first Semrush call and unbinds after its last. Unbound, it
raises: no Semrush call is made without a user's authority (fail closed). A refresh (the
client's one retry after a 401) asks the session to exchange again.

The Allocator's holder (``request_authority.RequestTokenHolder``) holds an opened request
session; the Sweep's session is lazy instead (the batch's first Semrush call exchanges, so a
refusal that needs no upstream call never spends the run's token), hence a holder of its own
over the session's one method.
"""

from __future__ import annotations

from typing import Protocol

from .request_authority import UnboundTokenError


class TokenSession(Protocol):
    """A request's hold on its user's authority (it exchanges the promise token)."""

    def access_token(self, *, refresh: bool = False) -> str:
        """The user's access token; ``refresh=True`` exchanges again."""
        ...


class SessionTokenHolder:
    """A ``TokenProvider`` reading the bound session (single-threaded per container)."""

    def __init__(self) -> None:
        self._session: TokenSession | None = None

    def bind(self, session: TokenSession) -> None:
        """Bind the current request's session (before its first Semrush call)."""
        self._session = session

    def unbind(self) -> None:
        """Forget the session (after the request's last Semrush call)."""
        self._session = None

    def get_token(self, *, refresh: bool = False) -> str:
        """The bound session's access token.

        Raises:
            UnboundTokenError: no session is bound.
        """
        if self._session is None:
            raise UnboundTokenError()
        return self._session.access_token(refresh=refresh)

    def __repr__(self) -> str:
        return f"SessionTokenHolder(bound={self._session is not None})"
