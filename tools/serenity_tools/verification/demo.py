"""``serenity-allocator demo`` (``make demo``): the whole system on the local stack, checked.

1. Start the local stack (moto in its own process, the Semrush simulator, the template's
   resources, an outcome capture) and seed an org pool with a few dozen children: some
   over-carved the old way, some tight (used == total), two with drafts, one zombie stuck
   ``not ready``, one near its brand ceiling, one about to ask for more than the pool has.
2. Start C consumer processes (each a stand-in for a Lambda container), then let several
   producer threads enqueue a burst of ensures and releases through the real producer
   (one coalescable burst of ensures for one child; releases between ensures for others) and
   one malformed message from a "legacy" sender. The consumers drain it through the real
   handler.
3. The services make the writes their ensures prepared for (metered by the simulator, which
   refuses a write past the total with the disguised 405).
4. Run the Sweep handler (in this process, like a Lambda invocation) as a dry run, then for
   real, and drain the releases it enqueued.
5. Print the pool and the changed children before and after, the outcomes by kind and status,
   the Semrush calls made, the metrics counted from the EMF output, the DLQ, and the invariant
   checks with PASS/FAIL. Exit 1 if any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from serenity_allocator.adapters.sqs_producer import AllocationProducer, build_ensure, build_release
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import DEFAULT_BLOCKS
from serenity_tools.standins.consumer import read_trace_events, summarize_traces
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.resources import local_client
from serenity_tools.standins.stack import DeadLetter, LocalStack
from serenity_tools.verification.emf import count_metrics_in_files
from serenity_tools.verification.invariants import (
    InvariantResult,
    check_bounds,
    check_conservation,
    check_fifo_delivery,
    check_group_exclusivity,
    check_headroom,
    check_order,
    check_terminal_outcomes,
    workspaces_by_id,
)
from serenity_tools.verification.tables import format_table

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
_APPLIED_STATUSES = frozenset({"hot-path", "topped-up", "topped-up-after-reclaim"})

Request = EnsureRequest | ReleaseRequest


@dataclass(frozen=True)
class DemoConfig:
    """Sizes and timings of one demo run (the defaults are what ``make demo`` runs)."""

    children: int = 30
    consumers: int = 4
    producers: int = 3
    latency_ms: float = 10.0
    not_ready_ms: float = 0.0
    visibility_timeout_s: int = 3
    max_receive_count: int = 5
    """The redrive policy's maxReceiveCount (template: 5); the zombie takes that many receives."""
    seed: int = 7
    drain_timeout_s: float = 90.0
    work_dir: Path | None = None
    fifo_safe_broker: bool = True

    def __post_init__(self) -> None:
        if self.children < len(_SPECIAL_KINDS) + 2:
            raise ValueError(f"the demo needs at least {len(_SPECIAL_KINDS) + 2} children")
        if self.consumers < 1 or self.producers < 1:
            raise ValueError("the demo needs at least one consumer and one producer")


# -- the org ------------------------------------------------------------------------------------


def _usage(used: int, total: int, drafted: int = 0) -> dict[str, int]:
    return {"used": used, "drafted": drafted, "total": total}


def plan_children(config: DemoConfig, rng: random.Random) -> dict[str, str]:
    """Child id -> kind, in a fixed order (special kinds first, then a repeating mix)."""
    kinds = list(_SPECIAL_KINDS)
    while len(kinds) < config.children:
        kinds.append(_COMMON_KINDS[(len(kinds) - len(_SPECIAL_KINDS)) % len(_COMMON_KINDS)])
    return {f"child-{index:02d}": kind for index, kind in enumerate(kinds)}


def seed_child(child_id: str, kind: str, parent_id: str, rng: random.Random) -> dict[str, Any]:
    """One child of ``kind`` in the simulator's seed shape (the demo's and the harness's kinds).

    ``over``: carved the old way (totals far above use); ``tight``: used == total; ``idle``:
    nothing used; ``drafts``: pending drafts; ``ceiling``: at its brand ceiling; ``burst``:
    tight, for a coalescable burst; ``zombie``: stuck ``not ready``; anything else: small
    and tight (``greedy``).
    """
    status = "created"
    if kind == "over":  # carved the old way: totals far above what is used
        projects = _usage(rng.randint(1, 2), 6)
        prompts = _usage(rng.choice((100, 150, 200, 250, 300)), 2500)
    elif kind == "tight":
        projects, prompts = _usage(2, 2), _usage(300, 300)
    elif kind == "idle":
        projects, prompts = _usage(0, 3), _usage(0, 1000)
    elif kind == "drafts":
        projects, prompts = _usage(1, 2), _usage(200, 400, drafted=150)
    elif kind == "ceiling":
        projects, prompts = _usage(1, 1), _usage(500, 500)
    elif kind == "burst":
        projects, prompts = _usage(1, 1), _usage(200, 200)
    else:  # zombie, greedy
        projects, prompts = _usage(1, 1), _usage(100, 100)
        status = "not ready" if kind == "zombie" else "created"
    return {
        "id": child_id,
        "title": f"{kind} brand {child_id[-2:]}",
        "parent_id": parent_id,
        "status": status,
        "ai": {"projects": projects, "prompts": prompts},
    }


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
            "projects": _usage(0, pool_projects - carved_projects),
            "prompts": _usage(0, pool_prompts - carved_prompts),
        },
    }
    return [master, *children]


