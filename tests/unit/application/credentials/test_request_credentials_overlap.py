"""A burst's credential calls overlap the request's own: what runs side by side, what waits.

Over the real broker (:class:`ImsCredentialBroker`) with in-memory fakes whose calls block
until the call they should overlap happened (bounded: a blocked call that times out records
the order the old, sequential session had). A session opened ahead is the request's once IMS
answered; its roll is stored beside the first Semrush read and waited for before anything is
applied; an end's invalidation and its scrub run side by side, the scrub after the roll.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from serenity_allocator.adapters.credential_store import (
    CredentialGoneError,
    StoredCredential,
)
from serenity_allocator.adapters.ims_client import ExchangedTokens
from serenity_allocator.adapters.request_authority import ImsCredentialBroker, RequestTokenHolder
from serenity_allocator.application.credentials.request_credentials import (
    MemberRecordGoneError,
    RequestCredentials,
)
from serenity_allocator.application.deadlines import Deadlines
from serenity_allocator.domain.errors import NoCredentialError
from serenity_allocator.domain.messages import EnsureRequest, build_outcome
from serenity_allocator.domain.observations import WorkerEvent
from tests.fakes import FakeClock

WAIT_S = 2.0
"""How long a blocked fake call waits for the call it should overlap (the old code: never)."""


class Steps:
    """The order calls happened in, and events a blocked call waits on."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self._lock = threading.Lock()
        self.read_made = threading.Event()
        self.scrub_made = threading.Event()

    def note(self, step: str) -> None:
        with self._lock:
            self.log.append(step)


class BlockingStore:
    """The credentials table: ``roll`` waits for the Semrush read (when ``roll_waits``)."""

    def __init__(self, steps: Steps, request_ids: list[str]) -> None:
        self.steps = steps
        self.tokens = {request_id: "pt-0" for request_id in request_ids}
        self.roll_waits = True
        self.gone: set[str] = set()

    def read(self, request_id: str, workspace_id: str) -> StoredCredential | None:
        token = self.tokens.get(request_id)
        return None if token is None else StoredCredential(request_id, workspace_id, token, 9)

    def roll(self, request_id: str, workspace_id: str, promise_token: str) -> None:
        if self.roll_waits:
            overlapped = self.steps.read_made.wait(WAIT_S)
            self.steps.note(f"roll {request_id}" + ("" if overlapped else " before the read"))
        if request_id in self.gone:
            raise CredentialGoneError(request_id)
        self.tokens[request_id] = promise_token
        self.steps.note(f"rolled {request_id}")

    def scrub(self, request_id: str) -> None:
        self.tokens.pop(request_id, None)
        self.steps.note(f"scrub {request_id}")
        self.steps.scrub_made.set()


class BlockingIms:
    """IMS: ``invalidate`` waits for the scrub (when ``invalidate_waits``)."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.invalidate_waits = False
        self._n = 0
        self._lock = threading.Lock()

    def exchange(self, promise_token: str) -> ExchangedTokens:
        with self._lock:
            self._n += 1
            n = self._n
        return ExchangedTokens(f"at-{n}", f"pt-{n}")

    def invalidate(self, promise_token: str) -> bool:
        if self.invalidate_waits:
            side_by_side = self.steps.scrub_made.wait(WAIT_S)
            self.steps.note("invalidate" + ("" if side_by_side else " before the scrub"))
        else:
            self.steps.note(f"invalidate {promise_token}")
        return True


class Events:
    def __init__(self) -> None:
        self.events: list[WorkerEvent] = []

    def record(self, event: WorkerEvent, /) -> None:
        self.events.append(event)


class Rig:
    def __init__(self, workers: ThreadPoolExecutor, request_ids: list[str]) -> None:
        self.steps = Steps()
        self.store = BlockingStore(self.steps, request_ids)
        self.ims = BlockingIms(self.steps)
        holder = RequestTokenHolder()
        broker = ImsCredentialBroker(self.store, self.ims, holder)
        holder.broker = broker
        clock = FakeClock()
        deadlines = Deadlines(
            clock=clock,
            applying=clock() + 60.0,
            finishing=clock() + 62.0,
            aws_call_s=1.0,
            ims_call_s=5.0,
        )
        self.credentials = RequestCredentials(broker, Events(), deadlines, workers)
        self.requests = [_ensure(request_id) for request_id in request_ids]

    def read_child(self) -> None:
        """The request's first Semrush call (a read), made with its bound token."""
        self.steps.note("read")
        self.steps.read_made.set()


def _ensure(request_id: str) -> EnsureRequest:
    return EnsureRequest(
        kind="ensure", request_id=request_id, workspace_id="c1", parent_workspace_id="m1"
    )


