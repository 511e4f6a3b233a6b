"""The Allocator Lambda's in-memory rig shared by the handler tests: a worker, records, EMF.

A worker calls ``lambda_handler(event, context, runtime=...)`` exactly as Lambda would, with
an injected runtime: the in-memory conserving gateway, a fake clock whose sleeps never wait,
and recording fakes for the DLQ, the outcome bus and the producer. No AWS, no network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from serenity_allocator.adapters.observability import METRIC_CATALOG
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import AllocatorRuntime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_tools.standins.lambda_context import LocalLambdaContext
from tests.fakes import (
    FakeClock,
    InMemoryGateway,
    RecordingDeadLetters,
    RecordingEnqueuer,
    RecordingOutcomes,
    sqs_event,
    sqs_record,
)

MASTER = "ws-master"
ENVIRONMENT = "unit"
MAX_RECEIVE_COUNT = 5
SENT_MS = 1_748_779_200_000
QUEUE_LAG_MS = 1_500.0
BASE_ENV = {
    "SEMRUSH_BASE_URL": "http://127.0.0.1:9",
    "SEMRUSH_TOKEN": "tok-unit-never-used",
    "ENVIRONMENT": ENVIRONMENT,
    "MAX_RECEIVE_COUNT": str(MAX_RECEIVE_COUNT),
    "SERENITY_DYNAMIC_ALLOCATION": "true",
}
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/serenity-unit.fifo"
FUNCTION_NAME = "serenity-allocator-unit"
FUNCTION_TIMEOUT_MS = 60_000
"""The template's Allocator timeout: a fresh invocation has this much time left."""
FULL = Totals(projects=1, prompts=100)
"""A child at one block, using all of it."""


# ==== the rig ===============================================================================


@dataclass
class Worker:
    """One container: settings, fakes and a runtime reused across invocations."""

    gateway: InMemoryGateway
    clock: FakeClock
    runtime: AllocatorRuntime
    dead_letters: RecordingDeadLetters | None
    outcomes: RecordingOutcomes | None
    producer: RecordingEnqueuer | None
    responses: list[dict[str, Any]] = field(default_factory=list)

    def invoke(self, *records: dict[str, Any], remaining_ms: int | None = None) -> dict[str, Any]:
        context = LocalLambdaContext(
            FUNCTION_NAME, (remaining_ms or FUNCTION_TIMEOUT_MS) / 1000.0, self.clock
        )
        response: dict[str, Any] = lambda_handler(
            sqs_event(*records), context, runtime=self.runtime
        )
        self.responses.append(response)
        return response

    def outcome(self, request_id: str) -> AllocationOutcome:
        assert self.outcomes is not None
        return self.outcomes.by_request()[request_id]


def new_worker(
    gateway: InMemoryGateway,
    *,
    dlq: bool = True,
    outcomes: RecordingOutcomes | None = None,
    producer: bool = False,
    clock: FakeClock | None = None,
    **env: str,
) -> Worker:
    clock = clock or FakeClock()
    settings = AllocatorSettings.from_env({**BASE_ENV, **env})
    dead_letters = RecordingDeadLetters() if dlq else None
    publisher = outcomes if outcomes is not None else RecordingOutcomes()
    enqueuer = RecordingEnqueuer() if producer else None
    runtime = AllocatorRuntime(
        settings=settings,
        gateway=gateway,
        dead_letters=dead_letters,
        outcomes=publisher,
        producer=enqueuer,
        clock=clock,
        sleep=clock.sleep,
        wall_clock_ms=lambda: SENT_MS + QUEUE_LAG_MS,
    )
    return Worker(gateway, clock, runtime, dead_letters, publisher, enqueuer)


def family_gateway(
    *children: tuple[str, Totals, Totals],
    pool_total: Totals = Totals(projects=50, prompts=10_000),  # noqa: B008 - frozen value
    pool_used: Totals | None = None,
    limits_enabled: bool | None = True,
) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=pool_total, used=pool_used, ai_limits_enabled=limits_enabled)
    for child_id, total, used in children:
        gateway.add_child(child_id, MASTER, total=total, used=used)
    return gateway


def ensure_record(
    message_id: str,
    child: str,
    prompts: int = 0,
    *,
    projects: int = 0,
    receive_count: int = 1,
    ceiling: Totals | None = None,
    include_drafted: bool = False,
    parent: str = MASTER,
    group: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "kind": "ensure",
        "request_id": f"req-{message_id}",
        "workspace_id": child,
        "parent_workspace_id": parent,
        "need": {"projects": projects, "prompts": prompts},
        "include_drafted": include_drafted,
    }
    if ceiling is not None:
        body["ceiling"] = ceiling.as_dict()
    return sqs_record(
        body,
        message_id=message_id,
        group_id=group or child,
        receive_count=receive_count,
        sent_timestamp_ms=SENT_MS,
        dedup_id=f"req-{message_id}",
    )


def release_record(
    message_id: str, child: str, *, receive_count: int = 1, floor: Totals | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "kind": "release",
        "request_id": f"req-{message_id}",
        "workspace_id": child,
    }
    if floor is not None:
        body["floor"] = floor.as_dict()
    return sqs_record(
        body,
        message_id=message_id,
        group_id=child,
        receive_count=receive_count,
        sent_timestamp_ms=SENT_MS,
    )


def failed_ids(response: dict[str, Any]) -> list[str]:
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


# ==== EMF parsing ===========================================================================


@dataclass(frozen=True)
class Datum:
    """One metric as printed in EMF."""

    name: str
    unit: str
    dimensions: dict[str, str]
    values: tuple[float, ...]


def read_emf(capsys: pytest.CaptureFixture[str]) -> tuple[list[dict[str, Any]], list[Datum]]:
    blobs = []
    for raw_line in capsys.readouterr().out.splitlines():
        line = raw_line.strip()
        if not line.startswith("{"):
            continue
        payload = json.loads(line)
        if "_aws" in payload:
            blobs.append(payload)
    data = []
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            names = [name for group in directive["Dimensions"] for name in group]
            dimensions = {name: blob[name] for name in names}
            for metric in directive["Metrics"]:
                raw = blob[metric["Name"]]
                values = tuple(raw if isinstance(raw, list) else [raw])
                data.append(Datum(metric["Name"], metric["Unit"], dimensions, values))
    return blobs, data


def metric_total(data: list[Datum], name: str, dimension_value: str | None = None) -> float:
    spec = METRIC_CATALOG[name]
    return sum(
        sum(d.values)
        for d in data
        if d.name == name
        and (spec.dimension is None or d.dimensions.get(spec.dimension) == dimension_value)
    )
