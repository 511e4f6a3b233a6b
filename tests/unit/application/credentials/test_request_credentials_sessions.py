"""A session's life through a batch, as the broker sees it: what is kept, ended, invalidated.

A retryable failure hands the session back (``keep``) unless its record was found gone; a
terminal outcome of our configuration keeps the promise; ends that run beside the batch (with
``workers``) scrub only a dead promise and report both halves of an end; sessions opened ahead
that never had a turn are counted and forgotten; one user's members are admitted on one read.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from serenity_allocator.application.credentials.request_credentials import (
    RequestCredentials,
    UnauthorizedError,
    without_echo,
)
from serenity_allocator.domain.coalescing import EnsureRun
from serenity_allocator.domain.errors import (
    ImsClientRefusedError,
    ImsUnavailableError,
    NoCredentialError,
    SemrushScopeMissingError,
    UpstreamError,
)
from serenity_allocator.domain.messages import AllocationOutcome, build_outcome
from serenity_allocator.domain.model import CredentialEnd
from serenity_allocator.domain.observations import CredentialNotScrubbed, CredentialOutcome
from tests.fakes import FakeClock
from tests.unit.application.credentials.test_request_credentials import (
    EndingBroker,
    Readable,
    Session,
    _credentials,
    _ensure,
)


@dataclass
class UserSession(Session):
    user: str | None = None


@dataclass
class RecordingBroker(EndingBroker):
    """Also records keeps and invalidations; ``users`` say whom each session acts for, and
    the roll's store of a ``gone`` request finds its record gone."""

    invalidation: bool | None = True
    users: dict[str, str] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    kept: list[object] = field(default_factory=list)
    invalidated: list[object] = field(default_factory=list)

    def open(self, request_id: str, workspace_id: str) -> UserSession:
        super().open(request_id, workspace_id)
        return UserSession(request_id, self.users.get(request_id))

    def store_roll(self, session: object) -> None:
        if getattr(session, "request_id", None) in self.gone:
            raise NoCredentialError()

    def keep(self, session: object) -> None:
        self.kept.append(session)

    def invalidate(self, session: object) -> bool | None:
        self.invalidated.append(session)
        return self.invalidation


def _rig(**broker: Any) -> tuple[RequestCredentials, RecordingBroker]:
    clock = FakeClock()
    credentials, _, _ = _credentials(clock, 60.0)
    recording = RecordingBroker(clock, **broker)
    credentials.broker = recording
    return credentials, recording


def _outcome(request_id: str = "r-1", error_code: str | None = None) -> AllocationOutcome:
    return build_outcome(
        _ensure(request_id),
        "topped-up" if error_code is None else "failed",
        1,
        error_code=error_code,
    )


def _events(credentials: RequestCredentials) -> list[object]:
    return credentials.observer.events  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def workers() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


# ==== keep =================================================================================


def test_keep_hands_the_batchs_session_back_to_the_broker() -> None:
    credentials, broker = _rig()
    credentials.act_as(_ensure("r-1"))

    credentials.keep("r-1")
    credentials.keep("r-unknown")  # no session: nothing handed back

    assert broker.kept == [UserSession("r-1")]
    assert credentials.sessions == {}


def test_keep_hands_nothing_back_when_the_roll_found_the_record_gone(
    workers: ThreadPoolExecutor,
) -> None:
    credentials, broker = _rig(gone={"r-1"})
    credentials.workers = workers
    credentials.open_ahead([_ensure("r-1")])
    credentials.act_as(_ensure("r-1"))

    credentials.keep("r-1")

    assert broker.kept == []
    assert credentials.sessions == {}
    credentials.await_ends()


# ==== end ==================================================================================


@pytest.mark.parametrize("code", [ImsClientRefusedError.code, SemrushScopeMissingError.code])
def test_an_end_of_our_configurations_fault_keeps_the_promise_and_forgets_the_refusal(
    code: str,
) -> None:
    # Given r-1 with a session and a refusal met at admission, and r-2 with neither
    credentials, broker = _rig()
    credentials.act_as(_ensure("r-1"))
    credentials.refused["r-1"] = ImsClientRefusedError()

    # When both end failed with that code
    credentials.end(_outcome("r-1", error_code=code))
    credentials.end(_outcome("r-2", error_code=code))

    # Then r-1's session was kept (neither invalidated nor scrubbed), and both are forgotten
    assert broker.kept == [UserSession("r-1")]
    assert (broker.ended, broker.scrubbed, broker.invalidated) == ([], [], [])
    assert (credentials.sessions, credentials.refused) == ({}, {})


def test_beside_the_batch_a_dead_promise_without_a_session_is_only_scrubbed(
    workers: ThreadPoolExecutor,
) -> None:
    credentials, broker = _rig()
    credentials.workers = workers

    credentials.end(_outcome("r-1", error_code=NoCredentialError.code))
    credentials.await_ends()

    assert (broker.ended, broker.scrubbed, broker.invalidated) == ([], ["r-1"], [])


@pytest.mark.parametrize(
    ("code", "invalidate"),
    [(NoCredentialError.code, True), (None, False)],
    ids=["dead-lettered", "no-ims-call-fits"],
)
def test_beside_the_batch_a_session_only_scrubbed_is_never_invalidated(
    workers: ThreadPoolExecutor, code: str | None, invalidate: bool
) -> None:
    credentials, broker = _rig()
    credentials.workers = workers
    credentials.act_as(_ensure("r-1"))

    credentials.end(_outcome("r-1", error_code=code), invalidate=invalidate)
    credentials.await_ends()

    assert (broker.ended, broker.scrubbed, broker.invalidated) == ([], ["r-1"], [])


