"""Running a workload: paced senders, consumer processes, and what the run left behind."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from serenity_allocator.adapters.eventbridge_outcomes import POOL_LOW_DETAIL_TYPE
from serenity_allocator.adapters.sqs import AllocationProducer
from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_tools.standins.consumer import DEFAULT_HANDLER, CrashPlan
from serenity_tools.standins.consumer_pool import ConsumerPool, QueueDepth, queue_depth
from serenity_tools.standins.identities import LocalIdentities, keep_ims_calls
from serenity_tools.standins.stack import (
    DEFAULT_VISIBILITY_TIMEOUT_S,
    CredentialMode,
    DeadLetter,
    LocalStack,
)
from serenity_tools.standins.traces import TraceSummary, read_trace_events, summarize_traces
from serenity_tools.verification.credential_story import add_brand_users, user_of
from serenity_tools.verification.harness.config import FEATURES_ON, IMS_FEATURES, HarnessConfig
from serenity_tools.verification.harness.poison_bodies import PoisonMessage
from serenity_tools.verification.harness.worker_releases import (
    reclaimed_children,
    with_worker_releases,
)
from serenity_tools.verification.harness.workload import Request, Workload
from serenity_tools.verification.identity import IdentityRecord
from serenity_tools.verification.invariants import InvariantResult, workspaces_by_id
from serenity_tools.verification.ledger_check import (
    audit_local_dead_letters,
    read_ledger_table,
)
from serenity_tools.verification.write_path import (
    WritePathSummary,
    as_metered_writes,
    check_guarded_writes,
    guarded_service_writes,
    summarize_writes,
)
from serenity_tools.verification.writes import meter_writes

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

_COLLECT_EVERY_S = 1.0

Outgoing = EnsureRequest | ReleaseRequest | PoisonMessage
Sender = Callable[[Sequence[Outgoing]], None]


def _outgoing_id(item: Outgoing) -> str:
    return item.dedup_id if isinstance(item, PoisonMessage) else item.request_id


def _send_raw(
    sqs: SQSClient, queue_url: str, messages: Sequence[tuple[str, str | None, str | None]]
) -> None:
    """Send (body, group id, deduplication id) triples, 10 per call; raise on any failure."""
    for start in range(0, len(messages), 10):
        entries: list[SendMessageBatchRequestEntryTypeDef] = []
        for index, (body, group_id, dedup_id) in enumerate(messages[start : start + 10]):
            entry: SendMessageBatchRequestEntryTypeDef = {"Id": str(index), "MessageBody": body}
            if group_id is not None:
                entry["MessageGroupId"] = group_id
            if dedup_id is not None:
                entry["MessageDeduplicationId"] = dedup_id
            entries.append(entry)
        failed = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed", [])
        if failed:
            raise RuntimeError(f"{len(failed)} message(s) not sent: {failed[0].get('Code')}")


def fifo_sender(stack: LocalStack, identities: LocalIdentities | None = None) -> Sender:
    """Send to the allocation FIFO queue: requests through the real producer, poison raw.

    With ``identities`` (IMS), each request with its child's user's credential: the producer
    mints its promise token and writes the record before the batch is sent.
    """
    producer = AllocationProducer(stack.resources.queue_url, stack.sqs)
    users = identities.producer(stack.sqs) if identities is not None else None

    def send(batch: Sequence[Outgoing]) -> None:
        requests = [item for item in batch if not isinstance(item, PoisonMessage)]
        if requests and users is not None:
            users.enqueue_many(requests, {r.request_id: user_of(r.workspace_id) for r in requests})
        elif requests:
            producer.enqueue_many(requests)
        poison = [item for item in batch if isinstance(item, PoisonMessage)]
        raw = [(p.body, p.group_id, p.dedup_id) for p in poison]
        _send_raw(stack.sqs, stack.resources.queue_url, raw)

    return send


def standard_sender(sqs: SQSClient, queue_url: str) -> Sender:
    """Send request bodies to a standard queue (no group, no deduplication id)."""

    def send(batch: Sequence[Outgoing]) -> None:
        bodies = [
            item.body
            if isinstance(item, PoisonMessage)
            else item.model_dump_json(exclude_none=True)
            for item in batch
        ]
        _send_raw(sqs, queue_url, [(body, None, None) for body in bodies])

    return send


def feed(
    units: Sequence[Sequence[Outgoing]],
    send: Sender,
    depth: Callable[[], QueueDepth],
    *,
    max_in_queue: int,
    idle: Callable[[], None],
    deadline: float,
) -> dict[str, float]:
    """Send ``units`` in order, keeping at most ``max_in_queue`` messages not yet deleted.

    Returns:
        Request (or poison dedup) id -> monotonic time its send returned. Fewer than all ids
        when ``deadline`` passed first.
    """
    enqueued_at: dict[str, float] = {}
    index = 0
    while index < len(units) and time.monotonic() < deadline:
        current = depth()
        room = max_in_queue - current.visible - current.in_flight
        if room < len(units[index]):
            idle()
            continue
        batch: list[Outgoing] = []
        while index < len(units) and len(batch) + len(units[index]) <= room:
            batch.extend(units[index])
            index += 1
        send(batch)
        now = time.monotonic()
        enqueued_at.update((_outgoing_id(item), now) for item in batch)
    return enqueued_at


@dataclass
class DrainedRun:
    """What one drained workload left behind (everything the checks read)."""

    before: dict[str, Mapping[str, Any]]
    after: dict[str, Mapping[str, Any]]
    calls: list[dict[str, Any]]
    outcomes: list[AllocationOutcome]
    letters: list[DeadLetter]
    events: list[dict[str, Any]]
    traces: TraceSummary
    pool: ConsumerPool
    enqueued_at: dict[str, float]
    sent_all: bool
    drained: bool
    duration_s: float
    pool_low_events: int
    killed: int
    """Consumer processes that ended by SIGKILL (crash points, function timeouts)."""
    visibility_timeout_s: int
    max_receive_count: int
    ledger: dict[str, LedgerEntry] | None = None
    """The request ledger table after the drain, by request id."""
    violations: Mapping[str, int] = field(default_factory=dict)
    """The simulator's ``violations`` (``flat_prompts_to_tiered``) after the drain."""
    identity: IdentityRecord | None = None
    """Under IMS: whose each request is and the users' memberships (invariant 7)."""
    ims_calls: list[dict[str, Any]] = field(default_factory=list)
    """The simulator's IMS call log after the drain (mints, exchanges, invalidations)."""

    @property
    def owners(self) -> Mapping[str, str]:
        """Request id -> the user it was enqueued for (empty without IMS)."""
        return self.identity.owners if self.identity is not None else {}


