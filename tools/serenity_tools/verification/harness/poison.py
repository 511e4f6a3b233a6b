"""Scenario ``poison``: malformed and invalid bodies in the stream; none reaches Semrush.

Each poison message lands in the DLQ with its reason, and valid requests are not delayed
(compared with the same workload run without poison). The real-sized dev-like and unmetered
customer parents run beside the synthetic pools in both runs and end as expected.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.harness.analysis import (
    feature_numbers,
    invariant_checks,
    percentile,
    redelivered,
    request_latencies,
    run_record,
)
from serenity_tools.verification.harness.config import HarnessConfig
from serenity_tools.verification.harness.drain import DrainedRun, Outgoing, fifo_run
from serenity_tools.verification.harness.poison_bodies import (
    PoisonMessage,
    RandomDraws,
    poison_messages,
)
from serenity_tools.verification.harness.results import ScenarioResult, finished, run_numbers
from serenity_tools.verification.harness.workload import Request, plan_workload
from serenity_tools.verification.invariants import InvariantResult, invariant_result
from serenity_tools.verification.tiered import (
    check_real_sized,
    real_sized_beside,
    real_sized_requests,
)


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
    return [_poison_dead_lettered(poison, letters), _poison_kept_away(poison, calls, outcomes)]


def _poison_dead_lettered(
    poison: Sequence[PoisonMessage], letters: Sequence[DeadLetter]
) -> InvariantResult:
    wanted = Counter(p.body for p in poison)
    got = Counter(letter.body for letter in letters if letter.reason)
    violations = [f"not dead-lettered with a reason: {body[:40]!r}" for body in wanted - got]
    violations += [
        f"dead letter without reason: {letter.body[:40]!r}"
        for letter in letters
        if not letter.reason
    ]
    reasons = Counter((letter.reason or "").split(":")[0] for letter in letters)
    return invariant_result(
        "poison dead-lettered with its reason",
        violations,
        f"{len(poison)} poison messages, each in the DLQ with a reason "
        f"({len(reasons)} distinct first fields)",
    )


def _poison_kept_away(
    poison: Sequence[PoisonMessage],
    calls: Sequence[Mapping[str, Any]],
    outcomes: Sequence[AllocationOutcome],
) -> InvariantResult:
    poison_ids = {p.poison_id for p in poison}
    reached = [
        f"{c.get('op')} {c.get('workspace_id')}"
        for c in calls
        if c.get("workspace_id") in poison_ids
    ]
    # A poison body with a readable request id is answered ``invalid`` (its caller hears back);
    # any other outcome on a poison-only id means the worker acted on it.
    reached += [
        f"outcome {o.status} for {o.workspace_id}"
        for o in outcomes
        if o.workspace_id in poison_ids and o.status != "invalid"
    ]
    return invariant_result(
        "poison never reached Semrush",
        reached,
        f"0 of {len(calls)} Semrush calls name a poison-only id",
    )


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
        f"latency p50/p95/max {percentile(poisoned, 0.5):.2f}/{percentile(poisoned, 0.95):.2f}/"
        f"{worst:.2f} s vs {percentile(baseline, 0.5):.2f}/{percentile(baseline, 0.95):.2f}/"
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


def _latencies(run: DrainedRun, valid: set[str]) -> list[float]:
    """Send-to-delete seconds of the workload's valid requests (not the ones beside it)."""
    latencies = request_latencies(run.enqueued_at, run.events)
    return [seconds for request_id, seconds in latencies.items() if request_id in valid]


def run_poison(
    config: HarnessConfig, poison: Sequence[PoisonMessage] | None = None
) -> ScenarioResult:
    """Scenario 5: poison mixed into the stream, against the same workload without poison.

    Args:
        config: Sizes (``poison_count`` poison messages when ``poison`` is not given).
        poison: The poison to mix in (the e2e test's takes every kind in turn); by default it
            is drawn with a seeded :class:`random.Random` (:class:`RandomDraws`).
    """
    started = time.monotonic()
    rng = random.Random(config.seed)
    # No tight pool: its parks would redeliver valid messages and blur the delay comparison.
    workload = plan_workload(config.children, config.requests, rng, tight_pool=False)
    valid_groups = sorted(workload.plans)
    if poison is None:
        poison = poison_messages(RandomDraws(rng), config.poison_count, valid_groups)
    # The real-sized parents beside it, in both runs (the delay comparison stays like for like).
    real_sized = real_sized_requests()
    beside = real_sized_beside(real_sized)
    baseline, _, _ = fifo_run(config, "poison-baseline", workload, beside=beside)
    mixed = _with_poison(workload.units, poison, random.Random(config.seed + 1))
    run, requests, writes = fifo_run(config, "poison", workload, units=mixed, beside=beside)
    valid = {r.request_id for r in requests}
    checks = [
        *invariant_checks(run_record(workload.org, requests, run)),
        *check_poison(poison, run.letters, run.calls, run.outcomes),
        check_poison_delay(
            _latencies(baseline, valid),
            _latencies(run, valid),
            redelivered(baseline.events, valid),
            redelivered(run.events, valid),
            run.visibility_timeout_s,
        ),
        writes.result,
        check_real_sized(real_sized, run.outcomes),
        InvariantResult(
            "queue drained",
            run.drained and baseline.drained,
            f"both runs drained ({baseline.duration_s:.1f} s without poison, "
            f"{run.duration_s:.1f} s with)",
        ),
    ]
    numbers: dict[str, Any] = {
        **run_numbers(run, len(workload.requests) + len(poison)),
        "poison messages": len(poison),
        "poison in a valid child's group": sum(1 for p in poison if p.group_id in workload.plans),
        **{f"poison {kind}": n for kind, n in sorted(Counter(p.kind for p in poison).items())},
        "InvalidMessage metric": feature_numbers(run)["InvalidMessage"],
        "drain time without poison (s)": round(baseline.duration_s, 1),
    }
    return finished("poison", config, started, checks, numbers, run)