@pytest.fixture
def workers() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def test_the_roll_is_stored_beside_the_first_read_and_before_anything_is_applied(
    workers: ThreadPoolExecutor,
) -> None:
    # Given a session opened ahead whose roll's store can land only once the read was made
    rig = Rig(workers, ["r-1"])
    rig.credentials.open_ahead(rig.requests)
    # When its turn binds the session and reads the child, then is about to transfer
    rig.credentials.act_as(rig.requests[0])
    rig.read_child()
    rig.credentials.rolls_stored(rig.requests)
    rig.steps.note("transfer")
    rig.credentials.end(build_outcome(rig.requests[0], "topped-up", 1))
    rig.credentials.await_ends()
    # Then the read did not wait for the roll, the transfer did, and the scrub came last
    log = rig.steps.log
    assert log[:4] == ["read", "roll r-1", "rolled r-1", "transfer"]
    assert sorted(log[4:]) == ["invalidate pt-1", "scrub r-1"]
    assert rig.store.tokens == {}


def test_an_end_invalidates_beside_its_scrub(workers: ThreadPoolExecutor) -> None:
    # Given a request whose invalidation at IMS can answer only once its scrub was made
    rig = Rig(workers, ["r-1"])
    rig.store.roll_waits = False
    rig.ims.invalidate_waits = True
    rig.credentials.open_ahead(rig.requests)
    rig.credentials.act_as(rig.requests[0])
    # When it ends
    rig.credentials.end(build_outcome(rig.requests[0], "topped-up", 1))
    rig.credentials.await_ends()
    # Then both ran side by side: neither waited for the other's answer
    assert rig.steps.log == ["rolled r-1", "scrub r-1", "invalidate"]


def test_the_scrub_waits_for_a_roll_still_under_way(workers: ThreadPoolExecutor) -> None:
    # Given a hot-path request (no transfer) that ends while its roll is still being stored
    rig = Rig(workers, ["r-1"])
    rig.credentials.open_ahead(rig.requests)
    rig.credentials.act_as(rig.requests[0])
    rig.credentials.end(build_outcome(rig.requests[0], "hot-path", 1))
    rig.read_child()  # lets the roll land, after the end was handed over
    rig.credentials.await_ends()
    # Then the roll landed before the scrub: the record is left scrubbed, not rolled again
    log = rig.steps.log
    assert log.index("rolled r-1") < log.index("scrub r-1")
    assert rig.store.tokens == {}


def test_a_record_gone_at_the_roll_is_found_before_the_transfer(
    workers: ThreadPoolExecutor,
) -> None:
    # Given a request whose record was scrubbed between its read and its roll
    rig = Rig(workers, ["r-1"])
    rig.store.gone.add("r-1")
    rig.credentials.open_ahead(rig.requests)
    rig.credentials.act_as(rig.requests[0])
    rig.read_child()
    # When it is about to transfer, nothing applied: it ends noCredential as before
    with pytest.raises(NoCredentialError):
        rig.credentials.rolls_stored(rig.requests)
    rig.credentials.await_ends()
    # and the fresh chain was invalidated by the failed roll
    assert "invalidate pt-1" in rig.steps.log


def test_a_members_record_gone_splits_the_run_and_refuses_the_member_at_its_turn(
    workers: ThreadPoolExecutor,
) -> None:
    rig = Rig(workers, ["r-1", "r-2"])
    rig.store.roll_waits = False
    rig.store.gone.add("r-2")
    rig.credentials.open_ahead(rig.requests)
    rig.credentials.act_as(rig.requests[0])
    with pytest.raises(MemberRecordGoneError):
        rig.credentials.rolls_stored(rig.requests)
    # The leader's own roll is stored: alone, it applies
    rig.credentials.rolls_stored(rig.requests[:1])
    with pytest.raises(NoCredentialError):
        rig.credentials.act_as(rig.requests[1])
    rig.credentials.await_ends()


def test_a_failed_record_comes_back_once_its_roll_is_stored(workers: ThreadPoolExecutor) -> None:
    # Given a request that fails (retryable) while its roll's store is still under way
    rig = Rig(workers, ["r-1"])
    rig.credentials.open_ahead(rig.requests)
    rig.credentials.act_as(rig.requests[0])
    rig.read_child()
    # When its record is kept for the next receive
    rig.credentials.keep("r-1")
    rig.steps.note("kept")
    # Then keep waited for the store: the record holds the rolled token, not the spent one
    assert rig.steps.log == ["read", "roll r-1", "rolled r-1", "kept"]
    assert rig.store.tokens == {"r-1": "pt-1"}
    rig.credentials.await_ends()
