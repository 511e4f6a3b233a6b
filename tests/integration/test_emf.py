"""The worker's printed metrics, parsed as CloudWatch Embedded Metric Format.

A mixed batch (hot path, top-up after a not-ready retry, brand limit, release, invalid message,
coalesced ensures, a busy child, an exhausted pool) plus a kill-switch-off batch runs through
the real handler; every stdout line carrying ``_aws`` must be valid EMF, match the metric
catalog in code, and never use an id as a dimension value.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_lambda_powertools.metrics.provider import cold_start

from serenity_allocator.adapters.observability import METRIC_CATALOG, NAMESPACE, SERVICE
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.fakes import POOL_EXHAUSTED_BODY
from tests.integration.allocator_harness import (
    ENVIRONMENT,
    FUNCTION_NAME,
    Invocation,
    allocator_harness,
    emf_blobs,
    workspace,
)

# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDatum.html
CLOUDWATCH_UNITS = frozenset(
    {
        "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes",
        "Gigabytes", "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits",
        "Percent", "Count", "Bytes/Second", "Kilobytes/Second", "Megabytes/Second",
        "Gigabytes/Second", "Terabytes/Second", "Bits/Second", "Kilobits/Second",
        "Megabits/Second", "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
    }
)  # fmt: skip
COLD_START = "ColdStart"
"""Powertools' own metric (``capture_cold_start_metric``): the one name outside the catalog."""

MASTER = "ws-emf-master"
DRAINED_MASTER = "ws-emf-drained-master"
"""A pool read with room that other children drain before its child's transfers land."""
HOT, TOPPED, LIMITED, RELEASED, COALESCED, BUSY, EXHAUSTED, DISABLED = (
    f"ws-emf-{name}"
    for name in ("hot", "topped", "limited", "released", "coalesced", "busy", "exhausted", "off")
)


def _seed(sim: SimulatorServer) -> None:
    def child(workspace_id: str, used: int, total: int, parent: str = MASTER) -> dict[str, Any]:
        return workspace(workspace_id, parent_id=parent, projects=(1, 1), prompts=(used, total))

    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            workspace(DRAINED_MASTER, projects=(0, 10), prompts=(0, 1_000)),
            child(HOT, 100, 500),
            child(TOPPED, 150, 200),
            child(LIMITED, 150, 200),
            child(RELEASED, 100, 400),
            child(COALESCED, 50, 100),
            child(BUSY, 150, 200),
            child(EXHAUSTED, 150, 200, DRAINED_MASTER),
            child(DISABLED, 150, 200),
        ]
    )
    # EXHAUSTED's sized top-up and its exact fallback both meet the pool-exhausted 422.
    drained = {"status": 422, "count": 2, "op": "transfer", "workspace_id": EXHAUSTED}
    sim.faults(
        not_ready_next={TOPPED: 1},
        stuck=[BUSY],
        fail_next=[{**drained, "body": POOL_EXHAUSTED_BODY}],
    )


def _run_batches(
    local_resources: LocalResources, sim: SimulatorServer
) -> tuple[list[Invocation], set[str]]:
    """The mixed batch with the switch on, then one ensure with it off; (invocations, ids)."""
    need = {"projects": 0, "prompts": 230}
    request_ids: set[str] = set()
    invocations: list[Invocation] = []
    with allocator_harness(local_resources, sim) as worker:
        send = worker.producer
        request_ids |= {
            send.enqueue_ensure(HOT, MASTER, {"projects": 0, "prompts": 10}),
            send.enqueue_ensure(TOPPED, MASTER, need),
            send.enqueue_ensure(LIMITED, MASTER, need, ceiling={"projects": 1, "prompts": 300}),
            send.enqueue_release(RELEASED),
            send.enqueue_ensure(COALESCED, MASTER, {"projects": 0, "prompts": 100}),
            send.enqueue_ensure(COALESCED, MASTER, {"projects": 0, "prompts": 150}),
            send.enqueue_ensure(BUSY, MASTER, need),
            send.enqueue_ensure(EXHAUSTED, DRAINED_MASTER, need),
        }
        worker.send_raw("{not json", group_id=HOT, dedup_id="emf-invalid")
        invocations.append(worker.invoke())
    with allocator_harness(
        local_resources, sim, {"SERENITY_DYNAMIC_ALLOCATION": "false"}
    ) as worker:
        request_ids.add(worker.producer.enqueue_ensure(DISABLED, MASTER, need))
        invocations.append(worker.invoke())
    return invocations, request_ids


