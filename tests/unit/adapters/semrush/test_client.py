"""The Semrush client over real HTTP against the in-process simulator: operations, errors, auth.

Fixtures (the seeded simulator, the recording sleep, the client factory): conftest.py here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.http_edge import API_PATH, ConfigurationError
from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.domain.errors import MalformedResponseError, UpstreamError, WiringError
from serenity_allocator.domain.model import Totals, WorkspaceRecord
from serenity_tools.standins.simulator import SimulatorServer
from tests.unit.adapters.semrush.helpers import (
    SECRET_TOKEN,
    RecordingSleep,
    RotatingTokenProvider,
    calls_of,
    statuses_of,
    workspace_of,
)

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
    (call,) = calls_of(sim, "transfer")
    assert call["body"] == {"resources": {"ai": {"projects": 5, "prompts": 400}}}
    assert call["status"] == 200
    child, master = workspace_of(sim, "c1"), workspace_of(sim, "m1")
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
    assert workspace_of(sim, carved.id)["ai"]["prompts"]["total"] == 100
    assert workspace_of(sim, bare.id)["ai"]["prompts"]["total"] == 0
    assert [call["body"] for call in calls_of(sim, "create_child")] == [
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
    assert calls_of(sim, "status")[0]["path"] == f"{API_PATH}/v1/workspaces/we%2Fird%20id/status"


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
    assert statuses_of(sim, "transfer") == [422]
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
    assert statuses_of(sim, "read_resources") == [401, 200, 200]
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
    assert statuses_of(sim, "create_child") == [401, 401]


# -- base URL rules (the rules themselves: tests/unit/adapters/test_semrush_origin.py) ------------


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
    with SemrushClient(
        sim.origin,
        StaticTokenProvider(SECRET_TOKEN),
        http,
        config=SemrushClientConfig(sleep=sleeps),
    ) as c:
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
