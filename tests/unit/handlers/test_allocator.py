"""The Allocator Lambda end to end in memory: hot path, top-up, refusals, coalescing, order.

Every test calls the real handler through the rig in ``allocator_rig`` (in-memory gateway,
fake clock, recording fakes). No AWS, no network.
"""

from __future__ import annotations

import pytest

from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.model import Totals
from tests.fakes import LIST_FAMILY, READ_RESOURCES, TRANSFER, pool_exhausted
from tests.unit.handlers.allocator_rig import (
    FULL,
    MASTER,
    MAX_RECEIVE_COUNT,
    ensure_record,
    failed_ids,
    family_gateway,
    metric_total,
    new_worker,
    read_emf,
    release_record,
)

# ==== hot path, top-up, refusals ============================================================


def test_lambda_handler_hot_path_is_exactly_one_gateway_call() -> None:
    # Given a child with room for the write (and two projects to spare: none refilled ahead)
    worker = new_worker(family_gateway(("c1", Totals(projects=3, prompts=500), FULL)))

    # When one ensure arrives
    response = worker.invoke(ensure_record("m1", "c1", 100))

    # Then one read of the child, nothing else; the message completes as hot-path
    assert worker.gateway.calls == [(READ_RESOURCES, "c1")]
    assert response == {"batchItemFailures": []}
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.kind, outcome.receive_count) == ("hot-path", "ensure", 1)
    assert outcome.totals_before == outcome.totals_after == Totals(projects=3, prompts=500)


def test_lambda_handler_top_up_in_one_transfer_with_four_blocks_of_headroom() -> None:
    # Given a child using all it holds
    worker = new_worker(family_gateway(("c1", FULL, FULL)))

    # When it needs 250 more prompts
    response = worker.invoke(ensure_record("m1", "c1", 250))

    # Then one absolute transfer: the 350 needed plus four blocks from a pool with room (more
    # than the 250 it asked again): 750; its one used project refilled ahead to 1 + 4 = 5
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=750))]
    assert worker.gateway.calls == [
        (READ_RESOURCES, "c1"),
        (LIST_FAMILY, MASTER),  # is the parent metered? (cached afterwards)
        (READ_RESOURCES, MASTER),  # advisory pool read
        (TRANSFER, "c1"),
    ]
    assert failed_ids(response) == []
    outcome = worker.outcome("req-m1")
    assert outcome.status == "topped-up"
    assert (outcome.totals_before, outcome.totals_after) == (FULL, Totals(projects=5, prompts=750))
    assert worker.gateway.family_units(MASTER) == Totals(projects=51, prompts=10_100)


def test_lambda_handler_include_drafted_from_the_message_sizes_the_top_up() -> None:
    # Given two children using 40 of 300 prompts with 80 more drafted (and two projects to
    # spare)
    gateway = family_gateway()
    for child in ("c1", "c2"):
        gateway.add_child(
            child,
            MASTER,
            total=Totals(projects=3, prompts=300),
            used=Totals(projects=1, prompts=40),
            drafted=Totals(projects=0, prompts=80),
        )
    worker = new_worker(gateway)

    # When one ensure counts the drafts and the other does not
    worker.invoke(
        ensure_record("m1", "c1", 10, include_drafted=True), ensure_record("m2", "c2", 10)
    )

    # Then only the one that asked is refilled past its drafts (40 + 80 + 10 = 130 leaves 170,
    # under two blocks: 130 + four blocks = 530); the other's 40 + 10 leaves it 250, over the
    # two-block refill mark, so it stays on the hot path with no refill
    assert worker.gateway.transfers == [("c1", Totals(projects=3, prompts=530))]
    assert [worker.outcome(r).status for r in ("req-m1", "req-m2")] == ["topped-up", "hot-path"]


