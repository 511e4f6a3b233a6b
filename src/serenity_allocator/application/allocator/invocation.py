"""One invocation: its batch planned, the configuration and ports its use cases share, its state.

First, the batch's plan (:func:`plan_batch`): every record validated up front, then
consecutive ensures coalesced. Validation happens here rather than through Powertools'
``model=``: with a model, a malformed record behind a failed one raises for the whole
invocation (Powertools 3.37).

The state holds the invocation's terminal outcomes (:class:`OutcomeBook`), the one place they
are recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from ...domain.coalescing import EnsureRun, PlannedMessage, plan_ensure_runs
from ...domain.container_memory import InFlightUnits, ParentLinks, PoolWatch
from ...domain.ledger import RequestLedger
from ...domain.messages import (
    REQUEST_ID_PATTERN,
    WORKSPACE_ID_PATTERN,
    AllocationOutcome,
    EnsureRequest,
    ReleaseRequest,
    cross_field_problem,
    describe_validation_error,
    parse_request,
)
from ...domain.model import Blocks
from ...domain.observations import MessageStarted, PoolLowWarning
from ...domain.ports import Clock, Sleeper, WorkspaceGateway
from ...domain.sizing import NO_CEILING, Ceiling
from ...domain.transfer import TransferPolicy
from ..credentials.request_credentials import CredentialBroker, RequestCredentials
from ..deadlines import Deadlines, LedgerDeadlines
from ..ports import DeadLetterSink, OutcomeSink, ReleaseEnqueuer, WorkerObserver
from .request_ledger import LedgerView, mark_final_receives_ahead, read_ledger, replay_invalid

INVALID_MESSAGE_CODE = "invalidMessage"
"""The error code of the ``invalid`` outcome of a message refused with a readable request id."""


@dataclass(frozen=True)
class InboundMessage:
    """One SQS record as the worker needs it, read from the event at the edge."""

    message_id: str
    group_id: str
    body: str
    receive_count: int = 1
    sent_timestamp_ms: float | None = None
    sequence_number: str | None = None
    """The record's SQS ``SequenceNumber`` (FIFO): the order key its outcome carries."""
    shape_error: str | None = None
    """Why the record's SQS envelope is malformed (a hand-made event); it is then invalid."""


@dataclass(frozen=True)
class BatchMessage:
    """One record of the batch: its request when valid, otherwise why it is invalid."""

    inbound: InboundMessage
    request: EnsureRequest | ReleaseRequest | None
    invalid_reason: str | None = None
    duplicate_of: str | None = None
    """The message id of an earlier record of this batch with the same request id: this one
    is not applied again and gets no outcome of its own."""
    invalid_outcome: AllocationOutcome | None = None
    """An invalid message whose request id can be read: the ``invalid`` outcome its caller
    hears (stored under that id and announced) besides the dead letter."""

    @property
    def message_id(self) -> str:
        """The SQS message id (the batch item identifier)."""
        return self.inbound.message_id

    @property
    def group_id(self) -> str:
        """The MessageGroupId (the child, for a valid message)."""
        return self.inbound.group_id

    @property
    def receive_count(self) -> int:
        """ApproximateReceiveCount of this delivery (1 = first)."""
        return self.inbound.receive_count


@dataclass(frozen=True)
class BatchPlan:
    """The batch in order, each message validated, and the coalesced ensure runs."""

    messages: dict[str, BatchMessage]
    order: tuple[str, ...]
    runs: dict[str, EnsureRun]

    def message(self, message_id: str) -> BatchMessage:
        """The planned message with this id (KeyError for an id not in the batch)."""
        return self.messages[message_id]


def message_keys(message: BatchMessage) -> MessageStarted:
    """The record's own ids, as every log line about it names them."""
    request = message.request
    return MessageStarted(
        message.message_id,
        request.workspace_id if request else message.group_id,
        request.request_id if request else None,
        request.kind if request else None,
        message.receive_count,
    )


def read_message(inbound: InboundMessage) -> BatchMessage:
    """Validate one record's body and its group id; never raises."""
    if inbound.shape_error is not None:
        outcome = _readable_outcome(inbound)
        return BatchMessage(inbound, None, inbound.shape_error, invalid_outcome=outcome)
    try:
        request = parse_request(inbound.body)
    except ValidationError as exc:
        # The discriminator's tag (``ensure``/``release``) in a path adds nothing.
        reason = describe_validation_error(exc, whole="body", skip=("ensure", "release"))
        return BatchMessage(inbound, None, reason, invalid_outcome=_readable_outcome(inbound))
    problem = cross_field_problem(request, inbound.group_id)
    if problem is not None:
        return BatchMessage(inbound, None, problem, invalid_outcome=_readable_outcome(inbound))
    return BatchMessage(inbound, request)


