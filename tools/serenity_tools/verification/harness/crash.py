"""Scenario ``crash``: consumers SIGKILLed at random points and restarted; every invariant holds.

Consumers die before the handler, during it, after it before the delete, and in the middle of
outcome publishing (:func:`.handlers.crash_while_publishing_handler`). Redelivery converges:
a request replayed because its batch's consumer died is an explained replay (at-least-once,
reported with its cause); any other duplicate is a violation. A request whose every receive
died runs out of receives and rightly ends in the DLQ, as one truthful dead letter
(:func:`.crash_dead_letters.check_crash_dead_letters`). The real-sized dev-like and unmetered
customer parents run beside the synthetic pools and end as expected (or as such a dead letter).

The scenario is ABOUT redelivery after a crash, so it sets a short visibility timeout
(:data:`CRASH_VISIBILITY_TIMEOUT_S`): a dead container's batch comes back when it passes. On a
busy machine the function timeout (one second less) may kill a slow batch too; that is traced
(``function_timeout``) and explained the same way.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from serenity_tools.standins.consumer import CRASH_POINTS, CrashPlan
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.checks import explained_lines
from serenity_tools.verification.crash_dead_letters import NAME as DLQ
from serenity_tools.verification.crash_dead_letters import check_crash_dead_letters
from serenity_tools.verification.harness.analysis import (
    invariant_checks,
    queue_drained_check,
    redelivered,
    run_record,
)
from serenity_tools.verification.harness.config import FEATURES_ON, HarnessConfig
from serenity_tools.verification.harness.drain import fifo_run
from serenity_tools.verification.harness.handlers import (
    PUBLISH_CRASH_HANDLER,
    PUBLISH_CRASH_PROBABILITY_ENV,
    PUBLISH_CRASH_SEED_ENV,
)
from serenity_tools.verification.harness.results import ScenarioResult, finished, run_numbers
from serenity_tools.verification.harness.workload import plan_workload
from serenity_tools.verification.invariants import InvariantResult
from serenity_tools.verification.tiered import (
    check_real_sized,
    real_sized_beside,
    real_sized_requests,
)

CRASH_VISIBILITY_TIMEOUT_S = 15
"""A killed container's batch comes back after this (the function timeout is 1 s less).

Short, so redelivery after a crash is quick; not shorter, because with a short function the
worker's own time budgeting fails records ``outOfTime`` on a busy machine, and those retries
on top of the injected crashes took messages to their fifth receive and the DLQ (measured at
5 s and 10 s under two CPU burners)."""
CRASH_SEMRUSH_TIMEOUT_S = 2.0
"""The simulator answers in milliseconds; a short per-call timeout keeps the worker's per-call
time reservation small inside the shorter function."""
_PUBLISH_CRASH = "during_publish"


def _not_dead_lettered(cases: list[Any], letters: Sequence[DeadLetter]) -> list[Any]:
    """The cases whose request is not a dead letter (the dead-letter check judges those)."""
    dead = {letter.request_id for letter in letters}
    return [case for case in cases if case[0].request_id not in dead]


def _explained(checks: Sequence[InvariantResult]) -> dict[str, int]:
    """The replays the checks explained, and apart from them the DLQ check's lost answers."""
    lost = explained_lines(c for c in checks if c.name == DLQ)
    return {
        "identical replays explained": len(explained_lines(checks)) - len(lost),
        "needsReauth after a lost exchange answer": len(lost),
    }


def run_crash(config: HarnessConfig) -> ScenarioResult:
    """Scenario 3: consumers SIGKILLed at random points, restarted; every invariant holds."""
    started = time.monotonic()
    workload = plan_workload(config.children, config.requests, random.Random(config.seed))
    crash = CrashPlan("random", config.crash_probability, seed=config.seed, max_delay_s=0.3)
    env = {
        **FEATURES_ON,
        PUBLISH_CRASH_PROBABILITY_ENV: repr(config.crash_probability / 2),
        PUBLISH_CRASH_SEED_ENV: str(config.seed),
        "SEMRUSH_TIMEOUT_S": repr(CRASH_SEMRUSH_TIMEOUT_S),
        "AWS_CALL_BUDGET_S": repr(CRASH_SEMRUSH_TIMEOUT_S),
    }
    real_sized = real_sized_requests()
    run, requests, writes = fifo_run(
        config,
        "crash",
        workload,
        crash=crash,
        handler=PUBLISH_CRASH_HANDLER,
        env=env,
        visibility_timeout_s=CRASH_VISIBILITY_TIMEOUT_S,
        beside=real_sized_beside(real_sized),
    )
    checks = [
        *invariant_checks(run_record(workload.org, requests, run)),
        writes.result,
        queue_drained_check(run),
        # A request may run out of receives to crashes alone, or (IMS) lose its exchange's
        # answer with a killed consumer; it must still end as one truthful dead letter
        # (record and outcome). Anything else in the DLQ is a violation.
        check_crash_dead_letters(
            run.letters,
            run.ledger,
            run.outcomes,
            run.events,
            owners=run.owners,
            ims_calls=run.ims_calls,
        ),
        check_real_sized(_not_dead_lettered(real_sized, run.letters), run.outcomes),
    ]
    traced = Counter(str(e.get("at")) for e in run.events if e.get("ev") == "crash")
    counts = Counter(o.request_id for o in run.outcomes)
    numbers: dict[str, Any] = {
        **run_numbers(run, len(workload.requests)),
        "consumers killed (SIGKILL)": run.killed,
        **{f"crashes {point}": traced[point] for point in (*CRASH_POINTS, "function_timeout")},
        f"crashes {_PUBLISH_CRASH}": max(0, run.killed - sum(traced.values())),
        "consumer restarts": run.pool.restarts,
        "outcome replays (at-least-once)": sum(n - 1 for n in counts.values() if n > 1),
        "requests replayed": sum(1 for n in counts.values() if n > 1),
        **_explained(checks),
        "messages redelivered": redelivered(run.events, {r.request_id for r in requests}),
    }
    return finished("crash", config, started, checks, numbers, run)
