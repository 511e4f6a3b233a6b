"""The Sweep on children in the tiered prompt shape, over real HTTP (simulator) and moto.

A tiered child (``daily_prompts`` + ``weekly_prompts``, no ``prompts``) is a known shape: the
sweep reports it in its own ``tiered`` count, never as an error toward the abort, skips its
prompts (no flat ``prompts`` to a tiered workspace) and still hands back its surplus projects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from serenity_tools.standins.resources import LocalResources
from tests.integration.allocator_harness import AllocatorHarness, allocator_harness, api_calls
from tests.integration.sweep_stack import MASTER, SweepStack, drain, payload, seeded_stack

if TYPE_CHECKING:
    from serenity_tools.standins.simulator import SimulatorServer

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

TIERS = {"daily_prompts": {"used": 10, "total": 500}, "weekly_prompts": {"used": 40, "total": 900}}


@pytest.fixture
def stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    with seeded_stack(local_resources, sim) as built:
        # Beside the flat fleet: a tiered child with two surplus projects, and a lean one
        sim.seed(
            [
                {
                    "id": "t-surplus",
                    "parent_id": MASTER,
                    "ai": {"projects": {"used": 1, "total": 3}, **TIERS},
                },
                {
                    "id": "t-lean",
                    "parent_id": MASTER,
                    "ai": {"projects": {"used": 1, "total": 1}, **TIERS},
                },
            ]
        )
        yield built


@pytest.fixture
def worker(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[AllocatorHarness]:
    with allocator_harness(local_resources, sim) as harness:
        yield harness


def items(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["workspace_id"]: item for item in result["items"]}


def test_sweep_dry_run_counts_tiered_children_apart_and_skips_their_prompts(
    stack: SweepStack,
) -> None:
    # When a dry run covers the master
    result = stack.invoke(payload(dry_run=True))

    # Then the two tiered children are counted in their own column, not as errors
    assert result["done"] is True and result["aborted"] is False
    counts = result["counts"]
    assert counts["tiered"] == 2
    assert (counts["unexpected_errors"], counts["expected_errors"]) == (0, 0)
    # And the surplus one would give back its projects only; its prompts stay as they are
    surplus, lean = items(result)["t-surplus"], items(result)["t-lean"]
    assert surplus["outcome"] == "would-release"
    assert surplus["tiered"] is True
    assert surplus["target"] == {"projects": 1, "prompts": surplus["before"]["prompts"]}
    assert surplus["units_returned"] == {"projects": 2, "prompts": 0}
    assert (lean["outcome"], lean["tiered"]) == ("nothing-to-release", True)
    # And a flat child carries no tiered flag
    assert items(result)["c-big"]["tiered"] is None


def test_sweep_real_run_on_a_tiered_child_ends_in_a_projects_only_transfer(
    stack: SweepStack, worker: AllocatorHarness
) -> None:
    # When the real run enqueues and the worker drains the queue
    result = stack.invoke(payload(dry_run=False, run_id="rs-tiered-1"))
    messages = stack.queued()
    assert items(result)["t-surplus"]["outcome"] == "enqueued"
    drain(worker, messages)

    # Then the tiered child got a transfer with projects only, and its tiers are untouched
    sent = [c["body"] for c in api_calls(stack.sim, "transfer") if c["workspace_id"] == "t-surplus"]
    assert sent == [{"resources": {"ai": {"projects": 1}}}]
    dump = stack.sim.dump()
    assert dump["violations"] == {"flat_prompts_to_tiered": 0}
    (tiered,) = [w for w in dump["workspaces"] if w["id"] == "t-surplus"]
    assert tiered["ai"] == {"projects": {"used": 1, "drafted": 0, "total": 1}, **TIERS}
    # And the lean one was never enqueued
    assert not any(json.loads(m["Body"])["workspace_id"] == "t-lean" for m in messages)
