"""The DLQ audit use case over the in-memory ledger and a recording outcome sink."""

from __future__ import annotations

import json
from collections.abc import Sequence

from serenity_allocator.application.allocator.audit_dead_letters import (
    RECEIVES_EXHAUSTED,
    DeadLetterAudit,
    DeadLetterCopy,
    audit_dead_letters,
)
from serenity_allocator.application.allocator.request_ledger import FINAL_RECEIVE_UNFINISHED
from serenity_allocator.domain.ledger import (
    CallDeadline,
    LedgerEntry,
    LedgerRead,
    LedgerRecordUnreadableError,
    LedgerUnavailableError,
    RequestIdConflictError,
    TransferIntent,
)
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from tests.fakes import RecordingOutcomes
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger

NOW = 4_000_000_000.0
"""Long after every record the fake ledger writes: none is live."""


def _ensure_body(request_id: str) -> str:
    return json.dumps(
        {
            "version": 1,
            "kind": "ensure",
            "request_id": request_id,
            "workspace_id": "child-1",
            "parent_workspace_id": "master-1",
            "need": {"prompts": 300},
            "org_id": "org-1",
        }
    )


def _letter(request_id: str, receive_count: int = 5, reason: str | None = None) -> DeadLetterCopy:
    return DeadLetterCopy(
        message_id=f"m-{request_id}",
        body=_ensure_body(request_id),
        reason=reason,
        receive_count=receive_count,
    )


def _exhausted(request_id: str, receive_count: int = 5) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id,
        kind="ensure",
        workspace_id="child-1",
        status="failed",
        error_code="receivesExhausted",
        receive_count=receive_count,
        org_id="org-1",
        dead_lettered=True,
    )


def test_audit_dead_letters_records_and_announces_a_request_without_a_record() -> None:
    # Given a valid request in the DLQ that the ledger never saw
    ledger = InMemoryRequestLedger()
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters([_letter("req-1", receive_count=4)], ledger, outcomes, now_s=NOW)

    # Then a published dead letter is stored and announced once
    expected = _exhausted("req-1", receive_count=4)
    assert audit == DeadLetterAudit(recorded=[expected], announced=True)
    assert outcomes.published == [expected]
    assert ledger.entries["req-1"] == LedgerEntry(
        request_id="req-1",
        state="deadLettered",
        workspace_id="child-1",
        kind="ensure",
        outcome=expected,
        updated_at=1_800_000_000,
        announced=True,
    )
    assert RECEIVES_EXHAUSTED == "receivesExhausted"


def test_audit_dead_letters_confirms_a_provisional_dead_letter() -> None:
    # Given a request whose final receive died after leaving its provisional dead letter
    ledger = InMemoryRequestLedger()
    provisional = _exhausted("req-1").model_copy(update={"error_code": FINAL_RECEIVE_UNFINISHED})
    ledger.store_outcome(provisional, provisional=True)
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters([_letter("req-1", receive_count=5)], ledger, outcomes, now_s=NOW)

    # Then that record is confirmed (no longer provisional) and announced as it was
    assert audit == DeadLetterAudit(recorded=[provisional], announced=True)
    assert outcomes.published == [provisional]
    entry = ledger.entries["req-1"]
    assert (entry.state, entry.provisional, entry.outcome) == ("deadLettered", False, provisional)


def test_audit_dead_letters_keeps_a_release_intent_when_recording() -> None:
    # Given a release whose ledger record is only an intent
    ledger = InMemoryRequestLedger()
    intent = TransferIntent(before=Totals(prompts=500), target=Totals(prompts=100))
    ledger.record_intent("req-1", intent, workspace_id="child-1")
    release = {"version": 1, "kind": "release", "request_id": "req-1", "workspace_id": "child-1"}
    letter = DeadLetterCopy(
        message_id="m-1", body=json.dumps(release), reason=None, receive_count=5
    )

    # When the DLQ is audited
    audit = audit_dead_letters([letter], ledger, None, now_s=NOW)

    # Then the dead letter is stored beside the intent, and nothing is announced without a sink
    expected = _exhausted("req-1").model_copy(
        update={"kind": "release", "org_id": None, "source": "service"}
    )
    assert audit == DeadLetterAudit(recorded=[expected], announced=False)
    assert ledger.entries["req-1"].state == "deadLettered"
    assert ledger.entries["req-1"].intent == intent


def test_audit_dead_letters_leaves_a_terminal_record_alone() -> None:
    # Given a completed request and a published dead letter, both still in the DLQ
    ledger = InMemoryRequestLedger()
    final = _exhausted("req-final").model_copy(
        update={"status": "topped-up", "error_code": None, "dead_lettered": None}
    )
    ledger.store_outcome(final)
    ledger.store_outcome(_exhausted("req-dead"), dead_lettered=True)
    ledger.mark_announced(["req-final", "req-dead"])  # the worker's publish was confirmed
    writes = ledger.writes
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters(
        [_letter("req-final"), _letter("req-dead")], ledger, outcomes, now_s=NOW
    )

    # Then nothing is written or announced
    assert audit == DeadLetterAudit(already_terminal=2)
    assert (ledger.writes, outcomes.publish_calls) == (writes, 0)
    assert ledger.entries["req-final"].outcome == final


