"""``serenity-allocator harness``: reliability scenarios on the local stack, with real processes.

Each scenario starts a fresh :class:`.stack.LocalStack` (moto in its own single-threaded
process, the Semrush simulator, the template's resources), seeds an org, lets C consumer
processes (stand-ins for Lambda containers, :mod:`.consumer`) drain a workload through the real
handler, and checks what the run left behind with :mod:`.invariants`:

- ``concurrency``: N children, M requests (ensures, coalescable bursts, releases between
  ensures) over three pools: a roomy metered one, an unmetered one (issue 8: ensures complete
  ``unmetered`` with zero transfers) and a tight one whose ensures go through the exact-need
  fallback, park for sibling reclaim and trip the pool early warning. Every invariant holds,
  plus the broker checks (a broker violation is reported as the BROKER's).
- ``standard-queue``: the same workload through a STANDARD queue on the same moto, consumed by
  the same consumer processes running a worker that trusts the body (the event's
  MessageGroupId filled from ``workspace_id``). Its violations are counted and reported, not
  required to be zero: this is the evidence for the FIFO design.
- ``crash``: consumers SIGKILL themselves at random points (before the handler, during it,
  after it before the delete, and in the middle of outcome publishing) and are restarted;
  redelivery converges with every invariant intact (outcome replays are at-least-once).
- ``faults``: the simulator injects 5xx, 429, timeouts and not-ready answers at set rates, with
  a not-ready window after each transfer and one stuck zombie child; every request ends in a
  terminal outcome or the DLQ (the zombie's only), within MAX_RECEIVE_COUNT receives.
- ``poison``: malformed and invalid bodies mixed into the stream; none reaches Semrush, each
  lands in the DLQ with its reason, and valid requests are not delayed (compared with the same
  workload without poison).
- ``sweep-crash``: the Sweep handler (in-process) dies between targets and around its
  checkpoint writes and is resumed by run id once its lease has passed; no child is enqueued
  twice and the checkpoint always parses, without duplicates.

Every scenario runs with the issue-8 features ON (:data:`FEATURES_ON`). Producers are paced:
moto's FIFO receive and send scan the whole queue, so a deep backlog would measure moto, not
the system; the feeder keeps at most ``10 x C + 30`` messages un-deleted, sending each child's
requests in order.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from serenity_allocator.adapters.eventbridge_outcomes import POOL_LOW_DETAIL_TYPE, OutcomePublisher
from serenity_allocator.adapters.sqs_producer import AllocationProducer, build_ensure, build_release
from serenity_allocator.domain.messages import (
    AllocationOutcome,
    EnsureRequest,
    ReleaseRequest,
    parse_request,
)
from serenity_tools.standins.consumer import (
    CRASH_POINTS,
    DEFAULT_HANDLER,
    ConsumerPool,
    CrashPlan,
    QueueDepth,
    TraceSummary,
    queue_depth,
    read_trace_events,
    summarize_traces,
)
from serenity_tools.standins.stack import DeadLetter, LocalStack, body_field
from serenity_tools.verification.demo import (
    calls_table,
    check_dead_letters,
    dlq_table,
    invariants_table,
    meter_writes,
    metrics_table,
    outcomes_table,
    seed_child,
)
from serenity_tools.verification.emf import MetricTotal, count_metrics_in_files
from serenity_tools.verification.invariants import (
    InvariantResult,
    check_bounds,
    check_conservation,
    check_fifo_delivery,
    check_group_exclusivity,
    check_headroom,
    check_order,
    check_terminal_outcomes,
    invariant_result,
    transfer_sequences,
    workspaces_by_id,
)
from serenity_tools.verification.tables import format_table

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

    from serenity_tools.verification.emf import MetricKey

SCENARIOS = ("concurrency", "standard-queue", "crash", "faults", "poison", "sweep-crash")

FEATURES_ON: Mapping[str, str] = {
    "SERENITY_UNMETERED_CHECK": "true",
    "SERENITY_TIGHT_POOL_FALLBACK": "true",
    # Needs QUEUE_URL, which the stack's environment always carries.
    "SERENITY_SIBLING_RECLAIM": "true",
    # The tight pool starts at a 0.565 free ratio (130 free of 230): it warns from its first
    # read, whatever the draws; the roomy and unmetered pools stay at 1.0.
    "POOL_LOW_RATIO": "0.6",
    "POOL_LOW_INTERVAL_S": "2",
}
"""The issue-8 settings every scenario runs with: unmetered check, tight-pool fallback,
sibling reclaim and the pool early warning, all on."""

MAIN_POOL = "org-main"
UNMETERED_POOL = "org-unmetered"
TIGHT_POOL = "org-tight"
MIN_CHILDREN = 12
_MAIN_KINDS = (
    "over",
    "tight",
    "burst",
    "over",
    "tight",
    "drafts",
    "idle",
    "tight",
    "over",
    "ceiling",
)
_ACTIVE_KINDS = frozenset({"over", "tight", "burst", "drafts", "unmetered"})
_SWEPT_KINDS = frozenset({"over", "idle", "donor", "drafts"})
"""Kinds holding at least a block of surplus (drafts: one project; their drafted prompts
count as used), so the ones a sweep enqueues a release for."""
_BURST_UNIT = 8
_PUBLISH_CRASH = "during_publish"
_COLLECT_EVERY_S = 1.0
WORKER_RELEASE_PREFIX = "reclaim-"
"""Request ids of the releases the worker enqueues itself for sibling reclaim."""

Request = EnsureRequest | ReleaseRequest
_T = TypeVar("_T")


# -- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HarnessConfig:
    """Sizes and timings of one scenario run.

    Attributes:
        children: Children seeded over the three pools (the sweep's targets in sweep-crash).
        requests: Requests enqueued by the services (poison comes on top).
        consumers: Consumer processes.
        seed: Seed of the workload, the crash draws and the injected faults.
        latency_ms: Simulator latency on every Semrush request.
        visibility_timeout_s: The queue's visibility timeout (the function timeout is 1 s less).
        max_receive_count: The redrive policy's maxReceiveCount (template: 5).
        crash_probability: Per batch, the chance a consumer SIGKILLs itself (crash scenario;
            half of it again for a crash in the middle of outcome publishing).
        poison: Poison messages (poison scenario); None means a tenth of ``requests``.
        drain_timeout_s: Give up on a run after this long.
        work_dir: Where traces and logs go (a new temporary directory per run when absent).
    """

    children: int = 200
    requests: int = 2000
    consumers: int = 4
    seed: int = 7
    latency_ms: float = 5.0
    visibility_timeout_s: int = 3
    max_receive_count: int = 5
    crash_probability: float = 0.1
    poison: int | None = None
    drain_timeout_s: float = 900.0
    work_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.children < MIN_CHILDREN:
            raise ValueError(f"the harness needs at least {MIN_CHILDREN} children")
        if self.requests < 1 or self.consumers < 1:
            raise ValueError("the harness needs at least one request and one consumer")
        if not 0.0 <= self.crash_probability <= 0.5:
            raise ValueError("crash probability must be within [0, 0.5]")

    @property
    def poison_count(self) -> int:
        """How many poison messages the poison scenario mixes in."""
        return self.poison if self.poison is not None else max(10, self.requests // 10)


# -- the org and the workload -------------------------------------------------------------------


def _usage(used: int, total: int, drafted: int = 0) -> dict[str, int]:
    return {"used": used, "drafted": drafted, "total": total}


@dataclass(frozen=True)
class Org:
    """The seeded workspaces and what each child is for.

    Attributes:
        workspaces: Masters and children in the simulator's seed shape.
        kinds: Child id -> kind (``over``, ``tight``, ``burst``, ``drafts``, ``idle``,
            ``ceiling``, ``zombie``, ``unmetered``, ``pool-tight``, ``donor``).
        parents: Child id -> master id.
    """

    workspaces: tuple[dict[str, Any], ...]
    kinds: Mapping[str, str]
    parents: Mapping[str, str]

    @property
    def masters(self) -> tuple[str, ...]:
        """The master ids, in seed order."""
        return tuple(w["id"] for w in self.workspaces if w.get("parent_id") is None)

    def children_of(self, kind: str) -> list[str]:
        """The children of one kind, in seed order."""
        return [child for child, k in self.kinds.items() if k == kind]


_SEEDED_LIKE = {"unmetered": "tight", "pool-tight": "tight", "donor": "idle"}
"""The harness's own kinds, seeded like one of the demo's (:func:`.demo.seed_child`)."""


def _child_seed(child_id: str, kind: str, parent_id: str, rng: random.Random) -> dict[str, Any]:
    seeded = seed_child(child_id, _SEEDED_LIKE.get(kind, kind), parent_id, rng)
    return {**seeded, "title": f"{kind} brand {child_id}"}


def plan_org(
    children: int, rng: random.Random, *, tight_pool: bool = True, zombie: bool = False
) -> Org:
    """Seed three pools: roomy metered, unmetered, and (optionally) tight with idle donors.

    Args:
        children: Total children over the pools (at least :data:`MIN_CHILDREN`).
        rng: Source of the usage draws.
        tight_pool: Include the tight pool (exercises the fallback, sibling reclaim and the
            early warning; its parked ensures wait out visibility timeouts).
        zombie: Make one child of the main pool a zombie stuck ``not ready``.
    """
    unmetered = max(1, children // 20)
    tight_active = max(2, children // 20) if tight_pool else 0
    donors = max(3, tight_active // 2) if tight_pool else 0
    main = children - unmetered - tight_active - donors
    kinds: dict[str, str] = {}
    parents: dict[str, str] = {}
    plan = [
        *((MAIN_POOL, _MAIN_KINDS[i % len(_MAIN_KINDS)]) for i in range(main)),
        *((UNMETERED_POOL, "unmetered") for _ in range(unmetered)),
        *((TIGHT_POOL, "pool-tight") for _ in range(tight_active)),
        *((TIGHT_POOL, "donor") for _ in range(donors)),
    ]
    if zombie:
        plan[0] = (MAIN_POOL, "zombie")
    seeded: list[dict[str, Any]] = []
    for index, (parent, kind) in enumerate(plan):
        child_id = f"c{index:04d}"
        kinds[child_id], parents[child_id] = kind, parent
        seeded.append(_child_seed(child_id, kind, parent, rng))
    active_main = sum(1 for c, k in kinds.items() if parents[c] == MAIN_POOL and k != "idle")
    masters = [
        {
            "id": MAIN_POOL,
            "title": "Harness org (roomy)",
            "parent_id": None,
            "limits_enabled": True,
            # Room for every child's worst case (a coalesced burst of 8 x 100 included).
            "ai": {
                "projects": _usage(0, 3 * active_main + 20),
                "prompts": _usage(0, 1000 * active_main + 5000),
            },
        },
        {
            "id": UNMETERED_POOL,
            "title": "Harness org (unmetered)",
            "parent_id": None,
            "limits_enabled": False,
            "ai": {"projects": _usage(0, 100), "prompts": _usage(0, 10_000)},
        },
    ]
    if tight_pool:
        # 130 free prompts: a first top-up of 120 fits only unrounded (the fallback), the rest
        # exhaust the pool until the donors' surplus comes back through sibling reclaim.
        masters.append(
            {
                "id": TIGHT_POOL,
                "title": "Harness org (tight)",
                "parent_id": None,
                "limits_enabled": True,
                "ai": {"projects": _usage(0, 10), "prompts": _usage(100, 230)},
            }
        )
    return Org(tuple([*masters, *seeded]), kinds, parents)


@dataclass(frozen=True)
class Workload:
    """The org, and what the services send, as send units in global order.

    A unit is sent with one SendMessageBatch call: a burst's ensures travel together (and can
    coalesce); every other unit holds one request.
    """

    org: Org
    units: tuple[tuple[Request, ...], ...]

    @property
    def requests(self) -> list[Request]:
        """Every request, in send order (per child, its enqueue order)."""
        return [request for unit in self.units for request in unit]

    @property
    def plans(self) -> dict[str, list[Request]]:
        """Per child, its requests in enqueue order."""
        plans: dict[str, list[Request]] = defaultdict(list)
        for request in self.requests:
            plans[request.workspace_id].append(request)
        return dict(plans)


def _ensure(child: str, parent: str, prompts: int, projects: int = 0, **extra: Any) -> Request:
    return build_ensure(child, parent, {"projects": projects, "prompts": prompts}, **extra)


def _child_sequence(
    child: str, kind: str, parent: str, count: int, rng: random.Random
) -> list[Request]:
    if kind == "burst":
        return [_ensure(child, parent, rng.choice((50, 100))) for _ in range(count)]
    sequence: list[Request] = []
    for index in range(count):
        # Releases only BETWEEN ensures: each child's last request is an ensure, so the write
        # it prepared for is checked after the drain (a later release would rightly undo it).
        between = 0 < index < count - 1 and isinstance(sequence[-1], EnsureRequest)
        if between and rng.random() < 0.3:
            sequence.append(build_release(child))
            continue
        sequence.append(
            _ensure(
                child,
                parent,
                rng.choice((0, 50, 100, 150, 250)),
                rng.choice((0, 0, 1)),
                include_drafted=kind == "drafts" and rng.random() < 0.5,
            )
        )
    return sequence


def plan_workload(
    children: int,
    requests: int,
    rng: random.Random,
    *,
    tight_pool: bool = True,
    zombie: bool = False,
) -> Workload:
    """The org and about ``requests`` requests over its active children, in send order.

    Tight-pool children get two ensures each, ceiling children one (past their ceiling), the
    zombie two; the rest is spread over the roomy and unmetered children.
    """
    org = plan_org(children, rng, tight_pool=tight_pool, zombie=zombie)
    plans: dict[str, list[Request]] = {}
    for child in org.children_of("pool-tight"):
        plans[child] = [_ensure(child, TIGHT_POOL, rng.choice((120, 150, 230))) for _ in range(2)]
    for child in org.children_of("ceiling"):
        ceiling = {"projects": 5, "prompts": 600}
        plans[child] = [_ensure(child, MAIN_POOL, 300, ceiling=ceiling)]
    for child in org.children_of("zombie"):
        plans[child] = [_ensure(child, MAIN_POOL, 50), _ensure(child, MAIN_POOL, 100)]
    active = [c for c, kind in org.kinds.items() if kind in _ACTIVE_KINDS]
    budget = max(0, requests - sum(map(len, plans.values())))
    counts = Counter({child: budget // len(active) for child in active})
    for child in rng.sample(active, budget % len(active)):
        counts[child] += 1
    for child in active:
        if counts[child]:
            plans[child] = _child_sequence(
                child, org.kinds[child], org.parents[child], counts[child], rng
            )
    # Round-robin over the children (tight pool first, so its parks start early), each child's
    # units in order: a child's enqueue order is its plan's order.
    order = [c for c in plans if org.kinds[c] == "pool-tight"]
    rest = [c for c in plans if org.kinds[c] != "pool-tight"]
    rng.shuffle(rest)
    pending = {
        child: [
            tuple(plans[child][i : i + _BURST_UNIT])
            for i in range(0, len(plans[child]), _BURST_UNIT)
        ]
        if org.kinds[child] == "burst"
        else [(request,) for request in plans[child]]
        for child in [*order, *rest]
    }
    units: list[tuple[Request, ...]] = []
    while any(pending.values()):
        for queue in pending.values():
            if queue:
                units.append(queue.pop(0))
    return Workload(org, tuple(units))


# -- poison -------------------------------------------------------------------------------------


class Draws(Protocol):
    """Where the poison generator's choices come from (seeded ``random``, or hypothesis)."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        ...

    def choice(self, options: Sequence[_T]) -> _T:
        """One of ``options``."""
        ...

    def text(self, max_size: int) -> str:
        """Text of at most ``max_size`` characters SQS accepts in a body."""
        ...