def _ensure(child: str, prompts: int, projects: int = 0, **extra: Any) -> EnsureRequest:
    return build_ensure(child, MASTER_ID, {"projects": projects, "prompts": prompts}, **extra)


def plan_requests(kinds: Mapping[str, str], rng: random.Random) -> dict[str, list[Request]]:
    """Per child, the requests its service will send, in order."""
    plans: dict[str, list[Request]] = {}
    seen: Counter[str] = Counter()
    for child, kind in kinds.items():
        seen[kind] += 1
        if kind == "over" and seen[kind] % 2:
            plans[child] = [_ensure(child, 50)]
        elif kind == "over":
            # A release between two ensures: applied in its place, so the second ensure tops
            # the lowered child back up (order matters, and the checks verify it).
            plans[child] = [_ensure(child, 50), build_release(child), _ensure(child, 150, 1)]
        elif kind == "tight":
            plans[child] = [_ensure(child, rng.choice((50, 100, 250)), rng.choice((0, 1)))]
        elif kind == "drafts":
            # The first counts its drafts (a top-up), the second does not (the hot path).
            plans[child] = [_ensure(child, 100, include_drafted=seen[kind] == 1)]
        elif kind == "zombie":
            plans[child] = [_ensure(child, 50)]
        elif kind == "ceiling":
            plans[child] = [_ensure(child, 300, ceiling={"projects": 5, "prompts": 600})]
        elif kind == "burst":
            plans[child] = [_ensure(child, 50) for _ in range(_BURST_SIZE)]
        elif kind == "greedy":
            plans[child] = [_ensure(child, POOL_PROMPTS * 2)]
    return plans


# -- producing ----------------------------------------------------------------------------------


def _send_interleaved(
    producer: AllocationProducer,
    plans: Mapping[str, Sequence[Request]],
    burst_children: frozenset[str],
) -> list[Request]:
    """One service instance: send its children's requests, interleaved, each child in order."""
    queues = {child: list(requests) for child, requests in plans.items()}
    sent: list[Request] = []
    while any(queues.values()):
        for child, pending in queues.items():
            if not pending:
                continue
            # A burst goes as one SendMessageBatch: it lands together and can coalesce.
            chunk = list(pending) if child in burst_children else [pending[0]]
            producer.enqueue_many(chunk)
            sent.extend(chunk)
            del pending[: len(chunk)]
    return sent


def produce(
    stack: LocalStack, plans: Mapping[str, Sequence[Request]], kinds: Mapping[str, str], count: int
) -> list[Request]:
    """Enqueue every plan from ``count`` producer threads; return what was sent.

    Each child belongs to exactly one producer, so its enqueue order is that producer's.
    """
    children = list(plans)
    bursts = frozenset(c for c in children if kinds[c] == "burst")
    # Clients are built here, not in the threads: boto3's default session is not thread-safe.
    producers = [
        AllocationProducer(stack.resources.queue_url, local_client("sqs", stack.moto.endpoint_url))
        for _ in range(count)
    ]
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


@dataclass(frozen=True)
class MeteredWrites:
    """The services' writes after their ensures, as the metered gateway answered them."""

    accepted: int
    refused: tuple[str, ...]

    def result(self) -> InvariantResult:
        """PASS when the gateway accepted every write an applied ensure prepared for."""
        name = "writes after ensure accepted"
        if self.refused:
            detail = f"{len(self.refused)} refused (405 quota): {', '.join(self.refused)}"
            return InvariantResult(name, False, detail, self.refused)
        return InvariantResult(name, True, f"{self.accepted} metered writes accepted")


