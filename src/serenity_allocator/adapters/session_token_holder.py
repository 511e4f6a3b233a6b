"""The Semrush client's token in IMS mode: whatever session the current request is bound to.

The client keeps one httpx client per container and asks its ``TokenProvider`` for the bearer
on every call. In IMS mode that provider is this holder: a request (a worker message, a sweep
batch) binds its session before its first Semrush call and unbinds after its last. Unbound, it
raises: no Semrush call is made without a user's authority (fail closed). A refresh (the
client's one retry after a 401) asks the session to exchange again.
"""

from __future__ import annotations

from typing import Protocol

from .token_provider import TokenProviderError


class TokenSession(Protocol):
    """A request's hold on its user's authority (it exchanges the promise token)."""

    def access_token(self, *, refresh: bool = False) -> str:
        """The user's access token; ``refresh=True`` exchanges again."""
        ...


class UnboundTokenError(TokenProviderError):
    """A Semrush call was attempted with no request's session bound (IMS mode)."""

    def __init__(self) -> None:
        super().__init__("no request's credential is bound: refusing a Semrush call")


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
