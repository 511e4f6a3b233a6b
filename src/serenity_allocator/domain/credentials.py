"""A request's user authority as values: what ending it did, and how long its access lives.

No token in any of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

SEMRUSH_SCOPE: Final = "semrush"
"""The scope an exchanged token carries only through the deployment's Semrush pair
(ims-promise-tokens.md): a token without it is refused by Semrush whatever its user."""


@dataclass(frozen=True)
class CredentialEnd:
    """The result of invalidating and scrubbing a request's promise token.

    ``invalidated``: True when IMS confirmed, False when it did not (best effort: logged and
    counted, the outcome stands), None when no token was invalidated (none held, or dead).
    ``scrub_error``: why the record kept its token (an AWS code), None when scrubbed.
    """

    invalidated: bool | None
    scrub_error: str | None = None


ASSUMED_ACCESS_LIFETIME_S = 299
"""An exchange answer without a usable ``expires_in`` is taken to live this long: the figure
both of Adobe's published IMS clients' fixtures carry (ims-promise-tokens.md, "Verified against
the upstream's own clients"); never longer, the safe side."""


@dataclass(frozen=True)
class AccessLifetime:
    """When an exchanged access token stops being presentable, on the caller's monotonic clock.

    Measured from the moment the exchange was SENT (IMS issued the token later, so the token
    is never thought younger than it is). ``expires_in`` is IMS's, in seconds.
    """

    expires_at: float

    @classmethod
    def of(cls, sent_at: float, expires_in: int | None) -> AccessLifetime:
        """The lifetime of a token whose exchange was sent at ``sent_at``."""
        seconds = ASSUMED_ACCESS_LIFETIME_S if expires_in is None else max(0, expires_in)
        return cls(sent_at + seconds)

    def outlives(self, now: float, call_s: float) -> bool:
        """True when a call started ``now`` and lasting ``call_s`` ends before the token dies."""
        return now + call_s < self.expires_at


@dataclass(frozen=True)
class TokenFreshness:
    """How a holder judges an exchanged access token before presenting it.

    ``clock``: monotonic seconds (injected; the same clock the exchange's send time is read
    on). ``call_s``: the longest one call presenting the token may last (its timeout): a token
    that would die before such a call ends is exchanged again first.
    """

    clock: Callable[[], float]
    call_s: float = 0.0

    def lifetime_of(self, sent_at: float, expires_in: int | None) -> AccessLifetime:
        """The lifetime of a token whose exchange was sent at ``sent_at`` (this clock)."""
        return AccessLifetime.of(sent_at, expires_in)

    def presentable(self, lifetime: AccessLifetime) -> bool:
        """True when a call started now ends before the token's lifetime does."""
        return lifetime.outlives(self.clock(), self.call_s)