def meter_writes(
    stack: LocalStack, plans: Mapping[str, Sequence[Request]], outcomes: Sequence[AllocationOutcome]
) -> MeteredWrites:
    """Each child's service now makes the write its last applied ensure prepared for.

    The write consumes that ensure's ``need`` on the metered gateway (the simulator's
    ``/__usage``, which refuses with the disguised 405 past the total). Only the last ensure
    is written: an ensure guarantees headroom over the usage it saw, it reserves nothing, so
    two ensures answered before either write are not both covered (a real service writes
    right after its own ensure, and the next ensure then sees that usage).
    """
    from serenity_tools.standins.simulator import SimulatorControlError

    applied = {
        o.request_id for o in outcomes if o.kind == "ensure" and o.status in _APPLIED_STATUSES
    }
    current = workspaces_by_id(stack.simulator.dump()["workspaces"])
    accepted, refused = 0, []
    for child, plan in plans.items():
        ensures = [r for r in plan if isinstance(r, EnsureRequest) and r.request_id in applied]
        if not ensures:
            continue
        need = ensures[-1].need
        ai = current[child]["ai"]
        body = {
            "id": child,
            "projects": {"used": ai["projects"]["used"] + need.projects},
            "prompts": {"used": ai["prompts"]["used"] + need.prompts},
        }
        try:
            stack.simulator.usage(body)
            accepted += 1
        except SimulatorControlError:
            refused.append(child)
    return MeteredWrites(accepted, tuple(refused))


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
    stack: LocalStack, payload: Mapping[str, Any], log_path: Path
) -> list[dict[str, Any]]:
    """Invoke the Sweep handler in this process until the run is done; return each result."""
    from serenity_allocator.handlers.sweep import lambda_handler

    results: list[dict[str, Any]] = []
    event = dict(payload)
    with stack.activated(), handler_output_to(log_path):
        for _ in range(_MAX_SWEEP_INVOCATIONS):
            result = lambda_handler(event, LocalLambdaContext(SWEEP_FUNCTION, SWEEP_TIMEOUT_S))
            results.append(result)
            if result["done"] or result["aborted"]:
                break
            event["run_id"] = result["run_id"]
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


# -- reporting ----------------------------------------------------------------------------------


def _fmt_change(before: int, after: int) -> str:
    return f"{before}" if before == after else f"{before} -> {after}"


def pool_table(
    before: Mapping[str, Mapping[str, Any]],
    after: Mapping[str, Mapping[str, Any]],
    kinds: Mapping[str, str],
) -> str:
    """The pool row and every child whose totals changed."""

    def dim(workspace: Mapping[str, Any], name: str, key: str) -> int:
        return int(workspace["ai"][name][key])

    rows: list[list[object]] = []
    changed = 0
    for workspace_id, old in before.items():
        new = after[workspace_id]
        moved = any(dim(old, d, "total") != dim(new, d, "total") for d in ("projects", "prompts"))
        is_master = workspace_id == MASTER_ID
        if not moved and not is_master:
            continue
        changed += 0 if is_master else 1
        rows.append(
            [
                workspace_id,
                "org pool" if is_master else kinds.get(workspace_id, "?"),
                new.get("status"),
                _fmt_change(dim(old, "projects", "used"), dim(new, "projects", "used")),
                _fmt_change(dim(old, "projects", "total"), dim(new, "projects", "total")),
                _fmt_change(dim(old, "prompts", "used"), dim(new, "prompts", "used")),
                dim(new, "prompts", "drafted"),
                _fmt_change(dim(old, "prompts", "total"), dim(new, "prompts", "total")),
            ]
        )
    unchanged = len(before) - 1 - changed
    return format_table(
        [
            "workspace",
            "kind",
            "status",
            "proj used",
            "proj total",
            "prompts used",
            "drafted",
            "prompts total",
        ],
        rows,
        title=f"Org pool and children, before -> after ({changed} changed, "
        f"{unchanged} unchanged not shown)",
    )


def outcomes_table(outcomes: Sequence[AllocationOutcome]) -> str:
    """Outcomes counted by kind, source, status and error code."""
    counts = Counter(
        (o.kind, o.source or "service", o.status, o.error_code or "") for o in outcomes
    )
    rows = [[*key, count] for key, count in sorted(counts.items())]
    return format_table(
        ["kind", "source", "status", "error code", "count"],
        rows,
        title=f"Outcome events captured from the bus ({len(outcomes)})",
    )


def calls_table(calls: Sequence[Mapping[str, Any]]) -> str:
    """Semrush calls by operation and status."""
    counts = Counter((str(c.get("op")), int(c.get("status", 0))) for c in calls)
    rows = [[op, status, count] for (op, status), count in sorted(counts.items())]
    return format_table(
        ["operation", "status", "calls"], rows, title=f"Semrush calls made ({len(calls)})"
    )


