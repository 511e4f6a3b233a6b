"""A request's credentials through a batch, what is reported: the end (scrub or invalidate,
out of time), the broker's answers counted, a member refused at admission, the refused
outcomes and their dead letter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from serenity_allocator.application.allocator.dead_letter import DeadLetterRoute, dead_letter_failed
from serenity_allocator.application.allocator.final_receive import Failure, failure_of
from serenity_allocator.application.allocator.invocation import BatchMessage, InboundMessage
from serenity_allocator.domain.coalescing import EnsureRun
from serenity_allocator.domain.errors import (
    AccessDeniedError,
    ImsUnavailableError,
    NoCredentialError,
    UpstreamError,
)
from serenity_allocator.domain.messages import AllocationOutcome, build_outcome
from serenity_allocator.domain.model import CredentialEnd
from serenity_allocator.domain.observations import CredentialNotScrubbed, CredentialOutcome
from tests.fakes import FakeClock, RecordingObserver
from tests.unit.application.credentials.test_request_credentials import (
    FakeBroker,
    Readable,
    _credentials,
    _ensure,
)


@dataclass
class EndingBroker(FakeBroker):
    """Records how each request was ended, answering ``answer``."""

    answer: CredentialEnd = field(default_factory=lambda: CredentialEnd(True))
    ends: list[tuple[str, ...]] = field(default_factory=list)

    def end(self, request_id: str, workspace_id: str | None, session: object | None) -> Any:
        self.ends.append(("end", request_id, str(workspace_id), type(session).__name__))
        return self.answer

    def scrub(self, request_id: str) -> Any:
        self.ends.append(("scrub", request_id))
        return self.answer


def _rig(applying_in_s: float = 60.0, **broker: Any) -> tuple[Any, EndingBroker]:
    clock = FakeClock()
    credentials, _, _ = _credentials(clock, applying_in_s)
    ending = EndingBroker(clock, **broker)
    credentials.broker = ending
    return credentials, ending


def _outcome(request_id: str = "r-1", error_code: str | None = None) -> AllocationOutcome:
    status = "topped-up" if error_code is None else "failed"
    return build_outcome(_ensure(request_id), status, 1, error_code=error_code)


def test_a_terminal_request_is_ended_with_its_child_and_session() -> None:
    credentials, broker = _rig()
    credentials.act_as(_ensure("r-1"))

    credentials.end(_outcome())

    assert broker.ends == [("end", "r-1", "c1", "Session")]
    assert credentials.observer.events == [CredentialOutcome("exchanged")]
    assert credentials.sessions == {}


@pytest.mark.parametrize("code", ["noCredential", "needsReauth"])
def test_a_dead_or_missing_promise_is_only_scrubbed(code: str) -> None:
    credentials, broker = _rig()

    credentials.end(_outcome(error_code=code))

    assert broker.ends == [("scrub", "r-1")]


def test_an_end_without_time_for_a_call_reports_the_record_not_scrubbed() -> None:
    credentials, broker = _rig(applying_in_s=-10.0)

    credentials.end(_outcome())

    assert broker.ends == []
    assert credentials.observer.events == [CredentialNotScrubbed("r-1", "outOfTime")]


@pytest.mark.parametrize(
    ("answer", "events"),
    [
        (CredentialEnd(True), []),
        (CredentialEnd(None), []),
        (CredentialEnd(False), [CredentialOutcome("invalidateFailed", reason="notConfirmed")]),
        (
            CredentialEnd(True, scrub_error="Throttling"),
            [CredentialNotScrubbed("r-1", "Throttling")],
        ),
    ],
)
def test_the_end_reports_an_unconfirmed_invalidation_and_a_failed_scrub(
    answer: CredentialEnd, events: list[object]
) -> None:
    credentials, _ = _rig(answer=answer)

    credentials.end(_outcome())

    assert credentials.observer.events == events


def test_keep_forgets_the_session_so_the_next_turn_exchanges_again() -> None:
    credentials, broker = _rig()
    credentials.act_as(_ensure("r-1"))

    credentials.keep("r-1")
    credentials.keep("r-unknown")
    credentials.act_as(_ensure("r-1"))

    assert broker.opened == ["r-1", "r-1"]


def test_an_end_forgets_a_refusal_met_at_admission() -> None:
    credentials, broker = _rig()
    credentials.refused["r-2"] = NoCredentialError()

    credentials.end(_outcome("r-2", error_code="noCredential"))
    credentials.act_as(_ensure("r-2"))

    assert broker.opened == ["r-2"]


def test_an_exchange_that_ims_cannot_answer_is_counted() -> None:
    credentials, broker = _rig()
    broker.failing["r-1"] = ImsUnavailableError()

    with pytest.raises(ImsUnavailableError):
        credentials.act_as(_ensure("r-1"))

    assert credentials.observer.events == [CredentialOutcome("imsUnavailable")]


class Denying(Readable):
    """Reads as every user, but ``denied`` members' reads answer Semrush 403."""

    def __init__(self, *denied: str) -> None:
        super().__init__()
        self.denied = denied

    def read_resources(self, workspace_id: str) -> object:
        super().read_resources(workspace_id)
        if workspace_id in self.denied:
            raise UpstreamError(403, "forbidden", "read_resources")
        return object()


