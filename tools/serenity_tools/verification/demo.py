"""``serenity-allocator demo`` (``make demo``): the whole system on the local stack, checked.

1. Start the local stack in IMS mode (moto in its own process, the Semrush simulator serving
   IMS too, the template's resources with the credentials table and its KMS key, an outcome
   capture) and seed an org pool with a few dozen children: some over-carved the old way, some
   tight (used == total), two with drafts, one zombie stuck ``not ready``, one near its brand
   ceiling, one about to ask for more than the pool has. Every child's service acts for its
   own IMS user (a member of the child and the pool; the burst child has two), an operator
   is a member of all (:mod:`.credential_story`).
2. Start C consumer processes (each a stand-in for a Lambda container running the Allocator
   in IMS mode), then let several producer threads enqueue a burst of ensures and releases
   through the real producer, each with its user's access token (the producer mints the
   promise token and writes it, encrypted, to the credentials table before sending): one
   coalescable burst of ensures for one child, from two users; releases between ensures for
   others. Beside them: one malformed message from a "legacy" sender, and the three requests
   the credential model refuses (an intruder asking for a child it is not a member of:
   ``accessDenied``, nothing applied; a revoked promise: ``needsReauth``; no record:
   ``noCredential``). The consumers drain it through the real handler, each request
   exchanging its promise first and calling Semrush with its own user's token.
3. The services make the writes their ensures prepared for on the simulator's write gate, the
   way the README tells them to: one ``WriteGuard`` per request, front the ensure, wrap the
   write. The gate refuses a write past the total with the disguised 405 and enforces a top-up
   ``enforcement_lag_ms`` late (shortened from the upstream's ~9 s, never 0), so some writes
   need a retry; the report says how many and how long they waited.
4. Run the Sweep handler (in this process, like a Lambda invocation) as a dry run, then for
   real, in batches of 10, each run on the one promise token the operator put on its claim
   (rolled at every batch, invalidated at the end); drain the releases it enqueued (each with
   a promise the Sweep minted from the operator's token and wrote to the credentials table).
5. Print the pool and the changed children before and after, the outcomes by kind and status,
   the Semrush and IMS calls made, the metrics counted from the EMF output, the DLQ, and the
   invariant
   checks with PASS/FAIL (:data:`.checks.DEMO_CHECKS`), and the replays the traces explain (a
   consumer killed by a crash or its function timeout: reported, not a failure). Exit 1 if any
   check fails.

Timings are the local stack's generous defaults (:mod:`.standins.stack`): a busy machine makes
the demo slower, never red.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from serenity_allocator.adapters.s3_checkpoint_store import S3CheckpointStore
from serenity_allocator.adapters.sqs import AllocationProducer, build_ensure, build_release
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import DEFAULT_BLOCKS
from serenity_allocator.write_guard import EmfQuotaRetryRecorder
from serenity_tools.standins.aws_endpoints import (
    AwsEndpoints,
    add_endpoint_flag,
    endpoints_from_args,
)
from serenity_tools.standins.consumer_pool import ConsumerPool
from serenity_tools.standins.identities import LocalIdentities, UserProducer, keep_ims_calls
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.stack import DEFAULT_VISIBILITY_TIMEOUT_S, LocalStack
from serenity_tools.standins.traces import read_trace_events, summarize_traces
from serenity_tools.verification.checks import DEMO_CHECKS, RunRecord, explained_lines, run_checks
from serenity_tools.verification.credential_story import (
    OPERATOR,
    Refusals,
    add_brand_users,
    add_operator,
    burst_users,
    check_refusals,
    check_scrubbed,
    check_sweep_rolled,
    credential_items,
    hand_run_token,
    not_scrubbed_records,
    run_claim,
    send_refusals,
    user_of,
)
from serenity_tools.verification.emf import MetricKey, MetricTotal, count_metrics_in_files
from serenity_tools.verification.identity import ActorWindow, IdentityRecord
from serenity_tools.verification.invariants import InvariantResult, workspaces_by_id
from serenity_tools.verification.ledger_check import read_ledger_table
from serenity_tools.verification.replays import explained_table, publish_failures
from serenity_tools.verification.reports import (
    calls_table,
    dlq_table,
    ims_table,
    invariants_table,
    metrics_table,
    outcomes_table,
    pool_table,
    sweep_table,
)
from serenity_tools.verification.seeding import seed_child, usage
from serenity_tools.verification.tables import format_table
from serenity_tools.verification.tiered import (
    check_real_sized,
    check_tiered,
    real_sized_family,
    real_sized_requests,
    tiered_family,
    tiered_requests,
)
from serenity_tools.verification.write_path import (
    as_metered_writes,
    guarded_service_writes,
    summarize_writes,
)

MASTER_ID = "org-demo"
POOL_PROJECTS = 200
POOL_PROMPTS = 50_000
SWEEP_FUNCTION = "serenity-allocator-local-SweepFunction"
SWEEP_TIMEOUT_S = 900.0
"""The Sweep function's timeout in template.yaml (Lambda's ceiling)."""
_MAX_SWEEP_INVOCATIONS = 200
_SPECIAL_KINDS = ("zombie", "ceiling", "burst", "greedy", "drafts", "drafts")
_COMMON_KINDS = ("over", "tight", "over", "idle", "over", "tight")
_BURST_SIZE = 8
STORY_DENIED = "story-denied"
"""A tight child the intruder asks for without being a member of it (``accessDenied``)."""
STORY_IDLE = ("story-intruder", "story-lapsed", "story-legacy")
"""The intruder's own child, the lapsed user's, the legacy sender's (no other request)."""
STORY_CHILDREN = dict.fromkeys((STORY_DENIED, *STORY_IDLE), "tight")
"""Children of the credential story, seeded beside the planned ones (no plans of their own;
tight, so the sweep leaves them as they are and any change would be a refused request's)."""
SERVICES_LOG = "services.stdout.log"
"""The services' own EMF output (QuotaRetryOutcome from their write guards), in the work dir."""

