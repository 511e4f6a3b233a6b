"""Measurement 1: upstream calls per request, ours against the naive first-allocator loop.

Both sides see the same messages in the same batches (an in-process SQS FIFO model delivering
batches of 10 as the event source mapping would) against the simulator over HTTP at latency 0;
calls are counted from the simulator's own call log. Ours is the real ``lambda_handler`` with a
runtime from ``build_runtime(AllocatorSettings.from_env(env))``. The baseline applies every
message on its own: read child, read pool, transfer if short (releases: read child, transfer,
settle poll, as the first allocator's settle path did), with the same block math, so the
difference is what the worker does differently (coalescing, the one-read hot path, the
fallback), not the arithmetic.

After each batch the services' metered writes happen (``used += need`` for every ensure that
the batch served, through the simulator's control route, which the call log never counts); a write
the child's total cannot take is refused with the disguised 405 and counted as
``writes_refused``. That keeps the comparison honest: fewer calls that served fewer writes
would not be a win.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.adapters.semrush import SemrushClient, StaticTokenProvider
from serenity_allocator.adapters.sqs import (
    AllocationProducer,
    build_ensure,
    build_release,
)
from serenity_allocator.domain.allocation import plan_release, required_totals
from serenity_allocator.domain.errors import UpstreamError, is_pool_exhausted
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest, parse_request
from serenity_allocator.domain.model import (
    AiResources,
    Blocks,
    Dimension,
    Totals,
    WorkspaceStatus,
    round_up_to_block,
)
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import build_runtime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.simulator import SimulatorRequestError, SimulatorServer

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
from .credentials import (
    BenchUsers,
    MemoryCredentialStore,
    ims_counts,
    ims_env,
    ims_runtime,
)
from .fifo import FifoQueue, lambda_event

Request = EnsureRequest | ReleaseRequest
SERVED = frozenset({"hot-path", "topped-up", "topped-up-after-reclaim", "unmetered"})
BLOCKS = Blocks()  # the template's defaults: projects 1, prompts 100
NEEDS = (10, 20, 30, 40)


@dataclass
class Round:
    """Requests the services enqueue together; ``halve`` are children whose content was
    deleted first (prompts used halved) and which therefore ask for a release."""

    requests: list[Request]
    halve: list[str] = field(default_factory=list)


@dataclass
class Workload:
    """A named, seeded scenario."""

    key: str
    title: str
    seed: list[dict[str, Any]]
    rounds: list[Round]

    @property
    def requests(self) -> int:
        return sum(len(r.requests) for r in self.rounds)


def _workspace(
    ws_id: str, parent: str | None, projects: tuple[int, int], prompts: tuple[int, int]
) -> dict[str, Any]:
    return {
        "id": ws_id,
        "title": ws_id,
        "parent_id": parent,
        "ai": {
            "projects": {"total": projects[0], "used": projects[1]},
            "prompts": {"total": prompts[0], "used": prompts[1]},
            "weekly_prompts": {"total": 0, "used": 0},
        },
    }


def _roomy_org(children: int) -> list[dict[str, Any]]:
    seed = [_workspace("org-a", None, (10_000, 0), (1_000_000, 0))]
    seed += [_workspace(f"ws-{i:03d}", "org-a", (2, 1), (100, 0)) for i in range(children)]
    return seed


class _Ids:
    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._n = 0

    def next(self) -> str:
        self._n += 1
        return f"{self._prefix}-{self._n:05d}"


def _ensure(ids: _Ids, rng: random.Random, child: str, parent: str) -> EnsureRequest:
    need = {"projects": 1 if rng.random() < 0.1 else 0, "prompts": rng.choice(NEEDS)}
    return build_ensure(child, parent, need, request_id=ids.next())


def trickle(children: int = 20, rounds: int = 20) -> Workload:
    """(a) Steady trickle: each round every child asks once (10 children per batch)."""
    rng, ids = random.Random(1), _Ids("trickle")
    names = [f"ws-{i:03d}" for i in range(children)]
    return Workload(
        "trickle",
        "steady trickle (one ensure per child at a time)",
        _roomy_org(children),
        [Round([_ensure(ids, rng, c, "org-a") for c in names]) for _ in range(rounds)],
    )


def bursts(children: int = 20, rounds: int = 5, burst: int = 10) -> Workload:
    """(b) Bursts: each round every child asks 10 times at once (one batch per child)."""
    rng, ids = random.Random(2), _Ids("burst")
    names = [f"ws-{i:03d}" for i in range(children)]
    return Workload(
        "bursts",
        f"bursts ({burst} ensures per child in one batch)",
        _roomy_org(children),
        [
            Round([_ensure(ids, rng, c, "org-a") for c in names for _ in range(burst)])
            for _ in range(rounds)
        ],
    )


def mixed(children: int = 20, rounds: int = 20, per_round: int = 20) -> Workload:
    """(c) Mixed: random children, 70 % ensures, 30 % releases after a delete."""
    rng, ids = random.Random(3), _Ids("mixed")
    names = [f"ws-{i:03d}" for i in range(children)]
    plan: list[Round] = []
    for _ in range(rounds):
        requests: list[Request] = []
        halve: list[str] = []
        ensured: set[str] = set()
        for _ in range(per_round):
            child = rng.choice(names)
            # A service does not delete (and release) while a write it asked headroom for is
            # still pending: a child that ensured this round keeps ensuring.
            if rng.random() < 0.7 or child in ensured:
                requests.append(_ensure(ids, rng, child, "org-a"))
                ensured.add(child)
            else:
                requests.append(build_release(child, request_id=ids.next()))
                halve.append(child)
        plan.append(Round(requests, halve))
    return Workload(
        "mixed", "mixed ensure/release (70/30, random children)", _roomy_org(children), plan
    )


def tight_pool(busy: int = 10, idle: int = 5, rounds: int = 3) -> Workload:
    """(d) A tight pool: 250 free prompts, ten full children asking 30 each per round.

    Ten busy children sit at used == total (100), so each ensure needs a top-up of one block
    (+100) where +30 would do; five idle siblings hold 400 with 50 used (300 reclaimable each).
    """
    ids = _Ids("tight")
    seed = [_workspace("org-t", None, (50, 0), (250, 0))]
    seed += [_workspace(f"busy-{i:02d}", "org-t", (1, 0), (100, 100)) for i in range(busy)]
    seed += [_workspace(f"idle-{i:02d}", "org-t", (1, 0), (400, 50)) for i in range(idle)]
    plan = [
        Round(
            [
                build_ensure(f"busy-{i:02d}", "org-t", {"prompts": 30}, request_id=ids.next())
                for i in range(busy)
            ]
        )
        for _ in range(rounds)
    ]
    return Workload("tight_pool", "tight pool (250 free, 10 x 30 per round)", seed, plan)


# ---------------------------------------------------------------------------------------------
# Running a workload
# ---------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one side did with one workload."""

    requests: int
    calls: int
    calls_by_op: dict[str, int]
    statuses: dict[str, int]
    writes_refused: int
    deliveries: int
    extra_messages: int
    dead_letters: int
    units_conserved: bool
    ims: dict[str, Any] = field(default_factory=dict)
    """IMS mode: the IMS calls (:func:`.credentials.ims_counts`); empty in static mode."""
    seconds: float = 0.0
    """Wall time of the drive (enqueue, handle, write), for the IMS-over-static difference."""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.ims,
            "requests": self.requests,
            "calls": self.calls,
            "calls_per_request": round(self.calls / self.requests, 3),
            "calls_by_op": self.calls_by_op,
            "statuses": self.statuses,
            "served": sum(n for s, n in self.statuses.items() if s in SERVED),
            "rejected": self.statuses.get("rejected", 0),
            "writes_refused": self.writes_refused,
            "deliveries": self.deliveries,
            "extra_messages": self.extra_messages,
            "dead_letters": self.dead_letters,
            "units_conserved": self.units_conserved,
        }


