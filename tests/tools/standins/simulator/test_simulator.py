"""The Semrush simulator over real HTTP: the five operations of semrush-user-manager.md."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serenity_allocator.adapters.semrush import parse_ai_resources
from serenity_allocator.domain.errors import is_not_ready, is_pool_exhausted
from serenity_tools.standins.simulator import (
    SimulatorServer,
)
from tests.tools.standins.simulator.helpers import (
    MASTER,
    TOKEN,
    FakeClock,
    ai_of,
    family_seed,
    transfer_body,
    usage,
)

# ---------------------------------------------------------------------------------------------
# read resources
# ---------------------------------------------------------------------------------------------


def test_simulator_read_resources_returns_used_drafted_total_per_dimension(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child with usage on both dimensions
    sim.seed(
        [
            {"id": MASTER, "ai": {"projects": usage(0, 5), "prompts": usage(0, 500)}},
            {
                "id": "c1",
                "parent_id": MASTER,
                "ai": {
                    "projects": usage(1, 2),
                    "prompts": usage(150, 200, drafted=30),
                    "weekly_prompts": usage(10, 50),
                },
            },
        ]
    )

    # When its resources are read
    response = api.get("/v1/workspaces/c1/resources")

    # Then the ai block carries projects, prompts and weekly_prompts, each {used, drafted, total}
    assert response.status_code == 200
    resources = response.json()["product_resources"]["ai"]["resources"]
    assert resources == {
        "projects": usage(1, 2),
        "prompts": usage(150, 200, drafted=30),
        "weekly_prompts": usage(10, 50),
    }
    parsed = parse_ai_resources(response.json())
    assert (parsed.prompts.free, parsed.prompts.drafted) == (50, 30)


def test_simulator_read_resources_on_master_is_the_org_pool(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a master pool of 10 projects / 1000 prompts, 4 / 300 of them carved to c1
    sim.seed(family_seed())
    assert api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(4, 300)).is_success

    # When the master's resources are read
    pool = parse_ai_resources(api.get(f"/v1/workspaces/{MASTER}/resources").json())

    # Then it reports what is left in the org pool
    assert (pool.projects.total, pool.prompts.total) == (6, 700)


# ---------------------------------------------------------------------------------------------
# transfer
# ---------------------------------------------------------------------------------------------


def test_simulator_transfer_sets_totals_absolutely_and_conserves_units(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child at 2 projects / 200 prompts carved from a 10 / 1000 pool
    sim.seed(family_seed())
    api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(2, 200))

    # When the child's totals are set to 5 / 300
    response = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(5, 300))

    # Then the child holds exactly 5 / 300 and the master paid the difference
    assert response.status_code == 200
    dump = sim.dump()
    assert ai_of(dump, "c1")["projects"]["total"] == 5
    assert ai_of(dump, "c1")["prompts"]["total"] == 300
    assert ai_of(dump, MASTER)["projects"]["total"] == 5
    assert ai_of(dump, MASTER)["prompts"]["total"] == 700


def test_simulator_transfer_same_totals_again_moves_nothing(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child already at 3 / 300
    sim.seed(family_seed())
    api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(3, 300))
    before = sim.dump()["workspaces"]

    # When the same totals are sent again
    response = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(3, 300))

    # Then it succeeds and nothing moved (the transfer is idempotent)
    assert response.status_code == 200
    assert sim.dump()["workspaces"] == before


def test_simulator_transfer_lowering_gives_units_back_to_the_parent(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child at 6 / 600 from a 10 / 1000 pool
    sim.seed(family_seed())
    api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(6, 600))

    # When it is lowered to 1 / 100
    response = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100))

    # Then the master gets the 5 / 500 back
    assert response.status_code == 200
    master = ai_of(sim.dump(), MASTER)
    assert (master["projects"]["total"], master["prompts"]["total"]) == (9, 900)


def test_simulator_transfer_raise_beyond_parent_free_is_rejected_whole(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a pool of 10 projects / 1000 prompts of which 900 prompts are already used
    sim.seed(
        [
            {"id": MASTER, "ai": {"projects": usage(0, 10), "prompts": usage(900, 1000)}},
            {"id": "c1", "parent_id": MASTER},
        ]
    )
    before = sim.dump()["workspaces"]

    # When a transfer asks for 2 projects (fits) and 200 prompts (only 100 are free)
    response = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(2, 200))

    # Then the whole request is refused with the pool-exhausted 422 and nothing moved
    assert response.status_code == 422
    assert response.json() == {"message": "insufficient available units in subscription"}
    assert is_pool_exhausted(response.status_code, response.text)
    assert sim.dump()["workspaces"] == before


def test_simulator_transfer_raise_exactly_the_free_units_succeeds(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a pool with 100 prompts free (900 of 1000 used)
    sim.seed(
        [
            {"id": MASTER, "ai": {"projects": usage(0, 1), "prompts": usage(900, 1000)}},
            {"id": "c1", "parent_id": MASTER},
        ]
    )

    # When a child takes exactly those 100
    response = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(prompts=100))

    # Then it is granted and the pool has nothing free left
    assert response.status_code == 200
    assert ai_of(sim.dump(), MASTER)["prompts"] == usage(900, 900)


def test_simulator_transfer_dimension_sent_as_zero_is_silently_ignored(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child at 4 projects / 400 prompts
    sim.seed(family_seed())
    api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(4, 400))

    # When a transfer sets projects to 0 and prompts to 100
    response = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(0, 100))

    # Then it answers 200, prompts moved, and projects did not (the 0 was ignored)
    assert response.status_code == 200
    dump = sim.dump()
    assert ai_of(dump, "c1")["projects"]["total"] == 4
    assert ai_of(dump, "c1")["prompts"]["total"] == 100
    assert ai_of(dump, MASTER)["projects"]["total"] == 6


def test_simulator_transfer_answers_the_child_workspace_object(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a family
    sim.seed(family_seed())

    # When a transfer succeeds
    body = api.post("/v2/workspaces/c2/resources/transfer", json=transfer_body(1, 100)).json()

    # Then the body is the child workspace, not its resources
    assert body["id"] == "c2"
    assert body["title"] == "C2"
    assert body["status"] == "created"
    assert body["parent_id"] == MASTER
    assert "product_resources" not in body


@pytest.mark.parametrize(
    "raw_body",
    [
        b"{not json",
        b"[]",
        b"{}",
        b'{"resources": 3}',
        b'{"resources": {"ai": []}}',
        b'{"resources": {"ai": {"projects": -1}}}',
        b'{"resources": {"ai": {"projects": true}}}',
        b'{"resources": {"ai": {"prompts": "100"}}}',
        b'{"resources": {"ai": {"prompts": 1.5}}}',
        b'{"resources": {"ai": {"project": 1}}}',
    ],
)
def test_simulator_transfer_malformed_body_is_400(
    sim: SimulatorServer, api: httpx.Client, raw_body: bytes
) -> None:
    # Given a family
    sim.seed(family_seed())
    before = sim.dump()["workspaces"]

    # When a malformed transfer body is posted
    response = api.post(
        "/v2/workspaces/c1/resources/transfer",
        content=raw_body,
        headers={"Content-Type": "application/json"},
    )

    # Then it is a 400 with a message, and nothing moved
    assert response.status_code == 400
    assert isinstance(response.json()["message"], str)
    assert sim.dump()["workspaces"] == before


def test_simulator_transfer_on_a_master_is_400(sim: SimulatorServer, api: httpx.Client) -> None:
    # Given a master without a parent
    sim.seed(family_seed())

    # When a transfer targets the master itself
    response = api.post(f"/v2/workspaces/{MASTER}/resources/transfer", json=transfer_body(1))

    # Then it is refused: there is no parent to carve from
    assert response.status_code == 400


def test_simulator_transfer_into_a_grandchild_carves_from_its_direct_parent(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given master -> c1 (5 / 500) -> g1
    sim.seed([*family_seed(), {"id": "g1", "parent_id": "c1"}])
    api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(5, 500))

    # When g1 is raised to 2 / 200
    response = api.post("/v2/workspaces/g1/resources/transfer", json=transfer_body(2, 200))

    # Then c1 paid for it and the master did not
    assert response.status_code == 200
    dump = sim.dump()
    assert ai_of(dump, "c1")["projects"]["total"] == 3
    assert ai_of(dump, MASTER)["projects"]["total"] == 5


TRANSFER_STEP = st.tuples(
    st.sampled_from(["c1", "c2", "c3"]),
    st.integers(min_value=0, max_value=8),
    st.integers(min_value=0, max_value=800),
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(TRANSFER_STEP, min_size=1, max_size=12))
def test_simulator_transfer_conserves_units_over_any_sequence(
    sim: SimulatorServer, api: httpx.Client, steps: list[tuple[str, int, int]]
) -> None:
    # Given a fresh family: a 10 / 1000 pool (some of it used) and three empty children
    sim.reset()
    sim.seed(
        [
            {"id": MASTER, "ai": {"projects": usage(2, 10), "prompts": usage(150, 1000)}},
            *({"id": child, "parent_id": MASTER} for child in ("c1", "c2", "c3")),
        ]
    )
    ids = [MASTER, "c1", "c2", "c3"]

    # When any sequence of transfers runs
    for child, projects, prompts in steps:
        before = sim.dump()["workspaces"]
        response = api.post(
            f"/v2/workspaces/{child}/resources/transfer", json=transfer_body(projects, prompts)
        )
        after = sim.dump()
        # Then each is granted whole or refused whole with nothing moved
        assert response.status_code in (200, 422)
        if response.status_code == 422:
            assert after["workspaces"] == before
        # And master.total + sum(children.total) is constant, and the pool is never overdrawn
        for dim, original in (("projects", 10), ("prompts", 1000)):
            assert sum(ai_of(after, i)[dim]["total"] for i in ids) == original
            pool = ai_of(after, MASTER)[dim]
            assert pool["total"] >= pool["used"]


def test_simulator_concurrent_transfers_never_overdraw_the_pool(
    sim: SimulatorServer,
) -> None:
    # Given a 10-project pool and 20 children
    children = tuple(f"k{i}" for i in range(20))
    sim.seed(family_seed(projects=10, prompts=0, children=children))

    # When all 20 ask for 1 project at the same time
    def ask(child: str) -> int:
        with httpx.Client(
            base_url=sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as client:
            return client.post(
                f"/v2/workspaces/{child}/resources/transfer", json=transfer_body(projects=1)
            ).status_code

    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(ask, children))

    # Then exactly 10 are granted, 10 refused, and the units add up
    assert statuses.count(200) == 10
    assert statuses.count(422) == 10
    dump = sim.dump()
    assert ai_of(dump, MASTER)["projects"]["total"] == 0
    assert sum(ai_of(dump, c)["projects"]["total"] for c in children) == 10


# ---------------------------------------------------------------------------------------------
# not ready, zombies
# ---------------------------------------------------------------------------------------------


def test_simulator_child_is_not_ready_for_the_window_after_a_transfer(
    timed_sim: SimulatorServer, timed_api: httpx.Client, clock: FakeClock
) -> None:
    # Given a family on a simulator with a 2 s not-ready window and a test-driven clock
    timed_sim.seed(family_seed())
    first = timed_api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100))
    assert first.status_code == 200
    assert first.json()["status"] == "not ready"

    # When the child is asked again inside the window
    status = timed_api.get("/v1/workspaces/c1/status").json()
    racing = timed_api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(2, 200))

    # Then it reads not ready and the racing transfer gets the transient 422
    assert status == {"status": "not ready"}
    assert racing.status_code == 422
    assert racing.json() == {"message": "workspace not ready"}
    assert is_not_ready(racing.status_code, racing.text)

    # And once the window has passed it is created again and accepts transfers
    clock.advance(2.0)
    assert timed_api.get("/v1/workspaces/c1/status").json() == {"status": "created"}
    retry = timed_api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(2, 200))
    assert retry.status_code == 200


def test_simulator_not_ready_next_refuses_the_next_transfers_while_status_reads_created(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given c1 scripted to answer not-ready to its next two transfers
    sim.seed(family_seed())
    sim.faults(not_ready_next={"c1": 2})

    # When three transfers are made
    statuses = [
        api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100)).status_code
        for _ in range(3)
    ]

    # Then the first two get the 422, the third passes, and status read created all along
    assert statuses == [422, 422, 200]
    assert api.get("/v1/workspaces/c1/status").json() == {"status": "created"}
    assert sim.faults()["not_ready_next"] == {}


def test_simulator_stuck_workspace_is_a_zombie(
    timed_sim: SimulatorServer, timed_api: httpx.Client, clock: FakeClock
) -> None:
    # Given c1 stuck
    timed_sim.seed(family_seed())
    timed_sim.faults(stuck=["c1"])

    # When hours pass
    clock.advance(6 * 3600)

    # Then it still reads not ready and every transfer gets the not-ready 422
    assert timed_api.get("/v1/workspaces/c1/status").json() == {"status": "not ready"}
    for _ in range(3):
        response = timed_api.post(
            "/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100)
        )
        assert response.status_code == 422
        assert response.json() == {"message": "workspace not ready"}
    # And its siblings are unaffected
    assert (
        timed_api.post(
            "/v2/workspaces/c2/resources/transfer", json=transfer_body(1, 100)
        ).status_code
        == 200
    )


def test_simulator_seeded_status_is_served_and_blocks_transfers(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child seeded in the error state
    sim.seed([*family_seed(children=()), {"id": "bad", "parent_id": MASTER, "status": "error"}])

    # When its status is read and a transfer is tried
    status = api.get("/v1/workspaces/bad/status").json()
    transfer = api.post("/v2/workspaces/bad/resources/transfer", json=transfer_body(1))

    # Then the seeded status is served and the transfer is refused as not ready
    assert status == {"status": "error"}
    assert transfer.status_code == 422


# ---------------------------------------------------------------------------------------------
# status, family, create child
# ---------------------------------------------------------------------------------------------


def test_simulator_status_is_a_single_object(sim: SimulatorServer, api: httpx.Client) -> None:
    # Given a family
    sim.seed(family_seed())

    # When a status is read
    response = api.get("/v1/workspaces/c1/status")

    # Then it is one object (not the swagger's array)
    assert response.status_code == 200
    assert response.json() == {"status": "created"}


def test_simulator_family_is_a_bare_array_of_the_parent_and_all_descendants(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given master -> c1 -> g1, master -> c2, and an unrelated second org
    sim.seed(
        [
            *family_seed(master_limits_enabled=False),
            {"id": "g1", "parent_id": "c1"},
            {"id": "other", "title": "Other org"},
            {"id": "o1", "parent_id": "other"},
        ]
    )

    # When the master's family is listed
    response = api.get(f"/v1/workspaces/{MASTER}/family")

    # Then it is a bare array holding the master and exactly its descendants
    assert response.status_code == 200
    family = response.json()
    assert isinstance(family, list)
    assert {w["id"] for w in family} == {MASTER, "c1", "c2", "g1"}
    by_id = {w["id"]: w for w in family}
    assert by_id["g1"]["parent_id"] == "c1"
    assert by_id["c1"]["parent_id"] == MASTER
    assert "parent_id" not in by_id[MASTER]
    # And each carries the ai product tier with limits_enabled (inherited from the master here)
    for workspace in family:
        assert {"id", "title", "status", "product_tiers"} <= set(workspace)
        ai_tiers = [t for t in workspace["product_tiers"] if t["product"]["id"] == "ai"]
        assert [t["product"]["limits_enabled"] for t in ai_tiers] == [False]


def test_simulator_family_of_a_child_is_that_subtree(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given master -> c1 -> g1
    sim.seed([*family_seed(), {"id": "g1", "parent_id": "c1"}])

    # When c1's family is listed
    family = api.get("/v1/workspaces/c1/family").json()

    # Then it is c1 first, then g1
    assert [w["id"] for w in family] == ["c1", "g1"]


def test_simulator_create_child_answers_not_ready_and_settles_to_created(
    timed_sim: SimulatorServer, timed_api: httpx.Client, clock: FakeClock
) -> None:
    # Given a 10 / 1000 pool
    timed_sim.seed(family_seed(children=()))

    # When a child is created with 2 / 200
    response = timed_api.post(
        f"/v2/workspaces/{MASTER}/child",
        json={"title": "Brand A", "resources": {"ai": {"projects": 2, "prompts": 200}}},
    )

    # Then it answers 200 with the child not ready, carved from the pool
    assert response.status_code == 200
    child = response.json()
    assert (child["title"], child["status"], child["parent_id"]) == ("Brand A", "not ready", MASTER)
    dump = timed_sim.dump()
    assert ai_of(dump, child["id"])["prompts"]["total"] == 200
    assert ai_of(dump, MASTER)["prompts"]["total"] == 800
    assert timed_api.get(f"/v1/workspaces/{child['id']}/status").json() == {"status": "not ready"}

    # And it settles to created after the window, and shows up in the family
    clock.advance(2.0)
    assert timed_api.get(f"/v1/workspaces/{child['id']}/status").json() == {"status": "created"}
    family_ids = [w["id"] for w in timed_api.get(f"/v1/workspaces/{MASTER}/family").json()]
    assert child["id"] in family_ids


def test_simulator_create_child_without_resources_starts_empty(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a pool
    sim.seed(family_seed(children=()))

    # When a child is created with a title only
    child = api.post(f"/v2/workspaces/{MASTER}/child", json={"title": "Bare"}).json()

    # Then the create answer says not ready (even with no window), and its totals are zero
    assert child["status"] == "not ready"
    assert ai_of(sim.dump(), child["id"])["projects"] == usage(0, 0)
    assert api.get(f"/v1/workspaces/{child['id']}/status").json() == {"status": "created"}


def test_simulator_create_child_beyond_the_pool_is_422_and_creates_nothing(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a 10 / 1000 pool
    sim.seed(family_seed(children=()))

    # When a child asks for 11 projects
    response = api.post(
        f"/v2/workspaces/{MASTER}/child",
        json={"title": "Greedy", "resources": {"ai": {"projects": 11, "prompts": 100}}},
    )

    # Then it is the pool-exhausted 422 and no child exists
    assert response.status_code == 422
    assert response.json() == {"message": "insufficient available units in subscription"}
    assert [w["id"] for w in sim.dump()["workspaces"]] == [MASTER]


@pytest.mark.parametrize(
    "body", [{}, {"title": ""}, {"title": 3}, {"title": "x", "resources": {"ai": {"prompts": -1}}}]
)
def test_simulator_create_child_malformed_body_is_400(
    sim: SimulatorServer, api: httpx.Client, body: dict[str, Any]
) -> None:
    # Given a pool
    sim.seed(family_seed(children=()))

    # When a child is created with a malformed body
    response = api.post(f"/v2/workspaces/{MASTER}/child", json=body)

    # Then it is a 400 and nothing was created
    assert response.status_code == 400
    assert len(sim.dump()["workspaces"]) == 1


# ---------------------------------------------------------------------------------------------
# call log
# ---------------------------------------------------------------------------------------------


def test_simulator_call_log_records_the_five_operations_only(
    timed_sim: SimulatorServer, timed_api: httpx.Client, clock: FakeClock
) -> None:
    # Given a family (seeding is a control route, not logged)
    timed_sim.seed(family_seed())

    # When a read, a transfer and a refused status are made
    timed_api.get("/v1/workspaces/c1/resources")
    clock.advance(1.5)
    timed_api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100))
    timed_api.get("/v1/workspaces/c1/status", headers={"Authorization": ""})

    # Then the log has exactly those three, in order, with their details
    calls = timed_sim.calls()
    assert [(c["op"], c["status"], c["seq"]) for c in calls] == [
        ("read_resources", 200, 1),
        ("transfer", 200, 2),
        ("status", 401, 3),
    ]
    transfer = calls[1]
    assert transfer["method"] == "POST"
    assert transfer["path"] == "/enterprise/users/api/v2/workspaces/c1/resources/transfer"
    assert transfer["workspace_id"] == "c1"
    assert transfer["body"] == transfer_body(1, 100)
    assert calls[0]["body"] is None
    assert calls[1]["t"] - calls[0]["t"] == pytest.approx(1.5)
    assert timed_sim.dump()["calls"] == calls

    # And clearing empties it
    timed_sim.clear_calls()
    assert timed_sim.calls() == []
