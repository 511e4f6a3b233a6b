"""The Semrush simulator over real HTTP: every fact of semrush-user-manager.md it models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serenity_allocator.domain.classify import is_metered_quota, is_not_ready, is_pool_exhausted
from serenity_allocator.domain.resources import parse_ai_resources
from serenity_tools.standins.simulator import (
    DISGUISED_QUOTA_405,
    SimulatorControlError,
    SimulatorServer,
    SimulatorState,
    configure,
    is_loopback_peer,
    start_simulator,
)

TOKEN = "test-token"
MASTER = "master"


class FakeClock:
    """Monotonic seconds that only move when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingSleep:
    """A sleep that returns at once and remembers what it was asked."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def usage(used: int, total: int, drafted: int = 0) -> dict[str, int]:
    return {"used": used, "drafted": drafted, "total": total}


def family_seed(
    *,
    projects: int = 10,
    prompts: int = 1000,
    children: tuple[str, ...] = ("c1", "c2"),
    master_limits_enabled: bool = True,
) -> list[dict[str, Any]]:
    seed: list[dict[str, Any]] = [
        {
            "id": MASTER,
            "title": "Org",
            "limits_enabled": master_limits_enabled,
            "ai": {"projects": usage(0, projects), "prompts": usage(0, prompts)},
        }
    ]
    seed += [{"id": child, "title": child.upper(), "parent_id": MASTER} for child in children]
    return seed


def transfer_body(projects: int | None = None, prompts: int | None = None) -> dict[str, Any]:
    ai = {}
    if projects is not None:
        ai["projects"] = projects
    if prompts is not None:
        ai["prompts"] = prompts
    return {"resources": {"ai": ai}}


def ai_of(dump: dict[str, Any], workspace_id: str) -> dict[str, dict[str, int]]:
    by_id = {w["id"]: w for w in dump["workspaces"]}
    ai: dict[str, dict[str, int]] = by_id[workspace_id]["ai"]
    return ai


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    with start_simulator() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(request: pytest.FixtureRequest) -> None:
    if "sim" in request.fixturenames:
        request.getfixturevalue("sim").reset()


@pytest.fixture
def api(sim: SimulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        yield client


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeper() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def timed_sim(clock: FakeClock, sleeper: RecordingSleep) -> Iterator[SimulatorServer]:
    """A simulator whose clock and sleep are the test's: no real waiting anywhere."""
    state = SimulatorState(clock=clock, sleep=sleeper, not_ready_ms=2000)
    with start_simulator(state=state) as server:
        yield server