def _family_units(sim: SimulatorServer) -> tuple[int, int]:
    workspaces = sim.state.dump()["workspaces"]
    return (
        sum(w["ai"]["projects"]["total"] for w in workspaces),
        sum(w["ai"]["prompts"]["total"] for w in workspaces),
    )


def _halve_usage(sim: SimulatorServer, children: list[str]) -> None:
    """A service deleted content: the child's prompts used drop by half (then it releases)."""
    used = {w["id"]: w["ai"]["prompts"]["used"] for w in sim.state.dump()["workspaces"]}
    for child in children:
        used[child] //= 2
        sim.state.usage({"id": child, "prompts": {"used": used[child]}})


def _apply_writes(sim: SimulatorServer, served: list[EnsureRequest]) -> int:
    """The metered writes of served ensures, in order; returns how many the child refused."""
    usage = {w["id"]: w["ai"] for w in sim.state.dump()["workspaces"]}
    refused = 0
    for request in served:
        ai = usage[request.workspace_id]
        new_projects = ai["projects"]["used"] + request.need.projects
        new_prompts = ai["prompts"]["used"] + request.need.prompts
        try:
            sim.state.usage(
                {
                    "id": request.workspace_id,
                    "projects": {"used": new_projects},
                    "prompts": {"used": new_prompts},
                }
            )
        except SimulatorRequestError:
            refused += 1  # the disguised 405: the child's total could not take this write
            continue
        ai["projects"]["used"], ai["prompts"]["used"] = new_projects, new_prompts
    return refused