def test_audit_dead_letters_run_twice_announces_nothing_the_second_time() -> None:
    # Given an audit that recorded two dead letters
    ledger = InMemoryRequestLedger()
    outcomes = RecordingOutcomes()
    letters = [_letter("req-1"), _letter("req-2")]
    audit_dead_letters(letters, ledger, outcomes, now_s=NOW)
    writes = ledger.writes

    # When the audit runs again over the same DLQ
    again = audit_dead_letters(letters, ledger, outcomes, now_s=NOW)

    # Then it changes nothing
    assert again == DeadLetterAudit(already_terminal=2)
    assert outcomes.published == [_exhausted("req-1"), _exhausted("req-2")]
    assert (outcomes.publish_calls, ledger.writes) == (1, writes)


def test_audit_dead_letters_skips_invalid_messages() -> None:
    # Given a message the worker dead-lettered with a reason, and one that does not parse
    ledger = InMemoryRequestLedger()
    letters = [
        _letter("req-1", reason="invalidMessage"),
        DeadLetterCopy(message_id="m-2", body="{not json", reason=None, receive_count=5),
    ]

    # When the DLQ is audited
    audit = audit_dead_letters(letters, ledger, RecordingOutcomes(), now_s=NOW)

    # Then both count as invalid, the unparseable one named, and nothing is written
    assert audit == DeadLetterAudit(invalid=2, unparseable=["m-2"])
    assert (ledger.entries, ledger.writes) == ({}, 0)


def test_audit_dead_letters_records_a_request_with_two_copies_once() -> None:
    # Given two copies of one request in the DLQ (a producer retry)
    ledger = InMemoryRequestLedger()
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters(
        [_letter("req-1", receive_count=3), _letter("req-1", receive_count=5)],
        ledger,
        outcomes,
        now_s=NOW,
    )

    # Then one dead letter is recorded, from the first copy
    assert audit.recorded == [_exhausted("req-1", receive_count=3)]
    assert ledger.lookups == [["req-1"]]
    assert ledger.writes == 1


def test_audit_dead_letters_announces_in_batches_of_ten() -> None:
    # Given eleven unrecorded requests in the DLQ
    ledger = InMemoryRequestLedger()
    outcomes = RecordingOutcomes()
    ids = [f"req-{n:02d}" for n in range(11)]

    # When the DLQ is audited
    audit = audit_dead_letters([_letter(rid) for rid in ids], ledger, outcomes, now_s=NOW)

    # Then they are announced in two calls (PutEvents takes ten entries), in order
    assert outcomes.publish_calls == 2
    assert [o.request_id for o in outcomes.published] == ids
    assert audit.recorded == outcomes.published


class StaleLookupLedger(InMemoryRequestLedger):
    """A ledger whose lookup ran before another writer stored a record (a race)."""

    def read_batch(
        self, request_ids: Sequence[str], deadline: CallDeadline | None = None
    ) -> LedgerRead:
        super().read_batch(request_ids, deadline)
        return LedgerRead()


def test_audit_dead_letters_counts_records_stored_after_its_lookup_as_terminal() -> None:
    # Given late receives that completed two requests after the audit's lookup
    ledger = StaleLookupLedger()
    final = _exhausted("req-1").model_copy(
        update={"status": "topped-up", "error_code": None, "dead_lettered": None}
    )
    ledger.store_outcome(final)
    ledger.store_outcome(final.model_copy(update={"request_id": "req-2"}))
    ledger.mark_announced(["req-1", "req-2"])
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters([_letter("req-1"), _letter("req-2")], ledger, outcomes, now_s=NOW)

    # Then the ledger keeps the final outcomes and nothing is announced
    assert audit == DeadLetterAudit(already_terminal=2)
    assert ledger.entries["req-1"].outcome == final
    assert outcomes.publish_calls == 0


def test_audit_dead_letters_reports_an_id_bound_to_another_request_and_writes_nothing() -> None:
    # Given a DLQ copy whose id the ledger binds to another workspace
    ledger = InMemoryRequestLedger()
    ledger.entries["req-1"] = LedgerEntry(
        request_id="req-1",
        state="intent",
        workspace_id="child-2",
        kind="ensure",
        intent=TransferIntent(before=Totals(), target=Totals(prompts=100)),
    )
    outcomes = RecordingOutcomes()

    # When the DLQ is audited / Then the conflict is reported by its id, nothing written
    audit = audit_dead_letters([_letter("req-1")], ledger, outcomes, now_s=NOW)
    assert audit == DeadLetterAudit(conflicts=["req-1"])
    assert ledger.writes == 0 and outcomes.publish_calls == 0


