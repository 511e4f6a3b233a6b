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
import io
import json
import logging
import sys
import traceback
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest

from serenity_allocator.adapters.credential_store import (
    CredentialRecordNotOwnedError,
    CredentialRecordUnreadableError,
    CredentialStoreError,
    KmsTokenCipher,
)
from serenity_allocator.adapters.http_edge import redact_secret
from serenity_allocator.adapters.ims_client import (
    ExchangedTokens,
    ImsClient,
    ImsClientConfig,
    ImsClientPair,
    ImsRequestError,
)
from serenity_allocator.adapters.observability import logger
from serenity_allocator.adapters.request_authority import CredentialHandover, UserCredential
from serenity_allocator.adapters.s3_checkpoint_store import S3CheckpointStore
from serenity_allocator.application.sweep.run_tokens import hand_over_run_token
from serenity_allocator.domain.errors import (
    ImsUnavailableError,
    MalformedResponseError,
    NeedsReauthError,
)
from serenity_allocator.producer import AllocationProducer, EnqueueError
from serenity_tools.standins.moto_server import MotoServer
from serenity_tools.standins.resources import LocalResources, local_client
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import allocator_harness, api_calls, emf_blobs, workspace
from tests.integration.credentials_stack import CredentialsStack, create_credentials_stack
from tests.integration.sweep_ims_stack import ImsSweepStack, cli_env, ims_sweep_stack
from tests.integration.sweep_stack import MASTER as SWEEP_MASTER


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
        config=ImsClientConfig(sleep=lambda _s: None),
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


@pytest.fixture
def root_debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every logger at DEBUG from the root down, as a Lambda run with ``AWS_LAMBDA_LOG_LEVEL``
    DEBUG: what the handlers pin (botocore, urllib3...) must hold whatever the root says."""
    caplog.set_level(logging.DEBUG)
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
    with pytest.raises(CredentialRecordNotOwnedError) as other_child:
        store.read("r-1", "c2")
    errors.append(other_child.value)
    item = stack.raw_item("r-1")
    assert item is not None
    stack.dynamodb.put_item(
        TableName=stack.table_name,
        Item={**item, "promise_token": {"B": base64.b64encode(bytes(item["promise_token"]["B"]))}},
    )
    with pytest.raises(CredentialRecordUnreadableError) as encoded_twice:
        store.read("r-1", "c1")
    errors.append(encoded_twice.value)
    stack.dynamodb.put_item(TableName=stack.table_name, Item=item)
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


# ---------------------------------------------------------------- the worker, in IMS mode

MASTER = "ws-leak-master"
TOPPED = "ws-leak-topped"
RELEASED = "ws-leak-released"
ECHOED = "ws-leak-echo"
BUSY = "ws-leak-busy"
DENIED = "ws-leak-denied"
DEAD = "ws-leak-dead"
BARE = "ws-leak-bare"


class ExchangeSpy:
    """Every exchange's answer; for the echoed child, Semrush then echoes its access token."""

    def __init__(self, sim: SimulatorServer) -> None:
        self.sim = sim
        self.answers: list[ExchangedTokens] = []
        self.echo_chain: set[str] = set()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = ImsClient.exchange
        spy = self

        def exchange(client: ImsClient, promise_token: str) -> ExchangedTokens:
            answer = original(client, promise_token)
            spy.answers.append(answer)
            if promise_token in spy.echo_chain:
                spy.echo_chain.add(answer.promise_token)
                # The next read answers 401 with the fresh access token echoed in every form:
                # the retry after the re-exchange meets the next one (transient until the
                # final receive, which ends accessDenied).
                body = echo_body([answer.access_token, answer.promise_token])
                rule = {"status": 401, "op": "read_resources", "workspace_id": ECHOED}
                spy.sim.faults(fail_next=[{**rule, "body": body}])
            return answer

        monkeypatch.setattr(ImsClient, "exchange", exchange)


def _powertools_logs_to_captured_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the Powertools Logger's handler at the ``sys.stdout`` capsys captures now."""
    handler = logger.registered_handler
    if isinstance(handler, logging.StreamHandler):
        monkeypatch.setattr(handler, "stream", sys.stdout)


def _seed_worker(sim: SimulatorServer) -> None:
    def child(workspace_id: str, used: int, total: int) -> dict[str, Any]:
        return workspace(workspace_id, parent_id=MASTER, projects=(1, 1), prompts=(used, total))

    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            child(TOPPED, 150, 200),
            child(RELEASED, 100, 400),
            child(ECHOED, 100, 500),
            child(BUSY, 150, 200),
            child(DENIED, 150, 200),
            child(DEAD, 150, 200),
            child(BARE, 150, 200),
        ]
    )
    sim.faults(stuck=[BUSY])


def _raw_items(endpoint_url: str, table: str) -> str:
    dynamodb = local_client("dynamodb", endpoint_url)
    return json.dumps(dynamodb.scan(TableName=table, ConsistentRead=True)["Items"], default=repr)


