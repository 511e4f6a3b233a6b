"""The Allocator Lambda in memory with its request ledger: replays beside fresh requests."""

from __future__ import annotations

from serenity_allocator.domain.model import Totals
from tests.fakes import RecordingOutcomes
from tests.unit.allocator_rig import (
    FULL,
    Worker,
    ensure_record,
    failed_ids,
    family_gateway,
    new_worker,
)
from tests.unit.ledger_fake import InMemoryRequestLedger


def _ledger_worker(
    outcomes: RecordingOutcomes | None = None,
) -> tuple[Worker, InMemoryRequestLedger]:
    worker = new_worker(family_gateway(("c1", FULL, FULL)), outcomes=outcomes)
    ledger = InMemoryRequestLedger()
    worker.runtime.ledger = ledger
    return worker, ledger


# ==== a replayed request joins no coalesced run ============================================


def test_lambda_handler_replayed_ensure_joins_no_run_and_the_next_ensure_is_applied() -> None:
    # Given an ensure that topped c1 up (stored final) whose outcome could not be published
    outcomes = RecordingOutcomes(fail_calls=[1])
    worker, ledger = _ledger_worker(outcomes)
    first = worker.invoke(ensure_record("m1", "c1", 100))
    assert failed_ids(first) == ["m1"]
    assert ledger.entries["req-m1"].state == "final"
    assert worker.gateway.transfers == [("c1", Totals(projects=1, prompts=200))]

    # When it comes back in one batch with a fresh ensure of the same child behind it
    second = worker.invoke(
        ensure_record("m1", "c1", 100, receive_count=2), ensure_record("m2", "c1", 300)
    )

    # Then the replay is announced as stored and the fresh ensure is applied on its own for
    # its own need (100 used + 300 -> 400), not as a member of a run led by the replay
    assert failed_ids(second) == []
    assert worker.gateway.transfers == [
        ("c1", Totals(projects=1, prompts=200)),
        ("c1", Totals(projects=1, prompts=400)),
    ]
    replayed, fresh = worker.outcome("req-m1"), worker.outcome("req-m2")
    assert (replayed.status, replayed.receive_count, replayed.coalesced) == ("topped-up", 1, 1)
    assert (fresh.status, fresh.coalesced) == ("topped-up", 1)
    assert (fresh.totals_before, fresh.totals_after) == (
        Totals(projects=1, prompts=200),
        Totals(projects=1, prompts=400),
    )
    assert ledger.entries["req-m2"].state == "final"