Request = EnsureRequest | ReleaseRequest


@dataclass(frozen=True)
class DemoConfig:
    """Sizes and timings of one demo run (the defaults are what ``make demo`` runs)."""

    children: int = 30
    consumers: int = 4
    producers: int = 3
    latency_ms: float = 10.0
    not_ready_ms: float = 0.0
    visibility_timeout_s: int = DEFAULT_VISIBILITY_TIMEOUT_S
    """Generous: a batch slowed by a busy machine is never handed out twice."""
    max_receive_count: int = 5
    """The redrive policy's maxReceiveCount (template: 5); the zombie takes that many receives."""
    seed: int = 7
    enforcement_lag_ms: float = 1500.0
    """The write gate's lag behind a transfer (upstream ~9 s; shortened so the demo is quick)."""
    write_retry_interval_s: float = 0.6
    """The guard's pause between attempts: three of them span the shortened lag."""
    drain_timeout_s: float = 300.0
    """A budget, not an expectation: the drain usually takes seconds."""
    work_dir: Path | None = None
    fifo_safe_broker: bool = True
    endpoints: AwsEndpoints = field(default_factory=AwsEndpoints)
    """AWS endpoints given for some services (``--aws-endpoint``); moto serves the rest."""

    def __post_init__(self) -> None:
        if self.children < len(_SPECIAL_KINDS) + 2:
            raise ValueError(f"the demo needs at least {len(_SPECIAL_KINDS) + 2} children")
        if self.consumers < 1 or self.producers < 1:
            raise ValueError("the demo needs at least one consumer and one producer")
        if self.enforcement_lag_ms <= 0:
            raise ValueError("the demo's write gate must lag transfers (enforcement_lag_ms > 0)")


# -- the org ------------------------------------------------------------------------------------


def plan_children(config: DemoConfig, rng: random.Random) -> dict[str, str]:
    """Child id -> kind, in a fixed order (special kinds first, then a repeating mix)."""
    kinds = list(_SPECIAL_KINDS)
    while len(kinds) < config.children:
        kinds.append(_COMMON_KINDS[(len(kinds) - len(_SPECIAL_KINDS)) % len(_COMMON_KINDS)])
    return {f"child-{index:02d}": kind for index, kind in enumerate(kinds)}


