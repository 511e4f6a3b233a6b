"""Ceilings end to end: producer -> moto SQS -> the real Allocator handler -> the simulator.

A ceiling never refuses a write that fits: a dimension it leaves out is not enforced, a
block-rounded target above it is capped, and the environment backstop (stricter one wins) is
fail-safe when malformed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import (
    AllocatorHarness,
    allocator_harness,
    api_calls,
    totals_of,
    workspace,
)

MASTER = "ws-master"
CHILD = "ws-child"


def _seed(sim: SimulatorServer, *, projects: tuple[int, int], prompts: tuple[int, int]) -> None:
    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            workspace(CHILD, parent_id=MASTER, projects=projects, prompts=prompts),
        ]
    )


@pytest.fixture
def worker(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> Iterator[AllocatorHarness]:
    with allocator_harness(local_resources, sim) as harness:
        yield harness


def _only_outcome(capture: OutcomeCapture) -> dict[str, Any]:
    [outcome] = capture.outcomes()
    return outcome


def test_worker_ceiling_naming_prompts_only_does_not_cap_projects(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a full child (1 of 1 project) and a ceiling that names prompts only
    _seed(sim, projects=(1, 1), prompts=(100, 200))
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 1}, ceiling={"prompts": 500})

    # When the worker handles it
    worker.invoke()

    # Then the projects top-up goes through (the missing dimension is not a ceiling of 0): the
    # 2 needed plus four blocks of one, 6; the prompts, 100 left (under two blocks), are
    # refilled ahead to 100 plus four blocks, exactly the 500 of the ceiling
    assert totals_of(sim)[CHILD] == (6, 500)
    assert _only_outcome(outcome_capture)["status"] == "topped-up"


def test_worker_ceiling_caps_a_sized_top_up_instead_of_refusing(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given 100 of 100 prompts used, two projects to spare and a ceiling of 150 (one more
    # prompt plus four blocks would be 501)
    _seed(sim, projects=(1, 3), prompts=(100, 100))
    worker.producer.enqueue_ensure(CHILD, MASTER, {"prompts": 1}, ceiling={"prompts": 150})

    # When the worker handles it
    worker.invoke()

    # Then the child is topped up to the ceiling in one transfer
    assert totals_of(sim)[CHILD] == (3, 150)
    assert [call["body"] for call in api_calls(sim, "transfer")] == [
        {"resources": {"ai": {"projects": 3, "prompts": 150}}}
    ]
    outcome = _only_outcome(outcome_capture)
    assert (outcome["status"], outcome["totals_after"]) == (
        "topped-up",
        {"projects": 3, "prompts": 150},
    )


def test_worker_backstop_stricter_than_the_message_refuses_an_exact_need_above_it(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a backstop of 150 prompts and a message ceiling of 500
    _seed(sim, projects=(1, 1), prompts=(100, 100))
    with allocator_harness(local_resources, sim, {"SERENITY_BRAND_AI_CEILING_PROMPTS": "150"}) as w:
        w.producer.enqueue_ensure(CHILD, MASTER, {"prompts": 60}, ceiling={"prompts": 500})

        # When the worker handles an ensure whose exact need (160) passes the backstop
        w.invoke()

    # Then it is refused as brandAiLimit and nothing moved
    outcome = _only_outcome(outcome_capture)
    assert (outcome["status"], outcome["error_code"]) == ("rejected", "brandAiLimit")
    assert api_calls(sim, "transfer") == []


def test_worker_backstop_alone_caps_a_top_up(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a backstop of 150 prompts, no message ceiling, and two projects to spare
    _seed(sim, projects=(1, 3), prompts=(100, 100))
    with allocator_harness(local_resources, sim, {"SERENITY_BRAND_AI_CEILING_PROMPTS": "150"}) as w:
        w.producer.enqueue_ensure(CHILD, MASTER, {"prompts": 1})

        # When the worker handles it
        w.invoke()

    # Then the top-up is capped at the backstop
    assert totals_of(sim)[CHILD] == (3, 150)


def test_worker_malformed_backstop_is_logged_once_and_not_enforced(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a typo in the projects backstop ("5o00" must not become 5)
    _seed(sim, projects=(1, 1), prompts=(100, 100))
    overrides = {"SERENITY_BRAND_AI_CEILING_PROJECTS": "5o00"}
    with allocator_harness(local_resources, sim, overrides) as w:
        w.producer.enqueue_ensure(CHILD, MASTER, {"projects": 9})

        # When the container starts and handles an ensure for 10 projects
        w.invoke()

    # Then the top-up goes through uncapped (projects: the 10 needed plus the 9 asked again,
    # more than four blocks: 19; the prompts, left no room, refilled ahead in the same
    # transfer to 100 plus four blocks: 500), and the cold start logged the ignored variable
    # once
    assert totals_of(sim)[CHILD] == (19, 500)
    backstop = [r for r in caplog.records if "ceiling backstop" in r.getMessage()]
    assert len(backstop) == 1
    assert backstop[0].levelname == "WARNING"
    assert backstop[0].__dict__["ignored"] == ["SERENITY_BRAND_AI_CEILING_PROJECTS"]
    assert (backstop[0].__dict__["projects"], backstop[0].__dict__["prompts"]) == (
        "not enforced",
        "not enforced",
    )
