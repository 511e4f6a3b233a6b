"""Template hygiene: concurrency that never throttles the queue, kept state, logged buckets,
a dashboard drawn from the template's own values, and a prod stack that must page someone."""

from __future__ import annotations

import re
import shlex
import tomllib
from typing import Any

import pytest

from serenity_tools.standins.invoke import IntrinsicResolver, parameter_values
from tests.infrastructure._template import (
    ROOT,
    dashboard_sub,
    load_template,
    resources_of_type,
)

STATEFUL_TYPES = (
    "AWS::SQS::Queue",
    "AWS::Logs::LogGroup",
    "AWS::S3::Bucket",
    "AWS::DynamoDB::Table",
)
# Kept on delete and on replacement, whatever else changes.
MUST_RETAIN = {"AllocationDeadLetterQueue", "SweepBucket", "SweepAccessLogBucket"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def _samconfig_overrides() -> dict[str, dict[str, str]]:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))
    found: dict[str, dict[str, str]] = {}
    for environment, sections in config.items():
        deploy = (
            sections.get("deploy", {}).get("parameters", {}) if environment != "version" else {}
        )
        if "parameter_overrides" in deploy:
            pairs = shlex.split(deploy["parameter_overrides"])
            found[environment] = dict(pair.split("=", 1) for pair in pairs)
    return found


def _resolved(template: dict[str, Any], overrides: dict[str, str]) -> IntrinsicResolver:
    return IntrinsicResolver(template, parameter_values(template, overrides))