def seed_workspaces(kinds: Mapping[str, str], rng: random.Random) -> list[dict[str, Any]]:
    """The master and its children in the simulator's seed shape."""
    children = [seed_child(child_id, kind, MASTER_ID, rng) for child_id, kind in kinds.items()]
    carved_projects = sum(c["ai"]["projects"]["total"] for c in children)
    carved_prompts = sum(c["ai"]["prompts"]["total"] for c in children)
    pool_projects = max(POOL_PROJECTS, carved_projects + 40)
    pool_prompts = max(POOL_PROMPTS, carved_prompts + 10_000)
    master = {
        "id": MASTER_ID,
        "title": "Demo org",
        "parent_id": None,
        "limits_enabled": True,
        "ai": {
            "projects": usage(0, pool_projects - carved_projects),
            "prompts": usage(0, pool_prompts - carved_prompts),
        },
    }
    return [master, *children]


def _ensure(child: str, prompts: int, projects: int = 0, **extra: Any) -> EnsureRequest:
    return build_ensure(child, MASTER_ID, {"projects": projects, "prompts": prompts}, **extra)


def _plan_over(child: str, nth: int, rng: random.Random) -> list[Request]:
    if nth % 2:
        return [_ensure(child, 50)]
    # A release between two ensures: applied in its place, so the second ensure tops the
    # lowered child back up (order matters, and the checks verify it).
    return [_ensure(child, 50), build_release(child), _ensure(child, 150, 1)]


def _plan_tight(child: str, nth: int, rng: random.Random) -> list[Request]:
    return [_ensure(child, rng.choice((50, 100, 250)), rng.choice((0, 1)))]


def _plan_drafts(child: str, nth: int, rng: random.Random) -> list[Request]:
    # The first counts its drafts (a top-up), the second does not (the hot path).
    return [_ensure(child, 100, include_drafted=nth == 1)]


_PLANS: dict[str, Callable[[str, int, random.Random], list[Request]]] = {
    "over": _plan_over,
    "tight": _plan_tight,
    "drafts": _plan_drafts,
    "zombie": lambda child, nth, rng: [_ensure(child, 50)],
    "ceiling": lambda child, nth, rng: [
        _ensure(child, 300, ceiling={"projects": 5, "prompts": 600})
    ],
    "burst": lambda child, nth, rng: [_ensure(child, 50) for _ in range(_BURST_SIZE)],
    "greedy": lambda child, nth, rng: [_ensure(child, POOL_PROMPTS * 2)],
}
"""Per kind, the requests a child's service sends (``idle`` children send none)."""


def plan_requests(kinds: Mapping[str, str], rng: random.Random) -> dict[str, list[Request]]:
    """Per child, the requests its service will send, in order."""
    plans: dict[str, list[Request]] = {}
    seen: Counter[str] = Counter()
    for child, kind in kinds.items():
        seen[kind] += 1
        if kind in _PLANS:
            plans[child] = _PLANS[kind](child, seen[kind], rng)
    return plans


# -- producing ------------------------------------------------------------------------------------


def _send_interleaved(
    producer: UserProducer,
    plans: Mapping[str, Sequence[Request]],
    burst_children: frozenset[str],
) -> list[Request]:
    """One service instance: send its children's requests, interleaved, each child in order.

    Each request goes with its child's user's credential (the producer mints the promise token
    and writes the record before sending).
    """
    queues = {child: list(requests) for child, requests in plans.items()}
    sent: list[Request] = []
    while any(queues.values()):
        for child, pending in queues.items():
            if not pending:
                continue
            if child in burst_children:
                # A burst goes as one SendMessageBatch: it lands together and can coalesce.
                chunk = list(pending)
                producer.enqueue_many(chunk, burst_users(chunk))
            else:
                chunk = [pending[0]]
                producer.enqueue(chunk[0], user_of(child))
            sent.extend(chunk)
            del pending[: len(chunk)]
    return sent


def produce(
    stack: LocalStack,
    identities: LocalIdentities,
    plans: Mapping[str, Sequence[Request]],
    kinds: Mapping[str, str],
    count: int,
) -> list[Request]:
    """Enqueue every plan from ``count`` producer threads; return what was sent.

    Each child belongs to exactly one producer, so its enqueue order is that producer's.
    """
    children = list(plans)
    bursts = frozenset(c for c in children if kinds[c] == "burst")
    # Clients are built here, not in the threads: boto3's default session is not thread-safe.
    producers = [identities.producer(stack.client("sqs")) for _ in range(count)]
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="producer") as executor:
        futures = [
            executor.submit(
                _send_interleaved,
                producer,
                {child: plans[child] for child in children[index::count]},
                bursts,
            )
            for index, producer in enumerate(producers)
        ]
        return [request for future in futures for request in future.result()]


