"""The sweep state machine over the real handler, and the operator CLI against the local stack."""

from __future__ import annotations

import argparse
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from serenity_allocator.handlers import sweep_runtime
from serenity_tools.operator import sweep_cli
from serenity_tools.standins.resources import LocalResources
from tests.infrastructure._template import load_template
from tests.infrastructure.test_state_machine import run_execution
from tests.integration.allocator_harness import (
    AllocatorHarness,
    allocator_harness,
    api_calls,
    totals_of,
)
from tests.integration.sweep_stack import (
    CHILDREN,
    EXPECTED,
    MASTER,
    SweepStack,
    drain,
    fail_status_reads,
    groups_of,
    seed_fleet,
    seeded_stack,
    sweep_env,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

    from serenity_tools.standins.simulator import SimulatorServer

# The handler flushes its metrics decorator even when a batch recorded none; that is fine here.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


@pytest.fixture
def stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    """The fleet seeded, the kill switch on."""
    with seeded_stack(local_resources, sim) as built:
        yield built


@pytest.fixture
def worker(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[AllocatorHarness]:
    """The real Allocator worker on the same queue and simulator."""
    with allocator_harness(local_resources, sim) as harness:
        yield harness


# ---------------------------------------------------------------- the state machine loop


@pytest.fixture(scope="module")
def definition() -> dict[str, Any]:
    """The sweep state machine's Definition, read from template.yaml by cfn-lint's loader."""
    value: dict[str, Any] = load_template()["Resources"]["SweepStateMachine"]["Properties"][
        "Definition"
    ]
    return value


def test_state_machine_loops_real_batches_until_done_then_succeeds(
    stack: SweepStack, definition: dict[str, Any]
) -> None:
    # Given an execution input for a run of five children, two per batch
    execution_input = {"dry_run": False, "parent_workspace_ids": [MASTER], "batch_size": 2}

    # When the definition runs with the REAL handler as its Task
    execution = run_execution(definition, execution_input, stack.invoke)

    # Then it went invoke -> wait -> invoke -> wait -> invoke -> Succeed
    assert len(execution.payloads) == 3 and execution.waits == 2
    assert (execution.status, execution.end_state) == ("SUCCEEDED", "Finished")
    # And every batch after the first resumed the run the first one started
    run_id = stack.results[0]["run_id"]
    assert execution.payloads[0] == execution_input
    assert execution.payloads[1:] == [{**execution_input, "run_id": run_id}] * 2
    assert [r["processed"] for r in stack.results] == [2, 4, 5]
    assert stack.results[-1]["counts"]["enqueued"] == 3


def test_state_machine_fails_when_the_real_run_aborts(
    stack: SweepStack, definition: dict[str, Any]
) -> None:
    # Given a gateway failing the first two children's reads
    fail_status_reads(stack.sim, [(500, "c-big"), (500, "c-drafted")])
    execution_input = {
        "dry_run": True,
        "parent_workspace_ids": [MASTER],
        "batch_size": 25,
        "max_consecutive_errors": 2,
    }
    # When the definition runs with the real handler
    execution = run_execution(definition, execution_input, stack.invoke)
    # Then the first batch aborted and the execution failed there, without waiting
    assert stack.results[-1]["aborted"] is True
    assert (execution.status, execution.end_state, execution.error) == (
        "FAILED",
        "Aborted",
        "SweepAborted",
    )
    assert len(execution.payloads) == 1 and execution.waits == 0


def test_state_machine_fails_when_the_run_finishes_with_unexpected_errors(
    stack: SweepStack, definition: dict[str, Any]
) -> None:
    # Given one child whose reads fail on each of its three attempts (never enough to abort)
    fail_status_reads(stack.sim, [(500, "c-lean")] * 3)
    execution_input = {"dry_run": True, "parent_workspace_ids": [MASTER], "batch_size": 3}
    # When the definition runs with the real handler
    execution = run_execution(definition, execution_input, stack.invoke)
    # Then the run finished once c-lean ended failed, and the execution failed for it
    assert stack.results[-1]["done"] is True
    assert stack.results[-1]["failed"] == [
        {
            "workspace_id": "c-lean",
            "parent_workspace_id": MASTER,
            "error_code": "upstream500",
            "attempts": 3,
        }
    ]
    assert (execution.status, execution.end_state) == ("FAILED", "FinishedWithUnexpectedErrors")
    assert execution.waits == 2


# ---------------------------------------------------------------- the operator CLI, --local


def _cli(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    sweep_cli.configure(parser)
    out, err = io.StringIO(), io.StringIO()
    code = sweep_cli.execute(parser.parse_args(argv), stdout=out, stderr=err, is_tty=False)
    return code, out.getvalue(), err.getvalue()


def test_sweep_cli_local_dry_run_then_real_run_against_the_local_stack(
    local_resources: LocalResources,
    sim: SimulatorServer,
    worker: AllocatorHarness,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # Given the local stack's environment in this process (what `local up` prints)
    seed_fleet(sim)
    for name, value in sweep_env(local_resources, sim).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sweep_runtime, "_runtime", None)
    common = ["--local", "--parent", MASTER, "--batch-size", "2", "--rate-limit-ms", "0"]

    # When the operator previews with a JSON report
    report = tmp_path / "dry.json"
    code, out, err = _cli([*common, "--dry-run", "--report", str(report)])

    # Then it finished cleanly over three batches, and the report has every child's target
    assert code == 0, err
    assert err.count("batch ") == 3
    assert re.search(r"^status\s+done$", out, re.MULTILINE), out
    document = json.loads(report.read_text(encoding="utf-8"))
    assert (document["status"], document["invocations"], document["dry_run"]) == ("done", 3, True)
    targets = {
        item["workspace_id"]: (item["target"]["projects"], item["target"]["prompts"])
        for item in document["items"]
        if item["outcome"] == "would-release"
    }
    assert targets == {child: target for child, (target, _) in EXPECTED.items()}
    assert api_calls(sim, "transfer") == []

    # When the operator runs it for real, with a CSV report
    csv_report = tmp_path / "real.csv"
    code, out, err = _cli([*common, "--report", str(csv_report)])

    # Then the surplus children are enqueued; drained by the worker they land on the targets
    assert code == 0, err
    rows = csv_report.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + len(CHILDREN)
    messages = receive_all(worker)
    assert groups_of(messages) == Counter(dict.fromkeys(EXPECTED, 1))
    drain(worker, messages)
    after = totals_of(sim)
    assert {child: after[child] for child in EXPECTED} == targets


def receive_all(worker: AllocatorHarness) -> list[MessageTypeDef]:
    received: list[MessageTypeDef] = []
    while batch := worker.receive():
        received.extend(batch)
    return received