def test_lambda_handler_ceiling_rejects_with_brand_ai_limit_and_completes() -> None:
    # Given a child whose top-up would pass its brand ceiling
    worker = new_worker(family_gateway(("c1", FULL, FULL)))

    # When the ensure arrives
    response = worker.invoke(
        ensure_record("m1", "c1", 400, ceiling=Totals(projects=5, prompts=300))
    )

    # Then no transfer, the message completes with a rejection outcome
    assert worker.gateway.transfers == []
    assert failed_ids(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "brandAiLimit")


def test_lambda_handler_pool_exhausted_rejects_and_completes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a pool with 50 free prompts and a child needing 60 more (block: 100)
    worker = new_worker(
        family_gateway(
            ("c1", FULL, FULL),
            pool_total=Totals(projects=50, prompts=1_000),
            pool_used=Totals(projects=0, prompts=950),
        )
    )

    # When the ensure arrives
    response = worker.invoke(ensure_record("m1", "c1", 60))

    # Then the pool read showing that even the exact 60 cannot fit, no transfer is sent (it
    # would be refused for nothing, ADR 0027): orgPoolExhausted, the child unchanged
    assert worker.gateway.transfers == []
    assert worker.gateway.totals_of("c1") == FULL
    assert failed_ids(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "orgPoolExhausted")
    _, data = read_emf(capsys)
    assert metric_total(data, "TightPoolFallback", "rejected") == 0
    assert metric_total(data, "AllocationRejection", "orgPoolExhausted") == 1
    # ... and the refused top-up still counts as one attempted, so the hot-path ratio shows a
    # dry pool; no call was timed (none was made)
    assert metric_total(data, "HeadroomCheck", "topped-up") == 1
    assert [d for d in data if d.name == "TopUpLatencyMs"] == []


def test_lambda_handler_tight_pool_fallback_saves_exact_need(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a pool with room at its read, drained by another child before the sized top-up
    # lands (its first transfer is refused), with the exact need still free
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_errors(TRANSFER, "c1", [pool_exhausted()])

    # When the child needs 50 more
    response = worker.invoke(ensure_record("m1", "c1", 50))

    # Then the sized top-up (150 -> 200) was refused and the exact one (150) went through
    assert worker.gateway.calls_of(TRANSFER) == ["c1", "c1"]
    assert worker.gateway.transfers == [("c1", Totals(projects=1, prompts=150))]
    assert failed_ids(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_after) == ("topped-up", Totals(projects=1, prompts=150))
    _, data = read_emf(capsys)
    assert metric_total(data, "TightPoolFallback", "saved") == 1
    assert metric_total(data, "AllocationRejection", "orgPoolExhausted") == 0


def test_lambda_handler_tight_pool_rejected_when_fallback_switched_off() -> None:
    # Given the same pool drained between its read and the sized top-up, with the fallback off
    worker = new_worker(family_gateway(("c1", FULL, FULL)), SERENITY_TIGHT_POOL_FALLBACK="false")
    worker.gateway.script_errors(TRANSFER, "c1", [pool_exhausted()])

    # When the child needs 50 more / Then the plain path rejects it after one transfer, the
    # exact need never tried
    worker.invoke(ensure_record("m1", "c1", 50))
    assert worker.gateway.calls_of(TRANSFER) == ["c1"]
    assert worker.gateway.totals_of("c1") == FULL
    assert worker.outcome("req-m1").error_code == "orgPoolExhausted"


def test_lambda_handler_not_ready_then_success_within_handler_retries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a child that answers "not ready" to its next two transfers
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 2)

    # When the ensure arrives
    response = worker.invoke(ensure_record("m1", "c1", 100))

    # Then the third attempt went through after two short fake sleeps (no real wait)
    assert failed_ids(response) == []
    assert worker.outcome("req-m1").status == "topped-up"
    assert worker.gateway.calls_of(TRANSFER) == ["c1", "c1", "c1"]
    assert worker.clock.sleeps == [0.25, 0.5]
    _, data = read_emf(capsys)
    assert metric_total(data, "NotReadyRetry") == 2


