"""A request's session through one batch: when an exchange may start, and admission's sessions.

An exchange spends the promise token it carries, so our own deadline must never start one it
cannot finish; a coalesced member's session is opened once per batch (at admission, or at its
own turn), never a second time from a token a lost answer may have spent.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from serenity_allocator.application.credentials.request_credentials import (
    RequestCredentials,
    credential_refusal,
)
from serenity_allocator.application.deadlines import Deadlines
from serenity_allocator.domain.coalescing import EnsureRun
from serenity_allocator.domain.errors import (
    AccessDeniedError,
    CredentialStoreUnavailableError,
    ImsUnavailableError,
    NoCredentialError,
    OutOfTimeError,
    UpstreamError,
)
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, build_outcome
from serenity_allocator.domain.model import CredentialEnd
from serenity_allocator.domain.observations import (
    CredentialNotScrubbed,
    CredentialOutcome,
    WorkerEvent,
)
from tests.fakes import FakeClock

IMS_CALL_S = 5.0
AWS_CALL_S = 1.0


@dataclass
class Session:
    request_id: str


@dataclass
class FakeBroker:
    """Counts opens (each one an exchange at IMS); ``failing`` opens raise once."""

    clock: FakeClock
    open_s: float = 0.5
    opened: list[str] = field(default_factory=list)
    failing: dict[str, Exception] = field(default_factory=dict)
    bound: list[str | None] = field(default_factory=list)

    def open(self, request_id: str, workspace_id: str) -> Session:
        self.opened.append(request_id)
        self.clock.now += self.open_s
        failure = self.failing.pop(request_id, None)
        if failure is not None:
            raise failure
        return Session(request_id)

    def exchange(self, request_id: str, workspace_id: str) -> Session:
        return self.open(request_id, workspace_id)  # the fake's open stores nothing

    def store_roll(self, session: object) -> None:
        pass

    def invalidate(self, session: object) -> bool | None:
        return True

    def user_of(self, session: object) -> str | None:
        return getattr(session, "user", None)

    def keep(self, session: object) -> None:
        pass

    def bind(self, session: object | None) -> None:
        self.bound.append(session.request_id if isinstance(session, Session) else None)

    def end(
        self, request_id: str, workspace_id: str | None, session: object | None
    ) -> CredentialEnd:
        return CredentialEnd(True)

    def scrub(self, request_id: str) -> CredentialEnd:
        return CredentialEnd(None)


class Readable:
    """Every user reads the child (the probe never refuses)."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def read_resources(self, workspace_id: str) -> object:
        self.reads.append(workspace_id)
        return object()  # admission only asks whether the read is allowed


class Events:
    def __init__(self) -> None:
        self.events: list[WorkerEvent] = []

    def record(self, event: WorkerEvent, /) -> None:
        self.events.append(event)


def _ensure(request_id: str) -> EnsureRequest:
    return EnsureRequest(
        kind="ensure", request_id=request_id, workspace_id="c1", parent_workspace_id="m1"
    )


def _credentials(
    clock: FakeClock, applying_in_s: float
) -> tuple[RequestCredentials, FakeBroker, Deadlines]:
    deadlines = Deadlines(
        clock=clock,
        applying=clock() + applying_in_s,
        finishing=clock() + applying_in_s + 2 * AWS_CALL_S,
        aws_call_s=AWS_CALL_S,
        ims_call_s=IMS_CALL_S,
    )
    broker = FakeBroker(clock)
    return RequestCredentials(broker, Events(), deadlines), broker, deadlines  # type: ignore[arg-type]


def test_deadlines_fit_an_exchange_only_with_its_whole_timeout_and_the_roll() -> None:
    # The invocation's own deadline (finishing) is what an exchange must end by.
    clock = FakeClock()
    _, _, deadlines = _credentials(clock, IMS_CALL_S + AWS_CALL_S - 2 * AWS_CALL_S)
    assert deadlines.finishing - clock() == IMS_CALL_S + AWS_CALL_S
    assert deadlines.fits_ims_exchange()
    clock.now += 0.01
    assert not deadlines.fits_ims_exchange()


