"""The operator CLI (``serenity-allocator sweep``): flags -> payload, the loop, progress, report.

Everything here runs against fakes of the invocation target: a scripted :class:`SweepInvoker`,
and small stand-ins for the Lambda and Step Functions clients shaped like boto3's answers. The
CLI driving the real handler against the simulator and moto is in
tests/integration/test_sweep_integration.py.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep.model import SweepCounts, SweepItem, SweepResult
from serenity_tools import cli
from serenity_tools.operator import sweep_cli
from serenity_tools.operator.sweep_cli import (
    ProgressDisplay,
    SweepInvocationError,
    SweepRun,
    build_payload,
    drive_sweep,
)

RUN_ID = "rs-20250601-120000-abc123"
TARGET = ["--function-name", "serenity-allocator-dev-sweep"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sweep_cli.configure(parser)
    return parser.parse_args(argv)


def item(workspace_id: str, outcome: str = "would-release", **fields: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {"parent_workspace_id": "m1"}
    if outcome in {"would-release", "enqueued"}:
        defaults |= {
            "before": Totals(projects=5, prompts=500),
            "target": Totals(projects=1, prompts=200),
            "units_returned": Totals(projects=4, prompts=300),
        }
    built = SweepItem(workspace_id=workspace_id, outcome=outcome, **(defaults | fields))
    return built.model_dump(mode="json")


def result(
    items: list[dict[str, Any]],
    *,
    processed: int,
    total: int,
    run_id: str = RUN_ID,
    dry_run: bool = True,
    aborted: bool = False,
    **counts: int,
) -> dict[str, Any]:
    """A batch result as the handler returns it (built with its own model)."""
    done = processed >= total and not aborted
    return SweepResult(
        run_id=run_id,
        dry_run=dry_run,
        done=done,
        aborted=aborted,
        abort_reason="3 consecutive unexpected errors (last: upstream500)" if aborted else None,
        processed=processed,
        remaining=total - processed,
        total=total,
        counts=SweepCounts(**counts),
        items=[SweepItem.model_validate(i) for i in items],
        checkpoint=f"s3://bucket/sweep/{run_id}.json",
    ).model_dump(mode="json")


class ScriptedInvoker:
    """Returns the scripted results (or raises the scripted errors) in order; records payloads."""

    def __init__(self, script: list[dict[str, Any] | BaseException]) -> None:
        self.script = list(script)
        self.payloads: list[dict[str, Any]] = []

    def invoke(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.payloads.append(payload)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


def run_cli(
    argv: list[str], invoker: ScriptedInvoker | None = None, *, is_tty: bool = False
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = sweep_cli.execute(parse(argv), invoker, stdout=out, stderr=err, is_tty=is_tty)
    return code, out.getvalue(), err.getvalue()


THREE_BATCHES = [
    result([item("c1"), item("c2", "nothing-to-release")], processed=2, total=5, would_release=1,
           nothing_to_release=1),
    result([item("c3"), item("c4", "skipped-not-created", error_code="not ready")], processed=4,
           total=5, would_release=2, nothing_to_release=1, skipped_not_created=1),
    result([item("c5")], processed=5, total=5, would_release=3, nothing_to_release=1,
           skipped_not_created=1),
]  # fmt: skip


# ---------------------------------------------------------------- flags -> payload


def test_build_payload_maps_every_flag_to_its_field() -> None:
    # Given every payload flag
    args = parse(
        [
            *TARGET,
            "--parent", "m1", "--parent", "m2,m3",
            "--workspace", "c1,c2", "--workspace", " c3 ",
            "--dry-run", "--limit", "100", "--rate-limit-ms", "250",
            "--max-consecutive-errors", "4", "--batch-size", "10", "--run-id", RUN_ID,
            "--floor-projects", "2", "--floor-prompts", "300", "--allow-when-disabled",
        ]
    )  # fmt: skip
    # When the payload is built
    payload = build_payload(args)
    # Then each flag landed on its field
    assert payload == {
        "dry_run": True,
        "parent_workspace_ids": ["m1", "m2", "m3"],
        "workspace_ids": ["c1", "c2", "c3"],
        "limit": 100,
        "rate_limit_ms": 250,
        "max_consecutive_errors": 4,
        "batch_size": 10,
        "run_id": RUN_ID,
        "floor": {"projects": 2, "prompts": 300},
        "allow_when_disabled": True,
    }


def test_build_payload_without_dry_run_flag_is_a_real_run_and_leaves_defaults_to_the_handler() -> (
    None
):
    assert build_payload(parse([*TARGET, "--parent", "m1"])) == {
        "dry_run": False,
        "parent_workspace_ids": ["m1"],
    }


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--limit", "-1"], "--limit (payload field limit): Input should be greater than or equal"),
        (["--limit", "ten"], "--limit (payload field limit): Input should be a valid integer"),
        (["--rate-limit-ms", "-5"], "--rate-limit-ms (payload field rate_limit_ms)"),
        (["--rate-limit-ms", "1.5"], "--rate-limit-ms (payload field rate_limit_ms)"),
        (["--max-consecutive-errors", "0"], "(payload field max_consecutive_errors)"),
        (["--batch-size", "0"], "--batch-size (payload field batch_size)"),
        (["--run-id", "rs/../x"], "--run-id (payload field run_id): String should match pattern"),
        (["--floor-projects", "-1", "--floor-prompts", "100"],
         "--floor-projects/--floor-prompts (payload field floor.projects)"),
        (["--floor-projects", "1", "--floor-prompts", "many"],
         "--floor-projects/--floor-prompts (payload field floor.prompts)"),
        (["--floor-projects", "1"], "--floor-projects and --floor-prompts go together"),
        (["--workspace", ","], "--workspace (payload field workspace_ids)"),
        (["--report", "out.txt"], "--report out.txt: the file name must end in .json or .csv"),
        (["--report", "no-such-dir/out.json"], "--report no-such-dir/out.json: no such directory"),
    ],
)  # fmt: skip
def test_cli_bad_flag_is_refused_naming_flag_and_field_before_any_invocation(
    flags: list[str], message: str
) -> None:
    # Given a bad flag value
    invoker = ScriptedInvoker([])
    # When the CLI runs
    code, out, err = run_cli([*TARGET, "--parent", "m1", *flags], invoker)
    # Then it exits 2 with a message naming the flag, having invoked nothing
    assert code == 2
    assert message in err
    assert invoker.payloads == []
    assert out == ""


def test_cli_blank_parent_is_refused_naming_the_field() -> None:
    code, _, err = run_cli([*TARGET, "--parent", " , "], ScriptedInvoker([]))
    assert code == 2
    assert "--parent (payload field parent_workspace_ids)" in err


@pytest.mark.parametrize(
    "targets",
    [[], ["--local", "--function-name", "f"], ["--function-name", "f", "--state-machine-arn", "a"]],
)
def test_cli_needs_exactly_one_target_mode(
    targets: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        parse(["--parent", "m1", *targets])
    assert raised.value.code == 2


def test_cli_dispatcher_routes_sweep_to_this_module() -> None:
    # When the top-level command gets a sweep with a bad value
    code = cli.main(["sweep", "--parent", "m1", "--local", "--batch-size", "0"])
    # Then the sweep module refused it (exit 2) before building any invoker
    assert code == 2


# ---------------------------------------------------------------- the loop


def test_cli_loops_batches_feeding_back_the_run_id_until_done(tmp_path: Path) -> None:
    # Given a run that needs three batches
    invoker = ScriptedInvoker(list(THREE_BATCHES))
    report = tmp_path / "report.json"

    # When the CLI runs a dry run with a JSON report
    code, out, err = run_cli(
        [*TARGET, "--parent", "m1", "--dry-run", "--batch-size", "2", "--report", str(report)],
        invoker,
    )

    # Then it invoked three times: the first as given, the others resuming the run
    first = {"dry_run": True, "parent_workspace_ids": ["m1"], "batch_size": 2}
    assert invoker.payloads == [first, {**first, "run_id": RUN_ID}, {**first, "run_id": RUN_ID}]
    # And it succeeded, printing the summary table of the final counts
    assert code == 0, err
    assert "status                 done" in out
    assert "would_release          3" in out
    assert "processed              5 / 5" in out
    # And the report holds every child of every batch, with the run's summary
    document = json.loads(report.read_text(encoding="utf-8"))
    assert [i["workspace_id"] for i in document["items"]] == ["c1", "c2", "c3", "c4", "c5"]
    assert document["items"][0]["target"] == {"projects": 1, "prompts": 200}
    assert (document["run_id"], document["status"], document["invocations"]) == (RUN_ID, "done", 3)
    assert document["counts"]["skipped_not_created"] == 1
    assert document["checkpoint"] == f"s3://bucket/sweep/{RUN_ID}.json"


def test_cli_run_id_flag_resumes_that_run_from_the_first_invocation() -> None:
    invoker = ScriptedInvoker([THREE_BATCHES[-1]])
    code, _, _ = run_cli([*TARGET, "--parent", "m1", "--run-id", RUN_ID], invoker)
    assert code == 0
    assert invoker.payloads == [
        {"dry_run": False, "parent_workspace_ids": ["m1"], "run_id": RUN_ID}
    ]


def test_cli_csv_report_has_one_row_per_child_with_flat_totals(tmp_path: Path) -> None:
    report = tmp_path / "report.CSV"
    code, _, _ = run_cli(
        [*TARGET, "--parent", "m1", "--report", str(report)], ScriptedInvoker(list(THREE_BATCHES))
    )
    assert code == 0
    with report.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["workspace_id"] for row in rows] == ["c1", "c2", "c3", "c4", "c5"]
    assert rows[0] | {} == {
        "workspace_id": "c1",
        "parent_workspace_id": "m1",
        "outcome": "would-release",
        "before_projects": "5",
        "before_prompts": "500",
        "target_projects": "1",
        "target_prompts": "200",
        "units_returned_projects": "4",
        "units_returned_prompts": "300",
        "error_code": "",
        "request_id": "",
        "tiered": "",
        "attempt": "1",
        "final": "True",
    }
    assert (rows[3]["outcome"], rows[3]["error_code"], rows[3]["target_prompts"]) == (
        "skipped-not-created",
        "not ready",
        "",
    )


def test_cli_abort_exits_1_with_reason_and_how_to_resume(tmp_path: Path) -> None:
    # Given a run that aborts in its second batch
    invoker = ScriptedInvoker(
        [
            THREE_BATCHES[0],
            result(
                [item(f"c{n}", "unexpected-error", error_code="upstream500") for n in (3, 4, 5)],
                processed=5,
                total=8,
                aborted=True,
                unexpected_errors=3,
            ),
        ]
    )
    report = tmp_path / "aborted.json"
    # When the CLI runs
    code, out, err = run_cli([*TARGET, "--parent", "m1", "--report", str(report)], invoker)
    # Then it stops there with exit 1, saying why and how to resume
    assert code == 1
    assert len(invoker.payloads) == 2
    assert "status                 aborted" in out
    assert "3 consecutive unexpected errors (last: upstream500)" in out
    assert f"resume with --run-id {RUN_ID}" in err
    # And the report keeps what was done, marked aborted
    document = json.loads(report.read_text(encoding="utf-8"))
    assert (document["status"], len(document["items"])) == ("aborted", 5)


def test_cli_finished_run_with_unexpected_errors_exits_1() -> None:
    invoker = ScriptedInvoker(
        [result([item("c1", "unexpected-error", error_code="upstream500")], processed=1, total=1,
                unexpected_errors=1)]
    )  # fmt: skip
    code, out, err = run_cli([*TARGET, "--parent", "m1"], invoker)
    assert code == 1
    assert "done-with-unexpected-errors" in out
    assert "resume with" not in err  # nothing left to resume


def test_cli_invocation_error_prints_the_error_payload_and_exits_1(tmp_path: Path) -> None:
    # Given a function error on the second invocation
    error = {
        "errorType": "RunInProgressError",
        "errorMessage": f"run {RUN_ID!r} already in progress in another invocation",
    }
    invoker = ScriptedInvoker([THREE_BATCHES[0], SweepInvocationError(error)])
    report = tmp_path / "partial.json"
    # When the CLI runs
    code, out, err = run_cli([*TARGET, "--parent", "m1", "--report", str(report)], invoker)
    # Then the error payload is printed, the exit code is 1, and the run can be resumed
    assert code == 1
    assert json.dumps(error) in err
    assert "status                 failed" in out
    assert f"resume with --run-id {RUN_ID}" in err
    assert json.loads(report.read_text(encoding="utf-8"))["error"] == error


def test_cli_interrupted_exits_130_and_says_how_to_resume() -> None:
    invoker = ScriptedInvoker([THREE_BATCHES[0], KeyboardInterrupt()])
    code, out, err = run_cli([*TARGET, "--parent", "m1"], invoker)
    assert code == 130
    assert "status                 interrupted" in out
    assert f"resume with --run-id {RUN_ID}" in err


def test_drive_sweep_gives_up_when_batches_make_no_progress() -> None:
    # Given batches that never have time to start a target
    stalled = result([], processed=2, total=5)
    invoker = ScriptedInvoker([THREE_BATCHES[0], stalled, stalled, stalled, stalled])
    # When the loop runs
    run = drive_sweep(invoker, {"parent_workspace_ids": ["m1"]}, max_stalled=3)
    # Then it stopped after three empty batches with an explicit error
    assert len(invoker.payloads) == 4
    assert run.error is not None and run.error["errorType"] == "NoProgress"
    assert not run.succeeded


# ---------------------------------------------------------------- progress


def test_progress_on_a_non_tty_writes_one_line_per_batch() -> None:
    code, _, err = run_cli(
        [*TARGET, "--parent", "m1", "--dry-run"], ScriptedInvoker(list(THREE_BATCHES))
    )
    assert code == 0
    lines = [line for line in err.splitlines() if line.startswith("batch ")]
    assert lines == [
        "batch 1: 2/5 processed  would_release 1, nothing_to_release 1",
        "batch 2: 4/5 processed  would_release 2, nothing_to_release 1, skipped_not_created 1",
        "batch 3: 5/5 processed  would_release 3, nothing_to_release 1, skipped_not_created 1",
    ]
    assert "\r" not in err


def test_progress_on_a_tty_rewrites_one_line_and_ends_it() -> None:
    # Given a terminal
    stream = io.StringIO()
    display = ProgressDisplay(stream, is_tty=True, width=10)
    run = SweepRun(payload={})
    # When two batches are shown, the second shorter than the first
    run.add(THREE_BATCHES[1])
    display.update(run)
    run.add(result([], processed=5, total=5))
    display.update(run)
    display.close()
    # Then each update returns to the line start, pads over the old tail and the line ends once
    first, second = stream.getvalue().split("\r")[1:]
    assert first.startswith("[########--] 4/5  would_release 2")
    assert second.startswith("[##########] 5/5")
    assert len(second.rstrip("\n")) == len(first)
    assert stream.getvalue().endswith("\n") and stream.getvalue().count("\n") == 1


# ---------------------------------------------------------------- the invokers


def test_cli_local_without_the_stack_environment_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SEMRUSH_BASE_URL", "SWEEP_BUCKET", "QUEUE_URL", "ENVIRONMENT"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = run_cli(["--local", "--parent", "m1"])
    assert code == 2
    assert "--local: invalid configuration" in err and "SWEEP_BUCKET" in err


def test_cli_report_and_summary_list_every_target_that_ended_failed(tmp_path: Path) -> None:
    # Given a run that finished with one child failed after its last attempt
    final = result(
        [item("c2", "expected-error", error_code="workspaceBusy", attempt=3)],
        processed=2,
        total=2,
        would_release=1,
        expected_errors=1,
    )
    final["failed"] = [
        {
            "workspace_id": "c2",
            "parent_workspace_id": "m1",
            "error_code": "workspaceBusy",
            "attempts": 3,
        }
    ]
    report = tmp_path / "run.json"

    # When the CLI drives it with a JSON report
    code, out, _ = run_cli(
        ["--parent", "m1", "--dry-run", *TARGET, "--report", str(report)], ScriptedInvoker([final])
    )

    # Then the summary names the failed child and why, and the report lists it
    assert code == 0
    assert re.search(r"^failed c2\s+workspaceBusy after 3 attempt\(s\)$", out, re.MULTILINE), out
    document = json.loads(report.read_text(encoding="utf-8"))
    assert document["failed"] == final["failed"]
    assert document["failed_listed_all"] is True


def test_cli_abandon_sends_the_abandon_payload_once_and_says_what_was_freed() -> None:
    # Given the function's answer to an abandon
    answer = {
        "run_id": RUN_ID,
        "dry_run": False,
        "abandoned": True,
        "released_parents": ["m1", "m2"],
        "processed": 4,
        "total": 9,
        "checkpoint": f"s3://bucket/sweep/{RUN_ID}.json",
    }
    invoker = ScriptedInvoker([answer])

    # When the operator abandons the run
    code, out, _ = run_cli(
        ["--abandon", "--run-id", RUN_ID, "--reason", "superseded", *TARGET], invoker
    )

    # Then exactly one abandon payload went out and the output says what was freed
    assert code == 0
    assert invoker.payloads == [{"abandon": True, "run_id": RUN_ID, "reason": "superseded"}]
    assert out.splitlines() == [
        f"run {RUN_ID} abandoned; parents freed: m1, m2",
        f"checkpoint kept at s3://bucket/sweep/{RUN_ID}.json",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--abandon", *TARGET], "--run-id (payload field run_id)"),
        (["--abandon", "--run-id", RUN_ID, "--parent", "m1", *TARGET], "not a sweep's flags"),
        (
            ["--abandon", "--run-id", RUN_ID, "--state-machine-arn", "arn:aws:states:x"],
            "use --function-name or --local",
        ),
    ],
    ids=["no-run-id", "sweep-flags", "state-machine"],
)
def test_cli_abandon_refuses_bad_flags_before_any_invocation(argv: list[str], message: str) -> None:
    # Given an abandon with a missing or stray flag / When run / Then exit 2, nothing invoked
    invoker = ScriptedInvoker([])
    code, _, err = run_cli(argv, invoker if "--state-machine-arn" not in argv else None)
    assert code == 2
    assert message in err
    assert invoker.payloads == []


def test_cli_abandon_by_parent_clears_an_unreadable_claim_and_says_so() -> None:
    # Given the function's answer to an abandon by parent whose claim was unreadable
    answer = {
        "dry_run": False,
        "abandoned": True,
        "released_parents": ["m1"],
        "checkpoint": "s3://bucket/sweep/parents/m1.json",
        "unreadable": "not valid JSON",
    }
    invoker = ScriptedInvoker([answer])

    # When the operator abandons whatever holds m1
    code, out, _ = run_cli(["--abandon", "--parent", "m1", *TARGET], invoker)

    # Then one abandon-by-parent payload went out and the output says what was replaced
    assert code == 0
    assert invoker.payloads == [{"abandon": True, "parent_workspace_id": "m1"}]
    assert out.splitlines() == [
        "unreadable claim cleared; parents freed: m1",
        "replaced an unreadable document (not valid JSON)",
        "checkpoint kept at s3://bucket/sweep/parents/m1.json",
    ]
