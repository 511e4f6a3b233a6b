"""``serenity-allocator invoke``: template environment resolution and an in-process invoke."""

from __future__ import annotations

import io
import itertools
import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serenity_tools import cli
from serenity_tools.standins import invoke as invoke_module
from serenity_tools.standins.invoke import (
    TemplateError,
    function_config,
    load_env_vars,
    load_template,
    parse_parameter_overrides,
)
from serenity_tools.standins.lambda_context import LocalLambdaContext

ROOT = Path(__file__).resolve().parents[3]

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  Stage:
    Type: String
    AllowedValues: [dev, prod]
    Default: dev
  Blocks:
    Type: Number
    Default: 100
  NoDefault:
    Type: String
  Topic:
    Type: String
    Default: ""
Mappings:
  Constants:
    Queue:
      MaxReceiveCount: 5
Conditions:
  HasTopic: !Not [!Equals [!Ref Topic, ""]]
Globals:
  Function:
    Runtime: python3.12
    Timeout: 10
    MemorySize: 256
    Environment:
      Variables:
        SHARED: from-globals
        OVERRIDDEN: from-globals
        STAGE: !Ref Stage
Resources:
  Queue:
    Type: AWS::SQS::Queue
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: code/
      Handler: {handler}
      Timeout: 7
      Environment:
        Variables:
          OVERRIDDEN: from-function
          BLOCKS: !Ref Blocks
          MAX_RECEIVE_COUNT: !FindInMap [Constants, Queue, MaxReceiveCount]
          NAME: !Sub "${{AWS::StackName}}-${{Stage}}-worker"
          JOINED: !Join [",", [a, !Ref Stage]]
          TOPIC: !If [HasTopic, !Ref Topic, none]
          OPTIONAL: !If [HasTopic, !Ref Topic, !Ref AWS::NoValue]
          QUEUE_URL: !Ref Queue
          QUEUE_ARN: !GetAtt Queue.Arn
          QUEUE_SUB: !Sub "${{Queue.QueueName}}"
          NEEDS_NO_DEFAULT: !Ref NoDefault
          FLAG: true
  Other:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: code/
      Handler: other.handler
"""

HANDLER_MODULE = """\
import os
import json


def handler(event, context):
    print(json.dumps({"log": "handler ran"}))
    return {
        "event": event,
        "env": {k: os.environ.get(k) for k in ("SHARED", "OVERRIDDEN", "STAGE", "FROM_FILE")},
        "function_name": context.function_name,
        "memory": context.memory_limit_in_mb,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "request_id": context.aws_request_id,
    }


def failing(event, context):
    raise RuntimeError("upstream said no")
