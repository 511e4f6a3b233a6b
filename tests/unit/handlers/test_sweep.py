"""The Sweep Lambda in memory: payload at the edge, result shape, run ids and resume."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep.errors import RunInProgressError, SweepRefusedError
from serenity_allocator.domain.sweep.model import SweepAbandonRequest, SweepRequest
from serenity_allocator.handlers.settings import SweepSettings
from serenity_allocator.handlers.sweep import (
    SweepPayloadError,
    SweepUpstreamError,
    lambda_handler,
    parse_sweep_payload,
    parse_sweep_request,
)
from serenity_allocator.handlers.sweep_runtime import SweepRuntime
from serenity_tools.standins.lambda_context import LocalLambdaContext
from tests.fakes import (
    LIST_FAMILY,
    FakeClock,
    InMemoryCheckpointStore,
    InMemoryGateway,
    RecordingEnqueuer,
    SimulatedCrash,
)

MASTER = "m1"
EPOCH = 1_767_000_000.0
GENERATED_RUN_ID = "rs-20261129-120000-abc123"
ENV = {
    "SEMRUSH_BASE_URL": "http://127.0.0.1:9",
    "SEMRUSH_TOKEN": "tok-unit-never-used",
    "ENVIRONMENT": "unit",
    "SWEEP_BUCKET": "serenity-sweep-unit",
    "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/serenity-unit.fifo",
    "SERENITY_DYNAMIC_ALLOCATION": "true",
}
RESULT_KEYS = {
    "run_id",
    "dry_run",
    "done",
    "aborted",
    "processed",
    "remaining",
    "counts",
    "items",
    "checkpoint",
}
COUNT_KEYS = {
    "would_release",
    "enqueued",
    "nothing_to_release",
    "requires_decommission",
    "skipped_not_created",
    "expected_errors",
    "unexpected_errors",
}


@dataclass
class Sweep:
    """One container's sweep runtime over in-memory collaborators."""

    gateway: InMemoryGateway
    store: InMemoryCheckpointStore
    enqueuer: RecordingEnqueuer
    clock: FakeClock
    wall: FakeClock
    runtime: SweepRuntime
    invocations: int = 0

    def invoke(self, event: dict[str, Any], *, remaining_ms: int = 900_000) -> dict[str, Any]:
        self.invocations += 1
        context = LocalLambdaContext(
            "serenity-sweep-unit",
            remaining_ms / 1000.0,
            self.clock,
            memory_limit_in_mb=512,
            aws_request_id=f"00000000-0000-4000-8000-{self.invocations:012d}",
        )
        result: dict[str, Any] = lambda_handler(event, context, runtime=self.runtime)
        return result


def _sweep(children: int = 3, **env: str) -> Sweep:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=Totals(projects=50, prompts=10_000))
    for index in range(1, children + 1):
        gateway.add_child(
            f"k{index}",
            MASTER,
            total=Totals(projects=1, prompts=1_000),
            used=Totals(projects=1, prompts=100),
        )
    store, enqueuer = InMemoryCheckpointStore(), RecordingEnqueuer()
    clock, wall = FakeClock(), FakeClock(start=EPOCH)
    runtime = SweepRuntime(
        settings=SweepSettings.from_env({**ENV, **env}),
        gateway=gateway,
        store=store,
        enqueuer=enqueuer,
        clock=clock,
        wall_clock=wall,
        sleep=clock.sleep,
        new_run_id=lambda: GENERATED_RUN_ID,
    )
    return Sweep(gateway, store, enqueuer, clock, wall, runtime)


def test_lambda_handler_result_shape() -> None:
    # Given a pool with three children with surplus
    sweep = _sweep()

    # When a dry run is invoked
    result = sweep.invoke({"dry_run": True, "parent_workspace_ids": [MASTER], "run_id": "rs-a"})

    # Then the result has the documented shape, is JSON, and previews every child
    assert set(result) >= RESULT_KEYS
    assert set(result["counts"]) >= COUNT_KEYS
    assert json.loads(json.dumps(result)) == result
    assert (result["run_id"], result["dry_run"], result["done"], result["aborted"]) == (
        "rs-a",
        True,
        True,
        False,
    )
    assert (result["processed"], result["remaining"]) == (3, 0)
    assert result["counts"]["would_release"] == 3
    assert result["checkpoint"] == "memory://checkpoints/dry/rs-a.json"
    assert result["failed"] == []
    assert [item["workspace_id"] for item in result["items"]] == ["k1", "k2", "k3"]
    assert result["items"][0]["target"] == {"projects": 1, "prompts": 100}
    assert sweep.enqueuer.releases == []


