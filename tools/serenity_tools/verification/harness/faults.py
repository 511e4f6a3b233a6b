"""Scenario ``faults``: upstream faults and a zombie; terminal outcome or DLQ, bounded attempts.

The simulator injects 5xx, 429, timeouts and not-ready answers at set rates, with a not-ready
window after each transfer and one stuck zombie child; every request ends in a terminal
outcome or the DLQ (the zombie's only), within MAX_RECEIVE_COUNT receives.

The scenario is ABOUT upstream timeouts, so its timings are set here: a short Semrush
per-request timeout (:data:`FAULTS_SEMRUSH_TIMEOUT_S`) and injected timeouts that hold just
longer than that, inside a generous function (visibility timeout
:data:`FAULTS_VISIBILITY_TIMEOUT_S`, never below :data:`FAULTS_MIN_VISIBILITY_TIMEOUT_S`).
After a transfer the child is ``not ready`` for a while, and a release's settle policy then
polls at 1 s intervals; with a short function only one such release fits in a batch, the rest
of the batch runs out of time on every receive and its messages (other children's) exhaust
their receives into the DLQ. That starvation is measured and documented
(docs/reliability.md); this scenario checks the design at timings it is meant for, and a busy
machine must not bring the starvation back.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.checks import check_dead_letters
from serenity_tools.verification.harness.analysis import (
    invariant_checks,
    queue_drained_check,
    redelivered,
    run_record,
)
from serenity_tools.verification.harness.config import FEATURES_ON, HarnessConfig
from serenity_tools.verification.harness.drain import fifo_run
from serenity_tools.verification.harness.results import ScenarioResult, finished, run_numbers
from serenity_tools.verification.harness.workload import plan_workload
from serenity_tools.verification.invariants import InvariantResult, invariant_result
from serenity_tools.verification.lost_answers import explain_lost_answers

FAULTS_VISIBILITY_TIMEOUT_S = 30
"""The faults scenario's visibility timeout (a 29 s function: batches are never starved)."""
FAULTS_SEMRUSH_TIMEOUT_S = 1.5
"""The Semrush per-request timeout the injected timeouts outlast."""
FAULTS_MIN_VISIBILITY_TIMEOUT_S = 6
"""Below this, settle polls starve the rest of a batch (see the module docstring)."""


def fault_settings(config: HarnessConfig, zombie: str, semrush_timeout_s: float) -> dict[str, Any]:
    """The simulator faults of the faults scenario (rates per request, seeded)."""
    return {
        "error_rate": {"5xx": 0.03, "429": 0.03, "timeout": 0.02, "not_ready": 0.03},
        # Longer than the client's per-request timeout: the client gives up first.
        "timeout_hold_ms": round((semrush_timeout_s + 0.2) * 1000),
        "stuck": [zombie],
        "seed": config.seed,
    }


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
    attempts = max((o.receive_count for o in outcomes), default=0)
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


def dead_letter_check(
    letters: Sequence[DeadLetter],
    expected_dead: set[str],
    owners: Mapping[str, str],
    ims_calls: Sequence[Mapping[str, Any]],
) -> InvariantResult:
    """Only the zombie's requests in the DLQ, but for needsReauth a lost IMS answer explains."""
    kept, explained = explain_lost_answers(letters, owners, ims_calls)
    result = check_dead_letters(kept, expected_dead, expected_invalid=0)
    if not explained:
        return result
    return replace(result, explained=tuple(explained))


def _fault_numbers(calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    statuses = Counter(int(c.get("status", 0)) for c in calls)
    return {
        "injected 5xx answers": statuses[500] + statuses[502] + statuses[503],
        "injected 429 answers": statuses[429],
        "timeouts (504 after the hold)": statuses[504],
        "not-ready 422 answers": sum(
            1 for c in calls if c.get("status") == 422 and c.get("op") == "transfer"
        ),
    }


def run_faults(config: HarnessConfig) -> ScenarioResult:
    """Scenario 4: upstream faults and a zombie; terminal outcome or DLQ, bounded attempts."""
    visibility = max(
        config.visibility_timeout_s or FAULTS_VISIBILITY_TIMEOUT_S, FAULTS_MIN_VISIBILITY_TIMEOUT_S
    )
    started = time.monotonic()
    workload = plan_workload(
        config.children, config.requests, random.Random(config.seed), zombie=True
    )
    zombie = workload.org.children_of("zombie")[0]
    # Below the stack's own (a third of the function timeout), never above it.
    semrush_timeout_s = min(FAULTS_SEMRUSH_TIMEOUT_S, round(max(0.5, (visibility - 1) / 3), 2))
    faults = fault_settings(config, zombie, semrush_timeout_s)
    run, requests, writes = fifo_run(
        config,
        "faults",
        workload,
        faults=faults,
        not_ready_ms=50.0,
        visibility_timeout_s=visibility,
        env={
            **FEATURES_ON,
            "SEMRUSH_TIMEOUT_S": repr(semrush_timeout_s),
            "AWS_CALL_BUDGET_S": repr(semrush_timeout_s),
        },
    )
    zombie_ids = {r.request_id for r in requests if r.workspace_id == zombie}
    # A timed-out call may have been applied after the client gave up.
    record = run_record(workload.org, requests, run, strict_transfers=False)
    checks = [
        *invariant_checks(record),
        check_bounded_attempts(run.events, run.outcomes, run.letters, run.max_receive_count),
        writes.result,
        queue_drained_check(run),
        dead_letter_check(
            run.letters,
            zombie_ids,
            run.owners,
            run.ims_calls,
        ),
    ]
    numbers = {
        **run_numbers(run, len(workload.requests)),
        **_fault_numbers(run.calls),
        "zombie requests in the DLQ": len(
            zombie_ids & {letter.request_id for letter in run.letters}
        ),
        "needsReauth after a lost exchange answer": len(
            explain_lost_answers(
                run.letters,
                run.owners,
                run.ims_calls,
            )[1]
        ),
        "highest receive count": max(
            (m.get("receive_count", 0) for e in run.events for m in e.get("msgs", [])), default=0
        ),
        "messages redelivered": redelivered(run.events, {r.request_id for r in requests}),
    }
    return finished("faults", config, started, checks, numbers, run)
