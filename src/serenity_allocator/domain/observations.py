"""The observer vocabulary: one frozen value per thing that happened, recorded through one method.

The rules report :data:`AllocationEvent` values through the domain's port
(:class:`.AllocationObserver`); the Allocator's use cases add the worker's own
(:mod:`.worker_events`) and report every ``WorkerEvent`` through the application's
``WorkerObserver``. The values live here, beside
the other domain values, so the Powertools reporter (an adapter: it imports the domain only)
can map each type to its metric through one table checked against the metric catalog
(``adapters/observability.py``): a new measurement is a new value here and one row there.

``Rejected`` and ``TightPoolFallback`` are verdicts: the worker holds them until the attempt's
result stands (:class:`~serenity_allocator.application.allocator.attempt_observer.AttemptObserver`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .model import AiResources


@dataclass(frozen=True)
class HeadroomChecked:
    """One ensure finished the headroom check (``hot-path``, ``topped-up``, ``unmetered``)."""

    outcome: str


@dataclass(frozen=True)
class TransferTimed:
    """One transfer call on a path (``fail-fast`` or ``settle``) ended after ``latency_ms``.

    Accepted or refused alike; the call alone (no retry sleep, no settle poll).
    """

    path: str
    latency_ms: float


@dataclass(frozen=True)
class PoolChecked:
    """The advisory pool read of ``parent_id`` returned ``pool`` (free counts, ratios)."""

    parent_id: str
    pool: AiResources


@dataclass(frozen=True)
class Rejected:
    """An allocation was refused for ``reason`` (an error code). A verdict."""

    reason: str


@dataclass(frozen=True)
class NotReadyRetry:
    """A transfer met ``workspace not ready`` and will be retried."""


@dataclass(frozen=True)
class ReleaseFinished:
    """A release ended with ``outcome`` (``released``, ``nothing-to-release``, ...)."""

    outcome: str


@dataclass(frozen=True)
class TightPoolFallback:
    """The exact-totals fallback after a pool-exhausted top-up ``saved`` or ``rejected`` it.

    A verdict.
    """

    result: str


@dataclass(frozen=True)
class TieredWorkspaceMet:
    """A request met a workspace in the tiered prompt shape as its ``child`` or ``pool``.

    Counted whatever the request's fate (it says where the allocator is blind).
    """

    role: str


CredentialOutcomeName = Literal[
    "exchanged",
    "noCredential",
    "needsReauth",
    "accessDenied",
    "unauthorized",
    "imsUnavailable",
    "imsClientRefused",
    "semrushScopeMissing",
    "invalidateFailed",
]


@dataclass(frozen=True)
class CredentialOutcome:
    """What became of a request's (or a sweep run's) user authority: one count per occurrence.

    ``exchanged``: a session opened (promise exchanged, rolled token stored); the terminal
    ``noCredential``/``needsReauth``/``accessDenied``; ``unauthorized``: Semrush refused a fresh
    token with 401, the record comes back (a burst is a credential incident);
    ``imsUnavailable``: an exchange failed for now (429/5xx/timeout); ``imsClientRefused``: IMS
    refused the deployment's client pair (``invalid_client``: configuration, the record comes
    back); ``semrushScopeMissing``: an exchanged token without the ``semrush`` scope (the
    wrong pair: configuration, the record comes back); ``invalidateFailed``: IMS did not
    confirm the invalidation at the end (the outcome stands). ``reason`` is a code for the log
    line, never a token.
    """

    outcome: CredentialOutcomeName
    reason: str | None = None


AllocationEvent = (
    HeadroomChecked
    | TransferTimed
    | PoolChecked
    | Rejected
    | NotReadyRetry
    | ReleaseFinished
    | TightPoolFallback
    | TieredWorkspaceMet
    | CredentialOutcome
)
"""Everything the domain's rules report."""

VERDICTS = (Rejected, TightPoolFallback)
"""The events that judge an attempt (held until its result stands)."""
