"""Fixtures shared by the simulator's tests: one server per module, reset between tests."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from serenity_tools.standins.simulator import SimulatorServer, SimulatorState, start_simulator
from tests.tools.standins.simulator.helpers import TOKEN, FakeClock, RecordingSleep


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
