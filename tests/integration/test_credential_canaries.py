"""Leak canaries for IMS tokens: promise and access tokens, in every encoding redaction knows.

Real tokens minted by the simulator's IMS, a JWT-shaped promise token a service brings itself,
and the client secrets of both pairs run through the producer, the IMS client and the
credentials store, over real HTTP (simulator, moto with DynamoDB, KMS and SQS), through their
success paths and their failures. Each channel they can speak through (errors with their
traceback, reprs, every log record, the message on the queue, the record at rest) is then
searched with ``redact_secret``: a text it would change holds a token in one of the forms it
covers (as sent, URL-encoded, JSON-escaped, base64 at any offset, base64url, hex, a JWT part).
"""

from __future__ import annotations

import base64
import json
import logging
import traceback
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest

from serenity_allocator.adapters.credential_handover import CredentialHandover, UserCredential
from serenity_allocator.adapters.dynamodb_credential_store import CredentialStoreError
from serenity_allocator.adapters.ims_client import ImsClient, ImsClientPair, ImsRequestError
from serenity_allocator.adapters.kms_token_cipher import TokenCipherError
from serenity_allocator.adapters.secret_redaction import redact_secret
from serenity_allocator.domain.errors import (
    ImsUnavailableError,
    MalformedResponseError,
    NeedsReauthError,
)
from serenity_allocator.producer import AllocationProducer, EnqueueError
from serenity_tools.standins.resources import LocalResources, local_client
from serenity_tools.standins.simulator import SimulatorServer
from tests.integration.credentials_stack import CredentialsStack, create_credentials_stack


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# A promise token as a service might hand one over: JWT-shaped, like IMS's own.
JWT_PROMISE = ".".join(
    [
        _b64url(b'{"alg":"RS256","kid":"ims_na1-key-pt-1","itt":"pt"}'),
        _b64url(b'{"type":"promise_token","user_id":"u-canary@AdobeID","expires_in":"3600"}'),
        _b64url(bytes((11 * i + 5) % 256 for i in range(256))),
    ]
)


def leaks(text: str, secrets: Mapping[str, str]) -> list[str]:
    """The names of the secrets ``text`` holds in any form ``redact_secret`` removes."""
    return sorted(name for name, secret in secrets.items() if redact_secret(text, secret) != text)


