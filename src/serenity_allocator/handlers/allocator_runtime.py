"""The Allocator's runtime: adapters built once per container, and one invocation started.

This is wiring: settings into the use cases' :class:`WorkerConfig`, adapters into their
:class:`WorkerPorts`, the Lambda event's records into :class:`InboundMessage` values and the
Lambda context's remaining time into the invocation's deadline.

The SQS event's shape is checked here too, at the edge, so a hand-made event cannot crash a
batch (:func:`read_sqs_records`). A real event source mapping always sends ``{"Records": [...]}``
with a unique ``messageId`` per record; a hand-made one (a test invoke, an operator's replay)
may not. What cannot be a record (no ``messageId``, not an object, a second copy of an id) can
be neither processed nor reported, so it is left out with one clear problem each; everything
else goes on, and a record whose envelope is malformed becomes an invalid message (to the DLQ
with the field named).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..adapters.aws_clients import AWS_CALL_BUDGET_S
from ..adapters.observability import MetricsObserver, MetricsRecorder, logger
from ..application.allocator import (
    InboundMessage,
    Invocation,
    WorkerConfig,
    WorkerPorts,
    start_batch,
)
from ..application.credentials.request_credentials import CredentialBroker
from ..application.ports import DeadLetterSink, OutcomeSink, ReleaseEnqueuer
from ..domain.container_memory import InFlightUnits, ParentLinks, ParentMeteringCache, PoolWatch
from ..domain.ledger import RequestLedger
from ..domain.model import Dimension, TokenFreshness
from ..domain.ports import Clock, Sleeper, WorkspaceGateway
from ..domain.transfer import CALL_BUDGET_S, FAIL_FAST, SETTLE, TransferPolicy
from .settings import (
    AllocatorSettings,
    ImsSettings,
    build_ims_consumer,
    build_semrush_client,
    limit_gateway_time,
    ready_ims,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@dataclass
class AllocatorRuntime:
    """Everything an invocation needs, built once per container and reused while warm."""

    settings: AllocatorSettings
    gateway: WorkspaceGateway
    dead_letters: DeadLetterSink | None = None
    outcomes: OutcomeSink | None = None
    producer: ReleaseEnqueuer | None = None
    clock: Clock = time.monotonic
    sleep: Sleeper = time.sleep
    jitter: Callable[[], float] = random.random
    """Uniform draws in [0, 1) for the IMS retries' jitter (tests make them exact)."""
    wall_clock_ms: Callable[[], float] = field(default=lambda: time.time() * 1000.0)
    metering: ParentMeteringCache | None = None
    pool_watch: PoolWatch | None = None
    in_flight: InFlightUnits | None = None
    parked: set[str] = field(default_factory=set)
    """Request ids this container parked for sibling reclaim (labels the later outcome)."""
    ledger: RequestLedger | None = None
    """The request ledger (REQUEST_LEDGER_TABLE); None: replays are applied again."""
    parent_links: ParentLinks | None = None
    """Parent links seen upstream, cached for the container's life (links never change)."""
    attempt_budget_s: float = CALL_BUDGET_S
    """Time reserved for one upstream call (the client's per-request timeout)."""
    aws_call_budget_s: float = AWS_CALL_BUDGET_S
    """Time reserved for one AWS call, retries included (the clients' bounded worst case)."""
    credentials: CredentialBroker | None = None
    """IMS mode: requests run as their users (None: static mode, local tools only)."""
    ims: object | None = None
    """The IMS client (time-limited like the gateway each invocation), in IMS mode."""
    ims_call_budget_s: float = 0.0
    """Time reserved for one IMS exchange (the IMS client's per-request timeout), IMS mode."""
    credential_workers: Executor | None = None
    """IMS mode: the container's bounded pool that opens and ends sessions concurrently."""

    def __post_init__(self) -> None:
        settings = self.settings
        if self.metering is None and settings.unmetered_check:
            self.metering = ParentMeteringCache(
                self.gateway, self.clock, settings.unmetered_cache_ttl_s
            )
        if self.parent_links is None:
            # One family listing answers both questions: the links and the parent's metering.
            metering = self.metering
            self.parent_links = ParentLinks(
                self.gateway, on_listing=metering.remember if metering is not None else None
            )
        if self.in_flight is None:
            self.in_flight = InFlightUnits(self.clock)
        if self.pool_watch is None:
            self.pool_watch = PoolWatch(
                self.clock,
                threshold=settings.pool_low_ratio,
                interval_s=settings.pool_low_interval_s,
            )

    @property
    def ensure_policy(self) -> TransferPolicy:
        """Fail-fast plus a few short in-handler not-ready retries; the queue retries longer."""
        return FAIL_FAST.model_copy(
            update={
                "not_ready_retries": self.settings.ensure_not_ready_retries,
                "retry_interval_s": self.settings.ensure_retry_interval_s,
                "attempt_budget_s": self.attempt_budget_s,
            }
        )

    @property
    def release_policy(self) -> TransferPolicy:
        """The settle policy, each attempt budgeted at the client's worst-case call time."""
        return SETTLE.model_copy(
            update={
                "attempt_budget_s": self.attempt_budget_s,
                "settle_poll_attempts": self.settings.settle_poll_attempts,
                "settle_poll_interval_s": self.settings.settle_poll_interval_s,
            }
        )

    def worker_config(self) -> WorkerConfig:
        """The use cases' configuration, from the settings."""
        settings = self.settings
        return WorkerConfig(
            dynamic_allocation=settings.dynamic_allocation,
            blocks=settings.blocks,
            max_receive_count=settings.max_receive_count,
            ensure_policy=self.ensure_policy,
            release_policy=self.release_policy,
            tight_pool_fallback=settings.tight_pool_fallback,
            sibling_reclaim=settings.sibling_reclaim,
            sibling_reclaim_max_parks=settings.sibling_reclaim_max_parks,
            sibling_reclaim_max_siblings=settings.sibling_reclaim_max_siblings,
            ceiling_backstop=settings.brand_ai_ceiling,
            aws_call_budget_s=self.aws_call_budget_s,
            ims_call_budget_s=self.ims_call_budget_s,
        )

    def worker_ports(self) -> WorkerPorts:
        """The use cases' ports (the container's adapters and state, shared, not copied)."""
        metering = self.metering
        return WorkerPorts(
            gateway=self.gateway,
            clock=self.clock,
            sleep=self.sleep,
            wall_clock_ms=self.wall_clock_ms,
            dead_letters=self.dead_letters,
            outcomes=self.outcomes,
            enqueuer=self.producer,
            is_unmetered=metering.is_unmetered if metering is not None else None,
            pool_watch=self.pool_watch,
            in_flight=self.in_flight,
            parked=self.parked,
            ledger=self.ledger,
            parent_links=self.parent_links,
            credentials=self.credentials,
            credential_workers=self.credential_workers,
        )

    def start(self, records: Sequence[Mapping[str, object]], context: LambdaContext) -> Invocation:
        """Plan one batch, to be done by the remaining time less the safety margin."""
        settings = self.settings
        now = self.clock()
        budget_s = (context.get_remaining_time_in_millis() - settings.safety_margin_ms) / 1000.0
        reporter = MetricsObserver(
            MetricsRecorder(settings.environment), pool_low_ratio=settings.pool_low_ratio
        )
        if self.ims is not None:
            # A refused pair read again, then IMS bounded to the invocation's own deadline less
            # one AWS call (the store of an exchange's rolled token, or an invalidation's scrub,
            # comes after it), set before the sessions open as the batch is planned (a warm
            # container's limit from the last invocation must not refuse them): an exchange
            # starts only when a whole one still fits (Deadlines.fits_ims_exchange), so none is
            # cut short, nor is its roll.
            ready_ims(
                self.ims,
                settings.ims,
                call_budget_s=self.aws_call_budget_s,
                seconds=budget_s - self.aws_call_budget_s,
            )
        invocation = start_batch(
            self.worker_config(),
            self.worker_ports(),
            reporter,
            [inbound_message(record) for record in records],
            finish_deadline=now + budget_s,
        )
        # No upstream call, retry or backoff outlives the applying phase (measured from now:
        # planning read the request ledger, which took time of its own).
        applying_s = invocation.deadlines.applying - self.clock()
        limit_gateway_time(self.gateway, applying_s)
        return invocation


