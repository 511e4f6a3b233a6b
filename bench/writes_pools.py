"""Measurement: the write workload on real-sized pools, under block sizes and switches.

The pools are the real sizes of :mod:`bench.real_sizes` (same seeds): a gold pool of 13
projects / 800 prompts (eight busy children starting empty, two idle ones carved 200 each the
old way), the dev-like parent (0/2 projects, 0/1913 prompts, three new children) and an
unmetered customer parent (200 projects, ten children). On each, services write as
:mod:`bench.writes`'s ``guard`` style does: one :class:`~serenity_allocator.write_guard.WriteGuard`
per request (front sized on the burst, every write wrapped), on the simulator's write gate with
its 9 s enforcement lag, all on one simulated clock, over real HTTP. Unlike there, each guard is
given an outcome lookup, as the contract asks (ADR 0003, item 3): the worker's terminal outcomes,
which the request ledger would hold, so a recovery follows its request's pending front (ADR 0019).

Unlike the synthetic write workload (whose allocator is the domain use case alone), the guards'
ensures go through the real producer into the in-process FIFO model (:mod:`bench.fifo`) and are
served, ``queue_latency_s`` after they were sent, by the real ``lambda_handler`` with a runtime
from ``build_runtime(AllocatorSettings.from_env(env))``: block sizes, the tight-pool fallback and
sibling reclaim (its releases enqueued into the same queue, a parked ensure redelivered) are the
worker's own. Each pool runs under each of :data:`bench.real_sizes.VARIANTS`.

Reported per pool and variant: service requests; requests refused for ``orgPoolExhausted``
(a write refused at the end, what a customer sees as the ``409``, after the worker rejected
one of the request's ensures ``orgPoolExhausted``), every refused request, and the ensures
rejected ``orgPoolExhausted`` (a request's front and its recoveries each count); units
stranded in the pool's children after the workload (total - used - drafted, per dimension);
upstream calls per request (User Manager calls plus write-gate attempts, from the simulator's
call log); the writes that met the gate's lag and their waits on the simulated clock (all
writes, and in steady state: each child's first request left out, its first top-up meets the
lag whatever the allocator does). Counts, ratios and simulated seconds only: no real time.

``ims``: every ensure acts as its child's user (:mod:`.credentials`: a promise minted per
ensure by the service, the worker's IMS credential broker over an in-memory table), as in
every deployment; otherwise the worker's one static token.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.adapters.sqs import AllocationProducer
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest
from serenity_allocator.domain.model import Totals
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import build_runtime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_allocator.write_guard import GuardPolicy, WriteGuard, WriteRefusedError
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.simulator import SimulatorServer, SimulatorState, start_simulator
from serenity_tools.verification.write_path import GateClient, percentile

from .common import (
    BENCH_TOKEN,
    MAX_RECEIVE_COUNT,
    QUEUE_URL,
    RecordingEvents,
    allocator_env,
    note,
    ratio,
    silenced,
)
from .credentials import BenchUsers, MemoryCredentialStore, ims_counts, ims_env, ims_runtime
from .fifo import FifoQueue, lambda_event
from .real_sizes import VARIANTS, customer_parent, dev_parent, gold_pool
from .virtual_time import VirtualTime
from .write_workload import GATE_OPS, Outcome, Request

START = 1_000.0
POOL_CODE = "orgPoolExhausted"


@dataclass(frozen=True)
class PoolWrites:
    """One real-sized pool: its seed and the service requests written into it."""

    key: str
    title: str
    parent: str
    seed: list[dict[str, Any]]
    requests: list[Request]


def _plan(
    rng: random.Random,
    children: Sequence[str],
    count: int,
    sizes: tuple[int, ...],
    *,
    batches: int,
    project_share: float,
) -> list[Request]:
    """``count`` requests ~1 s apart on random children: a project, or 1..``batches`` batches."""
    at, out = 0.0, []
    for _ in range(count):
        at += rng.expovariate(1.0)
        child = rng.choice(children)
        if rng.random() < project_share:
            out.append(Request(at, child, (), True))
        else:
            burst = tuple(rng.choice(sizes) for _ in range(rng.randint(1, batches)))
            out.append(Request(at, child, burst, False))
    return out


def gold_writes(requests: int = 40, busy: int = 8) -> PoolWrites:
    """The gold pool: 40 requests of 1-2 batches of 5-20 prompts (5 % a project) on the
    ``busy`` children, about 600 prompts against 400 free and 340 the idle children do not
    use."""
    base = gold_pool(busy=busy)
    names = [w["id"] for w in base.seed if w["id"].startswith("gold-busy")]
    plan = _plan(random.Random(21), names, requests, (5, 10, 15, 20), batches=2, project_share=0.05)
    return PoolWrites(base.key, base.title, "gold-pool", base.seed, plan)


def dev_writes(rounds: int = 3) -> PoolWrites:
    """The dev-like parent: each of three new children creates a project first (two fit), then
    ``rounds`` requests of one 50-200 prompt batch each, round-robin."""
    base = dev_parent()
    children = [w["id"] for w in base.seed if w.get("parent_id")]
    rng = random.Random(22)
    plan = [Request(float(i), child, (), True) for i, child in enumerate(children)]
    for n in range(rounds * len(children)):
        at = float(len(children) + n)
        plan.append(Request(at, children[n % len(children)], (rng.choice((50, 100, 200)),), False))
    return PoolWrites("dev", base.title, "dev-parent", base.seed, plan)


def customer_writes(requests: int = 40) -> PoolWrites:
    """The unmetered customer parent: 40 requests of 1-3 batches of 10-40 (10 % a project)."""
    base = customer_parent()
    children = [w["id"] for w in base.seed if w.get("parent_id")]
    plan = _plan(
        random.Random(23), children, requests, (10, 20, 30, 40), batches=3, project_share=0.1
    )
    return PoolWrites("customer", base.title, "customer-parent", base.seed, plan)


@dataclass
class QueuedWorker:
    """The guards' ensures through the real producer, the FIFO model and the real handler.

    An ensure sent at ``t`` enters the queue at ``t + latency_s``, and a pump then drains the
    queue (a parked ensure and the releases its park enqueued included) before the clock moves
    on, whatever the services are doing (each request is a task of ``clock``).
    """

    sim: SimulatorServer
    clock: VirtualTime
    overrides: dict[str, str]
    latency_s: float = 1.0
    ims: bool = False
    pending: list[tuple[float, EnsureRequest]] = field(default_factory=list)
    final: dict[str, dict[str, Any]] = field(default_factory=dict)
    owner: dict[str, int] = field(default_factory=dict)
    serving: threading.local = field(default_factory=threading.local)
    """The index of the request the calling task serves (``serving.index``)."""
    enqueued: int = 0
    users: BenchUsers | None = None

    def __post_init__(self) -> None:
        if self.ims:
            store = MemoryCredentialStore()
            settings = AllocatorSettings.from_env(ims_env(self.sim, **self.overrides))
            with silenced():
                self.runtime = ims_runtime(settings, store)
            self.users = BenchUsers(self.sim, store)
        else:
            settings = AllocatorSettings.from_env(allocator_env(self.sim.origin, **self.overrides))
            with silenced():
                self.runtime = build_runtime(settings)
        self.events = RecordingEvents()
        self.runtime.outcomes = OutcomePublisher("bench-outcomes", events=self.events)  # type: ignore[arg-type]
        self.fifo = FifoQueue(max_receive_count=MAX_RECEIVE_COUNT)
        self.producer = AllocationProducer(QUEUE_URL, sqs=self.fifo)  # type: ignore[arg-type]
        if settings.sibling_reclaim:
            self.runtime.producer = self.producer

    def enqueue(self, request: EnsureRequest) -> str:
        """The services' producer: the ensure is on its way (due after the queue latency)."""
        if self.users is not None:
            self.users.hand_over([request])  # the service mints the ensure's promise
        due = self.clock() + self.latency_s
        self.pending.append((due, request))
        self.owner[request.request_id] = self.serving.index
        self.enqueued += 1
        self.clock.at(due, self.pump)
        return request.request_id

    def pump(self) -> None:
        """Send what is due, then let the handler drain the queue."""
        now = self.clock()
        due = [request for at, request in self.pending if at <= now]
        self.pending = [(at, request) for at, request in self.pending if at > now]
        if due:
            self.producer.enqueue_many(due)
        while len(self.fifo):
            batch = self.fifo.receive()
            with silenced():
                response = lambda_handler(
                    lambda_event(batch), LocalLambdaContext("bench-allocator", 60.0), self.runtime
                )
            for outcome in self.events.outcomes:
                self.final[outcome["request_id"]] = outcome  # a parked ensure's last word wins
            self.events.outcomes.clear()
            self.fifo.settle(batch, {f["itemIdentifier"] for f in response["batchItemFailures"]})

    def get_outcome(self, request_id: str) -> AllocationOutcome | None:
        """The guards' outcome lookup: a request's terminal outcome, None while it is pending."""
        outcome = self.final.get(request_id)
        return None if outcome is None else AllocationOutcome.model_validate(outcome)


