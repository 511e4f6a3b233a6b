"""Handlers that run INSIDE the consumer processes (``--handler MODULE:FUNCTION``)."""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Sequence
from typing import Any

from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.message_bodies import body_field

TRUSTING_HANDLER = f"{__name__}:trusting_standard_queue_handler"
PUBLISH_CRASH_HANDLER = f"{__name__}:crash_while_publishing_handler"
PUBLISH_CRASH_PROBABILITY_ENV = "HARNESS_PUBLISH_CRASH_PROBABILITY"
PUBLISH_CRASH_SEED_ENV = "HARNESS_PUBLISH_CRASH_SEED"


def trusting_standard_queue_handler(event: dict[str, Any], context: Any) -> Any:
    """The Allocator on a STANDARD queue, trusting the body for the message group.

    A standard queue has no MessageGroupId; this worker fills it from the body's
    ``workspace_id`` so the real handler accepts the records (and groups them within a batch),
    which is exactly what it cannot do across batches and containers.
    """
    from serenity_allocator.handlers.allocator import lambda_handler

    for record in event.get("Records", []):
        workspace_id = body_field(str(record.get("body", "")), "workspace_id")
        if workspace_id is not None:
            record.setdefault("attributes", {})["MessageGroupId"] = workspace_id
    return lambda_handler(event, context)


class _CrashingOutcomePublisher(OutcomePublisher):
    """Publishes part of a chunk of outcomes, then SIGKILLs its process (sometimes)."""

    def __init__(self, bus_name: str, probability: float, rng: random.Random) -> None:
        super().__init__(bus_name)
        self._probability = probability
        self._rng = rng

    def publish(self, outcomes: Sequence[AllocationOutcome]) -> None:
        """Publish; with the configured probability, die halfway through first."""
        if outcomes and self._rng.random() < self._probability:
            # The first half went out, the rest never will: a crash in the middle of
            # publishing. Redelivery replays the published ones (at-least-once).
            super().publish(outcomes[: max(1, len(outcomes) // 2)])
            os.kill(os.getpid(), signal.SIGKILL)
        super().publish(outcomes)


def crash_while_publishing_handler(event: dict[str, Any], context: Any) -> Any:
    """The real Allocator handler whose outcome publisher sometimes dies mid-publish.

    Configured by :data:`PUBLISH_CRASH_PROBABILITY_ENV` and :data:`PUBLISH_CRASH_SEED_ENV`.
    """
    from serenity_allocator.handlers import allocator

    runtime = allocator.get_runtime()
    publisher = runtime.outcomes
    if isinstance(publisher, OutcomePublisher) and not isinstance(
        publisher, _CrashingOutcomePublisher
    ):
        probability = float(os.environ.get(PUBLISH_CRASH_PROBABILITY_ENV) or 0.0)
        seed = os.environ.get(PUBLISH_CRASH_SEED_ENV) or "0"
        runtime.outcomes = _CrashingOutcomePublisher(
            publisher.bus_name, probability, random.Random(f"{seed}:{os.getpid()}")
        )
    return allocator.lambda_handler(event, context)
