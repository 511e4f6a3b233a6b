"""Shared fixtures: a local AWS (moto) over real HTTP, per-test resources, the Semrush simulator.

- ``moto_server`` (session): one single-threaded moto server for the whole run.
- ``aws_env`` (function): boto3's environment pointed at it (endpoint, dummy credentials,
  region), so production code built with plain ``boto3.client(...)`` talks to moto.
- ``local_resources`` (function): the template's queue, DLQ, bucket and bus, with names unique
  to the test so no test sees another's messages.
- ``outcome_capture`` (function): captures what is published on the test's bus.
- ``simulator`` (session) / ``sim`` (function, reset before the test): the Semrush simulator.

And ``pytest_collection_modifyitems``: the order the pytest-xdist workers get the tests in.

Do not combine these with moto's in-process ``mock_aws`` in one test: they share moto's
in-process backends, and ``mock_aws`` resets them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from serenity_tools.standins.moto_server import MotoServer, start_moto_server
from serenity_tools.standins.resources import (
    LocalResourceNames,
    LocalResources,
    create_local_resources,
    local_client,
)

if TYPE_CHECKING:
    from serenity_tools.standins.simulator import SimulatorServer


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first: the harness scenarios, then the other e2e tests, then the rest.

    A stable sort: each class keeps pytest-randomly's shuffled order (it shuffles before any
    plain hook runs). Under ``--dist worksteal`` the first worker is handed the first half of
    this list and the second worker the other half, and an idle worker steals from the END of a
    busy one's queue. So the first worker runs the harness scenarios one after another (each
    starts moto and four or more consumer processes: two at once on two cores starve the
    crash and faults scenarios' batches), then the other e2e tests, while the second worker
    runs short tests and then steals the first's short tail: the run ends on short tests on
    both, and no minute-long scenario starts last.
    """
    items.sort(key=_start_rank)


def _start_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("harness") is not None:
        return 0
    if item.path.parent.name == "e2e":
        return 1
    return 2


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One moto server (single-threaded, ephemeral port) for the session."""
    with start_moto_server() as server:
        yield server


@pytest.fixture
def aws_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """Point boto3's standard configuration at the moto server for this test."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_EVENTBRIDGE",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    ):
        monkeypatch.delenv(name, raising=False)
    return moto_server


@pytest.fixture
def local_resources(aws_env: MotoServer) -> LocalResources:
    """The template's resources under names unique to this test (token secret included)."""
    names = LocalResourceNames().with_suffix()
    return create_local_resources(aws_env.endpoint_url, names, token="tok-local-test")


class OutcomeCapture:
    """Everything published on a bus, captured through a rule into a standard SQS queue.

    moto's EventBridge keeps no record of put events, but it does deliver them to SQS targets
    synchronously inside PutEvents, so after a publish returns the events are in the queue.
    """

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._captured: list[dict[str, Any]] = []

    def events(self) -> list[dict[str, Any]]:
        """All events captured so far (EventBridge envelopes), draining the queue first."""
        while True:
            # Short polling: a long poll would hold the single-threaded moto server.
            messages = self._sqs.receive_message(
                QueueUrl=self._queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            ).get("Messages", [])
            if not messages:
                return list(self._captured)
            for message in messages:
                self._captured.append(json.loads(message["Body"]))
                self._sqs.delete_message(
                    QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"]
                )

    def outcomes(self) -> list[dict[str, Any]]:
        """The ``detail`` of every captured allocation outcome event, in capture order."""
        return [
            event["detail"]
            for event in self.events()
            if event.get("detail-type") == "serenity.allocation.outcome"
        ]

    def clear(self) -> None:
        """Forget what was captured so far (after draining the queue)."""
        self.events()
        self._captured.clear()


@pytest.fixture
def outcome_capture(local_resources: LocalResources) -> OutcomeCapture:
    """Capture every ``serenity.allocator`` event published on the test's bus."""
    sqs = local_client("sqs", local_resources.endpoint_url)
    events = local_client("events", local_resources.endpoint_url)
    capture_name = f"capture-{local_resources.bus_name}"[:80]
    queue_url = sqs.create_queue(QueueName=capture_name)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events.put_rule(
        Name="capture-all",
        EventBusName=local_resources.bus_name,
        EventPattern=json.dumps({"source": ["serenity.allocator"]}),
        State="ENABLED",
    )
    events.put_targets(
        Rule="capture-all",
        EventBusName=local_resources.bus_name,
        Targets=[{"Id": "capture-queue", "Arn": queue_arn}],
    )
    return OutcomeCapture(sqs, queue_url)


@pytest.fixture(scope="session")
def simulator() -> Iterator[SimulatorServer]:
    """One Semrush simulator for the session (imported lazily: written separately)."""
    from serenity_tools.standins.simulator import start_simulator

    with start_simulator() as server:
        yield server


@pytest.fixture
def sim(simulator: SimulatorServer) -> SimulatorServer:
    """The session's simulator, reset to an empty state for this test."""
    simulator.reset()
    return simulator