def _newly_served(
    statuses: dict[str, str], done_before: set[str], by_id: dict[str, Any]
) -> list[EnsureRequest]:
    """The ensures served by the batch just handled (their outcomes were not there before it)."""
    return [
        request
        for rid, status in statuses.items()
        if rid not in done_before
        and status in SERVED
        and isinstance(request := by_id.get(rid), EnsureRequest)
    ]


def _drain_round(
    sim: SimulatorServer,
    fifo: FifoQueue,
    process: Callable[..., set[str]],
    statuses: dict[str, str],
    by_id: dict[str, Any],
) -> int:
    """Handle batches until the queue is empty; return the services' refused writes."""
    refused = 0
    while len(fifo):
        batch = fifo.receive()
        done_before = set(statuses)
        failed = process(batch, statuses)
        fifo.settle(batch, failed)
        # Each service writes as soon as its ensure's outcome arrives, i.e. after the batch.
        refused += _apply_writes(sim, _newly_served(statuses, done_before, by_id))
    return refused


def _drive(
    workload: Workload,
    sim: SimulatorServer,
    fifo: FifoQueue,
    process: Callable[..., set[str]],
    users: BenchUsers | None = None,
) -> RunResult:
    sim.reset()
    sim.seed(workload.seed)
    if users is not None:
        users.add_users(workload.seed)
    units_before = _family_units(sim)
    producer = AllocationProducer(QUEUE_URL, sqs=fifo)  # type: ignore[arg-type]
    by_id = {r.request_id: r for round_ in workload.rounds for r in round_.requests}
    started = time.monotonic()
    statuses: dict[str, str] = {}
    refused = 0
    for round_ in workload.rounds:
        _halve_usage(sim, round_.halve)
        if users is not None:
            users.hand_over(round_.requests)  # each request's promise, before it is sent
        producer.enqueue_many(round_.requests)
        refused += _drain_round(sim, fifo, process, statuses, by_id)
    calls = sim.calls()
    ims_calls = sim.ims_calls()
    wanted = set(by_id)
    final = Counter(statuses.get(rid, "no-outcome") for rid in wanted)
    return RunResult(
        requests=workload.requests,
        calls=len(calls),
        calls_by_op=dict(Counter(c["op"] for c in calls)),
        statuses=dict(sorted(final.items())),
        writes_refused=refused,
        deliveries=fifo.deliveries,
        extra_messages=fifo.sent - workload.requests,
        dead_letters=len(fifo.dead_letters),
        units_conserved=_family_units(sim) == units_before,
        ims={} if users is None else ims_counts(ims_calls, workload.requests),
        seconds=time.monotonic() - started - (0.0 if users is None else users.mint_seconds),
    )


