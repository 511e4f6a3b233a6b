"""Least privilege, read from the template as deployed (after SAM's transform).

SAM adds policy that the template does not spell out: a generated function role carries the
managed AWSLambdaBasicExecutionRole (log actions on "*"), policy templates expand to wildcards
(``sqs:SendMessage*``, ``function:<name>*``). These tests read every statement after the
transform, with each ARN rendered as deployed, so none of that can slip back in unseen.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Any

import pytest

from tests.infrastructure._expanded import (
    ACCOUNT,
    REGION,
    Renderer,
    as_list,
    expanded_template,
    role_statements,
)

# Actions AWS cannot scope to a resource, each with the reason it is needed. Empty on purpose:
# metrics go out as EMF through the log stream (no cloudwatch:PutMetricData) and tracing is
# off (no xray:PutTraceSegments). Add an entry only with its justification, and say so in
# docs/configuration.md#permissions.
UNSCOPED_ACTIONS_ALLOWED: dict[str, str] = {}

# Resource wildcards the service's API leaves no way around, each with its reason.
WILDCARD_RESOURCES_ALLOWED: dict[str, str] = {
    # A log group's ARN in IAM ends in ":*"; the streams in it are named by Lambda at run time.
    rf"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/[a-z0-9-]+:\*": "log streams",
    # Checkpoint and report keys name the run, which is chosen when the run starts.
    r"arn:aws:s3:::[a-z0-9.-]+/sweep/\*": "sweep checkpoint objects",
    # S3 log delivery names each access-log object by time; the prefix is ours.
    r"arn:aws:s3:::[a-z0-9.-]+/sweep-bucket/\*": "sweep bucket access-log objects",
}

# What the code calls, per function (the DynamoDB request ledger is checked on its own below).
ACTIONS_THE_CODE_CALLS = {
    "AllocatorFunction": {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        # the SQS event source mapping, on the function's behalf
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ChangeMessageVisibility",
        # dead-lettering an invalid message; a sibling reclaim's release
        "sqs:SendMessage",
        "events:PutEvents",
        # the IMS consumer pair; a request's promise token (decrypt, encrypt the rolled one)
        "secretsmanager:GetSecretValue",
        "kms:Decrypt",
        "kms:Encrypt",
    },
    "SweepFunction": {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "sqs:SendMessage",
        # the IMS consumer and emitter pairs; the run's promise token on its run claim, and
        # each release's (encrypt only; its record: see the credentials table's tests)
        "secretsmanager:GetSecretValue",
        "kms:Decrypt",
        "kms:Encrypt",
        "s3:GetObject",
        "s3:PutObject",
        "s3:ListBucket",
    },
}
# Item-level DynamoDB actions: a request ledger reads and writes items by key (the batch forms
# name their keys too). Never Scan, Query, an index, a stream or a table-level action.
LEDGER_ITEM_ACTIONS = {
    "dynamodb:BatchGetItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
}
# The defaults of ImsConsumerSecretName (both functions) and ImsEmitterSecretName (the Sweep).
SECRET_NAMES = {
    "AllocatorRole": ["serenity-allocator/ims-consumer"],
    "SweepRole": ["serenity-allocator/ims-consumer", "serenity-allocator/ims-emitter"],
}


@pytest.fixture(scope="module")
def expanded() -> dict[str, Any]:
    return expanded_template()


@pytest.fixture(scope="module")
def render(expanded: dict[str, Any]) -> Renderer:
    return Renderer(expanded)


def _of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def _role_of(template: dict[str, Any], logical_id: str) -> str:
    """The logical id of the role a function or state machine runs as."""
    properties = template["Resources"][logical_id]["Properties"]
    role = properties.get("Role") or properties["RoleArn"]  # a function / a state machine
    name: str = role["Fn::GetAtt"][0]
    return name


def _allows(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [statement for statement in statements if statement["Effect"] == "Allow"]


def _all_allow_statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = [
        (role, statement)
        for role, statements in role_statements(template).items()
        for statement in _allows(statements)
    ]
    for kind in ("AWS::SQS::QueuePolicy", "AWS::S3::BucketPolicy", "AWS::SNS::TopicPolicy"):
        for name, resource in _of_type(template, kind).items():
            document = resource["Properties"]["PolicyDocument"]
            found += [(name, s) for s in _allows(as_list(document["Statement"]))]
    return found


def _actions_and_resources(
    render: Renderer, statements: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    return [
        (action, resource)
        for statement in statements
        for action in as_list(statement["Action"])
        for resource in as_list(render.render(statement["Resource"]))
    ]


# ---------------------------------------------------------------- no wildcards


def test_expanded_template_attaches_no_managed_policy(expanded: dict[str, Any]) -> None:
    # Given every role CloudFormation would create (our own and those SAM generates)
    roles = _of_type(expanded, "AWS::IAM::Role")
    assert {"AllocatorRole", "SweepRole"} <= set(roles)
    # Then none attaches a managed policy (AWS's grant log or trace actions on "*")
    for name, role in roles.items():
        assert role["Properties"].get("ManagedPolicyArns", []) == [], name
    # And the one managed policy is our own, for producing services, attached to nothing here
    managed = _of_type(expanded, "AWS::IAM::ManagedPolicy")
    assert set(managed) == {"ProducerCredentialsPolicy"}
    assert {"Roles", "Users", "Groups"} & set(
        managed["ProducerCredentialsPolicy"]["Properties"]
    ) == set()


def test_expanded_policies_grant_no_wildcard_action(expanded: dict[str, Any]) -> None:
    # Given every Allow statement, in roles and in resource policies
    statements = _all_allow_statements(expanded)
    assert len(statements) >= 10
    # Then every action is spelled out ("sqs:SendMessage*" or "s3:*" would not be)
    for owner, statement in statements:
        for action in as_list(statement["Action"]):
            assert "*" not in action and "?" not in action, f"{owner}: {action}"


def test_expanded_policies_use_wildcard_resources_only_where_the_api_requires(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given every Allow statement's resources, rendered as deployed
    for owner, statement in _all_allow_statements(expanded):
        for action, resource in _actions_and_resources(render, [statement]):
            # Then "*" alone appears only for an action AWS cannot scope
            if resource == "*":
                assert action in UNSCOPED_ACTIONS_ALLOWED, f"{owner}: {action} on *"
            # And a wildcard inside an ARN only where the API leaves no way around it
            elif "*" in resource:
                assert any(re.fullmatch(p, resource) for p in WILDCARD_RESOURCES_ALLOWED), (
                    f"{owner}: {action} on {resource}"
                )


def test_resource_policies_deny_plain_http_and_grant_only_s3_log_delivery(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the queue and bucket policies
    grants = []
    for kind in ("AWS::SQS::QueuePolicy", "AWS::S3::BucketPolicy"):
        for name, resource in _of_type(expanded, kind).items():
            statements = as_list(resource["Properties"]["PolicyDocument"]["Statement"])
            # Then each denies non-TLS access to everything it covers
            denies = [s for s in statements if s["Effect"] == "Deny"]
            assert [s["Condition"] for s in denies] == [
                {"Bool": {"aws:SecureTransport": "false"}}
            ], name
            grants += [(name, s) for s in _allows(statements)]
    # And the one grant lets S3's log delivery write the sweep bucket's logs, nothing else
    ((owner, grant),) = grants
    assert owner == "SweepAccessLogBucketPolicy"
    assert grant["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert as_list(grant["Action"]) == ["s3:PutObject"]
    assert render.render(grant["Condition"]) == {
        "ArnLike": {"aws:SourceArn": render.arn("SweepBucket")},
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
    }


# ---------------------------------------------------------------- per principal


@pytest.mark.parametrize("function", sorted(ACTIONS_THE_CODE_CALLS))
def test_each_function_role_grants_exactly_the_actions_its_code_calls(
    expanded: dict[str, Any], function: str
) -> None:
    # Given the function's role after the transform
    statements = role_statements(expanded)[_role_of(expanded, function)]
    granted = {action for s in _allows(statements) for action in as_list(s["Action"])}
    # Then it grants what the code calls, nothing more (DynamoDB: see the ledger test)
    assert {a for a in granted if not a.startswith("dynamodb:")} == (
        ACTIONS_THE_CODE_CALLS[function]
    )
    # And the role is the function's alone
    roles = [
        _role_of(expanded, name)
        for name in _of_type(expanded, "AWS::Lambda::Function")
        if name != function
    ]
    assert _role_of(expanded, function) not in roles


@pytest.mark.parametrize("function", sorted(ACTIONS_THE_CODE_CALLS))
def test_each_function_writes_logs_only_to_its_own_log_group(
    expanded: dict[str, Any], render: Renderer, function: str
) -> None:
    # Given the function's log group and its role's log statements
    group = expanded["Resources"][function]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    statements = role_statements(expanded)[_role_of(expanded, function)]
    pairs = _actions_and_resources(render, _allows(statements))
    logs = {(a, r) for a, r in pairs if a.startswith("logs:")}
    # Then both log actions name exactly that group (its ARN covers its streams)
    expected = render.arn(group)
    assert expected.endswith(f":log-group:/aws/lambda/{render.physical_name(function)}:*")
    assert logs == {("logs:CreateLogStream", expected), ("logs:PutLogEvents", expected)}


def test_the_ims_pairs_are_read_by_each_secrets_exact_name_and_six_character_suffix(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given every statement granting a Secrets Manager action
    grants = sorted(
        (role, action, resource)
        for role, statements in role_statements(expanded).items()
        for action, resource in _actions_and_resources(render, _allows(statements))
        if action.startswith("secretsmanager:")
    )
    # Then each function may only read the values of its pairs (DescribeSecret is never
    # called): the Allocator the consumer pair, the Sweep the consumer and the emitter pairs
    prefix = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:"
    assert grants == [
        (role, "secretsmanager:GetSecretValue", f"{prefix}{name}-??????")
        for role, names in sorted(SECRET_NAMES.items())
        for name in names
    ]
    for _, _, resource in grants:
        # And the ARN is the name plus exactly the six random characters AWS appends
        name = resource.removeprefix(prefix).removesuffix("-??????")
        assert fnmatchcase(f"{prefix}{name}-AbCdEf", resource)
        assert not fnmatchcase(f"{prefix}{name}-admin-AbCdEf", resource)
        assert not fnmatchcase(f"{prefix}{name}-AbCdEfG", resource)


def test_the_state_machine_may_invoke_exactly_the_sweep_function(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the state machine's role after the transform
    (machine,) = _of_type(expanded, "AWS::StepFunctions::StateMachine")
    statements = role_statements(expanded)[_role_of(expanded, machine)]
    # Then its one grant is InvokeFunction on the Sweep's unqualified ARN, no prefix match
    sweep = render.arn("SweepFunction")
    assert _actions_and_resources(render, _allows(statements)) == [("lambda:InvokeFunction", sweep)]
    assert not fnmatchcase(sweep + "-other", sweep)


def test_a_request_ledger_table_gets_item_level_actions_only(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the DynamoDB tables in the stack and every DynamoDB grant
    tables = {render.arn(name) for name in _of_type(expanded, "AWS::DynamoDB::Table")}
    grants = [
        (role, action, resource)
        for role, statements in role_statements(expanded).items()
        for action, resource in _actions_and_resources(render, _allows(statements))
        if action.startswith("dynamodb:")
    ]
    # Then without a table there is no DynamoDB grant at all
    if not tables:
        assert grants == []
    # And each grant is an item-level action on one of this stack's tables (no index, no
    # stream, no Scan, no table management)
    for role, action, resource in grants:
        assert action in LEDGER_ITEM_ACTIONS, f"{role}: {action}"
        assert resource in tables, f"{role}: {action} on {resource}"


def test_sweep_reads_and_writes_only_its_checkpoint_prefix(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the sweep role's S3 statements
    statements = role_statements(expanded)[_role_of(expanded, "SweepFunction")]
    s3 = [s for s in _allows(statements) if as_list(s["Action"])[0].startswith("s3:")]
    bucket = render.arn("SweepBucket")
    by_resource = {render.render(s["Resource"]): s for s in s3}
    # Then object access is limited to sweep/* and listing to that prefix
    assert set(by_resource) == {f"{bucket}/sweep/*", bucket}
    objects = by_resource[f"{bucket}/sweep/*"]
    assert sorted(as_list(objects["Action"])) == ["s3:GetObject", "s3:PutObject"]
    listing = by_resource[bucket]
    assert as_list(listing["Action"]) == ["s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": "sweep/*"}}
