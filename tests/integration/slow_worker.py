"""The worker behind a slow AWS endpoint, on the function's clock: what the slow tests share.

test_slow_aws (a slow DLQ, a slow event bus) and test_slow_ledger (slow ledger writes, throttled
lookups) arrange the same worker: every outside call gets one budget of ``CALL_BUDGET_S``, the
proxy holds a picked call for ``HOLD_S`` and moves the function's clock by that whole budget, and
the batch runs on that clock, so which calls fit is exact on any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from serenity_tools.standins.resources import LocalResources
from tests.integration.allocator_harness import AllocatorHarness, allocator_harness, workspace
from tests.integration.slow_aws_proxy import FunctionClock, HoldRule, SlowProxy

if TYPE_CHECKING:
    from serenity_tools.standins.simulator import SimulatorServer

HOLD_S = 4.0
"""How long the proxy holds a slow call: longer than any call the worker may wait for."""
CALL_BUDGET_S = 2.0
"""One outside call's budget: an AWS call then gets one attempt of 0.5 s connect + 1.5 s read."""
SAFETY_MARGIN_MS = 500

HoldAwsCalls = Callable[[str, HoldRule], AbstractContextManager[SlowProxy]]
"""The ``hold_aws_calls`` fixture: (endpoint variable, rule) -> that service behind the proxy."""


@contextmanager
def worker_on_the_function_clock(
    resources: LocalResources,
    sim: SimulatorServer,
    clock: FunctionClock,
    overrides: Mapping[str, str | None] | None = None,
) -> Iterator[AllocatorHarness]:
    """The production runtime with one CALL_BUDGET_S per outside call, its deadline on ``clock``."""
    budgets: dict[str, str | None] = {
        "SEMRUSH_TIMEOUT_S": str(CALL_BUDGET_S),
        "AWS_CALL_BUDGET_S": str(CALL_BUDGET_S),
        "SAFETY_MARGIN_MS": str(SAFETY_MARGIN_MS),
    }
    with allocator_harness(resources, sim, {**budgets, **(overrides or {})}) as harness:
        harness.runtime.clock = clock
        yield harness


def seed_roomy_children(sim: SimulatorServer, master: str, children: tuple[str, ...]) -> None:
    """A pool and ``children`` that already hold room, so a small ensure needs no transfer.

    Room in both dimensions: two projects (the projects' refill mark) and 400 prompts to spare,
    or the ensure would refill them ahead.
    """
    sim.seed(
        [
            workspace(master, projects=(0, 100), prompts=(0, 10_000)),
            *(
                workspace(child, parent_id=master, projects=(1, 3), prompts=(100, 500))
                for child in children
            ),
        ]
    )


def enqueue_a_small_ensure_each(
    worker: AllocatorHarness, master: str, children: tuple[str, ...]
) -> list[str]:
    """One 10-prompt ensure per child, so one message per group; returns their request ids."""
    return [worker.producer.enqueue_ensure(child, master, {"prompts": 10}) for child in children]
