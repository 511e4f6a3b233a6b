"""The Semrush client's retries over real HTTP: what is retried, backoff, Retry-After, budgets.

Retries are observed in the simulator's call log and in the injected sleeps (no test waits
for a backoff).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.http_edge import ConfigurationError
from serenity_allocator.adapters.semrush import (
    MAX_RETRY_AFTER_S,
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.domain.errors import OutOfTimeError, UpstreamError, UpstreamUnavailableError
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.simulator import SimulatorServer
from tests.unit.adapters.semrush.helpers import (
    SECRET_TOKEN,
    RecordingSleep,
    calls_of,
    closed_port_origin,
    statuses_of,
    workspace_of,
)

# -- retries ------------------------------------------------------------------------------------


def test_semrush_client_transfer_retries_503_honouring_retry_after(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given two 503s with Retry-After: 1 on the transfer
    sim.faults(fail_next=[{"status": 503, "count": 2, "op": "transfer", "retry_after": 1}])
    client = make_client()

    # When the transfer is sent
    client.transfer("c1", Totals(projects=3, prompts=300))

    # Then it was retried twice, sleeping the advertised second each time, and applied once
    assert statuses_of(sim, "transfer") == [503, 503, 200]
    assert sleeps.calls == [1.0, 1.0]
    assert workspace_of(sim, "c1")["ai"]["prompts"]["total"] == 300


class SteppingClock:
    """A monotonic clock that moves only when the recorded sleep is called."""

    def __init__(self, sleeps: RecordingSleep) -> None:
        self.now = 100.0
        self._sleeps = sleeps

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self._sleeps(seconds)
        self.now += seconds


def test_semrush_client_limit_time_skips_a_retry_that_would_outlive_the_budget(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given 503s advertising Retry-After: 2 and a client limited to 3 s from now
    sim.faults(fail_next=[{"status": 503, "count": 3, "op": "transfer", "retry_after": 2}])
    clock = SteppingClock(sleeps)
    client = make_client(sleep=clock.sleep, clock=clock)
    client.limit_time(3.0)

    # When the transfer is sent
    with pytest.raises(UpstreamError) as raised:
        client.transfer("c1", Totals(projects=3, prompts=300))

    # Then it retried once (2 s fit in the budget), not a second time (2 s more would not)
    assert raised.value.status == 503
    assert statuses_of(sim, "transfer") == [503, 503]
    assert sleeps.calls == [2.0]


def test_semrush_client_limit_time_spent_refuses_before_any_request(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given a client whose time budget is already used up
    client = make_client()
    client.limit_time(0.0)

    # When a call is made / Then it is refused as out of time, and nothing reached Semrush
    with pytest.raises(OutOfTimeError):
        client.read_resources("c1")
    assert sim.calls() == []

    # And lifting the limit restores normal calls
    client.limit_time(None)
    assert client.read_resources("c1").prompts.total == 200


@pytest.mark.parametrize(
    ("op", "call"),
    [
        ("read_resources", lambda c: c.read_resources("c1")),
        ("transfer", lambda c: c.transfer("c1", Totals(projects=2, prompts=300))),
        ("status", lambda c: c.read_status("c1")),
        ("family", lambda c: c.list_family("m1")),
    ],
)
@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_semrush_client_idempotent_operations_retry_5xx_and_429(
    sim: SimulatorServer,
    make_client: Callable[..., SemrushClient],
    sleeps: RecordingSleep,
    op: str,
    call: Callable[[SemrushClient], object],
    status: int,
) -> None:
    # Given one transient failure (no Retry-After) on the operation
    sim.faults(fail_next=[{"status": status, "count": 1, "op": op}])
    client = make_client()

    # When the operation runs
    call(client)

    # Then it succeeded on the second attempt after one base backoff
    assert statuses_of(sim, op) == [status, 200]
    assert sleeps.calls == [0.5]


def test_semrush_client_gives_up_after_max_retries_with_exponential_backoff(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given a read that keeps failing with a bare HTML 502
    sim.faults(fail_next=[{"status": 502, "count": 10, "op": "read_resources"}])
    client = make_client(max_retries=3, backoff_s=0.5)

    # When it is read
    with pytest.raises(UpstreamError) as raised:
        client.read_resources("c1")

    # Then 1 + 3 attempts were made, backing off 0.5, 1, 2, and the last answer is reported
    assert statuses_of(sim, "read_resources") == [502] * 4
    assert sleeps.calls == [0.5, 1.0, 2.0]
    assert raised.value.status == 502
    assert "Bad Gateway" in raised.value.body


def test_semrush_client_backoff_and_retry_after_are_capped(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given a long Retry-After on a 429, then 500s with a large base backoff
    sim.faults(
        fail_next=[
            {"status": 429, "count": 1, "op": "status", "retry_after": 600},
            {"status": 500, "count": 3, "op": "status"},
        ]
    )
    client = make_client(max_retries=4, backoff_s=5.0)

    # When the status is read
    assert client.read_status("c1") == "created"

    # Then the Retry-After is capped, and the backoff doubles up to its ceiling
    assert sleeps.calls == [MAX_RETRY_AFTER_S, 8.0, 8.0, 8.0]


def test_semrush_client_exhausted_429_reports_the_rate_limit(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given a rate limiter that never lets the transfer through
    sim.faults(fail_next=[{"status": 429, "count": 10, "op": "transfer", "retry_after": 2}])
    client = make_client(max_retries=2)

    # When the transfer is sent
    with pytest.raises(UpstreamError) as raised:
        client.transfer("c1", Totals(projects=3, prompts=300))

    # Then the 429 surfaces after the retries (the domain maps it to rateLimited)
    assert raised.value.status == 429
    assert statuses_of(sim, "transfer") == [429, 429, 429]
    assert sleeps.calls == [2.0, 2.0]


def test_semrush_client_create_child_is_not_retried_on_5xx(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given a 503 on the (non-idempotent) creation
    sim.faults(fail_next=[{"status": 503, "count": 1, "op": "create_child", "retry_after": 1}])
    client = make_client()

    # When a child is created
    with pytest.raises(UpstreamError) as raised:
        client.create_child("m1", "Maybe created")

    # Then exactly one POST was made: a second could create a second child
    assert raised.value.status == 503
    assert statuses_of(sim, "create_child") == [503]
    assert sleeps.calls == []


def test_semrush_client_create_child_is_retried_on_429(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given a 429: the rate limiter refused the request before anything was created
    sim.faults(fail_next=[{"status": 429, "count": 1, "op": "create_child"}])
    client = make_client()

    # When a child is created
    child = client.create_child("m1", "Rate limited once")

    # Then the retry created exactly one child
    assert statuses_of(sim, "create_child") == [429, 200]
    assert sleeps.calls == [0.5]
    assert [w["id"] for w in sim.dump()["workspaces"] if w["parent_id"] == "m1"].count(
        child.id
    ) == 1


def test_semrush_client_timeout_is_retried_then_unavailable(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given an upstream that holds every request longer than the client's timeout
    sim.faults(error_rate={"timeout": 1.0}, timeout_hold_ms=500)
    client = make_client(timeout_s=0.2, max_retries=1)

    # When the status is read
    with pytest.raises(UpstreamUnavailableError) as raised:
        client.read_status("c1")

    # Then both attempts timed out, with a backoff between them, and the cause is kept
    assert isinstance(raised.value.__cause__, httpx.TimeoutException)
    assert len(calls_of(sim, "status")) == 2
    assert sleeps.calls == [0.5]


def test_semrush_client_create_child_timeout_is_not_retried(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given an upstream that holds the creation past the client's timeout (it may still act)
    sim.faults(error_rate={"timeout": 1.0}, timeout_hold_ms=500)
    client = make_client(timeout_s=0.2)

    # When a child is created
    with pytest.raises(UpstreamUnavailableError):
        client.create_child("m1", "Slow")

    # Then there was a single attempt
    assert len(calls_of(sim, "create_child")) == 1
    assert sleeps.calls == []


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.read_resources("c1"),
        lambda c: c.transfer("c1", Totals(projects=1, prompts=100)),
        lambda c: c.create_child("m1", "x"),
    ],
)
def test_semrush_client_connection_refused_is_retried_then_unavailable(
    sleeps: RecordingSleep, call: Callable[[SemrushClient], object]
) -> None:
    # Given nothing listening at the origin (a refused connect never reached any server, so
    # even the creation may retry it)
    client = SemrushClient(
        closed_port_origin(),
        StaticTokenProvider(SECRET_TOKEN),
        config=SemrushClientConfig(max_retries=2, sleep=sleeps),
    )

    # When the operation runs
    with client, pytest.raises(UpstreamUnavailableError) as raised:
        call(client)

    # Then it retried with backoff and reported the upstream unreachable
    assert sleeps.calls == [0.5, 1.0]
    assert isinstance(raised.value.__cause__, httpx.ConnectError)
    assert raised.value.code == "upstreamUnavailable"


@pytest.mark.parametrize(
    "settings",
    [{"timeout_s": 0}, {"max_retries": -1}, {"backoff_s": -0.5}],
)
def test_semrush_client_rejects_impossible_retry_settings(settings: dict[str, Any]) -> None:
    # Given a non-positive timeout or negative retry settings
    # When a client is built
    # Then it is a configuration error
    with pytest.raises(ConfigurationError):
        SemrushClient(
            "https://www.semrush.com",
            StaticTokenProvider(SECRET_TOKEN),
            config=SemrushClientConfig(**settings),
        )


# -- the bound of one call ----------------------------------------------------------------------


def _slow_upstream(clock: SteppingClock, seconds: float) -> httpx.Client:
    """A real HTTP client whose every answer costs ``seconds`` on the injected clock."""

    def spend(_response: httpx.Response) -> None:
        clock.now += seconds

    return httpx.Client(event_hooks={"response": [spend]})


def test_semrush_client_call_without_a_deadline_outlasts_the_backoff_bound(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given the default budget (15 s, 2 retries), an upstream whose every answer takes the whole
    # timeout and three 429s advertising Retry-After: 10, and no deadline
    sim.faults(fail_next=[{"status": 429, "count": 3, "op": "status", "retry_after": 10}])
    clock = SteppingClock(sleeps)
    with _slow_upstream(clock, 15.0) as http:
        client = make_client(
            http=http, timeout_s=15.0, max_retries=2, sleep=clock.sleep, clock=clock
        )

        # When the status is read
        with pytest.raises(UpstreamError) as raised:
            client.read_status("c1")

    # Then it slept the advertised 10 s twice: 3 x 15 s + 2 x 10 s = 65 s, not the 46.5 s of
    # timeouts and backoff alone (the Allocator's timeout is 60 s)
    assert raised.value.status == 429
    assert sleeps.calls == [10.0, 10.0]
    assert clock.now - 100.0 == 65.0
    assert client.max_call_duration_s == 46.5


def test_semrush_client_call_ends_inside_its_deadline_despite_retry_after(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given the same slow, rate-limited upstream and a client limited to 50 s from now
    sim.faults(fail_next=[{"status": 429, "count": 3, "op": "status", "retry_after": 10}])
    clock = SteppingClock(sleeps)
    with _slow_upstream(clock, 15.0) as http:
        client = make_client(
            http=http, timeout_s=15.0, max_retries=2, sleep=clock.sleep, clock=clock
        )
        client.limit_time(50.0)

        # When the status is read
        with pytest.raises(UpstreamError) as raised:
            client.read_status("c1")

    # Then the second 10 s pause was not taken (it would leave no time for a request): the call
    # ended at 40 s, inside its 50 s deadline, after two attempts
    assert raised.value.status == 429
    assert statuses_of(sim, "status") == [429, 429]
    assert sleeps.calls == [10.0]
    assert clock.now - 100.0 == 40.0
