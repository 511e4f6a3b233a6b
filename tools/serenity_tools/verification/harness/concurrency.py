"""Scenario ``concurrency``: every invariant and broker check holds with C containers.

N children, M requests (ensures, coalescable bursts, releases between ensures) over three
pools: a roomy metered one, an unmetered one (ensures complete ``unmetered`` with zero
transfers) and a tight one whose ensures go through the exact-need fallback, park for sibling
reclaim and trip the pool early warning. A broker violation is reported as the BROKER's.
"""

from __future__ import annotations

import random
import time

from serenity_tools.verification.harness.analysis import (
    check_no_lost_updates,
    count_lost_updates,
    drain_checks,
    feature_numbers,
    invariant_checks,
    run_record,
)
from serenity_tools.verification.harness.config import HarnessConfig
from serenity_tools.verification.harness.drain import fifo_run
from serenity_tools.verification.harness.results import ScenarioResult, finished, run_numbers
from serenity_tools.verification.harness.workload import plan_workload


def run_concurrency(config: HarnessConfig) -> ScenarioResult:
    """Scenario 1: every invariant and broker check holds with C concurrent containers."""
    started = time.monotonic()
    workload = plan_workload(config.children, config.requests, random.Random(config.seed))
    run, requests, writes = fifo_run(config, "concurrency", workload, guarded_writes=True)
    lost = count_lost_updates(requests, run.outcomes, run.calls, run.before)
    checks = [
        *invariant_checks(run_record(workload.org, requests, run)),
        check_no_lost_updates(lost),
        writes.result,
        *([writes.guarded] if writes.guarded is not None else []),
        *drain_checks(run),
    ]
    numbers = {
        **run_numbers(run, len(workload.requests)),
        "worker-enqueued releases (reclaim)": len(requests) - len(workload.requests),
        **feature_numbers(run),
    }
    if writes.retried is not None:
        numbers["guarded writes"] = writes.retried.writes
        numbers["guarded writes retried"] = writes.retried.retried
        numbers["retried write wait p95 (s)"] = writes.retried.wait_p95_s
    return finished("concurrency", config, started, checks, numbers, run)
