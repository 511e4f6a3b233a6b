"""Scenario ``concurrency``: every invariant and broker check holds with C containers.

N children, M requests (ensures, coalescable bursts, releases between ensures) over three
pools: a roomy metered one, an unmetered one (ensures complete ``unmetered`` with zero
transfers) and a tight one whose ensures go through the exact-need fallback, park for sibling
reclaim and trip the pool early warning. Beside them, a tiered family (tiered children of a
flat pool, a flat child of a tiered pool, in gold-sized 13 / 800 pools) whose requests must end
as expected with no flat ``prompts`` sent to a tiered workspace, and the real sizes' dev-like
(0/2, 0/1913) and unmetered customer (200 projects) parents (:mod:`..tiered`). A broker
violation is reported as the BROKER's.
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
from serenity_tools.verification.tiered import (
    check_real_sized,
    check_tiered,
    real_sized_family,
    real_sized_requests,
    tiered_family,
    tiered_requests,
)


def run_concurrency(config: HarnessConfig) -> ScenarioResult:
    """Scenario 1: every invariant and broker check holds with C concurrent containers."""
    started = time.monotonic()
    workload = plan_workload(config.children, config.requests, random.Random(config.seed))
    tiered, real_sized = tiered_requests(), real_sized_requests()
    run, requests, writes = fifo_run(
        config,
        "concurrency",
        workload,
        guarded_writes=True,
        beside=(
            [*tiered_family(), *real_sized_family()],
            [request for request, _ in [*tiered, *real_sized]],
        ),
    )
    lost = count_lost_updates(requests, run.outcomes, run.calls, run.before)
    checks = [
        *invariant_checks(run_record(workload.org, requests, run)),
        check_no_lost_updates(lost),
        writes.result,
        *([writes.guarded] if writes.guarded is not None else []),
        *drain_checks(run),
        check_tiered(tiered, run.outcomes, {"violations": run.violations}),
        check_real_sized(real_sized, run.outcomes),
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