@pytest.fixture
def timed_api(timed_sim: SimulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=timed_sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        yield client


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
# auth, unknown ids, routing
# ---------------------------------------------------------------------------------------------

OPERATION_REQUESTS = [
    ("GET", "/v1/workspaces/{id}/resources", None),
    ("POST", "/v2/workspaces/{id}/resources/transfer", transfer_body(1, 100)),
    ("GET", "/v1/workspaces/{id}/status", None),
    ("GET", "/v1/workspaces/{id}/family", None),
    ("POST", "/v2/workspaces/{id}/child", {"title": "t"}),
]


@pytest.mark.parametrize(("method", "route", "body"), OPERATION_REQUESTS)
@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Basic abc", "token-without-scheme"])
def test_simulator_missing_or_bad_bearer_is_401(
    sim: SimulatorServer,
    method: str,
    route: str,
    body: dict[str, Any] | None,
    authorization: str | None,
) -> None:
    # Given a family
    sim.seed(family_seed())
    headers = {} if authorization is None else {"Authorization": authorization}

    # When an operation is called without a usable bearer
    with httpx.Client(base_url=sim.api_url, trust_env=False) as client:
        response = client.request(method, route.format(id="c1"), json=body, headers=headers)

    # Then it is a 401 with the upstream's body, and nothing changed
    assert response.status_code == 401
    assert response.json() == {"detail": "Not authenticated"}
    assert len(sim.dump()["workspaces"]) == 3


def test_simulator_accepted_tokens_restrict_the_bearer_and_auth_route_changes_them(
    sim: SimulatorServer,
) -> None:
    # Given only "good" is accepted
    sim.seed(family_seed())
    sim.set_auth(["good"])

    def status_with(token: str) -> int:
        with httpx.Client(
            base_url=sim.api_url, headers={"Authorization": f"Bearer {token}"}, trust_env=False
        ) as client:
            return client.get("/v1/workspaces/c1/status").status_code

    # When / Then: "good" passes and anything else is a 401
    assert (status_with("good"), status_with("other")) == (200, 401)

    # When the accepted list is rotated at run time / Then the old token stops working
    sim.set_auth(["rotated"])
    assert (status_with("good"), status_with("rotated")) == (401, 200)

    # When auth is opened again / Then any non-empty bearer passes
    sim.set_auth(None)
    assert status_with("anything") == 200


def test_simulator_constructor_accepted_tokens_apply_and_survive_reset() -> None:
    # Given a simulator started with accepted_tokens
    with start_simulator(accepted_tokens=["only"]) as server:
        server.seed(family_seed())
        server.set_auth(None)

        # When it is reset
        server.reset()
        server.seed(family_seed())

        # Then the constructor's tokens apply again
        with httpx.Client(base_url=server.api_url, trust_env=False) as client:
            wrong = client.get("/v1/workspaces/c1/status", headers={"Authorization": "Bearer x"})
            right = client.get("/v1/workspaces/c1/status", headers={"Authorization": "Bearer only"})
        assert (wrong.status_code, right.status_code) == (401, 200)


@pytest.mark.parametrize(("method", "route", "body"), OPERATION_REQUESTS)
def test_simulator_unknown_workspace_is_403(
    sim: SimulatorServer, api: httpx.Client, method: str, route: str, body: dict[str, Any] | None
) -> None:
    # Given a family without "ghost"
    sim.seed(family_seed())

    # When an operation names "ghost"
    response = api.request(method, route.format(id="ghost"), json=body)

    # Then it is the upstream's 403
    assert response.status_code == 403
    assert response.json() == {"message": "invalid access attempt"}


def test_simulator_wrong_method_is_a_plain_405_and_unknown_path_a_404(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a family
    sim.seed(family_seed())

    # When a known path is called with the wrong method, and an unknown path is called
    wrong_method = api.get("/v2/workspaces/c1/resources/transfer")
    unknown = api.get("/v1/workspaces/c1/nothing")

    # Then the 405 is plain (not the disguised quota one) and the other is a 404
    assert wrong_method.status_code == 405
    assert not is_metered_quota(wrong_method.status_code, wrong_method.text)
    assert unknown.status_code == 404
    assert sim.calls() == []


# ---------------------------------------------------------------------------------------------
# usage: metered and unmetered writes
# ---------------------------------------------------------------------------------------------


def test_simulator_usage_sets_absolute_used_and_drafted(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child at 5 / 500
    sim.seed(family_seed())
    api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(5, 500))

    # When usage is reported twice (absolute values, not increments)
    sim.usage({"id": "c1", "projects": {"used": 3}, "prompts": {"used": 250, "drafted": 40}})
    sim.usage({"id": "c1", "prompts": {"used": 260}})

    # Then the last values stand and the untouched fields keep theirs
    resources = parse_ai_resources(api.get("/v1/workspaces/c1/resources").json())
    assert (resources.projects.used, resources.projects.total) == (3, 5)
    assert (resources.prompts.used, resources.prompts.drafted) == (260, 40)


def test_simulator_usage_under_an_unmetered_parent_may_exceed_the_total(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child with a zero total under a parent whose ai limits_enabled is false
    sim.seed(family_seed(master_limits_enabled=False))

    # When the child uses 3 projects and 250 prompts
    answer = sim.usage({"id": "c1", "projects": {"used": 3}, "prompts": {"used": 250}})

    # Then nothing is refused and the child is over its total
    assert answer["ai"]["projects"] == usage(3, 0)
    resources = parse_ai_resources(api.get("/v1/workspaces/c1/resources").json())
    assert resources.prompts.free == -250


def test_simulator_usage_under_a_metered_parent_is_refused_with_the_disguised_405(
    sim: SimulatorServer,
) -> None:
    # Given a child with 2 projects / 100 prompts under a metered parent
    sim.seed(family_seed(master_limits_enabled=True))
    with httpx.Client(
        base_url=sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        client.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(2, 100))

    # When a write would take prompts to 101 (projects staying within 2)
    with pytest.raises(SimulatorControlError) as refused:
        sim.usage({"id": "c1", "projects": {"used": 2}, "prompts": {"used": 101}})

    # Then it is the disguised 405 quota rejection (the nginx page), and nothing was applied
    assert refused.value.status == 405
    assert refused.value.text == DISGUISED_QUOTA_405
    assert is_metered_quota(refused.value.status, refused.value.text)
    assert ai_of(sim.dump(), "c1")["projects"]["used"] == 0

    # And a write within the total is fine
    assert sim.usage({"id": "c1", "prompts": {"used": 100}})["ai"]["prompts"]["used"] == 100


def test_simulator_usage_on_an_unknown_id_or_malformed_body_is_refused(
    sim: SimulatorServer,
) -> None:
    # Given a family
    sim.seed(family_seed())

    # When usage names an unknown id, or carries a bad count
    with pytest.raises(SimulatorControlError) as unknown:
        sim.usage({"id": "ghost", "projects": {"used": 1}})
    with pytest.raises(SimulatorControlError) as malformed:
        sim.usage({"id": "c1", "projects": {"used": -1}})

    # Then they are a 404 and a 400
    assert (unknown.value.status, malformed.value.status) == (404, 400)


# ---------------------------------------------------------------------------------------------
# control routes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "expected"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.5", False),
        ("192.168.1.20", False),
        ("::ffff:10.0.0.5", False),
        ("2001:db8::1", False),
        ("0.0.0.0", False),
        ("localhost", False),
        ("", False),
    ],
)
def test_simulator_is_loopback_peer_accepts_only_loopback_addresses(
    peer: str, expected: bool
) -> None:
    # Given a peer address / When it is checked / Then only loopback passes
    assert is_loopback_peer(peer) is expected


def test_simulator_control_routes_refuse_a_non_loopback_peer(
    monkeypatch: pytest.MonkeyPatch, sim: SimulatorServer
) -> None:
    # Given the loopback predicate says the peer is remote
    import serenity_tools.standins.simulator.control as control_module

    monkeypatch.setattr(control_module, "is_loopback_peer", lambda host: False)

    # When a control route is called
    with pytest.raises(SimulatorControlError) as refused:
        sim.reset()

    # Then it is a 403 and the API routes still work
    assert refused.value.status == 403
    with httpx.Client(
        base_url=sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        assert client.get("/v1/workspaces/ghost/status").status_code == 403


def test_simulator_reset_drops_workspaces_faults_and_calls(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given workspaces, faults and calls
    sim.seed(family_seed())
    sim.faults(latency_ms=1, stuck=["c1"], error_rate={"5xx": 0.5})
    api.get("/v1/workspaces/c1/status")

    # When the simulator is reset
    sim.reset()

    # Then everything is back to the start
    dump = sim.dump()
    assert dump["workspaces"] == []
    assert dump["calls"] == []
    assert dump["faults"]["stuck"] == []
    assert dump["faults"]["error_rate"] == {}
    assert dump["faults"]["latency_ms"] == 0


def test_simulator_dump_round_trips_the_seed_shape(sim: SimulatorServer) -> None:
    # Given a seeded family
    seed = [
        {
            "id": MASTER,
            "title": "Org",
            "parent_id": None,
            "status": "created",
            "limits_enabled": True,
            "ai": {
                "projects": usage(1, 10),
                "prompts": usage(5, 1000, drafted=2),
                "weekly_prompts": usage(0, 70),
            },
        },
        {
            "id": "c1",
            "title": "C1",
            "parent_id": MASTER,
            "status": "created",
            "limits_enabled": False,
            "ai": {
                "projects": usage(0, 0),
                "prompts": usage(0, 0),
                "weekly_prompts": usage(0, 0),
            },
        },
    ]
    sim.seed(seed)

    # When it is dumped / Then the workspaces come back in the seed shape
    assert sim.dump()["workspaces"] == seed


@pytest.mark.parametrize(
    "bad_seed",
    [
        [{"id": "c1", "parent_id": "nobody"}],
        [{"id": "a", "parent_id": "b"}, {"id": "b", "parent_id": "a"}],
        [{"id": ""}],
        [{"id": "x"}, {"id": "x"}],
        [{"id": "x", "status": "sleepy"}],
        [{"id": "x", "ai": {"projects": {"used": -1, "total": 1}}}],
        [{"id": "x", "ai": {"tokens": {"used": 1, "total": 1}}}],
    ],
)
def test_simulator_bad_seed_is_400_and_changes_nothing(
    sim: SimulatorServer, bad_seed: list[dict[str, Any]]
) -> None:
    # Given an existing family
    sim.seed(family_seed())
    before = sim.dump()["workspaces"]

    # When a bad seed is posted
    with pytest.raises(SimulatorControlError) as refused:
        sim.seed(bad_seed)

    # Then it is a 400 and the state is untouched
    assert refused.value.status == 400
    assert sim.dump()["workspaces"] == before


def test_simulator_seed_upserts_and_children_inherit_limits_enabled(
    sim: SimulatorServer,
) -> None:
    # Given an unmetered master seeded first
    sim.seed(family_seed(children=(), master_limits_enabled=False))

    # When a child is seeded later without a flag, and the master's title is updated
    sim.seed([{"id": "late", "parent_id": MASTER}])
    sim.seed([{"id": MASTER, "title": "Renamed", "limits_enabled": False}])

    # Then the child inherited the master's flag and the master was replaced in place
    by_id = {w["id"]: w for w in sim.dump()["workspaces"]}
    assert by_id["late"]["limits_enabled"] is False
    assert by_id[MASTER]["title"] == "Renamed"


def test_simulator_faults_omitted_keys_keep_their_value(sim: SimulatorServer) -> None:
    # Given some faults
    sim.faults(latency_ms=3, stuck=["c9"], timeout_hold_ms=50)

    # When only one key is changed
    faults = sim.faults(not_ready_ms=10)

    # Then the others are kept
    assert faults["latency_ms"] == 3
    assert faults["stuck"] == ["c9"]
    assert faults["timeout_hold_ms"] == 50
    assert faults["not_ready_ms"] == 10


@pytest.mark.parametrize(
    "bad_faults",
    [
        {"latency": 1},
        {"latency_ms": -1},
        {"error_rate": {"5xx": 0.7, "429": 0.7}},
        {"error_rate": {"teapot": 0.1}},
        {"fail_next": [{"status": 99}]},
        {"fail_next": [{"status": 503, "op": "delete"}]},
        {"stuck": "c1"},
    ],
)
def test_simulator_bad_faults_are_400(sim: SimulatorServer, bad_faults: dict[str, Any]) -> None:
    # Given a simulator / When bad faults are posted / Then they are refused
    with pytest.raises(SimulatorControlError) as refused:
        sim.faults(**bad_faults)
    assert refused.value.status == 400


# ---------------------------------------------------------------------------------------------
# injected faults
# ---------------------------------------------------------------------------------------------


def test_simulator_fail_next_answers_the_scripted_status_for_the_matching_op_only(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given two 503s scripted for transfers, with a Retry-After
    sim.seed(family_seed())
    sim.faults(fail_next=[{"status": 503, "count": 2, "op": "transfer", "retry_after": 2}])

    # When a status read and three transfers are made
    status = api.get("/v1/workspaces/c1/status")
    transfers = [
        api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100))
        for _ in range(3)
    ]

    # Then the status read is untouched, the two next transfers fail, the third succeeds
    assert status.status_code == 200
    assert [t.status_code for t in transfers] == [503, 503, 200]
    assert transfers[0].headers["Retry-After"] == "2"
    assert transfers[0].json() == {"message": "service unavailable"}
    # And the failed attempts moved nothing
    assert ai_of(sim.dump(), "c1")["projects"]["total"] == 1


def test_simulator_fail_next_can_target_a_workspace_and_serve_a_bare_html_body(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a 502 with an HTML body scripted for c2 only
    sim.seed(family_seed())
    sim.faults(fail_next=[{"status": 502, "workspace_id": "c2", "body": "<h1>Bad Gateway</h1>"}])

    # When c1 then c2 are read
    c1 = api.get("/v1/workspaces/c1/resources")
    c2 = api.get("/v1/workspaces/c2/resources")

    # Then only c2 fails, with the bare text/html body
    assert c1.status_code == 200
    assert c2.status_code == 502
    assert c2.headers["Content-Type"].startswith("text/html")
    assert c2.text == "<h1>Bad Gateway</h1>"


@pytest.mark.parametrize(("kind", "expected_statuses"), [("5xx", {500, 502, 503}), ("429", {429})])
def test_simulator_error_rate_one_fails_every_operation(
    sim: SimulatorServer, api: httpx.Client, kind: str, expected_statuses: set[int]
) -> None:
    # Given an error rate of 1 for one kind
    sim.seed(family_seed())
    sim.faults(error_rate={kind: 1.0}, seed=7)

    # When each of the five operations is called
    statuses = {
        api.request(
            method, route.format(id=MASTER if "child" in route else "c1"), json=body
        ).status_code
        for method, route, body in OPERATION_REQUESTS
    }

    # Then every answer is of that kind
    assert statuses <= expected_statuses


def test_simulator_error_rate_not_ready_applies_to_transfers_only(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a not-ready rate of 1
    sim.seed(family_seed())
    sim.faults(error_rate={"not_ready": 1.0})

    # When a status read and a transfer are made
    status = api.get("/v1/workspaces/c1/status")
    transfer = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100))

    # Then only the transfer gets the not-ready 422
    assert status.status_code == 200
    assert transfer.status_code == 422
    assert is_not_ready(transfer.status_code, transfer.text)


def test_simulator_error_rate_is_deterministic_for_a_seed(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a 50% failure rate with a fixed seed
    sim.seed(family_seed())

    def run() -> list[int]:
        sim.faults(error_rate={"5xx": 0.3, "429": 0.2}, seed=42)
        return [api.get("/v1/workspaces/c1/status").status_code for _ in range(40)]

    # When the same sequence runs twice
    first, second = run(), run()

    # Then it fails the same way both times, with both failures and successes
    assert first == second
    assert 200 in first
    assert any(s >= 500 for s in first)
    assert 429 in first


def test_simulator_timeout_fault_holds_then_answers_504(
    timed_sim: SimulatorServer, timed_api: httpx.Client, sleeper: RecordingSleep
) -> None:
    # Given every request times out, held 20 s by the (injected) sleep
    timed_sim.seed(family_seed())
    timed_sim.faults(error_rate={"timeout": 1.0})

    # When a resources read is made
    response = timed_api.get("/v1/workspaces/c1/resources")

    # Then the request was held for the hold time and then answered 504
    assert response.status_code == 504
    assert sleeper.calls == [20.0]


def test_simulator_timeout_fault_makes_a_short_client_timeout_fire(
    sim: SimulatorServer,
) -> None:
    # Given every request held 300 ms by a real sleep
    sim.seed(family_seed())
    sim.faults(error_rate={"timeout": 1.0}, timeout_hold_ms=300)

    # When a client with a 50 ms timeout asks
    with (
        httpx.Client(
            base_url=sim.api_url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=0.05,
            trust_env=False,
        ) as client,
        pytest.raises(httpx.TimeoutException),
    ):
        client.get("/v1/workspaces/c1/status")

    # Then the client saw a timeout (and the call is logged as a 504)
    assert [c["status"] for c in sim.calls()] == [504]


def test_simulator_latency_is_slept_outside_the_lock(clock: FakeClock) -> None:
    # Given a latency whose sleep only returns once two requests are sleeping together
    barrier = threading.Barrier(2, timeout=5)
    state = SimulatorState(clock=clock, sleep=lambda _seconds: barrier.wait(), latency_ms=5)
    with start_simulator(state=state) as server:
        server.seed(family_seed())

        def read() -> int:
            with httpx.Client(
                base_url=server.api_url,
                headers={"Authorization": f"Bearer {TOKEN}"},
                trust_env=False,
            ) as client:
                return client.get("/v1/workspaces/c1/status").status_code

        # When two requests arrive at once
        with ThreadPoolExecutor(max_workers=2) as pool:
            statuses = list(pool.map(lambda _: read(), range(2)))

    # Then both passed the barrier: their latency overlapped instead of queueing on the lock
    assert statuses == [200, 200]


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


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def test_simulator_configure_declares_the_cli_options() -> None:
    # Given the subcommand parser
    import argparse

    parser = argparse.ArgumentParser()
    configure(parser)

    # When it parses the documented command line
    args = parser.parse_args(["--host", "127.0.0.1", "--port", "8765", "--latency-ms", "25"])

    # Then the options are there
    assert (args.host, args.port, args.latency_ms, args.tokens) == ("127.0.0.1", 8765, 25.0, None)


def test_simulator_cli_serves_until_sigterm(tmp_path: Path) -> None:
    # Given a seed file and the subcommand started on an ephemeral port
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(json.dumps({"workspaces": family_seed()}), encoding="utf-8")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serenity_tools.cli",
            "simulator",
            "--port",
            "0",
            "--seed-file",
            str(seed_file),
            "--token",
            "cli-token",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        ready_line = process.stdout.readline()
        api_url = ready_line.strip().split("api=", 1)[1]

        # When the seeded API is called with the accepted token
        with httpx.Client(
            base_url=api_url, headers={"Authorization": "Bearer cli-token"}, trust_env=False
        ) as client:
            status = client.get("/v1/workspaces/c1/status").json()

        # Then it serves, and stops cleanly on SIGTERM
        assert status == {"status": "created"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
