"""The sweep's in-memory rig shared by the sweep use-case tests: families, a store, clocks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from serenity_allocator.application.sweep.ports import SweepEnvironment
from serenity_allocator.application.sweep.run_batch import run_sweep_batch
from serenity_allocator.domain.model import Blocks, Totals
from serenity_allocator.domain.sweep.model import SweepItem, SweepRequest, SweepResult
from tests.fakes import (
    FakeClock,
    InMemoryCheckpointStore,
    InMemoryGateway,
    RecordingEnqueuer,
    RecordingObserver,
)

MASTER = "m1"
OTHER_MASTER = "m2"
RUN = "rs-unit-1"
BLOCKS = Blocks(projects=1, prompts=100)
FLOOR = BLOCKS.as_totals()
POOL = Totals(projects=50, prompts=10_000)
EPOCH = 1_767_000_000.0


def mixed_family() -> InMemoryGateway:
    """Children of m1 with every kind of outcome, in listing order."""
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=POOL)
    # c1: 1000 prompts, uses 150 -> 200 (800 back)
    gateway.add_child(
        "c1", MASTER, total=Totals(projects=1, prompts=1_000), used=Totals(projects=1, prompts=150)
    )
    # c2: already at the floor -> nothing to release
    gateway.add_child("c2", MASTER, total=FLOOR)
    # c3: 5 projects, uses 2 -> 2 (3 back); prompts exactly used
    gateway.add_child(
        "c3", MASTER, total=Totals(projects=5, prompts=300), used=Totals(projects=2, prompts=300)
    )
    # c4: drafts count: 350 drafted -> 400 (1600 back)
    gateway.add_child(
        "c4",
        MASTER,
        total=Totals(projects=1, prompts=2_000),
        used=Totals(projects=1, prompts=0),
        drafted=Totals(projects=0, prompts=350),
    )
    # c5: a zombie, never touched
    gateway.add_child("c5", MASTER, total=Totals(projects=1, prompts=500), status="not ready")
    return gateway


WITH_SURPLUS = ["c1", "c3", "c4"]


def surplus_family(count: int, *, parent: str = MASTER) -> InMemoryGateway:
    """``count`` children k1..kN, each holding 900 prompts more than it uses."""
    gateway = InMemoryGateway()
    gateway.add_master(parent, total=POOL)
    for index in range(1, count + 1):
        gateway.add_child(
            f"k{index}",
            parent,
            total=Totals(projects=1, prompts=1_000),
            used=Totals(projects=1, prompts=100),
        )
    return gateway


@dataclass
class Rig:
    """The sweep's collaborators on fake clocks; ``run`` is one invocation."""

    gateway: InMemoryGateway
    store: InMemoryCheckpointStore = field(default_factory=InMemoryCheckpointStore)
    enqueuer: RecordingEnqueuer = field(default_factory=RecordingEnqueuer)
    clock: FakeClock = field(default_factory=FakeClock)
    wall: FakeClock = field(default_factory=lambda: FakeClock(start=EPOCH))
    observer: RecordingObserver = field(default_factory=RecordingObserver)

    def env(
        self,
        *,
        invocation_id: str = "inv-1",
        budget_s: float = 900.0,
        dynamic_allocation: bool = True,
        on_item: Callable[[SweepItem], None] | None = None,
        sleep: Callable[[float], None] | None = None,
        target_budget_s: float = 20.0,
    ) -> SweepEnvironment:
        return SweepEnvironment(
            gateway=self.gateway,
            store=self.store,
            enqueuer=self.enqueuer,
            clock=self.clock,
            wall_clock=self.wall,
            sleep=sleep or self.clock.sleep,
            deadline=self.clock() + budget_s,
            invocation_id=invocation_id,
            lease_until=self.wall() + budget_s,
            dynamic_allocation=dynamic_allocation,
            blocks=BLOCKS,
            target_budget_s=target_budget_s,
            observer=self.observer,
            on_item=on_item,
        )

    def run(self, run_id: str = RUN, /, **payload: Any) -> SweepResult:
        env_keys = {
            "invocation_id",
            "budget_s",
            "dynamic_allocation",
            "on_item",
            "sleep",
            "target_budget_s",
        }
        env_kwargs = {k: payload.pop(k) for k in list(payload) if k in env_keys}
        return run_sweep_batch(sweep_request(**payload), run_id, self.env(**env_kwargs))

    def expire_lease(self) -> None:
        """Move wall time past any lease an invocation could have taken."""
        self.wall.advance(3_600)


def sweep_request(**payload: Any) -> SweepRequest:
    body: dict[str, Any] = {"parent_workspace_ids": [MASTER], "rate_limit_ms": 0}
    body.update(payload)
    return SweepRequest.model_validate(body)


def outcomes(result: SweepResult) -> dict[str, str]:
    return {item.workspace_id: item.outcome for item in result.items}