def drain_workload(
    stack: LocalStack,
    units: Sequence[Sequence[Outgoing]],
    *,
    consumers: int,
    timeout_s: float,
    send: Sender | None = None,
    queue: tuple[str, str] | None = None,
    dlq_url: str | None = None,
    crash: CrashPlan | None = None,
    handler: str = DEFAULT_HANDLER,
    env: Mapping[str, str] = FEATURES_ON,
    identities: LocalIdentities | None = None,
) -> DrainedRun:
    """Start ``consumers`` containers, feed ``units`` paced, wait for the drain, collect.

    Args:
        stack: A started, seeded stack.
        units: Send units in order.
        consumers: How many consumer processes.
        timeout_s: Overall budget for feeding and draining.
        send: How to enqueue (default: the allocation FIFO queue).
        queue: (URL, ARN) of another queue to consume (the standard-queue contrast).
        dlq_url: The DLQ to read afterwards besides the allocation DLQ.
        crash: Crash injection for the consumers (dead ones are restarted).
        handler: ``MODULE:FUNCTION`` the consumers call.
        env: Environment overrides for the consumers.
        identities: Under IMS, the users the default sender enqueues for.
    """
    queue_url = queue[0] if queue else stack.resources.queue_url
    collected_at = [time.monotonic()]

    def depth() -> QueueDepth:
        # Read the outcome capture as the run goes: moto scans a whole queue per message, so
        # thousands of events read at the end would take minutes (the capture is cumulative).
        if time.monotonic() - collected_at[0] >= _COLLECT_EVERY_S:
            stack.outcomes.events()
            collected_at[0] = time.monotonic()
        return queue_depth(stack.sqs, queue_url)

    before = workspaces_by_id(stack.simulator.dump()["workspaces"])
    started = time.monotonic()
    pool = stack.start_consumers(
        consumers, crash=crash, idle_sleep_s=0.1, handler=handler, queue=queue, **dict(env)
    )

    def idle() -> None:
        pool.restart_dead()  # a crashed container is replaced, as Lambda does
        time.sleep(0.05)

    try:
        enqueued_at = feed(
            units,
            send or fifo_sender(stack, identities),
            depth,
            max_in_queue=10 * consumers + 30,
            idle=idle,
            deadline=started + timeout_s,
        )
        sent_all = len(enqueued_at) == sum(map(len, units))
        remaining = max(1.0, started + timeout_s - time.monotonic())
        drained = sent_all and pool.wait_drained(depth, timeout_s=remaining)
    finally:
        pool.stop()
    duration = time.monotonic() - started
    dump = stack.simulator.dump()
    ims_calls = stack.simulator.ims_calls()
    keep_ims_calls(stack.work_dir, ims_calls)
    # As an operator would on the DLQ alarm: requests whose last receive never ran our code
    # get their terminal dead letter (and its outcome) before anything is read.
    audit_reads = audit_local_dead_letters(stack.resources)
    outcomes = stack.outcomes.outcomes()
    events = read_trace_events(pool.trace_paths)
    letters = stack.read_dead_letters(earlier_reads=audit_reads)  # the audit's own receives
    if dlq_url is not None:
        letters += stack.read_dead_letters(dlq_url)
    return DrainedRun(
        before=before,
        after=workspaces_by_id(dump["workspaces"]),
        calls=dump["calls"],
        outcomes=outcomes,
        letters=letters,
        events=events,
        traces=summarize_traces(events),
        pool=pool,
        enqueued_at=enqueued_at,
        sent_all=sent_all,
        drained=drained,
        duration_s=duration,
        pool_low_events=sum(
            1 for e in stack.outcomes.events() if e.get("detail-type") == POOL_LOW_DETAIL_TYPE
        ),
        killed=sum(1 for p in pool.processes if p.process.returncode == -signal.SIGKILL),
        visibility_timeout_s=stack.visibility_timeout_s,
        max_receive_count=stack.resources.max_receive_count,
        ledger=read_ledger_table(stack.resources),
        violations=dump.get("violations", {}),
        identity=None
        if identities is None
        else IdentityRecord(identities.owners, identities.memberships),
        ims_calls=ims_calls,
    )


