"""The Semrush client over real HTTP against the in-process simulator, and the token providers.

Retries are observed in the simulator's call log and in the injected sleeps (no test waits for a
backoff). Secrets Manager is a moto server on an ephemeral port, reached through
``AWS_ENDPOINT_URL`` as a deployed function would reach the real service.
"""

from __future__ import annotations

import json
import logging
import socket
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from serenity_allocator.adapters.semrush_client import MAX_RETRY_AFTER_S, SemrushClient
from serenity_allocator.adapters.semrush_origin import API_PATH, ConfigurationError
from serenity_allocator.adapters.token_provider import (
    SecretsManagerTokenProvider,
    StaticTokenProvider,
    TokenProviderError,
)
from serenity_allocator.domain.errors import (
    MalformedResponseError,
    OutOfTimeError,
    UpstreamError,
    UpstreamUnavailableError,
    WiringError,
)
from serenity_allocator.domain.model import Totals, WorkspaceRecord
from serenity_tools.standins.simulator import SimulatorServer

SECRET_TOKEN = "tok-SECRET-123"

FAMILY: list[dict[str, Any]] = [
    {
        "id": "m1",
        "title": "Org",
        "parent_id": None,
        "limits_enabled": True,
        "ai": {
            "projects": {"used": 0, "drafted": 0, "total": 100},
            "prompts": {"used": 0, "drafted": 0, "total": 20000},
        },
    },
    {
        "id": "c1",
        "title": "Brand one",
        "parent_id": "m1",
        "ai": {
            "projects": {"used": 1, "drafted": 0, "total": 2},
            "prompts": {"used": 150, "drafted": 20, "total": 200},
        },
    },
    {
        "id": "c2",
        "title": "Unmetered brand",
        "parent_id": "m1",
        "limits_enabled": False,
        "ai": {"projects": {"used": 0, "total": 1}, "prompts": {"used": 0, "total": 100}},
    },
]