def send_malformed(stack: LocalStack) -> None:
    """A legacy sender's truncated JSON: the worker must dead-letter it, never call Semrush."""
    stack.sqs.send_message(
        QueueUrl=stack.resources.queue_url,
        MessageBody='{"version": 1, "kind": "ensure", "request_id": "legacy-1", "workspace_',
        MessageGroupId="legacy-sender",
        MessageDeduplicationId="legacy-1",
    )


# -- the sweep ----------------------------------------------------------------------------------


@contextlib.contextmanager
def handler_output_to(path: Path) -> Iterator[None]:
    """Send the in-process handlers' logs and EMF lines to ``path`` instead of the terminal."""
    from serenity_allocator.adapters.observability import logger

    handler = logger.registered_handler
    with path.open("a", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
        previous = handler.setStream(sink) if isinstance(handler, logging.StreamHandler) else None
        try:
            yield
        finally:
            if previous is not None and isinstance(handler, logging.StreamHandler):
                handler.setStream(previous)


def run_sweep(
    stack: LocalStack,
    identities: LocalIdentities,
    payload: Mapping[str, Any],
    log_path: Path,
) -> list[dict[str, Any]]:
    """Invoke the Sweep handler in this process until the run is done; return each result.

    As ``serenity-allocator sweep`` does, the operator's promise token is put on the run's
    claim before its first batch; every batch exchanges it (and stores the rolled one) first.
    """
    from serenity_allocator.adapters.credential_store import KmsTokenCipher
    from serenity_allocator.handlers.settings import SweepSettings
    from serenity_allocator.handlers.sweep import lambda_handler
    from serenity_allocator.handlers.sweep_runtime import build_sweep_runtime, new_run_id

    results: list[dict[str, Any]] = []
    run_id = new_run_id()
    event = {**payload, "run_id": run_id}
    with stack.activated() as env, handler_output_to(log_path):
        # The Sweep's own runtime: in IMS mode its releases go through the producer's
        # hand-over, each minted from the batch's (the operator's) access token.
        runtime = build_sweep_runtime(SweepSettings.from_env(env))
        hand_run_token(
            identities,
            S3CheckpointStore(stack.resources.bucket),
            KmsTokenCipher(stack.resources.credentials_key_arn),
            run_id,
        )
        for _ in range(_MAX_SWEEP_INVOCATIONS):
            context = LocalLambdaContext(SWEEP_FUNCTION, SWEEP_TIMEOUT_S)
            result = lambda_handler(event, context, runtime)
            results.append(result)
            if result["done"] or result["aborted"]:
                break
    return results


def sweep_releases(results: Sequence[Mapping[str, Any]]) -> list[ReleaseRequest]:
    """The release requests a real sweep enqueued, as the producer built them."""
    requests: list[ReleaseRequest] = []
    for result in results:
        for item in result["items"]:
            if item.get("outcome") == "enqueued" and item.get("request_id"):
                requests.append(
                    build_release(
                        item["workspace_id"],
                        floor=DEFAULT_BLOCKS.as_totals(),
                        source="sweep",
                        run_id=result["run_id"],
                        request_id=item["request_id"],
                    )
                )
    return requests


# -- the run ------------------------------------------------------------------------------------


class _Clock:
    """Phase timings for the report."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._last = self.started
        self.phases: list[tuple[str, float]] = []

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases.append((phase, now - self._last))
        self._last = now

    @property
    def total(self) -> float:
        return time.monotonic() - self.started


@dataclass
class _Drained:
    """What the drain left behind, read once the consumers stopped."""

    record: RunRecord
    kinds: Mapping[str, str]
    pool: ConsumerPool
    dry: list[dict[str, Any]]
    real: list[dict[str, Any]]
    sweep_log: Path
    beside: tuple[InvariantResult, ...]
    """The tiered and real-sized families' checks (outcomes, the flat-prompts counter), the
    credential outcomes and the scrubbed credentials table."""
    ims_calls: list[dict[str, Any]] = field(default_factory=list)
    """The simulator's IMS call log (mint, exchange, invalidate)."""


def _drain_everything(config: DemoConfig, stack: LocalStack, clock: _Clock, say: Any) -> _Drained:
    """Seed, enqueue, drain, write, sweep, drain again; record what the run left behind."""
    rng = random.Random(config.seed)
    planned = plan_children(config, rng)
    kinds = {**planned, **STORY_CHILDREN}
    seeded = [*seed_workspaces(kinds, rng), *tiered_family(), *real_sized_family()]
    stack.simulator.seed(seeded)
    stack.simulator.faults(
        stuck=[c for c, k in kinds.items() if k == "zombie"],
        enforcement_lag_ms=config.enforcement_lag_ms,
    )
    before = workspaces_by_id(stack.simulator.dump()["workspaces"])
    identities = _users(stack, seeded, planned, kinds)
    clock.lap("stack up + seed (+ IMS users)")

    say(f"starting {config.consumers} consumer processes (Lambda containers) ...")
    pool = stack.start_consumers(config.consumers)
    clock.lap("consumers ready")

    plans = plan_requests(planned, rng)
    say(
        f"{config.producers} producers enqueue {sum(map(len, plans.values()))} requests "
        f"for {len(plans)} children, each with its user's promise token (+1 malformed "
        "message, +3 the credential model refuses) ..."
    )
    send_malformed(stack)
    requests = produce(stack, identities, plans, planned, config.producers)
    tiered, real_sized = tiered_requests(), real_sized_requests()
    beside = identities.producer(stack.sqs)
    for request, _ in [*tiered, *real_sized]:
        beside.enqueue(request, user_of(request.workspace_id))
    requests += [request for request, _ in [*tiered, *real_sized]]
    refusals = send_refusals(
        identities,
        beside,
        AllocationProducer(stack.resources.queue_url, stack.sqs),
        master=MASTER_ID,
        denied_child=STORY_DENIED,
        idle_children=STORY_IDLE,
    )
    requests += refusals.all
    clock.lap("enqueue (mint + record + send)")
    drained = pool.wait_drained(stack.queue_depth, timeout_s=config.drain_timeout_s)
    clock.lap("drain")
    # The services' QuotaRetryOutcome EMF goes to their own log, counted in the report.
    with (stack.work_dir / SERVICES_LOG).open("a", encoding="utf-8") as services_log:
        guarded, guard_requests = guarded_service_writes(
            stack,
            plans,
            stack.outcomes.outcomes(),
            retry_interval_s=config.write_retry_interval_s,
            enforcement_lag_s=config.enforcement_lag_ms / 1000.0,
            recorder=EmfQuotaRetryRecorder(
                "local", service="demo-services", emit=lambda line: print(line, file=services_log)
            ),
            identities=identities,
        )
    requests += guard_requests
    say(summarize_writes(guarded).line())
    drained = pool.wait_drained(stack.queue_depth, timeout_s=config.drain_timeout_s) and drained
    clock.lap("services write (guarded)")

    say("sweep: dry run, then a real run ...")
    sweep_log = stack.work_dir / "sweep.stdout.log"
    # Batches of 10: each run takes several, all on the one promise the operator handed over.
    payload = {"parent_workspace_ids": [MASTER_ID], "rate_limit_ms": 0, "batch_size": 10}
    sweep_started = time.monotonic()
    dry = run_sweep(stack, identities, {**payload, "dry_run": True}, sweep_log)
    real = run_sweep(stack, identities, {**payload, "dry_run": False}, sweep_log)
    sweep_window = ActorWindow(OPERATOR, sweep_started, time.monotonic())
    released = sweep_releases(real)
    identities.own([release.request_id for release in released], OPERATOR)
    requests += released
    clock.lap("sweep (dry + real)")
    drained = pool.wait_drained(stack.queue_depth, timeout_s=config.drain_timeout_s) and drained
    clock.lap("drain sweep releases")
    pool.stop()

    dump = stack.simulator.dump()
    record = RunRecord(
        masters=[MASTER_ID],
        requests=requests,
        before=before,
        after=workspaces_by_id(dump["workspaces"]),
        calls=dump["calls"],
        outcomes=stack.outcomes.outcomes(),
        letters=stack.read_dead_letters(),
        events=read_trace_events(pool.trace_paths),
        visibility_timeout_s=stack.visibility_timeout_s,
        max_receive_count=stack.resources.max_receive_count,
        expected_dead=frozenset(
            r.request_id for r in requests if kinds.get(r.workspace_id) == "zombie"
        ),
        # The malformed message, and the two refusals dead-lettered with their reason.
        expected_invalid=1 + len(refusals.dead_lettered),
        writes=as_metered_writes(guarded),
        guarded_writes=guarded,
        drained=drained,
        ledger=read_ledger_table(stack.resources),
        publish_failures=publish_failures(pool.stdout_paths),
        identity=IdentityRecord(identities.owners, identities.memberships, (sweep_window,)),
    )
    checks = (
        check_tiered(tiered, record.outcomes, dump),
        check_real_sized(real_sized, record.outcomes),
        *_credential_checks(stack, pool, record, refusals, [dry, real], sweep_log),
    )
    ims_calls = stack.simulator.ims_calls()
    keep_ims_calls(stack.work_dir, ims_calls)
    return _Drained(record, kinds, pool, dry, real, sweep_log, checks, ims_calls)


def _users(
    stack: LocalStack,
    seeded: Sequence[Mapping[str, Any]],
    planned: Mapping[str, str],
    kinds: Mapping[str, str],
) -> LocalIdentities:
    """The run's IMS users: one per child's service (two for the burst child), the operator.

    The story's refused requests bring their own users (:func:`.credential_story.send_refusals`).
    """
    identities = LocalIdentities(stack)
    bursts = [child for child, kind in planned.items() if kind == "burst"]
    add_brand_users(identities, seeded, two_users=bursts)
    add_operator(identities, MASTER_ID, list(kinds))
    return identities


def _credential_checks(
    stack: LocalStack,
    pool: ConsumerPool,
    record: RunRecord,
    refusals: Refusals,
    sweeps: Sequence[Sequence[Mapping[str, Any]]],
    sweep_log: Path,
) -> tuple[InvariantResult, ...]:
    """The refused requests, no token at rest, and each sweep run's rolled token."""
    claims = S3CheckpointStore(stack.resources.bucket, s3=stack.client("s3"))
    run_claims = [
        run_claim(claims, results[0]["run_id"]) if results else None for results in sweeps
    ]
    return (
        check_refusals(refusals, record.outcomes, record.before, record.after, record.letters),
        check_scrubbed(
            credential_items(stack.client("dynamodb"), stack.resources.credentials_table),
            not_scrubbed_records(pool.stdout_paths),
        ),
        check_sweep_rolled(
            sweeps,
            _credential_count(count_metrics_in_files([sweep_log]), "exchanged"),
            run_claims,
        ),
    )


def _credential_count(metrics: Mapping[MetricKey, MetricTotal], outcome: str) -> int:
    """The ``CredentialOutcome{Outcome=outcome}`` count in ``metrics``."""
    total = metrics.get(MetricKey("CredentialOutcome", "Outcome", outcome))
    return int(total.total) if total is not None else 0


def _consumers_table(run: _Drained) -> str:
    traces = summarize_traces(run.record.events)
    replays = run.record.replays
    return format_table(
        ["consumer", "batches", "messages", "deleted"],
        [
            [slot, stats.batches, stats.received, stats.deleted]
            for slot, stats in sorted(traces.per_consumer.items())
        ],
        title=f"Consumers ({traces.batches} batches, {traces.item_failures} batch item "
        f"failures, {traces.crashes} crashes, {replays.interrupted_batches} batches "
        f"interrupted, {run.pool.restarts} restarts)",
    )


def _report(run: _Drained, results: Sequence[InvariantResult], clock: _Clock) -> list[str]:
    record = run.record
    tables = [
        pool_table(record.before, record.after, run.kinds, MASTER_ID),
        outcomes_table(record.outcomes),
        sweep_table(run.dry, run.real),
        calls_table(record.calls),
        ims_table(run.ims_calls, len(record.requests)),
        metrics_table([*run.pool.stdout_paths, run.sweep_log, run.sweep_log.parent / SERVICES_LOG]),
        dlq_table(record.letters),
        _consumers_table(run),
        format_table(
            ["phase", "seconds"],
            [[phase, round(seconds, 1)] for phase, seconds in clock.phases],
            title=f"Timings (total {clock.total:.1f} s; traces and logs in {run.sweep_log.parent})",
        ),
    ]
    explained = explained_lines(results)
    if explained:
        tables.append(explained_table(explained))
    return [*tables, invariants_table(results)]


def _verdict(results: Sequence[InvariantResult], total_s: float) -> str:
    failed = [r for r in results if not r.passed]
    explained = len(explained_lines(results))
    replays = (
        f"; {explained} replays explained (identical repeats: crashes, timeouts, publishes that"
        " landed)"
        if explained
        else ""
    )
    if not failed:
        return f"PASS: every check holds ({total_s:.1f} s{replays})"
    broker = any(r.name.startswith("broker") for r in failed)
    note = " (the BROKER broke FIFO order: an order violation above is moto's, not ours)"
    return f"FAIL: {len(failed)} check(s) failed" + (note if broker else "")


def run_demo(config: DemoConfig, out: TextIO | None = None) -> int:
    """Run the demo and print its report to ``out``; return 0 when every check passes."""
    stream = out or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=stream, flush=True)

    clock = _Clock()
    say("serenity-allocator demo: starting the local stack (moto, simulator, queues) ...")
    with LocalStack(
        credentials="ims",
        latency_ms=config.latency_ms,
        not_ready_ms=config.not_ready_ms,
        visibility_timeout_s=config.visibility_timeout_s,
        max_receive_count=config.max_receive_count,
        work_dir=config.work_dir,
        fifo_safe_broker=config.fifo_safe_broker,
        endpoints=config.endpoints,
    ) as stack:
        run = _drain_everything(config, stack, clock, say)
        results = [*run_checks(run.record, DEMO_CHECKS), *run.beside]
        clock.lap("report")
    for table in _report(run, results, clock):
        say()
        say(table)
    say()
    say(_verdict(results, clock.total))
    return 0 if all(r.passed for r in results) else 1


