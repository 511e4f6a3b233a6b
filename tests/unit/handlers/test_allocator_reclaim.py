"""The Allocator Lambda in memory: sibling reclaim and the pool's early warning."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.messages import ReleaseRequest
from serenity_allocator.domain.model import Totals
from tests.fakes import InMemoryGateway, RecordingOutcomes, sqs_record
from tests.unit.handlers.allocator_rig import (
    FULL,
    MASTER,
    MAX_RECEIVE_COUNT,
    QUEUE_URL,
    Worker,
    ensure_record,
    failed_ids,
    family_gateway,
    metric_total,
    new_worker,
    read_emf,
)

# ==== sibling reclaim =======================================================================


def _reclaim_family() -> InMemoryGateway:
    # The pool is dry; two idle siblings hold surplus, one holds drafts.
    gateway = family_gateway(
        ("c1", FULL, FULL),
        ("s-big", Totals(projects=1, prompts=1_000), FULL),
        ("s-mid", Totals(projects=1, prompts=600), Totals(projects=1, prompts=200)),
        pool_total=Totals(projects=5, prompts=100),
        pool_used=Totals(projects=5, prompts=100),
    )
    gateway.add_child(
        "s-drafting",
        MASTER,
        total=Totals(projects=1, prompts=3_000),
        drafted=Totals(projects=0, prompts=1),
    )
    return gateway


def _reclaim_worker(gateway: InMemoryGateway) -> Worker:
    return new_worker(
        gateway,
        producer=True,
        SERENITY_SIBLING_RECLAIM="true",
        QUEUE_URL=QUEUE_URL,
        SIBLING_RECLAIM_MAX_PARKS="2",
        SIBLING_RECLAIM_MAX_SIBLINGS="2",
    )


def test_lambda_handler_sibling_reclaim_parks_then_serves_after_releases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a dry pool and idle siblings with surplus
    gateway = _reclaim_family()
    units = gateway.family_units(MASTER)
    worker = _reclaim_worker(gateway)

    # When an ensure arrives that the pool cannot cover even exactly
    first = worker.invoke(ensure_record("m1", "c1", 250))

    # Then releases were enqueued for the two richest siblings, each in its own group, and the
    # ensure was parked (a batch item failure), not rejected
    assert failed_ids(first) == ["m1"]
    assert worker.producer is not None
    releases = worker.producer.many
    assert [(r.workspace_id, r.kind) for r in releases] == [
        ("s-big", "release"),
        ("s-mid", "release"),
    ]
    assert all(isinstance(r, ReleaseRequest) and r.source == "reclaim" for r in releases)
    assert worker.outcomes is not None and worker.outcomes.published == []

    # When the sibling releases are applied by the worker (their own groups)
    applied = worker.invoke(
        *(
            sqs_record(
                r.model_dump_json(), message_id=f"rel-{r.workspace_id}", group_id=r.workspace_id
            )
            for r in releases
        )
    )

    # Then the siblings gave back down to used (never under used or floor)
    assert failed_ids(applied) == []
    assert gateway.totals_of("s-big") == FULL
    assert gateway.totals_of("s-mid") == Totals(projects=1, prompts=200)
    assert gateway.totals_of("s-drafting") == Totals(projects=1, prompts=3_000)

    # When the parked ensure is redelivered
    served = worker.invoke(ensure_record("m1", "c1", 250, receive_count=2))

    # Then it is served and says so (350 + 42: the 1300 released less the 250 it lacks,
    # shared by four children, leave a level of 262, under four blocks: 262² / 1600 = 42 of
    # headroom; no project refill from a pool with none free); units were conserved throughout
    assert failed_ids(served) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_after) == (
        "topped-up-after-reclaim",
        Totals(projects=1, prompts=392),
    )
    assert gateway.family_units(MASTER) == units
    _, data = read_emf(capsys)
    assert metric_total(data, "SiblingReclaim", "enqueued") == 2
    assert metric_total(data, "SiblingReclaim", "parked") == 1
    assert metric_total(data, "SiblingReclaim", "served") == 1
    # ... and the park was a wait, not a rejection: the request was served in the end
    assert metric_total(data, "AllocationRejection", "orgPoolExhausted") == 0


def test_lambda_handler_sibling_reclaim_rejects_after_max_parks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a dry pool whose sibling releases never get applied
    worker = _reclaim_worker(_reclaim_family())

    # When the ensure comes back for a third time (SIBLING_RECLAIM_MAX_PARKS = 2)
    responses = [worker.invoke(ensure_record("m1", "c1", 250, receive_count=n)) for n in (1, 2, 3)]

    # Then it was parked twice and then rejected for pool exhaustion
    assert [failed_ids(r) for r in responses] == [["m1"], ["m1"], []]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "orgPoolExhausted")
    assert worker.producer is not None and len(worker.producer.batches) == 2
    _, data = read_emf(capsys)
    assert metric_total(data, "SiblingReclaim", "exhausted") == 1
    # ... and one rejection, for the receive that ended rejected (not for the two parks)
    assert metric_total(data, "AllocationRejection", "orgPoolExhausted") == 1


def test_lambda_handler_parked_on_final_receive_records_pool_exhausted() -> None:
    # Given reclaim allowed on every receive, up to the last one before the DLQ
    worker = new_worker(
        _reclaim_family(),
        producer=True,
        SERENITY_SIBLING_RECLAIM="true",
        QUEUE_URL=QUEUE_URL,
        SIBLING_RECLAIM_MAX_PARKS=str(MAX_RECEIVE_COUNT),
    )

    # When the ensure is parked on its final receive
    response = worker.invoke(ensure_record("m1", "c1", 250, receive_count=MAX_RECEIVE_COUNT))

    # Then its terminal outcome is the pool exhaustion it was waiting out, and it still fails
    assert failed_ids(response) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "orgPoolExhausted")


def test_lambda_handler_sibling_reclaim_nothing_to_reclaim_rejects_at_once() -> None:
    # Given a dry pool and no sibling with surplus
    worker = _reclaim_worker(
        family_gateway(
            ("c1", FULL, FULL),
            ("s-lean", FULL, FULL),
            pool_total=Totals(projects=5, prompts=100),
            pool_used=Totals(projects=5, prompts=100),
        )
    )

    # When the ensure arrives / Then it is rejected, nothing enqueued
    assert failed_ids(worker.invoke(ensure_record("m1", "c1", 250))) == []
    assert worker.outcome("req-m1").error_code == "orgPoolExhausted"
    assert worker.producer is not None and worker.producer.batches == []


def test_lambda_handler_sibling_reclaim_off_by_default_rejects() -> None:
    # Given the default settings (reclaim off) and a dry pool with rich siblings
    worker = new_worker(_reclaim_family(), producer=True)

    # When the ensure arrives / Then plain rejection, nothing enqueued
    worker.invoke(ensure_record("m1", "c1", 250))
    assert worker.outcome("req-m1").error_code == "orgPoolExhausted"
    assert worker.producer is not None and worker.producer.batches == []


# ==== pool early warning ====================================================================


def test_lambda_handler_pool_low_warning_published_once_per_interval() -> None:
    # Given a pool at 20 % free, a 50 % threshold and a 600 s interval
    gateway = family_gateway(
        *((f"c{i}", FULL, FULL) for i in range(1, 5)),
        pool_total=Totals(projects=50, prompts=2_000),
        pool_used=Totals(projects=0, prompts=1_600),
    )
    worker = new_worker(gateway, POOL_LOW_RATIO="0.5", POOL_LOW_INTERVAL_S="600")
    assert worker.outcomes is not None

    # When two top-ups run in one batch, then one more a minute later
    worker.invoke(ensure_record("m1", "c1", 100), ensure_record("m2", "c2", 100))
    worker.clock.advance(60)
    worker.invoke(ensure_record("m3", "c3", 100))

    # Then one warning was published for the pool, not one per read
    assert len(worker.outcomes.pool_low) == 1
    warning = worker.outcomes.pool_low[0]
    assert warning["parent_workspace_id"] == MASTER
    assert warning["dim"] == "prompts"
    assert warning["free"] == 400
    assert warning["free_ratio"] == pytest.approx(0.2)

    # When the interval has passed and the pool is read again
    worker.clock.advance(600)
    worker.invoke(ensure_record("m4", "c4", 100))

    # Then a second warning, now with a drain estimate and a time to exhaustion
    assert len(worker.outcomes.pool_low) == 2
    later = worker.outcomes.pool_low[1]
    assert later["drain_units_per_hour"] > 0
    assert later["projected_seconds_to_exhaustion"] > 0


def test_lambda_handler_pool_low_publish_failure_never_fails_requests() -> None:
    # Given a bus that refuses pool-low events
    worker = new_worker(
        family_gateway(
            ("c1", FULL, FULL),
            pool_total=Totals(projects=50, prompts=1_000),
            pool_used=Totals(projects=0, prompts=900),
        ),
        outcomes=RecordingOutcomes(fail_pool_low=True),
        POOL_LOW_RATIO="0.5",
    )

    # When a top-up reads the low pool / Then the request still completes
    assert failed_ids(worker.invoke(ensure_record("m1", "c1", 50))) == []
    assert worker.outcome("req-m1").status == "topped-up"