def build_runtime(settings: AllocatorSettings) -> AllocatorRuntime:
    """Wire the real adapters from settings (clients are created lazily inside them)."""
    _log_ceiling_backstop(settings)
    # The AWS calls' budget is its own setting (AWS_CALL_BUDGET_S): a shorter upstream timeout
    # must not shrink every DynamoDB/SQS/EventBridge call to one short attempt.
    aws_budget_s = settings.aws_call_budget_s
    if settings.ims is None:
        runtime = AllocatorRuntime(
            settings=settings,
            gateway=build_semrush_client(settings.semrush),
            attempt_budget_s=settings.semrush.timeout_s,
            aws_call_budget_s=aws_budget_s,
        )
    else:
        runtime = _ims_runtime(settings, settings.ims, aws_budget_s)
    if settings.dlq_url:
        from ..adapters.sqs import DeadLetterSender

        runtime.dead_letters = DeadLetterSender(settings.dlq_url, call_budget_s=aws_budget_s)
    if settings.outcome_bus_name:
        from ..adapters.eventbridge_outcomes import OutcomePublisher

        runtime.outcomes = OutcomePublisher(settings.outcome_bus_name, call_budget_s=aws_budget_s)
    if settings.sibling_reclaim and settings.queue_url:
        from ..adapters.sqs import AllocationProducer

        runtime.producer = AllocationProducer(settings.queue_url, call_budget_s=aws_budget_s)
    if settings.request_ledger_table:
        from ..adapters.dynamodb_request_ledger import DynamoDbRequestLedger, RequestLedgerConfig

        runtime.ledger = DynamoDbRequestLedger(
            settings.request_ledger_table,
            config=RequestLedgerConfig(
                ttl_s=settings.request_ledger_ttl_days * 86400, call_budget_s=aws_budget_s
            ),
        )
    return runtime


