"""template.yaml, parsed and checked: queues, worker wiring, least privilege, alarms, dashboard.

The template is read with cfn-lint's loader (the same reading the cfn-lint gate uses) and,
where a value matters rather than its spelling, resolved with the local invoke's intrinsic
resolver (the same resolution ``serenity-allocator invoke`` applies).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from serenity_allocator.adapters.observability import METRIC_CATALOG
from serenity_allocator.write_guard import SERVICE_METRIC_CATALOG
from serenity_tools.standins.invoke import NO_VALUE, IntrinsicResolver, parameter_values
from tests.infrastructure._template import (
    RUNBOOKS_DIR,
    dashboard_sub,
    function_environment,
    load_template,
    resources_of_type,
    sub_variables,
)

ALLOCATOR = "AllocatorFunction"
SWEEP = "SweepFunction"
STATE_MACHINE = "SweepStateMachine"
QUEUE = "AllocationQueue"
DLQ = "AllocationDeadLetterQueue"

PAGER_ALARMS = {
    "DeadLetterQueueNotEmptyAlarm",
    "QueueOldestMessageAgeAlarm",
    "WorkspaceBusyRejectionAlarm",
    "AllocatorErrorsAlarm",
    "AllocatorThrottlesAlarm",
    "SweepExecutionFailedAlarm",
    "EnforcementBackClassifierAlarm",
    "EnforcementBackRetryAlarm",
    "NeedsReauthBurstAlarm",
    "AccessDeniedBurstAlarm",
    "UnauthorizedBurstAlarm",
    "ImsClientRefusedAlarm",
    "SemrushScopeMissingAlarm",
}
DASHBOARD_ONLY_ALARMS = {
    "OrgPoolExhaustedRejectionAlarm",
    "BrandAiLimitRejectionAlarm",
    "RequiresDecommissionTrendAlarm",
    "PoolFreeRatioProjectsLowAlarm",
    "PoolFreeRatioPromptsLowAlarm",
}
PLANNED_RUNBOOKS = {
    "docs/runbooks/zombie-child.md",
    "docs/runbooks/dlq-triage.md",
    "docs/runbooks/pool-exhaustion.md",
    "docs/runbooks/sweep.md",
    "docs/runbooks/allocator-errors.md",
    "docs/runbooks/enforcement-is-back.md",
    "docs/runbooks/credentials.md",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def resolver(template: dict[str, Any], **overrides: str) -> IntrinsicResolver:
    return IntrinsicResolver(template, parameter_values(template, overrides))


def props(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = template["Resources"][logical_id]["Properties"]
    return properties


# ---------------------------------------------------------------- queues


@pytest.mark.parametrize("queue", [QUEUE, DLQ])
def test_queue_is_fifo_with_request_id_dedup_and_sse(template: dict[str, Any], queue: str) -> None:
    # Given the queue's properties
    queue_props = props(template, queue)
    # Then it is FIFO, deduplicates by the producer's id (not the body) and is encrypted at rest
    assert queue_props["FifoQueue"] is True
    assert queue_props["ContentBasedDeduplication"] is False
    assert queue_props["SqsManagedSseEnabled"] is True
    assert queue_props["QueueName"]["Fn::Sub"].endswith(".fifo")


def test_allocation_queue_is_high_throughput_fifo(template: dict[str, Any]) -> None:
    # Given the main queue
    queue_props = props(template, QUEUE)
    # Then throughput limits apply per child (message group), not per queue
    assert queue_props["DeduplicationScope"] == "messageGroup"
    assert queue_props["FifoThroughputLimit"] == "perMessageGroupId"


def test_dead_letter_queue_keeps_messages_fourteen_days(template: dict[str, Any]) -> None:
    assert props(template, DLQ)["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_redrive_max_receive_count_is_the_workers_max_receive_count(
    template: dict[str, Any],
) -> None:
    # Given the redrive policy and the worker's MAX_RECEIVE_COUNT
    redrive = props(template, QUEUE)["RedrivePolicy"]
    env_value = function_environment(template, ALLOCATOR)["MAX_RECEIVE_COUNT"]
    # Then both name the same single source and resolve to 5
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [DLQ, "Arn"]}
    assert redrive["maxReceiveCount"] == env_value
    resolve = resolver(template)
    assert int(resolve.resolve(redrive["maxReceiveCount"])) == 5
    assert str(resolve.resolve(env_value)) == "5"


def test_visibility_timeout_is_at_least_six_times_the_allocator_timeout(
    template: dict[str, Any],
) -> None:
    # Given the allocator's timeout and the queue's visibility timeout
    timeout = resolver(template).resolve(props(template, ALLOCATOR)["Timeout"])
    visibility = props(template, QUEUE)["VisibilityTimeout"]
    # Then a message is never redelivered while an invocation may still hold it
    assert visibility >= 6 * timeout


def test_queues_deny_insecure_transport(template: dict[str, Any]) -> None:
    # Given the queue policy
    (policy,) = resources_of_type(template, "AWS::SQS::QueuePolicy").values()
    # Then it covers both queues and denies non-TLS access
    assert {ref["Ref"] for ref in policy["Properties"]["Queues"]} == {QUEUE, DLQ}
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Deny"
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


# ---------------------------------------------------------------- functions


def test_functions_run_python312_on_arm64(template: dict[str, Any]) -> None:
    globals_function = template["Globals"]["Function"]
    assert globals_function["Runtime"] == "python3.12"
    assert globals_function["Architectures"] == ["arm64"]
    for name in (ALLOCATOR, SWEEP):
        assert "Runtime" not in props(template, name)  # no function drifts from Globals
        assert props(template, name)["CodeUri"] == "src/"


def test_function_handlers_and_timeouts(template: dict[str, Any]) -> None:
    assert props(template, ALLOCATOR)["Handler"] == (
        "serenity_allocator.handlers.allocator.lambda_handler"
    )
    assert props(template, SWEEP)["Handler"] == "serenity_allocator.handlers.sweep.lambda_handler"
    assert resolver(template).resolve(props(template, ALLOCATOR)["Timeout"]) == 60
    assert props(template, SWEEP)["Timeout"] == 900


def test_allocator_sqs_event_reports_partial_batches_with_a_concurrency_cap(
    template: dict[str, Any],
) -> None:
    # Given the allocator's only event source
    (event,) = props(template, ALLOCATOR)["Events"].values()
    # Then it reads the main queue ten at a time, reports item failures, and is capped
    assert event["Type"] == "SQS"
    event_props = event["Properties"]
    assert event_props["Queue"] == {"Fn::GetAtt": [QUEUE, "Arn"]}
    assert event_props["BatchSize"] == 10
    assert event_props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert event_props["ScalingConfig"] == {
        "MaximumConcurrency": {"Ref": "AllocatorMaxConcurrency"}
    }
    # And the cap's parameter cannot go below Lambda's minimum of 2
    assert template["Parameters"]["AllocatorMaxConcurrency"]["MinValue"] == 2


def test_environment_carries_the_contract_variables(template: dict[str, Any]) -> None:
    # Given each function's merged environment
    common = {
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
        "POWERTOOLS_LOG_LEVEL",
        "ENVIRONMENT",
        "SEMRUSH_BASE_URL",
        "IMS_HOST",
        "IMS_CONSUMER_SECRET_ID",
        "IMS_PAIR_NAME",
        "CREDENTIALS_KEY_ARN",
        "SERENITY_DYNAMIC_ALLOCATION",
        "BLOCK_PROJECTS",
        "BLOCK_PROMPTS",
    }
    allocator = function_environment(template, ALLOCATOR)
    sweep = function_environment(template, SWEEP)
    # Then each has exactly the variables it is documented to read from the template
    assert set(allocator) == common | {
        "QUEUE_URL",
        "DLQ_URL",
        "MAX_RECEIVE_COUNT",
        "OUTCOME_BUS_NAME",
        "REQUEST_LEDGER_TABLE",
        "CREDENTIALS_TABLE",
        "SERENITY_BRAND_AI_CEILING_PROJECTS",
        "SERENITY_BRAND_AI_CEILING_PROMPTS",
    }
    assert set(sweep) == common | {
        "SWEEP_BUCKET",
        "QUEUE_URL",
        "IMS_EMITTER_SECRET_ID",
        "CREDENTIALS_TABLE",
    }
    assert allocator["OUTCOME_BUS_NAME"] == {"Ref": "OutcomeBus"}
    assert allocator["REQUEST_LEDGER_TABLE"] == {"Ref": "RequestLedgerTable"}
    assert allocator["SERENITY_BRAND_AI_CEILING_PROJECTS"] == {"Ref": "BrandAiCeilingProjects"}
    assert allocator["SERENITY_BRAND_AI_CEILING_PROMPTS"] == {"Ref": "BrandAiCeilingPrompts"}
    assert allocator["DLQ_URL"] == {"Ref": DLQ}
    assert sweep["SWEEP_BUCKET"] == {"Ref": "SweepBucket"}
    # And both run in IMS mode: the IMS origin, the consumer pair's secret, the key and the
    # credentials table (the Sweep writes its releases' records, minted with the emitter pair)
    assert sweep["IMS_EMITTER_SECRET_ID"] == {"Ref": "ImsEmitterSecretName"}
    for env in (allocator, sweep):
        assert env["CREDENTIALS_TABLE"] == {"Ref": "CredentialsTable"}
        assert env["IMS_HOST"] == {"Ref": "ImsHost"}
        assert env["IMS_CONSUMER_SECRET_ID"] == {"Ref": "ImsConsumerSecretName"}
        assert env["CREDENTIALS_KEY_ARN"] == {"Fn::GetAtt": ["CredentialsKey", "Arn"]}
        # And no fleet-wide token is ever deployed, as a value or as a secret
        assert "SEMRUSH_TOKEN" not in env
        assert "SEMRUSH_TOKEN_SECRET_ID" not in env
    assert "SemrushTokenSecretId" not in template["Parameters"]


def test_kill_switch_ships_off(template: dict[str, Any]) -> None:
    parameter = template["Parameters"]["DynamicAllocation"]
    assert parameter["Default"] == "false"
    assert parameter["AllowedValues"] == ["true", "false"]
    env = function_environment(template, ALLOCATOR)
    assert resolver(template).resolve(env["SERENITY_DYNAMIC_ALLOCATION"]) == "false"


def test_each_function_logs_to_its_own_log_group_with_retention(template: dict[str, Any]) -> None:
    for function, group in ((ALLOCATOR, "AllocatorLogGroup"), (SWEEP, "SweepLogGroup")):
        # Given the function's logging config and its log group
        group_props = props(template, group)
        # Then the function writes to that group (created first, so no race with Lambda)
        assert props(template, function)["LoggingConfig"] == {"LogGroup": {"Ref": group}}
        # And the group is named like Lambda's default for that function, with a retention
        function_name = props(template, function)["FunctionName"]["Fn::Sub"]
        assert group_props["LogGroupName"]["Fn::Sub"] == f"/aws/lambda/{function_name}"
        assert resolver(template).resolve(group_props["RetentionInDays"]) > 0


# ---------------------------------------------------------------- least privilege: test_iam.py


def test_sweep_bucket_is_private_encrypted_and_expires_checkpoints(
    template: dict[str, Any],
) -> None:
    bucket = template["Resources"]["SweepBucket"]
    bucket_props = bucket["Properties"]
    block = bucket_props["PublicAccessBlockConfiguration"]
    assert all(block[key] is True for key in block) and len(block) == 4
    (sse,) = bucket_props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
    (rule,) = bucket_props["LifecycleConfiguration"]["Rules"]
    assert (rule["Prefix"], rule["ExpirationInDays"], rule["Status"]) == ("sweep/", 90, "Enabled")
    assert bucket["DeletionPolicy"] == "Retain"


# ---------------------------------------------------------------- alarms


def _alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in resources_of_type(template, "AWS::CloudWatch::Alarm").items()
    }


def test_every_alarm_is_either_pager_worthy_or_dashboard_only(template: dict[str, Any]) -> None:
    assert set(_alarms(template)) == PAGER_ALARMS | DASHBOARD_ONLY_ALARMS
    assert not PAGER_ALARMS & DASHBOARD_ONLY_ALARMS


def test_pager_alarms_notify_the_topic_only_when_one_is_given(template: dict[str, Any]) -> None:
    # Given the pager alarms
    alarms = _alarms(template)
    topic = "arn:aws:sns:us-east-1:123456789012:oncall"
    with_topic = resolver(template, AlarmTopicArn=topic)
    without_topic = resolver(template)
    for name in PAGER_ALARMS:
        for key in ("AlarmActions", "OKActions"):
            # Then with a topic they notify it, and without one the property disappears
            assert with_topic.resolve(alarms[name][key]) == [topic], (name, key)
            assert without_topic.resolve(alarms[name][key]) is NO_VALUE, (name, key)


def test_dashboard_only_alarms_have_no_actions(template: dict[str, Any]) -> None:
    alarms = _alarms(template)
    for name in DASHBOARD_ONLY_ALARMS:
        for key in ("AlarmActions", "OKActions", "InsufficientDataActions"):
            assert key not in alarms[name], (name, key)


def test_alarms_treat_missing_data_as_not_breaching(template: dict[str, Any]) -> None:
    for name, alarm in _alarms(template).items():
        assert alarm["TreatMissingData"] == "notBreaching", name


_RUNBOOK_REFERENCE = re.compile(r"Runbook: (docs/runbooks/[a-z0-9-]+\.md)#([a-z0-9-]+)$")


def _github_anchor(heading: str) -> str:
    anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return anchor.replace(" ", "-")


def test_every_alarm_description_names_its_runbook_section(template: dict[str, Any]) -> None:
    for name, alarm in _alarms(template).items():
        # Given the description's last words
        match = _RUNBOOK_REFERENCE.search(alarm["AlarmDescription"].strip())
        # Then they name a section of one of the planned runbooks
        assert match, f"{name}: no 'Runbook: docs/runbooks/<file>.md#<section>'"
        path, anchor = match.groups()
        assert path in PLANNED_RUNBOOKS, f"{name}: {path}"
        # And once the runbook is written, the section exists in it
        runbook = RUNBOOKS_DIR / path.removeprefix("docs/runbooks/")
        if runbook.exists():
            headings = [
                _github_anchor(line.lstrip("#"))
                for line in runbook.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")
            ]
            assert anchor in headings, f"{name}: {path} has no section #{anchor}"


def _metric_dimensions(alarm: dict[str, Any]) -> dict[str, Any]:
    return {dimension["Name"]: dimension["Value"] for dimension in alarm["Dimensions"]}


def test_custom_metric_alarms_use_the_catalogs_names_and_dimensions(
    template: dict[str, Any],
) -> None:
    # Given the alarms on our own metrics
    globals_env = template["Globals"]["Function"]["Environment"]["Variables"]
    custom = {
        name: alarm
        for name, alarm in _alarms(template).items()
        if alarm.get("Namespace") == globals_env["POWERTOOLS_METRICS_NAMESPACE"]
    }
    assert len(custom) == 12
    for name, alarm in custom.items():
        if alarm["MetricName"] in SERVICE_METRIC_CATALOG:  # emitted by the services: below
            continue
        # Then the metric exists in the code's catalog, with exactly the dimensions it emits
        spec = METRIC_CATALOG[alarm["MetricName"]]
        dimensions = _metric_dimensions(alarm)
        expected = {"service", "Environment"} | ({spec.dimension} if spec.dimension else set())
        assert set(dimensions) == expected, name
        assert dimensions["service"] == globals_env["POWERTOOLS_SERVICE_NAME"], name
        assert dimensions["Environment"] == {"Ref": "EnvironmentName"}, name
        if spec.dimension:
            assert dimensions[spec.dimension] in spec.values, name


def test_pager_custom_metric_alarms_are_on_metrics_the_catalog_marks_pager_worthy(
    template: dict[str, Any],
) -> None:
    alarms = _alarms(template)
    for name in PAGER_ALARMS:
        if alarms[name].get("Namespace") == "SerenityAllocator":
            metric = alarms[name]["MetricName"]
            spec = SERVICE_METRIC_CATALOG.get(metric) or METRIC_CATALOG[metric]
            assert spec.pager, name


def test_enforcement_is_back_pages_on_the_first_disguised_405_anywhere(
    template: dict[str, Any],
) -> None:
    # Given the two "enforcement is back" alarms
    alarms = _alarms(template)
    classifier = alarms["EnforcementBackClassifierAlarm"]
    retry = alarms["EnforcementBackRetryAlarm"]

    # Then the classifier's alarm fires on one matched 405 from any service: exactly the
    # dimensions the services' recorder prints, none naming the service
    assert (classifier["MetricName"], classifier["Statistic"]) == ("MeteredQuotaClassifier", "Sum")
    assert _metric_dimensions(classifier) == {
        "Environment": {"Ref": "EnvironmentName"},
        "Matched": "true",
    }
    assert set(SERVICE_METRIC_CATALOG["MeteredQuotaClassifier"].dimensions) == {"Matched"}
    # And the retry alarm counts every recovery cycle of every call site, in this environment
    (query,) = retry["Metrics"]
    expression = " ".join(
        resolver(template, EnvironmentName="prod").resolve(query["Expression"]).split()
    )
    assert expression == (
        'SELECT COUNT(QuotaRetryOutcome) FROM SCHEMA("SerenityAllocator", Environment, Outcome,'
        " Site) WHERE Environment = 'prod'"
    )
    assert query["ReturnData"] is True
    # And both page at the first one
    for alarm in (classifier, retry):
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
        assert (alarm["Period"] if "Period" in alarm else query["Period"]) == 300
        assert alarm["EvaluationPeriods"] == 1


@pytest.mark.parametrize(
    ("logical_id", "outcome"),
    [
        ("ImsClientRefusedAlarm", "imsClientRefused"),
        ("SemrushScopeMissingAlarm", "semrushScopeMissing"),
    ],
)
def test_a_wrong_ims_pair_pages_at_the_first_one_within_a_minute(
    template: dict[str, Any], logical_id: str, outcome: str
) -> None:
    alarm = _alarms(template)[logical_id]
    assert (alarm["MetricName"], alarm["Statistic"]) == ("CredentialOutcome", "Sum")
    assert _metric_dimensions(alarm)["Outcome"] == outcome
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (60, 1)


def test_threshold_alarms_use_their_parameters(template: dict[str, Any]) -> None:
    alarms = _alarms(template)
    assert alarms["QueueOldestMessageAgeAlarm"]["Threshold"] == {
        "Ref": "OldestMessageAgeThresholdSeconds"
    }
    assert alarms["WorkspaceBusyRejectionAlarm"]["Threshold"] == {"Ref": "WorkspaceBusyThreshold"}
    assert alarms["WorkspaceBusyRejectionAlarm"]["Period"] == 300
    for name in ("PoolFreeRatioProjectsLowAlarm", "PoolFreeRatioPromptsLowAlarm"):
        assert alarms[name]["Threshold"] == {"Ref": "PoolFreeRatioWarningPercent"}
        assert alarms[name]["ComparisonOperator"] == "LessThanThreshold"


def test_aws_metric_alarms_watch_this_stacks_resources(template: dict[str, Any]) -> None:
    alarms = _alarms(template)
    expected = {
        "DeadLetterQueueNotEmptyAlarm": (
            "AWS/SQS",
            {"QueueName": {"Fn::GetAtt": [DLQ, "QueueName"]}},
        ),
        "QueueOldestMessageAgeAlarm": (
            "AWS/SQS",
            {"QueueName": {"Fn::GetAtt": [QUEUE, "QueueName"]}},
        ),
        "AllocatorErrorsAlarm": ("AWS/Lambda", {"FunctionName": {"Ref": ALLOCATOR}}),
        "AllocatorThrottlesAlarm": ("AWS/Lambda", {"FunctionName": {"Ref": ALLOCATOR}}),
        "SweepExecutionFailedAlarm": ("AWS/States", {"StateMachineArn": {"Ref": STATE_MACHINE}}),
    }
    for name, (namespace, dimensions) in expected.items():
        assert alarms[name]["Namespace"] == namespace, name
        assert _metric_dimensions(alarms[name]) == dimensions, name


# ---------------------------------------------------------------- dashboard


def _dashboard(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The dashboard body with each ${...} replaced by a recognisable placeholder.

    Number parameters and the Sub's own variables (mapping values) become distinct numbers
    (they sit unquoted in the JSON), everything else a ``<name>`` string. Returns the parsed
    body and the name -> placeholder map.
    """
    body, variables = dashboard_sub(template)
    placeholders: dict[str, str] = {}
    for index, name in enumerate(sorted(set(sub_variables(body)))):
        parameter = template["Parameters"].get(name)
        if name in variables or (parameter and parameter["Type"] == "Number"):
            placeholders[name] = str(900001 + index)
        else:
            placeholders[name] = f"<{name}>"
    text = body
    for name, placeholder in placeholders.items():
        text = text.replace("${" + name + "}", placeholder)
    return json.loads(text), placeholders