def run_ours(
    workload: Workload,
    sim: SimulatorServer,
    overrides: dict[str, str] | None = None,
    *,
    ims: bool = False,
    aws_rtt_s: float = 0.0,
) -> RunResult:
    """The real handler, runtime from build_runtime(AllocatorSettings.from_env(env)).

    ``ims``: every request acts as its child's user (:mod:`.credentials`), the runtime IMS
    mode's over an in-memory credentials table. ``aws_rtt_s``: one AWS round trip per
    credentials-table, KMS and PutEvents call (the simulator's latency covers Semrush and IMS).
    """
    users: BenchUsers | None = None
    if ims:
        store = MemoryCredentialStore(aws_rtt_s=aws_rtt_s)
        settings = AllocatorSettings.from_env(ims_env(sim, **(overrides or {})))
        runtime = ims_runtime(settings, store)
        users = BenchUsers(sim, store)
    else:
        settings = AllocatorSettings.from_env(allocator_env(sim.origin, **(overrides or {})))
        runtime = build_runtime(settings)
    events = RecordingEvents(latency_s=aws_rtt_s)
    runtime.outcomes = OutcomePublisher("bench-outcomes", events=events)  # type: ignore[arg-type]
    fifo = FifoQueue(max_receive_count=MAX_RECEIVE_COUNT)
    if settings.sibling_reclaim:
        # The worker's own producer, enqueueing sibling releases into the same queue model.
        runtime.producer = AllocationProducer(QUEUE_URL, sqs=fifo)  # type: ignore[arg-type]

    def process(batch: list[Any], statuses: dict[str, str]) -> set[str]:
        with silenced():
            response = lambda_handler(
                # The template's Allocator timeout: calls are budgeted against what is left.
                lambda_event(batch),
                LocalLambdaContext("bench-allocator", 60.0),
                runtime,
            )
        for outcome in events.outcomes:
            statuses[outcome["request_id"]] = outcome["status"]
        events.outcomes.clear()
        return {f["itemIdentifier"] for f in response["batchItemFailures"]}

    try:
        return _drive(workload, sim, fifo, process, users)
    finally:
        if users is not None:
            users.close()


def _block_rounded(child: AiResources, required: Totals, blocks: Blocks) -> Totals:
    """The first allocator's top-up: a short dimension rises to whole blocks, others keep."""
    return Totals(
        **{
            dim.value: (
                round_up_to_block(required.get(dim), blocks.get(dim))
                if required.get(dim) > child.get(dim).total
                else child.get(dim).total
            )
            for dim in Dimension
        }
    )


class NaiveAllocator:
    """The first allocator's loop: every message on its own, the pool read every time."""

    def __init__(self, client: SemrushClient, blocks: Blocks = BLOCKS) -> None:
        self._client = client
        self._blocks = blocks

    def apply(self, request: Request) -> str:
        client = self._client
        if isinstance(request, EnsureRequest):
            child = client.read_resources(request.workspace_id)
            client.read_resources(request.parent_workspace_id)  # the pool, read every time
            required = required_totals(child, request.need, request.include_drafted)
            target = _block_rounded(child, required, self._blocks)
            if target == child.totals():
                return "hot-path"
            try:
                client.transfer(request.workspace_id, target)
            except UpstreamError as exc:
                if is_pool_exhausted(exc.status, exc.body):
                    return "rejected"
                raise
            return "topped-up"
        child = client.read_resources(request.workspace_id)
        plan = plan_release(child, request.floor or self._blocks.as_totals(), self._blocks)
        if not plan.would_release:
            return plan.natural_outcome
        client.transfer(request.workspace_id, plan.target)
        for _ in range(12):  # the settle poll (12 attempts) of the first allocator
            if client.read_status(request.workspace_id) == WorkspaceStatus.CREATED:
                break
        return "released"


def run_naive(workload: Workload, sim: SimulatorServer) -> RunResult:
    """The baseline over the same batches with the same client."""
    client = SemrushClient(sim.origin, StaticTokenProvider(BENCH_TOKEN))
    naive = NaiveAllocator(client)

    def process(batch: list[Any], statuses: dict[str, str]) -> set[str]:
        for message in batch:
            request = parse_request(message.body)
            statuses[request.request_id] = naive.apply(request)
        return set()

    try:
        return _drive(workload, sim, FifoQueue(max_receive_count=MAX_RECEIVE_COUNT), process)
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------------

TIGHT_VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "no_fallback": ("ours, fallback off", {"SERENITY_TIGHT_POOL_FALLBACK": "false"}),
    "default": ("ours, default (fallback on)", {}),
    "reclaim": (
        "ours, fallback + sibling reclaim",
        {"SERENITY_SIBLING_RECLAIM": "true", "QUEUE_URL": QUEUE_URL},
    ),
}


def _ims_side(workload: Workload, sim: SimulatorServer, static: RunResult) -> dict[str, Any]:
    """The workload again with every request acting as its user, beside the static run."""
    ims = run_ours(workload, sim, ims=True)
    return {
        **ims.as_dict(),
        "semrush_calls_per_request": round(ims.calls / workload.requests, 3),
        "same_semrush_calls": ims.calls == static.calls,
        "exchange_ms_per_message": round(
            (ims.seconds - static.seconds) * 1000.0 / max(1, ims.deliveries), 2
        ),
        "ims_over_static_time_x": ratio(ims.seconds, static.seconds),
    }


