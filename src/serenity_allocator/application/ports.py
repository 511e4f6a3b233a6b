"""Ports the use cases own: where outcomes, dead letters, reclaim releases and reports go.

Adapters implement them (EventBridge, SQS, Powertools); tests hand in fakes. Each port names
only what the use cases call, so a fake needs nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from ..domain.pool_watch import PoolLowWarning
from ..domain.ports import AllocationObserver


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


class WorkerObserver(AllocationObserver, Protocol):
    """What the worker reports besides the domain's measurements: metrics and structured logs.

    Recording is best-effort in every implementation: a report never changes control flow.
    """

    def message_started(
        self,
        message_id: str,
        workspace_id: str,
        request_id: str | None,
        kind: str | None,
        receive_count: int,
    ) -> None:
        """A record is being handled: later reports carry these keys."""
        ...

    def queue_lag(self, lag_ms: float) -> None:
        """Time the record waited on the queue before this receive."""
        ...

    def invalid_message(self, reason: str) -> None:
        """A record failed validation (it goes to the DLQ with ``reason``)."""
        ...

    def disabled_noop(self) -> None:
        """An ensure completed without a call because dynamic allocation is off."""
        ...

    def coalesced(self, extra_requests: int) -> None:
        """One combined top-up also served ``extra_requests`` requests behind its leader."""
        ...

    def reclaim(self, result: str, count: int = 1) -> None:
        """Sibling reclaim: ``enqueued`` (count releases), ``parked``, ``served``, ``exhausted``."""
        ...

    def parked_for_reclaim(self, siblings: Sequence[str]) -> None:
        """An ensure waits for releases enqueued on ``siblings``."""
        ...

    def completed(self, outcome: AllocationOutcome) -> None:
        """A request reached its terminal outcome."""
        ...

    def ledger_event(self, event: str) -> None:
        """A request ledger event happened to a request.

        ``replayed``: a stored outcome published again, nothing applied; ``deadLettered``: a
        terminal dead letter stored; ``superseded``: a redrive replaced a dead letter;
        ``duplicate``: a second record of one request id in a batch, not applied.
        """
        ...

    def will_retry(
        self, error_code: str, *, final_receive: bool, expected: bool, error: Exception
    ) -> None:
        """A request failed for now; SQS brings it back (or, on the final receive, the DLQ).

        ``expected`` is False for a failure no rule foresaw (a bug: log it with its trace).
        """
        ...

    def outcomes_not_published(self, error: Exception) -> None:
        """A chunk of outcomes could not be published; its requests will be retried."""
        ...

    def pool_low(self, warning: PoolLowWarning) -> None:
        """An org pool is running low (advisory)."""
        ...

    def pool_low_not_published(self, error: Exception) -> None:
        """A pool-low event could not be published (advisory; requests are unaffected)."""
        ...

    def flush(self) -> None:
        """Write out what this invocation recorded."""
        ...
