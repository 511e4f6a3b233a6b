"""Fixtures shared by the integration tests beside those of tests/conftest.py."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest

from serenity_allocator.adapters.observability import SERVICE, logger
from serenity_tools.standins.resources import LocalResources
from tests.integration.slow_aws_proxy import FunctionClock, HoldRule, SlowProxy, slow_aws_service
from tests.integration.slow_worker import CALL_BUDGET_S, HOLD_S, HoldAwsCalls


@pytest.fixture
def service_log_lines() -> Iterator[io.StringIO]:
    """Every structured log line the service logger writes, formatted as in Lambda, at DEBUG."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logger.registered_formatter)
    service_logger = logging.getLogger(SERVICE)
    previous_level = service_logger.level
    service_logger.addHandler(handler)
    service_logger.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        service_logger.removeHandler(handler)
        service_logger.setLevel(previous_level)


@pytest.fixture
def function_clock() -> FunctionClock:
    """The invocation's clock for the slow tests: a held call costs one AWS call budget."""
    return FunctionClock()


@pytest.fixture
def hold_aws_calls(
    local_resources: LocalResources, monkeypatch: pytest.MonkeyPatch, function_clock: FunctionClock
) -> HoldAwsCalls:
    """Put one AWS service behind the proxy: the calls a rule picks wait HOLD_S, cost one budget."""

    def hold(endpoint_variable: str, rule: HoldRule) -> AbstractContextManager[SlowProxy]:
        return slow_aws_service(
            local_resources.endpoint_url,
            endpoint_variable,
            rule,
            monkeypatch=monkeypatch,
            clock=function_clock,
            hold_s=HOLD_S,
            charge_s=CALL_BUDGET_S,
        )

    return hold
