"""The sweep state machine: its definition is well formed and its loop runs the sweep to the end.

cfn-lint checks the SAM resource's shape but not an inline ``AWS::Serverless::StateMachine``
definition, so the definition is (1) linted by cfn-lint as the ``AWS::StepFunctions`` resource
SAM turns it into, (2) checked structurally, and (3) run through a tiny interpreter of exactly
the ASL features it uses, fed with sweep results shaped by the handler's own result model.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from serenity_allocator.domain.sweep.model import SweepResult
from tests.infrastructure._template import RUNBOOKS_DIR, load_template

STATE_MACHINE = "SweepStateMachine"
TERMINAL_TYPES = {"Succeed", "Fail"}
COMPARISONS = {"BooleanEquals", "NumericGreaterThan", "NumericEquals", "StringEquals", "IsPresent"}
LAMBDA_SERVICE_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}


@pytest.fixture(scope="module")
def machine() -> dict[str, Any]:
    properties: dict[str, Any] = load_template()["Resources"][STATE_MACHINE]["Properties"]
    return properties


@pytest.fixture(scope="module")
def definition(machine: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = machine["Definition"]
    return value


# ---------------------------------------------------------------- structure


def _transitions(state: dict[str, Any]) -> Iterator[str]:
    if "Next" in state:
        yield state["Next"]
    if "Default" in state:
        yield state["Default"]
    for rule in state.get("Choices", []):
        yield rule["Next"]


def test_definition_passes_cfn_lint_as_a_step_functions_resource(
    machine: dict[str, Any],
) -> None:
    # Given the definition as SAM deploys it (an AWS::StepFunctions::StateMachine)
    from cfnlint import api

    resource = {
        "Type": "AWS::StepFunctions::StateMachine",
        "Properties": {
            "RoleArn": "arn:aws:iam::123456789012:role/sweep-state-machine",
            "StateMachineType": machine["Type"],
            "Definition": machine["Definition"],
            "DefinitionSubstitutions": {
                "SweepFunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:sweep"
            },
        },
    }
    document = {"AWSTemplateFormatVersion": "2010-09-09", "Resources": {"Sweep": resource}}
    # When cfn-lint checks it
    matches = api.lint(json.dumps(document))
    # Then it reports no error or warning
    problems = [str(m) for m in matches if m.rule.id[0] in {"E", "W"}]
    assert problems == []


def test_definition_is_well_formed(definition: dict[str, Any]) -> None:
    states = definition["States"]
    assert definition["StartAt"] in states
    reachable: set[str] = set()
    pending = [definition["StartAt"]]
    while pending:
        name = pending.pop()
        if name in reachable:
            continue
        reachable.add(name)
        state = states[name]
        targets = list(_transitions(state))
        # Every transition lands on a state; only Choice/Succeed/Fail lack a Next
        for target in targets:
            assert target in states, f"{name} -> {target}"
        if state["Type"] not in TERMINAL_TYPES | {"Choice"}:
            assert "Next" in state or state.get("End") is True, name
        pending += targets
    assert reachable == set(states), f"unreachable: {set(states) - reachable}"


def test_choice_rules_use_known_operators_on_result_paths(definition: dict[str, Any]) -> None:
    def walk(rule: dict[str, Any]) -> None:
        if "And" in rule or "Or" in rule:
            for inner in rule.get("And", []) + rule.get("Or", []):
                walk(inner)
        elif "Not" in rule:
            walk(rule["Not"])
        else:
            operators = set(rule) - {"Variable", "Next"}
            assert len(operators) == 1 and operators <= COMPARISONS, rule
            assert rule["Variable"].startswith("$.result."), rule

    for state in definition["States"].values():
        for rule in state.get("Choices", []):
            walk(rule)


def test_sweep_task_invokes_the_sweep_function_and_retries_service_errors_only(
    machine: dict[str, Any], definition: dict[str, Any]
) -> None:
    # Given the only Task
    (task,) = [s for s in definition["States"].values() if s["Type"] == "Task"]
    # Then it invokes the Sweep function (substituted from its ARN)
    assert task["Resource"] == "arn:aws:states:::lambda:invoke"
    assert task["Parameters"]["FunctionName"] == "${SweepFunctionArn}"
    assert machine["DefinitionSubstitutions"] == {
        "SweepFunctionArn": {"Fn::GetAtt": ["SweepFunction", "Arn"]}
    }
    # And retries Lambda's own failures, never the function's errors (a resume is manual)
    (retry,) = task["Retry"]
    assert set(retry["ErrorEquals"]) == LAMBDA_SERVICE_ERRORS
    assert "Catch" not in task
    assert machine["Type"] == "STANDARD"


# ---------------------------------------------------------------- a tiny ASL interpreter


def _path(data: Any, path: str) -> Any:
    """A JSONPath of the simple dotted form ASL uses here ($.a.b); KeyError when absent."""
    assert path == "$" or path.startswith("$."), path
    value = data
    for part in path[2:].split(".") if path != "$" else []:
        value = value[part]
    return value


_JSON_MERGE = re.compile(r"^States\.JsonMerge\((\S+), (\S+), (true|false)\)$")


def _evaluate(expression: str, data: Any, context: dict[str, Any]) -> Any:
    merge = _JSON_MERGE.match(expression)
    if merge:
        left, right, deep = merge.groups()
        assert deep == "false", "Step Functions supports only a shallow JsonMerge"
        return {**_evaluate(left, data, context), **_evaluate(right, data, context)}
    if expression.startswith("$$."):
        return _path(context, "$." + expression[3:])
    return _path(data, expression)


def _apply_template(shape: Any, data: Any, context: dict[str, Any]) -> Any:
    """Parameters / ResultSelector: keys ending in .$ are evaluated, the rest copied."""
    if not isinstance(shape, dict):
        return copy.deepcopy(shape)
    result: dict[str, Any] = {}
    for key, value in shape.items():
        if key.endswith(".$"):
            result[key[:-2]] = _evaluate(value, data, context)
        else:
            result[key] = _apply_template(value, data, context)
    return result


def _matches(rule: dict[str, Any], data: Any) -> bool:
    if "And" in rule:
        return all(_matches(inner, data) for inner in rule["And"])
    if "Or" in rule:
        return any(_matches(inner, data) for inner in rule["Or"])
    if "Not" in rule:
        return not _matches(rule["Not"], data)
    if "IsPresent" in rule:
        try:
            _path(data, rule["Variable"])
            present = True
        except (KeyError, TypeError):
            present = False
        return present is rule["IsPresent"]
    # Like Step Functions, comparing a missing path is a runtime error (KeyError here).
    value = _path(data, rule["Variable"])
    if "BooleanEquals" in rule:
        return value is rule["BooleanEquals"]
    if "NumericGreaterThan" in rule:
        return isinstance(value, int | float) and value > rule["NumericGreaterThan"]
    if "NumericEquals" in rule:
        return isinstance(value, int | float) and value == rule["NumericEquals"]
    if "StringEquals" in rule:
        return value == rule["StringEquals"]
    raise AssertionError(f"operator not supported by this interpreter: {rule}")


@dataclass
class Execution:
    """What one simulated execution did."""

    status: str = "RUNNING"
    end_state: str = ""
    error: str | None = None
    payloads: list[dict[str, Any]] = field(default_factory=list)
    waits: int = 0


def run_execution(
    definition: dict[str, Any],
    execution_input: dict[str, Any],
    invoke: Callable[[dict[str, Any]], dict[str, Any]],
    max_transitions: int = 200,
) -> Execution:
    """Run the definition: Pass, Task (Lambda invoke), Choice, Wait, Succeed and Fail."""
    context = {"Execution": {"Input": execution_input}}
    data: Any = copy.deepcopy(execution_input)
    execution = Execution()
    name = definition["StartAt"]
    for _ in range(max_transitions):
        state = definition["States"][name]
        kind = state["Type"]
        if kind == "Pass":
            data = _apply_template(state.get("Parameters", data), data, context)
        elif kind == "Task":
            parameters = _apply_template(state["Parameters"], data, context)
            payload = parameters["Payload"]
            execution.payloads.append(payload)
            raw = {"StatusCode": 200, "ExecutedVersion": "$LATEST", "Payload": invoke(payload)}
            selected = _apply_template(
                state.get("ResultSelector", {"Payload.$": "$"}), raw, context
            )
            # ResultPath defaults to "$": the selected result becomes the state's output.
            assert state.get("ResultPath", "$") == "$"
            data = selected
        elif kind == "Choice":
            name = next(
                (rule["Next"] for rule in state["Choices"] if _matches(rule, data)),
                state["Default"],
            )
            continue
        elif kind == "Wait":
            execution.waits += 1
        elif kind in TERMINAL_TYPES:
            execution.status = "SUCCEEDED" if kind == "Succeed" else "FAILED"
            execution.end_state = name
            execution.error = state.get("Error")
            return execution
        name = state["Next"]
    raise AssertionError("the execution did not finish")


# ---------------------------------------------------------------- behaviour


def sweep_result(
    *,
    run_id: str = "rs-20250601-120000-4f9c2a",
    done: bool,
    aborted: bool = False,
    unexpected_errors: int = 0,
    processed: int = 25,
    remaining: int = 0,
) -> dict[str, Any]:
    """A result as the Sweep handler returns it (built with its own model)."""
    counts = {"would_release": 0, "enqueued": processed, "unexpected_errors": unexpected_errors}
    fields: dict[str, Any] = {
        "run_id": run_id,
        "dry_run": False,
        "done": done,
        "aborted": aborted,
        "abort_reason": "5 consecutive unexpected errors" if aborted else None,
        "processed": processed,
        "remaining": remaining,
        "total": processed + remaining,
        "counts": counts,
        "items": [],
        "checkpoint": f"s3://bucket/sweep/{run_id}.json",
    }
    result: dict[str, Any] = SweepResult.model_validate(fields).model_dump(mode="json")
    return result


def scripted(results: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    queue = list(results)

    def invoke(payload: dict[str, Any]) -> dict[str, Any]:
        return queue.pop(0)

    return invoke


SWEEP_INPUT = {
    "dry_run": False,
    "parent_workspace_ids": ["ws-master-org1"],
    "batch_size": 25,
    "rate_limit_ms": 300,
}


@pytest.mark.parametrize(
    ("result", "expected_status", "expected_end"),
    [
        (dict(done=False, aborted=True), "FAILED", "Aborted"),
        (dict(done=True, aborted=True), "FAILED", "Aborted"),
        (dict(done=True, unexpected_errors=3), "FAILED", "FinishedWithUnexpectedErrors"),
        (dict(done=True), "SUCCEEDED", "Finished"),
    ],
    ids=["aborted", "aborted-wins-over-done", "done-with-unexpected-errors", "done-clean"],
)
def test_sweep_execution_ends_on_the_first_final_result(
    definition: dict[str, Any], result: dict[str, Any], expected_status: str, expected_end: str
) -> None:
    # Given a sweep whose first batch returns a final result
    invoke = scripted([sweep_result(**result)])
    # When the execution runs
    execution = run_execution(definition, SWEEP_INPUT, invoke)
    # Then it ends in the state the sweep's result calls for, after exactly one invocation
    assert (execution.status, execution.end_state) == (expected_status, expected_end)
    assert len(execution.payloads) == 1
    assert execution.waits == 0


def test_sweep_execution_loops_with_a_wait_until_done_and_resumes_the_same_run(
    definition: dict[str, Any],
) -> None:
    # Given a run that needs three batches, with an unexpected error in a middle batch
    run_id = "rs-20250601-120000-abc123"
    invoke = scripted(
        [
            sweep_result(run_id=run_id, done=False, remaining=50),
            sweep_result(run_id=run_id, done=False, remaining=25, unexpected_errors=1),
            sweep_result(run_id=run_id, done=True, unexpected_errors=0),
        ]
    )
    # When the execution runs from an input without a run id
    execution = run_execution(definition, SWEEP_INPUT, invoke)
    # Then it waited between batches and succeeded (only the final counts decide)
    assert (execution.status, execution.end_state) == ("SUCCEEDED", "Finished")
    assert execution.waits == 2
    # And the first batch got the input as given, every later one the same input plus run_id
    assert execution.payloads[0] == SWEEP_INPUT
    assert execution.payloads[1:] == [{**SWEEP_INPUT, "run_id": run_id}] * 2


def test_sweep_execution_started_with_a_run_id_resumes_that_run(
    definition: dict[str, Any],
) -> None:
    # Given an execution started to resume an earlier run
    execution_input = {**SWEEP_INPUT, "run_id": "rs-20250530-090000-0f0f0f"}
    invoke = scripted([sweep_result(run_id="rs-20250530-090000-0f0f0f", done=True)])
    # When it runs
    execution = run_execution(definition, execution_input, invoke)
    # Then the first invocation already carries that run id
    assert execution.payloads == [execution_input]
    assert execution.status == "SUCCEEDED"


def test_sweep_execution_fails_when_a_later_batch_aborts(definition: dict[str, Any]) -> None:
    invoke = scripted(
        [
            sweep_result(done=False, remaining=75),
            sweep_result(done=False, aborted=True, unexpected_errors=5, remaining=50),
        ]
    )
    execution = run_execution(definition, SWEEP_INPUT, invoke)
    assert (execution.status, execution.error) == ("FAILED", "SweepAborted")
    assert execution.waits == 1


def test_fail_states_point_to_the_sweep_runbook(definition: dict[str, Any]) -> None:
    fails = {n: s for n, s in definition["States"].items() if s["Type"] == "Fail"}
    assert set(fails) == {"Aborted", "FinishedWithUnexpectedErrors"}
    runbook = RUNBOOKS_DIR / "sweep.md"
    for name, state in fails.items():
        match = re.search(r"Runbook: docs/runbooks/sweep\.md#([a-z0-9-]+)$", state["Cause"])
        assert match, name
        if runbook.exists():  # once written, the section must exist
            anchors = {
                re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in runbook.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")
            }
            assert match.group(1) in anchors, name
