"""Where the Semrush bearer token comes from: the request's user (IMS mode) or a fixed string.

In IMS mode the token is the current request's freshly exchanged access token, held by
:mod:`.request_authority` (the worker) or the Sweep's session holder; a fixed token is for the
local simulator only (a loopback origin). The client asks for the token on every request and
for a refreshed one after a 401. No message raised here ever holds the token.
"""

from __future__ import annotations

from typing import Protocol


class TokenProvider(Protocol):
    """Supplies the bearer token for the Semrush User Manager API."""

    def get_token(self, *, refresh: bool = False) -> str:
        """Return the current token; ``refresh=True`` bypasses any cache (after a 401)."""
        ...


class TokenProviderError(RuntimeError):
    """The token could not be obtained; the message never holds the token or secret content."""


class StaticTokenProvider:
    """A fixed token (local runs against the simulator, tests).

    Args:
        token: The bearer token; must be non-blank.
    """

    def __init__(self, token: str) -> None:
        if not token.strip():
            raise TokenProviderError("the Semrush token is blank")
        self._token = token

    def get_token(self, *, refresh: bool = False) -> str:
        """Return the fixed token; a refresh has nothing newer to fetch."""
        return self._token

    def __repr__(self) -> str:
        # The default dataclass-like repr would print the token into any debug output.
        return "StaticTokenProvider(token=***)"
