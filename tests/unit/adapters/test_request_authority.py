"""The request session adapter and the Semrush token holder, over in-memory fakes.

The real path (moto + simulator) is tests/integration/test_allocator_credentials.py; these pin
the failure mapping that is awkward to provoke over the wire.
"""

from __future__ import annotations

import base64
import json
import threading

import pytest

from serenity_allocator.adapters.credential_store import (
    PLAINTEXT_NOT_TEXT,
    CredentialGoneError,
    CredentialRecordNotOwnedError,
    CredentialRecordUnreadableError,
    CredentialStoreError,
    StoredCredential,
    TokenCipherError,
)
from serenity_allocator.adapters.ims_client import ExchangedTokens
from serenity_allocator.adapters.request_authority import (
    ImsCredentialBroker,
    RequestTokenHolder,
    UnboundTokenError,
    token_user,
)
from serenity_allocator.domain.errors import (
    CredentialNotOwnedError,
    CredentialStoreUnavailableError,
    CredentialUnreadableError,
    MalformedExchangeError,
    NoCredentialError,
)
from serenity_allocator.domain.model import CredentialEnd, TokenFreshness
from tests.fakes import FakeClock


class FakeStore:
    def __init__(self) -> None:
        self.tokens: dict[str, str] = {"r-1": "pt-0"}
        self.read_error: Exception | None = None
        self.roll_error: Exception | None = None
        self.scrub_error: Exception | None = None
        self.scrubbed: list[str] = []

    def read(self, request_id: str, workspace_id: str) -> StoredCredential | None:
        if self.read_error is not None:
            raise self.read_error
        token = self.tokens.get(request_id)
        return None if token is None else StoredCredential(request_id, workspace_id, token, 9)

    def roll(self, request_id: str, workspace_id: str, promise_token: str) -> None:
        if self.roll_error is not None:
            raise self.roll_error
        self.tokens[request_id] = promise_token

    def scrub(self, request_id: str) -> None:
        if self.scrub_error is not None:
            raise self.scrub_error
        self.tokens.pop(request_id, None)
        self.scrubbed.append(request_id)


class FakeIms:
    def __init__(self) -> None:
        self.exchanged: list[str] = []
        self.invalidated: list[str] = []
        self.confirm = True
        self.expires_in: int | None = None

    def exchange(self, promise_token: str) -> ExchangedTokens:
        self.exchanged.append(promise_token)
        n = len(self.exchanged)
        return ExchangedTokens(f"at-{n}", f"pt-{n}", expires_in=self.expires_in)

    def invalidate(self, promise_token: str) -> bool:
        self.invalidated.append(promise_token)
        return self.confirm


def _broker() -> tuple[ImsCredentialBroker, FakeStore, FakeIms, RequestTokenHolder]:
    store, ims, holder = FakeStore(), FakeIms(), RequestTokenHolder()
    broker = ImsCredentialBroker(store, ims, holder)
    holder.broker = broker
    return broker, store, ims, holder


def test_holder_exchanges_again_before_a_call_the_access_token_would_not_outlive() -> None:
    # Given a session whose exchange answered expires_in 299 s, and Semrush calls of up to 10 s
    clock = FakeClock()
    store, ims, holder = FakeStore(), FakeIms(), RequestTokenHolder()
    ims.expires_in = 299
    broker = ImsCredentialBroker(store, ims, holder, TokenFreshness(clock, 10.0))
    holder.broker = broker
    session = broker.open("r-1", "ws-1")
    broker.bind(session)

    # When calls come 288 s after the exchange (a 10 s call ends inside it), then 289 s
    clock.advance(288.0)
    at_288 = holder.get_token()
    clock.advance(1.0)
    at_289 = holder.get_token()

    # Then the first is the exchanged token; the second was exchanged again first, its roll
    # stored, and serves 299 s from its own exchange
    assert (at_288, at_289) == ("at-1", "at-2")
    assert (ims.exchanged, store.tokens["r-1"]) == (["pt-0", "pt-1"], "pt-2")
    clock.advance(288.0)
    assert holder.get_token() == "at-2"


def test_an_exchange_answer_without_an_access_token_keeps_its_rolled_promise() -> None:
    # Given IMS answering an exchange 200 with the rolled promise token but no access token
    # (IMS processed it: the stored token is spent, the rolled one is the promise's only life)
    store, holder = FakeStore(), RequestTokenHolder()

    class HalfAnswer(FakeIms):
        def exchange(self, promise_token: str) -> ExchangedTokens:
            self.exchanged.append(promise_token)
            raise MalformedExchangeError("pt-rolled")

    broker = ImsCredentialBroker(store, HalfAnswer(), holder)

    # When the request opens its session / Then it fails for now (it comes back) ...
    with pytest.raises(MalformedExchangeError) as caught:
        broker.open("r-1", "ws-1")
    # ... with the rolled token on its record, not the spent one; nothing said of the token
    assert store.tokens["r-1"] == "pt-rolled"
    assert "pt-rolled" not in str(caught.value) and "pt-rolled" not in repr(caught.value)