class RecordingSleep:
    """The injected sleep: records every requested pause and never waits."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


class RotatingTokenProvider:
    """Hands out a stale token until asked to refresh, then the fresh one."""

    def __init__(self, stale: str, fresh: str) -> None:
        self.current = stale
        self.fresh = fresh
        self.refreshes = 0

    def get_token(self, *, refresh: bool = False) -> str:
        if refresh:
            self.refreshes += 1
            self.current = self.fresh
        return self.current


@pytest.fixture
def sim(simulator: SimulatorServer) -> SimulatorServer:
    # The session's simulator (tests/conftest.py), reset and seeded with this module's family.
    simulator.reset()
    simulator.seed(FAMILY)
    return simulator


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def make_client(
    sim: SimulatorServer, sleeps: RecordingSleep
) -> Iterator[Callable[..., SemrushClient]]:
    built: list[SemrushClient] = []

    def build(**overrides: Any) -> SemrushClient:
        options: dict[str, Any] = {
            "base_url": sim.origin,
            "token_provider": StaticTokenProvider(SECRET_TOKEN),
            "timeout_s": 5.0,
            "max_retries": 3,
            "backoff_s": 0.5,
            "sleep": sleeps,
        }
        options.update(overrides)
        client = SemrushClient(**options)
        built.append(client)
        return client

    yield build
    for client in built:
        client.close()


def _calls(sim: SimulatorServer, op: str) -> list[dict[str, Any]]:
    return [call for call in sim.calls() if call["op"] == op]


def _statuses(sim: SimulatorServer, op: str) -> list[int]:
    return [call["status"] for call in _calls(sim, op)]


def _workspace(sim: SimulatorServer, workspace_id: str) -> dict[str, Any]:
    return next(w for w in sim.dump()["workspaces"] if w["id"] == workspace_id)


def _closed_port_origin() -> str:
    # Bind and release an ephemeral port: nothing listens there afterwards.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- the five operations ------------------------------------------------------------------------


def test_semrush_client_read_resources_parses_the_ai_block(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given a child with usage and a client on the simulator
    client = make_client()

    # When its resources are read
    resources = client.read_resources("c1")

    # Then used, drafted and total come through per dimension, over one authenticated call
    assert (resources.projects.used, resources.projects.total) == (1, 2)
    assert (resources.prompts.used, resources.prompts.drafted, resources.prompts.total) == (
        150,
        20,
        200,
    )
    assert [(c["method"], c["path"]) for c in sim.calls()] == [
        ("GET", f"{API_PATH}/v1/workspaces/c1/resources")
    ]


def test_semrush_client_transfer_sets_both_totals_absolutely(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given c1 at 2 projects / 200 prompts under a master at 100 / 20000
    client = make_client()

    # When the totals are set to 5 / 400
    client.transfer("c1", Totals(projects=5, prompts=400))

    # Then the body carries both dimensions and the units moved from the master
    (call,) = _calls(sim, "transfer")
    assert call["body"] == {"resources": {"ai": {"projects": 5, "prompts": 400}}}
    assert call["status"] == 200
    child, master = _workspace(sim, "c1"), _workspace(sim, "m1")
    assert (child["ai"]["projects"]["total"], child["ai"]["prompts"]["total"]) == (5, 400)
    assert (master["ai"]["projects"]["total"], master["ai"]["prompts"]["total"]) == (97, 19800)


def test_semrush_client_read_status_returns_the_status_string(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given a child the simulator keeps stuck not ready
    sim.faults(stuck=["c2"])
    client = make_client()

    # When both children's statuses are read
    # Then each is the bare status string
    assert client.read_status("c1") == "created"
    assert client.read_status("c2") == "not ready"


def test_semrush_client_read_status_accepts_the_swaggers_one_element_array(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given an upstream answering the status as the swagger's array
    sim.faults(fail_next=[{"status": 200, "op": "status", "body": [{"status": "created"}]}])
    client = make_client()

    # When the status is read
    # Then the single element is accepted
    assert client.read_status("c1") == "created"


def test_semrush_client_list_family_maps_workspace_records(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given a master with a metered and an unmetered child
    client = make_client()

    # When the family is listed
    family = client.list_family("m1")

    # Then the parent and both children come back as records with the ai tier's flag
    assert sorted(family, key=lambda record: record.id) == [
        WorkspaceRecord(id="c1", title="Brand one", status="created", parent_id="m1",
                        ai_limits_enabled=True),
        WorkspaceRecord(id="c2", title="Unmetered brand", status="created", parent_id="m1",
                        ai_limits_enabled=False),
        WorkspaceRecord(id="m1", title="Org", status="created", parent_id=None,
                        ai_limits_enabled=True),
    ]  # fmt: skip


def test_semrush_client_list_family_reads_the_nested_parent_and_tolerates_missing_tiers(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given workspaces with only the nested parent object, an empty parent_id and no tiers
    body = [
        {"id": "m1", "title": "Org", "status": "created", "parent_id": ""},
        {"id": "c9", "status": "not ready", "parent": {"id": "m1", "title": "Org"},
         "product_tiers": [{"product": {"id": "seo", "limits_enabled": True}}]},
    ]  # fmt: skip
    sim.faults(fail_next=[{"status": 200, "op": "family", "body": body}])
    client = make_client()

    # When the family is listed
    family = client.list_family("m1")

    # Then the parent comes from the nested object and an absent ai tier is None
    assert family == [
        WorkspaceRecord(id="m1", title="Org", status="created"),
        WorkspaceRecord(id="c9", title="", status="not ready", parent_id="m1"),
    ]


def test_semrush_client_create_child_returns_the_not_ready_child(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given a master with free units
    client = make_client()

    # When a child is created with initial totals and another without
    carved = client.create_child("m1", "New brand", Totals(projects=1, prompts=100))
    bare = client.create_child("m1", "Empty brand")

    # Then both answer not ready under the master, and only the first carved units
    assert (carved.status, carved.parent_id, carved.title) == ("not ready", "m1", "New brand")
    assert (bare.status, bare.parent_id) == ("not ready", "m1")
    assert _workspace(sim, carved.id)["ai"]["prompts"]["total"] == 100
    assert _workspace(sim, bare.id)["ai"]["prompts"]["total"] == 0
    assert [call["body"] for call in _calls(sim, "create_child")] == [
        {"title": "New brand", "resources": {"ai": {"projects": 1, "prompts": 100}}},
        {"title": "Empty brand", "resources": {}},
    ]


def test_semrush_client_quotes_workspace_ids_in_the_path(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given an id holding characters that would change the path
    sim.seed([{"id": "we/ird id", "parent_id": "m1"}])
    client = make_client()

    # When it is read
    status = client.read_status("we/ird id")

    # Then it reached the right workspace, as one path segment
    assert status == "created"
    assert _calls(sim, "status")[0]["path"] == f"{API_PATH}/v1/workspaces/we%2Fird%20id/status"


def test_semrush_client_blank_id_is_a_wiring_error_before_any_call(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given a client
    client = make_client()

    # When an operation gets a blank id
    # Then it raises without calling the upstream
    with pytest.raises(WiringError):
        client.read_resources("  ")
    assert sim.calls() == []


# -- upstream errors ----------------------------------------------------------------------------


def test_semrush_client_unknown_id_is_an_upstream_error_without_retry(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given an id the upstream does not know
    client = make_client()

    # When it is read
    with pytest.raises(UpstreamError) as raised:
        client.read_resources("nope")

    # Then the 403 and its body come through, once, naming the operation
    assert raised.value.status == 403
    assert "invalid access attempt" in raised.value.body
    assert raised.value.operation == "read_resources"
    assert str(raised.value).startswith("read_resources: upstream answered 403")
    assert len(sim.calls()) == 1
    assert sleeps.calls == []


def test_semrush_client_transfer_pool_exhausted_422_is_not_retried(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given a raise beyond the master's free units
    client = make_client()

    # When it is sent
    with pytest.raises(UpstreamError) as raised:
        client.transfer("c1", Totals(projects=500, prompts=200))

    # Then the 422 comes back once with its text, for the domain to classify
    assert raised.value.status == 422
    assert "insufficient available units" in raised.value.body
    assert _statuses(sim, "transfer") == [422]
    assert sleeps.calls == []


@pytest.mark.parametrize(
    ("op", "body", "call"),
    [
        ("read_resources", "<html>oops</html>", lambda c: c.read_resources("c1")),
        ("read_resources", {"product_resources": {}}, lambda c: c.read_resources("c1")),
        ("status", {"state": "created"}, lambda c: c.read_status("c1")),
        ("status", [{"status": "created"}, {"status": "error"}], lambda c: c.read_status("c1")),
        ("family", {"items": []}, lambda c: c.list_family("m1")),
        ("family", [{"id": "m1"}], lambda c: c.list_family("m1")),
        ("family", [{"id": "m1", "status": "created", "product_tiers": {}}],
         lambda c: c.list_family("m1")),
        ("family", [{"id": "m1", "status": "created",
                     "product_tiers": [{"product": {"id": "ai", "limits_enabled": "no"}}]}],
         lambda c: c.list_family("m1")),
        ("create_child", "<html>created</html>", lambda c: c.create_child("m1", "x")),
    ],
)  # fmt: skip
def test_semrush_client_unparseable_2xx_is_a_malformed_response(
    sim: SimulatorServer,
    make_client: Callable[..., SemrushClient],
    op: str,
    body: Any,
    call: Callable[[SemrushClient], object],
) -> None:
    # Given a 200 whose body breaks the documented shape
    sim.faults(fail_next=[{"status": 200, "op": op, "body": body}])
    client = make_client()

    # When the operation runs
    # Then it fails loudly instead of guessing
    with pytest.raises(MalformedResponseError):
        call(client)


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
    assert _statuses(sim, "transfer") == [503, 503, 200]
    assert sleeps.calls == [1.0, 1.0]
    assert _workspace(sim, "c1")["ai"]["prompts"]["total"] == 300


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
    assert _statuses(sim, "transfer") == [503, 503]
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
    assert _statuses(sim, op) == [status, 200]
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
    assert _statuses(sim, "read_resources") == [502] * 4
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
    assert _statuses(sim, "transfer") == [429, 429, 429]
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
    assert _statuses(sim, "create_child") == [503]
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
    assert _statuses(sim, "create_child") == [429, 200]
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
    assert len(_calls(sim, "status")) == 2
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
    assert len(_calls(sim, "create_child")) == 1
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
        _closed_port_origin(), StaticTokenProvider(SECRET_TOKEN), max_retries=2, sleep=sleeps
    )

    # When the operation runs
    with client, pytest.raises(UpstreamUnavailableError) as raised:
        call(client)

    # Then it retried with backoff and reported the upstream unreachable
    assert sleeps.calls == [0.5, 1.0]
    assert isinstance(raised.value.__cause__, httpx.ConnectError)
    assert raised.value.code == "upstreamUnavailable"


# -- auth ---------------------------------------------------------------------------------------


def test_semrush_client_refreshes_the_token_once_on_401(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient], sleeps: RecordingSleep
) -> None:
    # Given an upstream that accepts only the rotated token, and a provider holding the old one
    sim.set_auth(["tok-new"])
    tokens = RotatingTokenProvider(stale="tok-old", fresh="tok-new")
    client = make_client(token_provider=tokens)

    # When two reads are made
    client.read_resources("c1")
    client.read_resources("c1")

    # Then the first 401 refreshed the token once, and the refreshed token kept working
    assert _statuses(sim, "read_resources") == [401, 200, 200]
    assert tokens.refreshes == 1
    assert sleeps.calls == []


def test_semrush_client_second_401_is_an_upstream_error(
    sim: SimulatorServer, make_client: Callable[..., SemrushClient]
) -> None:
    # Given an upstream that accepts neither the old nor the refreshed token
    sim.set_auth(["tok-other"])
    tokens = RotatingTokenProvider(stale="tok-old", fresh="tok-still-wrong")
    client = make_client(token_provider=tokens)

    # When the create is attempted (a 401 proves nothing was created, so it may retry once)
    with pytest.raises(UpstreamError) as raised:
        client.create_child("m1", "Unauthorized")

    # Then it refreshed once, retried once, and reported the 401
    assert raised.value.status == 401
    assert tokens.refreshes == 1
    assert _statuses(sim, "create_child") == [401, 401]


# -- base URL rules (the rules themselves: tests/unit/test_semrush_origin.py) --------------------


def test_semrush_client_rejects_a_bad_base_url_at_construction() -> None:
    # Given a base URL with the API path already appended
    # When a client is built
    # Then it refuses before any call
    with pytest.raises(ConfigurationError, match="without a path"):
        SemrushClient(
            "https://www.semrush.com/enterprise/users/api", StaticTokenProvider(SECRET_TOKEN)
        )


# -- lifecycle ----------------------------------------------------------------------------------


def test_semrush_client_uses_the_injected_client_and_leaves_it_open(
    sim: SimulatorServer, sleeps: RecordingSleep
) -> None:
    # Given a caller-owned httpx client that records its requests
    seen: list[str] = []
    http = httpx.Client(event_hooks={"request": [lambda request: seen.append(request.method)]})

    # When several operations run inside the client's context
    with SemrushClient(sim.origin, StaticTokenProvider(SECRET_TOKEN), http, sleep=sleeps) as c:
        c.read_resources("c1")
        c.read_status("c1")
        c.list_family("m1")

    # Then every call went through the one injected client, which the caller still owns
    assert seen == ["GET", "GET", "GET"]
    assert not http.is_closed
    http.close()


def test_semrush_client_close_closes_the_client_it_built(sim: SimulatorServer) -> None:
    # Given a client that built its own httpx client
    client = SemrushClient(sim.origin, StaticTokenProvider(SECRET_TOKEN))
    client.read_status("c1")

    # When it is closed
    client.close()

    # Then it cannot send any more
    with pytest.raises(RuntimeError):
        client.read_status("c1")


def test_semrush_client_max_call_duration_bounds_every_attempt_and_backoff() -> None:
    # Given the defaults, the same as the settings' (15 s timeout, 2 retries, 0.5 s backoff)
    client = SemrushClient("https://www.semrush.com", StaticTokenProvider(SECRET_TOKEN))

    # When the worst case is asked for
    # Then it is 3 attempts of 15 s plus 0.5 + 1 s of backoff: inside the Allocator's 60 s
    assert client.max_call_duration_s == pytest.approx(46.5)
    assert repr(client) == "SemrushClient(origin='https://www.semrush.com')"
    client.close()


# -- no secret anywhere -------------------------------------------------------------------------


def _exception_texts(exc: BaseException) -> str:
    parts = ["".join(traceback.format_exception(exc))]
    current: BaseException | None = exc
    while current is not None:
        parts.extend([str(current), repr(current), repr(current.args)])
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def test_semrush_client_never_logs_or_raises_the_token(
    sim: SimulatorServer,
    make_client: Callable[..., SemrushClient],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given every logger at DEBUG and a recognisable token
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "serenity_allocator"):
        caplog.set_level(logging.DEBUG, logger=name)
    client = make_client(token_provider=StaticTokenProvider(SECRET_TOKEN), timeout_s=0.2)
    texts: list[str] = [repr(client), repr(StaticTokenProvider(SECRET_TOKEN))]

    # When calls succeed, fail with statuses (one body echoing the token), time out, meet a
    # refused token and a refused connection
    client.read_resources("c1")
    client.transfer("c1", Totals(projects=2, prompts=300))
    client.list_family("m1")
    client.create_child("m1", "Logged")
    sim.faults(
        fail_next=[
            {"status": 500, "count": 4, "op": "status",
             "body": {"message": f"bad header Authorization: Bearer {SECRET_TOKEN}"}},
            {"status": 503, "count": 4, "op": "transfer"},
        ]
    )  # fmt: skip
    failing: list[Callable[[], object]] = [
        lambda: client.read_status("c1"),
        lambda: client.transfer("c1", Totals(projects=3, prompts=300)),
    ]
    for attempt in failing:
        with pytest.raises(UpstreamError) as raised:
            attempt()
        texts.append(_exception_texts(raised.value))
    sim.faults(error_rate={"timeout": 1.0}, timeout_hold_ms=400)
    with pytest.raises(UpstreamUnavailableError) as timed_out:
        client.read_resources("c1")
    texts.append(_exception_texts(timed_out.value))
    sim.faults(error_rate={})
    sim.set_auth(["tok-other"])
    with pytest.raises(UpstreamError) as refused:
        client.read_resources("c1")
    texts.append(_exception_texts(refused.value))
    unreachable = make_client(base_url=_closed_port_origin())
    with pytest.raises(UpstreamUnavailableError) as unreachable_error:
        unreachable.read_resources("c1")
    texts.append(_exception_texts(unreachable_error.value))

    # Then the token appears in no log record, no output and no exception, and the
    # exceptions carry no URL either
    captured = capsys.readouterr()
    logged = caplog.text + "\n".join(
        f"{record.getMessage()} {record.args!r}" for record in caplog.records
    )
    assert caplog.records, "expected the HTTP stack to log something at DEBUG"
    for text in [logged, captured.out, captured.err, *texts]:
        assert SECRET_TOKEN not in text
    for text in texts[2:]:
        assert sim.api_url not in text
        assert "http://" not in text.split("Traceback")[0]


# -- token providers ----------------------------------------------------------------------------


def test_static_token_provider_returns_its_token_and_hides_it() -> None:
    # Given a static provider
    provider = StaticTokenProvider(SECRET_TOKEN)

    # When asked, refreshed or printed
    # Then it returns the token and never shows it
    assert provider.get_token() == SECRET_TOKEN
    assert provider.get_token(refresh=True) == SECRET_TOKEN
    assert SECRET_TOKEN not in repr(provider)
    with pytest.raises(TokenProviderError):
        StaticTokenProvider("  ")


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def secretsmanager(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    ):
        monkeypatch.delenv(name, raising=False)
    return boto3.client("secretsmanager")


def _secret_name() -> str:
    # moto's backends are process-wide: unique names keep tests independent.
    return f"semrush-token-{uuid.uuid4().hex}"


@pytest.mark.parametrize(
    "stored", [SECRET_TOKEN, f"  {SECRET_TOKEN}\n", json.dumps({"token": SECRET_TOKEN})]
)
def test_secrets_manager_token_provider_reads_raw_and_json_secrets(
    secretsmanager: Any, stored: str
) -> None:
    # Given a secret holding the token raw or as {"token": ...}
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString=stored)

    # When the provider reads it through AWS_ENDPOINT_URL
    provider = SecretsManagerTokenProvider(name)

    # Then the bare token comes back
    assert provider.get_token() == SECRET_TOKEN


def test_secrets_manager_token_provider_caches_until_refresh(secretsmanager: Any) -> None:
    # Given a provider that has read the secret once
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString="tok-1")
    provider = SecretsManagerTokenProvider(name, max_age_s=300)
    assert provider.get_token() == "tok-1"

    # When the secret rotates
    secretsmanager.put_secret_value(SecretId=name, SecretString="tok-2")

    # Then a plain read is served from the cache and a refresh fetches the new value
    assert provider.get_token() == "tok-1"
    assert provider.get_token(refresh=True) == "tok-2"
    assert provider.get_token() == "tok-2"


def test_secrets_manager_token_provider_refresh_after_401_reaches_the_upstream(
    secretsmanager: Any, sim: SimulatorServer, sleeps: RecordingSleep
) -> None:
    # Given a cached token that the upstream stopped accepting after a rotation
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString="tok-1")
    provider = SecretsManagerTokenProvider(name)
    assert provider.get_token() == "tok-1"
    secretsmanager.put_secret_value(SecretId=name, SecretString=json.dumps({"token": "tok-2"}))
    sim.set_auth(["tok-2"])

    # When the client reads
    with SemrushClient(sim.origin, provider, sleep=sleeps) as client:
        status = client.read_status("c1")

    # Then the 401 fetched the rotated secret and the retry succeeded
    assert status == "created"
    assert _statuses(sim, "status") == [401, 200]


@pytest.mark.parametrize(
    "stored",
    [json.dumps({"value": SECRET_TOKEN}), json.dumps({"token": ""}), "{" + SECRET_TOKEN, "   "],
)
def test_secrets_manager_token_provider_rejects_a_secret_without_a_token(
    secretsmanager: Any, stored: str
) -> None:
    # Given a secret whose content holds no usable token
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString=stored)

    # When it is read
    with pytest.raises(TokenProviderError) as raised:
        SecretsManagerTokenProvider(name).get_token()

    # Then the error says so without quoting the content
    assert SECRET_TOKEN not in _exception_texts(raised.value)


def test_secrets_manager_token_provider_missing_secret_is_a_provider_error(
    secretsmanager: Any,
) -> None:
    # Given no such secret
    provider = SecretsManagerTokenProvider(_secret_name())

    # When it is read
    # Then a typed error names the failure, with the AWS error as its cause
    with pytest.raises(TokenProviderError, match="could not read") as raised:
        provider.get_token()
    assert raised.value.__cause__ is not None


def test_secrets_manager_token_provider_reads_a_binary_secret(secretsmanager: Any) -> None:
    # Given a secret stored as SecretBinary (UTF-8 JSON)
    name = _secret_name()
    secretsmanager.create_secret(
        Name=name, SecretBinary=json.dumps({"token": SECRET_TOKEN}).encode()
    )

    # When it is read
    # Then the token is decoded from the bytes
    assert SecretsManagerTokenProvider(name).get_token() == SECRET_TOKEN


@pytest.mark.parametrize(
    "settings",
    [{"timeout_s": 0}, {"max_retries": -1}, {"backoff_s": -0.5}],
)
def test_semrush_client_rejects_impossible_retry_settings(settings: dict[str, Any]) -> None:
    # Given a non-positive timeout or negative retry settings
    # When a client is built
    # Then it is a configuration error
    with pytest.raises(ConfigurationError):
        SemrushClient("https://www.semrush.com", StaticTokenProvider(SECRET_TOKEN), **settings)