def test_an_exchange_that_finishes_after_applying_but_before_the_end_is_started() -> None:
    # Given too little time to apply for a whole exchange, but a whole exchange and the
    # roll's store fitting before the invocation's deadline (issue 36 item 1: such exchanges
    # were refused on busy machines)
    clock = FakeClock()
    credentials, broker, deadlines = _credentials(clock, IMS_CALL_S)
    assert deadlines.applying - clock() < IMS_CALL_S + AWS_CALL_S <= deadlines.finishing - clock()

    # When the request is to act as its user
    credentials.act_as(_ensure("r-1"))

    # Then the exchange was sent: an exchange is refused only when it could not finish
    assert broker.opened == ["r-1"]


def test_an_exchange_that_would_not_fit_is_not_started() -> None:
    # Given less time before the invocation's deadline than one IMS call and the roll's store
    clock = FakeClock()
    credentials, broker, _ = _credentials(clock, IMS_CALL_S + AWS_CALL_S - 2 * AWS_CALL_S - 0.1)

    # When the request is to act as its user, the record fails out of time
    with pytest.raises(OutOfTimeError):
        credentials.act_as(_ensure("r-1"))

    # Then no exchange was sent (the stored token is still good for the next receive)
    assert broker.opened == []
    assert broker.bound == []


def test_admission_near_the_deadline_opens_no_member_and_its_turn_opens_none_either() -> None:
    # Given a run of three whose leader opened its session while a whole exchange still fit
    clock = FakeClock()
    credentials, broker, _ = _credentials(clock, IMS_CALL_S + AWS_CALL_S + 0.2 - 2 * AWS_CALL_S)
    run = EnsureRun(["m-1", "m-2", "m-3"], [_ensure("r-1"), _ensure("r-2"), _ensure("r-3")])
    credentials.act_as(run.requests[0])
    gateway = Readable()

    # When the leader's turn admits the members (no exchange fits any more)
    credentials.admit(run, gateway)  # type: ignore[arg-type]

    # Then no member was exchanged: both left the run, and the leader is bound again
    assert broker.opened == ["r-1"]
    assert run.members == ["m-1"]
    assert broker.bound[-1] == "r-1"
    # And each member's own turn fails out of time without an exchange (its record comes back)
    for request_id in ("r-2", "r-3"):
        with pytest.raises(OutOfTimeError):
            credentials.act_as(_ensure(request_id))
    assert broker.opened == ["r-1"]


@pytest.mark.parametrize(
    "failure",
    [ImsUnavailableError(), CredentialStoreUnavailableError()],
    ids=["ims-unavailable", "roll-not-stored"],
)
def test_a_member_whose_session_failed_at_admission_is_not_exchanged_again_at_its_turn(
    failure: Exception,
) -> None:
    # Given a run whose first member's exchange fails at admission (its answer may be lost,
    # or its rolled token not stored: the stored token may be spent)
    clock = FakeClock()
    credentials, broker, _ = _credentials(clock, 60.0)
    run = EnsureRun(["m-1", "m-2", "m-3"], [_ensure("r-1"), _ensure("r-2"), _ensure("r-3")])
    credentials.act_as(run.requests[0])
    broker.failing["r-2"] = failure
    gateway = Readable()

    # When the leader's turn admits the members
    credentials.admit(run, gateway)  # type: ignore[arg-type]

    # Then r-2 left the run, r-3 joined it with its own session
    assert run.members == ["m-1", "m-3"]
    assert broker.opened == ["r-1", "r-2", "r-3"]
    # And at its own turn r-2 fails with the same transient error, without a second exchange
    with pytest.raises(type(failure)):
        credentials.act_as(_ensure("r-2"))
    # While r-3's turn uses the session opened at admission
    credentials.act_as(_ensure("r-3"))
    assert broker.opened == ["r-1", "r-2", "r-3"]
    assert broker.bound[-1] == "r-3"


