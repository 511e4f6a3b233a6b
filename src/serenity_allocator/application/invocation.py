"""What the use cases share: the worker's configuration, its ports, and one invocation's state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..domain.allocation import EnsureResult
from ..domain.ceiling import NO_CEILING, Ceiling
from ..domain.ledger import RequestLedger
from ..domain.model import Blocks
from ..domain.parent_links import ParentLinks
from ..domain.pool_watch import PoolLowWarning, PoolWatch
from ..domain.ports import AllocationObserver, Clock, Sleeper, WorkspaceGateway
from ..domain.transfer import TransferContext, TransferPolicy
from .attempt_observer import AttemptObserver
from .batch_plan import BatchPlan, InboundMessage, plan_batch
from .outcomes import OutcomeBook
from .ports import DeadLetterSink, OutcomeSink, ReleaseEnqueuer, WorkerObserver
from .request_ledger import LedgerView, read_ledger

PUBLISH_CHUNK = 10
"""Outcomes per publish call (PutEvents takes at most 10 entries)."""


@dataclass(frozen=True)
class WorkerConfig:
    """The rules' knobs, taken from the validated settings at the edge."""

    dynamic_allocation: bool
    blocks: Blocks
    max_receive_count: int
    """The redrive policy's maxReceiveCount: the receive after which SQS dead-letters."""
    ensure_policy: TransferPolicy
    release_policy: TransferPolicy
    tight_pool_fallback: bool = True
    sibling_reclaim: bool = False
    sibling_reclaim_max_parks: int = 2
    sibling_reclaim_max_siblings: int = 3
    ceiling_backstop: Ceiling = NO_CEILING
    """The environment's per-brand ceiling; the stricter of it and a message's ceiling applies."""
    aws_call_budget_s: float = 0.0
    """The longest one AWS call (publish, DLQ send, enqueue) can take, retries included."""


@dataclass
class WorkerPorts:
    """The outside world, built once per container (``None``: that feature is not wired)."""

    gateway: WorkspaceGateway
    clock: Clock
    sleep: Sleeper
    wall_clock_ms: Callable[[], float]
    dead_letters: DeadLetterSink | None = None
    outcomes: OutcomeSink | None = None
    enqueuer: ReleaseEnqueuer | None = None
    is_unmetered: Callable[[str], bool] | None = None
    pool_watch: PoolWatch | None = None
    parked: set[str] = field(default_factory=set)
    """Request ids this container parked for sibling reclaim (labels the later outcome)."""
    ledger: RequestLedger | None = None
    """The request ledger (None: replays are applied again, as before the ledger)."""
    parent_links: ParentLinks | None = None
    """Verifies an ensure's parent against the upstream (None: the message is trusted)."""


@dataclass
class Invocation:
    """One batch being applied: the plan, the deadline and what the batch produced so far."""

    config: WorkerConfig
    ports: WorkerPorts
    observer: WorkerObserver
    plan: BatchPlan
    deadline: float
    """Monotonic time by which applying must be over: every upstream call and every AWS call
    made while applying (DLQ sends, reclaim enqueues) ends by then."""
    finish_deadline: float
    """Monotonic time by which the invocation must be done (the remaining time less the safety
    margin): publishing the outcomes ends by then."""
    book: OutcomeBook = field(default_factory=OutcomeBook)
    run_results: dict[str, EnsureResult] = field(default_factory=dict)
    """A coalesced run's result, keyed by its leader's message id."""
    pool_warnings: list[PoolLowWarning] = field(default_factory=list)
    handled: set[str] = field(default_factory=set)
    """Message ids Powertools handed over (the others were skipped behind a failed group)."""
    ledger: LedgerView = field(default_factory=LedgerView)
    """The batch's ledger records, read once before applying."""
    finishing: bool = False
    """Set once every record was handed over: what is left is announcing the batch."""

    def attempt_observer(self) -> AttemptObserver:
        """A fresh observer for one ensure attempt (its verdicts held until committed)."""
        return AttemptObserver(self.observer, self.ports.pool_watch, self.pool_warnings)

    def transfer_context(self, observer: AllocationObserver) -> TransferContext:
        """Clock, sleep and this invocation's deadline, reporting to ``observer``."""
        ports = self.ports
        return TransferContext(
            clock=ports.clock, sleep=ports.sleep, deadline=self.deadline, observer=observer
        )

    def has_time_to_call_aws(self, *, finishing: bool = False) -> bool:
        """True when one AWS call, retries included, still fits before the phase's deadline.

        While applying, the time reserved for publishing the outcomes is not available.
        """
        limit = self.finish_deadline if finishing else self.deadline
        return self.ports.clock() + self.config.aws_call_budget_s <= limit

    def is_final_receive(self, receive_count: int) -> bool:
        """True when SQS moves the message to the DLQ if this receive fails too."""
        return receive_count >= self.config.max_receive_count


def start_batch(
    config: WorkerConfig,
    ports: WorkerPorts,
    observer: WorkerObserver,
    inbound: Sequence[InboundMessage],
    *,
    finish_deadline: float,
) -> Invocation:
    """Validate and plan the batch; the returned invocation then handles it record by record.

    Applying ends early enough to leave the time publishing this batch's outcomes may take
    (one AWS call per chunk), so the outcomes of applied requests can always be announced.
    """
    plan = plan_batch(inbound, dynamic_allocation=config.dynamic_allocation)
    ledger = read_ledger(
        ports.ledger, (m.request.request_id for m in plan.messages.values() if m.request)
    )
    settled = frozenset(rid for rid in ledger.entries if ledger.replay(rid) is not None)
    if settled:  # replayed requests join no coalesced run
        plan = plan_batch(inbound, dynamic_allocation=config.dynamic_allocation, settled=settled)
    chunks = -(-len(plan.order) // PUBLISH_CHUNK) if ports.outcomes is not None else 0
    invocation = Invocation(
        config=config,
        ports=ports,
        observer=observer,
        plan=plan,
        deadline=finish_deadline - chunks * config.aws_call_budget_s,
        finish_deadline=finish_deadline,
        ledger=ledger,
        book=OutcomeBook(ledger=ledger, sequence_numbers=_sequence_numbers(plan)),
    )
    # A ledger write made while applying must leave the outcome publish its time; a dead
    # letter, or a write made while finishing, needs only to end before the function does.
    ledger.has_time = lambda finishing: invocation.has_time_to_call_aws(
        finishing=finishing or invocation.finishing
    )
    return invocation


def _sequence_numbers(plan: BatchPlan) -> dict[str, str]:
    """Message id -> SQS SequenceNumber, for the records that carry one."""
    return {
        mid: m.inbound.sequence_number
        for mid, m in plan.messages.items()
        if m.inbound.sequence_number is not None
    }
