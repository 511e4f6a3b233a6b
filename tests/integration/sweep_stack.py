"""The sweep's integration stack: the simulator, a moto server, the production runtime.

Shared by the sweep's integration tests (see tests/integration/test_sweep_integration.py for
what is real and what is faked).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.domain.sweep.model import checkpoint_name
from serenity_allocator.handlers.settings import SweepSettings
from serenity_allocator.handlers.sweep import lambda_handler
from serenity_allocator.handlers.sweep_runtime import SweepRuntime, build_sweep_runtime
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.resources import LocalResources, local_client
from tests.integration.allocator_harness import (
    AllocatorHarness,
    RecordingSleep,
    workspace,
)
from tests.integration.sqs_events import receive_messages

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

    from serenity_tools.standins.simulator import SimulatorServer

# The handler flushes its metrics decorator even when a batch recorded none; that is fine here.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

TOKEN = "tok-sweep-integration"
ENVIRONMENT = "integration"
FUNCTION_NAME = "SweepFunction"
FUNCTION_TIMEOUT_S = 900.0
"""The template's SweepFunction Timeout."""
CLIENT_RETRIES = 3
"""The Semrush client's default retries: a failing read costs 1 + 3 requests."""

MASTER = "m1"
OTHER_MASTER = "m2"
ZOMBIE = "c-zombie"
CHILDREN = ("c-big", "c-drafted", "c-lean", ZOMBIE, "c-small")
"""The master's children, in the order the family listing (and so the sweep) walks them."""
OTHER_CHILD = "d-other"

EXPECTED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    # child: ((target projects, prompts), (units returned projects, prompts)), default floor
    # of one block (1 project, 100 prompts): target = max(floor, used + drafted in blocks).
    "c-big": ((2, 200), (8, 800)),  # used 2/150 of 10/1000
    "c-drafted": ((1, 200), (3, 300)),  # 120 prompts drafted of 500, nothing used
    "c-small": ((1, 100), (2, 0)),  # prompts already at the floor
}
LEAN_TOTALS = (2, 200)
ZOMBIE_TOTALS = (5, 500)
POOL = (100, 10_000)


def seed_fleet(sim: SimulatorServer) -> None:
    sim.seed(
        [
            workspace(MASTER, projects=(0, POOL[0]), prompts=(0, POOL[1])),
            workspace("c-big", parent_id=MASTER, projects=(2, 10), prompts=(150, 1000)),
            workspace(
                "c-drafted",
                parent_id=MASTER,
                projects=(0, 4),
                prompts=(0, 500),
                prompts_drafted=120,
            ),
            workspace("c-lean", parent_id=MASTER, projects=(2, 2), prompts=(180, 200)),
            workspace(ZOMBIE, parent_id=MASTER, projects=(0, 5), prompts=(0, 500)),
            workspace("c-small", parent_id=MASTER, projects=(1, 3), prompts=(0, 100)),
            workspace(OTHER_MASTER, projects=(0, 50), prompts=(0, 5000)),
            workspace(OTHER_CHILD, parent_id=OTHER_MASTER, projects=(0, 6), prompts=(0, 600)),
        ]
    )
    # A zombie: "not ready" forever (simulator fault), so the sweep must leave it alone.
    sim.faults(stuck=[ZOMBIE])


# ---------------------------------------------------------------- the stack


class ProcessDied(BaseException):
    """Stands for the process being killed: not an Exception, so no handler code catches it."""


class WallClock:
    """Epoch seconds that move only when the test says so (leases are dated with it)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def sweep_env(resources: LocalResources, sim: SimulatorServer) -> dict[str, str]:
    """The Sweep function's contract environment, pointed at moto and the simulator."""
    return {
        "SEMRUSH_BASE_URL": sim.origin,
        "SEMRUSH_TOKEN": TOKEN,
        "SWEEP_BUCKET": resources.bucket,
        "QUEUE_URL": resources.queue_url,
        "ENVIRONMENT": ENVIRONMENT,
        "SERENITY_DYNAMIC_ALLOCATION": "true",
    }


