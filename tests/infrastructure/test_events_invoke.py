"""The events/ files, run through ``serenity-allocator invoke`` against the local stack.

The real template, the real handlers, events/env.json with its endpoints pointed at this
test's moto server and simulator: what a developer gets from
``serenity-allocator invoke AllocatorFunction --event events/<file>.json --env-vars ...``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from serenity_tools import cli
from serenity_tools.standins.resources import LocalResources, local_client
from tests.infrastructure._template import EVENTS_DIR, TEMPLATE_PATH

if TYPE_CHECKING:
    from serenity_tools.standins.simulator import SimulatorServer

MASTER = "ws-master-org1"
CHILDREN = ("ws-child-a1", "ws-child-b2", "ws-child-c3")


@pytest.fixture
def family(sim: SimulatorServer) -> SimulatorServer:
    """The org the events name: one master with room to spare and three empty children."""
    sim.seed(
        [
            {
                "id": MASTER,
                "title": "Org",
                "limits_enabled": True,
                "ai": {
                    "projects": {"used": 0, "total": 50},
                    "prompts": {"used": 0, "total": 10_000},
                },
            },
            *({"id": child, "title": child, "parent_id": MASTER} for child in CHILDREN),
        ]
    )
    return sim


@pytest.fixture
def env_file(tmp_path: Path, local_resources: LocalResources, family: SimulatorServer) -> Path:
    """events/env.json with its local endpoints replaced by this test's servers."""
    env = json.loads((EVENTS_DIR / "env.json").read_text(encoding="utf-8"))
    env["Parameters"].update(
        SEMRUSH_BASE_URL=family.origin,
        AWS_ENDPOINT_URL=local_resources.endpoint_url,
        QUEUE_URL=local_resources.queue_url,
    )
    env["AllocatorFunction"].update(
        DLQ_URL=local_resources.dlq_url,
        OUTCOME_BUS_NAME=local_resources.bus_name,
        REQUEST_LEDGER_TABLE=local_resources.ledger_table,
    )
    env["SweepFunction"].update(SWEEP_BUCKET=local_resources.bucket)
    path = tmp_path / "env.json"
    path.write_text(json.dumps(env))
    return path


def invoke(
    function: str,
    event: str | Path,
    env_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, Any]:
    capsys.readouterr()
    code = cli.main(
        [
            "invoke",
            function,
            "--event",
            str(EVENTS_DIR / event),
            "--env-vars",
            str(env_file),
            "--template",
            str(TEMPLATE_PATH),
        ]
    )
    out = capsys.readouterr().out
    return code, json.loads(out.strip().splitlines()[-1])


def prompts_total(sim: SimulatorServer, workspace_id: str) -> int:
    (workspace,) = [w for w in sim.dump()["workspaces"] if w["id"] == workspace_id]
    total: int = workspace["ai"]["prompts"]["total"]
    return total


def test_ensure_one_tops_up_the_child_through_local_invoke(
    env_file: Path, family: SimulatorServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an empty child under a roomy pool
    pool_before = prompts_total(family, MASTER)
    # When events/ensure-one.json is invoked on the Allocator
    code, response = invoke("AllocatorFunction", "ensure-one.json", env_file, capsys)
    # Then the batch succeeds and the child can take the 250 prompts it asked for
    assert code == 0
    assert response == {"batchItemFailures": []}
    child = prompts_total(family, "ws-child-a1")
    assert child >= 250
    assert prompts_total(family, MASTER) == pool_before - child


@pytest.mark.parametrize("event", ["ensure-coalescing-batch.json", "mixed-batch-two-children.json"])
def test_batch_events_complete_through_local_invoke(
    env_file: Path, family: SimulatorServer, capsys: pytest.CaptureFixture[str], event: str
) -> None:
    code, response = invoke("AllocatorFunction", event, env_file, capsys)
    assert code == 0
    assert response == {"batchItemFailures": []}


def test_malformed_event_goes_to_the_dlq_without_reaching_semrush(
    env_file: Path,
    family: SimulatorServer,
    local_resources: LocalResources,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # When events/malformed-message.json is invoked
    code, response = invoke("AllocatorFunction", "malformed-message.json", env_file, capsys)
    # Then every record is completed, none reached Semrush, and all three sit in the DLQ
    assert code == 0
    assert response == {"batchItemFailures": []}
    assert family.calls() == []
    sqs = local_client("sqs", local_resources.endpoint_url)
    received = sqs.receive_message(
        QueueUrl=local_resources.dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
    ).get("Messages", [])
    assert len(received) == 3


def test_sweep_dry_run_event_previews_without_transferring(
    env_file: Path, family: SimulatorServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given events/sweep-dry-run.json with rate limiting off (a test never sleeps for real)
    event = json.loads((EVENTS_DIR / "sweep-dry-run.json").read_text(encoding="utf-8"))
    unthrottled = tmp_path / "sweep-dry-run.json"
    unthrottled.write_text(json.dumps({**event, "rate_limit_ms": 0}))
    # When it is invoked on the Sweep
    code, result = invoke("SweepFunction", unthrottled, env_file, capsys)
    # Then the run finishes in one batch, previews every child and moves nothing
    assert code == 0
    assert (result["dry_run"], result["done"], result["aborted"]) == (True, True, False)
    assert result["processed"] == len(CHILDREN)
    assert [c for c in family.calls() if c["op"] == "transfer"] == []