def _readable_outcome(inbound: InboundMessage) -> AllocationOutcome | None:
    """The ``invalid`` outcome of a refused body whose request id can be read, else None.

    Readable: the body is a JSON object whose ``request_id`` matches the contract's pattern
    (the id the caller waits on). The outcome carries the body's kind and workspace id when
    they are valid themselves, else ``unknown`` and the message's group id.
    """
    try:
        body = json.loads(inbound.body)
    except ValueError:
        return None
    if not isinstance(body, dict) or not _matches(REQUEST_ID_PATTERN, body.get("request_id")):
        return None
    kind = body.get("kind")
    workspace = body.get("workspace_id")
    if not isinstance(workspace, str) or not _matches(WORKSPACE_ID_PATTERN, workspace):
        workspace = inbound.group_id
    return AllocationOutcome(
        request_id=body["request_id"],
        kind=kind if kind in ("ensure", "release") else "unknown",
        workspace_id=workspace,
        status="invalid",
        error_code=INVALID_MESSAGE_CODE,
        receive_count=inbound.receive_count,
        dead_lettered=True,
    )


def _matches(pattern: str, value: object) -> bool:
    # The schema's patterns are anchored with ^...$ over ASCII; fullmatch without the anchors
    # keeps Python's "$ before a final newline" from letting "id\n" through.
    return isinstance(value, str) and re.fullmatch(pattern.strip("^$"), value) is not None


def plan_batch(
    inbound: Sequence[InboundMessage],
    *,
    dynamic_allocation: bool,
    standalone: frozenset[str] = frozenset(),
) -> BatchPlan:
    """Validate every record and plan the coalesced ensure runs (none when allocation is off).

    A request id seen earlier in the batch marks the later record a duplicate, and requests
    in ``standalone`` (a final ledger record exists: they are replayed; or a recorded intent:
    an earlier delivery may have applied them) join no run, so none adds its need to a
    combined top-up or leads one.
    """
    messages = _mark_duplicates([read_message(m) for m in inbound])
    runs = plan_ensure_runs(
        [
            PlannedMessage(m.message_id, m.group_id, m.request)
            for m in messages.values()
            if (dynamic_allocation or not isinstance(m.request, EnsureRequest))
            and m.duplicate_of is None
            and (m.request is None or m.request.request_id not in standalone)
        ]
    )
    return BatchPlan(messages=messages, order=tuple(messages), runs=runs)


def _mark_duplicates(messages: Sequence[BatchMessage]) -> dict[str, BatchMessage]:
    first_of: dict[str, str] = {}
    planned: dict[str, BatchMessage] = {}
    for read in messages:
        if read.message_id in planned:
            continue  # one SQS message, listed twice (a hand-made event): the first copy counts
        request = read.request
        if request is not None and request.request_id in first_of:
            planned[read.message_id] = replace(read, duplicate_of=first_of[request.request_id])
            continue
        if request is not None:
            first_of[request.request_id] = read.message_id
        planned[read.message_id] = read
    return planned


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
    """The longest one AWS call (publish, DLQ send, ledger write, enqueue) can take, retries
    included (the invocation's :class:`.Deadlines` reserve it)."""
    ims_call_budget_s: float = 0.0
    """The longest one IMS exchange can take (IMS mode): an exchange starts only when it fits."""

    def is_final_receive(self, receive_count: int) -> bool:
        """True when SQS moves the message to the DLQ if this receive fails too."""
        return receive_count >= self.max_receive_count


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
    in_flight: InFlightUnits | None = None
    """The units this container's recent ensures made room for, per child (None: not kept)."""
    parked: set[str] = field(default_factory=set)
    """Request ids this container parked for sibling reclaim (labels the later outcome)."""
    ledger: RequestLedger | None = None
    """The request ledger (None: replays are applied again, as before the ledger)."""
    parent_links: ParentLinks | None = None
    """Verifies an ensure's parent against the upstream (None: the message is trusted)."""
    credentials: CredentialBroker | None = None
    """IMS mode: every request runs as its user (None: static mode, local tools only)."""
    credential_workers: Executor | None = None
    """IMS mode: the bounded pool that opens and ends a batch's sessions concurrently (None:
    one after another, in the record's turn)."""


@dataclass(frozen=True)
class RequestContext:
    """What a batch applies each of its requests with, and ends a failed one with.

    The container's ``config`` and ``ports``; the batch's ``observer``, ``deadlines``, ledger
    records (``ledger``) and the pool warnings it collects (``pool_warnings``, appended to);
    in IMS mode its request sessions (``credentials``; None: static mode).
    """

    config: WorkerConfig
    ports: WorkerPorts
    observer: WorkerObserver
    deadlines: Deadlines
    ledger: LedgerView
    pool_warnings: list[PoolLowWarning]
    credentials: RequestCredentials | None = None


@dataclass
class BatchState:
    """What one batch produced so far (the coalesced runs carry their own progress)."""

    ledger: LedgerView
    """The batch's ledger records, read once before applying."""
    book: OutcomeBook
    """The terminal outcomes, in the order they were reached (stored in ``ledger`` first)."""
    pool_warnings: list[PoolLowWarning] = field(default_factory=list)
    handled: set[str] = field(default_factory=set)
    """Message ids Powertools handed over (the others were skipped behind a failed group)."""
    failure_reasons: dict[str, str] = field(default_factory=dict)
    """Why each record this invocation failed did fail (an error code), by message id."""
    credentials: RequestCredentials | None = None
    """IMS mode: the batch's request sessions (None: static mode)."""
    invalid_replays: dict[str, AllocationOutcome] = field(default_factory=dict)
    """Message id -> the stored outcome of an invalid message that this very message
    dead-lettered before (a redelivery after a crash, ADR 0020): replayed, not sent again."""


