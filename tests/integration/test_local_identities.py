"""The local stack's real credential path: users on the simulator's IMS, records in moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.credential_store import DynamoDbCredentialStore, KmsTokenCipher
from serenity_allocator.adapters.s3_checkpoint_store import S3CheckpointStore
from serenity_allocator.adapters.sqs import build_ensure
from serenity_allocator.handlers.settings import AllocatorSettings, SweepSettings
from serenity_tools.standins.identities import LocalIdentities
from serenity_tools.standins.stack import LocalStack
from serenity_tools.verification.credential_story import OPERATOR, add_operator, run_claim
from serenity_tools.verification.demo import run_sweep
from serenity_tools.verification.seeding import usage


@pytest.fixture(scope="module")
def ims_stack() -> Iterator[LocalStack]:
    with LocalStack(credentials="ims") as stack:
        yield stack


def test_an_ims_stack_gives_the_handlers_ims_settings_and_no_static_token(
    ims_stack: LocalStack,
) -> None:
    env = ims_stack.env()

    assert "SEMRUSH_TOKEN" not in env and "SEMRUSH_TOKEN_SECRET_ID" not in env
    assert env["IMS_HOST"] == ims_stack.simulator.origin
    assert env["CREDENTIALS_TABLE"] == ims_stack.resources.credentials_table
    assert env["CREDENTIALS_KEY_ARN"] == ims_stack.resources.credentials_key_arn
    # The consumer pair is the simulator's, in the secret the env names
    secret = ims_stack.client("secretsmanager").get_secret_value(
        SecretId=env["IMS_CONSUMER_SECRET_ID"]
    )
    assert json.loads(secret["SecretString"]) == ims_stack.simulator.ims_clients()["consumer"]
    # And both handlers read it as IMS mode (no static token)
    allocator, sweep = AllocatorSettings.from_env(env), SweepSettings.from_env(env)
    assert allocator.ims is not None and allocator.semrush.token is None
    assert allocator.ims.credentials_table == ims_stack.resources.credentials_table
    assert sweep.ims is not None and sweep.semrush.token is None
    # And the Sweep can hand its operator's authority to its releases (emitter pair, table)
    assert sweep.releases_carry_credentials
    emitter = ims_stack.client("secretsmanager").get_secret_value(
        SecretId=env["IMS_EMITTER_SECRET_ID"]
    )
    assert json.loads(emitter["SecretString"]) == ims_stack.simulator.ims_clients()["emitter"]
    # And the static mode is the default, unchanged
    assert LocalStack().credentials == "static"


def test_a_request_enqueued_for_a_user_has_its_minted_promise_on_the_credentials_table(
    ims_stack: LocalStack,
) -> None:
    # Given a user who is a member of the pool and one child
    identities = LocalIdentities(ims_stack)
    user = identities.add_user("u-brand-1", ["org-1", "child-1"])
    producer = identities.producer()
    request = build_ensure("child-1", "org-1", {"prompts": 50})

    # When its service enqueues with the user's access token (the stack is shared by the
    # module's tests: only the IMS calls from here on are this request's)
    earlier = len(ims_stack.simulator.ims_calls())
    producer.enqueue(request, "u-brand-1")

    # Then the producer minted a promise for that user with the emitter pair
    mints = [c for c in ims_stack.simulator.ims_calls()[earlier:] if c["op"] == "ims_mint"]
    assert [(c["user"], c["status"], c["client_id"]) for c in mints] == [
        ("u-brand-1", 200, identities.emitter.client_id)
    ]
    # And the record holds it encrypted: the worker's read decrypts a promise token
    store = DynamoDbCredentialStore(
        ims_stack.resources.credentials_table,
        KmsTokenCipher(ims_stack.resources.credentials_key_arn, ims_stack.client("kms")),
        ims_stack.client("dynamodb"),
    )
    stored = store.read(request.request_id, "child-1")
    assert stored is not None and stored.promise_token.startswith("sim-ims-pt-")
    # And the message carries no token, and the request is remembered as the user's
    body = ims_stack.drain_queue(ims_stack.resources.queue_url)[0]["Body"]
    assert "sim-ims" not in body and user.access_token not in body
    assert identities.owners == {request.request_id: "u-brand-1"}
    assert identities.memberships == {"u-brand-1": frozenset({"org-1", "child-1"})}


def test_the_demo_sweep_runs_on_the_operators_promise_and_hands_it_to_its_releases(
    ims_stack: LocalStack, tmp_path: Any
) -> None:
    # Given a pool with two over-carved children and the operator, a member of all three
    ims_stack.simulator.seed(
        [
            {"id": "org-sweep", "ai": {"projects": usage(0, 50), "prompts": usage(0, 9000)}},
            *[
                {
                    "id": child,
                    "parent_id": "org-sweep",
                    "ai": {"projects": usage(1, 6), "prompts": usage(100, 2500)},
                }
                for child in ("sw-1", "sw-2")
            ],
        ]
    )
    identities = LocalIdentities(ims_stack)
    add_operator(identities, "org-sweep", ["sw-1", "sw-2"])
    payload = {"parent_workspace_ids": ["org-sweep"], "rate_limit_ms": 0, "batch_size": 1}

    # When the demo runs a real sweep in batches of one target
    results = run_sweep(ims_stack, identities, {**payload, "dry_run": False}, tmp_path / "s.log")

    # Then it took several batches on the one promise, and enqueued both releases
    assert results[-1]["done"] and len(results) >= 2
    enqueued = [i for r in results for i in r["items"] if i.get("outcome") == "enqueued"]
    assert sorted(i["workspace_id"] for i in enqueued) == ["sw-1", "sw-2"]
    # And each release carries the operator's authority: a record the worker can read
    store = DynamoDbCredentialStore(
        ims_stack.resources.credentials_table,
        KmsTokenCipher(ims_stack.resources.credentials_key_arn, ims_stack.client("kms")),
        ims_stack.client("dynamodb"),
    )
    for item in enqueued:
        assert store.read(item["request_id"], item["workspace_id"]) is not None
    calls = ims_stack.simulator.ims_calls()
    operator_mints = [c for c in calls if c["op"] == "ims_mint" and c["user"] == OPERATOR]
    assert len(operator_mints) == 1 + len(enqueued)  # the run's promise, then one per release
    # And the run's claim ends scrubbed
    claims = S3CheckpointStore(ims_stack.resources.bucket, s3=ims_stack.client("s3"))
    claim = run_claim(claims, results[0]["run_id"])
    assert claim is not None and claim.get("ended") and not claim.get("promise_token")
