"""The Sweep Lambda: one resumable batch of a rightsizing run per invocation.

Invoked by an operator (dry run first) or by the state machine that loops it until ``done``.
The payload is validated before any upstream call; the result is the state machine's input for
its Choice (``done``, ``aborted``, ``counts.unexpected_errors``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..adapters.observability import MetricsObserver, MetricsRecorder, logger, metrics
from ..domain.ports import Clock, Sleeper, WorkspaceGateway
from ..domain.sweep import (
    CheckpointStore,
    ReleaseEnqueuer,
    SweepEnvironment,
    SweepItem,
    SweepRequest,
    run_sweep_batch,
)
from .settings import SweepSettings
from .wiring import build_semrush_client, limit_gateway_time

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["SweepPayloadError", "SweepRequest", "SweepRuntime", "lambda_handler"]


class SweepPayloadError(ValueError):
    """The payload is invalid; the message names every offending field."""


@dataclass
class SweepRuntime:
    """The sweep's adapters, built once per container (tests inject their own)."""

    settings: SweepSettings
    gateway: WorkspaceGateway
    store: CheckpointStore
    enqueuer: ReleaseEnqueuer
    clock: Clock = time.monotonic
    wall_clock: Clock = time.time
    sleep: Sleeper = time.sleep
    new_run_id: Any = field(
        default=lambda: f"rs-{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    )


def build_sweep_runtime(settings: SweepSettings) -> SweepRuntime:
    """Wire the real adapters (Semrush client, S3 checkpoint store, SQS producer)."""
    from ..adapters.s3_checkpoint_store import S3CheckpointStore
    from ..adapters.sqs_producer import AllocationProducer

    return SweepRuntime(
        settings=settings,
        gateway=build_semrush_client(settings.semrush),
        store=S3CheckpointStore(settings.sweep_bucket),
        enqueuer=AllocationProducer(settings.queue_url),
    )


_runtime: SweepRuntime | None = None


def get_sweep_runtime(env: Mapping[str, str] | None = None) -> SweepRuntime:
    """The container's runtime: settings read once, adapters built once."""
    global _runtime  # noqa: PLW0603 - one runtime per container
    settings = SweepSettings.from_env(os.environ if env is None else env)
    if _runtime is None or _runtime.settings != settings:
        _runtime = build_sweep_runtime(settings)
    return _runtime


def parse_sweep_request(event: Any) -> SweepRequest:
    """Validate the payload; every problem is reported with its field name."""
    try:
        return SweepRequest.model_validate(event)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'payload'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)
        )
        raise SweepPayloadError(f"invalid sweep payload: {problems}") from None


def _log_item(item: SweepItem) -> None:
    logger.info("sweep item", extra=item.model_dump(mode="json", exclude_none=True))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(
    event: dict[str, Any], context: LambdaContext, runtime: SweepRuntime | None = None
) -> dict[str, Any]:
    """Run one batch of a sweep and return its result."""
    request = parse_sweep_request(event)
    rt = runtime or get_sweep_runtime()
    run_id = request.run_id or rt.new_run_id()
    logger.append_keys(run_id=run_id, dry_run=request.dry_run)
    remaining_s = context.get_remaining_time_in_millis() / 1000.0
    limit_gateway_time(rt.gateway, remaining_s - rt.settings.safety_margin_ms / 1000.0)
    recorder = MetricsRecorder(rt.settings.environment)
    env = SweepEnvironment(
        gateway=rt.gateway,
        store=rt.store,
        enqueuer=rt.enqueuer,
        clock=rt.clock,
        wall_clock=rt.wall_clock,
        sleep=rt.sleep,
        deadline=rt.clock() + remaining_s - rt.settings.safety_margin_ms / 1000.0,
        invocation_id=context.aws_request_id,
        lease_until=rt.wall_clock() + remaining_s,
        dynamic_allocation=rt.settings.dynamic_allocation,
        blocks=rt.settings.blocks,
        observer=MetricsObserver(recorder),
        on_item=_log_item,
    )
    try:
        result = run_sweep_batch(request, run_id, env)
    finally:
        recorder.flush()
    logger.info(
        "sweep batch finished",
        extra={
            "done": result.done,
            "aborted": result.aborted,
            "processed": result.processed,
            "remaining": result.remaining,
            "counts": result.counts.model_dump(),
        },
    )
    return result.model_dump(mode="json")
