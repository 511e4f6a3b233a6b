"""Ports the use cases own: where outcomes, dead letters, reclaim releases and reports go.

Adapters implement them (EventBridge, SQS, Powertools); tests hand in fakes. Each port names
only what the use cases call, so a fake needs nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from ..domain.observations import WorkerEvent


class OutcomeSink(Protocol):
    """Where terminal outcomes and pool-low warnings are announced (the outcome bus)."""

    def publish(self, outcomes: Sequence[AllocationOutcome]) -> None:
        """Publish one event per outcome; raise when any was not published."""
        ...

    def publish_pool_low(self, detail: Mapping[str, object]) -> None:
        """Publish one pool-low warning; raise when it was not published."""
        ...


class DeadLetterSink(Protocol):
    """Where an invalid message goes, unchanged, with the reason it was refused."""

    def send_invalid(
        self,
        body: str,
        *,
        reason: str,
        group_id: str | None,
        dedup_id: str,
        source_message_id: str,
    ) -> None:
        """Send the original body with its reason; raise when it could not be sent."""
        ...


class ReleaseEnqueuer(Protocol):
    """Puts ready-built requests on their children's FIFO groups, in order."""

    def enqueue_many(self, requests: Sequence[EnsureRequest | ReleaseRequest]) -> list[str]:
        """Enqueue every request; return their ids; raise when any was not enqueued."""
        ...


class WorkerObserver(Protocol):
    """What the worker reports, the domain's measurements included: metrics and structured logs.

    One vocabulary of typed values (``domain/observations.py``), one recording method.
    Recording is best-effort in every implementation: a report never changes control flow. A
    ``WorkerObserver`` is also the domain's ``AllocationObserver``.
    """

    def record(self, event: WorkerEvent, /) -> None:
        """Record one event."""
        ...

    def flush(self) -> None:
        """Write out what this invocation recorded."""
        ...