def metrics_table(paths: Sequence[Path]) -> str:
    """Metric counts parsed from the EMF lines of the consumers and the sweep."""
    rows: list[list[object]] = []
    for key, total in sorted(count_metrics_in_files(paths).items()):
        dimension = f"{key.dimension}={key.value}" if key.dimension else ""
        summed = total.total if total.unit == "Count" else None
        mean = None if total.unit == "Count" else round(total.mean, 1)
        rows.append([key.name, dimension, total.unit, total.samples, summed, mean])
    return format_table(
        ["metric", "dimension", "unit", "samples", "sum", "mean"],
        rows,
        title="Metrics counted from the EMF output (service, Environment=local)",
    )


def dlq_table(letters: Sequence[DeadLetter]) -> str:
    """What ended in the dead-letter queue, and why."""
    rows = [
        [
            letter.group_id,
            letter.request_id or "(unparseable)",
            letter.reason or f"redriven after {letter.receive_count} receives",
        ]
        for letter in letters
    ]
    return format_table(
        ["group", "request", "why"], rows, title=f"Dead-letter queue ({len(letters)})"
    )


def sweep_table(dry: Sequence[Mapping[str, Any]], real: Sequence[Mapping[str, Any]]) -> str:
    """The two sweep runs' final counts."""
    rows: list[list[object]] = []
    for label, results in (("dry run", dry), ("real", real)):
        if not results:
            continue
        last = results[-1]
        counts = last["counts"]
        rows.append(
            [
                label,
                len(results),
                last["processed"],
                counts["would_release"],
                counts["enqueued"],
                counts["nothing_to_release"],
                counts["skipped_not_created"],
                counts["expected_errors"] + counts["unexpected_errors"],
            ]
        )
    return format_table(
        [
            "sweep",
            "invocations",
            "targets",
            "would release",
            "enqueued",
            "nothing",
            "skipped",
            "errors",
        ],
        rows,
        title="Rightsizing sweep",
    )


def invariants_table(results: Sequence[InvariantResult]) -> str:
    """PASS/FAIL per check."""
    rows = [[r.name, "PASS" if r.passed else "FAIL", r.detail] for r in results]
    return format_table(["check", "result", "detail"], rows, title="Invariant checks")


def check_dead_letters(
    letters: Sequence[DeadLetter], expected_request_ids: set[str], expected_invalid: int
) -> InvariantResult:
    """The DLQ holds exactly the expected requests and the malformed messages, with reasons."""
    got_ids = {letter.request_id for letter in letters if letter.reason is None}
    invalid = [letter for letter in letters if letter.reason is not None]
    violations = []
    if got_ids != expected_request_ids:
        violations.append(
            f"redriven {sorted(map(str, got_ids))}, expected {sorted(expected_request_ids)}"
        )
    if len(invalid) != expected_invalid:
        violations.append(f"{len(invalid)} invalid messages, expected {expected_invalid}")
    detail = (
        f"{len(got_ids)} redriven (zombie), {len(invalid)} invalid with its reason, nothing else"
    )
    if violations:
        return InvariantResult("DLQ contents", False, "; ".join(violations), tuple(violations))
    return InvariantResult("DLQ contents", True, detail)


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