def test_an_end_beside_the_batch_reports_its_invalidation_and_its_scrub(
    workers: ThreadPoolExecutor,
) -> None:
    # Given a session whose invalidation IMS does not confirm and whose scrub fails
    credentials, broker = _rig(invalidation=False, answer=CredentialEnd(None, "Throttling"))
    credentials.workers = workers
    credentials.act_as(_ensure("r-1"))

    # When it ends beside the batch, side by side
    credentials.end(_outcome("r-1"))
    credentials.await_ends()

    # Then both halves ran and both failures are reported, under the request's id
    assert (broker.invalidated, broker.scrubbed, broker.ended) == (
        [UserSession("r-1")],
        ["r-1"],
        [],
    )
    assert _events(credentials) == [
        CredentialOutcome("exchanged"),
        CredentialOutcome("invalidateFailed", reason="notConfirmed"),
        CredentialNotScrubbed("r-1", "Throttling"),
    ]


def test_an_end_before_its_turn_invalidates_the_session_opened_ahead(
    workers: ThreadPoolExecutor,
) -> None:
    # Given a session opened ahead that its request never took
    credentials, broker = _rig()
    credentials.workers = workers
    credentials.open_ahead([_ensure("r-1")])

    # When the request ends (e.g. refused by the ledger before its turn acted)
    credentials.end(_outcome("r-1"))
    credentials.await_ends()

    # Then the end waited for that session: its token is invalidated beside the scrub, with
    # no read of the stored (already spent) one
    assert (broker.invalidated, broker.scrubbed, broker.ended) == (
        [UserSession("r-1")],
        ["r-1"],
        [],
    )
    assert (credentials.opening, credentials.sessions) == ({}, {})


# ==== opened ahead =========================================================================


def test_sessions_opened_ahead_that_never_had_a_turn_are_counted_and_forgotten(
    workers: ThreadPoolExecutor,
) -> None:
    # Given two sessions opened ahead, one of which IMS could not answer
    credentials, broker = _rig()
    broker.failing["r-2"] = ImsUnavailableError()
    credentials.workers = workers
    credentials.open_ahead([_ensure("r-1"), _ensure("r-2")])

    # When the invocation ends without their turns, nothing is raised
    credentials.await_ends()

    # Then each open is counted, none is left, and nothing was kept or ended
    assert _events(credentials) == [
        CredentialOutcome("exchanged"),
        CredentialOutcome("imsUnavailable"),
    ]
    assert (credentials.opening, credentials.sessions, credentials.rolling) == ({}, {}, {})
    assert (broker.kept, broker.scrubbed, broker.invalidated) == ([], [], [])


def test_an_exchange_ahead_ims_could_not_answer_fails_its_turn(
    workers: ThreadPoolExecutor,
) -> None:
    credentials, broker = _rig()
    broker.failing["r-1"] = ImsUnavailableError()
    credentials.workers = workers
    credentials.open_ahead([_ensure("r-1")])

    with pytest.raises(ImsUnavailableError):
        credentials.act_as(_ensure("r-1"))

    assert broker.bound == []
    assert _events(credentials) == [CredentialOutcome("imsUnavailable")]
    credentials.await_ends()


@pytest.mark.parametrize(
    "failure",
    [ImsClientRefusedError(), SemrushScopeMissingError()],
    ids=["client-refused", "scope-missing"],
)
def test_an_open_refused_for_our_configuration_is_counted_by_its_code(
    failure: Exception,
) -> None:
    credentials, broker = _rig()
    broker.failing["r-1"] = failure

    with pytest.raises(type(failure)):
        credentials.act_as(_ensure("r-1"))

    assert _events(credentials) == [CredentialOutcome(type(failure).code)]  # type: ignore[attr-defined]
    assert credentials.sessions == {}


# ==== admission ============================================================================


def test_admission_reads_the_child_once_per_user() -> None:
    # Given a run whose members act for the leader's user (r-2), a second user (r-3, r-4), and
    # no user the token names (r-5)
    credentials, broker = _rig(users={"r-1": "u-1", "r-2": "u-1", "r-3": "u-2", "r-4": "u-2"})
    requests = [_ensure(f"r-{n}") for n in range(1, 6)]
    run = EnsureRun([f"m-{n}" for n in range(1, 6)], requests)
    gateway = Readable()

    # When the leader's turn admits them
    credentials.admit(run, gateway)  # type: ignore[arg-type]

    # Then every member stays; only the second user's first member and the unnamed one read
    # the child with their own token, and the leader is bound again for the combined transfer
    assert run.members == ["m-1", "m-2", "m-3", "m-4", "m-5"]
    assert broker.bound == ["r-3", "r-5", "r-1"]
    assert gateway.reads == ["c1", "c1"]
    assert broker.opened == ["r-1", "r-2", "r-3", "r-4", "r-5"]


# ==== a 401's stand-in =====================================================================


def test_a_401s_stand_in_keeps_the_upstream_answer_out_of_its_traceback() -> None:
    # Given a Semrush 401 whose body echoes a token, replaced while it is being handled
    with pytest.raises(UnauthorizedError) as raised:
        try:
            raise UpstreamError(401, "echoed at-secret-1", "read_resources")
        except UpstreamError as exc:
            raise without_echo(exc)  # noqa: B904 -- as the worker raises it

    # Then the traceback shows the stand-in only, not the 401 it was raised from
    shown = "".join(traceback.format_exception(raised.value))
    assert "at-secret-1" not in shown
    assert "upstream answered 401" not in shown
    assert UnauthorizedError.message in shown