def test_lambda_handler_busy_child_fails_the_item_for_redelivery() -> None:
    # Given a child that stays "not ready" through every in-handler retry
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the ensure arrives on its first receive
    response = worker.invoke(ensure_record("m1", "c1", 100))

    # Then it is a batch item failure, with no terminal outcome yet
    assert failed_ids(response) == ["m1"]
    assert worker.outcomes is not None and worker.outcomes.published == []


def test_lambda_handler_busy_on_final_receive_records_outcome_and_still_fails() -> None:
    # Given a busy child and a message on its last receive before the DLQ
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the ensure arrives with ApproximateReceiveCount == MAX_RECEIVE_COUNT
    response = worker.invoke(ensure_record("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))

    # Then its terminal outcome is published AND it still fails, so SQS moves it to the DLQ
    assert failed_ids(response) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        "rejected",
        "workspaceBusy",
        MAX_RECEIVE_COUNT,
    )


def test_lambda_handler_final_receive_skipped_behind_its_group_gets_a_terminal_outcome() -> None:
    # Given a busy child whose head message is retried, and a later message of the same group
    # on its own final receive (it will be moved to the DLQ after this one)
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)
    head = ensure_record("m1", "c1", 100, receive_count=2)
    behind = release_record("m2", "c1", receive_count=MAX_RECEIVE_COUNT)

    # When the batch is handled
    response = worker.invoke(head, behind)

    # Then both fail (FIFO), the head gets no outcome yet (it has receives left), and the one
    # skipped behind it on its final receive is told: failed / groupBlocked
    assert failed_ids(response) == ["m1", "m2"]
    assert worker.outcomes.by_request().keys() == {"req-m2"}
    outcome = worker.outcome("req-m2")
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        "failed",
        "groupBlocked",
        MAX_RECEIVE_COUNT,
    )


def test_lambda_handler_terminal_upstream_answer_completes_as_failed() -> None:
    # Given an upstream that refuses the child read with 403 (a retry cannot fix it)
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(403, "no", "read")])

    # When the ensure arrives / Then it completes with a failed outcome
    response = worker.invoke(ensure_record("m1", "c1", 100))
    assert failed_ids(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("failed", "upstream403")


def test_lambda_handler_server_error_fails_the_item() -> None:
    # Given an upstream answering 500 / When the ensure arrives / Then it is retried later
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(500, "boom", "read")])
    assert failed_ids(worker.invoke(ensure_record("m1", "c1", 100))) == ["m1"]


@pytest.mark.parametrize(
    ("error", "code"),
    [(UpstreamError(500, "boom", "read"), "upstream500"), (RuntimeError("bug"), "RuntimeError")],
    ids=["5xx", "unexpected"],
)
def test_lambda_handler_retryable_failure_on_final_receive_records_failed_outcome(
    error: Exception, code: str
) -> None:
    # Given a failure a retry could fix, on the message's last receive
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c1", [error])

    # When the ensure arrives
    response = worker.invoke(ensure_record("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))

    # Then the terminal outcome says failed with the code, and the item fails to the DLQ
    assert failed_ids(response) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("failed", code)


# ==== coalescing and order ==================================================================


def test_lambda_handler_coalesces_consecutive_ensures_into_one_transfer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a child using all it holds and three ensures for it in one batch
    worker = new_worker(family_gateway(("c1", FULL, FULL)))

    # When the batch arrives (needs 100 + 250 + 50)
    response = worker.invoke(
        ensure_record("m1", "c1", 100),
        ensure_record("m2", "c1", 250),
        ensure_record("m3", "c1", 50),
    )

    # Then one child read, one pool read and one transfer sized for the sum (100 + 400 = 500,
    # plus the 400 the run asked, as much as four blocks: 900; the project refilled ahead to
    # 1 + 4 = 5)
    assert worker.gateway.calls_of(READ_RESOURCES) == ["c1", MASTER]
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=900))]
    assert failed_ids(response) == []
    # ... and each request gets its own outcome, saying it was served by a run of three
    for message_id in ("m1", "m2", "m3"):
        outcome = worker.outcome(f"req-{message_id}")
        assert (outcome.status, outcome.coalesced) == ("topped-up", 3)
        assert outcome.totals_after == Totals(projects=5, prompts=900)
    _, data = read_emf(capsys)
    assert metric_total(data, "CoalescedEnsures") == 2
    assert metric_total(data, "HeadroomCheck", "topped-up") == 1


