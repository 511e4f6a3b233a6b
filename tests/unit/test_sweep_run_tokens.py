"""The rules of a run's token on its claim, with in-memory fakes (the wire is in the integration).

Races between two invocations of one run, a hand-over beside a live token, and the best effort
of the end, which the simulator cannot stage at the exact moment they matter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from serenity_allocator.application.sweep_run_tokens import RunTokens, hand_over_run_token
from serenity_allocator.domain.errors import NeedsReauthError
from serenity_allocator.domain.observations import CredentialOutcome
from serenity_allocator.domain.sweep_errors import RunInProgressError, SweepNeedsReauthError
from serenity_allocator.domain.sweep_run_claim import run_claim_name
from tests.fakes import InMemoryCheckpointStore, RecordingObserver

RUN = "rs-unit-1"


class ReversibleCipher:
    """Encrypts by tagging the plaintext with its context: a wrong context cannot decrypt."""

    def encrypt(self, token: str, context: Mapping[str, str]) -> bytes:
        return f"{context['purpose']}|{context['run_id']}|{token}".encode()

    def decrypt(self, ciphertext: bytes, context: Mapping[str, str]) -> str:
        purpose, run_id, token = ciphertext.decode().split("|", 2)
        if (purpose, run_id) != (context["purpose"], context["run_id"]):
            raise ValueError("InvalidCiphertextException")
        return token


@dataclass(frozen=True)
class Exchanged:
    access_token: str
    promise_token: str


@dataclass
class FakeIms:
    """A chain of promise tokens: each exchange kills the token given and answers a new one."""

    alive: set[str] = field(default_factory=set)
    invalidated: list[str] = field(default_factory=list)
    confirm_invalidate: bool = True
    on_exchange: list[object] = field(default_factory=list)
    counter: int = 0

    def mint(self) -> str:
        self.counter += 1
        token = f"pt-{self.counter}"
        self.alive.add(token)
        return token

    def exchange(self, promise_token: str) -> Exchanged:
        for hook in self.on_exchange:
            hook()  # type: ignore[operator]
        if promise_token not in self.alive:
            raise NeedsReauthError()
        self.alive.discard(promise_token)
        return Exchanged(f"at-{self.counter}", self.mint())

    def invalidate(self, promise_token: str) -> bool:
        self.invalidated.append(promise_token)
        self.alive.discard(promise_token)
        return self.confirm_invalidate


@dataclass
class Rig:
    store: InMemoryCheckpointStore = field(default_factory=InMemoryCheckpointStore)
    cipher: ReversibleCipher = field(default_factory=ReversibleCipher)
    ims: FakeIms = field(default_factory=FakeIms)
    observer: RecordingObserver = field(default_factory=RecordingObserver)

    def tokens(self) -> RunTokens:
        return RunTokens(self.store, self.cipher, self.ims, self.observer)

    def hand_over(self, token: str) -> None:
        hand_over_run_token(self.store, self.cipher, RUN, token)

    def claim(self) -> dict[str, object]:
        stored = self.store.load(run_claim_name(RUN))
        assert stored is not None
        return stored.body

    def outcomes(self) -> list[str]:
        return [
            event.outcome for event in self.observer.events if isinstance(event, CredentialOutcome)
        ]


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_a_handover_beside_a_live_token_is_exchanged_and_the_old_chain_invalidated(
    rig: Rig,
) -> None:
    # Given a run whose claim holds a rolled token, and a new token handed over beside it
    rig.hand_over(rig.ims.mint())
    rig.tokens().session(RUN).access_token()
    old = f"pt-{rig.ims.counter}"  # the rolled token the claim holds
    rig.hand_over(rig.ims.mint())

    # When the next batch exchanges
    rig.tokens().session(RUN).access_token()

    # Then it exchanged the handover, stored its roll alone, and killed the old chain
    assert rig.ims.invalidated == [old]
    assert rig.claim()["handover"] is None
    assert rig.outcomes() == ["exchanged", "exchanged"]


def test_a_roll_that_loses_its_race_invalidates_what_it_got_and_stops(rig: Rig) -> None:
    # Given another invocation writing the claim between this one's read and its roll
    rig.hand_over(rig.ims.mint())
    rig.ims.on_exchange.append(lambda: rig.hand_over("pt-written-meanwhile"))

    # When this batch exchanges / Then it stops as a run in progress
    with pytest.raises(RunInProgressError):
        rig.tokens().session(RUN).access_token()
    # And the token it got (stored nowhere) was invalidated; the other writer's claim stands
    assert rig.ims.invalidated == [f"pt-{rig.ims.counter}"]
    assert rig.claim()["handover"] is not None


def test_a_refused_exchange_after_a_concurrent_roll_is_in_progress_not_a_dead_promise(
    rig: Rig,
) -> None:
    # Given a token that another invocation exchanges (and rolls) after this one read it
    rig.hand_over(rig.ims.mint())
    other = rig.tokens()

    def concurrent_batch() -> None:
        rig.ims.on_exchange.clear()
        other.session(RUN).access_token()

    rig.ims.on_exchange.append(concurrent_batch)

    # When this batch's exchange is refused (its token was spent by the other)
    with pytest.raises(RunInProgressError):
        rig.tokens().session(RUN).access_token()

    # Then the claim keeps the other batch's live token: nothing scrubbed, nothing invalidated
    assert rig.claim()["ended"] is None and rig.claim()["promise_token"] is not None
    assert rig.ims.invalidated == []


def test_a_dead_promise_is_scrubbed_not_invalidated_again(rig: Rig) -> None:
    rig.hand_over("pt-never-alive")
    with pytest.raises(SweepNeedsReauthError):
        rig.tokens().session(RUN).access_token()
    assert rig.claim() == {
        "run_id": RUN,
        "promise_token": None,
        "handover": None,
        "ended": "needsReauth",
    }
    assert rig.ims.invalidated == []
    assert rig.outcomes() == ["needsReauth"]


def test_the_end_is_best_effort_and_idempotent(rig: Rig) -> None:
    # Given a rolled token and IMS not confirming invalidations
    rig.hand_over(rig.ims.mint())
    rig.tokens().session(RUN).access_token()
    rig.ims.confirm_invalidate = False

    # When the run ends twice (an abandon after done, say)
    rig.tokens().end(RUN, "done")
    rig.tokens().end(RUN, "abandoned")

    # Then it was invalidated once, counted as failed, and the claim is scrubbed as done
    assert len(rig.ims.invalidated) == 1
    assert rig.outcomes() == ["exchanged", "invalidateFailed"]
    assert rig.claim()["ended"] == "done" and rig.claim()["promise_token"] is None


def test_a_session_exchanges_once_per_batch_and_again_on_refresh(rig: Rig) -> None:
    rig.hand_over(rig.ims.mint())
    session = rig.tokens().session(RUN)
    first = session.access_token()
    assert session.access_token() == first  # the batch's later calls reuse it
    assert session.access_token(refresh=True) != first  # after a Semrush 401
    assert rig.outcomes() == ["exchanged", "exchanged"]
    assert "pt-" not in repr(session) and "at-" not in repr(session)