class RefusingStoreLedger(StaleLookupLedger):
    """A ledger whose lookup found nothing and whose every store then fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def store_outcome(
        self,
        outcome: AllocationOutcome,
        *,
        dead_lettered: bool = False,
        provisional: bool = False,
        source_message_id: str | None = None,
    ) -> AllocationOutcome:
        raise self.error


def test_audit_dead_letters_reports_each_store_failure_under_its_request_id() -> None:
    # Given stores that fail because the id was bound meanwhile, the record turned
    # unreadable, or the ledger is out of reach / When each is audited / Then each is reported
    # by its request id, with why where there is one, and nothing is announced
    outcomes = RecordingOutcomes()
    bound = audit_dead_letters(
        [_letter("req-1")],
        RefusingStoreLedger(RequestIdConflictError("req-1")),
        outcomes,
        now_s=NOW,
    )
    unreadable = audit_dead_letters(
        [_letter("req-2")],
        RefusingStoreLedger(LedgerRecordUnreadableError("state")),
        outcomes,
        now_s=NOW,
    )
    unanswered = audit_dead_letters(
        [_letter("req-3")],
        RefusingStoreLedger(LedgerUnavailableError("timeout")),
        outcomes,
        now_s=NOW,
    )
    assert bound == DeadLetterAudit(conflicts=["req-1"])
    assert unreadable == DeadLetterAudit(
        unreadable={"req-2": str(LedgerRecordUnreadableError("state"))}
    )
    assert unreadable.unreadable["req-2"] != ""
    assert unanswered == DeadLetterAudit(unanswered=["req-3"])
    assert outcomes.publish_calls == 0


def test_audit_dead_letters_reports_what_it_could_not_announce_and_why() -> None:
    # Given an outcome bus that refuses the publish
    ledger = InMemoryRequestLedger()
    outcomes = RecordingOutcomes(fail_calls=[1])

    # When two dead letters are audited
    audit = audit_dead_letters([_letter("req-1"), _letter("req-2")], ledger, outcomes, now_s=NOW)

    # Then both are recorded, neither flagged announced, each reported with the failure's kind
    assert audit.unannounced == ["req-1: RuntimeError", "req-2: RuntimeError"]
    assert audit.announced is False
    assert [outcome.request_id for outcome in audit.recorded] == ["req-1", "req-2"]
    assert not any(ledger.entries[rid].announced for rid in ("req-1", "req-2"))


def test_audit_dead_letters_skips_what_it_cannot_read_and_settles_the_rest() -> None:
    # Given an unreadable record, an unanswered one, and a request the ledger never saw
    ledger = InMemoryRequestLedger()
    ledger.corrupt("req-1")
    ledger.throttled.add("req-2")
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters(
        [_letter("req-1"), _letter("req-2"), _letter("req-3")], ledger, outcomes, now_s=NOW
    )

    # Then the first two are reported and left unwritten; the third is recorded and announced
    assert audit.unreadable == {"req-1": "record: unreadable field(s) state"}
    assert audit.unanswered == ["req-2"]
    assert [outcome.request_id for outcome in audit.recorded] == ["req-3"]
    assert "req-2" not in ledger.entries
    assert [outcome.request_id for outcome in outcomes.published] == ["req-3"]


def test_audit_dead_letters_announces_again_a_terminal_record_not_confirmed_announced() -> None:
    # Given a request whose final outcome is stored but was never confirmed announced
    ledger = InMemoryRequestLedger()
    final = _exhausted("req-1").model_copy(
        update={"status": "topped-up", "error_code": None, "dead_lettered": None}
    )
    ledger.store_outcome(final)
    outcomes = RecordingOutcomes()

    # When the DLQ is audited / Then that outcome is published again, unchanged, and flagged
    audit = audit_dead_letters([_letter("req-1")], ledger, outcomes, now_s=NOW)
    assert audit == DeadLetterAudit(reannounced=[final], announced=True)
    assert outcomes.published == [final]
    assert ledger.entries["req-1"].announced is True


def test_audit_dead_letters_counts_every_invalid_copy_and_goes_on_past_them() -> None:
    # Given two copies the worker dead-lettered with a reason, one body that is no request,
    # then a valid request
    unparseable = DeadLetterCopy(message_id="m-junk", body="{", reason=None, receive_count=5)
    letters = [
        _letter("req-a", reason="need.prompts: too large"),
        _letter("req-b", reason="MessageGroupId: must equal workspace_id"),
        unparseable,
        _letter("req-1"),
    ]

    # When the DLQ is audited / Then the three are counted and the valid one recorded
    audit = audit_dead_letters(letters, InMemoryRequestLedger(), RecordingOutcomes(), now_s=NOW)
    assert (audit.invalid, audit.unparseable) == (3, ["m-junk"])
    assert [outcome.request_id for outcome in audit.recorded] == ["req-1"]