# ==== what a session's life reports =========================================================


@dataclass
class EndingBroker(FakeBroker):
    """Also records how each request ended, and answers with ``answer``."""

    answer: CredentialEnd = field(default_factory=lambda: CredentialEnd(True))
    ended: list[tuple[str, str | None, object | None]] = field(default_factory=list)
    scrubbed: list[str] = field(default_factory=list)

    def end(
        self, request_id: str, workspace_id: str | None, session: object | None
    ) -> CredentialEnd:
        self.ended.append((request_id, workspace_id, session))
        return self.answer

    def scrub(self, request_id: str) -> CredentialEnd:
        self.scrubbed.append(request_id)
        return self.answer


def _ending(
    clock: FakeClock, applying_in_s: float = 60.0, answer: CredentialEnd | None = None
) -> tuple[RequestCredentials, EndingBroker, Events]:
    deadlines = Deadlines(
        clock=clock,
        applying=clock() + applying_in_s,
        finishing=clock() + applying_in_s + 2 * AWS_CALL_S,
        aws_call_s=AWS_CALL_S,
        ims_call_s=IMS_CALL_S,
    )
    broker = EndingBroker(clock, answer=answer or CredentialEnd(True))
    events = Events()
    return RequestCredentials(broker, events, deadlines), broker, events  # type: ignore[arg-type]


def _outcome(request_id: str, error_code: str | None = None) -> AllocationOutcome:
    return build_outcome(_ensure(request_id), "hot-path", 1, error_code=error_code)


def test_a_session_opened_is_counted_exchanged_and_opened_for_its_child() -> None:
    credentials, broker, events = _ending(FakeClock())
    opened: list[tuple[str, str]] = []
    broker_open = broker.open

    def open_recording(request_id: str, workspace_id: str) -> Session:
        opened.append((request_id, workspace_id))
        return broker_open(request_id, workspace_id)

    broker.open = open_recording  # type: ignore[method-assign]
    credentials.act_as(_ensure("r-1"))
    assert opened == [("r-1", "c1")]
    assert events.events == [CredentialOutcome("exchanged")]


def test_an_exchange_ims_cannot_answer_is_counted_and_raised() -> None:
    credentials, broker, events = _ending(FakeClock())
    broker.failing["r-1"] = ImsUnavailableError()
    with pytest.raises(ImsUnavailableError):
        credentials.act_as(_ensure("r-1"))
    assert events.events == [CredentialOutcome("imsUnavailable")]
    assert "r-1" not in credentials.sessions


def test_keep_forgets_the_batchs_session_only() -> None:
    credentials, _, _ = _ending(FakeClock())
    credentials.act_as(_ensure("r-1"))
    credentials.act_as(_ensure("r-2"))
    credentials.keep("r-1")
    credentials.keep("r-unknown")  # nothing to forget: no error
    assert list(credentials.sessions) == ["r-2"]


def test_end_invalidates_with_the_requests_child_and_session() -> None:
    credentials, broker, events = _ending(FakeClock())
    credentials.act_as(_ensure("r-1"))
    credentials.refused["r-1"] = AccessDeniedError()
    credentials.end(_outcome("r-1"))
    assert broker.ended == [("r-1", "c1", Session("r-1"))]
    assert (credentials.sessions, credentials.refused) == ({}, {})
    assert events.events == [CredentialOutcome("exchanged")]


def test_end_with_no_time_left_reports_the_record_not_scrubbed() -> None:
    clock = FakeClock()
    credentials, broker, events = _ending(clock, applying_in_s=0.5)
    credentials.refused["r-1"] = AccessDeniedError()
    clock.now += 10.0
    credentials.end(_outcome("r-1"))
    assert (broker.ended, broker.scrubbed, credentials.refused) == ([], [], {})
    assert events.events == [CredentialNotScrubbed("r-1", OutOfTimeError.code)]


