"""A request's session through one batch: when an exchange may start, and admission's sessions.

An exchange spends the promise token it carries, so our own deadline must never start one it
cannot finish; a coalesced member's session is opened once per batch (at admission, or at its
own turn), never a second time from a token a lost answer may have spent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from serenity_allocator.application.credential_ports import CredentialEnd
from serenity_allocator.application.deadlines import Deadlines
from serenity_allocator.application.request_credentials import RequestCredentials
from serenity_allocator.domain.coalescing import EnsureRun
from serenity_allocator.domain.errors import (
    CredentialStoreUnavailableError,
    ImsUnavailableError,
    OutOfTimeError,
)
from serenity_allocator.domain.messages import EnsureRequest
from serenity_allocator.domain.worker_events import WorkerEvent
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
    clock = FakeClock()
    _, _, deadlines = _credentials(clock, IMS_CALL_S + AWS_CALL_S)
    assert deadlines.fits_ims_exchange()
    clock.now += 0.01
    assert not deadlines.fits_ims_exchange()


def test_an_exchange_that_would_not_fit_is_not_started() -> None:
    # Given less time before the applying deadline than one IMS call and the roll's store
    clock = FakeClock()
    credentials, broker, _ = _credentials(clock, IMS_CALL_S + AWS_CALL_S - 0.1)

    # When the request is to act as its user, the record fails out of time
    with pytest.raises(OutOfTimeError):
        credentials.act_as(_ensure("r-1"))

    # Then no exchange was sent (the stored token is still good for the next receive)
    assert broker.opened == []
    assert broker.bound == []


def test_admission_near_the_deadline_opens_no_member_and_its_turn_opens_none_either() -> None:
    # Given a run of three whose leader opened its session while a whole exchange still fit
    clock = FakeClock()
    credentials, broker, _ = _credentials(clock, IMS_CALL_S + AWS_CALL_S + 0.2)
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