GUARDED_LAG_MS = 1500.0
"""The write gate's lag in guarded runs (upstream ~9 s, shortened as in the demo; never 0)."""


def services_write_guarded(
    stack: LocalStack,
    workload: Workload,
    requests: Sequence[Request],
    run: DrainedRun,
    consumers: int,
    identities: LocalIdentities | None = None,
) -> MeteredWritesResult:
    """Each child's service writes through its guard, consumers serving the guards' ensures.

    The guards' ensures and their outcomes come after the run's record, so the drain's
    invariants are unchanged; the write-path invariant covers this phase.
    """
    reclaimed = reclaimed_children(requests)
    plans = {c: p for c, p in workload.plans.items() if c not in reclaimed}
    stack.simulator.faults(enforcement_lag_ms=GUARDED_LAG_MS)
    features = IMS_FEATURES if identities is not None else FEATURES_ON
    pool = stack.start_consumers(
        consumers, crash=None, idle_sleep_s=0.1, queue=None, **dict(features)
    )
    try:
        records, _ = guarded_service_writes(
            stack,
            plans,
            run.outcomes,
            retry_interval_s=GUARDED_LAG_MS / 1000.0 / 2.5,
            enforcement_lag_s=GUARDED_LAG_MS / 1000.0,
            identities=identities,
        )
        pool.wait_drained(lambda: queue_depth(stack.sqs, stack.resources.queue_url), timeout_s=120)
    finally:
        pool.stop()
    writes = as_metered_writes(records)
    skipped = len(set(workload.plans) & reclaimed)
    result = writes.result()
    if skipped:
        result = replace(result, detail=f"{result.detail} ({skipped} reclaimed children skipped)")
    return MeteredWritesResult(
        result,
        len(writes.refused),
        skipped,
        guarded=check_guarded_writes(records),
        retried=summarize_writes(records),
    )


