"""Which endpoint each local-stack service uses: --aws-endpoint, or botocore's variables."""

from __future__ import annotations

import argparse
import re

import pytest

from serenity_tools.standins.aws_endpoints import (
    SERVICES,
    AwsEndpoints,
    EndpointError,
    ServiceEndpoints,
    add_endpoint_flag,
    endpoints_from,
    from_environment,
    from_flags,
)
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.stack import guide_lines


def test_one_flag_points_every_service_and_a_service_flag_wins() -> None:
    # Given one endpoint for everything and DynamoDB on its own
    endpoints = from_flags(["http://127.0.0.1:4566", "dynamodb=http://127.0.0.1:5000"])

    # Then every service has its endpoint and none is left to moto
    assert endpoints.by_service == {
        "sqs": "http://127.0.0.1:4566",
        "events": "http://127.0.0.1:4566",
        "s3": "http://127.0.0.1:4566",
        "secretsmanager": "http://127.0.0.1:4566",
        "dynamodb": "http://127.0.0.1:5000",
        "kms": "http://127.0.0.1:4566",
    }
    assert endpoints.moto_services() == ()


def test_service_variables_win_over_the_global_one_and_unset_services_stay_on_moto() -> None:
    # Given LocalStack for SQS and EventBridge only, by the standard variables
    environ = {
        "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:4566/",
        "AWS_ENDPOINT_URL_EVENTBRIDGE": "http://localhost:4566",
    }

    endpoints = from_environment(environ)

    # Then those two use it and the rest run on the stack's moto
    assert endpoints.by_service == {
        "sqs": "http://127.0.0.1:4566",
        "events": "http://localhost:4566",
    }
    assert endpoints.moto_services() == ("s3", "secretsmanager", "dynamodb", "kms")
    resolved = endpoints.resolved("http://127.0.0.1:9999")
    assert resolved.url("dynamodb") == "http://127.0.0.1:9999"
    assert resolved.environment() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9999",
        "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:4566",
        "AWS_ENDPOINT_URL_EVENTBRIDGE": "http://localhost:4566",
    }
    # And a service variable beats the global one
    mixed = from_environment(
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ENDPOINT_URL_DYNAMODB": "http://[::1]:2"}
    )
    assert mixed.by_service["dynamodb"] == "http://[::1]:2"
    assert mixed.by_service["sqs"] == "http://127.0.0.1:1"


def test_the_flag_replaces_the_environment_and_nothing_given_means_moto_for_all() -> None:
    environ = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}
    assert endpoints_from(["sqs=http://127.0.0.1:2"], environ).by_service == {
        "sqs": "http://127.0.0.1:2"
    }
    assert endpoints_from(None, {}) == AwsEndpoints()
    assert AwsEndpoints().moto_services() == SERVICES
    with pytest.raises(EndpointError, match="no endpoint for sqs"):
        AwsEndpoints().resolved(None)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("https://sqs.us-east-1.amazonaws.com", "not a loopback endpoint"),
        ("http://10.0.0.5:4566", "not a loopback endpoint"),
        ("127.0.0.1:4566", "not an http"),
        ("kinesis=http://127.0.0.1:1", "unknown service 'kinesis'"),
    ],
)
def test_a_non_loopback_or_unknown_endpoint_is_refused_naming_the_flag(
    value: str, message: str
) -> None:
    with pytest.raises(EndpointError, match=message) as raised:
        from_flags([value])
    assert "--aws-endpoint" in str(raised.value)


def test_a_bad_variable_is_refused_naming_the_variable() -> None:
    with pytest.raises(EndpointError, match=re.escape("AWS_ENDPOINT_URL_S3: 'http://192.0.2.1'")):
        from_environment({"AWS_ENDPOINT_URL_S3": "http://192.0.2.1"})


def test_the_flag_is_checked_when_parsed(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="demo")
    add_endpoint_flag(parser)
    assert parser.parse_args(["--aws-endpoint", "http://127.0.0.1:1"]).aws_endpoint == [
        "http://127.0.0.1:1"
    ]
    assert parser.parse_args([]).aws_endpoint is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--aws-endpoint", "http://example.com"])
    assert "not a loopback endpoint" in capsys.readouterr().err


def _resources(endpoints: ServiceEndpoints | None) -> LocalResources:
    return LocalResources(
        endpoint_url="http://127.0.0.1:5000",
        queue_url="http://127.0.0.1:4566/000000000000/q.fifo",
        queue_arn="arn:aws:sqs:us-east-1:000000000000:q.fifo",
        dlq_url="http://127.0.0.1:4566/000000000000/dlq.fifo",
        dlq_arn="arn:aws:sqs:us-east-1:000000000000:dlq.fifo",
        bucket="b",
        bus_name="bus",
        ledger_table="ledger",
        secret_id="token",
        max_receive_count=5,
        visibility_timeout_s=60,
        endpoints=endpoints,
    )


def _guide(resources: LocalResources) -> list[str]:
    return guide_lines(
        resources, region="us-east-1", simulator_origin="http://127.0.0.1:7", enforcement_lag_ms=0
    )


def test_the_service_guide_prints_the_endpoint_each_service_really_uses() -> None:
    # Given SQS and Secrets Manager on a second emulator, the rest on the stack's moto
    resources = _resources(
        AwsEndpoints(
            {"sqs": "http://127.0.0.1:4566", "secretsmanager": "http://127.0.0.1:4566"}
        ).resolved("http://127.0.0.1:5000")
    )

    guide = _guide(resources)

    # Then the AWS line sends SQS and Secrets Manager there and the default to moto
    assert guide[1] == (
        "export AWS_ENDPOINT_URL=http://127.0.0.1:5000 "
        "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:4566 "
        "AWS_ENDPOINT_URL_SECRETS_MANAGER=http://127.0.0.1:4566 "
        "AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 "
        "AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing"
    )
    # And the secret is read where it lives, not on moto
    secret_line = (
        "#   aws --endpoint-url http://127.0.0.1:4566 secretsmanager get-secret-value "
        "--secret-id token --query SecretString --output text"
    )
    assert secret_line in guide
    assert not any("--endpoint-url http://127.0.0.1:5000 secretsmanager" in line for line in guide)


def test_the_service_guide_with_every_service_elsewhere_names_no_moto() -> None:
    # Given every service on one emulator (no moto started)
    resources = _resources(from_flags(["http://localhost:4566"]).resolved(None))

    guide = "\n".join(_guide(resources))

    # Then that endpoint is the default and nothing points at the (unused) moto address
    assert "export AWS_ENDPOINT_URL=http://localhost:4566 AWS_REGION=us-east-1" in guide
    assert "127.0.0.1:5000" not in guide
    assert "--endpoint-url http://localhost:4566 secretsmanager" in guide


def test_the_service_guide_on_moto_alone_points_everything_at_moto() -> None:
    # Given no endpoint given (resources created on moto only)
    guide = _guide(_resources(None))

    # Then one AWS_ENDPOINT_URL, moto's, and no service variable
    assert guide[1].startswith("export AWS_ENDPOINT_URL=http://127.0.0.1:5000 AWS_REGION=")
    assert "AWS_ENDPOINT_URL_" not in "\n".join(guide)