def test_lambda_handler_combined_run_refused_by_ceiling_falls_back_per_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given two ensures whose sum passes the ceiling, the first fitting on its own
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    ceiling = Totals(projects=10, prompts=400)

    # When the batch arrives (100 fits: 200 + four blocks = 600, capped to 400, its project
    # refilled to 1 + 4 = 5; 350 on top needs 450 > 400)
    response = worker.invoke(
        ensure_record("m1", "c1", 100, ceiling=ceiling),
        ensure_record("m2", "c1", 350, ceiling=ceiling),
    )

    # Then the members applied one by one, in order: the first topped up, the second refused
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=400))]
    assert failed_ids(response) == []
    first, second = worker.outcome("req-m1"), worker.outcome("req-m2")
    assert (first.status, first.coalesced) == ("topped-up", 1)
    assert (second.status, second.error_code) == ("rejected", "brandAiLimit")
    # ... and the refused combined attempt is not counted as a rejection of its own
    _, data = read_emf(capsys)
    assert metric_total(data, "AllocationRejection", "brandAiLimit") == 1
    assert metric_total(data, "CoalescedEnsures") == 0


def test_lambda_handler_coalesced_run_with_terminal_upstream_answer_fails_each_member() -> None:
    # Given a child the upstream refuses with 403 on every read
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_errors(
        READ_RESOURCES, "c1", [UpstreamError(403, "forbidden", "read") for _ in range(3)]
    )

    # When three ensures for it arrive together
    response = worker.invoke(
        ensure_record("m1", "c1", 100),
        ensure_record("m2", "c1", 100),
        ensure_record("m3", "c1", 100),
    )

    # Then every member completes with its own failed outcome (none is left for redelivery)
    assert failed_ids(response) == []
    assert [worker.outcome(f"req-m{i}").status for i in (1, 2, 3)] == ["failed"] * 3
    assert {worker.outcome(f"req-m{i}").error_code for i in (1, 2, 3)} == {"upstream403"}


def test_lambda_handler_coalesced_run_busy_fails_the_group_and_counts_the_rejection(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a busy child and three ensures for it
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the batch arrives
    response = worker.invoke(
        ensure_record("m1", "c1", 100),
        ensure_record("m2", "c1", 100),
        ensure_record("m3", "c1", 100),
    )

    # Then all three wait for redelivery, and the busy rejection is counted once
    assert failed_ids(response) == ["m1", "m2", "m3"]
    _, data = read_emf(capsys)
    assert metric_total(data, "AllocationRejection", "workspaceBusy") == 1


def test_lambda_handler_applies_a_group_in_order_with_a_release_in_between() -> None:
    # Given a child using all it holds
    worker = new_worker(family_gateway(("c1", FULL, FULL)))

    # When ensure(300), release, ensure(100) arrive in that order
    response = worker.invoke(
        ensure_record("m1", "c1", 300), release_record("m2", "c1"), ensure_record("m3", "c1", 100)
    )

    # Then the effects happen in that order: up to 800 (the 400 needed plus four blocks, more
    # than the 300 it asked), back to 100, up to 600 (200 plus four blocks); each ensure also
    # refills the child's one used project ahead (to 1 + 4 = 5), each release takes it back
    assert worker.gateway.transfers == [
        ("c1", Totals(projects=5, prompts=800)),
        ("c1", Totals(projects=1, prompts=100)),
        ("c1", Totals(projects=5, prompts=600)),
    ]
    assert failed_ids(response) == []
    statuses = [worker.outcome(f"req-m{i}").status for i in (1, 2, 3)]
    assert statuses == ["topped-up", "released", "topped-up"]
    assert worker.outcome("req-m2").totals_after == FULL
    assert worker.gateway.family_units(MASTER) == Totals(projects=51, prompts=10_100)
