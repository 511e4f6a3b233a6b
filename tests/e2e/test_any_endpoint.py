"""The local stack on an AWS endpoint it did not start: a second moto server, its own process.

This is the "any endpoint" plumbing (``--aws-endpoint``, ``AWS_ENDPOINT_URL_<SERVICE>``) end to
end: resources are created there, the consumer processes and the outcome capture use it, and
only the services given no endpoint run on the stack's own moto.
"""

from __future__ import annotations

from pathlib import Path

from serenity_allocator.adapters.sqs import AllocationProducer
from serenity_tools.standins.aws_endpoints import from_flags
from serenity_tools.standins.moto_server import start_moto_server_process
from serenity_tools.standins.resources import local_client
from serenity_tools.standins.stack import LocalStack, drain
from serenity_tools.verification.ledger_check import read_ledger_table


def _seed(stack: LocalStack) -> None:
    stack.simulator.seed(
        [
            {
                "id": "m",
                "ai": {"projects": {"used": 0, "total": 50}, "prompts": {"used": 0, "total": 900}},
            },
            {
                "id": "c1",
                "parent_id": "m",
                "ai": {"projects": {"used": 1, "total": 1}, "prompts": {"used": 100, "total": 100}},
            },
        ]
    )


def test_the_stack_creates_and_uses_its_resources_on_a_given_endpoint(tmp_path: Path) -> None:
    # Given a second moto server in its own process, given for every service but DynamoDB
    with start_moto_server_process() as other:
        given = [f"{s}={other.endpoint_url}" for s in ("sqs", "events", "s3", "secretsmanager")]
        with LocalStack(endpoints=from_flags(given), work_dir=tmp_path / "stack") as stack:
            # Then the queues, bus, bucket and secret live there, and the ledger on the stack's moto
            assert stack.runs_moto and stack.moto.pid != other.pid
            resources = stack.resources
            assert resources.endpoint("sqs") == other.endpoint_url
            assert resources.endpoint("dynamodb") == stack.moto.endpoint_url
            other_sqs = local_client("sqs", other.endpoint_url)
            assert resources.queue_url in other_sqs.list_queues()["QueueUrls"]
            own_sqs = local_client("sqs", stack.moto.endpoint_url)
            assert "QueueUrls" not in own_sqs.list_queues()
            # And the names are the run's own (a shared endpoint never mixes two runs)
            assert stack.names.queue_name != "serenity-allocator-local-allocation.fifo"
            env = stack.env()
            assert env["AWS_ENDPOINT_URL"] == stack.moto.endpoint_url
            assert env["AWS_ENDPOINT_URL_SQS"] == other.endpoint_url
            assert env["AWS_ENDPOINT_URL_EVENTBRIDGE"] == other.endpoint_url

            # When two ensures are enqueued there and one consumer process drains them
            _seed(stack)
            producer = AllocationProducer(resources.queue_url, stack.client("sqs"))
            requests = [producer.enqueue_ensure("c1", "m", {"projects": 0, "prompts": 50})]
            requests.append(producer.enqueue_ensure("c1", "m", {"projects": 0, "prompts": 60}))
            summary = drain(stack, consumers=1, timeout_s=300)

            # Then both completed: outcomes arrived through the given bus, records in the ledger
            assert summary.drained and summary.traces.deleted == 2
            outcomes = stack.outcomes.outcomes()
            assert [o.request_id for o in outcomes] == requests
            assert {o.status for o in outcomes} == {"topped-up"}
            assert set(read_ledger_table(resources)) == set(requests)


def test_with_every_service_given_the_stack_starts_no_moto(tmp_path: Path) -> None:
    with start_moto_server_process() as other:
        endpoints = from_flags([other.endpoint_url])
        with LocalStack(endpoints=endpoints, work_dir=tmp_path / "stack") as stack:
            assert not stack.runs_moto
            assert stack.env()["AWS_ENDPOINT_URL"] == other.endpoint_url
            assert "AWS_ENDPOINT_URL_SQS" not in stack.env()
            described = dict(stack.describe())
            assert described["sqs endpoint"] == other.endpoint_url
            assert "moto pid" not in described
