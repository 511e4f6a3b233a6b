"""Fidelity of the settle poll and of the pool read, over real HTTP to the simulator.

Facts (semrush-user-manager.md, "Child workspaces, and other read-side facts"): settling can
take longer than 15 s (the upstream polls 30 x 1 s); ``/parent/resources`` returns the
workspace's OWN allocation, never the master pool.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.domain.allocation import (
    EnsureAsk,
    EnsureRules,
    ReleaseAsk,
    ReleaseRules,
    ensure_headroom,
    release_surplus,
)
from serenity_allocator.domain.errors import SettleTimeoutError
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.transfer import FAIL_FAST, SETTLE, TransferPolicy
from serenity_allocator.handlers.allocator_runtime import AllocatorRuntime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_tools.standins.simulator import SimulatorServer, SimulatorState, start_simulator
from tests.fakes import FakeClock, InMemoryGateway, transfer_context
from tests.unit.handlers.allocator_rig import BASE_ENV

MASTER = "ws-master"
CHILD = "ws-child"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def slow_settling(clock: FakeClock) -> Iterator[SimulatorServer]:
    # A simulator on the test's clock: a child stays "not ready" 20 s after each transfer.
    state = SimulatorState(not_ready_ms=20_000.0, clock=clock, sleep=clock.sleep)
    with start_simulator(state=state) as server:
        server.seed(
            [
                {"id": MASTER, "ai": {"projects": {"total": 10}, "prompts": {"total": 1_000}}},
                {
                    "id": CHILD,
                    "parent_id": MASTER,
                    "ai": {"projects": {"used": 1, "total": 3}, "prompts": {"total": 100}},
                },
            ]
        )
        yield server


def release(server: SimulatorServer, clock: FakeClock, **policy: float) -> object:
    with SemrushClient(
        server.origin, StaticTokenProvider("tok"), config=SemrushClientConfig(timeout_s=5.0)
    ) as client:
        return release_surplus(
            client,
            ReleaseAsk(CHILD),
            transfer_context(clock),
            ReleaseRules(policy=SETTLE.model_copy(update=policy)),
        )


def test_release_tolerates_a_settle_longer_than_15_s(
    slow_settling: SimulatorServer, clock: FakeClock
) -> None:
    # When a release's transfer leaves the child settling for 20 s
    result = release(slow_settling, clock)

    # Then the default poll (30 x 1 s) waits it out: released, after 20 one-second sleeps
    assert getattr(result, "outcome", None) == "released"
    assert clock.sleeps == [1.0] * 20


def test_release_with_the_first_allocators_12_polls_times_out_on_that_settle(
    slow_settling: SimulatorServer, clock: FakeClock
) -> None:
    # The old 12 x 1 s would have given up (a transient settleTimeout, redelivered)
    result = release(slow_settling, clock, settle_poll_attempts=12)

    assert getattr(result, "error_code", None) == SettleTimeoutError.code


def test_settle_poll_is_configured_from_the_environment() -> None:
    # Given the defaults, and an override
    def policy(**env: str) -> TransferPolicy:
        settings = AllocatorSettings.from_env({**BASE_ENV, **env})
        return AllocatorRuntime(settings=settings, gateway=InMemoryGateway()).release_policy

    default = policy()
    custom = policy(SETTLE_POLL_ATTEMPTS="45", SETTLE_POLL_INTERVAL_S="0.5")

    # Then 30 x 1 s by default; the variables change both
    assert (default.settle_poll_attempts, default.settle_poll_interval_s) == (30, 1.0)
    assert (custom.settle_poll_attempts, custom.settle_poll_interval_s) == (45, 0.5)


def test_the_pool_is_read_from_the_masters_own_resources_never_parent_resources(
    sim: SimulatorServer,
) -> None:
    # Given a child one block short
    sim.seed(
        [
            {"id": MASTER, "ai": {"projects": {"total": 10}, "prompts": {"total": 1_000}}},
            {"id": CHILD, "parent_id": MASTER, "ai": {"prompts": {"used": 100, "total": 100}}},
        ]
    )
    sim.clear_calls()

    # When an ensure tops it up
    with SemrushClient(
        sim.origin, StaticTokenProvider("tok"), config=SemrushClientConfig(timeout_s=5.0)
    ) as client:
        ensure_headroom(
            client,
            EnsureAsk(CHILD, MASTER, Totals(prompts=1), include_drafted=False),
            EnsureRules(policy=FAIL_FAST),
            transfer_context(FakeClock()),
        )

    # Then the pool came from GET /v1/workspaces/<master>/resources; /parent/resources (the
    # child's OWN allocation, not the pool) was never asked
    reads = [c["path"] for c in sim.calls() if c["method"] == "GET"]
    prefix = "/enterprise/users/api/v1/workspaces"
    assert reads == [f"{prefix}/{CHILD}/resources", f"{prefix}/{MASTER}/resources"]
    assert not any("/parent/" in call["path"] for call in sim.calls())


@pytest.mark.parametrize(
    ("name", "value"), [("SETTLE_POLL_ATTEMPTS", "-1"), ("SETTLE_POLL_INTERVAL_S", "0")]
)
def test_settle_poll_refuses_a_bad_value_naming_it(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        AllocatorSettings.from_env({**BASE_ENV, name: value})