def _write_request(
    worker: QueuedWorker, gate: GateClient, parent: str, request: Request
) -> list[Outcome]:
    """One service request through its guard; each write's outcome and wait."""
    guard = WriteGuard(
        worker, request.child, parent, policy=GuardPolicy(), outcomes=worker,
        clock=worker.clock, sleep=worker.clock.sleep,
    )  # fmt: skip
    child = request.child
    if request.project:
        writes = [({"projects": 1}, lambda: gate.create_project(child))]
    else:
        writes = [
            ({"prompts": n}, lambda n=n: gate.write_prompts(child, n))  # type: ignore[misc]
            for n in request.prompts
        ]
    burst = Totals()
    for need, _ in writes:
        burst = burst.plus(Totals(**need))
    guard.front(burst)
    outcomes = []
    for need, call in writes:
        try:
            guard.write(call, need=need, site="bench")
            report = guard.history[-1]
            outcomes.append(Outcome(report.outcome == "failed", report.waited_s))
        except WriteRefusedError as exc:
            outcomes.append(Outcome(True, exc.waited_s))
    return outcomes


def stranded(
    workspaces: Sequence[dict[str, Any]], parent: str, only: Collection[str] | None = None
) -> dict[str, int]:
    """Units carved into ``parent``'s children (``only`` these, when given) and not used
    (total - used - drafted)."""
    children = [
        w for w in workspaces if w.get("parent_id") == parent and (only is None or w["id"] in only)
    ]
    return {
        dim: sum(
            max(0, w["ai"][dim]["total"] - w["ai"][dim]["used"] - w["ai"][dim].get("drafted", 0))
            for w in children
        )
        for dim in ("projects", "prompts")
    }


