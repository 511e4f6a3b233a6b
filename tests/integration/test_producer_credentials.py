"""The producer hands a request's user authority over: moto (SQS, DynamoDB, KMS) + the simulator.

Everything over real HTTP: the promise token is minted at the simulator's IMS, written to the
credentials table (KMS-encrypted) BEFORE the message is sent, taken back when the send fails,
and never in the message, a log, an error or a repr.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from botocore.exceptions import ReadTimeoutError

from serenity_allocator.adapters.http_edge import redact_secret
from serenity_allocator.adapters.ims_client import ImsClient, ImsClientPair
from serenity_allocator.adapters.request_authority import CredentialHandover, UserCredential
from serenity_allocator.domain.errors import NeedsReauthError
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest, parse_request
from serenity_allocator.producer import AllocationProducer, EnqueueError
from serenity_allocator.write_guard import WriteGuard
from serenity_tools.standins.resources import LocalResources, local_client
from serenity_tools.standins.simulator import SimulatorServer
from tests.integration.credentials_stack import CredentialsStack, create_credentials_stack
from tests.integration.moto_helpers import drain_queue

SCHEMA = Path(__file__).parents[2] / "docs" / "schemas"


class SendSpy:
    """The real SQS client, noting whether the request's record existed when each send began."""

    def __init__(self, sqs: Any, stack: CredentialsStack) -> None:
        self._sqs = sqs
        self._stack = stack
        self.record_present_at_send: list[bool] = []

    def send_message(self, **kwargs: Any) -> Any:
        request_id = kwargs["MessageDeduplicationId"]
        item = self._stack.raw_item(request_id)
        self.record_present_at_send.append(item is not None and "promise_token" in item)
        return self._sqs.send_message(**kwargs)


def _ims(sim: SimulatorServer) -> ImsClient:
    clients = sim.ims_clients()
    return ImsClient(
        sim.origin,
        emitter=ImsClientPair(**clients["emitter"]),
        consumer=ImsClientPair(**clients["consumer"]),
        http=httpx.Client(trust_env=False),
    )


@pytest.fixture
def stack(aws_env: Any) -> CredentialsStack:
    return create_credentials_stack(aws_env)


@pytest.fixture
def spy(local_resources: LocalResources, stack: CredentialsStack) -> SendSpy:
    return SendSpy(local_client("sqs", local_resources.endpoint_url), stack)


def _producer(
    local_resources: LocalResources,
    stack: CredentialsStack,
    sim: SimulatorServer,
    sqs: Any = None,
    queue_url: str | None = None,
) -> AllocationProducer:
    handover = CredentialHandover(stack.store(), _ims(sim))
    return AllocationProducer(queue_url or local_resources.queue_url, sqs, credentials=handover)


def test_producer_mints_from_an_access_token_and_writes_the_record_before_sending(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer, spy: SendSpy
) -> None:
    # Given a user of the child and a producer that mints with the emitter pair
    sim.seed([{"id": "m1"}, {"id": "c1", "parent_id": "m1"}])
    access = sim.ims_user("u1", ["m1", "c1"])
    producer = _producer(local_resources, stack, sim, sqs=spy)
    # When it enqueues an ensure with the user's access token
    request_id = producer.enqueue_ensure(
        "c1", "m1", {"prompts": 5}, credential=UserCredential.access(access)
    )
    # Then the record was there before the message was sent
    assert spy.record_present_at_send == [True]
    # And the message is the plain version-1 message: valid against the unchanged schema
    [message] = drain_queue(local_resources.queue_url)
    body = json.loads(message["Body"])
    schema = json.loads((SCHEMA / "allocation-request-v1.schema.json").read_text())
    jsonschema.validate(body, schema)
    assert isinstance(parse_request(message["Body"]), EnsureRequest)
    # And the stored token is a live promise of u1 (the consumer can exchange it)
    credential = stack.store().read(request_id, "c1")
    assert credential is not None
    assert redact_secret(message["Body"], credential.promise_token) == message["Body"]
    assert redact_secret(message["Body"], access) == message["Body"]
    fresh = _ims(sim).exchange(credential.promise_token)
    with httpx.Client(trust_env=False) as http:
        read = http.get(
            f"{sim.api_url}/v1/workspaces/c1/resources",
            headers={"Authorization": f"Bearer {fresh.access_token}"},
        )
    assert read.status_code == 200
    assert [c["op"] for c in sim.ims_calls()] == ["ims_mint", "ims_exchange"]