def test_end_reports_an_unconfirmed_invalidation_and_a_failed_scrub() -> None:
    credentials, _, events = _ending(FakeClock(), answer=CredentialEnd(False, "Throttling"))
    credentials.end(_outcome("r-1"))
    assert events.events == [
        CredentialOutcome("invalidateFailed", reason="notConfirmed"),
        CredentialNotScrubbed("r-1", "Throttling"),
    ]


def test_end_reports_nothing_when_invalidated_and_scrubbed() -> None:
    credentials, _, events = _ending(FakeClock(), answer=CredentialEnd(True))
    credentials.end(_outcome("r-1"))
    assert events.events == []


def test_a_member_whose_own_user_is_denied_at_admission_is_refused_at_its_turn() -> None:
    # Given a run whose second member's user may not read the child
    credentials, _, _ = _ending(FakeClock())
    run = EnsureRun(["m-1", "m-2"], [_ensure("r-1"), _ensure("r-2")])
    credentials.act_as(run.requests[0])

    class DeniesSecond(Readable):
        def read_resources(self, workspace_id: str) -> object:
            super().read_resources(workspace_id)
            if len(self.reads) == 1:
                raise UpstreamError(403, "forbidden", "read")
            return object()

    gateway = DeniesSecond()

    # When the leader's turn admits it
    credentials.admit(run, gateway)  # type: ignore[arg-type]

    # Then it read its own child, left the run, and its turn ends denied
    assert gateway.reads == ["c1"]
    assert run.members == ["m-1"]
    with pytest.raises(AccessDeniedError):
        credentials.act_as(_ensure("r-2"))


@pytest.mark.parametrize(
    ("error", "refused"),
    [
        (UpstreamError(401, "unauthorized", "read"), False),
        (UpstreamError(403, "forbidden", "read"), True),
        (UpstreamError(500, "boom", "read"), False),
        (NoCredentialError(), True),
        (ImsUnavailableError(), False),
    ],
)
def test_credential_refusal_tells_a_refusal_from_a_transient_failure(
    error: Exception, refused: bool
) -> None:
    assert (credential_refusal(error) is not None) is refused


def test_sessions_opened_ahead_at_the_batch_start_never_fail_out_of_time_later() -> None:
    # Given a batch whose applying phase leaves room for an exchange only at its start
    clock = FakeClock()
    credentials, broker, _ = _credentials(clock, IMS_CALL_S + AWS_CALL_S + 1.0)
    broker.open_s = 0.0
    with ThreadPoolExecutor(max_workers=4) as workers:
        credentials.workers = workers
        requests = [_ensure(f"r-{n}") for n in range(1, 4)]
        credentials.open_ahead(requests)
        # When the records ahead of the last one took the time an exchange needs
        clock.now += 5.0
        # Then its turn binds the session opened ahead: no outOfTime on a living consumer
        for request in requests:
            credentials.act_as(request)
        credentials.await_ends()
    assert sorted(broker.opened) == ["r-1", "r-2", "r-3"]
    assert broker.bound == ["r-1", "r-2", "r-3"]
    events = credentials.observer.events  # type: ignore[attr-defined]
    assert events.count(CredentialOutcome("exchanged")) == 3


def test_ends_run_beside_the_batch_and_are_reported_once_settled() -> None:
    clock = FakeClock()
    credentials, _broker, _ = _credentials(clock, 60.0)
    ending = EndingBroker(clock, answer=CredentialEnd(False))
    with ThreadPoolExecutor(max_workers=4) as workers:
        credentials.workers = workers
        credentials.broker = ending
        for n in (1, 2):
            credentials.end(build_outcome(_ensure(f"r-{n}"), "topped-up", 1))
        credentials.await_ends()
    assert sorted(e[0] for e in ending.ended) == ["r-1", "r-2"]
    assert credentials.ending == []
    # Reported in the calling thread once settled: two unconfirmed invalidations
    events = credentials.observer.events  # type: ignore[attr-defined]
    assert events.count(CredentialOutcome("invalidateFailed", reason="notConfirmed")) == 2