@dataclass
class SweepStack:
    """The Sweep handler on the production runtime, plus what a test needs to look at."""

    sim: SimulatorServer
    resources: LocalResources
    runtime: SweepRuntime
    sleeps: RecordingSleep
    client_sleeps: RecordingSleep
    wall: WallClock
    sqs: Any
    s3: Any
    invocations: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)

    def invoke(
        self, payload: Mapping[str, Any], *, request_id: str | None = None
    ) -> dict[str, Any]:
        """One Lambda invocation (a fresh context and request id unless one is given)."""
        self.invocations += 1
        context = LocalLambdaContext(
            FUNCTION_NAME,
            FUNCTION_TIMEOUT_S,
            aws_request_id=request_id or f"req-{self.invocations}",
        )
        result: dict[str, Any] = lambda_handler(dict(payload), context, runtime=self.runtime)
        self.results.append(result)
        return result

    def run_to_end(
        self, payload: Mapping[str, Any], max_invocations: int = 20
    ) -> list[dict[str, Any]]:
        """Invoke, feeding back the run id, until done or aborted (what the state machine does)."""
        results = [self.invoke(payload)]
        while not (results[-1]["done"] or results[-1]["aborted"]):
            assert len(results) < max_invocations, "the run never finished"
            results.append(self.invoke({**payload, "run_id": results[-1]["run_id"]}))
        return results

    def queued(self) -> list[MessageTypeDef]:
        """Receive every visible message of the allocation queue (they stay in flight)."""
        received: list[MessageTypeDef] = []
        while batch := receive_messages(self.sqs, self.resources.queue_url):
            received.extend(batch)
        return received

    def checkpoint(self, run_id: str, *, dry_run: bool = False) -> dict[str, Any]:
        """The run's checkpoint as stored in S3."""
        key = f"sweep/{checkpoint_name(run_id, dry_run)}.json"
        body = self.s3.get_object(Bucket=self.resources.bucket, Key=key)["Body"]
        document: dict[str, Any] = json.loads(body.read())
        return document

    def checkpoint_keys(self) -> list[str]:
        """Every object key in the sweep bucket."""
        listed = self.s3.list_objects_v2(Bucket=self.resources.bucket)
        return [item["Key"] for item in listed.get("Contents", [])]


def make_stack(
    resources: LocalResources, sim: SimulatorServer, overrides: Mapping[str, str] | None = None
) -> SweepStack:
    """The production runtime from the environment, with time faked."""
    settings = SweepSettings.from_env({**sweep_env(resources, sim), **(overrides or {})})
    runtime = build_sweep_runtime(settings)
    client_sleeps = RecordingSleep()
    built = runtime.gateway
    if isinstance(built, SemrushClient):
        built.close()
    # The same client production builds, with its backoff sleep recorded instead of slept.
    assert settings.semrush.token is not None
    runtime.gateway = SemrushClient(
        settings.semrush.base_url,
        StaticTokenProvider(settings.semrush.token),
        config=SemrushClientConfig(
            timeout_s=settings.semrush.timeout_s,
            max_retries=settings.semrush.max_retries,
            sleep=client_sleeps,
        ),
    )
    sleeps = RecordingSleep()
    wall = WallClock()
    runtime.sleep = sleeps
    runtime.wall_clock = wall
    return SweepStack(
        sim=sim,
        resources=resources,
        runtime=runtime,
        sleeps=sleeps,
        client_sleeps=client_sleeps,
        wall=wall,
        sqs=local_client("sqs", resources.endpoint_url),
        s3=local_client("s3", resources.endpoint_url),
    )


@contextmanager
def seeded_stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    """The fleet seeded, the kill switch on (each test module's ``stack`` fixture)."""
    seed_fleet(sim)
    built = make_stack(local_resources, sim)
    yield built
    if isinstance(built.runtime.gateway, SemrushClient):
        built.runtime.gateway.close()


def drain(worker: AllocatorHarness, messages: list[MessageTypeDef]) -> None:
    """Hand received messages to the worker in event-sized batches; all must complete."""
    for start in range(0, len(messages), 10):
        invocation = worker.handle(messages[start : start + 10])
        assert invocation.failed == []
    assert receive_messages(worker.sqs, worker.resources.queue_url) == []


def payload(**fields: Any) -> dict[str, Any]:
    """A sweep payload over the master, no pause between targets unless asked."""
    return {"parent_workspace_ids": [MASTER], "rate_limit_ms": 0, **fields}


def items_by_child(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every item of every result, by child id (each child must appear once)."""
    items = [item for result in results for item in result["items"]]
    ids = [item["workspace_id"] for item in items]
    assert len(ids) == len(set(ids)), f"a child was processed twice: {ids}"
    return {item["workspace_id"]: item for item in items}


def totals(pair: tuple[int, int]) -> dict[str, int]:
    return {"projects": pair[0], "prompts": pair[1]}


def groups_of(messages: list[MessageTypeDef]) -> Counter[str]:
    return Counter(message["Attributes"]["MessageGroupId"] for message in messages)


def fail_status_reads(sim: SimulatorServer, rules: list[tuple[int, str]]) -> None:
    """Make each (status, child) status read fail through every client retry, in order."""
    sim.faults(
        fail_next=[
            {"status": status, "count": CLIENT_RETRIES + 1, "op": "status", "workspace_id": child}
            for status, child in rules
        ]
    )
