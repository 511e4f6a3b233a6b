"""The rules of a run's token on its claim, with in-memory fakes (the wire is in the integration).

Races between two invocations of one run, a hand-over beside a live token, and the best effort
of the end, which the simulator cannot stage at the exact moment they matter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from serenity_allocator.application.sweep.ports import StoredCheckpoint
from serenity_allocator.application.sweep.run_tokens import RunTokens, hand_over_run_token
from serenity_allocator.domain.errors import (
    ImsUnavailableError,
    MalformedExchangeError,
    NeedsReauthError,
    SemrushScopeMissingError,
)
from serenity_allocator.domain.model import TokenFreshness
from serenity_allocator.domain.observations import CredentialOutcome
from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    RunInProgressError,
    SweepImsUnavailableError,
    SweepNeedsReauthError,
    SweepNoCredentialError,
)
from serenity_allocator.domain.sweep.run_claim import run_claim_name
from tests.fakes import FakeClock, InMemoryCheckpointStore, RecordingObserver

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
    expires_in: int | None = 299
    scopes: tuple[str, ...] = ("openid", "semrush")

    def lacks_scope(self, scope: str) -> bool:
        return scope not in self.scopes


@dataclass
class FakeIms:
    """A chain of promise tokens: each exchange kills the token given and answers a new one."""

    alive: set[str] = field(default_factory=set)
    invalidated: list[str] = field(default_factory=list)
    confirm_invalidate: bool = True
    on_exchange: list[object] = field(default_factory=list)
    counter: int = 0
    expires_in: int | None = 299
    scopes: tuple[str, ...] = ("openid", "semrush")

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
        return Exchanged(f"at-{self.counter}", self.mint(), self.expires_in, self.scopes)

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
    clock: FakeClock = field(default_factory=FakeClock)

    def tokens(self, call_s: float = 10.0) -> RunTokens:
        freshness = TokenFreshness(self.clock, call_s)
        return RunTokens(self.store, self.cipher, self.ims, self.observer, freshness)

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


def test_a_session_exchanges_again_before_a_call_its_access_token_would_not_outlive(
    rig: Rig,
) -> None:
    # Given a batch whose access token lives 299 s (IMS's expires_in) and calls of up to 10 s
    rig.hand_over(rig.ims.mint())
    session = rig.tokens(call_s=10.0).session(RUN)
    first = session.access_token()

    # When the batch goes on to 288 s after the exchange: a 10 s call still ends inside it
    rig.clock.advance(288.0)
    assert session.access_token() == first
    # And at 289 s one would end at 299 s, when the token dies: exchanged and rolled first
    rig.clock.advance(1.0)
    second = session.access_token()

    # Then the new access token serves on, and the claim holds the newest roll
    assert second != first
    assert rig.outcomes() == ["exchanged", "exchanged"]
    assert rig.ims.alive == {f"pt-{rig.ims.counter}"}


@pytest.mark.parametrize(("expires_in", "fresh_for_s"), [(None, 299 - 10), (60, 60 - 10), (0, 0)])
def test_an_access_tokens_lifetime_is_imss_expires_in_or_the_documented_299_s(
    rig: Rig, expires_in: int | None, fresh_for_s: int
) -> None:
    # Given IMS answering an exchange with this expires_in (none: the documented 299 s)
    rig.ims.expires_in = expires_in
    rig.hand_over(rig.ims.mint())
    session = rig.tokens(call_s=10.0).session(RUN)
    first = session.access_token()

    # Then it is reused until a 10 s call would outlive it, and not one second longer
    if fresh_for_s > 0:
        rig.clock.advance(fresh_for_s - 0.5)
        assert session.access_token() == first
        rig.clock.advance(0.5)
    assert session.access_token() != first


# ---- what a claim without a usable token says, and what ending it does ----------------------

CLAIM = run_claim_name(RUN)
SCRUBBED = {"run_id": RUN, "promise_token": None, "handover": None}


def _no_credential(rig: Rig, *, counted: bool = True) -> SweepNoCredentialError:
    with pytest.raises(SweepNoCredentialError) as caught:
        rig.tokens().session(RUN).access_token()
    assert caught.value.run_id == RUN
    # A ciphertext that is not base64 fails before the outcome is counted (decrypting it)
    assert rig.outcomes() == (["noCredential"] if counted else [])
    return caught.value


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (None, "no token was handed over for it"),
        ({"run_id": RUN}, "its claim holds no token"),
        ({"run_id": RUN, "ended": "done"}, "its token was scrubbed when the run stopped (done)"),
        ({"run_id": RUN, "junk": 1}, "its claim is unreadable: it breaks the claim schema"),
        (
            {"run_id": "rs-other", "promise_token": "cHQ="},
            "its claim is unreadable: it belongs to another run",
        ),
        ({"run_id": RUN, "promise_token": "not base64!"}, "its token is not valid base64"),
        # base64 of "pt" with a character outside the alphabet: refused, never skipped over
        ({"run_id": RUN, "promise_token": "cH*Q="}, "its token is not valid base64"),
    ],
)
def test_an_exchange_without_a_usable_token_says_why(
    rig: Rig, body: dict[str, Any] | None, why: str
) -> None:
    if body is not None:
        rig.store.save(CLAIM, body, expected_etag=None)

    refused = _no_credential(rig, counted="base64" not in why)

    assert str(refused).startswith(f"run 'rs-unit-1' holds no promise token ({why}); ")


@dataclass
class CorruptClaimStore(InMemoryCheckpointStore):
    """Reads the claim as the S3 store reads a body that is not JSON: corrupt, with its etag."""

    def load(self, run_id: str) -> StoredCheckpoint | None:
        if run_id == CLAIM and run_id in self.objects:
            raise CheckpointCorruptError(run_id, "not valid JSON", etag=self.objects[run_id][1])
        return super().load(run_id)

    def __post_init__(self) -> None:
        InMemoryCheckpointStore.__init__(self)


def test_an_exchange_over_a_corrupt_claim_names_its_problem() -> None:
    rig = Rig(store=CorruptClaimStore())
    rig.store.save(CLAIM, {"run_id": RUN}, expected_etag=None)

    refused = _no_credential(rig)

    assert "(its claim is unreadable: not valid JSON)" in str(refused)


@pytest.mark.parametrize(
    "body", [{"run_id": RUN, "junk": 1}, {"run_id": "rs-other"}, {"run_id": RUN}]
)
def test_ending_a_run_scrubs_a_claim_that_breaks_its_schema_or_holds_no_token(
    rig: Rig, body: dict[str, Any]
) -> None:
    rig.store.save(CLAIM, body, expected_etag=None)

    rig.tokens().end(RUN, "abandoned")

    assert rig.claim() == {**SCRUBBED, "ended": "abandoned"}


def test_ending_a_run_scrubs_a_corrupt_claim_in_the_version_read() -> None:
    store = CorruptClaimStore()
    rig = Rig(store=store)
    store.save(CLAIM, {"run_id": RUN}, expected_etag=None)

    rig.tokens().end(RUN, "done")

    assert store.objects[CLAIM][0] == {**SCRUBBED, "ended": "done"}


class RacingStore(InMemoryCheckpointStore):
    """Runs ``before_save`` once, just before the next save of the claim (a concurrent write)."""

    def __init__(self) -> None:
        super().__init__()
        self.before_save: Callable[[], None] | None = None

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        hook, self.before_save = self.before_save, None
        if hook is not None and run_id == CLAIM:
            hook()
        return super().save(run_id, body, expected_etag=expected_etag)


def test_a_handover_that_loses_its_race_is_a_run_in_progress() -> None:
    store = RacingStore()
    rig = Rig(store=store)
    rig.hand_over("pt-first")
    store.before_save = lambda: rig.hand_over("pt-meanwhile")

    with pytest.raises(RunInProgressError) as caught:
        rig.hand_over("pt-late")

    assert caught.value.run_id == RUN


def test_a_scrub_that_loses_its_race_reads_the_claim_again_and_scrubs_it() -> None:
    # Given a claim whose first scrub write loses to a handover landing meanwhile
    store = RacingStore()
    rig = Rig(store=store)
    rig.hand_over(rig.ims.mint())
    meanwhile = rig.ims.mint()
    store.before_save = lambda: rig.hand_over(meanwhile)

    # When the run ends
    rig.tokens().end(RUN, "done")

    # Then the claim is scrubbed, and the token handed over meanwhile invalidated too
    assert rig.claim() == {**SCRUBBED, "ended": "done"}
    assert meanwhile in rig.ims.invalidated


def test_a_roll_or_a_dead_promise_lost_to_another_invocation_names_the_run(rig: Rig) -> None:
    rig.hand_over(rig.ims.mint())
    rig.ims.on_exchange.append(lambda: rig.hand_over("pt-written-meanwhile"))
    with pytest.raises(RunInProgressError) as rolled:
        rig.tokens().session(RUN).access_token()
    assert rolled.value.run_id == RUN

    rig.ims.on_exchange[:] = [lambda: rig.hand_over(rig.ims.mint())]
    with pytest.raises(RunInProgressError) as dead:
        rig.tokens().session(RUN).access_token()  # the handover meanwhile was never alive
    assert dead.value.run_id == RUN


def test_a_dead_promise_names_its_run(rig: Rig) -> None:
    rig.hand_over("pt-never-alive")

    with pytest.raises(SweepNeedsReauthError) as caught:
        rig.tokens().session(RUN).access_token()

    assert caught.value.run_id == RUN


def test_ims_unavailable_at_exchange_keeps_the_claim_and_names_the_run(rig: Rig) -> None:
    rig.hand_over(rig.ims.mint())
    before = rig.claim()

    def unavailable() -> None:
        raise ImsUnavailableError()

    rig.ims.on_exchange.append(unavailable)
    with pytest.raises(SweepImsUnavailableError) as caught:
        rig.tokens().session(RUN).access_token()

    assert caught.value.run_id == RUN
    assert rig.outcomes() == ["imsUnavailable"]
    assert rig.claim() == before


def test_a_batch_without_a_handover_invalidates_nothing(rig: Rig) -> None:
    rig.hand_over(rig.ims.mint())
    rig.tokens().session(RUN).access_token()

    rig.tokens().session(RUN).access_token()

    assert rig.ims.invalidated == []
    assert rig.outcomes() == ["exchanged", "exchanged"]


def test_an_invalidation_that_raises_is_counted_as_failed(rig: Rig) -> None:
    rig.hand_over(rig.ims.mint())
    rig.tokens().session(RUN).access_token()

    def refuse(promise_token: str) -> bool:
        raise ImsUnavailableError()

    rig.ims.invalidate = refuse  # type: ignore[method-assign]
    rig.tokens().end(RUN, "done")

    assert rig.outcomes() == ["exchanged", "invalidateFailed"]
    assert rig.claim() == {**SCRUBBED, "ended": "done"}


def test_a_token_without_the_semrush_scope_stops_the_batch_keeping_the_rolled_token(
    rig: Rig,
) -> None:
    # Given IMS exchanging the run's token into one without the semrush scope (the wrong pair)
    rig.ims.scopes = ("openid",)
    rig.hand_over(rig.ims.mint())

    # When the batch asks for its token / Then it stops as configuration, not a dead promise
    with pytest.raises(SemrushScopeMissingError):
        rig.tokens().session(RUN).access_token()
    # And the claim holds the rolled token, alive: the run resumes once the pair is fixed
    rolled = f"pt-{rig.ims.counter}"
    assert rig.ims.alive == {rolled} and rig.ims.invalidated == []
    assert rig.outcomes() == ["semrushScopeMissing"]
    rig.ims.scopes = ("semrush",)
    assert rig.tokens().session(RUN).access_token() == f"at-{rig.ims.counter - 1}"


def test_an_exchange_answer_without_an_access_token_keeps_its_roll_on_the_claim(
    rig: Rig,
) -> None:
    # Given IMS rolling the run's token but answering no access token
    rig.hand_over(rig.ims.mint())

    def half_answer() -> None:
        raise MalformedExchangeError(rig.ims.mint())

    rig.ims.on_exchange.append(half_answer)

    # When the batch asks / Then it stops for now (IMS unavailable), naming the run
    with pytest.raises(SweepImsUnavailableError):
        rig.tokens().session(RUN).access_token()
    # And the claim holds the rolled token (pt-2): the next batch exchanges it, not pt-1
    rig.ims.on_exchange.clear()
    assert rig.tokens().session(RUN).access_token() == "at-2"
    assert "pt-2" not in rig.ims.alive and "pt-1" in rig.ims.alive
    assert rig.outcomes() == ["imsUnavailable", "exchanged"]