def test_a_member_denied_at_admission_leaves_the_run_and_is_refused_at_its_turn() -> None:
    credentials, broker = _rig()
    second = _ensure("r-2").model_copy(update={"workspace_id": "c2"})
    run = EnsureRun(["m-1", "m-2"], [_ensure("r-1"), second])
    gateway = Denying("c2")

    credentials.admit(run, gateway)

    assert run.members == ["m-1"]
    assert gateway.reads == ["c2"]
    assert broker.bound[-1] == "r-1"
    with pytest.raises(AccessDeniedError):
        credentials.act_as(second)
    assert broker.opened == ["r-1", "r-2"]  # the leader (whose user it is), then the member


class OpeningBroker(EndingBroker):
    def open(self, request_id: str, workspace_id: str) -> Any:
        self.ends.append(("open", request_id, workspace_id))
        return super().open(request_id, workspace_id)


def test_a_session_is_opened_for_the_requests_own_child() -> None:
    clock = FakeClock()
    credentials, _, _ = _credentials(clock, 60.0)
    broker = OpeningBroker(clock)
    credentials.broker = broker

    credentials.act_as(_ensure("r-1").model_copy(update={"workspace_id": "c7"}))

    assert broker.ends == [("open", "r-1", "c7")]


def _failure(exc: Exception, receive_count: int) -> Failure:
    return failure_of(_ensure("r-1"), exc, receive_count, ims=True, final_receive=False)


def test_refused_outcome_rejects_a_403_and_ignores_other_statuses() -> None:
    request = _ensure("r-1")

    denied = _failure(UpstreamError(403, "no", "read"), 3)

    assert denied.outcome == build_outcome(request, "rejected", 3, error_code="accessDenied")
    assert denied.retry is False
    assert _failure(UpstreamError(500, "down", "read"), 3) == Failure(None, retry=True)
    assert _failure(KeyError("bug"), 3) == Failure(None, retry=True)


def test_a_401_with_a_fresh_token_comes_back_until_the_final_receive() -> None:
    # A Semrush 401 storm is our credential incident, not a non-member: the record returns
    request = _ensure("r-1")
    unauthorized = UpstreamError(401, "Not authenticated", "read")

    assert _failure(unauthorized, 1) == Failure(None, retry=True)
    final = failure_of(request, unauthorized, 5, ims=True, final_receive=True)
    assert final.outcome == build_outcome(request, "rejected", 5, error_code="accessDenied")
    assert final.retry is False


def test_refused_outcome_fails_a_missing_promise_as_dead_lettered() -> None:
    outcome = _failure(NoCredentialError(), 2).outcome

    assert outcome is not None
    assert (outcome.status, outcome.error_code, outcome.dead_lettered) == (
        "failed",
        "noCredential",
        True,
    )
    assert outcome.receive_count == 2


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, object]]] = []

    def send_invalid(self, body: str, **fields: object) -> None:
        self.sent.append((body, fields))


@pytest.mark.parametrize(("group_id", "sent_group"), [("c1", "c1"), ("", None)])
def test_a_refused_request_is_dead_lettered_as_it_came(
    group_id: str, sent_group: str | None
) -> None:
    _, _, deadlines = _credentials(FakeClock(), 60.0)
    message = BatchMessage(InboundMessage("msg-1", group_id, '{"raw": 1}'), _ensure("r-1"))
    sink = Sink()

    refused = _failure(NoCredentialError(), 1).outcome
    assert refused is not None

    sent = dead_letter_failed(
        message,
        refused,
        invalid_reason=None,
        route=DeadLetterRoute(sink, deadlines, RecordingObserver()),
    )

    assert sent.dead_lettered is True

    assert sink.sent == [
        (
            '{"raw": 1}',
            {
                "reason": "noCredential",
                "group_id": sent_group,
                "dedup_id": "msg-1",
                "source_message_id": "msg-1",
            },
        )
    ]
