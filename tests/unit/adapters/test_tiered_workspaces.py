"""Tiered prompt workspaces over real HTTP: the simulator serves the shape, the client reads it,
and the allocation rules never send a flat ``prompts`` to one (semrush-user-manager.md, "The
tiered prompt shape")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureHooks,
    EnsureRules,
    ReleaseAsk,
    ReleaseRules,
    ensure_headroom,
    release_surplus,
)
from serenity_allocator.domain.errors import MalformedResponseError, TieredPromptsError
from serenity_allocator.domain.model import AiResources, DimensionUsage, PromptTiers, Totals
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE
from serenity_tools.standins.simulator import SimulatorServer
from tests.fakes import FakeClock, RecordingObserver, transfer_context
from tests.unit.handlers.allocator_rig import (
    ensure_record,
    failed_ids,
    metric_total,
    new_worker,
    read_emf,
)

MASTER = "ws-master"
FLAT_MASTER = "ws-flat-master"
TIERED_MASTER = "ws-tiered-master"
TOKEN = "tok-tiered-unit"


def tiered_ai(projects: tuple[int, int], daily: tuple[int, int], weekly: tuple[int, int]) -> Any:
    return {
        "projects": {"used": projects[0], "total": projects[1]},
        "daily_prompts": {"used": daily[0], "total": daily[1]},
        "weekly_prompts": {"used": weekly[0], "total": weekly[1]},
    }


def flat_ai(projects: tuple[int, int], prompts: tuple[int, int]) -> Any:
    return {
        "projects": {"used": projects[0], "total": projects[1]},
        "prompts": {"used": prompts[0], "total": prompts[1]},
    }


@pytest.fixture
def family(sim: SimulatorServer) -> SimulatorServer:
    sim.seed(
        [
            {"id": MASTER, "ai": flat_ai((0, 50), (0, 10_000))},
            # children of the flat pool
            {"id": "tiered", "parent_id": MASTER, "ai": tiered_ai((1, 1), (40, 100), (90, 500))},
            {"id": "flat", "parent_id": MASTER, "ai": flat_ai((1, 1), (100, 100))},
            # a tiered pool, with one flat child
            {"id": TIERED_MASTER, "ai": tiered_ai((0, 13), (0, 800), (0, 800))},
            {"id": "under-tiered", "parent_id": TIERED_MASTER, "ai": flat_ai((1, 1), (90, 100))},
        ]
    )
    sim.clear_calls()
    return sim


@pytest.fixture
def client(family: SimulatorServer) -> Iterator[SemrushClient]:
    with SemrushClient(
        family.origin, StaticTokenProvider(TOKEN), config=SemrushClientConfig(timeout_s=5.0)
    ) as built:
        yield built


def transfers(sim: SimulatorServer) -> list[tuple[str, Any]]:
    return [(c["workspace_id"], c["body"]) for c in sim.calls() if c["op"] == "transfer"]


def violations(sim: SimulatorServer) -> int:
    counted: int = sim.dump()["violations"]["flat_prompts_to_tiered"]
    return counted


# ---- the simulator serves the shape, the client reads both --------------------------------


def test_simulator_serves_a_tiered_workspace_in_its_own_shape(family: SimulatorServer) -> None:
    # Given a seeded tiered child / When its resources are read over HTTP
    response = httpx.get(
        f"{family.origin}/enterprise/users/api/v1/workspaces/tiered/resources",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )

    # Then the tiers come back as seeded, each {used, total}, and there is no prompts key
    assert response.status_code == 200
    assert response.json()["product_resources"]["ai"]["resources"] == {
        "projects": {"used": 1, "drafted": 0, "total": 1},
        "daily_prompts": {"used": 40, "total": 100},
        "weekly_prompts": {"used": 90, "total": 500},
    }


def test_client_reads_the_tiered_shape_with_its_tightest_tier_as_prompts(
    client: SemrushClient,
) -> None:
    # When the tiered child is read / Then both tiers are kept; prompts is the tighter one
    assert client.read_resources("tiered") == AiResources(
        projects=DimensionUsage(used=1, total=1),
        prompts=DimensionUsage(used=40, total=100),
        prompt_tiers=PromptTiers(
            daily=DimensionUsage(used=40, total=100), weekly=DimensionUsage(used=90, total=500)
        ),
    )


def test_client_reads_the_flat_shape_as_before(client: SemrushClient) -> None:
    resources = client.read_resources("flat")

    assert resources == AiResources(
        projects=DimensionUsage(used=1, total=1), prompts=DimensionUsage(used=100, total=100)
    )
    assert resources.is_tiered is False


@pytest.mark.parametrize(
    ("resources", "named"),
    [
        # neither shape: no prompts, no tiers
        ({"projects": {"used": 0, "total": 1}}, "product_resources.ai.resources.prompts"),
        # weekly alone is the flat shape's extra, not a tiered body
        (
            {"projects": {"used": 0, "total": 1}, "weekly_prompts": {"used": 0, "total": 5}},
            "product_resources.ai.resources.prompts",
        ),
        # half a tiered body
        (
            {"projects": {"used": 0, "total": 1}, "daily_prompts": {"used": 0, "total": 5}},
            "product_resources.ai.resources.weekly_prompts",
        ),
        (
            {
                "projects": {"used": 0, "total": 1},
                "daily_prompts": {"used": 0},
                "weekly_prompts": {"used": 0, "total": 5},
            },
            "product_resources.ai.resources.daily_prompts.total",
        ),
    ],
)
def test_client_refuses_a_body_with_neither_shape(
    sim: SimulatorServer, resources: dict[str, Any], named: str
) -> None:
    # Given the upstream answers a body that is neither flat nor completely tiered
    sim.seed([{"id": MASTER}])
    sim.faults(
        fail_next=[
            {
                "status": 200,
                "op": "read_resources",
                "body": {"product_resources": {"ai": {"resources": resources}}},
            }
        ]
    )

    # When it is read / Then it is malformed, naming the missing field
    pattern = named.replace(".", r"\.") + " is missing"
    with (
        SemrushClient(
            sim.origin, StaticTokenProvider(TOKEN), config=SemrushClientConfig(timeout_s=5.0)
        ) as client,
        pytest.raises(MalformedResponseError, match=pattern),
    ):
        client.read_resources(MASTER)


# ---- ensure -------------------------------------------------------------------------------


def ensure(
    client: SemrushClient,
    child: str,
    parent: str,
    need: Totals,
    observer: RecordingObserver,
    is_unmetered: Callable[[str], bool] | None = None,
) -> Any:
    return ensure_headroom(
        client,
        EnsureAsk(child, parent, need, include_drafted=False),
        EnsureRules(policy=FAIL_FAST),
        transfer_context(FakeClock(), observer=observer),
        EnsureHooks(is_unmetered=is_unmetered),
    )


def test_ensure_whose_need_every_tier_covers_is_a_hot_path(
    client: SemrushClient, family: SimulatorServer
) -> None:
    # Given daily 40/100 and weekly 90/500, and two projects to spare (none refilled ahead) /
    # When 60 more prompts are needed (fits both)
    family.seed(
        [{"id": "tiered", "parent_id": MASTER, "ai": tiered_ai((1, 3), (40, 100), (90, 500))}]
    )
    observer = RecordingObserver()
    result = ensure(client, "tiered", MASTER, Totals(prompts=60), observer)

    # Then no transfer; the request is counted as meeting a tiered child
    assert result.outcome == "hot-path"
    assert transfers(family) == []
    assert observer.args_of("tiered_workspace_met") == [("child",)]


def test_ensure_needing_prompts_on_a_tiered_child_is_refused_terminal_without_transfer(
    client: SemrushClient, family: SimulatorServer
) -> None:
    # Given daily 40/100 / When 61 more prompts are needed (one past the daily tier)
    observer = RecordingObserver()
    with pytest.raises(TieredPromptsError) as refused:
        ensure(client, "tiered", MASTER, Totals(prompts=61), observer)

    # Then refused with its own terminal code, no pool read and nothing transferred
    assert refused.value.code == "tieredPrompts"
    assert refused.value.transient is False
    assert [c["op"] for c in family.calls()] == ["read_resources"]
    assert observer.args_of("rejected") == [("tieredPrompts",)]
    assert violations(family) == 0


def test_ensure_projects_only_on_a_tiered_child_sends_projects_only(
    client: SemrushClient, family: SimulatorServer
) -> None:
    # Given a tiered child at 1/1 projects / When one more project is needed
    result = ensure(client, "tiered", MASTER, Totals(projects=1), RecordingObserver())

    # Then a projects-only transfer raised it (the 2 needed plus four blocks of one: 6); its
    # tiers are untouched
    assert result.outcome == "topped-up"
    assert result.after == Totals(projects=6, prompts=100)
    assert transfers(family) == [("tiered", {"resources": {"ai": {"projects": 6}}})]
    assert client.read_resources("tiered").projects.total == 6
    assert violations(family) == 0


def test_ensure_needing_prompts_from_a_tiered_pool_is_refused_without_transfer(
    client: SemrushClient, family: SimulatorServer
) -> None:
    # Given a flat child at 90/100 under a tiered pool / When 20 more prompts are needed
    observer = RecordingObserver()
    with pytest.raises(TieredPromptsError):
        ensure(client, "under-tiered", TIERED_MASTER, Totals(prompts=20), observer)

    # Then the pool was read (it is what is tiered), nothing was transferred
    assert [c["op"] for c in family.calls()] == ["read_resources", "read_resources"]
    assert observer.args_of("tiered_workspace_met") == [("pool",)]
    assert transfers(family) == []


def test_ensure_projects_only_from_a_tiered_pool_sends_projects_only(
    client: SemrushClient, family: SimulatorServer
) -> None:
    result = ensure(client, "under-tiered", TIERED_MASTER, Totals(projects=1), RecordingObserver())

    # (the 2 needed plus four blocks of one)
    assert result.outcome == "topped-up"
    assert transfers(family) == [("under-tiered", {"resources": {"ai": {"projects": 6}}})]
    assert violations(family) == 0


def test_ensure_under_an_unmetered_parent_skips_a_tiered_child_too(
    client: SemrushClient, family: SimulatorServer
) -> None:
    # An unmetered parent means nothing would be transferred at all: not a tiered refusal.
    result = ensure(
        client,
        "tiered",
        MASTER,
        Totals(prompts=500),
        RecordingObserver(),
        is_unmetered=lambda _parent: True,
    )

    assert result.outcome == "unmetered"
    assert transfers(family) == []


# ---- release ------------------------------------------------------------------------------


def test_release_on_a_tiered_child_lowers_projects_only(
    sim: SimulatorServer,
) -> None:
    # Given a tiered child holding 3 projects, 1 used
    sim.seed(
        [
            {"id": MASTER, "ai": flat_ai((0, 50), (0, 10_000))},
            {"id": "tiered", "parent_id": MASTER, "ai": tiered_ai((1, 3), (0, 900), (0, 900))},
        ]
    )
    sim.clear_calls()
    observer = RecordingObserver()

    # When its surplus is released
    with SemrushClient(
        sim.origin, StaticTokenProvider(TOKEN), config=SemrushClientConfig(timeout_s=5.0)
    ) as client:
        result = release_surplus(
            client,
            ReleaseAsk("tiered"),
            transfer_context(FakeClock(), observer=observer),
            ReleaseRules(policy=SETTLE),
        )

    # Then projects went back to one block; no prompts key was sent; the tiers are as seeded
    assert result.outcome == "released"
    assert result.plan is not None and result.plan.lowered == ("projects",)
    assert transfers(sim) == [("tiered", {"resources": {"ai": {"projects": 1}}})]
    assert violations(sim) == 0
    assert observer.args_of("tiered_workspace_met") == [("child",)]


def test_release_on_a_tiered_child_with_no_project_surplus_sends_nothing(
    client: SemrushClient, family: SimulatorServer
) -> None:
    # Given a tiered child with far more prompts than it uses, but projects at 1/1
    result = release_surplus(
        client, ReleaseAsk("tiered"), transfer_context(FakeClock()), ReleaseRules(policy=SETTLE)
    )

    # Then nothing to release: its prompts are never lowered by a flat transfer
    assert result.outcome == "nothing-to-release"
    assert transfers(family) == []


# ---- the simulator's guard rail -----------------------------------------------------------


def test_simulator_counts_a_flat_prompts_transfer_to_a_tiered_workspace(
    family: SimulatorServer,
) -> None:
    # When a flat prompts transfer is sent to a tiered child (what the allocator never does)
    response = httpx.post(
        f"{family.origin}/enterprise/users/api/v2/workspaces/tiered/resources/transfer",
        headers={"Authorization": f"Bearer {TOKEN}"},
        json={"resources": {"ai": {"projects": 1, "prompts": 200}}},
    )

    # Then it is recorded as a violation, and moves no prompts
    assert response.status_code == 200
    assert violations(family) == 1
    tiers = family.dump()["workspaces"]
    tiered = next(w for w in tiers if w["id"] == "tiered")
    assert tiered["ai"]["daily_prompts"] == {"used": 40, "total": 100}
    assert "prompts" not in tiered["ai"]


# ---- the worker: a terminal outcome, never a retry ------------------------------------------


def test_worker_completes_a_tiered_prompts_ensure_on_first_receive_with_its_code(
    client: SemrushClient, family: SimulatorServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the allocator worker talking to the simulator
    worker = new_worker(client)  # type: ignore[arg-type]
    capsys.readouterr()

    # When one ensure needs prompts on the tiered child and the next a project (coalesced, the
    # combined call is refused and splits)
    response = worker.invoke(
        ensure_record("m1", "tiered", prompts=500, parent=MASTER),
        ensure_record("m2", "tiered", projects=1, parent=MASTER),
    )

    # Then neither fails its record (nothing is retried); the first is rejected with its code
    assert failed_ids(response) == []
    refused = worker.outcome("req-m1")
    assert (refused.status, refused.error_code) == ("rejected", "tieredPrompts")
    # (the project: the 2 needed plus four blocks of one, 6)
    assert worker.outcome("req-m2").status == "topped-up"
    assert transfers(family) == [("tiered", {"resources": {"ai": {"projects": 6}}})]
    assert violations(family) == 0
    _, data = read_emf(capsys)
    assert metric_total(data, "AllocationRejection", "tieredPrompts") == 1
    # One per read that met it, like HeadroomCheck: the combined call, then each request alone
    assert metric_total(data, "TieredWorkspace", "child") == 3
