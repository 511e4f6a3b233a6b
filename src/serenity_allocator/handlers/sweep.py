"""The Sweep Lambda: one resumable batch of a rightsizing run per invocation.

Invoked by an operator (dry run first) or by the state machine that loops it until ``done``.
The payload is validated before any upstream call; the result is the state machine's input for
its Choice (``done``, ``aborted``, ``counts.unexpected_errors``). A payload with an ``abandon``
key (``{"abandon": true, "run_id": ...}``, or ``"parent_workspace_id"`` for the run holding a
parent) ends that run for good instead, also over an unreadable checkpoint or claim (runbook:
sweep.md).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..adapters.observability import (
    MetricsObserver,
    MetricsRecorder,
    logger,
    metrics,
    pin_wire_loggers,
)
from ..adapters.session_token_holder import SessionTokenHolder
from ..application.abandon_sweep_run import abandon_sweep_run
from ..application.run_sweep_batch import run_sweep_batch
from ..application.sweep_ports import (
    CheckpointStore,
    PromiseExchange,
    RunTokenCipher,
    SurplusReleaseQueue,
    SweepEnvironment,
)
from ..application.sweep_run_tokens import RunTokens
from ..domain.credentials import TokenFreshness
from ..domain.errors import ImsClientRefusedError, SemrushScopeMissingError, UpstreamError
from ..domain.ports import Clock, Sleeper, WorkspaceGateway
from ..domain.sweep_errors import (
    SweepImsUnavailableError,
    SweepNeedsReauthError,
    SweepNoCredentialError,
)
from ..domain.sweep_model import (
    SweepAbandonRequest,
    SweepItem,
    SweepParentAbandonRequest,
    SweepRequest,
)
from ..domain.validation import describe_validation_error
from .settings import ImsSettings, SweepSettings
from .wiring import (
    PairSource,
    build_ims_consumer,
    build_semrush_client,
    consumer_pair_source,
    limit_gateway_time,
    renew_refused_pair,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = [
    "SweepPayloadError",
    "SweepRequest",
    "SweepRuntime",
    "SweepUpstreamError",
    "lambda_handler",
    "parse_sweep_payload",
]


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


def new_run_id() -> str:
    """A new run id: `rs-<UTC date>-<time>-<6 hex>`."""
    return f"rs-{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass
class SweepCredentials:
    """IMS mode: the Semrush client's token holder, IMS (consumer pair) and the KMS cipher."""

    holder: SessionTokenHolder
    ims: PromiseExchange
    cipher: RunTokenCipher
    pair_source: PairSource | None = None
    """Reads the consumer pair again (its secret) after IMS refused it."""


@dataclass
class SweepRuntime:
    """The sweep's adapters, built once per container (tests inject their own)."""

    settings: SweepSettings
    gateway: WorkspaceGateway
    store: CheckpointStore
    enqueuer: SurplusReleaseQueue
    clock: Clock = time.monotonic
    wall_clock: Clock = time.time
    sleep: Sleeper = time.sleep
    new_run_id: Callable[[], str] = new_run_id
    credentials: SweepCredentials | None = None
    """None in static mode (a loopback ``SEMRUSH_TOKEN``)."""


def build_sweep_runtime(settings: SweepSettings) -> SweepRuntime:
    """Wire the real adapters (Semrush client, S3 checkpoint store, SQS producer, IMS, KMS)."""
    from ..adapters.s3_checkpoint_store import S3CheckpointStore
    from ..adapters.sqs_producer import AllocationProducer

    store = S3CheckpointStore(settings.sweep_bucket)
    if settings.ims is None:
        gateway = build_semrush_client(settings.semrush)
        enqueuer = AllocationProducer(settings.queue_url)
        return SweepRuntime(settings=settings, gateway=gateway, store=store, enqueuer=enqueuer)
    credentials = build_sweep_credentials(settings.ims)
    gateway = build_semrush_client(settings.semrush, credentials.holder)
    return SweepRuntime(
        settings=settings,
        gateway=gateway,
        store=store,
        enqueuer=build_operator_releases(settings, credentials.holder),
        credentials=credentials,
    )


def build_operator_releases(
    settings: SweepSettings, holder: SessionTokenHolder
) -> SurplusReleaseQueue:
    """IMS mode: releases enqueued with the operator's authority (a record per release)."""
    from ..adapters.credential_handover import CredentialHandover
    from ..adapters.dynamodb_credential_store import DynamoDbCredentialStore
    from ..adapters.ims_client import ImsClient, ImsClientPair
    from ..adapters.ims_pair_secret import read_ims_pair
    from ..adapters.kms_token_cipher import KmsTokenCipher
    from ..adapters.operator_release_queue import OperatorReleaseQueue, ReleasesWithoutCredentials
    from ..adapters.sqs_producer import AllocationProducer

    ims = settings.ims
    if ims is None or ims.credentials_table is None or not settings.releases_carry_credentials:
        return ReleasesWithoutCredentials()
    if settings.emitter_secret_id is not None:
        emitter = read_ims_pair(settings.emitter_secret_id, "emitter", pair_name=ims.pair_name)
    else:
        emitter = ImsClientPair(
            settings.emitter_client_id or "",
            settings.emitter_client_secret or "",
            settings.promise_definition_id,
        )
    store = DynamoDbCredentialStore(
        ims.credentials_table, KmsTokenCipher(ims.credentials_key_arn or "")
    )
    minter = ImsClient(ims.host, emitter=emitter)
    producer = AllocationProducer(settings.queue_url, credentials=CredentialHandover(store, minter))
    return OperatorReleaseQueue(producer, holder, minter)


