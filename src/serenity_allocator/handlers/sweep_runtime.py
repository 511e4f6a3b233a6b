"""The Sweep's runtime: its adapters built once per container, and one invocation's environment.

The handler (:mod:`.sweep`) is Powertools wiring only; what it runs on is built here, as the
Allocator's is in :mod:`.allocator_runtime`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..adapters.observability import (
    MetricsObserver,
    MetricsRecorder,
    logger,
    pin_wire_loggers,
)
from ..adapters.session_token_holder import SessionTokenHolder
from ..application.sweep.ports import (
    CheckpointStore,
    PromiseExchange,
    RunTokenCipher,
    SurplusReleaseQueue,
    SweepEnvironment,
)
from ..application.sweep.run_tokens import RunTokens
from ..domain.model import TokenFreshness
from ..domain.ports import Clock, Sleeper, WorkspaceGateway
from ..domain.sweep.model import SweepItem
from .settings import (
    ImsSettings,
    SweepSettings,
    build_ims_consumer,
    build_semrush_client,
    limit_gateway_time,
    ready_ims,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


def new_run_id() -> str:
    """A new run id: `rs-<UTC date>-<time>-<6 hex>`."""
    return f"rs-{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass
class SweepCredentials:
    """IMS mode: the Semrush client's token holder, IMS (consumer pair) and the KMS cipher."""

    holder: SessionTokenHolder
    ims: PromiseExchange
    cipher: RunTokenCipher


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
    from ..adapters.sqs import AllocationProducer

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
    from ..adapters.credential_store import DynamoDbCredentialStore, KmsTokenCipher
    from ..adapters.ims_client import ImsClient, ImsClientPair, read_ims_pair
    from ..adapters.operator_release_queue import OperatorHandover, OperatorReleaseQueue
    from ..adapters.request_authority import CredentialHandover
    from ..adapters.sqs import AllocationProducer

    ims = settings.ims
    if ims is None or ims.credentials_table is None or not settings.releases_carry_credentials:
        return OperatorReleaseQueue(None)
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
    return OperatorReleaseQueue(OperatorHandover(producer, holder, minter))


def build_sweep_credentials(ims: ImsSettings) -> SweepCredentials:
    """The holder, IMS with the consumer pair (from its secret, or local) and the KMS cipher."""
    from ..adapters.aws_clients import AWS_CALL_BUDGET_S
    from ..adapters.credential_store import KmsTokenCipher

    consumer = build_ims_consumer(ims, call_budget_s=AWS_CALL_BUDGET_S)
    consumer.keep_after_answer(AWS_CALL_BUDGET_S)  # the claim's conditional write of the roll
    return SweepCredentials(
        holder=SessionTokenHolder(),
        ims=consumer,
        cipher=KmsTokenCipher(ims.credentials_key_arn or ""),
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


def bind_run_token(rt: SweepRuntime, env: SweepEnvironment, run_id: str) -> None:
    """IMS mode: this batch's Semrush calls carry the run's operator token (exchanged first)."""
    if rt.credentials is not None and isinstance(env.run_tokens, RunTokens):
        rt.credentials.holder.bind(env.run_tokens.session(run_id))


def _freshness(rt: SweepRuntime) -> TokenFreshness:
    """The run's access token is presented by Semrush calls and by releases' mints (IMS)."""
    from ..adapters.ims_client import DEFAULT_TIMEOUT_S

    return TokenFreshness(rt.clock, max(rt.settings.semrush.timeout_s, DEFAULT_TIMEOUT_S))


def sweep_environment(
    rt: SweepRuntime, context: LambdaContext, recorder: MetricsRecorder
) -> SweepEnvironment:
    """One invocation's environment: every call limited to the time left, the run's tokens."""
    remaining_s = context.get_remaining_time_in_millis() / 1000.0
    budget_s = remaining_s - rt.settings.safety_margin_ms / 1000.0
    limit_gateway_time(rt.gateway, budget_s)
    limit_gateway_time(rt.enqueuer, budget_s)  # a real run's mints (IMS mode)
    observer = MetricsObserver(recorder)
    run_tokens = None
    if rt.credentials is not None:
        from ..adapters.aws_clients import AWS_CALL_BUDGET_S

        ready_ims(
            rt.credentials.ims, rt.settings.ims, call_budget_s=AWS_CALL_BUDGET_S, seconds=budget_s
        )
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


def _log_item(item: SweepItem) -> None:
    logger.info("sweep item", extra=item.model_dump(mode="json", exclude_none=True))