def test_lambda_handler_generates_run_id_when_absent_and_resumes_with_it() -> None:
    # Given a real run without a run id, one child per invocation
    sweep = _sweep()
    first = sweep.invoke(
        {"dry_run": False, "parent_workspace_ids": [MASTER], "batch_size": 1, "rate_limit_ms": 0}
    )

    # Then a run id was generated and returned
    assert first["run_id"] == GENERATED_RUN_ID
    assert (first["processed"], first["done"]) == (1, False)

    # When the returned run id is passed back until done
    results = [first]
    while not results[-1]["done"]:
        results.append(
            sweep.invoke(
                {
                    "dry_run": False,
                    "parent_workspace_ids": [MASTER],
                    "batch_size": 1,
                    "run_id": first["run_id"],
                }
            )
        )

    # Then the same run resumed: each child enqueued once, with the run id on its release
    assert [r["processed"] for r in results] == [1, 2, 3]
    assert sweep.enqueuer.enqueued_per_child() == {"k1": 1, "k2": 1, "k3": 1}
    assert {r.run_id for r in sweep.enqueuer.releases} == {GENERATED_RUN_ID}
    assert results[-1]["counts"]["enqueued"] == 3


@pytest.mark.parametrize(
    ("payload", "field_name"),
    [
        ({"parent_workspace_ids": [MASTER], "limit": "ten"}, "limit"),
        ({"parent_workspace_ids": [MASTER], "limit": -5}, "limit"),
        ({"parent_workspace_ids": [MASTER], "rate_limit_ms": -1}, "rate_limit_ms"),
        (
            {"parent_workspace_ids": [MASTER], "max_consecutive_errors": -1},
            "max_consecutive_errors",
        ),
        ({"parent_workspace_ids": [MASTER], "batch_size": "25"}, "batch_size"),
        ({"parent_workspace_ids": []}, "parent_workspace_ids"),
        ({"dry_run": True}, "parent_workspace_ids"),
        ({"parent_workspace_ids": [MASTER], "run_id": "bad id!"}, "run_id"),
        ({"parent_workspace_ids": [MASTER], "parents": ["m2"]}, "parents"),
        ({"parent_workspace_ids": [MASTER], "dry_run": "no"}, "dry_run"),
    ],
)
def test_lambda_handler_invalid_payload_named_before_any_call(
    payload: dict[str, Any], field_name: str
) -> None:
    # Given a payload with one invalid field
    sweep = _sweep()

    # When invoked
    with pytest.raises(SweepPayloadError) as raised:
        sweep.invoke(payload)

    # Then the error names the field, and nothing was called, written or enqueued
    assert field_name in str(raised.value)
    assert sweep.gateway.calls == []
    assert sweep.store.saves == []
    assert sweep.enqueuer.releases == []


def test_parse_sweep_request_reports_every_bad_field() -> None:
    # Given a payload with two bad fields / When parsed
    with pytest.raises(SweepPayloadError) as raised:
        parse_sweep_request({"parent_workspace_ids": [MASTER], "limit": 0, "rate_limit_ms": -2})

    # Then both are named in one message
    message = str(raised.value)
    assert "limit" in message and "rate_limit_ms" in message


def test_parse_sweep_request_non_object_payload_refused() -> None:
    # Given a payload that is not an object / When parsed / Then a payload error
    with pytest.raises(SweepPayloadError):
        parse_sweep_request(["m1"])


def test_lambda_handler_real_run_refused_while_kill_switch_off() -> None:
    # Given the kill switch off in the function's environment
    sweep = _sweep(SERENITY_DYNAMIC_ALLOCATION="false")

    # When a real run is invoked / Then it is refused before any upstream call
    with pytest.raises(SweepRefusedError):
        sweep.invoke({"dry_run": False, "parent_workspace_ids": [MASTER]})
    assert sweep.gateway.calls == []


def test_lambda_handler_stops_early_when_remaining_time_runs_low_and_resumes() -> None:
    # Given an invocation with less time than the safety margin plus one target's budget
    sweep = _sweep()
    payload = {"dry_run": False, "parent_workspace_ids": [MASTER], "run_id": "rs-short"}

    # When invoked with 25 s left (10 s margin, 20 s per target)
    short = sweep.invoke(payload, remaining_ms=25_000)

    # Then no target was started and the run is not done
    assert (short["processed"], short["remaining"], short["done"]) == (0, 3, False)
    assert sweep.enqueuer.releases == []

    # When the next invocation has time / Then it resumes and finishes the run
    full = sweep.invoke(payload)
    assert full["done"] and full["processed"] == 3


def test_lambda_handler_second_invocation_of_a_running_run_refused() -> None:
    # Given a run whose first invocation died holding the lease
    sweep = _sweep()
    sweep.enqueuer = RecordingEnqueuer(crash_after=0)
    sweep.runtime.enqueuer = sweep.enqueuer
    payload = {"dry_run": False, "parent_workspace_ids": [MASTER], "run_id": "rs-lease"}
    with pytest.raises(SimulatedCrash):
        sweep.invoke(payload, remaining_ms=600_000)

    # When another invocation starts the same run before the lease expires
    with pytest.raises(RunInProgressError, match="already in progress"):
        sweep.invoke(payload)

    # Then after the dead invocation's deadline it is accepted
    sweep.wall.advance(601)
    assert sweep.invoke(payload)["done"]