def run(
    pool: PoolWrites,
    overrides: dict[str, str],
    queue_latency_s: float = 1.0,
    *,
    ims: bool = False,
) -> dict[str, Any]:
    """One pool's write workload under one variant, on a fresh simulator and simulated clock."""
    clock = VirtualTime(START)
    state = SimulatorState(accepted_tokens=[BENCH_TOKEN], clock=clock, sleep=clock.advance)
    with start_simulator(state=state) as sim:
        sim.seed(pool.seed)
        worker = QueuedWorker(sim, clock, overrides, queue_latency_s, ims=ims)
        if worker.users is not None:
            worker.users.add_users(pool.seed)
        sim.clear_calls()
        gate = GateClient(sim.write_url, BENCH_TOKEN)
        outcomes: list[tuple[int, Outcome]] = []

        def serve(index: int, request: Request) -> None:
            worker.serving.index = index
            outcomes.extend((index, o) for o in _write_request(worker, gate, pool.parent, request))

        try:
            for index, request in enumerate(pool.requests):
                clock.spawn(START + request.at, lambda i=index, r=request: serve(i, r))  # type: ignore[misc]
            clock.run()
            clock.advance(queue_latency_s)
            worker.pump()
            calls = sim.calls()
            ims_calls = sim.ims_calls() if ims else None
            workspaces = sim.dump()["workspaces"]
        finally:
            gate.close()
            if worker.users is not None:
                worker.users.close()
    numbers = _numbers(pool, worker, outcomes, calls, workspaces)
    if ims_calls is not None:
        numbers.update(ims_counts(ims_calls, len(pool.requests)))
    return numbers