def _check_envelope(blob: dict[str, Any]) -> None:
    aws = blob["_aws"]
    assert isinstance(aws["Timestamp"], int) and aws["Timestamp"] > 0
    directives = aws["CloudWatchMetrics"]
    assert isinstance(directives, list) and directives
    for directive in directives:
        assert directive["Namespace"] == NAMESPACE
        dimension_sets = directive["Dimensions"]
        assert isinstance(dimension_sets, list)
        for dimension_set in dimension_sets:
            assert isinstance(dimension_set, list) and 0 < len(dimension_set) <= 30
            for name in dimension_set:
                # A dimension named in the directive is a string member of the root object.
                assert isinstance(name, str) and isinstance(blob[name], str), name
        assert directive["Metrics"], "a directive lists at least one metric"
        for metric in directive["Metrics"]:
            assert set(metric) == {"Name", "Unit"}
            assert metric["Unit"] in CLOUDWATCH_UNITS
            values = blob[metric["Name"]]
            values = values if isinstance(values, list) else [values]
            assert values and all(isinstance(v, int | float) for v in values)


def _check_catalog(blob: dict[str, Any]) -> set[str]:
    """Assert the blob's metrics follow the catalog; return their names."""
    names: set[str] = set()
    for directive in blob["_aws"]["CloudWatchMetrics"]:
        dimension_names = {name for group in directive["Dimensions"] for name in group}
        for metric in directive["Metrics"]:
            name = metric["Name"]
            names.add(name)
            if name == COLD_START:
                assert metric["Unit"] == "Count"
                assert dimension_names == {"function_name", "service"}
                assert blob["function_name"] == FUNCTION_NAME
                continue
            spec = METRIC_CATALOG[name]
            assert metric["Unit"] == spec.unit, name
            own = {spec.dimension} if spec.dimension else set()
            assert dimension_names == {"service", "Environment"} | own, name
            assert blob["service"] == SERVICE
            assert blob["Environment"] == ENVIRONMENT
            if spec.dimension:
                assert blob[spec.dimension] in spec.values, name
    return names


def test_emf_output_of_a_mixed_batch_is_valid_catalog_emf_without_ids(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a fresh container (so Powertools' ColdStart metric is printed too) and a seeded org
    monkeypatch.setattr(cold_start, "is_cold_start", True)
    _seed(sim)
    capsys.readouterr()

    # When a mixed batch and a kill-switch-off batch run through the handler
    invocations, request_ids = _run_batches(local_resources, sim)
    blobs = emf_blobs(capsys.readouterr().out)

    # Then every EMF line is well formed and follows the catalog
    assert blobs
    emitted: set[str] = set()
    for blob in blobs:
        _check_envelope(blob)
        emitted |= _check_catalog(blob)
    assert emitted >= {
        COLD_START,
        "HeadroomCheck",
        "TopUpLatencyMs",
        "PoolFreeRatio",
        "AllocationRejection",
        "NotReadyRetry",
        "ReleaseOutcome",
        "InvalidMessage",
        "CoalescedEnsures",
        "QueueLagMs",
        "DisabledNoop",
        "TightPoolFallback",
    }
    rejection_reasons = {
        blob["Reason"] for blob in blobs if "AllocationRejection" in blob and "Reason" in blob
    }
    assert rejection_reasons == {"brandAiLimit", "workspaceBusy", "orgPoolExhausted"}

    # And no dimension value is an id used in the test
    ids = request_ids | {MASTER, DRAINED_MASTER, HOT, TOPPED, LIMITED, RELEASED}
    ids |= {COALESCED, BUSY, EXHAUSTED, DISABLED}
    ids |= {message_id for invocation in invocations for message_id in invocation.message_ids}
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            for name in {n for group in directive["Dimensions"] for n in group}:
                assert blob[name] not in ids, (name, blob[name])