def _props(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = template["Resources"][logical_id]["Properties"]
    return properties


# ---------------------------------------------------------------- concurrency


def test_both_functions_reserve_concurrency_from_parameters(template: dict[str, Any]) -> None:
    assert _props(template, "AllocatorFunction")["ReservedConcurrentExecutions"] == {
        "Ref": "AllocatorReservedConcurrency"
    }
    assert _props(template, "SweepFunction")["ReservedConcurrentExecutions"] == {
        "Ref": "SweepReservedConcurrency"
    }


@pytest.mark.parametrize("environment", ["template defaults", *sorted(_samconfig_overrides())])
def test_allocator_reserved_concurrency_never_throttles_its_event_source(
    template: dict[str, Any], environment: str
) -> None:
    # Given the parameters one environment deploys with
    overrides = _samconfig_overrides().get(environment, {})
    resolve = _resolved(template, overrides)
    (event,) = _props(template, "AllocatorFunction")["Events"].values()
    maximum = int(resolve.resolve(event["Properties"]["ScalingConfig"]["MaximumConcurrency"]))
    reserved = int(
        resolve.resolve(_props(template, "AllocatorFunction")["ReservedConcurrentExecutions"])
    )
    # Then the event source's MaximumConcurrency stays the real cap: the reservation never
    # throttles it (a throttled batch returns its messages and burns their receives)
    assert 2 <= maximum <= reserved


def test_reserved_concurrency_parameters_cannot_go_below_the_event_source_minimum(
    template: dict[str, Any],
) -> None:
    parameters = template["Parameters"]
    assert (
        parameters["AllocatorReservedConcurrency"]["MinValue"]
        >= (parameters["AllocatorMaxConcurrency"]["MinValue"])
    )
    assert parameters["SweepReservedConcurrency"]["MinValue"] >= 1


# ---------------------------------------------------------------- state


def test_every_stateful_resource_says_what_happens_on_delete_and_replace(
    template: dict[str, Any],
) -> None:
    # Given every resource that holds data
    stateful = {
        name: resource
        for kind in STATEFUL_TYPES
        for name, resource in resources_of_type(template, kind).items()
    }
    assert set(stateful) >= MUST_RETAIN
    for name, resource in stateful.items():
        # Then both policies are explicit (cfn-lint I3011)
        assert resource.get("DeletionPolicy") in {"Retain", "Delete", "Snapshot"}, name
        assert resource.get("UpdateReplacePolicy") in {"Retain", "Delete", "Snapshot"}, name
    # And the dead letters and the buckets survive both
    for name in MUST_RETAIN:
        policies = (stateful[name]["DeletionPolicy"], stateful[name]["UpdateReplacePolicy"])
        assert policies == ("Retain", "Retain"), name


def test_sweep_bucket_is_versioned_and_access_logged_to_a_private_log_bucket(
    template: dict[str, Any],
) -> None:
    # Given the sweep bucket and its access-log bucket
    bucket = _props(template, "SweepBucket")
    logs = _props(template, "SweepAccessLogBucket")
    # Then checkpoints keep their history and every request to them is logged
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": "SweepAccessLogBucket"},
        "LogFilePrefix": "sweep-bucket/",
    }
    # And the log bucket is private, encrypted with SSE-S3 (all S3 log delivery supports),
    # owner-enforced and expires its logs
    assert all(logs["PublicAccessBlockConfiguration"].values())
    assert len(logs["PublicAccessBlockConfiguration"]) == 4
    (sse,) = logs["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    assert logs["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    (rule,) = logs["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == 90


# ---------------------------------------------------------------- dashboard


def test_dashboard_timeout_line_is_the_allocator_timeout(template: dict[str, Any]) -> None:
    # Given the Duration widget's timeout annotation and the function's Timeout
    body, variables = dashboard_sub(template)
    match = re.search(r'\{"label": "timeout", "value": \$\{(\w+)\}\}', body)
    assert match, "the Duration widget draws a timeout line from a Sub variable"
    resolve = _resolved(template, {})
    line_ms = int(resolve.resolve(variables[match.group(1)]))
    timeout_s = int(resolve.resolve(_props(template, "AllocatorFunction")["Timeout"]))
    # Then the line sits exactly at the timeout, in the metric's unit (ms)
    assert line_ms == timeout_s * 1000
    # And both come from the same mapping entry, not two literals
    assert _props(template, "AllocatorFunction")["Timeout"] == {
        "Fn::FindInMap": ["Constants", "Allocator", "TimeoutSeconds"]
    }


def test_dashboard_page_lines_sit_where_the_count_alarms_fire(template: dict[str, Any]) -> None:
    # Given the "any ... pages" lines and the alarms they stand for (threshold 0, "> 0")
    body, _ = dashboard_sub(template)
    alarms = resources_of_type(template, "AWS::CloudWatch::Alarm")
    for label, alarm in (
        ("any message pages", "DeadLetterQueueNotEmptyAlarm"),
        ("any error pages", "AllocatorErrorsAlarm"),
    ):
        alarm_props = alarms[alarm]["Properties"]
        assert alarm_props["ComparisonOperator"] == "GreaterThanThreshold"
        # Then the line is drawn at the first count that pages
        value = re.search(rf'"label": "{label}", "value": (\d+)', body)
        assert value, label
        assert int(value.group(1)) == alarm_props["Threshold"] + 1, label


# ---------------------------------------------------------------- prod pages someone


def _rule_holds(resolve: IntrinsicResolver, expression: Any) -> bool:
    """Evaluate a Rules condition or assertion (Equals, Not, And, Or over Refs)."""
    ((function, argument),) = expression.items()
    if function == "Fn::Equals":
        left, right = (resolve.resolve(item) for item in argument)
        return bool(left == right)
    if function == "Fn::Not":
        return not _rule_holds(resolve, argument[0])
    if function == "Fn::And":
        return all(_rule_holds(resolve, item) for item in argument)
    if function == "Fn::Or":
        return any(_rule_holds(resolve, item) for item in argument)
    raise AssertionError(f"unexpected rule function {function}")


def _failed_assertions(template: dict[str, Any], overrides: dict[str, str]) -> list[str]:
    """The AssertDescription of each rule assertion CloudFormation would refuse the deploy on."""
    resolve = _resolved(template, overrides)
    failed = []
    for rule in template.get("Rules", {}).values():
        if "RuleCondition" in rule and not _rule_holds(resolve, rule["RuleCondition"]):
            continue
        failed += [
            assertion["AssertDescription"]
            for assertion in rule["Assertions"]
            if not _rule_holds(resolve, assertion["Assert"])
        ]
    return failed


TOPIC = "arn:aws:sns:us-east-1:123456789012:oncall"
IMS = "https://ims.example.com"  # a stand-in: the shared doc names no IMS host


def test_prod_deploy_without_an_alarm_topic_fails_with_a_clear_message(
    template: dict[str, Any],
) -> None:
    # Given prod's samconfig as checked in (the topic left for the operator to fill in), with
    # the IMS origin filled in (its own rule: the next test)
    prod = {**_samconfig_overrides()["prod"], "ImsHost": IMS}
    assert prod["AlarmTopicArn"] == ""
    # When CloudFormation checks the rules / Then the deploy is refused, saying what to set
    (message,) = _failed_assertions(template, prod)
    assert "AlarmTopicArn is required when EnvironmentName=prod" in message
    assert "samconfig.toml" in message
    # And with a topic it goes through, as does dev without one
    assert _failed_assertions(template, {**prod, "AlarmTopicArn": TOPIC}) == []
    assert _failed_assertions(template, {**_samconfig_overrides()["dev"], "ImsHost": IMS}) == []


@pytest.mark.parametrize("environment", ["default", "dev", "prod"])
def test_a_deploy_without_the_ims_host_fails_with_a_clear_message(
    template: dict[str, Any], environment: str
) -> None:
    # Given an environment's samconfig as checked in (the IMS origin left to the operator: no
    # fleet-wide token to fall back on, and the shared doc names no host)
    overrides = {**_samconfig_overrides()[environment], "AlarmTopicArn": TOPIC}
    assert overrides["ImsHost"] == ""
    # When CloudFormation checks the rules / Then the deploy is refused, saying what to set
    (message,) = _failed_assertions(template, overrides)
    assert "ImsHost is required" in message
    assert "samconfig.toml" in message
    # And with the origin it goes through
    assert _failed_assertions(template, {**overrides, "ImsHost": IMS}) == []


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),  # the default; the rule above refuses it at deploy
        (IMS, True),
        ("https://ims.example.com/", True),
        ("ims-na1.adobelogin.com", True),  # the upstream's bare IMS_HOST: https there
        ("10.0.0.1", False),
        ("ims.example.com/ims", False),
        ("http://ims.example.com", False),
        ("https://10.0.0.1", False),
        ("https://ims.example.com:8443", False),
        ("https://ims.example.com/ims", False),
        ("https://user@ims.example.com", False),
    ],
)
def test_ims_host_parameter_takes_only_an_https_origin_or_a_bare_host_on_a_dns_name(
    template: dict[str, Any], value: str, accepted: bool
) -> None:
    pattern = template["Parameters"]["ImsHost"]["AllowedPattern"]
    assert (re.fullmatch(pattern, value) is not None) is accepted


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        (TOPIC, True),
        ("arn:aws-us-gov:sns:us-gov-west-1:123456789012:pager_prod", True),
        ("oncall", False),
        ("arn:aws:sqs:us-east-1:123456789012:oncall", False),
        ("arn:aws:sns:us-east-1:1234:oncall", False),
    ],
)
def test_alarm_topic_parameter_takes_only_an_sns_topic_arn(
    template: dict[str, Any], value: str, accepted: bool
) -> None:
    pattern = template["Parameters"]["AlarmTopicArn"]["AllowedPattern"]
    assert (re.fullmatch(pattern, value) is not None) is accepted
