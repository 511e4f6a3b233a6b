"""The Allocator Lambda in memory: outcome publishing, EMF, no token in any output, deadlines."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest

from serenity_allocator.adapters.aws_clients import AWS_CALL_BUDGET_S
from serenity_allocator.adapters.observability import METRIC_CATALOG, NAMESPACE, SERVICE, logger
from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.model import Totals
from tests.fakes import (
    READ_RESOURCES,
    READ_STATUS,
    FakeClock,
    InMemoryGateway,
    RecordingOutcomes,
    sqs_record,
)
from tests.unit.handlers.allocator_rig import (
    BASE_ENV,
    ENVIRONMENT,
    FULL,
    MASTER,
    QUEUE_LAG_MS,
    ensure_record,
    failed_ids,
    family_gateway,
    metric_total,
    new_worker,
    read_emf,
    release_record,
)

# ==== outcome publishing ====================================================================


def test_lambda_handler_outcome_publish_failure_fails_the_messages() -> None:
    # Given a bus that refuses every publish
    worker = new_worker(
        family_gateway(
            ("c1", Totals(projects=1, prompts=500), FULL),
            ("c2", Totals(projects=1, prompts=500), FULL),
        ),
        outcomes=RecordingOutcomes(fail_calls=range(1, 10)),
    )

    # When two completed messages cannot announce their outcome
    response = worker.invoke(ensure_record("m1", "c1", 10), ensure_record("m2", "c2", 10))

    # Then both are failed so SQS redelivers them (an outcome is never silently lost)
    assert failed_ids(response) == ["m1", "m2"]


def _twelve_message_batch() -> tuple[InMemoryGateway, list[dict[str, Any]]]:
    """m1 on c1, m2..m10 on x2..x10, then m11 on c1 and m12 on x2 (both releases)."""
    roomy = Totals(projects=1, prompts=500)
    children = [("c1", roomy, FULL)] + [(f"x{i}", roomy, FULL) for i in range(2, 11)]
    records = [ensure_record("m1", "c1", 10)]
    records += [ensure_record(f"m{i}", f"x{i}", 10) for i in range(2, 11)]
    records += [release_record("m11", "c1"), release_record("m12", "x2")]
    return family_gateway(*children), records


def test_lambda_handler_unpublished_outcomes_fail_only_from_there_on_in_their_group() -> None:
    # Given twelve outcomes (two PutEvents chunks) and a bus refusing the second chunk
    gateway, records = _twelve_message_batch()
    worker = new_worker(gateway, outcomes=RecordingOutcomes(fail_calls=[2]))

    # When the batch completes
    response = worker.invoke(*records)

    # Then only the messages whose outcome was lost fail; earlier messages of the same groups
    # were announced already and must not be applied (and announced) a second time
    assert failed_ids(response) == ["m11", "m12"]


def test_lambda_handler_unpublished_outcome_also_fails_later_messages_of_its_group() -> None:
    # Given the same batch and a bus refusing the first chunk only
    gateway, records = _twelve_message_batch()
    worker = new_worker(gateway, outcomes=RecordingOutcomes(fail_calls=[1]))

    # When the batch completes
    response = worker.invoke(*records)

    # Then m1..m10 fail, and so do m11 and m12: a later message of a group whose earlier one
    # is redelivered must wait for it (FIFO order), even though its own outcome went out
    assert failed_ids(response) == [f"m{i}" for i in range(1, 13)]


# ==== EMF ===================================================================================

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
COLD_START = "ColdStart"
"""Powertools' own metric (capture_cold_start_metric), the one name outside the catalog."""