def test_producer_carries_a_promise_token_on_a_release(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer, spy: SendSpy
) -> None:
    producer = _producer(local_resources, stack, sim, sqs=spy)
    request_id = producer.enqueue_release(
        "c1", credential=UserCredential.promise("pt-the-service-minted")
    )
    assert spy.record_present_at_send == [True]
    [message] = drain_queue(local_resources.queue_url)
    assert isinstance(parse_request(message["Body"]), ReleaseRequest)
    credential = stack.store().read(request_id, "c1")
    assert credential is not None and credential.promise_token == "pt-the-service-minted"
    assert sim.ims_calls() == []  # nothing minted: the service brought its own


def test_producer_failed_send_removes_the_record(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    missing_queue = local_resources.queue_url.rsplit("/", 1)[0] + "/no-such-queue.fifo"
    producer = _producer(local_resources, stack, sim, queue_url=missing_queue)
    with pytest.raises(EnqueueError) as caught:
        producer.enqueue_ensure(
            "c1", "m1", request_id="r-1", credential=UserCredential.promise("pt-1")
        )
    assert caught.value.failed_request_ids == ("r-1",)
    assert stack.raw_item("r-1") is None


def test_producer_failed_send_keeps_a_record_it_did_not_write(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    # Given a request whose live record exists (the first, successful enqueue)
    _producer(local_resources, stack, sim).enqueue_ensure(
        "c1", "m1", request_id="r-1", credential=UserCredential.promise("pt-first")
    )
    # When a retried enqueue of the same request fails to send
    missing_queue = local_resources.queue_url.rsplit("/", 1)[0] + "/no-such-queue.fifo"
    with pytest.raises(EnqueueError):
        _producer(local_resources, stack, sim, queue_url=missing_queue).enqueue_ensure(
            "c1", "m1", request_id="r-1", credential=UserCredential.promise("pt-second")
        )
    # Then the first record, not this call's, is still there, unchanged
    credential = stack.store().read("r-1", "c1")
    assert credential is not None and credential.promise_token == "pt-first"


class LostAnswer:
    """The real SQS client; the first send lands on the queue, then its answer is lost.

    ``meanwhile`` runs before that send (a second enqueue of the same request id, concurrent).
    """

    def __init__(self, sqs: Any, meanwhile: Any = None) -> None:
        self._sqs = sqs
        self._meanwhile = meanwhile
        self.lost = 0

    def send_message(self, **kwargs: Any) -> Any:
        if self._meanwhile is not None:
            meanwhile, self._meanwhile = self._meanwhile, None
            meanwhile()
        self._sqs.send_message(**kwargs)
        self.lost += 1
        raise ReadTimeoutError(endpoint_url="http://sqs.invalid")


def test_producer_lost_send_answer_keeps_the_record_the_delivered_message_needs(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    lost = LostAnswer(local_client("sqs", local_resources.endpoint_url))
    with pytest.raises(EnqueueError) as caught:
        _producer(local_resources, stack, sim, sqs=lost).enqueue_ensure(
            "c1", "m1", request_id="r-lost", credential=UserCredential.promise("pt-lost")
        )
    assert (caught.value.reason, lost.lost) == ("ReadTimeoutError", 1)
    # The message was delivered: the worker finds its record with the token.
    delivered = drain_queue(local_resources.queue_url)
    assert [json.loads(m["Body"])["request_id"] for m in delivered] == ["r-lost"]
    credential = stack.store().read("r-lost", "c1")
    assert credential is not None and credential.promise_token == "pt-lost"


def test_producer_lost_answer_of_a_request_sent_twice_keeps_the_shared_record(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    def second_enqueue() -> None:  # the same request id, sent again while the first is in flight
        _producer(local_resources, stack, sim).enqueue_ensure(
            "c1", "m1", request_id="r-twice", credential=UserCredential.promise("pt-second")
        )

    lost = LostAnswer(local_client("sqs", local_resources.endpoint_url), meanwhile=second_enqueue)
    with pytest.raises(EnqueueError):
        _producer(local_resources, stack, sim, sqs=lost).enqueue_ensure(
            "c1", "m1", request_id="r-twice", credential=UserCredential.promise("pt-first")
        )
    delivered = drain_queue(local_resources.queue_url)
    assert [json.loads(m["Body"])["request_id"] for m in delivered] == ["r-twice"]
    credential = stack.store().read("r-twice", "c1")
    assert credential is not None and credential.promise_token == "pt-first"


def test_producer_mint_refused_sends_and_writes_nothing(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    producer = _producer(local_resources, stack, sim)
    with pytest.raises(NeedsReauthError):
        producer.enqueue_ensure(
            "c1", "m1", request_id="r-1", credential=UserCredential.access("sim-ims-at-dead")
        )
    assert stack.raw_item("r-1") is None
    assert drain_queue(local_resources.queue_url) == []


def test_producer_store_failure_is_an_enqueue_error_and_sends_nothing(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    broken = CredentialsStack("no-such-table", stack.key_id, stack.dynamodb, stack.kms)
    producer = AllocationProducer(
        local_resources.queue_url, credentials=CredentialHandover(broken.store(), _ims(sim))
    )
    with pytest.raises(EnqueueError) as caught:
        producer.enqueue_ensure(
            "c1", "m1", request_id="r-1", credential=UserCredential.promise("pt-1")
        )
    assert caught.value.reason == "credential:ResourceNotFoundException"
    assert drain_queue(local_resources.queue_url) == []


def test_producer_without_a_credential_behaves_as_before(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    request_id = _producer(local_resources, stack, sim).enqueue_ensure("c1", "m1")
    assert len(drain_queue(local_resources.queue_url)) == 1
    assert stack.raw_item(request_id) is None
    plain = AllocationProducer(local_resources.queue_url)
    with pytest.raises(ValueError, match="this producer has no credential store"):
        plain.enqueue_ensure("c1", "m1", credential=UserCredential.promise("pt-1"))
    assert drain_queue(local_resources.queue_url) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one"),
        ({"access_token": "a", "promise_token": "p"}, "exactly one"),
        ({"promise_token": "  "}, "blank"),
    ],
)
def test_user_credential_takes_exactly_one_token(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        UserCredential(**kwargs)


def test_producer_credentials_never_appear_in_logs_errors_or_reprs(
    local_resources: LocalResources,
    stack: CredentialsStack,
    sim: SimulatorServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a user's access token and the promise token minted from it (our loggers at DEBUG;
    # botocore's DEBUG logs every request body, KMS plaintext included: never on in production)
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="serenity_allocator")
    access = sim.ims_user("u1", ["c1"])
    missing_queue = local_resources.queue_url.rsplit("/", 1)[0] + "/no-such-queue.fifo"
    producer = _producer(local_resources, stack, sim, queue_url=missing_queue)
    credential = UserCredential.access(access)
    # When the enqueue fails after the mint and the write
    with pytest.raises(EnqueueError) as caught:
        producer.enqueue_ensure("c1", "m1", request_id="r-1", credential=credential)
    good = _producer(local_resources, stack, sim)
    good.enqueue_ensure("c1", "m1", request_id="r-2", credential=credential)
    stored = stack.store().read("r-2", "c1")
    assert stored is not None
    # Then no form of either token is in the error, the logs or any repr
    text = "\n".join(
        [str(caught.value), repr(caught.value), repr(credential), repr(producer), caplog.text]
    )
    for secret in (access, stored.promise_token):
        assert redact_secret(text, secret) == text
    assert repr(credential) == "UserCredential()"


def test_write_guard_acting_as_a_user_hands_over_each_of_its_ensures(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer, spy: SendSpy
) -> None:
    # Given a user of the child and a guard built on the producer acting as that user
    sim.seed([{"id": "m1"}, {"id": "c1", "parent_id": "m1"}])
    access = sim.ims_user("u1", ["m1", "c1"])
    producer = _producer(local_resources, stack, sim, sqs=spy)
    guard = WriteGuard(producer.acting_as(UserCredential.access(access)), "c1", "m1")

    # When it fronts two batches (two requests of their own)
    first, second = guard.front({"prompts": 5}), guard.front({"prompts": 7})

    # Then each ensure's record was written before its message, each with a promise minted
    # for it alone (two mints), and each promise is live for its own request
    assert spy.record_present_at_send == [True, True]
    assert [c["op"] for c in sim.ims_calls()] == ["ims_mint", "ims_mint"]
    records = [stack.store().read(rid, "c1") for rid in (first, second)]
    assert all(record is not None for record in records)
    tokens = [record.promise_token for record in records if record is not None]
    assert len(set(tokens)) == 2
    sent = [json.loads(m["Body"])["request_id"] for m in drain_queue(local_resources.queue_url)]
    assert sent == [first, second]
    assert access not in repr(producer.acting_as(UserCredential.access(access)))


def test_producer_acting_as_refuses_a_promise_token_and_a_producer_without_a_store(
    local_resources: LocalResources, stack: CredentialsStack, sim: SimulatorServer
) -> None:
    # A promise serves one request: the guard's second ensure would carry a dead copy
    producer = _producer(local_resources, stack, sim)
    with pytest.raises(ValueError, match="give the user's access token"):
        producer.acting_as(UserCredential.promise("promise-token"))
    with pytest.raises(ValueError, match="no credential store"):
        AllocationProducer(local_resources.queue_url).acting_as(UserCredential.access("tok"))
