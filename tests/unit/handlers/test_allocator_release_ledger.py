"""The Allocator Lambda in memory: a release and the request ledger (intent, replay, refusal)."""

from __future__ import annotations

from serenity_allocator.domain.errors import WorkspaceBusyError
from serenity_allocator.domain.ledger import (
    LedgerUnavailableError,
    RequestKind,
    TransferIntent,
)
from serenity_allocator.domain.model import Totals
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger, intent_entry
from tests.unit.handlers.allocator_rig import (
    MAX_RECEIVE_COUNT,
    Worker,
    failed_ids,
    family_gateway,
    new_worker,
    release_record,
)

WIDE = Totals(projects=3, prompts=400)
"""The child's totals before a release: three projects, four prompt blocks."""
USED = Totals(projects=1, prompts=150)
LOWERED = Totals(projects=1, prompts=200)
"""Where a release with the default floor (one block each) takes a child using ``USED``."""


class WatchingLedger(InMemoryRequestLedger):
    """Records the child's totals at each intent write (so the test sees what came first)."""

    def __init__(self, worker: Worker) -> None:
        super().__init__()
        self.worker = worker
        self.totals_at_intent: list[Totals] = []
        self.intent_fails = False

    def record_intent(
        self,
        request_id: str,
        intent: TransferIntent,
        *,
        workspace_id: str,
        kind: RequestKind = "release",
    ) -> None:
        self.totals_at_intent.append(self.worker.gateway.totals_of(workspace_id))
        if self.intent_fails:
            raise LedgerUnavailableError("ProvisionedThroughputExceededException")
        super().record_intent(request_id, intent, workspace_id=workspace_id, kind=kind)


def _release_worker(total: Totals = WIDE) -> tuple[Worker, WatchingLedger]:
    worker = new_worker(family_gateway(("c1", total, USED)))
    ledger = WatchingLedger(worker)
    worker.runtime.ledger = ledger
    return worker, ledger


def test_a_release_records_its_intent_before_its_transfer_and_keeps_it_when_final() -> None:
    # Given a child holding more than it uses, and a ledger
    worker, ledger = _release_worker()

    # When a release comes with no floor of its own
    response = worker.invoke(release_record("m1", "c1"))

    # Then its intent (before, target) was written while the child still held its totals,
    # the one transfer lowers it to one block above its use, and the final record keeps it
    assert failed_ids(response) == []
    assert ledger.totals_at_intent == [WIDE]
    assert worker.gateway.transfers == [("c1", LOWERED)]
    entry = ledger.entries["req-m1"]
    assert (entry.state, entry.workspace_id, entry.kind) == ("final", "c1", "release")
    assert entry.intent == TransferIntent(before=WIDE, target=LOWERED)
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code, outcome.receive_count) == ("released", None, 1)
    assert (outcome.totals_before, outcome.totals_after) == (WIDE, LOWERED)
    assert entry.outcome == outcome


def test_a_release_uses_its_own_floor_over_the_default_one() -> None:
    # Given the same child, and a release asking to keep two projects and 300 prompts
    worker, ledger = _release_worker()

    # When it is applied
    worker.invoke(release_record("m1", "c1", floor=Totals(projects=2, prompts=300)))

    # Then the target is the floor, recorded as the intent
    assert worker.gateway.transfers == [("c1", Totals(projects=2, prompts=300))]
    assert ledger.entries["req-m1"].intent == TransferIntent(
        before=WIDE, target=Totals(projects=2, prompts=300)
    )


def test_a_redelivered_release_whose_transfer_landed_reports_it_without_a_second_one() -> None:
    # Given an earlier delivery that recorded its intent and lowered the child, then died
    worker, ledger = _release_worker(total=LOWERED)
    ledger.entries["req-m1"] = intent_entry("req-m1", "c1", "release", WIDE, LOWERED)

    # When the release comes back
    response = worker.invoke(release_record("m1", "c1", receive_count=2))

    # Then nothing is transferred or recorded again, and the outcome is the earlier top-down
    assert failed_ids(response) == []
    assert worker.gateway.transfers == []
    assert ledger.totals_at_intent == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code, outcome.receive_count) == ("released", None, 2)
    assert (outcome.totals_before, outcome.totals_after) == (WIDE, LOWERED)
    assert outcome.workspace_id == "c1"
    assert ledger.entries["req-m1"].state == "final"
    assert ledger.entries["req-m1"].outcome == outcome