_TEXT_ALPHABET = "abcxyzABCXYZ0123456789 _-.:,;!?'\"{}[]()<>/\\\t\n" + "éüßñ漢字дж😀€\u00a0\u2028"


class RandomDraws:
    """:class:`Draws` from a seeded :class:`random.Random` (what the CLI uses)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        return self._rng.randint(low, high)

    def choice(self, options: Sequence[_T]) -> _T:
        """One of ``options``."""
        return self._rng.choice(options)

    def text(self, max_size: int) -> str:
        """Random text over a mixed alphabet (quotes, braces, non-ASCII, emoji)."""
        length = self._rng.randint(0, max_size)
        return "".join(self._rng.choice(_TEXT_ALPHABET) for _ in range(length))


POISON_KINDS = (
    "not-json",
    "truncated-json",
    "json-not-object",
    "missing-field",
    "wrong-type",
    "unknown-field",
    "bad-kind",
    "bad-version",
    "negative-number",
    "blank-or-long-id",
    "group-mismatch",
)


@dataclass(frozen=True)
class PoisonMessage:
    """A message the worker must refuse: it goes to the DLQ with its reason, never to Semrush.

    Attributes:
        kind: Which of :data:`POISON_KINDS` it is.
        poison_id: The workspace id its body names, if any (ids that appear only in poison).
        group_id: Its MessageGroupId (its own, or a valid child's: poison in a busy group).
        body: The raw body.
        dedup_id: Its MessageDeduplicationId.
    """

    kind: str
    poison_id: str
    group_id: str
    body: str
    dedup_id: str


def is_refused_by_worker(group_id: str, body: str) -> bool:
    """True when the worker dead-letters this message: the worker's own validation rule.

    The body must parse as a version-1 request and its ``workspace_id`` must equal the
    MessageGroupId (``allocator_worker._parse_record``).
    """
    from pydantic import ValidationError

    try:
        request = parse_request(body)
    except ValidationError:
        return True
    return request.workspace_id != group_id


def _poison_base(draws: Draws, poison_id: str) -> dict[str, Any]:
    if draws.integer(0, 1):
        return {
            "version": 1,
            "kind": "ensure",
            "request_id": f"{poison_id}-r",
            "workspace_id": poison_id,
            "parent_workspace_id": "px-parent",
            "need": {"projects": draws.integer(0, 2), "prompts": draws.integer(0, 500)},
        }
    return {
        "version": 1,
        "kind": "release",
        "request_id": f"{poison_id}-r",
        "workspace_id": poison_id,
    }


def _poison_body(kind: str, draws: Draws, base: dict[str, Any]) -> str:
    body: Any = dict(base)
    if kind == "not-json":
        return draws.choice(("<html>", "ensure ", "{", "'")) + draws.text(60)
    if kind == "truncated-json":
        text = json.dumps(base, ensure_ascii=False)
        return text[: draws.integer(1, len(text) - 1)]
    if kind == "json-not-object":
        body = draws.choice(
            ([draws.integer(-9, 9)], draws.text(20), None, draws.integer(-99, 99), True)
        )
    elif kind == "missing-field":
        del body[draws.choice([key for key in base if key != "version"])]
    elif kind == "wrong-type":
        key = draws.choice(sorted(base))
        body[key] = draws.choice(
            (draws.integer(-5, 5), draws.text(10), None, [1], {"a": 1}, 1.5, True)
        )
    elif kind == "unknown-field":
        body[draws.choice(("extra", "Kind", "need2", "priority"))] = draws.text(10)
    elif kind == "bad-kind":
        body["kind"] = draws.text(12)
    elif kind == "bad-version":
        body["version"] = draws.choice((0, 2, "1", 1.5, None))
    elif kind == "negative-number":
        if body["kind"] == "ensure":
            body["need"] = {**body["need"], "prompts": -draws.integer(1, 1000)}
        else:
            body["floor"] = {"projects": -draws.integer(1, 5), "prompts": 0}
    elif kind == "blank-or-long-id":
        body["workspace_id"] = draws.choice(("", "   ", "x" * 129))
    return json.dumps(body, ensure_ascii=False)


def poison_messages(draws: Draws, count: int, valid_groups: Sequence[str]) -> list[PoisonMessage]:
    """``count`` messages the worker refuses, of every kind, some in valid children's groups.

    A draw that happens to be a valid request is dropped (checked with
    :func:`is_refused_by_worker`) and another one drawn.

    Raises:
        RuntimeError: The draws keep producing valid requests.
    """
    messages: list[PoisonMessage] = []
    for attempt in range(count * 20):
        if len(messages) == count:
            break
        kind = draws.choice(POISON_KINDS)
        poison_id = f"px-{attempt:04d}"
        base = _poison_base(draws, poison_id)
        # A third of the poison sits in a valid child's group: it must not hold that group.
        in_valid_group = bool(valid_groups) and draws.integer(0, 2) == 0
        group = draws.choice(valid_groups) if in_valid_group else poison_id
        if kind == "group-mismatch" and group == poison_id:
            group = f"{poison_id}-elsewhere"
        body = _poison_body(kind, draws, base) or " "
        if is_refused_by_worker(group, body):
            messages.append(PoisonMessage(kind, poison_id, group, body, f"poison-{attempt}"))
    if len(messages) < count:
        raise RuntimeError("the draws keep producing valid requests")
    return messages


# -- handlers run INSIDE the consumer processes (``--handler MODULE:FUNCTION``) ---------------

TRUSTING_HANDLER = f"{__name__}:trusting_standard_queue_handler"
PUBLISH_CRASH_HANDLER = f"{__name__}:crash_while_publishing_handler"
PUBLISH_CRASH_PROBABILITY_ENV = "HARNESS_PUBLISH_CRASH_PROBABILITY"
PUBLISH_CRASH_SEED_ENV = "HARNESS_PUBLISH_CRASH_SEED"


def trusting_standard_queue_handler(event: dict[str, Any], context: Any) -> Any:
    """The Allocator on a STANDARD queue, trusting the body for the message group.

    A standard queue has no MessageGroupId; this worker fills it from the body's
    ``workspace_id`` so the real handler accepts the records (and groups them within a batch),
    which is exactly what it cannot do across batches and containers.
    """
    from serenity_allocator.handlers.allocator import lambda_handler

    for record in event.get("Records", []):
        workspace_id = body_field(str(record.get("body", "")), "workspace_id")
        if workspace_id is not None:
            record.setdefault("attributes", {})["MessageGroupId"] = workspace_id
    return lambda_handler(event, context)


class _CrashingOutcomePublisher(OutcomePublisher):
    """Publishes part of a chunk of outcomes, then SIGKILLs its process (sometimes)."""

    def __init__(self, bus_name: str, probability: float, rng: random.Random) -> None:
        super().__init__(bus_name)
        self._probability = probability
        self._rng = rng

    def publish(self, outcomes: Sequence[AllocationOutcome]) -> None:
        """Publish; with the configured probability, die halfway through first."""
        if outcomes and self._rng.random() < self._probability:
            # The first half went out, the rest never will: a crash in the middle of
            # publishing. Redelivery replays the published ones (at-least-once).
            super().publish(outcomes[: max(1, len(outcomes) // 2)])
            os.kill(os.getpid(), signal.SIGKILL)
        super().publish(outcomes)


def crash_while_publishing_handler(event: dict[str, Any], context: Any) -> Any:
    """The real Allocator handler whose outcome publisher sometimes dies mid-publish.

    Configured by :data:`PUBLISH_CRASH_PROBABILITY_ENV` and :data:`PUBLISH_CRASH_SEED_ENV`.
    """
    from serenity_allocator.handlers import allocator

    runtime = allocator.get_runtime()
    publisher = runtime.outcomes
    if publisher is not None and not isinstance(publisher, _CrashingOutcomePublisher):
        probability = float(os.environ.get(PUBLISH_CRASH_PROBABILITY_ENV) or 0.0)
        seed = os.environ.get(PUBLISH_CRASH_SEED_ENV) or "0"
        runtime.outcomes = _CrashingOutcomePublisher(
            publisher.bus_name, probability, random.Random(f"{seed}:{os.getpid()}")
        )
    return allocator.lambda_handler(event, context)


# -- running a workload -------------------------------------------------------------------------

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


def fifo_sender(stack: LocalStack) -> Sender:
    """Send to the allocation FIFO queue: requests through the real producer, poison raw."""
    producer = AllocationProducer(stack.resources.queue_url, stack.sqs)

    def send(batch: Sequence[Outgoing]) -> None:
        requests = [item for item in batch if not isinstance(item, PoisonMessage)]
        if requests:
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
            send or fifo_sender(stack),
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
    outcomes = stack.outcomes.outcomes()
    events = read_trace_events(pool.trace_paths)
    letters = stack.read_dead_letters()
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
    )


# -- analysis -----------------------------------------------------------------------------------


def first_deliveries(events: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per message group, request ids in the order the broker first delivered them."""
    order: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for event in events:
        if event.get("ev") != "receive":
            continue
        for message in event.get("msgs", []):
            rid = message.get("request_id")
            if isinstance(rid, str) and rid not in seen:
                seen.add(rid)
                order[str(message.get("group"))].append(rid)
    return order


def regroup_by_child(
    events: Sequence[dict[str, Any]], requests: Sequence[Request]
) -> list[dict[str, Any]]:
    """The trace with each known message's group set to the child its request names.

    On a standard queue SQS carries no MessageGroupId, so the trace records none; the broker
    checks then ask the question that matters there: was a CHILD held by two containers at
    once, and were its requests delivered in enqueue order.
    """
    child_of = {request.request_id: request.workspace_id for request in requests}
    regrouped: list[dict[str, Any]] = []
    for event in events:
        if event.get("ev") != "receive":
            regrouped.append(event)
            continue
        msgs = [
            {**m, "group": child_of.get(m.get("request_id") or "", m.get("group"))}
            for m in event.get("msgs", [])
        ]
        groups: dict[str, list[str]] = defaultdict(list)
        for message in msgs:
            groups[str(message["group"])].append(str(message["id"]))
        regrouped.append({**event, "msgs": msgs, "groups": dict(groups)})
    return regrouped


def with_worker_releases(
    requests: Sequence[Request],
    events: Sequence[Mapping[str, Any]],
    outcomes: Sequence[AllocationOutcome],
) -> list[Request]:
    """The services' requests plus the releases the worker enqueued itself (sibling reclaim).

    The worker's releases have no producer-side record; each is placed in its child's order
    where the broker first delivered it (the only record of its enqueue position). For them,
    invariant 4 therefore checks application order against delivery order; the broker checks
    vouch for delivery order on the services' requests.
    """
    known = {request.request_id for request in requests}
    extra_source = {o.request_id: o for o in outcomes if o.request_id not in known}

    def is_worker_release(rid: str) -> bool:
        # The worker's own id scheme (allocator_worker._reclaim_request_id), or an outcome: a
        # poison body may carry a request id too, but it never gets either.
        return rid.startswith(WORKER_RELEASE_PREFIX) or rid in extra_source

    per_child: dict[str, list[Request]] = defaultdict(list)
    for request in requests:
        per_child[request.workspace_id].append(request)
    delivered = first_deliveries(events)
    merged: list[Request] = []
    for child in [*per_child, *(g for g in delivered if g not in per_child)]:
        own = per_child.get(child, [])
        position = {request.request_id: index for index, request in enumerate(own)}
        taken = 0
        for rid in delivered.get(child, []):
            if rid in position:
                merged.extend(own[taken : position[rid] + 1])
                taken = max(taken, position[rid] + 1)
            elif rid not in known and is_worker_release(rid):
                outcome = extra_source.get(rid)
                source = outcome.source if outcome and outcome.source else "reclaim"
                merged.append(build_release(child, source=source, request_id=rid))
        merged.extend(own[taken:])
    return merged


def _one_family(
    workspaces: Mapping[str, Mapping[str, Any]], masters: Sequence[str]
) -> dict[str, Mapping[str, Any]]:
    # check_bounds looks at one parent's children; present every pool's children as one family
    # so each outcome is checked once.
    return {
        wid: {**w, "parent_id": "*"} if w.get("parent_id") in masters else w
        for wid, w in workspaces.items()
    }


def _merged(name: str, results: Sequence[InvariantResult]) -> InvariantResult:
    violations = tuple(v for r in results for v in r.violations)
    if not violations:
        return InvariantResult(name, True, "; ".join(r.detail for r in results))
    failed = "; ".join(r.detail for r in results if not r.passed)
    return InvariantResult(name, False, failed, violations)


def invariant_checks(
    org: Org,
    requests: Sequence[Request],
    run: DrainedRun,
    config: HarnessConfig,
    *,
    strict_transfers: bool = True,
    allow_replays: bool = False,
) -> list[InvariantResult]:
    """Invariants 1-5 over every pool, then the two broker checks."""
    masters = org.masters
    conservation = [check_conservation(m, run.before, run.after) for m in masters]
    conservation = [
        replace(r, detail=f"{m} {r.detail.removeprefix('master + children totals: ')}")
        for m, r in zip(masters, conservation, strict=True)
    ]
    return [
        _merged("1 conservation", conservation),
        check_bounds(_one_family(run.after, masters), requests, run.outcomes, parent_id="*"),
        check_terminal_outcomes(
            requests,
            run.outcomes,
            {letter.request_id or "" for letter in run.letters},
            allow_replays=allow_replays,
        ),
        check_order(
            requests, run.outcomes, run.calls, run.before, strict_transfers=strict_transfers
        ),
        check_headroom(requests, run.outcomes, run.before),
        check_group_exclusivity(run.events, config.visibility_timeout_s),
        check_fifo_delivery(run.events, requests, config.max_receive_count),
    ]


def run_checks(run: DrainedRun, *, expected_dead: set[str] | None = None) -> list[InvariantResult]:
    """Everything was sent and drained; the DLQ holds exactly the expected requests."""
    drained = InvariantResult(
        "queue drained",
        run.drained,
        f"{len(run.enqueued_at)} sent, queue empty after {run.duration_s:.1f} s"
        if run.drained
        else "the queue did not drain in time" + ("" if run.sent_all else " (not all sent)"),
    )
    return [drained, check_dead_letters(run.letters, expected_dead or set(), expected_invalid=0)]


@dataclass(frozen=True)
class LostUpdates:
    """What a queue without per-child serialization did to the children.

    Attributes:
        stale_ensures: Ensure transfers computed from a stale read (the child's total had
            moved between the worker's read and its absolute write: that move was lost).
        stale_releases: The same for releases (a release overwrote a concurrent top-up).
        out_of_order: Outcomes applied after an outcome of a LATER-enqueued request of the
            same child.
        violations: Each of them, one line each.
    """

    stale_ensures: int
    stale_releases: int
    out_of_order: int
    violations: tuple[str, ...]


def count_lost_updates(
    requests: Sequence[Request],
    outcomes: Sequence[AllocationOutcome],
    calls: Sequence[Mapping[str, Any]],
    before: Mapping[str, Mapping[str, Any]],
) -> LostUpdates:
    """Match each reported change to the simulator's transfers and count the stale ones.

    Per child, the simulator's call log gives the totals after each applied transfer; an
    outcome that reports ``before -> after`` is matched to the first unmatched transfer that
    set ``after``. It is stale when the total just before that transfer was not ``before``
    (or when no transfer set it: another worker's write already had).
    """
    position = {request.request_id: index for index, request in enumerate(requests)}
    sequences = transfer_sequences(calls, before)
    first: dict[str, AllocationOutcome] = {}
    for outcome in outcomes:
        first.setdefault(outcome.request_id, outcome)
    stale = Counter[str]()
    out_of_order = 0
    violations: list[str] = []
    by_child: dict[str, list[AllocationOutcome]] = defaultdict(list)
    for outcome in first.values():
        by_child[outcome.workspace_id].append(outcome)
    for child, child_outcomes in by_child.items():
        start = before.get(child, {}).get("ai", {})
        totals = [
            (
                int(start.get("projects", {}).get("total", 0)),
                int(start.get("prompts", {}).get("total", 0)),
            ),
            *sequences.get(child, []),
        ]
        matched = [False] * len(totals)
        latest = -1
        previous: tuple[tuple[int, int], tuple[int, int]] | None = None
        for outcome in child_outcomes:
            enqueued = position.get(outcome.request_id, -1)
            if enqueued < latest:
                out_of_order += 1
                violations.append(f"{child}: {outcome.request_id[:8]} applied after a later one")
            latest = max(latest, enqueued)
            b, a = outcome.totals_before, outcome.totals_after
            if b is None or a is None or b == a:
                continue
            change = ((b.projects, b.prompts), (a.projects, a.prompts))
            if change == previous:  # coalesced members report their leader's transfer
                continue
            previous = change
            index = next(
                (i for i in range(1, len(totals)) if not matched[i] and totals[i] == change[1]),
                None,
            )
            if index is not None:
                matched[index] = True
            if index is None or totals[index - 1] != change[0]:
                stale[outcome.kind] += 1
                violations.append(
                    f"{child}: {outcome.kind} {outcome.request_id[:8]} read "
                    f"{change[0][1]} prompts, set {change[1][1]}, but the total was "
                    f"{totals[index - 1][1] if index else 'already there'}"
                )
    return LostUpdates(stale["ensure"], stale["release"], out_of_order, tuple(violations))


def check_no_lost_updates(lost: LostUpdates) -> InvariantResult:
    """No stale-read transfer and no out-of-order application (what FIFO groups guarantee)."""
    total = lost.stale_ensures + lost.stale_releases + lost.out_of_order
    detail = (
        f"{lost.stale_ensures} stale ensures, {lost.stale_releases} stale releases, "
        f"{lost.out_of_order} out-of-order applications"
    )
    return InvariantResult("no lost updates (stale reads)", total == 0, detail, lost.violations)


def check_bounded_attempts(
    events: Sequence[Mapping[str, Any]],
    outcomes: Sequence[AllocationOutcome],
    letters: Sequence[DeadLetter],
    max_receive_count: int,
) -> InvariantResult:
    """No message was received, completed or dead-lettered past MAX_RECEIVE_COUNT receives."""
    name = "bounded attempts"
    received = max(
        (
            int(m.get("receive_count", 0))
            for e in events
            if e.get("ev") == "receive"
            for m in e.get("msgs", [])
        ),
        default=0,
    )
    attempts = max((o.attempts for o in outcomes), default=0)
    dead = max((letter.receive_count for letter in letters), default=0)
    violations = [
        f"{what} {value} > MAX_RECEIVE_COUNT {max_receive_count}"
        for what, value in (
            ("a receive count of", received),
            ("an outcome after attempt", attempts),
            ("a dead letter after receive", dead),
        )
        if value > max_receive_count
    ]
    detail = (
        f"highest receive count {received}, outcome attempts {attempts}, dead letter "
        f"{dead}; limit {max_receive_count}"
    )
    return invariant_result(name, violations, detail)


def request_latencies(
    enqueued_at: Mapping[str, float], events: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """Request id -> seconds from its send to the delete of its message (first delete)."""
    rid_of: dict[str, str] = {}
    done: dict[str, float] = {}
    for event in events:
        if event.get("ev") == "receive":
            for message in event.get("msgs", []):
                if isinstance(message.get("request_id"), str):
                    rid_of[str(message["id"])] = message["request_id"]
        elif event.get("ev") == "release":
            for message_id in event.get("deleted", []):
                rid = rid_of.get(message_id)
                if rid is not None and rid in enqueued_at:
                    done.setdefault(rid, float(event.get("t_done", event["t"])))
    return {rid: at - enqueued_at[rid] for rid, at in done.items()}


def redelivered(events: Sequence[Mapping[str, Any]], request_ids: set[str]) -> int:
    """How many of ``request_ids`` were received more than once."""
    return len(
        {
            m["request_id"]
            for e in events
            if e.get("ev") == "receive"
            for m in e.get("msgs", [])
            if m.get("request_id") in request_ids and int(m.get("receive_count", 1)) > 1
        }
    )


def _percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def reclaimed_children(requests: Sequence[Request]) -> set[str]:
    """Children that received a release from sibling reclaim during the run."""
    return {
        r.workspace_id for r in requests if isinstance(r, ReleaseRequest) and r.source == "reclaim"
    }


# -- results ------------------------------------------------------------------------------------

_FEATURE_METRICS: tuple[tuple[str, str | None], ...] = (
    ("HeadroomCheck", "unmetered"),
    ("TightPoolFallback", "saved"),
    ("TightPoolFallback", "rejected"),
    ("SiblingReclaim", "enqueued"),
    ("SiblingReclaim", "parked"),
    ("SiblingReclaim", "served"),
    ("SiblingReclaim", "exhausted"),
    ("CoalescedEnsures", None),
    ("InvalidMessage", None),
)


def feature_numbers(run: DrainedRun) -> dict[str, float]:
    """The issue-8 features and coalescing at work, counted from the EMF output."""
    totals: dict[MetricKey, MetricTotal] = count_metrics_in_files(run.pool.stdout_paths)
    numbers: dict[str, float] = {}
    for name, value in _FEATURE_METRICS:
        total = sum(t.total for k, t in totals.items() if k.name == name and k.value == value)
        numbers[f"{name}{'{' + value + '}' if value else ''}"] = total
    numbers["serenity.pool.low events"] = run.pool_low_events
    return numbers


@dataclass
class ScenarioResult:
    """One scenario run: its checks, the numbers it measured and the tables it printed.

    Attributes:
        scenario: The scenario's name.
        config: Its configuration.
        duration_s: Wall time of the run (stack start included).
        checks: Gate the result: every one must pass.
        observations: Reported only (the standard-queue contrast's invariant table).
        numbers: Counts and timings, for the report and the docs.
        tables: Detail tables, already rendered.
    """

    scenario: str
    config: HarnessConfig
    duration_s: float = 0.0
    checks: list[InvariantResult] = field(default_factory=list)
    observations: list[InvariantResult] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every gating check passed."""
        return all(check.passed for check in self.checks)

    @property
    def title(self) -> str:
        """One line naming the run."""
        c = self.config
        if self.scenario == "sweep-crash":
            return f"sweep-crash: {c.children} targets, seed {c.seed}"
        return (
            f"{self.scenario}: {c.children} children, {c.requests} requests, "
            f"C = {c.consumers}, seed {c.seed}"
        )

    def report(self) -> str:
        """The full text report: title, tables, numbers, observations, checks, verdict."""
        parts = [f"=== {self.title} ===", *self.tables]
        if self.numbers:
            rows = [[name, value] for name, value in self.numbers.items()]
            parts.append(format_table(["measure", "value"], rows, title="Numbers"))
        if self.observations:
            rows = [
                [r.name, "holds" if r.passed else "VIOLATED", len(r.violations), _clip(r.detail)]
                for r in self.observations
            ]
            parts.append(
                format_table(
                    ["invariant", "on this queue", "violations", "detail"],
                    rows,
                    title="Invariants observed (reported, not required)",
                )
            )
        parts.append(invariants_table(self.checks))
        verdict = "PASS" if self.passed else "FAIL"
        parts.append(f"{verdict}: {self.title} ({self.duration_s:.1f} s)")
        broker = [c for c in self.checks if c.name.startswith("broker") and not c.passed]
        if broker:
            parts.append(
                "  the BROKER broke FIFO order: an order violation above is the broker's, "
                "not the allocator's"
            )
        return "\n\n".join(parts)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready summary (for ``--json``)."""
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.config).items()}

        def rows(results: Sequence[InvariantResult]) -> list[dict[str, Any]]:
            return [
                {
                    "name": r.name,
                    "passed": r.passed,
                    "detail": r.detail,
                    "violations": len(r.violations),
                }
                for r in results
            ]

        return {
            "scenario": self.scenario,
            "config": config,
            "passed": self.passed,
            "duration_s": round(self.duration_s, 1),
            "numbers": self.numbers,
            "checks": rows(self.checks),
            "observations": rows(self.observations),
        }


