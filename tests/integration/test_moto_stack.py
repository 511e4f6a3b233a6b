"""The local stack itself: the moto server, the template's resources, endpoint variables."""

from __future__ import annotations

import json

import boto3
import pytest

from serenity_allocator.producer import AllocationProducer
from serenity_tools.standins.lambda_context import LOCAL_ACCOUNT_ID
from serenity_tools.standins.moto_server import MotoServer, start_moto_server_process
from serenity_tools.standins.resources import LOCAL_REGION, LocalResources, local_client
from tests.integration.moto_helpers import drain_queue

# ---------------------------------------------------------------- local stack


def test_moto_server_serves_one_request_at_a_time(moto_server: MotoServer) -> None:
    # Given the session's moto server / Then it is a plain (not threading) werkzeug server
    from werkzeug.serving import BaseWSGIServer, ThreadedWSGIServer

    assert moto_server.threaded is False
    assert isinstance(moto_server.wsgi_server, BaseWSGIServer)
    assert not isinstance(moto_server.wsgi_server, ThreadedWSGIServer)
    assert moto_server.wsgi_server.multithread is False
    assert moto_server.wsgi_server.multiprocess is False


def test_moto_server_process_serves_and_stops() -> None:
    # Given a moto server in its own OS process
    with start_moto_server_process() as server:
        assert server.pid is not None
        # When a client creates and lists a queue through it
        sqs = local_client("sqs", server.endpoint_url)
        sqs.create_queue(QueueName="probe")
        # Then the process answers
        assert any(url.endswith("/probe") for url in sqs.list_queues()["QueueUrls"])
    # And once stopped it no longer accepts connections
    with pytest.raises(Exception):  # noqa: B017 - any connection error will do
        local_client("sqs", server.endpoint_url).list_queues()


def test_local_resources_match_the_template(local_resources: LocalResources) -> None:
    # Given the resources the fixture created
    sqs = boto3.client("sqs")

    # When the queue's attributes are read
    attributes = sqs.get_queue_attributes(
        QueueUrl=local_resources.queue_url, AttributeNames=["All"]
    )["Attributes"]
    dlq_attributes = sqs.get_queue_attributes(
        QueueUrl=local_resources.dlq_url, AttributeNames=["All"]
    )["Attributes"]

    # Then both queues are FIFO with content-based dedup off, and the redrive targets the DLQ
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == "false"
    assert dlq_attributes["FifoQueue"] == "true"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": local_resources.dlq_arn,
        "maxReceiveCount": 5,
    }
    assert attributes["VisibilityTimeout"] == "30"
    # And the bucket, bus and secret exist
    boto3.client("s3").head_bucket(Bucket=local_resources.bucket)
    boto3.client("events").describe_event_bus(Name=local_resources.bus_name)
    assert local_resources.secret_id is not None
    secret = boto3.client("secretsmanager").get_secret_value(SecretId=local_resources.secret_id)
    assert secret["SecretString"] == "tok-local-test"
    assert local_resources.environment()["QUEUE_URL"] == local_resources.queue_url


def test_moto_server_queues_concurrent_clients_instead_of_dropping_them(
    local_resources: LocalResources,
) -> None:
    # Given eight producers, each with its own client, sending to one FIFO queue at once
    from concurrent.futures import ThreadPoolExecutor

    # Clients are made up front: boto3's default session is not safe to build clients in threads.
    clients = [boto3.client("sqs") for _ in range(8)]

    def produce(worker: int) -> list[str]:
        producer = AllocationProducer(local_resources.queue_url, sqs=clients[worker])
        return [
            producer.enqueue_ensure(f"child-{worker}", "master-1", request_id=f"w{worker}-{i}")
            for i in range(5)
        ]

    # When they all send
    with ThreadPoolExecutor(max_workers=8) as pool:
        sent = [rid for ids in pool.map(produce, range(8)) for rid in ids]

    # Then the single-threaded server served every request, and each group kept its order
    received = drain_queue(local_resources.queue_url)
    assert sorted(m["Attributes"]["MessageDeduplicationId"] for m in received) == sorted(sent)
    for worker in range(8):
        order = [
            m["Attributes"]["MessageDeduplicationId"]
            for m in received
            if m["Attributes"]["MessageGroupId"] == f"child-{worker}"
        ]
        assert order == [f"w{worker}-{i}" for i in range(5)]