def test_a_redelivered_release_whose_transfer_did_not_land_is_planned_again() -> None:
    # Given an intent whose target the child does not hold (the transfer never landed)
    worker, ledger = _release_worker()
    ledger.entries["req-m1"] = intent_entry("req-m1", "c1", "release", WIDE, LOWERED)
    worker.gateway.set_usage("c1", used=Totals(projects=2, prompts=150))

    # When the release comes back
    worker.invoke(release_record("m1", "c1", receive_count=2))

    # Then it is planned from the child as it is now, its intent recorded anew
    target = Totals(projects=2, prompts=200)
    assert worker.gateway.transfers == [("c1", target)]
    assert ledger.totals_at_intent == [WIDE]
    assert ledger.entries["req-m1"].intent == TransferIntent(before=WIDE, target=target)
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_before, outcome.totals_after) == (
        "released",
        WIDE,
        target,
    )


def test_a_release_with_an_intent_that_moved_nothing_is_planned_again() -> None:
    # Given an intent whose target is its before (nothing to land), the child still there
    worker, ledger = _release_worker(total=LOWERED)
    ledger.entries["req-m1"] = intent_entry("req-m1", "c1", "release", LOWERED, LOWERED)

    # When the release comes back
    worker.invoke(release_record("m1", "c1", receive_count=2))

    # Then it is not reported as released: the child has nothing to hand back
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_before, outcome.totals_after) == (
        "nothing-to-release",
        LOWERED,
        LOWERED,
    )
    assert worker.gateway.transfers == []


def test_a_release_with_nothing_to_release_records_no_intent() -> None:
    # Given a child at its floor already
    worker, ledger = _release_worker(total=LOWERED)

    # When a release comes
    worker.invoke(release_record("m1", "c1"))

    # Then no intent is written, nothing moves, and the outcome says so with its totals
    assert ledger.totals_at_intent == []
    assert worker.gateway.transfers == []
    assert ledger.entries["req-m1"].intent is None
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("nothing-to-release", None)
    assert (outcome.totals_before, outcome.totals_after) == (LOWERED, LOWERED)


def test_a_release_whose_intent_cannot_be_recorded_transfers_nothing_and_comes_back() -> None:
    # Given a ledger that refuses the intent write
    worker, ledger = _release_worker()
    ledger.intent_fails = True

    # When a release comes
    response = worker.invoke(release_record("m1", "c1"))

    # Then nothing is transferred, the record fails for a retry, and nothing is announced
    assert failed_ids(response) == ["m1"]
    assert ledger.totals_at_intent == [WIDE]
    assert worker.gateway.transfers == []
    assert worker.outcomes is not None and worker.outcomes.published == []
    assert "req-m1" not in ledger.entries


def test_a_busy_child_fails_a_release_and_on_its_final_receive_rejects_it() -> None:
    # Given a child the upstream reports busy on every transfer
    worker, ledger = _release_worker()
    worker.gateway.script_errors("transfer", "c1", [WorkspaceBusyError()] * 2)

    # When the release comes on an early receive, then on its final one
    early = worker.invoke(release_record("m1", "c1", receive_count=1))
    final = worker.invoke(release_record("m1", "c1", receive_count=MAX_RECEIVE_COUNT))

    # Then the early one fails for a retry with nothing stored; the final one fails too
    # (SQS moves it to the DLQ) with a terminal ``rejected / workspaceBusy`` outcome
    assert failed_ids(early) == ["m1"]
    assert failed_ids(final) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        "rejected",
        "workspaceBusy",
        MAX_RECEIVE_COUNT,
    )
    assert outcome.dead_lettered is True
    assert ledger.entries["req-m1"].state == "deadLettered"