def _clip(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@contextlib.contextmanager
def _local_stack(config: HarnessConfig, name: str, **kwargs: Any) -> Iterator[LocalStack]:
    work_dir = config.work_dir / f"{name}-c{config.consumers}" if config.work_dir else None
    with LocalStack(
        latency_ms=config.latency_ms,
        visibility_timeout_s=config.visibility_timeout_s,
        max_receive_count=config.max_receive_count,
        work_dir=work_dir,
        **kwargs,
    ) as stack:
        yield stack


def _run_numbers(run: DrainedRun, requests: int) -> dict[str, Any]:
    window = max(run.duration_s, 1e-9)
    return {
        "drain time (s)": round(run.duration_s, 1),
        "requests per second": round(requests / window, 1),
        "batches": run.traces.batches,
        "messages received": run.traces.received,
        "batch item failures": run.traces.item_failures,
        "Semrush calls": len(run.calls),
        "outcome events": len(run.outcomes),
        "dead letters": len(run.letters),
    }


def _detail_tables(run: DrainedRun) -> list[str]:
    letters = run.letters
    if len(letters) > 20:
        reasons = Counter((letter.reason or "redriven").split(":")[0] for letter in letters)
        dlq = format_table(
            ["reason (first field)", "letters"],
            sorted(reasons.items()),
            title=f"Dead-letter queue ({len(letters)})",
        )
    else:
        dlq = dlq_table(letters)
    return [
        outcomes_table(run.outcomes),
        calls_table(run.calls),
        metrics_table(run.pool.stdout_paths),
        dlq,
    ]


# -- the scenarios ------------------------------------------------------------------------------


def _finished(
    name: str,
    config: HarnessConfig,
    started: float,
    checks: list[InvariantResult],
    numbers: dict[str, Any],
    run: DrainedRun,
) -> ScenarioResult:
    return ScenarioResult(
        name,
        config,
        time.monotonic() - started,
        checks,
        numbers=numbers,
        tables=_detail_tables(run),
    )


def _fifo_run(
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
) -> tuple[DrainedRun, list[Request], MeteredWritesResult]:
    """Seed, drain through the FIFO queue, and do the services' writes; return the run."""
    with _local_stack(config, name, not_ready_ms=not_ready_ms) as stack:
        stack.simulator.seed(list(workload.org.workspaces))
        if faults:
            stack.simulator.faults(**faults)
        run = drain_workload(
            stack,
            units if units is not None else workload.units,
            consumers=config.consumers,
            timeout_s=config.drain_timeout_s,
            crash=crash,
            handler=handler,
            env=env,
        )
        if faults:
            stack.simulator.faults(error_rate={}, stuck=[])
        requests = with_worker_releases(workload.requests, run.events, run.outcomes)
        writes = _meter_writes(stack, workload, requests, run)
    return run, requests, writes


@dataclass(frozen=True)
class MeteredWritesResult:
    """The services' writes after the drain (:func:`.demo.meter_writes`)."""

    result: InvariantResult
    refused: int
    skipped: int
    """Children left out: a sibling reclaim lowered them after their ensure, by design."""


def _meter_writes(
    stack: LocalStack, workload: Workload, requests: Sequence[Request], run: DrainedRun
) -> MeteredWritesResult:
    reclaimed = reclaimed_children(requests)
    plans = {c: p for c, p in workload.plans.items() if c not in reclaimed}
    writes = meter_writes(stack, plans, run.outcomes)
    result = writes.result()
    skipped = len(set(workload.plans) & reclaimed)
    if skipped:
        result = replace(result, detail=f"{result.detail} ({skipped} reclaimed children skipped)")
    return MeteredWritesResult(result, len(writes.refused), skipped)


def run_concurrency(config: HarnessConfig) -> ScenarioResult:
    """Scenario 1: every invariant and broker check holds with C concurrent containers."""
    started = time.monotonic()
    workload = plan_workload(config.children, config.requests, random.Random(config.seed))
    run, requests, writes = _fifo_run(config, "concurrency", workload)
    lost = count_lost_updates(requests, run.outcomes, run.calls, run.before)
    checks = [
        *invariant_checks(workload.org, requests, run, config),
        check_no_lost_updates(lost),
        writes.result,
        *run_checks(run),
    ]
    numbers = {
        **_run_numbers(run, len(workload.requests)),
        "worker-enqueued releases (reclaim)": len(requests) - len(workload.requests),
        **feature_numbers(run),
    }
    return _finished("concurrency", config, started, checks, numbers, run)


def create_standard_queue(stack: LocalStack) -> tuple[str, str, str]:
    """A standard queue (and its standard DLQ) on the stack's moto; return URL, ARN, DLQ URL.

    Same visibility timeout and maxReceiveCount as the FIFO queue; short polling only.
    """
    sqs = stack.sqs
    base = stack.names.queue_name.removesuffix(".fifo")
    dlq_url = sqs.create_queue(QueueName=f"{base}-standard-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    queue_url = sqs.create_queue(
        QueueName=f"{base}-standard",
        Attributes={
            "VisibilityTimeout": str(stack.visibility_timeout_s),
            "ReceiveMessageWaitTimeSeconds": "0",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": stack.names.max_receive_count}
            ),
        },
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    return queue_url, queue_arn, dlq_url


def run_standard_queue(config: HarnessConfig) -> ScenarioResult:
    """Scenario 2: the same workload through a STANDARD queue; count what goes wrong."""
    started = time.monotonic()
    workload = plan_workload(config.children, config.requests, random.Random(config.seed))
    with _local_stack(config, "standard-queue") as stack:
        stack.simulator.seed(list(workload.org.workspaces))
        queue_url, queue_arn, dlq_url = create_standard_queue(stack)
        run = drain_workload(
            stack,
            workload.units,
            consumers=config.consumers,
            timeout_s=config.drain_timeout_s,
            send=standard_sender(stack.sqs, queue_url),
            queue=(queue_url, queue_arn),
            dlq_url=dlq_url,
            handler=TRUSTING_HANDLER,
            env={**FEATURES_ON, "QUEUE_URL": queue_url},
        )
        run.events = regroup_by_child(run.events, workload.requests)
        requests = with_worker_releases(workload.requests, run.events, run.outcomes)
        writes = _meter_writes(stack, workload, requests, run)
    observed = invariant_checks(workload.org, requests, run, config)
    lost = count_lost_updates(requests, run.outcomes, run.calls, run.before)
    observed += [check_no_lost_updates(lost), writes.result]
    drained = run_checks(run)[0]
    numbers = {
        **_run_numbers(run, len(workload.requests)),
        "stale ensures (lost updates)": lost.stale_ensures,
        "stale releases (overwrote a top-up)": lost.stale_releases,
        "out-of-order applications": lost.out_of_order,
        "writes refused after ensure said ok": writes.refused,
        "children ending total < used": _below_used(run.after, workload.org),
        "invariant checks violated": sum(1 for r in observed if not r.passed),
        **{f"violations: {r.name}": len(r.violations) for r in observed},
    }
    return ScenarioResult(
        "standard-queue",
        config,
        time.monotonic() - started,
        [drained],
        observed,
        numbers,
        _detail_tables(run),
    )


def _below_used(after: Mapping[str, Mapping[str, Any]], org: Org) -> int:
    return sum(
        1
        for child in org.kinds
        if any(
            after[child]["ai"][dim]["total"] < after[child]["ai"][dim]["used"]
            for dim in ("projects", "prompts")
        )
    )


def run_crash(config: HarnessConfig) -> ScenarioResult:
    """Scenario 3: consumers SIGKILLed at random points, restarted; every invariant holds."""
    started = time.monotonic()
    workload = plan_workload(config.children, config.requests, random.Random(config.seed))
    crash = CrashPlan("random", config.crash_probability, seed=config.seed, max_delay_s=0.3)
    env = {
        **FEATURES_ON,
        PUBLISH_CRASH_PROBABILITY_ENV: repr(config.crash_probability / 2),
        PUBLISH_CRASH_SEED_ENV: str(config.seed),
    }
    run, requests, writes = _fifo_run(
        config, "crash", workload, crash=crash, handler=PUBLISH_CRASH_HANDLER, env=env
    )
    checks = [
        *invariant_checks(
            workload.org,
            requests,
            run,
            config,
            # A crash between a transfer and its outcome leaves a transfer no outcome reports.
            strict_transfers=False,
            allow_replays=True,
        ),
        writes.result,
        *run_checks(run),
    ]
    traced = Counter(str(e.get("at")) for e in run.events if e.get("ev") == "crash")
    counts = Counter(o.request_id for o in run.outcomes)
    numbers: dict[str, Any] = {
        **_run_numbers(run, len(workload.requests)),
        "consumers killed (SIGKILL)": run.killed,
        **{f"crashes {point}": traced[point] for point in (*CRASH_POINTS, "function_timeout")},
        f"crashes {_PUBLISH_CRASH}": max(0, run.killed - sum(traced.values())),
        "consumer restarts": run.pool.restarts,
        "outcome replays (at-least-once)": sum(n - 1 for n in counts.values() if n > 1),
        "requests replayed": sum(1 for n in counts.values() if n > 1),
        "messages redelivered": redelivered(run.events, {r.request_id for r in requests}),
    }
    return _finished("crash", config, started, checks, numbers, run)


FAULTS_VISIBILITY_TIMEOUT_S = 6
"""The faults scenario's minimum visibility timeout (a 5 s function, 1.67 s Semrush timeout)."""


def fault_settings(config: HarnessConfig, zombie: str, semrush_timeout_s: float) -> dict[str, Any]:
    """The simulator faults of the faults scenario (rates per request, seeded)."""
    return {
        "error_rate": {"5xx": 0.03, "429": 0.03, "timeout": 0.02, "not_ready": 0.03},
        # Longer than the client's per-request timeout: the client gives up first.
        "timeout_hold_ms": round((semrush_timeout_s + 0.2) * 1000),
        "stuck": [zombie],
        "seed": config.seed,
    }


def run_faults(config: HarnessConfig) -> ScenarioResult:
    """Scenario 4: upstream faults and a zombie; terminal outcome or DLQ, bounded attempts.

    Runs with a visibility timeout of at least :data:`FAULTS_VISIBILITY_TIMEOUT_S`: after a
    transfer the child is ``not ready`` for a while, and a release's settle policy then polls
    at 1 s intervals; with a 2 s function only one such release fits in a batch, the rest of
    the batch runs out of time on every receive and its messages (other children's) exhaust
    their receives into the DLQ. That starvation is measured and documented
    (docs/reliability.md); this scenario checks the design at timings it is meant for.
    """
    config = replace(
        config, visibility_timeout_s=max(config.visibility_timeout_s, FAULTS_VISIBILITY_TIMEOUT_S)
    )
    started = time.monotonic()
    workload = plan_workload(
        config.children, config.requests, random.Random(config.seed), zombie=True
    )
    zombie = workload.org.children_of("zombie")[0]
    # The stack's Semrush timeout is a third of the function timeout.
    semrush_timeout_s = round(max(0.5, min(15.0, (config.visibility_timeout_s - 1) / 3)), 2)
    faults = fault_settings(config, zombie, semrush_timeout_s)
    run, requests, writes = _fifo_run(config, "faults", workload, faults=faults, not_ready_ms=50.0)
    zombie_ids = {r.request_id for r in requests if r.workspace_id == zombie}
    checks = [
        *invariant_checks(
            workload.org,
            requests,
            run,
            config,
            # A timed-out call may have been applied after the client gave up.
            strict_transfers=False,
        ),
        check_bounded_attempts(run.events, run.outcomes, run.letters, config.max_receive_count),
        writes.result,
        *run_checks(run, expected_dead=zombie_ids),
    ]
    statuses = Counter(int(c.get("status", 0)) for c in run.calls)
    numbers = {
        **_run_numbers(run, len(workload.requests)),
        "injected 5xx answers": statuses[500] + statuses[502] + statuses[503],
        "injected 429 answers": statuses[429],
        "timeouts (504 after the hold)": statuses[504],
        "not-ready 422 answers": sum(
            1 for c in run.calls if c.get("status") == 422 and c.get("op") == "transfer"
        ),
        "zombie requests in the DLQ": len(
            zombie_ids & {letter.request_id for letter in run.letters}
        ),
        "highest receive count": max(
            (m.get("receive_count", 0) for e in run.events for m in e.get("msgs", [])), default=0
        ),
        "messages redelivered": redelivered(run.events, {r.request_id for r in requests}),
    }
    return _finished("faults", config, started, checks, numbers, run)


def _with_poison(
    units: Sequence[Sequence[Request]], poison: Sequence[PoisonMessage], rng: random.Random
) -> list[Sequence[Outgoing]]:
    mixed: list[Sequence[Outgoing]] = list(units)
    for message in poison:
        mixed.insert(rng.randint(0, len(mixed)), (message,))
    return mixed


def check_poison(
    poison: Sequence[PoisonMessage],
    letters: Sequence[DeadLetter],
    calls: Sequence[Mapping[str, Any]],
    outcomes: Sequence[AllocationOutcome],
) -> list[InvariantResult]:
    """Each poison message is in the DLQ with a reason, and none reached Semrush."""
    wanted = Counter(p.body for p in poison)
    got = Counter(letter.body for letter in letters if letter.reason)
    missing = wanted - got
    no_reason = [letter for letter in letters if not letter.reason]
    dead_violations = [f"not dead-lettered with a reason: {body[:40]!r}" for body in missing]
    dead_violations += [f"dead letter without reason: {letter.body[:40]!r}" for letter in no_reason]
    reasons = Counter((letter.reason or "").split(":")[0] for letter in letters)
    dead = invariant_result(
        "poison dead-lettered with its reason",
        dead_violations,
        f"{len(poison)} poison messages, each in the DLQ with a reason "
        f"({len(reasons)} distinct first fields)",
    )
    poison_ids = {p.poison_id for p in poison}
    reached = [
        f"{c.get('op')} {c.get('workspace_id')}"
        for c in calls
        if c.get("workspace_id") in poison_ids
    ]
    reached += [f"outcome for {o.workspace_id}" for o in outcomes if o.workspace_id in poison_ids]
    semrush = invariant_result(
        "poison never reached Semrush",
        reached,
        f"0 of {len(calls)} Semrush calls name a poison-only id",
    )
    return [dead, semrush]


def check_poison_delay(
    baseline: Sequence[float],
    poisoned: Sequence[float],
    redelivered_baseline: int,
    redelivered_poisoned: int,
    visibility_timeout_s: float,
) -> InvariantResult:
    """Valid requests are not delayed by poison beyond one visibility timeout.

    Compares the valid requests' send-to-delete latency with the same workload's run without
    poison, and requires that poison caused no redelivery of a valid message (a redelivery is
    the only way a group waits a visibility timeout).
    """
    name = "valid requests not delayed by poison"
    worst_base, worst = max(baseline, default=0.0), max(poisoned, default=0.0)
    detail = (
        f"latency p50/p95/max {_percentile(poisoned, 0.5):.2f}/{_percentile(poisoned, 0.95):.2f}/"
        f"{worst:.2f} s vs {_percentile(baseline, 0.5):.2f}/{_percentile(baseline, 0.95):.2f}/"
        f"{worst_base:.2f} s without poison; valid messages redelivered "
        f"{redelivered_poisoned} vs {redelivered_baseline}"
    )
    violations = []
    if worst > worst_base + visibility_timeout_s:
        violations.append(
            f"worst latency {worst:.2f} s > {worst_base:.2f} + {visibility_timeout_s} s"
        )
    if redelivered_poisoned > redelivered_baseline:
        violations.append(
            f"{redelivered_poisoned - redelivered_baseline} more valid messages redelivered"
        )
    if violations:
        return InvariantResult(
            name, False, f"{'; '.join(violations)} ({detail})", tuple(violations)
        )
    return InvariantResult(name, True, detail)


def run_poison(
    config: HarnessConfig, poison: Sequence[PoisonMessage] | None = None
) -> ScenarioResult:
    """Scenario 5: poison mixed into the stream, against the same workload without poison.

    Args:
        config: Sizes (``poison_count`` poison messages when ``poison`` is not given).
        poison: The poison to mix in (tests draw it with hypothesis); by default it is drawn
            with a seeded :class:`random.Random` (:class:`RandomDraws`).
    """
    started = time.monotonic()
    rng = random.Random(config.seed)
    # No tight pool: its parks would redeliver valid messages and blur the delay comparison.
    workload = plan_workload(config.children, config.requests, rng, tight_pool=False)
    valid_groups = sorted(workload.plans)
    if poison is None:
        poison = poison_messages(RandomDraws(rng), config.poison_count, valid_groups)
    baseline, _, _ = _fifo_run(config, "poison-baseline", workload)
    mixed = _with_poison(workload.units, poison, random.Random(config.seed + 1))
    run, requests, writes = _fifo_run(config, "poison", workload, units=mixed)
    valid = {r.request_id for r in requests}
    checks = [
        *invariant_checks(workload.org, requests, run, config),
        *check_poison(poison, run.letters, run.calls, run.outcomes),
        check_poison_delay(
            list(request_latencies(baseline.enqueued_at, baseline.events).values()),
            [v for k, v in request_latencies(run.enqueued_at, run.events).items() if k in valid],
            redelivered(baseline.events, valid),
            redelivered(run.events, valid),
            config.visibility_timeout_s,
        ),
        writes.result,
        InvariantResult(
            "queue drained",
            run.drained and baseline.drained,
            f"both runs drained ({baseline.duration_s:.1f} s without poison, "
            f"{run.duration_s:.1f} s with)",
        ),
    ]
    numbers: dict[str, Any] = {
        **_run_numbers(run, len(workload.requests) + len(poison)),
        "poison messages": len(poison),
        "poison in a valid child's group": sum(1 for p in poison if p.group_id in workload.plans),
        **{f"poison {kind}": n for kind, n in sorted(Counter(p.kind for p in poison).items())},
        "InvalidMessage metric": feature_numbers(run)["InvalidMessage"],
        "drain time without poison (s)": round(baseline.duration_s, 1),
    }
    return _finished("poison", config, started, checks, numbers, run)


# -- sweep crash --------------------------------------------------------------------------------

SWEEP_CRASH_POINTS = ("after-enqueue", "before-checkpoint-write", "after-checkpoint-write")
_SWEEP_TIMEOUT_S = 900.0


class SimulatedCrash(BaseException):
    """The sweep invocation dies here; a BaseException, so no ``except Exception`` stops it."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


class SweepCrashTrigger:
    """Arms one crash at a time: the n-th time a point is reached, :class:`SimulatedCrash`."""

    def __init__(self) -> None:
        self._armed: tuple[str, int] | None = None
        self.fired: list[str] = []

    def arm(self, point: str, occurrence: int) -> None:
        """Crash at the ``occurrence``-th time ``point`` is reached from now on."""
        self._armed = (point, occurrence)

    def disarm(self) -> None:
        """Cancel the armed crash."""
        self._armed = None

    def reached(self, point: str) -> None:
        """Called at each point; raises when the armed crash is due."""
        if self._armed is None or self._armed[0] != point:
            return
        remaining = self._armed[1] - 1
        if remaining > 0:
            self._armed = (point, remaining)
            return
        self._armed = None
        self.fired.append(point)
        raise SimulatedCrash(point)


class CrashingCheckpointStore:
    """A checkpoint store that can die just before or just after a write."""

    def __init__(self, inner: Any, trigger: SweepCrashTrigger) -> None:
        self._inner = inner
        self._trigger = trigger

    def load(self, run_id: str) -> Any:
        """Read through."""
        return self._inner.load(run_id)

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        """Write through, with a crash point on each side of the write."""
        self._trigger.reached("before-checkpoint-write")
        etag: str = self._inner.save(run_id, body, expected_etag=expected_etag)
        self._trigger.reached("after-checkpoint-write")
        return etag

    def location(self, run_id: str) -> str:
        """Read through."""
        location: str = self._inner.location(run_id)
        return location


class CountingEnqueuer:
    """Counts every release the sweep sends per child; can die right after a send."""

    def __init__(self, inner: Any, trigger: SweepCrashTrigger) -> None:
        self._inner = inner
        self._trigger = trigger
        self.sent: Counter[str] = Counter()

    def enqueue_release(self, workspace_id: str, **kwargs: Any) -> str:
        """Send through, count, then maybe crash (between the enqueue and its checkpoint)."""
        request_id: str = self._inner.enqueue_release(workspace_id, **kwargs)
        self.sent[workspace_id] += 1
        self._trigger.reached("after-enqueue")
        return request_id


class ManualWallClock:
    """Epoch seconds that move only when told (the sweep lease's clock)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move forward (e.g. past a dead invocation's lease) without waiting."""
        self.now += seconds


def _checkpoint_problems(store: Any, run_id: str) -> list[str]:
    from serenity_allocator.domain.sweep import SweepCheckpoint

    try:
        stored = store.load(run_id)
        if stored is None:
            return []
        checkpoint = SweepCheckpoint.model_validate(stored.body)
    except Exception as exc:
        return [f"checkpoint unreadable: {type(exc).__name__}: {exc}"]
    dupes = [child for child, n in Counter(checkpoint.processed).items() if n > 1]
    return [f"checkpoint lists {child} as processed twice" for child in dupes]


def run_sweep_crash(config: HarnessConfig) -> ScenarioResult:
    """Scenario 6: kill the sweep between targets and around its checkpoint; resume by run id.

    The Sweep handler runs in this process (as ``serenity-allocator sweep --local`` does) on
    the production runtime, whose store and enqueuer are wrapped to raise
    :class:`SimulatedCrash` at a chosen point and whose wall clock (the lease's) is moved past
    the dead invocation's lease before resuming.
    """
    from functools import partial

    from serenity_allocator.handlers.settings import SweepSettings
    from serenity_allocator.handlers.sweep import build_sweep_runtime, lambda_handler
    from serenity_tools.operator.sweep_cli import LocalInvoker, drive_sweep

    started = time.monotonic()
    rng = random.Random(config.seed)
    org = plan_org(config.children, rng)
    expected = {child for child, kind in org.kinds.items() if kind in _SWEPT_KINDS}
    crashes_wanted = max(3, config.children // 4)
    run_id = f"harness-{config.seed}-{uuid.uuid4().hex[:6]}"
    payload: dict[str, Any] = {
        "parent_workspace_ids": list(org.masters),
        "dry_run": False,
        "rate_limit_ms": 0,
        "batch_size": max(5, config.children // 3),
        "run_id": run_id,
    }
    trigger = SweepCrashTrigger()
    problems: list[str] = []
    refused = probes = invocations = 0
    with _local_stack(config, "sweep-crash") as stack, stack.activated():
        stack.simulator.seed(list(org.workspaces))
        runtime = build_sweep_runtime(SweepSettings.from_env(os.environ))
        inner_store = runtime.store
        wall = ManualWallClock()
        runtime.wall_clock = wall
        runtime.store = CrashingCheckpointStore(inner_store, trigger)
        enqueuer = CountingEnqueuer(runtime.enqueuer, trigger)
        runtime.enqueuer = enqueuer
        invoker = LocalInvoker(partial(lambda_handler, runtime=runtime), timeout_s=_SWEEP_TIMEOUT_S)
        final: dict[str, Any] | None = None
        with _handler_output(stack.work_dir / "sweep.stdout.log"):
            for _ in range(crashes_wanted * 3 + 10):
                if len(trigger.fired) < crashes_wanted:
                    point = SWEEP_CRASH_POINTS[len(trigger.fired) % len(SWEEP_CRASH_POINTS)]
                    trigger.arm(point, rng.randint(1, 3))
                invocations += 1
                try:
                    sweep = drive_sweep(invoker, payload)
                except SimulatedCrash:
                    problems += _checkpoint_problems(inner_store, run_id)
                    stored = inner_store.load(run_id)
                    lease_until = stored.body.get("lease_until") if stored is not None else None
                    if lease_until is not None and lease_until > wall():
                        # Resuming at once must be refused: the dead invocation's lease holds.
                        trigger.disarm()
                        probes += 1
                        probe = drive_sweep(invoker, payload)
                        refused += int((probe.error or {}).get("errorType") == "RunInProgressError")
                    wall.advance(_SWEEP_TIMEOUT_S + 1)  # the lease ends at the dead one's deadline
                    continue
                if sweep.error is not None:
                    problems.append(f"sweep failed: {sweep.error}")
                    break
                final = sweep.last
                if sweep.done:
                    break
            else:
                problems.append(f"the sweep did not finish in {invocations} invocations")
        problems += _checkpoint_problems(inner_store, run_id)
        stored = inner_store.load(run_id)
        messages = stack.drain_queue(stack.resources.queue_url)

    per_child = Counter(m.get("Attributes", {}).get("MessageGroupId", "") for m in messages)
    twice = sorted(child for child, n in per_child.items() if n > 1)
    checkpoint = stored.body if stored is not None else {}
    counts = (final or {}).get("counts", {})
    enqueue_violations = [f"{child}: {per_child[child]} release messages" for child in twice]
    if set(per_child) != expected:
        enqueue_violations.append(
            f"released {len(per_child)} children, expected the {len(expected)} with surplus"
        )
    if counts.get("enqueued") != len(per_child):
        enqueue_violations.append(
            f"the run counts {counts.get('enqueued')} enqueued, the queue holds {len(per_child)}"
        )
    processed = checkpoint.get("processed", [])
    if sorted(processed) != sorted(org.kinds):
        problems.append(f"processed {len(processed)} of {len(org.kinds)} targets")
    fired = Counter(trigger.fired)
    checks = [
        invariant_result(
            "no child enqueued twice",
            enqueue_violations,
            f"{len(per_child)} children, one release message each; "
            f"{sum(n - 1 for n in enqueuer.sent.values() if n > 1)} re-sends deduplicated",
        ),
        invariant_result(
            "checkpoint never corrupted",
            problems,
            f"read after each of {len(trigger.fired)} crashes and at the end: parses, "
            f"{len(processed)} processed, no duplicates",
        ),
        invariant_result(
            "resume refused while the lease holds",
            [] if refused == probes else [f"{probes - refused} immediate resumes accepted"],
            f"{refused} of {probes} immediate resumes refused (RunInProgressError)",
        ),
        invariant_result(
            "crashes injected",
            [] if len(trigger.fired) >= min(3, crashes_wanted) else ["fewer than 3 crashes"],
            f"{len(trigger.fired)} crashes: "
            + ", ".join(f"{point} {n}" for point, n in sorted(fired.items())),
        ),
    ]
    numbers = {
        "targets": len(org.kinds),
        "children with surplus": len(expected),
        "invocations": invocations,
        **{f"crashes {p}": n for p, n in sorted(Counter(trigger.fired).items())},
        "immediate resumes refused": refused,
        "release sends": sum(enqueuer.sent.values()),
        "release messages in the queue": len(messages),
    }
    return ScenarioResult(
        "sweep-crash", config, time.monotonic() - started, checks, numbers=numbers
    )


@contextlib.contextmanager
def _handler_output(path: Path) -> Iterator[None]:
    from serenity_tools.verification.demo import handler_output_to

    # LocalInvoker sends the handler's stdout (EMF) to stderr: keep both off the report.
    with (
        handler_output_to(path),
        path.open("a", encoding="utf-8") as sink,
        contextlib.redirect_stderr(sink),
    ):
        yield


RUNNERS: Mapping[str, Callable[[HarnessConfig], ScenarioResult]] = {
    "concurrency": run_concurrency,
    "standard-queue": run_standard_queue,
    "crash": run_crash,
    "faults": run_faults,
    "poison": run_poison,
    "sweep-crash": run_sweep_crash,
}


def run_scenario(name: str, config: HarnessConfig) -> ScenarioResult:
    """Run one scenario by name."""
    if name not in RUNNERS:
        raise ValueError(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")
    return RUNNERS[name](config)


# -- CLI ----------------------------------------------------------------------------------------


def _consumer_counts(value: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {value!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("consumer counts must be positive")
    return counts


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator harness`` options."""
    defaults = HarnessConfig()
    parser.add_argument(
        "--scenario", choices=[*SCENARIOS, "all"], default="concurrency", help="what to run"
    )
    parser.add_argument("--children", type=int, default=defaults.children)
    parser.add_argument("--requests", type=int, default=defaults.requests)
    parser.add_argument(
        "--consumers",
        type=_consumer_counts,
        default=(1, 2, 4, 8),
        metavar="C[,C...]",
        help="consumer processes; a list runs the scenario once per count (default 1,2,4,8)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--latency-ms", type=float, default=defaults.latency_ms)
    parser.add_argument("--visibility-timeout-s", type=int, default=defaults.visibility_timeout_s)
    parser.add_argument(
        "--crash-probability", type=float, default=defaults.crash_probability, help="per batch"
    )
    parser.add_argument(
        "--poison", type=int, default=None, help="poison messages (default: requests / 10)"
    )
    parser.add_argument("--drain-timeout-s", type=float, default=defaults.drain_timeout_s)
    parser.add_argument("--work-dir", type=Path, default=None, help="traces and logs")
    parser.add_argument("--json", type=Path, default=None, dest="json_path", help="results file")


def summary_table(results: Sequence[ScenarioResult]) -> str:
    """One row per run: sizes, time, throughput and the verdict."""
    rows = [
        [
            r.scenario,
            r.config.children,
            "-" if r.scenario == "sweep-crash" else r.config.requests,
            "-" if r.scenario == "sweep-crash" else r.config.consumers,
            round(r.duration_s, 1),
            r.numbers.get("requests per second"),
            sum(1 for c in r.checks if c.passed),
            len(r.checks),
            "PASS" if r.passed else "FAIL",
        ]
        for r in results
    ]
    return format_table(
        ["scenario", "children", "requests", "C", "seconds", "req/s", "passed", "checks", "result"],
        rows,
        title="Harness summary",
    )


def run(args: argparse.Namespace) -> int:
    """Run the chosen scenario(s) once per consumer count; exit 1 if any check failed."""
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    results: list[ScenarioResult] = []
    try:
        for scenario in scenarios:
            counts = (1,) if scenario == "sweep-crash" else args.consumers
            for consumers in counts:
                config = HarnessConfig(
                    children=args.children,
                    requests=args.requests,
                    consumers=consumers,
                    seed=args.seed,
                    latency_ms=args.latency_ms,
                    visibility_timeout_s=args.visibility_timeout_s,
                    crash_probability=args.crash_probability,
                    poison=args.poison,
                    drain_timeout_s=args.drain_timeout_s,
                    work_dir=args.work_dir,
                )
                print(f"# running {scenario} (C = {consumers}) ...", file=sys.stderr, flush=True)
                result = run_scenario(scenario, config)
                print(result.report() + "\n", flush=True)
                results.append(result)
    except ValueError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2
    print(summary_table(results))
    if args.json_path is not None:
        args.json_path.write_text(
            json.dumps([r.as_json() for r in results], indent=2, default=str) + "\n",
            encoding="utf-8",
        )
    return 0 if all(r.passed for r in results) else 1


__all__ = [
    "FEATURES_ON",
    "POISON_KINDS",
    "SCENARIOS",
    "HarnessConfig",
    "PoisonMessage",
    "RandomDraws",
    "ScenarioResult",
    "configure",
    "run",
    "run_scenario",
]
