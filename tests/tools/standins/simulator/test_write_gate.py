"""The simulator's Project Engine write gate and its control-route guard, over real HTTP.

The gate follows semrush-user-manager.md ("Metered writes happen elsewhere"): prompts metered at
the write on used + drafted + batch, projects one unit each, the disguised 405 as the exact nginx
page, a JSON 405 for a wrong method, and enforcement lagging transfers in both directions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serenity_allocator.domain.errors import is_metered_quota
from serenity_tools.standins.simulator import (
    DISGUISED_QUOTA_405,
    SimulatorServer,
    SimulatorState,
    start_simulator,
)
from tests.fakes import FakeClock

TOKEN = "gate-token"
MASTER = "m1"


def usage(used: int, total: int, drafted: int = 0) -> dict[str, int]:
    return {"used": used, "drafted": drafted, "total": total}


def family(*, prompts: dict[str, int], projects: dict[str, int], metered: bool = True) -> list[Any]:
    return [
        {
            "id": MASTER,
            "limits_enabled": metered,
            "ai": {"projects": usage(0, 50), "prompts": usage(0, 5000)},
        },
        {"id": "c1", "parent_id": MASTER, "ai": {"projects": projects, "prompts": prompts}},
    ]


@pytest.fixture
def clock() -> FakeClock:
    """The write gate's clock (advances and sleeps on demand), not the package's plain one."""
    return FakeClock()


@pytest.fixture
def gate_sim(clock: FakeClock) -> Iterator[SimulatorServer]:
    # The default lag (9 s) on the test's clock: time moves only when the test says so.
    state = SimulatorState(clock=clock, sleep=clock.sleep)
    with start_simulator(state=state) as server:
        yield server


@pytest.fixture
def client(gate_sim: SimulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=gate_sim.origin, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as http:
        yield http


def write_prompts(client: httpx.Client, count: Any, workspace: str = "c1") -> httpx.Response:
    return client.post(f"/project-engine/v1/workspaces/{workspace}/prompts", json={"count": count})


def publish(client: httpx.Client, count: int) -> httpx.Response:
    return client.post("/project-engine/v1/workspaces/c1/prompts/publish", json={"count": count})


def create_project(client: httpx.Client) -> httpx.Response:
    return client.post("/project-engine/v1/workspaces/c1/projects", json={})


def transfer(client: httpx.Client, projects: int, prompts: int) -> None:
    answer = client.post(
        "/enterprise/users/api/v2/workspaces/c1/resources/transfer",
        json={"resources": {"ai": {"projects": projects, "prompts": prompts}}},
    )
    assert answer.status_code == 200


def child_ai(sim: SimulatorServer) -> dict[str, dict[str, int]]:
    by_id = {w["id"]: w for w in sim.dump()["workspaces"]}
    ai: dict[str, dict[str, int]] = by_id["c1"]["ai"]
    return ai


def assert_disguised_405(answer: httpx.Response) -> None:
    assert answer.status_code == 405
    assert answer.headers["content-type"] == "text/html"
    assert answer.content == DISGUISED_QUOTA_405.encode()
    assert is_metered_quota(answer.status_code, answer.text)


# -- prompts ------------------------------------------------------------------------------------


def test_write_gate_prompts_refused_on_used_plus_drafted_plus_batch(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a child with 60 used, 30 drafted and a total of 100
    gate_sim.seed(family(prompts=usage(60, 100, drafted=30), projects=usage(0, 1)))

    # When it writes 10 prompts, then 1 more
    fits = write_prompts(client, 10)
    over = write_prompts(client, 1)

    # Then the first drafts (60 + 30 + 10 = 100) and the second is the disguised 405
    assert fits.status_code == 200
    assert fits.json() == {"workspace_id": "c1", "prompts": usage(60, 100, drafted=40)}
    assert_disguised_405(over)
    assert child_ai(gate_sim)["prompts"] == usage(60, 100, drafted=40)


def test_write_gate_publish_moves_drafted_to_used_without_a_quota_check(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a child holding more drafted prompts than its total
    gate_sim.seed(family(prompts=usage(90, 100, drafted=50), projects=usage(0, 1)))

    # When 40 are published, then 11 more than remain
    published = publish(client, 40)
    too_many = publish(client, 11)

    # Then the publish is not metered, and publishing more than drafted is a 400 naming count
    assert published.status_code == 200
    assert published.json()["prompts"] == usage(130, 100, drafted=10)
    assert too_many.status_code == 400
    assert too_many.json() == {"message": "count exceeds the drafted prompts"}


# -- projects -----------------------------------------------------------------------------------


def test_write_gate_project_refused_when_used_plus_drafted_plus_one_passes_the_total(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a child with 1 used project and 1 drafted out of 3
    gate_sim.seed(family(prompts=usage(0, 100), projects=usage(1, 3, drafted=1)))

    # When it creates two projects
    first = create_project(client)
    second = create_project(client)

    # Then the first fits (1 + 1 + 1 = 3) and the second is the disguised 405
    assert first.status_code == 200
    assert first.json() == {"workspace_id": "c1", "projects": usage(2, 3, drafted=1)}
    assert_disguised_405(second)


def test_write_gate_unmetered_parent_never_refuses(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a child at zero totals under a parent whose AI limits are disabled
    gate_sim.seed(family(prompts=usage(0, 0), projects=usage(0, 0), metered=False))

    # When it writes prompts and a project
    answers = [write_prompts(client, 500).status_code, create_project(client).status_code]

    # Then nothing is refused
    assert answers == [200, 200]
    assert child_ai(gate_sim)["prompts"] == usage(0, 0, drafted=500)


# -- deletes ------------------------------------------------------------------------------------


def test_write_gate_deletes_free_used_prompts_and_projects(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a full child: 100 of 100 prompts used, 2 of 2 projects
    gate_sim.seed(family(prompts=usage(100, 100), projects=usage(2, 2)))

    # When it deletes 30 prompts and one project, then writes 30 prompts and one project
    deleted = client.request(
        "DELETE", "/project-engine/v1/workspaces/c1/prompts", json={"count": 30}
    )
    dropped = client.request("DELETE", "/project-engine/v1/workspaces/c1/projects", json={})
    rewritten = [write_prompts(client, 30).status_code, create_project(client).status_code]

    # Then the deletes freed their units (no lag: nothing was transferred), the writes fit
    assert (deleted.status_code, deleted.json()["prompts"]) == (200, usage(70, 100))
    assert (dropped.status_code, dropped.json()["projects"]) == (200, usage(1, 2))
    assert rewritten == [200, 200]
    assert child_ai(gate_sim)["prompts"] == usage(70, 100, drafted=30)


def test_write_gate_delete_of_more_than_is_used_is_a_400(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a child with 5 used prompts and no project
    gate_sim.seed(family(prompts=usage(5, 10), projects=usage(0, 1)))

    # When it deletes 6 prompts, and a project / Then both are 400s saying why
    prompts = client.request(
        "DELETE", "/project-engine/v1/workspaces/c1/prompts", json={"count": 6}
    )
    project = client.request("DELETE", "/project-engine/v1/workspaces/c1/projects")
    assert (prompts.status_code, prompts.json()) == (
        400,
        {"message": "count exceeds the published prompts"},
    )
    assert (project.status_code, project.json()) == (
        400,
        {"message": "the workspace has no project to delete"},
    )
    assert child_ai(gate_sim)["prompts"] == usage(5, 10)


# -- protocol -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/project-engine/v1/workspaces/c1/prompts"),
        ("PUT", "/project-engine/v1/workspaces/c1/prompts/publish"),
        ("DELETE", "/project-engine/v1/workspaces/c1/prompts/publish"),
    ],
)
def test_write_gate_other_method_is_the_json_405(
    gate_sim: SimulatorServer, client: httpx.Client, method: str, path: str
) -> None:
    # Given a seeded child
    gate_sim.seed(family(prompts=usage(0, 0), projects=usage(0, 0)))

    # When a write path is called with another method
    answer = client.request(method, path)

    # Then it is the genuine JSON 405, which is not a quota refusal
    assert answer.status_code == 405
    assert answer.json() == {"message": "Method Not Allowed"}
    assert not is_metered_quota(answer.status_code, answer.text)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("prompts", {"count": 0}, "count must be at least 1"),
        ("prompts", {"count": "3"}, "count must be an integer"),
        ("prompts", {"count": True}, "count must be an integer"),
        ("prompts", {}, "count must be an integer"),
        ("prompts", {"count": 1, "extra": 2}, "unknown keys: extra"),
        ("prompts", [1], "request body must be a JSON object"),
        ("prompts/publish", {"count": -1}, "count must be at least 1"),
        ("projects", {"name": "x"}, "unknown keys: name"),
    ],
)
def test_write_gate_bad_body_is_a_400_naming_the_field(
    gate_sim: SimulatorServer, client: httpx.Client, path: str, body: Any, message: str
) -> None:
    # Given a seeded child
    gate_sim.seed(family(prompts=usage(0, 100), projects=usage(0, 1)))

    # When a write carries a bad body
    answer = client.post(f"/project-engine/v1/workspaces/c1/{path}", json=body)

    # Then it is a 400 naming what is wrong, and nothing changed
    assert answer.status_code == 400
    assert answer.json() == {"message": message}
    assert child_ai(gate_sim)["prompts"] == usage(0, 100)


def test_write_gate_is_authenticated_logged_and_subject_to_faults(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a seeded child and a one-shot 503 on prompt writes
    gate_sim.seed(family(prompts=usage(0, 100), projects=usage(0, 1)))
    gate_sim.faults(fail_next=[{"status": 503, "op": "write_prompts"}])

    # When a write has no bearer, then two writes are made, and one names an unknown id
    anonymous = httpx.post(
        gate_sim.origin + "/project-engine/v1/workspaces/c1/prompts", json={"count": 1}
    )
    faulted = write_prompts(client, 1)
    accepted = write_prompts(client, 1)
    unknown = write_prompts(client, 1, workspace="ghost")

    # Then 401, the injected 503, a success and the upstream's 403, all in the call log
    statuses = [anonymous.status_code, faulted.status_code, accepted.status_code]
    assert [*statuses, unknown.status_code] == [401, 503, 200, 403]
    assert [(c["op"], c["path"], c["status"]) for c in gate_sim.calls()] == [
        ("write_prompts", "/project-engine/v1/workspaces/c1/prompts", 401),
        ("write_prompts", "/project-engine/v1/workspaces/c1/prompts", 503),
        ("write_prompts", "/project-engine/v1/workspaces/c1/prompts", 200),
        ("write_prompts", "/project-engine/v1/workspaces/ghost/prompts", 403),
    ]


# -- enforcement lag ----------------------------------------------------------------------------


def test_write_gate_enforces_a_raise_only_after_the_lag(
    gate_sim: SimulatorServer, client: httpx.Client, clock: FakeClock
) -> None:
    # Given a full child (100 of 100 prompts used, 1 of 1 project) topped up to 200 / 2
    gate_sim.seed(family(prompts=usage(100, 100), projects=usage(1, 1)))
    transfer(client, projects=2, prompts=200)

    # When it writes 8.9 s after the top-up, then at 9 s
    clock.advance(8.9)
    early = [write_prompts(client, 50), create_project(client)]
    clock.advance(0.1)
    late = [write_prompts(client, 50), create_project(client)]

    # Then the early writes get the disguised 405 although the total already reads 200
    for answer in early:
        assert_disguised_405(answer)
    assert [answer.status_code for answer in late] == [200, 200]
    assert child_ai(gate_sim)["prompts"] == usage(100, 200, drafted=50)


def test_write_gate_enforces_a_lowering_only_after_the_lag(
    gate_sim: SimulatorServer, client: httpx.Client, clock: FakeClock
) -> None:
    # Given a child with 100 of 300 prompts used, lowered to 100
    gate_sim.seed(family(prompts=usage(100, 300), projects=usage(0, 2)))
    transfer(client, projects=2, prompts=100)

    # When it writes right after the lowering, then after the lag
    clock.advance(1.0)
    early = write_prompts(client, 50)
    clock.advance(8.0)
    late = write_prompts(client, 1)

    # Then the old (higher) total still applied at first, the new one after the lag
    assert early.status_code == 200
    assert_disguised_405(late)


def test_write_gate_lag_is_a_fault_key_and_zero_turns_it_off(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a full child and the lag turned off
    gate_sim.seed(family(prompts=usage(100, 100), projects=usage(0, 0)))
    faults = gate_sim.faults(enforcement_lag_ms=0)

    # When it is topped up and writes at once
    transfer(client, projects=1, prompts=200)
    answer = write_prompts(client, 100)

    # Then the new total is enforced immediately
    assert faults["enforcement_lag_ms"] == 0.0
    assert answer.status_code == 200


def test_write_gate_lag_reset_restores_the_default(gate_sim: SimulatorServer) -> None:
    # Given a lag changed through the faults
    gate_sim.faults(enforcement_lag_ms=1500)

    # When the simulator is reset
    gate_sim.reset()

    # Then the constructor's default (9 s) is back
    assert gate_sim.dump()["faults"]["enforcement_lag_ms"] == 9000.0


# -- control routes -----------------------------------------------------------------------------


def _control_status(sim: SimulatorServer, headers: dict[str, str]) -> int:
    with httpx.Client(trust_env=False) as http:
        return http.post(sim.origin + "/__reset", json={}, headers=headers).status_code


def test_simulator_control_route_refuses_a_cross_origin_post(gate_sim: SimulatorServer) -> None:
    # Given a seeded simulator
    gate_sim.seed(family(prompts=usage(0, 100), projects=usage(0, 1)))

    # When a web page POSTs a reset (a browser adds its Origin), or a rebinding name is the Host
    cross_origin = _control_status(gate_sim, {"Origin": "https://evil.example"})
    rebound = _control_status(gate_sim, {"Host": f"evil.example:{gate_sim.port}"})

    # Then both are refused and nothing was reset
    assert (cross_origin, rebound) == (403, 403)
    assert [w["id"] for w in gate_sim.dump()["workspaces"]] == [MASTER, "c1"]


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:{port}", "127.0.0.1:{port}", "app.localhost", "[::1]:{port}"]
)
def test_simulator_control_route_accepts_loopback_host_names(
    gate_sim: SimulatorServer, host: str
) -> None:
    # Given a local client naming the simulator by a loopback name
    # When it calls a control route
    status = _control_status(gate_sim, {"Host": host.format(port=gate_sim.port)})

    # Then it is served
    assert status == 200


def test_simulator_cli_enforcement_lag_option_defaults_to_the_upstream_lag() -> None:
    # Given the subcommand parser
    import argparse

    from serenity_tools.standins.simulator import configure

    parser = argparse.ArgumentParser()
    configure(parser)

    # When parsed without and with --enforcement-lag-ms
    default = parser.parse_args([])
    shortened = parser.parse_args(["--enforcement-lag-ms", "1500"])

    # Then the default is the upstream's 9 s and the option is taken
    assert (default.enforcement_lag_ms, shortened.enforcement_lag_ms) == (9000.0, 1500.0)


def test_write_gate_refuses_an_over_headroom_batch_whole(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given the live case of the shared doc: 16 used of 18 prompts
    gate_sim.seed(family(prompts=usage(16, 18), projects=usage(0, 1)))

    # When a batch of 10 is written, then a batch of 2, then 1 more
    ten = write_prompts(client, 10)
    after_ten = child_ai(gate_sim)["prompts"]
    two = write_prompts(client, 2)
    one_more = write_prompts(client, 1)

    # Then the 10 are refused whole (nothing drafted), the 2 that exactly fit are accepted, and
    # the +1 is refused
    assert_disguised_405(ten)
    assert after_ten == usage(16, 18)
    assert two.status_code == 200
    assert_disguised_405(one_more)
    assert child_ai(gate_sim)["prompts"] == usage(16, 18, drafted=2)


def test_write_gate_deletes_drafted_prompts_without_metering(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a child holding 30 drafted prompts over a total it already passes
    gate_sim.seed(family(prompts=usage(90, 100, drafted=30), projects=usage(0, 1)))

    # When 20 are deleted, then 11 more than remain
    deleted = client.post("/project-engine/v1/workspaces/c1/prompts/discard", json={"count": 20})
    too_many = client.post("/project-engine/v1/workspaces/c1/prompts/discard", json={"count": 11})

    # Then 10 drafted are left (no quota check), and deleting more than drafted is a 400
    assert deleted.status_code == 200
    assert deleted.json() == {"workspace_id": "c1", "prompts": usage(90, 100, drafted=10)}
    assert too_many.status_code == 400
    assert too_many.json() == {"message": "count exceeds the drafted prompts"}
    assert [c["op"] for c in gate_sim.calls()] == ["discard_drafts", "discard_drafts"]


def test_write_gate_meters_a_tiered_workspace_on_both_tiers(
    gate_sim: SimulatorServer, client: httpx.Client
) -> None:
    # Given a tiered child: daily 8/10, weekly 20/50, under a metered pool
    gate_sim.seed(
        [
            {"id": MASTER, "ai": {"projects": usage(0, 50), "prompts": usage(0, 5000)}},
            {
                "id": "c1",
                "parent_id": MASTER,
                "ai": {
                    "projects": usage(0, 1),
                    "daily_prompts": {"used": 8, "total": 10},
                    "weekly_prompts": {"used": 20, "total": 50},
                },
            },
        ]
    )

    # When a batch of 3 is written (past the daily tier), then a batch of 2 (fits both)
    refused = write_prompts(client, 3)
    accepted = write_prompts(client, 2)

    # Then the first is the disguised 405, whole; the second lands on both tiers
    assert is_metered_quota(refused.status_code, refused.text)
    assert accepted.status_code == 200
    assert accepted.json() == {
        "workspace_id": "c1",
        "daily_prompts": {"used": 10, "total": 10},
        "weekly_prompts": {"used": 22, "total": 50},
    }