def test_lambda_handler_dry_run_emits_release_outcome_dry_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a dry run over three children
    sweep = _sweep()

    # When invoked
    sweep.invoke({"dry_run": True, "parent_workspace_ids": [MASTER]})

    # Then the printed EMF counts three ReleaseOutcome{Outcome=dry-run}, without ids
    values = []
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith("{"):
            continue
        blob = json.loads(line)
        if "_aws" not in blob or "ReleaseOutcome" not in blob:
            continue
        assert blob["Outcome"] == "dry-run"
        assert blob["Environment"] == "unit"
        raw = blob["ReleaseOutcome"]
        values.extend(raw if isinstance(raw, list) else [raw])
        assert not {"k1", "k2", "k3", MASTER} & {str(v) for v in blob.values()}
    assert sum(values) == 3


SWEEP_EVENTS = sorted((Path(__file__).parents[3] / "events").glob("sweep*.json"))


@pytest.mark.parametrize("path", SWEEP_EVENTS, ids=[p.name for p in SWEEP_EVENTS])
def test_parse_sweep_payload_accepts_every_sweep_event(path: Path) -> None:
    # Given a payload shipped in events/ for `aws lambda invoke` and `sam local invoke`
    event = json.loads(path.read_text(encoding="utf-8"))

    # When the handler's edge reads it
    request = parse_sweep_payload(event)

    # Then it is the kind its name says
    kind = SweepAbandonRequest if path.name == "sweep-abandon.json" else SweepRequest
    assert type(request) is kind
    assert len(SWEEP_EVENTS) == 4


def test_parse_sweep_payload_abandon_with_a_stray_field_named() -> None:
    # Given an abandon payload that also carries sweep fields / When read / Then refused
    with pytest.raises(SweepPayloadError) as refused:
        parse_sweep_payload({"abandon": True, "run_id": "rs-a", "parent_workspace_ids": [MASTER]})
    assert str(refused.value) == (
        "invalid abandon payload: parent_workspace_ids: Extra inputs are not permitted"
    )


def test_lambda_handler_abandon_payload_ends_the_run_and_frees_its_parent() -> None:
    # Given an unfinished real run
    sweep = _sweep(children=3)
    first = sweep.invoke(
        {"dry_run": False, "parent_workspace_ids": [MASTER], "run_id": "rs-a", "batch_size": 1}
    )
    assert first["done"] is False

    # When the abandon payload names it
    abandoned = sweep.invoke({"abandon": True, "run_id": "rs-a"})

    # Then the result says what was freed, and a new run on the parent goes ahead
    assert abandoned == {
        "run_id": "rs-a",
        "dry_run": False,
        "abandoned": True,
        "released_parents": [MASTER],
        "processed": 1,
        "total": 3,
        "checkpoint": "memory://checkpoints/rs-a.json",
    }
    again = sweep.invoke({"dry_run": False, "parent_workspace_ids": [MASTER], "run_id": "rs-b"})
    assert again["done"] is True


def test_lambda_handler_upstream_failure_while_listing_carries_no_body() -> None:
    # Given a family listing refused with a body that a secret could be echoed in
    sweep = _sweep()
    sweep.gateway.script_errors(
        LIST_FAMILY, MASTER, [UpstreamError(403, "echo: tok-unit-never-used", "list_family")]
    )

    # When a sweep is invoked / Then the error names the status and operation only
    with pytest.raises(SweepUpstreamError) as failed:
        sweep.invoke({"parent_workspace_ids": [MASTER]})
    assert "tok-unit" not in str(failed.value) and "echo" not in str(failed.value)
    assert (failed.value.status, failed.value.operation) == (403, "list_family")


def test_operator_docs_invoke_only_sweep_payloads_that_exist_and_validate() -> None:
    # Given the operator guide and the sweep runbook, which show `aws lambda invoke --payload fileb://...`
    root = Path(__file__).parents[3]
    docs = {name: (root / name).read_text(encoding="utf-8") for name in DOCS_WITH_INVOKE}

    # When every events/ payload they pass is read by the handler's edge
    referenced = {
        name: re.findall(r"fileb://(events/[\w.-]+\.json)", text) for name, text in docs.items()
    }

    # Then each doc shows at least one, and each one exists and validates
    assert all(referenced.values()), referenced
    for path in {p for paths in referenced.values() for p in paths}:
        parse_sweep_payload(json.loads((root / path).read_text(encoding="utf-8")))
    # And the runbook explains every refusal an operator can meet
    runbook = docs["docs/runbooks/sweep.md"]
    for error in (
        "ParentHeldError",
        "RunInProgressError",
        "CheckpointCorruptError",
        "SweepRefusedError",
        "SweepUpstreamError",
        "SweepPayloadError",
    ):
        assert error in runbook, error


DOCS_WITH_INVOKE = ("docs/operating.md", "docs/runbooks/sweep.md")