def error_text(error: BaseException) -> str:
    """Everything an error shows: message, repr, traceback with its chained causes."""
    return "\n".join([str(error), repr(error), *traceback.format_exception(error)])


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record: message, attributes, exception text."""
    return caplog.text + "\n".join(
        f"{record.getMessage()} {vars(record)!r} {record.exc_text or ''}"
        for record in caplog.records
    )


def echo_body(secrets: Iterable[str]) -> str:
    """An upstream answer echoing each secret raw, URL-, form-, JSON- and base64-encoded."""
    forms = []
    for secret in secrets:
        forms += [
            secret,
            quote(secret, safe=""),
            quote_plus(secret),
            json.dumps(secret)[1:-1].replace("/", "\\/"),
            base64.b64encode(f"svc:{secret}".encode()).decode("ascii"),
        ]
    return json.dumps({"error": "invalid_request", "error_description": " ".join(forms)})


def _pairs(sim: SimulatorServer) -> tuple[ImsClientPair, ImsClientPair]:
    clients = sim.ims_clients()
    return ImsClientPair(**clients["emitter"]), ImsClientPair(**clients["consumer"])


def _ims(sim: SimulatorServer) -> ImsClient:
    emitter, consumer = _pairs(sim)
    return ImsClient(
        sim.origin,
        emitter=emitter,
        consumer=consumer,
        http=httpx.Client(trust_env=False),
        sleep=lambda _s: None,  # the retries' pauses, never slept for real
    )


@pytest.fixture
def stack(aws_env: Any) -> CredentialsStack:
    return create_credentials_stack(aws_env)


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    # Our loggers and httpx's at DEBUG; botocore stays at INFO (its DEBUG logs every request
    # body, KMS plaintext included: never on where tokens are handled, docs/credentials.md).
    caplog.set_level(logging.INFO)
    for name in ("serenity_allocator", "serenity-allocator", "httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def test_canary_ims_client_never_shows_a_token_or_a_client_secret(
    sim: SimulatorServer, all_logs: pytest.LogCaptureFixture
) -> None:
    # Given a user, the tokens of one whole chain, and both pairs' secrets
    emitter, consumer = _pairs(sim)
    access = sim.ims_user("u-canary", ["c1"])
    ims = _ims(sim)
    minted = ims.mint(access)
    exchanged = ims.exchange(minted.promise_token)
    secrets = {
        "user access token": access,
        "minted promise token": minted.promise_token,
        "rolled promise token": exchanged.promise_token,
        "exchanged access token": exchanged.access_token,
        "emitter secret": emitter.client_secret,
        "consumer secret": consumer.client_secret,
    }
    shown = [repr(ims), repr(minted), repr(exchanged), repr(emitter), repr(consumer)]
    errors: list[BaseException] = []

    # When every failure the client knows happens, with IMS echoing what it was sent
    with pytest.raises(NeedsReauthError) as spent:  # the exchanged token is spent
        ims.exchange(minted.promise_token)
    errors.append(spent.value)
    echo = echo_body(secrets.values())
    for status, raised in ((400, ImsRequestError), (503, ImsUnavailableError)):
        sim.faults(fail_next=[{"status": status, "count": 3, "op": "ims_exchange", "body": echo}])
        with pytest.raises(raised) as caught:
            ims.exchange(exchanged.promise_token)
        errors.append(caught.value)
    # (an "error" code that is itself a token is dropped, not shown)
    code_echo = {"error": exchanged.promise_token, "error_description": echo}
    sim.faults(fail_next=[{"status": 400, "op": "ims_exchange", "body": code_echo}])
    with pytest.raises(ImsRequestError) as dropped:
        ims.exchange(exchanged.promise_token)
    assert dropped.value.error is None
    errors.append(dropped.value)
    sim.faults(fail_next=[{"status": 200, "op": "ims_mint", "body": json.loads(echo)}])
    with pytest.raises(MalformedResponseError) as malformed:
        ims.mint(access)
    errors.append(malformed.value)
    sim.faults(fail_next=[{"status": 500, "count": 3, "op": "ims_invalidate", "body": echo}])
    assert ims.invalidate(exchanged.promise_token) is False
    assert ims.invalidate(exchanged.promise_token) is True

    # Then every path ran against IMS, and no channel shows any secret in any form
    statuses = [call["status"] for call in sim.ims_calls()]
    assert statuses.count(401) == 1 and 400 in statuses and 503 in statuses
    said = {
        "errors": "\n".join(error_text(error) for error in errors),
        "reprs": "\n".join(shown),
        "logs": log_text(all_logs),
    }
    assert "POST" in said["logs"]  # httpx's request lines were captured
    assert {channel: leaks(text, secrets) for channel, text in said.items()} == {
        channel: [] for channel in said
    }


def test_canary_credential_store_keeps_only_ciphertext_and_never_shows_a_token(
    stack: CredentialsStack, all_logs: pytest.LogCaptureFixture
) -> None:
    # Given a JWT-shaped promise token and the one it is rolled to
    rolled = JWT_PROMISE.replace("-", "_").replace(".", ".x", 1)
    secrets = {"promise token": JWT_PROMISE, "rolled promise token": rolled}
    store = stack.store()
    errors: list[BaseException] = []

    # When a record is written, read, rolled, read for another child and scrubbed
    receipt = store.put("r-1", "c1", JWT_PROMISE)
    stored = store.read("r-1", "c1")
    assert stored is not None and stored.promise_token == JWT_PROMISE
    at_rest = [json.dumps(stack.raw_item("r-1"), default=repr)]
    store.roll("r-1", "c1", rolled)
    at_rest.append(json.dumps(stack.raw_item("r-1"), default=repr))
    with pytest.raises(TokenCipherError) as other_child:
        store.read("r-1", "c2")
    errors.append(other_child.value)
    store.scrub("r-1")
    scrubbed = stack.raw_item("r-1")
    assert scrubbed is not None and "promise_token" not in scrubbed
    with pytest.raises(CredentialStoreError) as gone:
        store.roll("r-1", "c1", rolled)
    errors.append(gone.value)
    broken = CredentialsStack("no-such-table", stack.key_id, stack.dynamodb, stack.kms).store()
    with pytest.raises(CredentialStoreError) as no_table:
        broken.put("r-2", "c1", JWT_PROMISE)
    errors.append(no_table.value)

    # Then the record only ever held ciphertext, and nothing shown holds either token
    said = {
        "records at rest": "\n".join(at_rest),
        "errors": "\n".join(error_text(error) for error in errors),
        "reprs": "\n".join([repr(store), repr(stored), repr(receipt)]),
        "logs": log_text(all_logs),
    }
    assert {channel: leaks(text, secrets) for channel, text in said.items()} == {
        channel: [] for channel in said
    }


def _everything_sent(local_resources: LocalResources) -> str:
    sqs = local_client("sqs", local_resources.endpoint_url)
    answer = sqs.receive_message(
        QueueUrl=local_resources.queue_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=0,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    return json.dumps(answer.get("Messages", []), default=repr)


def test_canary_producer_sends_no_token_and_shows_none(
    local_resources: LocalResources,
    stack: CredentialsStack,
    sim: SimulatorServer,
    all_logs: pytest.LogCaptureFixture,
) -> None:
    # Given a user's access token, a promise token the service brings, and a producer
    sim.seed([{"id": "m1"}, {"id": "c1", "parent_id": "m1"}])
    access = sim.ims_user("u-canary", ["m1", "c1"])
    handover = CredentialHandover(stack.store(), _ims(sim))
    producer = AllocationProducer(local_resources.queue_url, credentials=handover)
    access_credential = UserCredential.access(access)
    promise_credential = UserCredential.promise(JWT_PROMISE)

    # When it enqueues an ensure (minting) and a release (carrying), and then fails: a refused
    # mint, a send to a queue that does not exist
    ensure_id = producer.enqueue_ensure("c1", "m1", {"prompts": 5}, credential=access_credential)
    producer.enqueue_release("c1", credential=promise_credential)
    sent = _everything_sent(local_resources)
    minted = stack.store().read(ensure_id, "c1")
    assert minted is not None
    errors: list[BaseException] = []
    with pytest.raises(NeedsReauthError) as refused:
        producer.enqueue_ensure("c1", "m1", credential=UserCredential.access(access + "-dead"))
    errors.append(refused.value)
    missing = local_resources.queue_url.rsplit("/", 1)[0] + "/no-such-queue.fifo"
    lost = AllocationProducer(missing, credentials=handover)
    for credential in (access_credential, promise_credential):
        with pytest.raises(EnqueueError) as caught:
            lost.enqueue_ensure("c1", "m1", credential=credential)
        errors.append(caught.value)

    # Then the two messages went out with no token, and nothing shown holds one
    secrets = {
        "user access token": access,
        "minted promise token": minted.promise_token,
        "service promise token": JWT_PROMISE,
    }
    assert sent.count('"Body"') == 2
    said = {
        "messages": sent,
        "errors": "\n".join(error_text(error) for error in errors),
        "reprs": "\n".join(
            repr(x) for x in (producer, handover, access_credential, promise_credential, minted)
        ),
        "logs": log_text(all_logs),
    }
    assert {channel: leaks(text, secrets) for channel, text in said.items()} == {
        channel: [] for channel in said
    }
