"""The one way adapters build boto3 clients: lazily, with bounded timeouts and retries."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from serenity_allocator.adapters import aws_clients
from serenity_allocator.adapters.aws_clients import (
    AWS_CALL_BUDGET_S,
    CallTimeouts,
    LazyClient,
    aws_error_code,
    call_timeouts,
    dynamodb_client,
    events_client,
    s3_client,
    secretsmanager_client,
    sqs_client,
)
from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.adapters.sqs import AllocationProducer, DeadLetterSender

ALLOCATOR_TIMEOUT_S = 60.0
"""template.yaml's AllocatorFunction Timeout."""


@pytest.fixture(autouse=True)
def _region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.mark.parametrize(
    "build", [sqs_client, events_client, s3_client, secretsmanager_client, dynamodb_client]
)
def test_client_has_bounded_timeouts_and_standard_retries(build: object) -> None:
    # Given one of the builders / When it builds a client (no call is made)
    assert callable(build)
    config = build().meta.config

    # Then its timeouts and retries are the bounded ones, not botocore's 60 s defaults
    assert (config.connect_timeout, config.read_timeout) == (1.0, 4.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 2}


def test_aws_call_budget_covers_every_attempt_and_the_wait_between() -> None:
    # Given the configuration / Then the budget is its worst case, and fits the Allocator
    worst = aws_clients.MAX_ATTEMPTS * (aws_clients.CONNECT_TIMEOUT_S + aws_clients.READ_TIMEOUT_S)
    assert AWS_CALL_BUDGET_S == worst + aws_clients.MAX_RETRY_WAIT_S == 16.0
    assert AWS_CALL_BUDGET_S < ALLOCATOR_TIMEOUT_S / 3


def test_lazy_client_builds_once_on_first_use() -> None:
    # Given a lazy client over a counting builder
    built: list[str] = []

    def build() -> str:
        built.append("client")
        return f"client-{len(built)}"

    lazy = LazyClient(build)

    # When nothing asked for it yet / Then nothing was built
    assert built == []

    # When it is asked for twice / Then it was built once and reused
    assert (lazy.get(), lazy.get()) == ("client-1", "client-1")
    assert built == ["client"]


def test_lazy_client_prefers_the_ready_client() -> None:
    # Given a ready client / When asked for / Then the builder never runs
    def build() -> str:
        raise AssertionError("must not build")

    assert LazyClient(build, "ready").get() == "ready"


def test_adapters_build_their_clients_with_the_bounded_configuration() -> None:
    # Given each boto3 adapter without a ready client
    adapters = [
        AllocationProducer("https://sqs.us-east-1.amazonaws.com/1/q.fifo")._client(),
        DeadLetterSender("https://sqs.us-east-1.amazonaws.com/1/dlq.fifo")._client(),
        OutcomePublisher("bus")._client(),
    ]

    # Then every client they build carries the bounded configuration
    for client in adapters:
        config = client.meta.config
        assert (config.connect_timeout, config.read_timeout) == (1.0, 4.0)
        assert config.retries == {"mode": "standard", "total_max_attempts": 2}


@pytest.mark.parametrize(
    ("budget_s", "expected"),
    [
        (60.0, CallTimeouts(1.0, 4.0, 2)),
        (16.0, CallTimeouts(1.0, 4.0, 2)),
        (15.0, CallTimeouts(1.0, 3.5, 2)),
        (10.0, CallTimeouts(1.0, 1.0, 2)),
        (9.0, CallTimeouts(1.0, 8.0, 1)),
        (2.0, CallTimeouts(0.5, 1.5, 1)),
    ],
)
def test_call_timeouts_are_the_most_patient_that_fit_the_budget(
    budget_s: float, expected: CallTimeouts
) -> None:
    # Given a per-call budget / When the timeouts are sized / Then they fit it exactly or less
    timeouts = call_timeouts(budget_s)
    assert timeouts == expected
    assert timeouts.worst_case_s == min(budget_s, AWS_CALL_BUDGET_S)


def test_adapter_client_is_sized_to_its_call_budget() -> None:
    # Given a publisher for a short function (4 s per call)
    publisher = OutcomePublisher("bus", call_budget_s=4.0)

    # When its client is built / Then one attempt shares the 4 s
    config = publisher._client().meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.0, 3.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 1}


def test_aws_error_code_reads_the_service_code_or_names_the_failure() -> None:
    # Given a service error, a service error without a code, and a transport failure
    throttled = ClientError({"Error": {"Code": "ThrottlingException"}}, "PutEvents")
    uncoded = ClientError({"Error": {}}, "PutEvents")
    timeout = ReadTimeoutError(endpoint_url="https://events.us-east-1.amazonaws.com")

    # When each is mapped / Then the service's code, else the kind of failure
    assert aws_error_code(throttled) == "ThrottlingException"
    assert aws_error_code(uncoded) == "ClientError"
    assert aws_error_code(timeout) == "ReadTimeoutError"