def test_holder_unbound_fails_closed() -> None:
    with pytest.raises(UnboundTokenError):
        RequestTokenHolder().get_token()


def test_open_exchanges_and_rolls_before_anything_is_bound() -> None:
    broker, store, ims, holder = _broker()
    session = broker.open("r-1", "c1")
    assert (ims.exchanged, store.tokens["r-1"]) == (["pt-0"], "pt-1")
    assert holder.bound is None
    broker.bind(session)
    assert holder.get_token() == "at-1"
    # A refresh (after a Semrush 401) exchanges the rolled token and stores the next one
    assert holder.get_token(refresh=True) == "at-2"
    assert (ims.exchanged, store.tokens["r-1"]) == (["pt-0", "pt-1"], "pt-2")
    assert "at-" not in repr(session) and "pt-" not in repr(session) + repr(holder)


def test_open_without_a_record_is_no_credential() -> None:
    broker, _, ims, _ = _broker()
    with pytest.raises(NoCredentialError):
        broker.open("r-absent", "c1")
    assert ims.exchanged == []


@pytest.mark.parametrize(
    "error",
    [
        TokenCipherError("Decrypt", "InvalidCiphertextException"),
        TokenCipherError("Decrypt", "IncorrectKeyException"),
        TokenCipherError("Decrypt", PLAINTEXT_NOT_TEXT),
        CredentialRecordUnreadableError("r-1", "expires_at"),
    ],
    ids=["invalid-ciphertext", "incorrect-key", "plaintext-not-text", "malformed-attribute"],
)
def test_open_of_a_record_that_cannot_be_read_is_credential_unreadable(error: Exception) -> None:
    # Given a record the worker cannot read (issue 36 item 3: was noCredential, or retried
    # five times as credentialStoreUnavailable, or a traceback)
    broker, store, ims, _ = _broker()
    store.read_error = error

    # When its session opens / Then it is refused with its own terminal code, nothing exchanged
    with pytest.raises(CredentialUnreadableError):
        broker.open("r-1", "c1")
    assert ims.exchanged == []


def test_open_of_another_childs_record_is_a_request_id_conflict() -> None:
    # Given the record under this request id written for another child (the id reused)
    broker, store, ims, _ = _broker()
    store.read_error = CredentialRecordNotOwnedError("r-1")

    # When its session opens / Then it is refused as the id's conflict, nothing exchanged
    with pytest.raises(CredentialNotOwnedError) as refused:
        broker.open("r-1", "c1")
    assert refused.value.code == "requestIdConflict"
    assert ims.exchanged == []


@pytest.mark.parametrize(
    "error",
    [TokenCipherError("Decrypt", "ThrottlingException"), CredentialStoreError("read", "r-1", "x")],
)
def test_open_with_the_store_down_is_transient(error: Exception) -> None:
    broker, store, ims, _ = _broker()
    store.read_error = error
    with pytest.raises(CredentialStoreUnavailableError):
        broker.open("r-1", "c1")
    assert ims.exchanged == []


def test_a_roll_whose_record_is_gone_invalidates_the_fresh_chain() -> None:
    broker, store, ims, holder = _broker()
    store.roll_error = CredentialGoneError("r-1")
    with pytest.raises(NoCredentialError):
        broker.open("r-1", "c1")
    assert ims.invalidated == ["pt-1"]
    assert holder.bound is None


THROTTLED = (
    CredentialStoreError("roll", "r-1", "ProvisionedThroughputExceededException"),
    TokenCipherError("Encrypt", "ThrottlingException"),
)


@pytest.mark.parametrize("error", THROTTLED)
def test_a_roll_throttled_once_is_stored_by_the_second_attempt(error: Exception) -> None:
    broker, store, ims, _ = _broker()
    failures = [error]

    def throttled_once(request_id: str, workspace_id: str, token: str) -> None:
        if failures:
            raise failures.pop()
        store.tokens[request_id] = token

    store.roll = throttled_once  # type: ignore[method-assign]
    session = broker.open("r-1", "c1")
    assert (session.roll_stored, store.tokens["r-1"], ims.invalidated) == (True, "pt-1", [])


@pytest.mark.parametrize("error", THROTTLED)
def test_a_roll_that_cannot_be_stored_goes_on_with_the_token_in_hand(error: Exception) -> None:
    # Given DynamoDB or KMS throttling every store of the rolled token in this attempt
    broker, store, ims, holder = _broker()
    store.roll_error = error
    # When the session is opened, it opens all the same: the access token in hand is good
    session = broker.open("r-1", "c1")
    broker.bind(session)
    assert (holder.get_token(), session.roll_stored, ims.invalidated) == ("at-1", False, [])
    # Then a retryable failure stores the roll again before the record comes back
    store.roll_error = None
    broker.keep(session)
    assert (store.tokens["r-1"], session.roll_stored) == ("pt-1", True)
    # And the next receive exchanges that stored token: no needsReauth for our store's trouble
    broker.open("r-1", "c1")
    assert ims.exchanged == ["pt-0", "pt-1"]


