"""The Semrush operations the client sends and the table of what it may send again.

Apart from the request loop (:mod:`.semrush_client`) so the retry-safety rules read in one
place: which operation is idempotent (a transfer is an absolute set, so it is; creating a child
is not), which answers and transport failures are retried, and how long a retry waits
(``Retry-After`` first, else an exponential backoff, each capped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import httpx

MAX_RETRY_AFTER_S: Final = 10.0
"""Ceiling on an honoured ``Retry-After``: a worker's time budget is seconds, not minutes."""

MAX_BACKOFF_S: Final = 8.0
"""Ceiling on one exponential backoff sleep."""

RETRY_AFTER_STATUSES: Final = frozenset({429, 503})
# Transport failures that prove the request never reached the server: safe to retry even for a
# non-idempotent call. A read timeout or a dropped connection may come after the server acted.
NOT_SENT_ERRORS: Final = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class Operation:
    """One User Manager route and whether sending it twice is harmless."""

    name: str
    method: str
    route: str
    """Path under the API base with ``{id}`` for the (quoted) workspace id."""
    idempotent: bool


# On a master id this is the org pool. Never ``/v1/workspaces/{id}/parent/resources``: that
# answers the workspace's OWN allocation, not the pool (the doc's read-side facts; pinned by
# tests/unit/adapters/test_settle_and_pool_reads.py).
READ_RESOURCES: Final = Operation(
    "read_resources", "GET", "/v1/workspaces/{id}/resources", idempotent=True
)
# An absolute set: sending the same totals twice moves nothing, so retrying is harmless.
TRANSFER: Final = Operation(
    "transfer", "POST", "/v2/workspaces/{id}/resources/transfer", idempotent=True
)
READ_STATUS: Final = Operation("read_status", "GET", "/v1/workspaces/{id}/status", idempotent=True)
LIST_FAMILY: Final = Operation("list_family", "GET", "/v1/workspaces/{id}/family", idempotent=True)
# A second POST after an unanswered first one could create a second child.
CREATE_CHILD: Final = Operation(
    "create_child", "POST", "/v2/workspaces/{id}/child", idempotent=False
)


def is_retryable_status(op: Operation, status: int) -> bool:
    """True when an answer with ``status`` may be sent again for ``op``."""
    if status == 429:
        # The rate limiter refused the request before it was handled: safe even to create.
        return True
    return op.idempotent and 500 <= status <= 599


def is_resendable(op: Operation, exc: httpx.TransportError) -> bool:
    """True when a transport failure may be sent again: idempotent, or provably never sent."""
    return op.idempotent or isinstance(exc, NOT_SENT_ERRORS)


def backoff_delay(base_s: float, retry: int) -> float:
    """The exponential backoff before retry number ``retry`` (0 first), capped."""
    return float(min(base_s * 2**retry, MAX_BACKOFF_S))


def retry_delay(status: int, retry_after: str | None, base_s: float, retry: int) -> float:
    """The pause before retrying an answer: ``Retry-After`` (capped) on 429/503, else backoff."""
    if status in RETRY_AFTER_STATUSES:
        seconds = retry_after_s(retry_after)
        if seconds is not None:
            return min(seconds, MAX_RETRY_AFTER_S)
    return backoff_delay(base_s, retry)


def retry_after_s(value: str | None) -> float | None:
    """The delay-seconds form of ``Retry-After``; None for none, an HTTP-date or garbage."""
    # An HTTP-date falls back to the backoff (no clock needed).
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds
