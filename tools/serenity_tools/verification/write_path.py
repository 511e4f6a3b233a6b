"""The write path as services walk it: guarded writes on the simulator's write gate, and checks.

Reusable by the demo, the harness and the bench:

- :class:`GateClient`: a service's HTTP view of the Project Engine write gate (the simulator's
  ``/project-engine`` routes), with a bearer like the real gateway wants.
- :class:`GuardedServiceWriter`: writes as the README tells a service to, one
  :class:`~serenity_allocator.producer.WriteGuard` per request: front the ensure sized on the
  batch, then the wrapped write. It records every write, and for a write that ends refused,
  how short the child was and how much room its org pool had at that moment.
- :class:`InProcessAllocator`: an ensure enqueuer that applies each ensure with the real use
  case over real HTTP after an optional queue latency on an injected clock (bench, unit tests).
- :func:`check_guarded_writes`: the invariant "no guarded write ends refused while its org pool
  had room for it"; :func:`summarize_writes`: retried writes and their waits.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import httpx

from serenity_allocator.adapters.ledger_outcome_reader import OutcomeReader
from serenity_allocator.adapters.sqs import AllocationProducer
from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureHooks,
    EnsureRules,
    ensure_headroom,
)
from serenity_allocator.domain.container_memory import InFlightUnits
from serenity_allocator.domain.errors import AllocationError, UpstreamError
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.ports import Clock, WorkspaceGateway
from serenity_allocator.domain.transfer import FAIL_FAST, TransferContext
from serenity_allocator.write_guard import (
    EnsureEnqueuer,
    GuardPolicy,
    NullQuotaRetryRecorder,
    OutcomeLookup,
    QuotaRetryRecorder,
    WriteGuard,
    WriteOutcome,
    WriteRefusedError,
)
from serenity_tools.verification.credential_story import user_of
from serenity_tools.verification.invariants import InvariantResult, invariant_result
from serenity_tools.verification.writes import MeteredWrites, last_served_ensures

if TYPE_CHECKING:
    from serenity_tools.standins.identities import LocalIdentities, UserProducer
    from serenity_tools.standins.stack import LocalStack

WriteSite = Literal["prompts", "project"]
AiReader = Callable[[str], Mapping[str, Mapping[str, int]]]
"""Reads a workspace's ``ai`` block (``{dim: {used, drafted, total}}``) without touching the API
call log (the simulator's ``/__dump``), so the checks never change what they measure."""

INVARIANT_NAME = "guarded writes refused only when the pool was short"
_REFUSAL_WORDS = {"exhausted": "refused", "timed-out": "out of time"}
REFUSED_OUTCOMES = frozenset(_REFUSAL_WORDS)
"""A guarded write that did not land: refused for quota, or out of time."""


class GateClient:
    """The write gate over HTTP: what a service's Project Engine client does.

    Args:
        write_url: The gate's base (``SimulatorServer.write_url``).
        token: The bearer to send.
        http: An optional ready client (its base URL is ignored; absolute URLs are used).
        timeout_s: Per-request timeout.
    """

    def __init__(
        self, write_url: str, token: str, http: httpx.Client | None = None, timeout_s: float = 10
    ) -> None:
        self._base = write_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._http = http or httpx.Client(timeout=timeout_s, trust_env=False)

    def write_prompts(self, workspace_id: str, count: int) -> httpx.Response:
        """Draft ``count`` prompts (metered at the write)."""
        return self._post(f"/v1/workspaces/{workspace_id}/prompts", {"count": count})

    def publish_prompts(self, workspace_id: str, count: int) -> httpx.Response:
        """Publish ``count`` drafted prompts (not metered)."""
        return self._post(f"/v1/workspaces/{workspace_id}/prompts/publish", {"count": count})

    def discard_drafts(self, workspace_id: str, count: int) -> httpx.Response:
        """Discard ``count`` drafted prompts (a refused request's rollback; not metered)."""
        return self._post(f"/v1/workspaces/{workspace_id}/prompts/discard", {"count": count})

    def create_project(self, workspace_id: str) -> httpx.Response:
        """Create one project (metered)."""
        return self._post(f"/v1/workspaces/{workspace_id}/projects", {})

    def close(self) -> None:
        """Close the HTTP client."""
        self._http.close()

    def _post(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        return self._http.post(self._base + path, json=body, headers=self._headers)


@dataclass(frozen=True)
class WriteRecord:
    """One guarded write as it ended.

    Attributes:
        short_by: For a refused write: units the child lacked at the end (used + drafted +
            the write - total; 0 or less means the total already covered it: the lag).
        pool_free: For a refused write: the org pool's free units (total - used) at the end.
    """

    workspace_id: str
    parent_workspace_id: str
    site: WriteSite
    units: int
    attempts: int
    waited_s: float
    outcome: WriteOutcome
    fronted: bool
    short_by: int | None = None
    pool_free: int | None = None

    @property
    def refused_with_room(self) -> bool:
        """True when the write ended refused although its pool could have covered it."""
        if self.outcome not in REFUSED_OUTCOMES or self.short_by is None or self.pool_free is None:
            return False
        return self.short_by <= self.pool_free


@dataclass
class GuardedServiceWriter:
    """Writes like a well-behaved service: one guard per request, front, then wrapped writes.

    Args:
        gate: The write gate client.
        producer: Enqueues ensures (the real producer, or :class:`InProcessAllocator`).
        read_ai: Reads a workspace's ``ai`` block outside the API call log.
        policy: The guard's retries, pause and per-request deadline.
        recorder: Receives ``MeteredQuotaClassifier`` per 405 and ``QuotaRetryOutcome`` per cycle.
        outcomes: The guard's outcome lookup (the ledger's ``OutcomeReader``), if any.
        clock: Monotonic seconds (the guard's deadline).
        sleep: The guard's pause between attempts.
    """

    gate: GateClient
    producer: EnsureEnqueuer
    read_ai: AiReader
    policy: GuardPolicy = field(default_factory=GuardPolicy)
    recorder: QuotaRetryRecorder = field(default_factory=NullQuotaRetryRecorder)
    outcomes: OutcomeLookup | None = None
    clock: Clock | None = None
    sleep: Callable[[float], None] | None = None
    records: list[WriteRecord] = field(default_factory=list)

    def write_prompts(
        self, workspace_id: str, parent_id: str, count: int, *, front: bool = True
    ) -> WriteRecord:
        """One request drafting ``count`` prompts on ``workspace_id``."""
        return self._request(
            workspace_id,
            parent_id,
            "prompts",
            count,
            lambda: self.gate.write_prompts(workspace_id, count),
            front=front,
        )

    def create_project(
        self, workspace_id: str, parent_id: str, *, front: bool = True
    ) -> WriteRecord:
        """One request creating a project on ``workspace_id``."""
        return self._request(
            workspace_id,
            parent_id,
            "project",
            1,
            lambda: self.gate.create_project(workspace_id),
            front=front,
        )

    def _request(
        self,
        workspace_id: str,
        parent_id: str,
        site: WriteSite,
        units: int,
        call: Callable[[], httpx.Response],
        *,
        front: bool,
    ) -> WriteRecord:
        guard = self._guard(workspace_id, parent_id)
        need = {"prompts": units} if site == "prompts" else {"projects": units}
        if front:
            guard.front(need)
        try:
            guard.write(call, need=need, site=site)
            report = guard.history[-1]
            record = WriteRecord(
                workspace_id, parent_id, site, units, report.attempts, report.waited_s,
                report.outcome, front,
            )  # fmt: skip
        except WriteRefusedError as exc:
            record = self._refused(workspace_id, parent_id, site, units, exc, front=front)
        self.records.append(record)
        return record

    def _guard(self, workspace_id: str, parent_id: str) -> WriteGuard:
        options: dict[str, Any] = {
            "policy": self.policy,
            "recorder": self.recorder,
            "outcomes": self.outcomes,
        }
        if self.clock is not None:
            options["clock"] = self.clock
        if self.sleep is not None:
            options["sleep"] = self.sleep
        return WriteGuard(self.producer, workspace_id, parent_id, **options)

    def _refused(
        self,
        workspace_id: str,
        parent_id: str,
        site: WriteSite,
        units: int,
        exc: WriteRefusedError,
        *,
        front: bool,
    ) -> WriteRecord:
        dim = "prompts" if site == "prompts" else "projects"
        child = self.read_ai(workspace_id)[dim]
        pool = self.read_ai(parent_id)[dim]
        short_by = child["used"] + child.get("drafted", 0) + units - child["total"]
        outcome: WriteOutcome = "exhausted" if exc.code == "quotaExceeded" else "timed-out"
        return WriteRecord(
            workspace_id, parent_id, site, units, exc.attempts, exc.waited_s, outcome,
            front, short_by=short_by, pool_free=pool["total"] - pool["used"],
        )  # fmt: skip


def simulator_ai_reader(dump: Callable[[], Mapping[str, Any]]) -> AiReader:
    """An :data:`AiReader` over the simulator's ``/__dump`` (e.g. ``SimulatorServer.dump``)."""

    def read(workspace_id: str) -> Mapping[str, Mapping[str, int]]:
        for workspace in dump()["workspaces"]:
            if workspace["id"] == workspace_id:
                ai: Mapping[str, Mapping[str, int]] = workspace["ai"]
                return ai
        raise KeyError(workspace_id)

    return read


@dataclass
class InProcessAllocator:
    """Applies ensures with the real use case over real HTTP, after a queue latency.

    An ensure enqueued at ``t`` is applied by the first :meth:`pump` at or after
    ``t + latency_s`` on ``clock`` (a child's due ensures coalesced into one call), with the
    worker's memory of the units its ensures made room for (:class:`.InFlightUnits`);
    :meth:`sleep` advances a fake clock and pumps, so a guard
    given it waits in simulated time. Outcomes are kept in :attr:`applied`.
    """

    gateway: WorkspaceGateway
    clock: Clock
    advance: Callable[[float], None]
    latency_s: float = 0.0
    pending: list[tuple[float, str, str, Totals, bool]] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    enqueued: int = 0

    def __post_init__(self) -> None:
        self.in_flight = InFlightUnits(self.clock)

    def enqueue(self, request: EnsureRequest) -> str:
        """Queue one ensure (ceilings and labels are not modelled here)."""
        due = self.clock() + self.latency_s
        self.pending.append(
            (
                due,
                request.workspace_id,
                request.parent_workspace_id,
                request.need,
                request.include_drafted,
            )
        )
        self.enqueued += 1
        self.pump()
        return request.request_id

    def pump(self) -> None:
        """Apply every ensure that is due; one child's due ensures as one call (coalesced).

        The worker coalesces a child's consecutive ensures in a batch the same way: the sum of
        the needs, drafts counted when any asked.
        """
        now = self.clock()
        due = [entry for entry in self.pending if entry[0] <= now]
        self.pending = [entry for entry in self.pending if entry[0] > now]
        runs: dict[tuple[str, str], tuple[Totals, bool]] = {}
        for _, child, parent, need, include_drafted in due:
            total, drafted = runs.get((child, parent), (Totals(), False))
            runs[(child, parent)] = (total.plus(need), drafted or include_drafted)
        for (child, parent), (need, include_drafted) in runs.items():
            ctx = TransferContext(clock=self.clock, sleep=self.advance)
            try:
                ask = EnsureAsk(child, parent, need, include_drafted=include_drafted)
                rules, hooks = EnsureRules(policy=FAIL_FAST), EnsureHooks(in_flight=self.in_flight)
                result = ensure_headroom(self.gateway, ask, rules, ctx, hooks)
                self.applied.append(result.outcome)
            except (AllocationError, UpstreamError) as exc:
                self.applied.append(getattr(exc, "code", f"upstream{getattr(exc, 'status', '')}"))

    def sleep(self, seconds: float) -> None:
        """Advance the clock, then apply what became due (a guard's pause)."""
        self.advance(seconds)
        self.pump()


@dataclass(frozen=True)
class WritePathSummary:
    """The numbers a run reports about its guarded writes."""

    writes: int
    first_time: int
    retried: int
    recovered: int
    exhausted: int
    timed_out: int
    refused_with_room: int
    failed: int
    wait_p50_s: float
    wait_p95_s: float
    wait_max_s: float

    def line(self) -> str:
        """One line for a table or a log."""
        return (
            f"{self.writes} guarded writes: {self.first_time} first time, {self.retried} retried "
            f"({self.recovered} recovered, {self.exhausted} refused, {self.timed_out} out of time, "
            f"{self.refused_with_room} "
            f"with pool room); retried waits p50 {self.wait_p50_s:.1f} s, p95 "
            f"{self.wait_p95_s:.1f} s, max {self.wait_max_s:.1f} s"
        )


def summarize_writes(records: Sequence[WriteRecord]) -> WritePathSummary:
    """Count the writes and how long the retried ones waited."""
    outcomes = Counter(r.outcome for r in records)
    waits = sorted(r.waited_s for r in records if r.attempts > 1)
    return WritePathSummary(
        writes=len(records),
        first_time=sum(1 for r in records if r.attempts == 1 and r.outcome == "accepted"),
        retried=len(waits),
        recovered=outcomes["recovered"],
        exhausted=outcomes["exhausted"],
        timed_out=outcomes["timed-out"],
        refused_with_room=sum(1 for r in records if r.refused_with_room),
        failed=outcomes["failed"],
        wait_p50_s=percentile(waits, 50),
        wait_p95_s=percentile(waits, 95),
        wait_max_s=percentile(waits, 100),
    )


def check_guarded_writes(records: Sequence[WriteRecord]) -> InvariantResult:
    """No guarded write ends refused while its org pool had room for it (0 violations).

    A write that ended refused although the child's total already covered it (the lag outlived
    the retries) counts as a violation too: the pool trivially had room.
    """
    violations = [
        f"{r.workspace_id} {r.site} x{r.units}: {_REFUSAL_WORDS[r.outcome]} after "
        f"{r.attempts} attempts ({r.waited_s:.1f} s), short {r.short_by}, pool free {r.pool_free}"
        for r in records
        if r.refused_with_room
    ]
    return invariant_result(INVARIANT_NAME, violations, summarize_writes(records).line())


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(pct / 100.0 * len(sorted_values)))
    return float(sorted_values[rank - 1])


@dataclass
class RecordingEnqueuer:
    """The real producer, remembering every ensure the guards enqueued (for the run's checks)."""

    producer: AllocationProducer
    requests: list[EnsureRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    users: UserProducer | None = None
    """Under IMS: each ensure goes with its child's user's credential (the child's service)."""

    def enqueue(self, request: EnsureRequest) -> str:
        """Send and remember one ensure."""
        if self.users is None:
            self.producer.enqueue(request)
        else:
            self.users.enqueue(request, user_of(request.workspace_id))
        with self._lock:
            self.requests.append(request)
        return request.request_id


def write_after_ensures(
    writer: GuardedServiceWriter,
    plans: Mapping[str, Sequence[EnsureRequest | ReleaseRequest]],
    outcomes: Sequence[AllocationOutcome],
    *,
    workers: int = 8,
) -> list[WriteRecord]:
    """Each child's service now makes the write its last applied ensure prepared for, guarded.

    Prompts are one batch of the ensure's prompts; projects one request per project. Children
    write in parallel (``workers`` threads), each child's writes in order.
    """
    jobs = last_served_ensures(plans, outcomes)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        done = pool.map(partial(_write_for, writer), jobs)
        return [record for records in done for record in records]


def _write_for(writer: GuardedServiceWriter, ensure: EnsureRequest) -> list[WriteRecord]:
    """The writes one applied ensure prepared for: one prompts batch, one call per project."""
    child, parent = ensure.workspace_id, ensure.parent_workspace_id
    done = []
    if ensure.need.prompts:
        done.append(writer.write_prompts(child, parent, ensure.need.prompts))
    done += [writer.create_project(child, parent) for _ in range(ensure.need.projects)]
    return done


def as_metered_writes(records: Sequence[WriteRecord]) -> MeteredWrites:
    """The guarded writes in the shape of the "writes after ensure accepted" check."""
    refused = tuple(sorted({r.workspace_id for r in records if r.outcome in REFUSED_OUTCOMES}))
    return MeteredWrites(sum(1 for r in records if r.outcome not in REFUSED_OUTCOMES), refused)


def guarded_service_writes(
    stack: LocalStack,
    plans: Mapping[str, Sequence[EnsureRequest | ReleaseRequest]],
    outcomes: Sequence[AllocationOutcome],
    *,
    retry_interval_s: float,
    enforcement_lag_s: float,
    deadline_s: float = 30.0,
    recorder: QuotaRetryRecorder | None = None,
    identities: LocalIdentities | None = None,
) -> tuple[list[WriteRecord], list[EnsureRequest]]:
    """On a local stack, the services write through their guards (:func:`write_after_ensures`).

    The guards' ensures go through the real producer onto the stack's queue (consumers must be
    running for a recovery to be served), and the guards read their outcomes from the stack's
    request ledger (the README's setup), so a recovery lasts until its ensure is settled and
    the gate's lag (``enforcement_lag_s``) has passed, inside ``deadline_s``. Returns the writes
    and the ensures the guards sent. With ``identities`` (an IMS run) each guard's ensure goes
    with its child's user's credential; the writes themselves use the static bearer (the
    services' own calls on the write gate, outside what the worker's identity invariant covers).
    """
    enqueuer = RecordingEnqueuer(
        AllocationProducer(stack.resources.queue_url, stack.client("sqs")),
        users=identities.producer() if identities is not None else None,
    )
    reader = OutcomeReader(stack.resources.ledger_table, stack.client("dynamodb"))
    gate = GateClient(stack.simulator.write_url, stack.static_token)
    policy = GuardPolicy(
        interval_s=retry_interval_s, deadline_s=deadline_s, enforcement_lag_s=enforcement_lag_s
    )
    writer = GuardedServiceWriter(
        gate,
        enqueuer,
        simulator_ai_reader(stack.simulator.dump),
        policy,
        recorder or NullQuotaRetryRecorder(),
        outcomes=reader,
    )
    try:
        records = write_after_ensures(writer, plans, outcomes)
    finally:
        gate.close()
    return records, enqueuer.requests