def test_a_roll_never_stored_ends_the_chain_at_the_terminal_state() -> None:
    broker, store, ims, _ = _broker()
    store.roll_error = THROTTLED[0]
    session = broker.open("r-1", "c1")
    assert broker.end("r-1", "c1", session) == CredentialEnd(True)
    # The chain's head is the rolled token (the stored one is spent): invalidating it ends it
    assert (ims.invalidated, store.scrubbed) == (["pt-1"], ["r-1"])


def test_an_unanswered_roll_goes_on_and_keeps_the_chain_alive() -> None:
    # Given DynamoDB timing out on the roll after applying it (the answer was lost), twice
    broker, store, ims, _holder = _broker()

    def roll_lands_then_times_out(request_id: str, workspace_id: str, token: str) -> None:
        store.tokens[request_id] = token
        raise CredentialStoreError("roll", request_id, "ReadTimeoutError", unanswered=True)

    store.roll = roll_lands_then_times_out  # type: ignore[method-assign]
    # When the session is opened, the request goes on with its access token
    session = broker.open("r-1", "c1")
    assert (session.roll_stored, ims.invalidated, store.tokens["r-1"]) == (False, [], "pt-1")
    # Then the next receive exchanges the token that landed
    del store.roll
    broker.keep(session)
    broker.open("r-1", "c1")
    assert ims.exchanged == ["pt-0", "pt-1"]


def test_the_user_is_read_from_the_access_tokens_claims_else_none() -> None:
    claims = base64.urlsafe_b64encode(json.dumps({"user_id": "u-7@AdobeID"}).encode())
    jwt = f"eyJhbGciOiJSUzI1NiJ9.{claims.decode().rstrip('=')}.c2ln"
    assert token_user(jwt) == "u-7@AdobeID"
    assert token_user("opaque-token") is None
    assert token_user("a.not-base64-json!.c") is None
    assert token_user("a." + base64.urlsafe_b64encode(b'{"user_id": 7}').decode() + ".c") is None


def test_end_invalidates_the_current_token_and_scrubs() -> None:
    broker, store, ims, holder = _broker()
    session = broker.open("r-1", "c1")
    broker.bind(session)
    assert broker.end("r-1", "c1", session) == CredentialEnd(True)
    assert (ims.invalidated, store.scrubbed, holder.bound) == (["pt-1"], ["r-1"], None)


def test_end_without_a_session_invalidates_the_stored_token() -> None:
    broker, store, ims, _ = _broker()
    ims.confirm = False
    assert broker.end("r-1", "c1", None) == CredentialEnd(False)
    assert (ims.invalidated, store.scrubbed) == (["pt-0"], ["r-1"])


def test_end_reports_a_failed_scrub_and_never_raises() -> None:
    broker, store, ims, _ = _broker()
    store.scrub_error = CredentialStoreError("scrub", "r-1", "AccessDeniedException")
    assert broker.end("r-1", None, None) == CredentialEnd(None, "AccessDeniedException")
    assert ims.invalidated == []  # no child known: the stored token cannot be decrypted


def test_exchange_stores_nothing_until_the_roll_is_stored() -> None:
    broker, store, ims, _ = _broker()
    session = broker.exchange("r-1", "c1")
    # The session is usable at once; the record still holds the token just spent
    assert (session.access_token, session.roll_stored, store.tokens["r-1"]) == (
        "at-1",
        False,
        "pt-0",
    )
    broker.store_roll(session)
    assert (session.roll_stored, store.tokens["r-1"], ims.invalidated) == (True, "pt-1", [])


def test_a_re_exchange_stores_after_a_roll_still_under_way() -> None:
    # Given the open's roll blocked in flight with the first rolled token
    broker, store, _, _ = _broker()
    session = broker.exchange("r-1", "c1")
    release = threading.Event()
    entered = threading.Event()
    stored = store.roll

    def slow_first(request_id: str, workspace_id: str, token: str) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(5.0)
        stored(request_id, workspace_id, token)

    store.roll = slow_first  # type: ignore[method-assign]
    beside = threading.Thread(target=broker.store_roll, args=(session,))
    beside.start()
    assert entered.wait(5.0)
    # When the request re-exchanges meanwhile (a 401), and only then the first store lands
    timer = threading.Timer(0.2, release.set)
    timer.start()
    assert broker.refresh(session) == "at-2"
    beside.join(5.0)
    # Then the record holds the chain's head, never the token the re-exchange spent
    assert (store.tokens["r-1"], session.roll_stored) == ("pt-2", True)