# -- CLI ----------------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator demo`` options."""
    defaults = DemoConfig()
    parser.add_argument("--children", type=int, default=defaults.children)
    parser.add_argument("--consumers", type=int, default=defaults.consumers)
    parser.add_argument("--producers", type=int, default=defaults.producers)
    parser.add_argument("--latency-ms", type=float, default=defaults.latency_ms)
    parser.add_argument("--not-ready-ms", type=float, default=defaults.not_ready_ms)
    parser.add_argument(
        "--visibility-timeout-s",
        type=int,
        default=defaults.visibility_timeout_s,
        help="queue visibility timeout; the function timeout is 1 s less (default: generous)",
    )
    parser.add_argument("--max-receive-count", type=int, default=defaults.max_receive_count)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--enforcement-lag-ms",
        type=float,
        default=defaults.enforcement_lag_ms,
        help="the write gate's lag behind a transfer (> 0)",
    )
    parser.add_argument("--drain-timeout-s", type=float, default=defaults.drain_timeout_s)
    parser.add_argument("--work-dir", type=Path, default=None, help="traces and logs")
    parser.add_argument(
        "--stock-moto",
        action="store_true",
        help="run moto without the FIFO redelivery fix (to see the broker checks catch it)",
    )
    add_endpoint_flag(parser)


def run(args: argparse.Namespace) -> int:
    """Run the demo with the parsed options."""
    return run_demo(
        DemoConfig(
            children=args.children,
            consumers=args.consumers,
            producers=args.producers,
            latency_ms=args.latency_ms,
            not_ready_ms=args.not_ready_ms,
            visibility_timeout_s=args.visibility_timeout_s,
            max_receive_count=args.max_receive_count,
            seed=args.seed,
            enforcement_lag_ms=args.enforcement_lag_ms,
            drain_timeout_s=args.drain_timeout_s,
            work_dir=args.work_dir,
            fifo_safe_broker=not args.stock_moto,
            endpoints=endpoints_from_args(args),
        )
    )