def build_sweep_credentials(ims: ImsSettings) -> SweepCredentials:
    """The holder, IMS with the consumer pair (from its secret, or local) and the KMS cipher."""
    from ..adapters.aws_clients import AWS_CALL_BUDGET_S
    from ..adapters.kms_token_cipher import KmsTokenCipher

    consumer = build_ims_consumer(ims, call_budget_s=AWS_CALL_BUDGET_S)
    consumer.keep_after_answer(AWS_CALL_BUDGET_S)  # the claim's conditional write of the roll
    return SweepCredentials(
        holder=SessionTokenHolder(),
        ims=consumer,
        cipher=KmsTokenCipher(ims.credentials_key_arn or ""),
        pair_source=consumer_pair_source(ims, call_budget_s=AWS_CALL_BUDGET_S),
    )


_runtime: SweepRuntime | None = None
# No library logs a request or response body here, whatever the root level (tokens travel in them).
pin_wire_loggers()


def get_sweep_runtime(env: Mapping[str, str] | None = None) -> SweepRuntime:
    """The container's runtime: settings read once, adapters built once."""
    global _runtime  # noqa: PLW0603 - one runtime per container
    settings = SweepSettings.from_env(os.environ if env is None else env)
    if _runtime is None or _runtime.settings != settings:
        _runtime = build_sweep_runtime(settings)
    return _runtime


def parse_sweep_request(event: Any) -> SweepRequest:
    """Validate a sweep payload; every problem is reported with its field name."""
    try:
        return SweepRequest.model_validate(event)
    except ValidationError as exc:
        raise SweepPayloadError(
            f"invalid sweep payload: {describe_validation_error(exc)}"
        ) from None


AbandonPayload = SweepAbandonRequest | SweepParentAbandonRequest


def parse_sweep_payload(event: Any) -> SweepRequest | AbandonPayload:
    """Validate either payload the function takes: a sweep batch, or an abandon.

    A payload with an ``abandon`` key is an abandon: of a run (``{"abandon": true, "run_id":
    ...}``), or, with a ``parent_workspace_id`` key, of whatever run holds that parent.
    """
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


def _log_item(item: SweepItem) -> None:
    logger.info("sweep item", extra=item.model_dump(mode="json", exclude_none=True))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(
    event: dict[str, Any], context: LambdaContext, runtime: SweepRuntime | None = None
) -> dict[str, Any]:
    """Run one batch of a sweep (or abandon a run) and return its result."""
    request = parse_sweep_payload(event)
    rt = runtime or get_sweep_runtime()
    recorder = MetricsRecorder(rt.settings.environment)
    env = _environment(rt, context, recorder)
    try:
        if isinstance(request, (SweepAbandonRequest, SweepParentAbandonRequest)):
            return _abandon(request, env)
        run_id = request.run_id or rt.new_run_id()
        logger.append_keys(run_id=run_id, dry_run=request.dry_run)
        _bind_run_token(rt, env, run_id)
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
    if isinstance(request, SweepParentAbandonRequest):
        logger.append_keys(parent_workspace_id=request.parent_workspace_id)
    else:
        logger.append_keys(run_id=request.run_id)
    # Only the fields that apply: a cleared claim has no run, an unreadable checkpoint no counts.
    abandoned = abandon_sweep_run(request, env).model_dump(mode="json", exclude_none=True)
    logger.info("sweep run abandoned", extra=abandoned)
    return abandoned


def _bind_run_token(rt: SweepRuntime, env: SweepEnvironment, run_id: str) -> None:
    """IMS mode: this batch's Semrush calls carry the run's operator token (exchanged first)."""
    if rt.credentials is not None and isinstance(env.run_tokens, RunTokens):
        rt.credentials.holder.bind(env.run_tokens.session(run_id))


def _freshness(rt: SweepRuntime) -> TokenFreshness:
    """The run's access token is presented by Semrush calls and by releases' mints (IMS)."""
    from ..adapters.ims_client import DEFAULT_TIMEOUT_S

    return TokenFreshness(rt.clock, max(rt.settings.semrush.timeout_s, DEFAULT_TIMEOUT_S))


def _environment(
    rt: SweepRuntime, context: LambdaContext, recorder: MetricsRecorder
) -> SweepEnvironment:
    remaining_s = context.get_remaining_time_in_millis() / 1000.0
    budget_s = remaining_s - rt.settings.safety_margin_ms / 1000.0
    limit_gateway_time(rt.gateway, budget_s)
    limit_gateway_time(rt.enqueuer, budget_s)  # a real run's mints (IMS mode)
    observer = MetricsObserver(recorder)
    run_tokens = None
    if rt.credentials is not None:
        renew_refused_pair(rt.credentials.ims, rt.credentials.pair_source)
        limit_gateway_time(rt.credentials.ims, budget_s)
        run_tokens = RunTokens(
            rt.store, rt.credentials.cipher, rt.credentials.ims, observer, _freshness(rt)
        )
    return SweepEnvironment(
        gateway=rt.gateway,
        store=rt.store,
        enqueuer=rt.enqueuer,
        clock=rt.clock,
        wall_clock=rt.wall_clock,
        sleep=rt.sleep,
        deadline=rt.clock() + budget_s,
        invocation_id=context.aws_request_id,
        # The lease ends with the invocation: a crashed one frees the run at its deadline.
        lease_until=rt.wall_clock() + remaining_s,
        dynamic_allocation=rt.settings.dynamic_allocation,
        blocks=rt.settings.blocks,
        observer=observer,
        on_item=_log_item,
        run_tokens=run_tokens,
    )