ROUND_TRIP_MS = 50.0
"""IMS, Semrush and AWS round trips of the latency run (each call waits this long)."""
ADDED_ROUND_TRIPS_TARGET = 4.0
"""A burst batch in IMS mode takes at most the static mode's time plus this many round trips."""


def round_trips() -> dict[str, Any]:
    """Bursts at round trips of 50 ms (Semrush, IMS, DynamoDB, KMS, PutEvents): IMS over static.

    Two children, two rounds: four batches of ten ensures of one user on one child each.
    """
    from serenity_tools.standins.simulator import start_simulator

    workload = bursts(children=2, rounds=2)
    batches = 2 * 2
    rtt_s = ROUND_TRIP_MS / 1000.0
    with start_simulator(accepted_tokens=[BENCH_TOKEN], latency_ms=ROUND_TRIP_MS) as sim:
        static = run_ours(workload, sim, aws_rtt_s=rtt_s)
        ims = run_ours(workload, sim, ims=True, aws_rtt_s=rtt_s)
    static_ms = static.seconds * 1000.0 / batches
    ims_ms = ims.seconds * 1000.0 / batches
    added = (ims_ms - static_ms) / ROUND_TRIP_MS
    return {
        "round_trip_ms": ROUND_TRIP_MS,
        "batches": batches,
        "static_ms_per_batch": round(static_ms, 1),
        "ims_ms_per_batch": round(ims_ms, 1),
        "ims_added_round_trips_per_batch": round(added, 2),
        "target_added_round_trips": ADDED_ROUND_TRIPS_TARGET,
        "met": added <= ADDED_ROUND_TRIPS_TARGET,
        "static_semrush_calls_per_request": round(static.calls / workload.requests, 3),
        "ims_semrush_calls_per_request": round(ims.calls / workload.requests, 3),
        "ims_statuses": ims.statuses,
    }


def measure(sim: SimulatorServer) -> dict[str, Any]:
    """Run every workload on both sides; return the results section."""
    out: dict[str, Any] = {"workloads": {}}
    for workload in (trickle(), bursts(), mixed()):
        note(f"calls: {workload.key} ({workload.requests} requests)")
        naive = run_naive(workload, sim)
        ours = run_ours(workload, sim)
        out["workloads"][workload.key] = {
            "title": workload.title,
            "requests": workload.requests,
            "naive": naive.as_dict(),
            "ours": ours.as_dict(),
            "fewer_calls_x": ratio(naive.calls, ours.calls),
            "ims": _ims_side(workload, sim, ours),
        }
    workload = tight_pool()
    note(f"calls: {workload.key} ({workload.requests} requests, 4 variants)")
    naive = run_naive(workload, sim)
    variants: dict[str, Any] = {"naive": {"label": "naive baseline", **naive.as_dict()}}
    for key, (label, overrides) in TIGHT_VARIANTS.items():
        variants[key] = {"label": label, **run_ours(workload, sim, overrides).as_dict()}
    default = variants["default"]
    out["workloads"][workload.key] = {
        "title": workload.title,
        "requests": workload.requests,
        "naive": variants["naive"],
        "ours": default,
        "fewer_calls_x": ratio(naive.calls, default["calls"]),
        "variants": variants,
        "ims": _ims_side(workload, sim, run_ours(workload, sim)),
    }
    worst = min(w["fewer_calls_x"] or 0 for w in out["workloads"].values())
    out["targets"] = {
        "bursts_fewer_calls_x": out["workloads"]["bursts"]["fewer_calls_x"],
        "bursts_target_x": 2.5,
        "bursts_met": (out["workloads"]["bursts"]["fewer_calls_x"] or 0) >= 2.5,
        "worst_workload_fewer_calls_x": worst,
        "never_more_met": worst >= 1.0,
        "ims_bursts_calls_per_request": out["workloads"]["bursts"]["ims"][
            "semrush_calls_per_request"
        ],
        "ims_bursts_calls_target": 0.35,
    }
    note("calls: bursts at 50 ms round trips, static and IMS mode")
    out["round_trips"] = round_trips()
    return out