def test_producer_honours_the_service_specific_endpoint_variable(
    local_resources: LocalResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the global endpoint pointing nowhere and only AWS_ENDPOINT_URL_SQS at moto
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", local_resources.endpoint_url)

    # When a producer is built without a client and sends
    request_id = AllocationProducer(local_resources.queue_url).enqueue_ensure("child-1", "m-1")

    # Then the message reached moto (boto3 picked the SQS-specific endpoint)
    sqs = local_client("sqs", local_resources.endpoint_url)
    [message] = sqs.receive_message(
        QueueUrl=local_resources.queue_url, MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert message["Attributes"]["MessageDeduplicationId"] == request_id


def test_create_local_resources_is_idempotent_and_updates_the_secret(
    local_resources: LocalResources,
) -> None:
    # Given resources that already exist under some names
    from serenity_tools.standins.resources import LocalResourceNames, create_local_resources

    names = LocalResourceNames().with_suffix()
    first = create_local_resources(local_resources.endpoint_url, names, token="tok-one")

    # When they are created again with a new token
    second = create_local_resources(local_resources.endpoint_url, names, token="tok-two")

    # Then the same resources come back and the secret holds the new token
    assert (second.queue_url, second.dlq_arn, second.bucket) == (
        first.queue_url,
        first.dlq_arn,
        first.bucket,
    )
    assert second.secret_id is not None
    secrets = local_client("secretsmanager", local_resources.endpoint_url)
    assert secrets.get_secret_value(SecretId=second.secret_id)["SecretString"] == "tok-two"


def test_moto_kms_defers_a_key_pair_to_its_first_use(aws_env: MotoServer) -> None:
    # Given the session's moto server (in this process, so its backend can be read)
    from moto.kms.models import kms_backends

    from serenity_tools.standins.moto_overheads import DeferredKeyPair

    kms = local_client("kms", aws_env.endpoint_url)
    backend = kms_backends[LOCAL_ACCOUNT_ID][LOCAL_REGION]

    # When a symmetric key encrypts and decrypts
    symmetric = kms.create_key(KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]["KeyId"]
    blob = kms.encrypt(KeyId=symmetric, Plaintext=b"promise")["CiphertextBlob"]
    assert kms.decrypt(CiphertextBlob=blob)["Plaintext"] == b"promise"

    # Then no key pair was ever generated for it
    pair = backend.keys[symmetric].private_key
    assert isinstance(pair, DeferredKeyPair)
    assert pair.generated is False

    # And an asymmetric key still signs, verifies and gives its public key, on demand
    signing = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="RSA_2048")["KeyMetadata"]["KeyId"]
    assert backend.keys[signing].private_key.generated is False
    signature = kms.sign(KeyId=signing, Message=b"m", SigningAlgorithm="RSASSA_PSS_SHA_256")[
        "Signature"
    ]
    verified = kms.verify(
        KeyId=signing, Message=b"m", Signature=signature, SigningAlgorithm="RSASSA_PSS_SHA_256"
    )
    assert verified["SignatureValid"] is True
    assert kms.get_public_key(KeyId=signing)["PublicKey"].startswith(b"0\x82")  # DER
    assert backend.keys[signing].private_key.generated is True


def test_local_client_is_shared_per_service_endpoint_and_credentials(aws_env: MotoServer) -> None:
    # Given the same service and endpoint asked for twice, and another endpoint
    first = local_client("sqs", aws_env.endpoint_url)
    again = local_client("sqs", aws_env.endpoint_url)
    elsewhere = local_client("sqs", "http://127.0.0.1:9")

    # Then one client serves both asks, and another endpoint or service gets its own
    assert again is first
    assert elsewhere is not first
    assert elsewhere.meta.endpoint_url == "http://127.0.0.1:9"
    assert local_client("s3", aws_env.endpoint_url) is not first


def test_moto_lists_its_service_folders_once_per_process(aws_env: MotoServer) -> None:
    # Given the session's moto server, which dispatches on that list for every request
    from moto import backends

    listed = backends.list_of_moto_modules()

    # Then the list is the same object every time, and names the services the stack uses
    assert backends.list_of_moto_modules() is listed
    assert {"sqs", "dynamodb", "kms", "events", "s3", "secretsmanager"} <= set(listed)
    # And a request still finds its backend by it
    assert (
        local_client("sqs", aws_env.endpoint_url).list_queues()["ResponseMetadata"][
            "HTTPStatusCode"
        ]
        == 200
    )