@contextlib.contextmanager
def local_stack(
    config: HarnessConfig,
    name: str,
    *,
    visibility_timeout_s: int | None = None,
    credentials: CredentialMode | None = None,
    **kwargs: Any,
) -> Iterator[LocalStack]:
    """A fresh stack for one run.

    Its visibility timeout is the configured one, else the scenario's own
    (``visibility_timeout_s``), else the stack's generous default; its credential mode the
    scenario's (``credentials``), else the configured one.
    """
    work_dir = config.work_dir / f"{name}-c{config.consumers}" if config.work_dir else None
    visibility = config.visibility_timeout_s or visibility_timeout_s or DEFAULT_VISIBILITY_TIMEOUT_S
    with LocalStack(
        latency_ms=config.latency_ms,
        visibility_timeout_s=visibility,
        max_receive_count=config.max_receive_count,
        work_dir=work_dir,
        endpoints=config.endpoints,
        credentials=credentials or config.credentials,
        **kwargs,
    ) as stack:
        yield stack


def fifo_run(
    config: HarnessConfig,
    name: str,
    workload: Workload,
    *,
    units: Sequence[Sequence[Outgoing]] | None = None,
    crash: CrashPlan | None = None,
    handler: str = DEFAULT_HANDLER,
    env: Mapping[str, str] = FEATURES_ON,
    faults: Mapping[str, Any] | None = None,
    not_ready_ms: float = 0.0,
    visibility_timeout_s: int | None = None,
    guarded_writes: bool = False,
    beside: tuple[Sequence[dict[str, Any]], Sequence[Outgoing]] = ((), ()),
) -> tuple[DrainedRun, list[Request], MeteredWritesResult]:
    """Seed, drain through the FIFO queue, and do the services' writes; return the run.

    ``beside``: more workspaces to seed and requests to send after the workload's (each its own
    unit), outside the workload: no service writes for them, not in the returned requests (the
    tiered family, checked on its own).

    ``guarded_writes``: the services write through ``WriteGuard`` on the simulator's write gate
    (lag :data:`GUARDED_LAG_MS`), with consumers serving the guards' ensures, instead of setting
    usage directly.
    """
    with local_stack(
        config, name, visibility_timeout_s=visibility_timeout_s, not_ready_ms=not_ready_ms
    ) as stack:
        stack.simulator.seed([*workload.org.workspaces, *beside[0]])
        identities = None
        if stack.credentials == "ims":
            identities = LocalIdentities(stack)
            add_brand_users(identities, [*workload.org.workspaces, *beside[0]])
            env = {**env, "SERENITY_SIBLING_RECLAIM": IMS_FEATURES["SERENITY_SIBLING_RECLAIM"]}
        if faults:
            stack.simulator.faults(**faults)
        run = drain_workload(
            stack,
            [*(units if units is not None else workload.units), *((r,) for r in beside[1])],
            consumers=config.consumers,
            timeout_s=config.drain_timeout_s,
            crash=crash,
            handler=handler,
            env=env,
            identities=identities,
        )
        if faults:
            stack.simulator.faults(error_rate={}, stuck=[])
        requests = with_worker_releases(workload.requests, run.events, run.outcomes)
        if guarded_writes:
            writes = services_write_guarded(
                stack, workload, requests, run, config.consumers, identities
            )
        else:
            writes = services_write(stack, workload, requests, run)
    return run, requests, writes


@dataclass(frozen=True)
class MeteredWritesResult:
    """The services' writes after the drain (:func:`.writes.meter_writes`)."""

    result: InvariantResult
    refused: int
    skipped: int
    """Children left out: a sibling reclaim lowered them after their ensure, by design."""
    guarded: InvariantResult | None = None
    """With guarded writes: no guarded write refused while its pool had room."""
    retried: WritePathSummary | None = None


def services_write(
    stack: LocalStack, workload: Workload, requests: Sequence[Request], run: DrainedRun
) -> MeteredWritesResult:
    """Each child's service writes what its last applied ensure prepared for."""
    reclaimed = reclaimed_children(requests)
    plans = {c: p for c, p in workload.plans.items() if c not in reclaimed}
    writes = meter_writes(stack, plans, run.outcomes)
    result = writes.result()
    skipped = len(set(workload.plans) & reclaimed)
    if skipped:
        result = replace(result, detail=f"{result.detail} ({skipped} reclaimed children skipped)")
    return MeteredWritesResult(result, len(writes.refused), skipped)