def _metric_rows(body: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    rows: list[tuple[str, list[Any]]] = []
    for widget in body["widgets"]:
        if widget["type"] == "metric":
            rows += [
                (widget["properties"]["title"], row) for row in widget["properties"]["metrics"]
            ]
    return rows


def _split_row(row: list[Any]) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    options = row[-1] if isinstance(row[-1], dict) else {}
    fields = row[:-1] if options else row
    namespace, metric, *pairs = fields
    assert len(pairs) % 2 == 0, row
    return namespace, metric, dict(zip(pairs[::2], pairs[1::2], strict=True)), options


def test_dashboard_substitutions_name_parameters_pseudo_parameters_or_resources(
    template: dict[str, Any],
) -> None:
    # Given every ${...} in the dashboard body
    body, variables = dashboard_sub(template)
    # Then each resolves at deploy time (a typo here fails the deploy, not this test)
    for name in sub_variables(body):
        head = name.split(".", 1)[0]
        known = (
            head in template["Parameters"] or head in template["Resources"] or (name in variables)
        )
        assert known or name.startswith("AWS::"), name


def test_dashboard_body_is_json_referencing_only_catalog_metrics(template: dict[str, Any]) -> None:
    # Given the dashboard's metric rows
    body, placeholders = _dashboard(template)
    rows = _metric_rows(body)
    environment = placeholders["EnvironmentName"]
    seen: set[tuple[str, str]] = set()
    for title, row in rows:
        if isinstance(row[0], dict):  # a metric math expression
            continue
        namespace, metric, dimensions, _ = _split_row(row)
        seen.add((namespace, metric))
        if namespace != "SerenityAllocator":
            continue
        # Then each custom metric is one the code emits, with the dimensions it emits
        assert metric in METRIC_CATALOG, (title, metric)
        spec = METRIC_CATALOG[metric]
        own = {spec.dimension} if spec.dimension else set()
        assert set(dimensions) == {"service", "Environment"} | own, (title, metric)
        assert dimensions["service"] == "serenity-allocator"
        assert dimensions["Environment"] == environment
        if spec.dimension:
            assert dimensions[spec.dimension] in spec.values, (title, metric)
    # And the dashboard shows what operators need
    required = {
        ("SerenityAllocator", "HeadroomCheck"),
        ("SerenityAllocator", "TopUpLatencyMs"),
        ("SerenityAllocator", "AllocationRejection"),
        ("SerenityAllocator", "ReleaseOutcome"),
        ("SerenityAllocator", "PoolFreeRatio"),
        ("SerenityAllocator", "QueueLagMs"),
        ("SerenityAllocator", "InvalidMessage"),
        ("SerenityAllocator", "CoalescedEnsures"),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
        ("AWS/SQS", "ApproximateAgeOfOldestMessage"),
        ("AWS/Lambda", "Duration"),
        ("AWS/Lambda", "Errors"),
    }
    assert required <= seen, required - seen


def _rows_for(body: dict[str, Any], metric: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
    found = []
    for _, row in _metric_rows(body):
        if not isinstance(row[0], dict) and row[1] == metric:
            _, _, dimensions, options = _split_row(row)
            found.append((dimensions, options))
    return found


def test_dashboard_shows_every_reason_and_latency_percentiles_per_path(
    template: dict[str, Any],
) -> None:
    body, _ = _dashboard(template)
    for metric in ("AllocationRejection", "ReleaseOutcome", "PoolFreeRatio", "HeadroomCheck"):
        spec = METRIC_CATALOG[metric]
        shown = {dims[spec.dimension or ""] for dims, _ in _rows_for(body, metric)}
        assert shown == set(spec.values), metric
    latency = {
        (dims["Path"], options["stat"]) for dims, options in _rows_for(body, "TopUpLatencyMs")
    }
    assert latency == {(p, s) for p in ("settle", "fail-fast") for s in ("p50", "p99")}


def test_dashboard_hot_path_ratio_is_hot_path_over_all_checks(template: dict[str, Any]) -> None:
    # Given the hot-path widget
    body, _ = _dashboard(template)
    (widget,) = [
        w for w in body["widgets"] if w["properties"].get("title", "").startswith("Hot-path")
    ]
    rows = widget["properties"]["metrics"]
    (expression,) = [row[0]["expression"] for row in rows if isinstance(row[0], dict)]
    ids = {
        _split_row(row)[2]["Outcome"]: _split_row(row)[3]["id"]
        for row in rows
        if not isinstance(row[0], dict)
    }
    # Then the expression divides the hot-path count by the sum of every outcome
    numerator, denominator = expression.split("/", 1)
    assert ids["hot-path"] in numerator
    for outcome in METRIC_CATALOG["HeadroomCheck"].values:
        assert ids[outcome] in denominator, outcome


def test_dashboard_draws_alarm_thresholds(template: dict[str, Any]) -> None:
    # Given the horizontal annotations
    body, placeholders = _dashboard(template)
    drawn = {
        str(annotation["value"])
        for widget in body["widgets"]
        for annotation in widget["properties"].get("annotations", {}).get("horizontal", [])
    }
    # Then each threshold parameter is drawn
    for parameter in (
        "WorkspaceBusyThreshold",
        "PoolFreeRatioWarningPercent",
        "OldestMessageAgeThresholdSeconds",
    ):
        assert placeholders[parameter] in drawn, parameter


# ---------------------------------------------------------------- outputs and parameters


def test_outputs(template: dict[str, Any]) -> None:
    assert set(template["Outputs"]) == {
        "AllocationQueueUrl",
        "AllocationQueueArn",
        "DeadLetterQueueUrl",
        "OutcomeBusName",
        "RequestLedgerTableName",
        "RequestLedgerTableArn",
        "CredentialsTableName",
        "CredentialsKeyArn",
        "ProducerCredentialsPolicyArn",
        "SweepStateMachineArn",
        "SweepBucketName",
        "SweepFunctionName",
        "AllocatorFunctionName",
    }
    assert template["Outputs"]["AllocationQueueArn"]["Value"] == {"Fn::GetAtt": [QUEUE, "Arn"]}


def test_every_parameter_is_used(template: dict[str, Any]) -> None:
    text = json.dumps({k: v for k, v in template.items() if k != "Parameters"})
    for name in template["Parameters"]:
        assert f'"Ref": "{name}"' in text or "${" + name + "}" in text, name


def test_alarm_descriptions_say_exactly_what_they_count(template: dict[str, Any]) -> None:
    # Given the alarms whose counting is easy to misread
    alarms = _alarms(template)
    oldest, busy = alarms["QueueOldestMessageAgeAlarm"], alarms["WorkspaceBusyRejectionAlarm"]
    classifier = alarms["EnforcementBackClassifierAlarm"]

    # Then the oldest-message alarm is 3 consecutive 1-minute periods, and says so
    assert (oldest["Period"], oldest["EvaluationPeriods"]) == (60, 3)
    assert "DatapointsToAlarm" not in oldest  # 3 of 3: consecutive
    assert "for 3 consecutive minutes" in " ".join(oldest["AlarmDescription"].split())
    # And the busy alarm says it counts refused receives, not requests or "ensures that gave up"
    text = " ".join(busy["AlarmDescription"].split())
    assert "counts refused receives of ensures and releases, not requests" in text
    # And the classifier alarm says who records it, once per 405
    text = " ".join(classifier["AlarmDescription"].split())
    assert "counted once per such answer by the service's EmfQuotaRetryRecorder" in text
