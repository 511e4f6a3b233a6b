"""Scenario ``standard-queue``: the workload through a STANDARD queue; what FIFO prevents.

The queue (and a standard DLQ) is created on the same moto and drained by the same consumer
processes running a worker that trusts the body (:func:`.handlers.trusting_standard_queue_handler`:
the record's MessageGroupId filled from ``workspace_id``). Its violations are counted and
reported, not required to be zero: this is the evidence for the FIFO design.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from typing import Any

from serenity_tools.standins.stack import LocalStack
from serenity_tools.verification.harness.analysis import (
    check_no_lost_updates,
    count_lost_updates,
    drain_checks,
    invariant_checks,
    run_record,
)
from serenity_tools.verification.harness.config import FEATURES_ON, HarnessConfig
from serenity_tools.verification.harness.drain import (
    drain_workload,
    local_stack,
    services_write,
    standard_sender,
)
from serenity_tools.verification.harness.handlers import TRUSTING_HANDLER
from serenity_tools.verification.harness.results import ScenarioResult, detail_tables, run_numbers
from serenity_tools.verification.harness.worker_releases import (
    regroup_by_child,
    with_worker_releases,
)
from serenity_tools.verification.harness.workload import Org, plan_workload


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
    # Static: the standard-queue sender writes raw bodies (no credential records).
    with local_stack(config, "standard-queue", credentials="static") as stack:
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
        writes = services_write(stack, workload, requests, run)
    observed = invariant_checks(run_record(workload.org, requests, run))
    lost = count_lost_updates(requests, run.outcomes, run.calls, run.before)
    observed += [check_no_lost_updates(lost), writes.result]
    drained = drain_checks(run)[0]
    numbers = {
        **run_numbers(run, len(workload.requests)),
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
        detail_tables(run),
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