def run_demo(config: DemoConfig, out: TextIO | None = None) -> int:
    """Run the demo and print its report to ``out``; return 0 when every check passes."""
    stream = out or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=stream, flush=True)

    rng = random.Random(config.seed)
    clock = _Clock()
    say("serenity-allocator demo: starting the local stack (moto, simulator, queues) ...")
    with LocalStack(
        latency_ms=config.latency_ms,
        not_ready_ms=config.not_ready_ms,
        visibility_timeout_s=config.visibility_timeout_s,
        max_receive_count=config.max_receive_count,
        work_dir=config.work_dir,
        fifo_safe_broker=config.fifo_safe_broker,
    ) as stack:
        work_dir = stack.work_dir
        kinds = plan_children(config, rng)
        stack.simulator.seed(seed_workspaces(kinds, rng))
        stack.simulator.faults(stuck=[c for c, k in kinds.items() if k == "zombie"])
        before = workspaces_by_id(stack.simulator.dump()["workspaces"])
        clock.lap("stack up + seed")

        say(f"starting {config.consumers} consumer processes (Lambda containers) ...")
        pool = stack.start_consumers(config.consumers)
        clock.lap("consumers ready")

        plans = plan_requests(kinds, rng)
        say(
            f"{config.producers} producers enqueue {sum(map(len, plans.values()))} requests "
            f"for {len(plans)} children (+1 malformed message) ..."
        )
        send_malformed(stack)
        requests = produce(stack, plans, kinds, config.producers)
        clock.lap("enqueue")
        drained = pool.wait_drained(stack.queue_depth, timeout_s=config.drain_timeout_s)
        clock.lap("drain")
        writes = meter_writes(stack, plans, stack.outcomes.outcomes())
        clock.lap("services write (metered)")

        say("sweep: dry run, then a real run ...")
        sweep_log = work_dir / "sweep.stdout.log"
        payload = {"parent_workspace_ids": [MASTER_ID], "rate_limit_ms": 0, "batch_size": 25}
        dry = run_sweep(stack, {**payload, "dry_run": True}, sweep_log)
        real = run_sweep(stack, {**payload, "dry_run": False}, sweep_log)
        requests += sweep_releases(real)
        clock.lap("sweep (dry + real)")
        drained = pool.wait_drained(stack.queue_depth, timeout_s=config.drain_timeout_s) and drained
        clock.lap("drain sweep releases")
        pool.stop()

        dump = stack.simulator.dump()
        after = workspaces_by_id(dump["workspaces"])
        calls: list[dict[str, Any]] = dump["calls"]
        outcomes = stack.outcomes.outcomes()
        letters = stack.read_dead_letters()
        events = read_trace_events(pool.trace_paths)
        traces = summarize_traces(events)
        max_receive = stack.resources.max_receive_count

        zombie_ids = {r.request_id for r in requests if kinds.get(r.workspace_id) == "zombie"}
        results = [
            check_conservation(MASTER_ID, before, after),
            check_bounds(after, requests, outcomes, parent_id=MASTER_ID),
            check_terminal_outcomes(
                requests, outcomes, {letter.request_id or "" for letter in letters}
            ),
            check_order(requests, outcomes, calls, before),
            check_headroom(requests, outcomes, before),
            check_dead_letters(letters, zombie_ids, expected_invalid=1),
            writes.result(),
            check_group_exclusivity(events, stack.visibility_timeout_s),
            check_fifo_delivery(events, requests, max_receive),
        ]
        if not drained:
            results.append(
                InvariantResult("queue drained", False, "the queue did not drain in time")
            )
        clock.lap("report")

        say()
        say(pool_table(before, after, kinds))
        say()
        say(outcomes_table(outcomes))
        say()
        say(sweep_table(dry, real))
        say()
        say(calls_table(calls))
        say()
        say(metrics_table([*pool.stdout_paths, sweep_log]))
        say()
        say(dlq_table(letters))
        say()
        say(
            format_table(
                ["consumer", "batches", "messages", "deleted"],
                [
                    [slot, stats.batches, stats.received, stats.deleted]
                    for slot, stats in sorted(traces.per_consumer.items())
                ],
                title=f"Consumers ({traces.batches} batches, {traces.item_failures} batch item "
                f"failures, {traces.crashes} crashes, {pool.restarts} restarts)",
            )
        )
        say()
        say(
            format_table(
                ["phase", "seconds"],
                [[phase, round(seconds, 1)] for phase, seconds in clock.phases],
                title=f"Timings (total {clock.total:.1f} s; traces and logs in {work_dir})",
            )
        )
        say()
        say(invariants_table(results))
        failed = [r for r in results if not r.passed]
        say()
        if failed:
            broker = [r for r in failed if r.name.startswith("broker")]
            say(
                f"FAIL: {len(failed)} check(s) failed"
                + (
                    " (the BROKER broke FIFO order: an order violation above is moto's, not ours)"
                    if broker
                    else ""
                )
            )
            return 1
        say(f"PASS: every check holds ({clock.total:.1f} s)")
        return 0


# -- CLI ----------------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator demo`` options."""
    defaults = DemoConfig()
    parser.add_argument("--children", type=int, default=defaults.children)
    parser.add_argument("--consumers", type=int, default=defaults.consumers)
    parser.add_argument("--producers", type=int, default=defaults.producers)
    parser.add_argument("--latency-ms", type=float, default=defaults.latency_ms)
    parser.add_argument("--not-ready-ms", type=float, default=defaults.not_ready_ms)
    parser.add_argument("--visibility-timeout-s", type=int, default=defaults.visibility_timeout_s)
    parser.add_argument("--max-receive-count", type=int, default=defaults.max_receive_count)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--work-dir", type=Path, default=None, help="traces and logs")
    parser.add_argument(
        "--stock-moto",
        action="store_true",
        help="run moto without the FIFO redelivery fix (to see the broker checks catch it)",
    )


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
            work_dir=args.work_dir,
            fifo_safe_broker=not args.stock_moto,
        )
    )