"""


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Path]:
    """Write a template whose Worker handler lives in a fresh module under tmp/code/."""

    def write(function: str = "handler") -> Path:
        module = f"local_invoke_handler_{uuid.uuid4().hex[:8]}"  # fresh import every test
        (tmp_path / "code").mkdir(exist_ok=True)
        (tmp_path / "code" / f"{module}.py").write_text(HANDLER_MODULE)
        template = tmp_path / "template.yaml"
        template.write_text(TEMPLATE.format(handler=f"{module}.{function}"))
        return template

    return write


def config_for(template_path: Path, **kwargs: Any) -> invoke_module.FunctionConfig:
    return function_config(
        load_template(template_path), "Worker", template_dir=template_path.parent, **kwargs
    )


# ---------------------------------------------------------------- resolution


def test_function_config_merges_globals_and_the_function_wins(
    project: Callable[..., Path],
) -> None:
    # Given Globals and a function that overrides one variable and the timeout
    config = config_for(project())
    # Then Globals fill in, the function's own values win, and scalars resolve to strings
    assert config.environment["SHARED"] == "from-globals"
    assert config.environment["OVERRIDDEN"] == "from-function"
    assert config.environment["FLAG"] == "true"
    assert (config.timeout_s, config.memory_mb) == (7, 256)
    assert config.code_dir.name == "code"


def test_function_config_resolves_parameters_to_their_defaults(
    project: Callable[..., Path],
) -> None:
    config = config_for(project())
    assert config.environment["STAGE"] == "dev"
    assert config.environment["BLOCKS"] == "100"
    assert config.environment["MAX_RECEIVE_COUNT"] == "5"
    assert config.environment["NAME"] == "local-dev-worker"
    assert config.environment["JOINED"] == "a,dev"
    assert config.environment["TOPIC"] == "none"
    assert "OPTIONAL" not in config.environment  # AWS::NoValue removes the variable


def test_function_config_applies_parameter_overrides(project: Callable[..., Path]) -> None:
    # Given overrides for a plain parameter and for one a condition depends on
    overrides = {"Stage": "prod", "Topic": "arn:aws:sns:us-east-1:123456789012:t"}
    # When the function is resolved with them
    config = config_for(project(), parameter_overrides=overrides)
    # Then every reference, Sub and condition sees the override
    assert config.environment["STAGE"] == "prod"
    assert config.environment["NAME"] == "local-prod-worker"
    assert config.environment["TOPIC"] == overrides["Topic"]
    assert config.environment["OPTIONAL"] == overrides["Topic"]


def test_function_config_leaves_out_what_needs_a_deployed_stack(
    project: Callable[..., Path],
) -> None:
    config = config_for(project())
    for name in ("QUEUE_URL", "QUEUE_ARN", "QUEUE_SUB", "NEEDS_NO_DEFAULT"):
        assert name not in config.environment
    assert set(config.left_out) == {"QUEUE_URL", "QUEUE_ARN", "QUEUE_SUB", "NEEDS_NO_DEFAULT"}


def test_env_vars_file_wins_function_section_over_parameters_section(
    project: Callable[..., Path], tmp_path: Path
) -> None:
    # Given an env-vars file with an all-functions section and a Worker section
    env_file = tmp_path / "env.json"
    env_file.write_text(
        json.dumps(
            {
                "Parameters": {"STAGE": "from-parameters", "QUEUE_URL": "http://q", "N": 3},
                "Worker": {"STAGE": "from-worker", "FROM_FILE": "yes"},
                "Other": {"FROM_FILE": "not-for-worker"},
            }
        )
    )
    # When the Worker is resolved with it (and a parameter override)
    config = config_for(
        project(), parameter_overrides={"Stage": "prod"}, env_vars=load_env_vars(env_file)
    )
    # Then the function's section beats Parameters, which beats the template and overrides
    assert config.environment["STAGE"] == "from-worker"
    assert config.environment["FROM_FILE"] == "yes"
    assert config.environment["N"] == "3"
    # And a variable supplied by the file is no longer reported as left out
    assert config.environment["QUEUE_URL"] == "http://q"
    assert "QUEUE_URL" not in config.left_out


@pytest.mark.parametrize(
    "overrides",
    [{"Nope": "x"}, {"Stage": "staging"}],
    ids=["unknown-parameter", "not-an-allowed-value"],
)
def test_function_config_refuses_bad_overrides(
    project: Callable[..., Path], overrides: dict[str, str]
) -> None:
    with pytest.raises(TemplateError):
        config_for(project(), parameter_overrides=overrides)


def test_function_config_refuses_an_unknown_function(project: Callable[..., Path]) -> None:
    template_path = project()
    with pytest.raises(TemplateError, match="Other"):
        function_config(load_template(template_path), "Missing", template_dir=template_path.parent)


def test_parse_parameter_overrides_accepts_sam_forms() -> None:
    parsed = parse_parameter_overrides(
        ["A=1", 'B="two words" C=3', "ParameterKey=D,ParameterValue=x,y"]
    )
    assert parsed == {"A": "1", "B": "two words", "C": "3", "D": "x,y"}
    with pytest.raises(TemplateError):
        parse_parameter_overrides(["novalue"])


def test_env_vars_file_must_be_sam_shaped(tmp_path: Path) -> None:
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"Worker": "not-a-section"}))
    with pytest.raises(TemplateError):
        load_env_vars(path)


def test_real_template_allocator_resolves_like_sam_with_the_local_env_file() -> None:
    # Given the project's template
    template = load_template(ROOT / "template.yaml")
    # When the Allocator is resolved without and with events/env.json
    bare = function_config(template, "AllocatorFunction", template_dir=ROOT)
    local = function_config(
        template,
        "AllocatorFunction",
        template_dir=ROOT,
        env_vars=load_env_vars(ROOT / "events" / "env.json"),
    )
    # Then the template alone gives the parameter defaults and leaves out resource references
    assert bare.handler == "serenity_allocator.handlers.allocator.lambda_handler"
    assert bare.timeout_s == 60
    assert bare.environment["MAX_RECEIVE_COUNT"] == "5"
    assert bare.environment["SERENITY_DYNAMIC_ALLOCATION"] == "false"
    assert bare.environment["ENVIRONMENT"] == "dev"
    assert set(bare.left_out) == {
        "QUEUE_URL",
        "DLQ_URL",
        "OUTCOME_BUS_NAME",
        "REQUEST_LEDGER_TABLE",
        "CREDENTIALS_TABLE",
        "CREDENTIALS_KEY_ARN",
    }
    # And env.json turns it into a local configuration with nothing left out
    assert local.environment["SEMRUSH_BASE_URL"] == "http://127.0.0.1:8765"
    assert local.environment["SERENITY_DYNAMIC_ALLOCATION"] == "true"
    assert local.left_out == ()


# ---------------------------------------------------------------- context


def test_local_lambda_context_counts_down_from_the_timeout() -> None:
    # Given a context on a fake clock
    now = [100.0]
    context = LocalLambdaContext("Worker", 30, clock=lambda: now[0], memory_limit_in_mb=512)
    # When time passes / Then the remaining time falls, never below zero
    assert context.get_remaining_time_in_millis() == 30_000
    now[0] += 12.5
    assert context.get_remaining_time_in_millis() == 17_500
    now[0] += 60
    assert context.get_remaining_time_in_millis() == 0
    assert context.invoked_function_arn == ("arn:aws:lambda:us-east-1:123456789012:function:Worker")
    assert (context.function_name, context.memory_limit_in_mb) == ("Worker", 512)
    assert context.aws_request_id


# ---------------------------------------------------------------- invoke


def _last_line(text: str) -> Any:
    return json.loads(text.strip().splitlines()[-1])


def test_invoke_prints_the_handler_response_as_the_last_stdout_line(
    project: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a template, an event and an env-vars file
    template_path = project()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"Records": [{"body": "x"}]}))
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps({"Worker": {"FROM_FILE": "yes"}}))
    environ_before, path_before = dict(os.environ), list(sys.path)
    # When it is invoked through the CLI
    code = cli.main(
        [
            "invoke",
            "Worker",
            "--event",
            str(event),
            "--env-vars",
            str(env_file),
            "--template",
            str(template_path),
            "--parameter-overrides",
            "Stage=prod",
        ]
    )
    # Then the handler's log comes first and its JSON response is the last line
    out = capsys.readouterr()
    assert code == 0
    assert json.loads(out.out.splitlines()[0]) == {"log": "handler ran"}
    response = _last_line(out.out)
    assert response["event"] == {"Records": [{"body": "x"}]}
    assert response["env"] == {
        "SHARED": "from-globals",
        "OVERRIDDEN": "from-function",
        "STAGE": "prod",
        "FROM_FILE": "yes",
    }
    assert (response["function_name"], response["memory"]) == ("Worker", 256)
    assert 0 < response["remaining_ms"] <= 7_000
    # And the notes went to stderr, naming what was left out
    assert "left out" in out.err and "QUEUE_URL" in out.err
    # And the process environment and import path are as before
    assert dict(os.environ) == environ_before
    assert sys.path == path_before


def test_invoke_reports_a_handler_error_as_lambda_does(
    project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a handler that raises
    template_path = project(function="failing")
    # When it is invoked without an event
    code = cli.main(["invoke", "Worker", "--template", str(template_path)])
    # Then the last line is Lambda's error shape and the exit code says it failed
    out = capsys.readouterr()
    assert code == 1
    assert _last_line(out.out) == {"errorType": "RuntimeError", "errorMessage": "upstream said no"}
    assert "Traceback" in out.err


def test_invoke_fails_when_the_handler_overruns_its_timeout(
    project: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a clock on which the handler takes longer than the 7 s Timeout
    ticks = itertools.chain([0.0], itertools.repeat(8.0))
    monkeypatch.setattr(invoke_module, "_clock", lambda: next(ticks))
    # When it is invoked
    code = cli.main(["invoke", "Worker", "--template", str(project())])
    # Then the response is still printed last, but the run counts as failed
    out = capsys.readouterr()
    assert code == 1
    assert _last_line(out.out)["remaining_ms"] == 0
    assert "Timeout" in out.err


@pytest.mark.parametrize(
    "argv",
    [
        ["invoke", "Missing"],
        ["invoke", "Worker", "--parameter-overrides", "Stage=staging"],
        ["invoke", "Worker", "--event", "does-not-exist.json"],
    ],
    ids=["unknown-function", "bad-override", "missing-event-file"],
)
def test_invoke_bad_input_exits_2_without_calling_the_handler(
    project: Callable[..., Path], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main([*argv, "--template", str(project())])
    out = capsys.readouterr()
    assert code == 2
    assert out.out == ""
    assert out.err.startswith("invoke: ")


def test_intrinsic_resolver_handles_select_split_conditions_and_escapes() -> None:
    # Given a template fragment with the less common intrinsics
    template = {
        "Parameters": {"Stage": {"Type": "String", "Default": "dev"}},
        "Conditions": {
            "IsDev": {"Fn::Equals": [{"Ref": "Stage"}, "dev"]},
            "IsProd": {"Fn::Equals": [{"Ref": "Stage"}, "prod"]},
            "Either": {"Fn::Or": [{"Condition": "IsDev"}, {"Condition": "IsProd"}]},
            "Both": {"Fn::And": [{"Condition": "IsDev"}, {"Condition": "IsProd"}]},
        },
        "Resources": {},
    }
    resolver = invoke_module.IntrinsicResolver(
        template, invoke_module.parameter_values(template, {})
    )
    # Then each resolves as CloudFormation would
    assert resolver.resolve({"Fn::Select": [1, {"Fn::Split": [",", "a,b,c"]}]}) == "b"
    assert resolver.resolve({"Fn::Sub": "${!Literal}-${Stage}"}) == "${Literal}-dev"
    assert (
        resolver.resolve({"Fn::Sub": ["${X}-${Y}", {"X": "a", "Y": {"Ref": "Stage"}}]}) == "a-dev"
    )
    assert resolver.is_true("Either") and not resolver.is_true("Both")
    with pytest.raises(invoke_module.UnresolvableError):
        resolver.resolve({"Fn::ImportValue": "shared-queue-url"})


def test_invoke_reads_the_event_from_stdin(
    project: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an event piped on stdin
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"from": "stdin"}'))
    # When invoked with --event -
    code = cli.main(["invoke", "Worker", "--event", "-", "--template", str(project())])
    # Then the handler got it
    assert code == 0
    assert _last_line(capsys.readouterr().out)["event"] == {"from": "stdin"}