def test_canary_ims_worker_batch_never_shows_a_token(
    local_resources: LocalResources,
    stack: CredentialsStack,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
    root_debug_logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given users (u2 cannot reach its child), a producer minting for them, and a spy on
    # every exchange (the echoed child's Semrush then echoes the fresh access token back)
    _powertools_logs_to_captured_stdout(monkeypatch)
    caplog = root_debug_logs
    caplog.set_level(logging.DEBUG, logger="aws_lambda_powertools.utilities.batch")
    _seed_worker(sim)
    members = [MASTER, TOPPED, RELEASED, ECHOED, BUSY, DEAD]
    u1, u2 = sim.ims_user("u1", members), sim.ims_user("u2", [MASTER])
    spy = ExchangeSpy(sim)
    spy.install(monkeypatch)
    consumer = sim.ims_clients()["consumer"]
    env = {
        "SEMRUSH_TOKEN": None,
        "IMS_HOST": sim.origin,
        "IMS_CONSUMER_CLIENT_ID": consumer["client_id"],
        "IMS_CONSUMER_CLIENT_SECRET": consumer["client_secret"],
        "CREDENTIALS_TABLE": stack.table_name,
        "CREDENTIALS_KEY_ARN": stack.key_id,
        "REQUEST_LEDGER_TABLE": local_resources.ledger_table,
    }
    need = {"projects": 0, "prompts": 230}
    with allocator_harness(local_resources, sim, env) as worker:
        producer = AllocationProducer(
            local_resources.queue_url, credentials=CredentialHandover(stack.store(), _ims(sim))
        )
        as_u1, as_u2 = UserCredential.access(u1), UserCredential.access(u2)
        ids = {
            TOPPED: producer.enqueue_ensure(TOPPED, MASTER, need, credential=as_u1),
            RELEASED: producer.enqueue_release(RELEASED, credential=as_u1),
            ECHOED: producer.enqueue_ensure(ECHOED, MASTER, {"prompts": 10}, credential=as_u1),
            BUSY: producer.enqueue_ensure(BUSY, MASTER, need, credential=as_u1),
            DENIED: producer.enqueue_ensure(DENIED, MASTER, need, credential=as_u2),
        }
        dead = _ims(sim).mint(u1).promise_token
        assert _ims(sim).invalidate(dead)
        ids[DEAD] = producer.enqueue_ensure(
            DEAD, MASTER, need, credential=UserCredential.promise(dead)
        )
        ids[BARE] = producer.enqueue_ensure(BARE, MASTER, need)  # no credential record
        worker.send_raw('{"kind": "ensure", "need": ', group_id=TOPPED, dedup_id="leak-bad")
        minted = {}
        for child in (TOPPED, RELEASED, ECHOED, BUSY, DENIED):
            stored = stack.store().read(ids[child], child)
            assert stored is not None
            minted[child] = stored.promise_token
        spy.echo_chain.add(minted[ECHOED])

        # When the batch runs, the busy request through to its final receive
        invocations = []
        for _receive in range(local_resources.max_receive_count):
            invocation = worker.invoke()
            invocations.append(invocation)
            worker.redeliver_failed(invocation)
        captured = capsys.readouterr()
        said = {
            "stdout": captured.out,
            "stderr": captured.err,
            "log records": log_text(caplog),
            "metric lines": json.dumps(emf_blobs(captured.out)),
            "outcome events": json.dumps(outcome_capture.events()),
            "ledger outcomes": _raw_items(
                local_resources.endpoint_url, local_resources.ledger_table
            ),
            "credential records": _raw_items(local_resources.endpoint_url, stack.table_name),
            "dlq messages": json.dumps(worker.drain_dlq(), default=str),
            "exceptions": "\n".join(e for i in invocations for e in i.exceptions),
            "runtime repr": repr(worker.runtime),
        }

    # Then every path ran: served, released, denied, echoed, dead, bare, invalid, busy
    codes = {
        (o["workspace_id"], o["status"], o.get("error_code")) for o in outcome_capture.outcomes()
    }
    assert {
        (TOPPED, "topped-up", None),
        (RELEASED, "released", None),
        (DENIED, "rejected", "accessDenied"),
        (ECHOED, "rejected", "accessDenied"),
        (DEAD, "failed", "needsReauth"),
        (BARE, "failed", "noCredential"),
        (BUSY, "rejected", "workspaceBusy"),
    } <= codes
    assert "serenity-invalid-reason" in said["dlq messages"]
    assert '"CredentialOutcome"' in said["metric lines"]
    # (the echoed child's reads were answered 401 with its fresh tokens in the body: two per
    # receive, a 401 with a fresh token being transient until the final (fifth) receive)
    echoed = [c["status"] for c in api_calls(sim) if c.get("workspace_id") == ECHOED]
    assert echoed == [401] * 10
    # And no channel holds any token of any chain, or the consumer secret, in any form
    secrets = {
        "u1 access token": u1,
        "u2 access token": u2,
        "dead promise token": dead,
        "consumer secret": consumer["client_secret"],
        **{f"{child} minted promise": token for child, token in minted.items()},
    }
    for n, answer in enumerate(spy.answers):
        secrets[f"exchange {n} access token"] = answer.access_token
        secrets[f"exchange {n} rolled promise"] = answer.promise_token
    assert len(spy.answers) >= 6
    assert {channel: leaks(text, secrets) for channel, text in said.items()} == {
        channel: [] for channel in said
    }


# ---------------------------------------------------------------- the sweep, in IMS mode

SWEEP_RUN = "rs-leak-1"


@pytest.fixture
def sweep(
    local_resources: LocalResources, sim: SimulatorServer, aws_env: MotoServer
) -> Iterator[ImsSweepStack]:
    with ims_sweep_stack(local_resources, sim, aws_env) as built:
        yield built


def _bucket_objects(sweep: ImsSweepStack) -> str:
    """Every object of the sweep bucket (checkpoints, run claims, parent claims), key and body."""
    s3 = sweep.stack.s3
    listed = s3.list_objects_v2(Bucket=sweep.stack.resources.bucket).get("Contents", [])
    bodies = [
        item["Key"]
        + s3.get_object(Bucket=sweep.stack.resources.bucket, Key=item["Key"])["Body"]
        .read()
        .decode()
        for item in listed
    ]
    assert any("/runs/" in body for body in bodies) and len(bodies) >= 3
    return "\n".join(bodies)


def test_canary_ims_sweep_never_shows_a_token(
    sweep: ImsSweepStack,
    capsys: pytest.CaptureFixture[str],
    root_debug_logs: pytest.LogCaptureFixture,
    service_log_lines: io.StringIO,
    tmp_path: Path,
) -> None:
    # Given a dead promise handed to a run, then the operator's access token, and one child
    # the operator cannot reach
    dead = sweep.mint()
    with sweep.consumer() as consumer:
        assert consumer.invalidate(dead)
    hand_over_run_token(
        S3CheckpointStore(sweep.stack.resources.bucket),
        KmsTokenCipher(sweep.key_id),
        SWEEP_RUN,
        dead,
    )
    sweep.sim.faults(
        fail_next=[{"status": 403, "count": 1, "op": "status", "workspace_id": "c-lean"}]
    )
    argv = ["--parent", SWEEP_MASTER, "--rate-limit-ms", "0", "--batch-size", "2"]
    argv += ["--run-id", SWEEP_RUN]
    reports = [tmp_path / "report.json", tmp_path / "report.csv"]

    # When the run is refused for the dead promise, resumed with the access token (a real run
    # that mints a promise per release), and a dry run follows
    assert sweep.cli(argv, {}) == 1
    refused = capsys.readouterr()
    env = {**cli_env(sweep.sim), "SWEEP_IMS_ACCESS_TOKEN": sweep.operator_access}
    assert sweep.cli([*argv, "--report", str(reports[0])], env) == 0
    dry = ["--parent", SWEEP_MASTER, "--dry-run", "--rate-limit-ms", "0"]
    assert sweep.cli([*dry, "--report", str(reports[1])], env) == 0
    printed = capsys.readouterr()

    # Then every path ran: the refusal, the releases with their records, the denied child
    messages = sweep.stack.queued()
    assert len(messages) == 3
    store = sweep.credentials.store()
    released = {}
    for n, message in enumerate(messages):
        body = json.loads(message["Body"])
        stored = store.read(body["request_id"], body["workspace_id"])
        assert stored is not None
        released[f"release {n} promise"] = stored.promise_token
    assert "needsReauth" in refused.err
    assert "access-denied" in reports[0].read_text(encoding="utf-8")
    clients = sweep.sim.ims_clients()
    secrets = {
        "operator access token": sweep.operator_access,
        "dead promise token": dead,
        "emitter secret": clients["emitter"]["client_secret"],
        "consumer secret": clients["consumer"]["client_secret"],
        **released,
        **{f"run token {n}": token for n, token in enumerate(sweep.ims.every_token())},
    }
    assert len(sweep.ims.every_token()) >= 9  # three batches: exchanged, rolled, access
    said = {
        "refusal": refused.out + refused.err,
        "stdout and metrics": printed.out,
        "stderr": printed.err,
        "log records": log_text(root_debug_logs),
        "log lines": service_log_lines.getvalue(),
        "bucket objects": _bucket_objects(sweep),
        "queue messages": json.dumps(messages, default=str),
        "credential records": _raw_items(
            sweep.stack.resources.endpoint_url, sweep.credentials.table_name
        ),
        **{path.name: path.read_text(encoding="utf-8") for path in reports},
    }
    assert service_log_lines.getvalue().count('"message":"sweep item"') >= 2
    # And none of it holds any token of the run, of a release, or either pair's secret
    assert {channel: leaks(text, secrets) for channel, text in said.items()} == {
        channel: [] for channel in said
    }
