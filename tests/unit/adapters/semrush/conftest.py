"""Fixtures shared by the Semrush client tests: the seeded simulator, the sleep, the client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_tools.standins.simulator import SimulatorServer
from tests.unit.adapters.semrush.helpers import FAMILY, SECRET_TOKEN, RecordingSleep


@pytest.fixture
def sim(simulator: SimulatorServer) -> SimulatorServer:
    # The session's simulator (tests/conftest.py), reset and seeded with these tests' family.
    simulator.reset()
    simulator.seed(FAMILY)
    return simulator


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()


_CONFIG_FIELDS = ("timeout_s", "max_retries", "backoff_s", "sleep", "clock")
"""The keywords a test may override that belong to the client's config."""


@pytest.fixture
def make_client(
    sim: SimulatorServer, sleeps: RecordingSleep
) -> Iterator[Callable[..., SemrushClient]]:
    built: list[SemrushClient] = []

    def build(**overrides: Any) -> SemrushClient:
        options: dict[str, Any] = {
            "base_url": sim.origin,
            "token_provider": StaticTokenProvider(SECRET_TOKEN),
            "timeout_s": 5.0,
            "max_retries": 3,
            "backoff_s": 0.5,
            "sleep": sleeps,
        }
        options.update(overrides)
        config = {k: options.pop(k) for k in _CONFIG_FIELDS if k in options}
        client = SemrushClient(**options, config=SemrushClientConfig(**config))
        built.append(client)
        return client

    yield build
    for client in built:
        client.close()
