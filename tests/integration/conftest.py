"""Fixtures shared by the integration tests beside those of tests/conftest.py."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from serenity_allocator.adapters.observability import SERVICE, logger


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
