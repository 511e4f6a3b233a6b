"""The IMS client over real HTTP to the simulator: mint, exchange, invalidate, retries, deadline."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from serenity_allocator.adapters.http_edge import ConfigurationError, redact_secret
from serenity_allocator.adapters.ims_client import (
    DEFAULT_TIMEOUT_S,
    ExchangedTokens,
    ImsClient,
    ImsClientConfig,
    ImsClientPair,
    ImsRequestError,
    MintedPromise,
    validate_ims_origin,
)
from serenity_allocator.domain.errors import (
    ImsClientRefusedError,
    ImsUnavailableError,
    MalformedExchangeError,
    NeedsReauthError,
    OutOfTimeError,
    error_code_of,
)
from serenity_tools.standins.simulator import SimulatorServer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sleeps:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.clock.now += seconds


def no_jitter() -> float:
    return 0.5


def pairs(sim: SimulatorServer) -> tuple[ImsClientPair, ImsClientPair]:
    clients = sim.ims_clients()
    return ImsClientPair(**clients["emitter"]), ImsClientPair(**clients["consumer"])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sleeps(clock: Clock) -> Sleeps:
    return Sleeps(clock)


@pytest.fixture
def ims(sim: SimulatorServer, clock: Clock, sleeps: Sleeps) -> Iterator[ImsClient]:
    emitter, consumer = pairs(sim)
    with ImsClient(
        sim.origin,
        emitter=emitter,
        consumer=consumer,
        config=ImsClientConfig(sleep=sleeps, clock=clock, jitter=no_jitter),
    ) as client:
        yield client


def test_ims_client_mints_exchanges_and_rolls(sim: SimulatorServer, ims: ImsClient) -> None:
    # Given a user with an access token
    access = sim.ims_user("u1", ["c1"])
    # When the emitter mints and the consumer exchanges twice
    minted = ims.mint(access)
    first = ims.exchange(minted.promise_token)
    second = ims.exchange(first.promise_token)
    # Then every exchange rolled the token and the exchanged one is dead
    assert minted.expires_in == 3600
    assert len({minted.promise_token, first.promise_token, second.promise_token}) == 3
    assert first.promise_token_expires_in == 3600
    with pytest.raises(NeedsReauthError) as caught:
        ims.exchange(first.promise_token)
    assert error_code_of(caught.value) == "needsReauth"
    assert [(c["op"], c["status"]) for c in sim.ims_calls()] == [
        ("ims_mint", 200),
        ("ims_exchange", 200),
        ("ims_exchange", 200),
        ("ims_exchange", 401),
    ]


def test_ims_client_invalidate_kills_the_chain_and_is_best_effort(
    sim: SimulatorServer, ims: ImsClient
) -> None:
    minted = ims.mint(sim.ims_user("u1", ["c1"]))
    rolled = ims.exchange(minted.promise_token)
    assert ims.invalidate(rolled.promise_token) is True
    with pytest.raises(NeedsReauthError):
        ims.exchange(rolled.promise_token)
    # A refused invalidate is reported, never raised
    sim.faults(fail_next=[{"op": "ims_invalidate", "status": 400}])
    assert ims.invalidate(rolled.promise_token) is False


def test_ims_client_retries_429_and_5xx_twice_1s_then_2s(
    sim: SimulatorServer, ims: ImsClient, sleeps: Sleeps
) -> None:
    minted = ims.mint(sim.ims_user("u1", ["c1"]))
    sim.faults(
        fail_next=[
            {"op": "ims_exchange", "status": 429},
            {"op": "ims_exchange", "status": 503},
        ]
    )
    assert isinstance(ims.exchange(minted.promise_token), ExchangedTokens)
    assert sleeps.calls == [1.0, 2.0]


def test_ims_client_gives_up_after_two_retries(
    sim: SimulatorServer, ims: ImsClient, sleeps: Sleeps
) -> None:
    minted = ims.mint(sim.ims_user("u1", ["c1"]))
    sim.faults(fail_next=[{"op": "ims_exchange", "status": 502, "count": 3}])
    with pytest.raises(ImsUnavailableError) as caught:
        ims.exchange(minted.promise_token)
    assert (caught.value.code, caught.value.transient) == ("imsUnavailable", True)
    assert sleeps.calls == [1.0, 2.0]
    # The faulted calls never spent the token
    assert isinstance(ims.exchange(minted.promise_token), ExchangedTokens)


def test_ims_client_retries_stop_at_the_deadline(
    sim: SimulatorServer, ims: ImsClient, sleeps: Sleeps
) -> None:
    minted = ims.mint(sim.ims_user("u1", ["c1"]))
    # Room for the 1 s pause and a whole attempt after it, not for the 2 s one and another
    ims.limit_time(1.0 + DEFAULT_TIMEOUT_S + 1.0)
    sim.faults(fail_next=[{"op": "ims_exchange", "status": 500, "count": 3}])
    with pytest.raises(ImsUnavailableError):
        ims.exchange(minted.promise_token)
    assert sleeps.calls == [1.0]


def test_ims_client_starts_an_exchange_only_with_its_whole_timeout_left(
    sim: SimulatorServer, ims: ImsClient, clock: Clock
) -> None:
    # Given a live promise and less time left than one whole exchange attempt
    minted = ims.mint(sim.ims_user("u1", ["c1"]))
    ims.limit_time(DEFAULT_TIMEOUT_S)
    clock.now += 0.01

    # When it is exchanged, nothing is sent: a shortened timeout could lose the answer of an
    # exchange IMS still processes, and the token would be spent with no successor stored
    with pytest.raises(OutOfTimeError):
        ims.exchange(minted.promise_token)
    assert [call["op"] for call in sim.ims_calls()] == ["ims_mint"]

    # Then the token is still good once a whole attempt fits
    ims.limit_time(DEFAULT_TIMEOUT_S)
    assert isinstance(ims.exchange(minted.promise_token), ExchangedTokens)


def test_ims_client_with_no_time_left_does_not_call(
    sim: SimulatorServer, ims: ImsClient, clock: Clock
) -> None:
    ims.limit_time(1.0)
    clock.now += 1.0
    with pytest.raises(OutOfTimeError):
        ims.mint("sim-ims-at-x")
    assert sim.ims_calls() == []


def test_ims_client_transport_failure_is_unavailable(sim: SimulatorServer, sleeps: Sleeps) -> None:
    emitter, _consumer = pairs(sim)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as http:
        client = ImsClient(
            "http://127.0.0.1:9",
            emitter=emitter,
            http=http,
            config=ImsClientConfig(sleep=sleeps, jitter=no_jitter),
        )
        with pytest.raises(ImsUnavailableError):
            client.mint("sim-ims-at-x")
    assert sleeps.calls == [1.0, 2.0]


def test_ims_client_a_refused_pair_is_configuration_and_a_dead_user_token_needs_reauth(
    sim: SimulatorServer, clock: Clock, sleeps: Sleeps
) -> None:
    # Given a consumer pair with a wrong (rotated) secret
    emitter, consumer = pairs(sim)
    wrong = ImsClientPair(consumer.client_id, "wrong-secret")
    client = ImsClient(
        sim.origin,
        emitter=emitter,
        consumer=wrong,
        config=ImsClientConfig(sleep=sleeps, clock=clock),
    )
    minted = client.mint(sim.ims_user("u1", ["c1"]))
    assert client.pair_refused is False
    # When it exchanges: IMS's invalid_client is the deployment's fault, never the user's
    with pytest.raises(ImsClientRefusedError) as caught:
        client.exchange(minted.promise_token)
    assert (caught.value.code, caught.value.transient) == ("imsClientRefused", True)
    assert client.pair_refused is True
    # And the promise was not touched: with the pair read again it exchanges
    client.use_consumer(consumer)
    assert client.pair_refused is False
    assert isinstance(client.exchange(minted.promise_token), ExchangedTokens)
    # A wrong emitter secret at mint is the same configuration fault
    bad_emitter = ImsClientPair(emitter.client_id, "rotated", emitter.promise_definition_id)
    with pytest.raises(ImsClientRefusedError):
        ImsClient(sim.origin, emitter=bad_emitter).mint(sim.ims_user("u1", ["c1"]))
    # While a dead user token at mint is the user's: sign in again
    with pytest.raises(NeedsReauthError):
        client.mint("sim-ims-at-expired")
    assert sleeps.calls == []  # refusals are never retried


@pytest.mark.parametrize("status", [400, 401, 403])
@pytest.mark.parametrize("error", ["invalid_client", "unauthorized_client"])
def test_ims_client_any_refusal_of_the_pair_is_configuration(status: int, error: str) -> None:
    _, consumer = ImsClientPair("e", "s", "d"), ImsClientPair("c", "s")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": error})

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        client = ImsClient("https://ims.example.com", consumer=consumer, http=http)
        with pytest.raises(ImsClientRefusedError):
            client.exchange("pt")
        assert client.invalidate("pt") is False  # best effort at the end: reported, not raised
    assert client.pair_refused is True


@pytest.mark.parametrize(
    ("draws", "retry_after", "slept"),
    [
        ([0.0, 1.0], None, [0.8, 2.4]),  # the jitter's ends: -20 %, +20 %
        ([0.5, 0.5], "3", [3.0, 3.0]),  # IMS asked for 3 s: the larger wait wins
        ([1.0, 1.0], "1", [1.2, 2.4]),  # a Retry-After shorter than the backoff
    ],
)
def test_ims_client_429_waits_retry_after_or_the_jittered_backoff(
    sim: SimulatorServer,
    clock: Clock,
    sleeps: Sleeps,
    draws: list[float],
    retry_after: str | None,
    slept: list[float],
) -> None:
    emitter, consumer = pairs(sim)
    pending = list(draws)
    client = ImsClient(
        sim.origin,
        emitter=emitter,
        consumer=consumer,
        config=ImsClientConfig(sleep=sleeps, clock=clock, jitter=lambda: pending.pop(0)),
    )
    minted = client.mint(sim.ims_user("u1", ["c1"]))
    rule: dict[str, object] = {"op": "ims_exchange", "status": 429, "count": 2}
    if retry_after is not None:
        rule["retry_after"] = int(retry_after)
    sim.faults(fail_next=[rule])
    assert isinstance(client.exchange(minted.promise_token), ExchangedTokens)
    assert sleeps.calls == pytest.approx(slept)


def test_ims_client_a_retry_after_past_the_deadline_is_not_waited(
    sim: SimulatorServer, ims: ImsClient, sleeps: Sleeps
) -> None:
    minted = ims.mint(sim.ims_user("u1", ["c1"]))
    ims.limit_time(30.0)
    sim.faults(fail_next=[{"op": "ims_exchange", "status": 429, "retry_after": 60}])
    with pytest.raises(ImsUnavailableError):
        ims.exchange(minted.promise_token)
    assert sleeps.calls == []  # 60 s asked, 30 s left: given back at once, nothing slept


def test_ims_client_400_is_a_request_error_naming_only_the_code(sim: SimulatorServer) -> None:
    emitter, _ = pairs(sim)
    bad = ImsClientPair(emitter.client_id, emitter.client_secret, "not-the-definition")
    client = ImsClient(sim.origin, emitter=bad)
    with pytest.raises(ImsRequestError) as caught:
        client.mint(sim.ims_user("u1", ["c1"]))
    assert str(caught.value) == "IMS mint answered 400 (invalid_request)"


def test_ims_client_needs_the_pair_of_its_operation(sim: SimulatorServer) -> None:
    _, consumer = pairs(sim)
    client = ImsClient(sim.origin, consumer=consumer)
    with pytest.raises(ConfigurationError, match="IMS mint needs the emitter client pair"):
        client.mint("sim-ims-at-x")
    with pytest.raises(ConfigurationError, match="promise definition"):
        ImsClient(sim.origin, emitter=consumer)


def test_ims_client_an_exchange_answer_without_an_access_token_hands_back_the_rolled_token(
    sim: SimulatorServer,
) -> None:
    _, consumer = pairs(sim)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"promise_token": "pt-rolled", "expires_in": 299})

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        client = ImsClient("https://ims.example.com", consumer=consumer, http=http)
        with pytest.raises(MalformedExchangeError) as caught:
            client.exchange("pt")
    assert caught.value.rolled == "pt-rolled"
    assert "pt-rolled" not in f"{caught.value} {caught.value!r}"


def test_ims_client_malformed_answer(sim: SimulatorServer) -> None:
    _, consumer = pairs(sim)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"access_token": "a"})

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        client = ImsClient("https://ims.example.com", consumer=consumer, http=http)
        with pytest.raises(Exception, match="IMS exchange: answer has no promise_token"):
            client.exchange("pt")


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://IMS-NA1.adobelogin.com", "https://ims-na1.adobelogin.com"),
        ("http://127.0.0.1:8765/", "http://127.0.0.1:8765"),
        # The upstream's IMS_HOST: a bare host, always HTTPS
        ("ims-na1.adobelogin.com", "https://ims-na1.adobelogin.com"),
        (" IMS-NA1.adobelogin.com ", "https://ims-na1.adobelogin.com"),
    ],
)
def test_validate_ims_origin_accepts(url: str, origin: str) -> None:
    assert validate_ims_origin(url) == origin


@pytest.mark.parametrize(
    "url",
    [
        "http://ims.example.com",
        "https://ims.example.com/ims",
        "https://user:pw@ims.example.com",
        "https://10.0.0.1",
        "ims.example.com/ims",
        "10.0.0.1",
        "",
    ],
)
def test_validate_ims_origin_refuses(url: str) -> None:
    with pytest.raises(ConfigurationError):
        validate_ims_origin(url)


def test_ims_client_no_token_or_secret_in_reprs_errors_or_logs(
    sim: SimulatorServer, ims: ImsClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Given every secret of a mint and an exchange
    caplog.set_level(logging.DEBUG)
    emitter, consumer = pairs(sim)
    access = sim.ims_user("u1", ["c1"])
    minted = ims.mint(access)
    exchanged = ims.exchange(minted.promise_token)
    secrets = [
        access,
        minted.promise_token,
        exchanged.access_token,
        exchanged.promise_token,
        emitter.client_secret,
        consumer.client_secret,
    ]
    # When they pass through reprs and the errors of refused calls
    shown = [repr(minted), repr(exchanged), repr(emitter), repr(consumer), repr(ims)]
    for call in (lambda: ims.exchange(minted.promise_token), lambda: ims.mint(access + "x")):
        with pytest.raises(NeedsReauthError) as caught:
            call()
        shown += [str(caught.value), repr(caught.value)]
    # Then none of them appears anywhere, logs included
    text = "\n".join(shown) + caplog.text
    assert [secret for secret in secrets if secret in text] == []
    assert repr(minted) == "MintedPromise(expires_in=3600)"
    assert isinstance(minted, MintedPromise)


@pytest.mark.parametrize("echo", ["error", "error_description", "message"])
def test_ims_client_error_never_repeats_an_echoed_token(
    sim: SimulatorServer, ims: ImsClient, echo: str
) -> None:
    # Given an IMS that echoes the promise token in its 400 body (once lower-cased, so it has
    # the shape of an error code)
    minted = ims.mint(sim.ims_user("u1", ["c1"]))
    token = minted.promise_token
    body = {"error": "invalid_request", echo: token}
    sim.faults(fail_next=[{"op": "ims_exchange", "status": 400, "body": body}])
    with pytest.raises(ImsRequestError) as caught:
        ims.exchange(token)
    # Then the error shows the status and at most the code, never the token
    shown = str(caught.value) + repr(caught.value)
    assert redact_secret(shown, token) == shown
    if echo != "error":
        assert str(caught.value) == "IMS exchange answered 400 (invalid_request)"


def test_ims_client_drops_an_error_code_that_is_a_sent_value() -> None:
    # A token that happens to look like a code is still never shown
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": "lowercase_token"})

    consumer = ImsClientPair("c", "s")
    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        client = ImsClient("https://ims.example.com", consumer=consumer, http=http)
        with pytest.raises(ImsRequestError) as caught:
            client.exchange("lowercase_token")
    assert (caught.value.error, str(caught.value)) == (None, "IMS exchange answered 400")


class SlowIms:
    """IMS that processes an exchange at once (its token is spent) and answers after
    ``answer_after_s``: a client whose read timeout is shorter loses the answer."""

    def __init__(self, answer_after_s: float) -> None:
        self.answer_after_s = answer_after_s
        self.spent: set[str] = set()
        self.read_timeouts: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        form = dict(item.split("=", 1) for item in request.content.decode().split("&"))
        token = form["promise_token"]
        self.read_timeouts.append(request.extensions["timeout"]["read"])
        if token in self.spent:
            return httpx.Response(401, json={"error": "invalid_promise_token"})
        self.spent.add(token)
        if request.extensions["timeout"]["read"] < self.answer_after_s:
            raise httpx.ReadTimeout("no answer in time", request=request)
        return httpx.Response(200, json={"access_token": "at-2", "promise_token": "pt-2"})


@pytest.mark.parametrize(
    ("left_s", "after_answer_s", "read_timeout_s"),
    [
        (None, 0.0, 10.0),  # no deadline: the upstream client's 10 s
        (30.0, 1.0, 10.0),
        (8.0, 1.0, 7.0),  # only into time beyond what the caller keeps after the answer
        (6.0, 3.0, DEFAULT_TIMEOUT_S),  # never below the sure timeout it started with
    ],
)
def test_ims_client_an_exchange_waits_for_a_late_answer_as_long_as_the_time_allows(
    clock: Clock, left_s: float | None, after_answer_s: float, read_timeout_s: float
) -> None:
    ims = SlowIms(answer_after_s=0.0)
    with httpx.Client(transport=httpx.MockTransport(ims)) as http:
        client = ImsClient(
            "https://ims.example.com",
            consumer=ImsClientPair("c", "s"),
            http=http,
            config=ImsClientConfig(clock=clock),
        )
        client.keep_after_answer(after_answer_s)
        client.limit_time(left_s)
        client.exchange("pt-1")
    assert ims.read_timeouts == [read_timeout_s]


def test_ims_client_a_slow_exchange_answer_does_not_spend_the_promise(
    clock: Clock, sleeps: Sleeps
) -> None:
    # Given IMS answering an exchange after 7 s (it processed it at once: the token is spent)
    ims = SlowIms(answer_after_s=7.0)
    with httpx.Client(transport=httpx.MockTransport(ims)) as http:
        client = ImsClient(
            "https://ims.example.com",
            consumer=ImsClientPair("c", "s"),
            http=http,
            config=ImsClientConfig(clock=clock, sleep=sleeps, jitter=no_jitter),
        )
        client.keep_after_answer(1.0)
        client.limit_time(30.0)
        # When the worker exchanges / Then it waits for the answer and gets the rolled token,
        # instead of timing out at 5 s, retrying, and meeting its own spent token (a 401 that
        # would read as the user's dead promise)
        assert client.exchange("pt-1").promise_token == "pt-2"
    assert ims.read_timeouts == [10.0] and sleeps.calls == []