def first_requests(requests: Sequence[Request]) -> set[int]:
    """The index of each child's first request (its first top-up meets the gate's lag)."""
    seen: dict[str, int] = {}
    for index, request in enumerate(requests):
        seen.setdefault(request.child, index)
    return set(seen.values())


def waits(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """How many writes met the lag, and the p95 of their waits (simulated seconds)."""
    waited = sorted(o.waited_s for o in outcomes if o.waited_s > 0)
    return {
        "writes": len(outcomes),
        "waited": len(waited),
        "waited_share": ratio(len(waited), len(outcomes)),
        "waited_p95_s": percentile(waited, 95),
    }


def _writers(
    pool: PoolWrites, outcomes: list[tuple[int, Outcome]], workspaces: list[dict[str, Any]]
) -> dict[str, Any]:
    """The children that wrote: what is stranded in them, their refused and waited writes."""
    active = {r.child for r in pool.requests}
    first = first_requests(pool.requests)
    return {
        "writes": len(outcomes),
        "active_children": len(active),
        "stranded_active": stranded(workspaces, pool.parent, active),
        "writes_refused": sum(1 for _, o in outcomes if o.refused),
        "waits": waits([o for _, o in outcomes]),
        "steady_waits": waits([o for index, o in outcomes if index not in first]),
    }


def _numbers(
    pool: PoolWrites,
    worker: QueuedWorker,
    outcomes: list[tuple[int, Outcome]],
    calls: list[dict[str, Any]],
    workspaces: list[dict[str, Any]],
) -> dict[str, Any]:
    requests = len(pool.requests)
    refused = {index for index, o in outcomes if o.refused}
    codes = Counter(o.get("error_code") or o["status"] for o in worker.final.values())
    pool_short = {
        worker.owner[rid] for rid, o in worker.final.items() if o.get("error_code") == POOL_CODE
    }
    api = sum(1 for c in calls if c["op"] not in GATE_OPS)
    gate = len(calls) - api
    return {
        "requests": requests,
        "prompts_asked": sum(sum(r.prompts) for r in pool.requests),
        "ensures": worker.enqueued,
        "org_pool_exhausted": len(refused & pool_short),
        "ensures_pool_exhausted": codes[POOL_CODE],
        "requests_refused": len(refused),
        "stranded": stranded(workspaces, pool.parent),
        **_writers(pool, outcomes, workspaces),
        "user_manager_calls": api,
        "write_attempts": gate,
        "calls_per_request": ratio(api + gate, requests),
        "user_manager_calls_per_request": ratio(api, requests),
        "outcomes": dict(sorted(codes.items())),
        "dead_letters": len(worker.fifo.dead_letters),
    }


def measure(queue_latency_s: float = 1.0) -> dict[str, Any]:
    """Every real-sized pool's write workload under every variant."""
    out: dict[str, Any] = {}
    for pool in (gold_writes(), dev_writes(), customer_writes()):
        note(
            f"writes, real sizes: {pool.key} ({len(pool.requests)} requests, {len(VARIANTS)} ways)"
        )
        variants = {
            key: {"label": label, **run(pool, overrides, queue_latency_s)}
            for key, (label, overrides) in VARIANTS.items()
        }
        out[pool.key] = {"title": pool.title, "variants": variants}
    return out
