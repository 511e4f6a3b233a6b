"""The Sweep Lambda: one resumable batch of a rightsizing run per invocation.

Invoked by an operator (dry run first) or by the state machine that loops it until ``done``.
The payload is validated before any upstream call; the result is the state machine's input for
its Choice (``done``, ``aborted``, ``counts.unexpected_errors``). A payload with an ``abandon``
key (``{"abandon": true, "run_id": ...}``, or ``"parent_workspace_id"`` for the run holding a
parent) ends that run for good instead, also over an unreadable checkpoint or claim (runbook:
sweep.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..adapters.telemetry import lambda_entry, logger, pin_wire_loggers
from ..domain.errors import ImsClientRefusedError, SemrushScopeMissingError, UpstreamError
from ..domain.sweep.errors import (
    SweepImsUnavailableError,
    SweepNeedsReauthError,
    SweepNoCredentialError,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from ..application.sweep.ports import SweepEnvironment
    from ..domain.sweep.model import (
        SweepAbandonRequest,
        SweepParentAbandonRequest,
        SweepRequest,
    )
    from .sweep_runtime import SweepRuntime

    AbandonPayload = SweepAbandonRequest | SweepParentAbandonRequest

__all__ = [
    "SweepPayloadError",
    "SweepUpstreamError",
    "lambda_handler",
    "parse_sweep_payload",
]

# No library logs a request or response body here, whatever the root level (tokens travel in them).
pin_wire_loggers()


class SweepPayloadError(ValueError):
    """The payload is invalid; the message names every offending field."""


class SweepUpstreamError(RuntimeError):
    """The upstream failed a call the whole batch needs (listing a pool's children).

    The message names the status and the operation only: it becomes the Lambda error and the
    Step Functions history, where an upstream body (which may echo a secret) must never go.
    """

    def __init__(self, status: int, operation: str) -> None:
        self.status = status
        self.operation = operation
        super().__init__(
            f"the upstream answered {status} to {operation or 'a call'}; nothing was enqueued "
            "by this call, resume the run with its run_id once the upstream answers again"
        )


def parse_sweep_request(event: Any) -> SweepRequest:
    """Validate a sweep payload; every problem is reported with its field name."""
    from pydantic import ValidationError

    from ..domain.messages import describe_validation_error
    from ..domain.sweep.model import SweepRequest

    try:
        return SweepRequest.model_validate(event)
    except ValidationError as exc:
        raise SweepPayloadError(
            f"invalid sweep payload: {describe_validation_error(exc)}"
        ) from None


def parse_sweep_payload(event: Any) -> SweepRequest | AbandonPayload:
    """Validate either payload the function takes: a sweep batch, or an abandon.

    A payload with an ``abandon`` key is an abandon: of a run (``{"abandon": true, "run_id":
    ...}``), or, with a ``parent_workspace_id`` key, of whatever run holds that parent.
    The models (and pydantic) are imported by the first payload parsed, not at init.
    """
    from pydantic import ValidationError

    from ..domain.messages import describe_validation_error
    from ..domain.sweep.model import SweepAbandonRequest, SweepParentAbandonRequest

    if isinstance(event, Mapping) and "abandon" in event:
        model: type[AbandonPayload] = (
            SweepParentAbandonRequest if "parent_workspace_id" in event else SweepAbandonRequest
        )
        try:
            return model.model_validate(event)
        except ValidationError as exc:
            problems = describe_validation_error(exc)
            raise SweepPayloadError(f"invalid abandon payload: {problems}") from None
    return parse_sweep_request(event)


@lambda_entry
def lambda_handler(
    event: dict[str, Any], context: LambdaContext, runtime: SweepRuntime | None = None
) -> dict[str, Any]:
    """Run one batch of a sweep (or abandon a run) and return its result."""
    # Imported by the first invocation, not at init; a broken import fails that invocation.
    from ..adapters.observability import MetricsRecorder
    from ..application.sweep.run_batch import run_sweep_batch
    from ..domain.sweep.model import SweepRequest
    from .sweep_runtime import bind_run_token, get_sweep_runtime, sweep_environment

    request = parse_sweep_payload(event)
    rt = runtime or get_sweep_runtime()
    recorder = MetricsRecorder(rt.settings.environment)
    env = sweep_environment(rt, context, recorder)
    try:
        if not isinstance(request, SweepRequest):
            return _abandon(request, env)
        run_id = request.run_id or rt.new_run_id()
        logger.append_keys(run_id=run_id, dry_run=request.dry_run)
        bind_run_token(rt, env, run_id)
        result = run_sweep_batch(request, run_id, env)
    except UpstreamError as exc:
        # The body stays out of the error (and the history); the log keeps the status only.
        logger.warning(
            "sweep batch stopped: upstream error",
            extra={"status": exc.status, "operation": exc.operation},
        )
        raise SweepUpstreamError(exc.status, exc.operation) from None
    except (
        SweepNeedsReauthError,
        SweepNoCredentialError,
        SweepImsUnavailableError,
        ImsClientRefusedError,
        SemrushScopeMissingError,
    ) as exc:
        logger.warning("sweep batch stopped: run credential", extra={"error_code": exc.code})
        raise
    finally:
        if rt.credentials is not None:
            rt.credentials.holder.unbind()
        recorder.flush()
    logger.info(
        "sweep batch finished",
        extra={
            "done": result.done,
            "aborted": result.aborted,
            "processed": result.processed,
            "remaining": result.remaining,
            "counts": result.counts.model_dump(),
            "failed": len(result.failed),
        },
    )
    return result.model_dump(mode="json")


def _abandon(request: AbandonPayload, env: SweepEnvironment) -> dict[str, Any]:
    from ..application.sweep.abandon_run import abandon_sweep_run
    from ..domain.sweep.model import SweepParentAbandonRequest

    if isinstance(request, SweepParentAbandonRequest):
        logger.append_keys(parent_workspace_id=request.parent_workspace_id)
    else:
        logger.append_keys(run_id=request.run_id)
    # Only the fields that apply: a cleared claim has no run, an unreadable checkpoint no counts.
    abandoned = abandon_sweep_run(request, env).model_dump(mode="json", exclude_none=True)
    logger.info("sweep run abandoned", extra=abandoned)
    return abandoned