def _ims_runtime(
    settings: AllocatorSettings, ims_settings: ImsSettings, aws_budget_s: float
) -> AllocatorRuntime:
    """IMS mode: the Semrush client reads the current request's token from the holder."""
    from ..adapters.credential_store import (
        CredentialStoreConfig,
        DynamoDbCredentialStore,
        KmsTokenCipher,
    )
    from ..adapters.request_authority import ImsCredentialBroker, RequestTokenHolder

    holder = RequestTokenHolder()
    runtime: AllocatorRuntime
    # IMS retries pause through the runtime's sleeper (late-bound: tests replace it).
    ims = build_ims_consumer(
        ims_settings,
        call_budget_s=aws_budget_s,
        sleep=lambda seconds: runtime.sleep(seconds),  # noqa: PLW0108
        jitter=lambda: runtime.jitter(),  # noqa: PLW0108
    )
    # An exchange waits for a late answer only into time the roll's store does not need.
    ims.keep_after_answer(aws_budget_s)
    store = DynamoDbCredentialStore(
        ims_settings.credentials_table or "",
        KmsTokenCipher(ims_settings.credentials_key_arn or "", call_budget_s=aws_budget_s),
        config=CredentialStoreConfig(call_budget_s=aws_budget_s),
    )
    # An access token is judged on the runtime's clock (late-bound: tests replace it), against
    # the longest Semrush attempt that would present it.
    freshness = TokenFreshness(lambda: runtime.clock(), settings.semrush.timeout_s)  # noqa: PLW0108
    broker = ImsCredentialBroker(store, ims, holder, freshness)
    holder.broker = broker
    runtime = AllocatorRuntime(
        settings=settings,
        gateway=build_semrush_client(settings.semrush, holder),
        attempt_budget_s=settings.semrush.timeout_s,
        aws_call_budget_s=aws_budget_s,
        credentials=broker,
        ims=ims,
        ims_call_budget_s=ims.timeout_s,
        credential_workers=credential_workers(),
    )
    return runtime


