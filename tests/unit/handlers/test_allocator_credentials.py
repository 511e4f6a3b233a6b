"""The worker's request credentials over a fake broker: the in-memory rig, no AWS, no IMS.

The real path is tests/integration/test_allocator_credentials.py; these pin the application's
bookkeeping: bind per request and unbind after, which terminal paths end the authority and
how, and a refusal without a DLQ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serenity_allocator.domain.errors import ImsUnavailableError, NoCredentialError
from serenity_allocator.domain.model import CredentialEnd, Totals
from tests.unit.application.allocator.ledger_fake import StoreFailsOnce
from tests.unit.handlers.allocator_rig import (
    FULL,
    MAX_RECEIVE_COUNT,
    Worker,
    ensure_record,
    failed_ids,
    family_gateway,
    new_worker,
)


@dataclass(frozen=True)
class Session:
    request_id: str


@dataclass
class FakeBroker:
    refuse: dict[str, Exception] = field(default_factory=dict)
    opened: list[str] = field(default_factory=list)
    binds: list[str | None] = field(default_factory=list)
    ended: list[tuple[str, bool]] = field(default_factory=list)
    """(request id, whether a session was handed back to end)."""
    scrubbed: list[str] = field(default_factory=list)

    def open(self, request_id: str, workspace_id: str) -> Session:
        if request_id in self.refuse:
            raise self.refuse[request_id]
        self.opened.append(request_id)
        return Session(request_id)

    def user_of(self, session: object) -> str | None:
        return getattr(session, "user", None)

    def keep(self, session: object) -> None:
        pass

    def bind(self, session: object | None) -> None:
        self.binds.append(session.request_id if isinstance(session, Session) else None)

    def end(
        self, request_id: str, workspace_id: str | None, session: object | None
    ) -> CredentialEnd:
        self.ended.append((request_id, session is not None))
        return CredentialEnd(True)

    def scrub(self, request_id: str) -> CredentialEnd:
        self.scrubbed.append(request_id)
        return CredentialEnd(None)


def _worker(broker: FakeBroker, **kwargs: bool) -> Worker:
    gateway = family_gateway(("c1", FULL, Totals()), ("c2", FULL, Totals()))
    worker = new_worker(gateway, **kwargs)
    worker.runtime.credentials = broker
    return worker


def test_each_request_is_bound_for_its_own_calls_and_unbound_after() -> None:
    broker = FakeBroker()
    worker = _worker(broker)
    worker.invoke(ensure_record("m1", "c1", 50), ensure_record("m2", "c2", 50))
    assert broker.opened == ["req-m1", "req-m2"]
    assert broker.binds == ["req-m1", None, "req-m2", None]
    assert broker.ended == [("req-m1", True), ("req-m2", True)]
    # (each child, unused, is left under two blocks and two projects: refilled ahead)
    assert [worker.outcome(r).status for r in ("req-m1", "req-m2")] == ["topped-up", "topped-up"]


def test_a_retryable_failure_keeps_the_token_and_ends_nothing() -> None:
    broker = FakeBroker(refuse={"req-m1": ImsUnavailableError()})
    worker = _worker(broker)
    response = worker.invoke(ensure_record("m1", "c1", 50))
    assert failed_ids(response) == ["m1"]
    assert (broker.ended, broker.scrubbed) == ([], [])


def test_a_record_skipped_behind_its_group_on_its_final_receive_is_scrubbed() -> None:
    broker = FakeBroker(refuse={"req-m1": ImsUnavailableError()})
    worker = _worker(broker)
    final = ensure_record("m2", "c1", 50, receive_count=MAX_RECEIVE_COUNT)
    response = worker.invoke(ensure_record("m1", "c1", 50), final)
    assert failed_ids(response) == ["m1", "m2"]
    outcome = worker.outcome("req-m2")
    assert (outcome.status, outcome.error_code) == ("failed", "groupBlocked")
    # Terminal: scrubbed, not invalidated (IMS calls end with the applying phase)
    assert (broker.scrubbed, broker.ended) == (["req-m2"], [])


def test_no_credential_without_a_dlq_is_failed_but_not_dead_lettered() -> None:
    broker = FakeBroker(refuse={"req-m1": NoCredentialError()})
    worker = _worker(broker, dlq=False)
    response = worker.invoke(ensure_record("m1", "c1", 50))
    assert failed_ids(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code, outcome.dead_lettered) == (
        "failed",
        "noCredential",
        False,
    )
    assert broker.scrubbed == ["req-m1"]


def test_no_credential_with_a_dlq_sends_the_body_with_its_reason() -> None:
    broker = FakeBroker(refuse={"req-m1": NoCredentialError()})
    worker = _worker(broker)
    worker.invoke(ensure_record("m1", "c1", 50))
    assert worker.dead_letters is not None
    [sent] = worker.dead_letters.sent
    assert sent.reason == "noCredential"
    assert worker.outcome("req-m1").dead_lettered is True


def test_a_skipped_final_receive_the_ledger_cannot_take_is_still_scrubbed() -> None:
    # Given a record skipped behind its failing group on its final receive, in a batch whose
    # ledger cannot store that record's dead letter
    broker = FakeBroker(refuse={"req-m1": ImsUnavailableError()})
    worker = _worker(broker)
    worker.runtime.ledger = StoreFailsOnce()  # its one terminal store: the dead letter
    final = ensure_record("m2", "c1", 50, receive_count=MAX_RECEIVE_COUNT)

    # When the batch runs
    response = worker.invoke(ensure_record("m1", "c1", 50), final)

    # Then both records fail (SQS's redrive takes the final one to the DLQ), nothing is
    # announced for it (the ledger does not hold it), and its credential record is still
    # scrubbed: the request is terminal whatever the ledger could take
    assert failed_ids(response) == ["m1", "m2"]
    assert worker.outcomes is not None and worker.outcomes.published == []
    assert (broker.scrubbed, broker.ended) == (["req-m2"], [])