@dataclass
class Invocation:
    """One batch: the configuration, the ports, the plan, the deadlines and the batch's state.

    Only the two entry points (:func:`.handle_message`, :func:`.finish_batch`) take it whole;
    each use case they call is handed what it needs.
    """

    config: WorkerConfig
    ports: WorkerPorts
    observer: WorkerObserver
    plan: BatchPlan
    deadlines: Deadlines
    state: BatchState


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
    deadlines = Deadlines.for_batch(
        ports.clock,
        finish_by=finish_deadline,
        publish_calls=-(-len(plan.order) // PUBLISH_CHUNK) if ports.outcomes is not None else 0,
        aws_call_s=config.aws_call_budget_s,
        ims_call_s=config.ims_call_budget_s,
    )
    requests = [m.request for m in plan.messages.values() if m.request is not None]
    # The lookup and every later ledger write are bounded by the applying deadline (a dead
    # letter, written as a record fails, only by the function's own).
    ledger = read_ledger(
        ports.ledger,
        _looked_up_ids(plan),
        LedgerDeadlines(
            clock=ports.clock,
            sleep=ports.sleep,
            apply_by=deadlines.applying,
            finish_by=deadlines.finishing,
            call_budget_s=config.aws_call_budget_s,
        ),
    )
    ledger.sequence_numbers = _sequence_numbers(plan)
    standalone = _standalone(ledger, requests)
    if standalone:
        plan = plan_batch(
            inbound, dynamic_allocation=config.dynamic_allocation, standalone=standalone
        )
    credentials = (
        RequestCredentials(ports.credentials, observer, deadlines, ports.credential_workers)
        if ports.credentials is not None
        else None
    )
    if credentials is not None:
        credentials.open_ahead(_acting(plan, ledger, config))
    mark_final_receives_ahead(ledger, _final_receives(plan, config))
    return Invocation(
        config=config,
        ports=ports,
        observer=observer,
        plan=plan,
        deadlines=deadlines,
        state=BatchState(
            ledger=ledger,
            book=OutcomeBook(ledger=ledger, sequence_numbers=ledger.sequence_numbers),
            credentials=credentials,
            invalid_replays=_invalid_replays(ledger, plan),
        ),
    )


def _acting(
    plan: BatchPlan, ledger: LedgerView, config: WorkerConfig
) -> list[EnsureRequest | ReleaseRequest]:
    """The requests that will act as their users, to open ahead.

    Valid, first of their id, not answered by the ledger (a replay or a refusal opens nothing),
    and making Semrush calls.
    """
    requests = [
        m.request
        for m in plan.messages.values()
        if m.request is not None and m.duplicate_of is None
    ]
    answered = ledger.answered(requests)
    return [
        r
        for r in requests
        if r.request_id not in answered
        and (config.dynamic_allocation or isinstance(r, ReleaseRequest))
    ]


def _final_receives(
    plan: BatchPlan, config: WorkerConfig
) -> list[tuple[str, EnsureRequest | ReleaseRequest, int]]:
    """(message id, request, receive count) of the valid first copies on their final receive."""
    return [
        (mid, m.request, m.receive_count)
        for mid, m in plan.messages.items()
        if m.request is not None
        and m.duplicate_of is None
        and config.is_final_receive(m.receive_count)
    ]


def _looked_up_ids(plan: BatchPlan) -> list[str]:
    """The ids the ledger is asked for: every valid request's, an invalid message's readable one.

    The latter because an invalid message's own dead letter, delivered again, is replayed.
    """
    return [
        read.request_id
        for m in plan.messages.values()
        if (read := m.request or m.invalid_outcome) is not None
    ]


def _invalid_replays(ledger: LedgerView, plan: BatchPlan) -> dict[str, AllocationOutcome]:
    """The invalid messages whose own dead letter the ledger holds, with its stored outcome."""
    return {
        mid: replayed
        for mid, m in plan.messages.items()
        if m.request is None
        and (replayed := replay_invalid(ledger, m.invalid_outcome, mid)) is not None
    }


def _standalone(
    ledger: LedgerView, requests: Sequence[EnsureRequest | ReleaseRequest]
) -> frozenset[str]:
    """Ids that join no coalesced run: each is applied or answered on its own.

    Replayed, refused or unreadable requests, those an earlier delivery may have applied (a
    recorded intent), and dead letters a delivery sent itself (replayed for that message).
    """
    return ledger.answered(requests) | {
        rid
        for rid, entry in ledger.entries.items()
        if entry.intent is not None or entry.source_message_id is not None
    }


def _sequence_numbers(plan: BatchPlan) -> dict[str, str]:
    """Message id -> SQS SequenceNumber, for the records that carry one."""
    return {
        mid: m.inbound.sequence_number
        for mid, m in plan.messages.items()
        if m.inbound.sequence_number is not None
    }


# Terminal outcomes: the one place an invocation records them (built by the domain's
# build_outcome). OutcomeBook.record is the only way an outcome enters the batch's results: a
# request that completes, one that runs out of receives, one skipped behind its group on its
# final receive. That single entry point is where a request ledger stores the outcome once
# (see the package docstring).
@dataclass
class OutcomeBook:
    """The invocation's terminal outcomes, in the order they were reached."""

    entries: list[tuple[str, AllocationOutcome]] = field(default_factory=list)
    ledger: LedgerView | None = None
    """Where a terminal outcome is stored once, before it is announced."""
    sequence_numbers: Mapping[str, str] = field(default_factory=dict)
    """Message id -> its SQS SequenceNumber: the order key every recorded outcome carries."""

    def record(
        self,
        message_id: str,
        outcome: AllocationOutcome,
        *,
        replayed: bool = False,
        completes: bool = False,
        finishing: bool = False,
    ) -> AllocationOutcome | None:
        """Record the terminal outcome of the request carried by ``message_id``.

        The ledger stores it first (a replayed outcome is already stored), so what is
        published is always what the ledger holds; the recorded outcome is returned, or None
        for a dead letter the ledger could not take (it is then not announced).

        ``completes``: the record completes with this outcome (SQS deletes the message), so a
        dead letter is one the worker sent itself; the ledger binds it to ``message_id``, and a
        redelivery of that message after a crash replays it (ADR 0020). A record that fails
        (SQS's redrive then moves it) is not bound. ``finishing``: the store may use the time
        up to the finishing deadline (a final receive's second try).

        Raises:
            LedgerUnavailableError: a completed request's outcome could not be stored (the
                record fails and comes back; nothing is published for it).
        """
        sequence_number = self.sequence_numbers.get(message_id)
        if not replayed and outcome.sequence_number is None and sequence_number is not None:
            outcome = outcome.model_copy(update={"sequence_number": sequence_number})
        if self.ledger is not None and not replayed:
            held = self.ledger.store(
                outcome, message_id if completes else None, finishing=finishing
            )
            if held is None:
                return None
            outcome = held
        self.entries.append((message_id, outcome))
        return outcome

    def __len__(self) -> int:
        return len(self.entries)