def test_lambda_handler_emf_matches_the_catalog_and_carries_no_ids(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a batch that exercises most metrics: hot path, coalesced top-up after a not-ready
    # retry, a brand-limit refusal, a release, an invalid message and a busy child
    gateway = family_gateway(
        ("c-hot", Totals(projects=3, prompts=500), FULL),  # two projects to spare: no refill
        ("c-top", FULL, FULL),
        ("c-limit", FULL, FULL),
        ("c-rel", Totals(projects=1, prompts=900), FULL),
        ("c-busy", FULL, FULL),
        pool_total=Totals(projects=50, prompts=2_000),
        pool_used=Totals(projects=0, prompts=1_950),
    )
    gateway.script_not_ready("c-top", 1)
    gateway.script_not_ready("c-busy", 10)
    worker = new_worker(gateway)
    records = [
        ensure_record("m1", "c-hot", 10),
        ensure_record("m2", "c-top", 20),
        ensure_record("m3", "c-top", 20),
        ensure_record("m4", "c-limit", 500, ceiling=Totals(projects=1, prompts=300)),
        release_record("m5", "c-rel"),
        sqs_record("{oops", message_id="m6", group_id="c-bad"),
        ensure_record("m7", "c-busy", 20),
    ]
    ids = {"c-hot", "c-top", "c-limit", "c-rel", "c-busy", "c-bad", MASTER}
    ids |= {r["messageId"] for r in records} | {f"req-{r['messageId']}" for r in records}

    # When the batch runs and the printed EMF is parsed
    worker.invoke(*records)
    blobs, data = read_emf(capsys)

    # Then every metric is in the catalog with its unit and exactly its dimensions
    assert blobs, "no EMF printed"
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == NAMESPACE
    seen = set()
    for datum in data:
        dims = datum.dimensions
        # ... and no dimension value is an id of any kind
        for value in dims.values():
            assert value not in ids, (datum.name, value)
            assert not _UUID.search(value), (datum.name, value)
        if datum.name == COLD_START:
            continue
        spec = METRIC_CATALOG[datum.name]
        expected = {"service", "Environment"} | ({spec.dimension} if spec.dimension else set())
        assert set(dims) == expected, datum
        assert dims["service"] == SERVICE
        assert dims["Environment"] == ENVIRONMENT
        assert datum.unit == spec.unit, datum
        if spec.dimension:
            assert dims[spec.dimension] in spec.values, datum
        seen.add(datum.name)

    # ... and the batch's business events were all there, with the right values
    assert {
        "HeadroomCheck",
        "TopUpLatencyMs",
        "PoolFreeRatio",
        "AllocationRejection",
        "NotReadyRetry",
        "ReleaseOutcome",
        "InvalidMessage",
        "CoalescedEnsures",
        "QueueLagMs",
    } <= seen
    assert metric_total(data, "HeadroomCheck", "hot-path") == 1
    # a top-up is counted when attempted: c-top's combined one and c-busy's refused one
    assert metric_total(data, "HeadroomCheck", "topped-up") == 2
    assert metric_total(data, "AllocationRejection", "brandAiLimit") == 1
    assert metric_total(data, "AllocationRejection", "workspaceBusy") == 1
    assert metric_total(data, "ReleaseOutcome", "released") == 1
    assert metric_total(data, "InvalidMessage") == 1
    assert metric_total(data, "CoalescedEnsures") == 1
    assert metric_total(data, "NotReadyRetry") == 3  # c-top once, c-busy through both retries
    lags = [v for d in data if d.name == "QueueLagMs" for v in d.values]
    assert lags and set(lags) == {QUEUE_LAG_MS}
    ratios = [v for d in data if d.name == "PoolFreeRatio" for v in d.values]
    assert all(0 <= v <= 100 for v in ratios)
    assert metric_total(data, "TopUpLatencyMs", "settle") >= 0
    assert any(d.name == "TopUpLatencyMs" and d.dimensions["Path"] == "fail-fast" for d in data)


def test_lambda_handler_no_token_in_any_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker configured with a loopback token, serving a top-up and a failure
    worker = new_worker(family_gateway(("c1", FULL, FULL), ("c2", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c2", [UpstreamError(500, "boom", "read")])
    # The Powertools handler holds the stdout it found at import: read its lines directly.
    logs = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", logs)

    # When a batch runs
    response = worker.invoke(ensure_record("m1", "c1", 100), ensure_record("m2", "c2", 100))

    # Then the top-up was announced and the failure comes back, both of them logged
    assert failed_ids(response) == ["m2"]
    assert worker.outcomes is not None
    assert [(o.request_id, o.status) for o in worker.outcomes.published] == [
        ("req-m1", "topped-up")
    ]
    logged = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert [(line["message"], line["request_id"]) for line in logged] == [
        ("allocation outcome", "req-m1"),
        ("request will be retried", "req-m2"),
        ("record failed; SQS will redeliver it", "req-m2"),
    ]
    # And the token never appears in what was logged, printed, published or dead-lettered
    captured = capsys.readouterr()
    assert '"PoolFreeRatio"' in captured.out  # the metrics were printed (and read here)
    assert BASE_ENV["SEMRUSH_TOKEN"] not in logs.getvalue() + captured.out + captured.err
    assert all(
        BASE_ENV["SEMRUSH_TOKEN"] not in o.model_dump_json() for o in worker.outcomes.published
    )


def test_lambda_handler_status_reads_only_on_the_settle_path() -> None:
    # Given a top-up and a release / When both run
    worker = new_worker(
        family_gateway(("c1", FULL, FULL), ("c2", Totals(projects=1, prompts=900), FULL))
    )
    worker.invoke(ensure_record("m1", "c1", 100), release_record("m2", "c2"))

    # Then the fail-fast ensure never polled status; the settle release did
    assert worker.gateway.calls_of(READ_STATUS) == ["c2"]


# ==== the invocation's deadline =============================================================

SAFETY_MARGIN_S = 3.0
"""AllocatorSettings' default SAFETY_MARGIN_MS."""


def test_lambda_handler_outcome_that_cannot_be_published_in_time_fails_before_publishing() -> None:
    # Given a child whose one read takes 45 s of a 60 s invocation: the 57 s left before the
    # safety margin then has room for the read but not for a publish call's worst case (two
    # projects and 390 prompts to spare: its ensure is that one read)
    clock = FakeClock()
    gateway = InMemoryGateway(clock=clock, latency_s=45.0)
    gateway.add_master(MASTER, total=Totals(projects=50, prompts=10_000))
    gateway.add_child("c1", MASTER, total=Totals(projects=3, prompts=500), used=FULL)
    worker = new_worker(gateway, clock=clock)
    assert 45.0 + AWS_CALL_BUDGET_S > 60.0 - SAFETY_MARGIN_S

    # When the batch runs
    response = worker.invoke(ensure_record("m1", "c1", 10), remaining_ms=60_000)

    # Then the record fails deliberately, with no publish attempted: SQS brings it back
    # instead of the function timing out after announcing it
    assert failed_ids(response) == ["m1"]
    assert worker.outcomes is not None
    assert (worker.outcomes.publish_calls, worker.outcomes.published) == (0, [])


def test_lambda_handler_publishes_when_the_call_still_fits() -> None:
    # Given the same child with a 30 s read: 30 s + one publish call fits in 57 s
    clock = FakeClock()
    gateway = InMemoryGateway(clock=clock, latency_s=30.0)
    gateway.add_master(MASTER, total=Totals(projects=50, prompts=10_000))
    gateway.add_child("c1", MASTER, total=Totals(projects=3, prompts=500), used=FULL)
    worker = new_worker(gateway, clock=clock)
    assert 30.0 + AWS_CALL_BUDGET_S <= 60.0 - SAFETY_MARGIN_S

    # When the batch runs / Then it completes and its outcome is published
    assert failed_ids(worker.invoke(ensure_record("m1", "c1", 10), remaining_ms=60_000)) == []
    assert worker.outcome("req-m1").status == "hot-path"


def test_lambda_handler_dead_letter_send_that_cannot_fit_fails_the_record() -> None:
    # Given 20 s left: after the margin and the time kept for publishing, a DLQ send (whose
    # worst case is AWS_CALL_BUDGET_S) no longer fits while applying
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    assert 20.0 - SAFETY_MARGIN_S - AWS_CALL_BUDGET_S < AWS_CALL_BUDGET_S

    # When an invalid message arrives
    response = worker.invoke(
        sqs_record("{oops", message_id="m1", group_id="c1"), remaining_ms=20_000
    )

    # Then it is not sent half-way: the record fails and comes back on a fresher invocation
    assert failed_ids(response) == ["m1"]
    assert worker.dead_letters is not None and worker.dead_letters.sent == []


def test_lambda_handler_upstream_work_stops_where_publishing_time_begins() -> None:
    # Given 30 s left: 27 s before the margin would fit a fail-fast transfer (15 s budget), but
    # the last AWS_CALL_BUDGET_S of them are kept for publishing, and 11 s do not
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    assert 30.0 - SAFETY_MARGIN_S >= 15.0 > 30.0 - SAFETY_MARGIN_S - AWS_CALL_BUDGET_S

    # When a top-up is needed
    response = worker.invoke(ensure_record("m1", "c1", 100), remaining_ms=30_000)

    # Then no transfer was sent; the record fails as out of time and comes back
    assert failed_ids(response) == ["m1"]
    assert worker.gateway.transfers == []