SESSION_WORKERS = 20
"""Credential calls at once: a whole batch's (SQS FIFO hands at most 10 records), two per
record (an end's invalidation and its scrub run side by side, as may an open's roll and an
early end), so no call of a burst waits for a thread."""


def credential_workers() -> Executor:
    """The bounded pool of the batch's credential calls.

    boto3 and httpx clients are thread-safe; the threads only wait on the network.
    """
    return ThreadPoolExecutor(max_workers=SESSION_WORKERS, thread_name_prefix="credentials")


def _log_ceiling_backstop(settings: AllocatorSettings) -> None:
    # Once per container (cold start): a bad value is reported, never fatal (fail-safe).
    ceiling = settings.brand_ai_ceiling
    extra = {dim.value: ceiling.limit(dim) or "not enforced" for dim in Dimension} | {
        "ignored": list(settings.ignored_ceiling_variables)
    }
    if settings.ignored_ceiling_variables:
        logger.warning("brand AI ceiling backstop: malformed values not enforced", extra=extra)
    else:
        logger.info("brand AI ceiling backstop", extra=extra)


def inbound_message(raw: Mapping[str, object]) -> InboundMessage:
    """One SQS record of the Lambda event as the use cases read it."""
    attributes = raw.get("attributes")
    if not isinstance(attributes, Mapping):
        attributes = {}
    receive_count = _positive_int(attributes.get("ApproximateReceiveCount", 1))
    return InboundMessage(
        shape_error=None
        if receive_count is not None
        else "attributes.ApproximateReceiveCount: not a positive integer",
        message_id=str(raw.get("messageId", "")),
        group_id=str(attributes.get("MessageGroupId") or ""),
        body=str(raw.get("body") or ""),
        receive_count=receive_count or 1,
        sent_timestamp_ms=_number(attributes.get("SentTimestamp")),
        sequence_number=_sequence_number(attributes.get("SequenceNumber")),
    )


def _sequence_number(value: object) -> str | None:
    # A FIFO record's decimal SequenceNumber; anything else (a hand-made event) is no order key.
    text = str(value) if value is not None else ""
    return text if text.isascii() and text.isdigit() and len(text) <= 40 else None


def _positive_int(value: object) -> int | None:
    # SQS sends the count as a decimal string; a hand-made event may send anything.
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None


def _number(value: object) -> float | None:
    try:
        return float(str(value)) if value else None
    except ValueError:
        return None


# -- the SQS event's shape -------------------------------------------------------------------


@dataclass(frozen=True)
class SqsEventRecords:
    """The records to process, and the problems found in the event (one line each)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_sqs_records(event: object) -> SqsEventRecords:
    """Split ``event`` into processable records and problems; never raises."""
    if not isinstance(event, Mapping):
        return SqsEventRecords(problems=["event: not an object"])
    raw = event.get("Records")
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        return SqsEventRecords(problems=["Records: missing or not a list"])
    result = SqsEventRecords()
    seen: set[str] = set()
    for index, record in enumerate(raw):
        problem = _record_problem(record, seen)
        if problem is not None:
            result.problems.append(f"Records[{index}]: {problem}")
            continue
        seen.add(record["messageId"])
        result.records.append(dict(record))
    return result


def _record_problem(record: object, seen: set[str]) -> str | None:
    if not isinstance(record, Mapping):
        return "not an object"
    message_id = record.get("messageId")
    if not isinstance(message_id, str) or not message_id:
        return "messageId: missing or not a string"
    if message_id in seen:
        return "messageId: repeats an earlier record (that copy is processed)"
    if "attributes" in record and not isinstance(record["attributes"], Mapping):
        return "attributes: not an object"
    return None
