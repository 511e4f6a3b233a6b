"""The credentials table, its KMS key and who may touch them, read after SAM's transform.

A producer may write a credential record and take it back, and encrypt for that purpose only:
never read a record, never decrypt. The Allocator reads, rolls and scrubs records and decrypts
and encrypts for the request purpose; the Sweep decrypts and encrypts for its run's purpose
and writes its releases' records as a producer does (encrypt only), never reading one.
Nothing else (the state machine, the outcome reader's GetItem on the ledger) reaches a token,
no grant covers them with a wildcard, and the fleet-wide Semrush token's secret is gone.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from typing import Any

import pytest

from serenity_allocator.adapters.credential_store import PURPOSE
from serenity_allocator.handlers.settings import AllocatorSettings, SweepSettings
from serenity_tools.standins.invoke import IntrinsicResolver, UnresolvableError, parameter_values
from tests.infrastructure._expanded import Renderer, as_list, expanded_template, role_statements
from tests.infrastructure._template import function_environment, load_template

TABLE = "CredentialsTable"
KEY = "CredentialsKey"
POLICY = "ProducerCredentialsPolicy"
LEDGER = "RequestLedgerTable"
SWEEP_PURPOSE = "serenity-allocator/sweep-promise-token"
CONSUMER_SECRET = "serenity-allocator/ims-consumer"  # ImsConsumerSecretName's default
EMITTER_SECRET = "serenity-allocator/ims-emitter"  # ImsEmitterSecretName's default

Grant = tuple[str, str, Any]
"""(action, rendered resource, rendered condition) of one Allow statement."""


@pytest.fixture(scope="module")
def expanded() -> dict[str, Any]:
    return expanded_template()


@pytest.fixture(scope="module")
def render(expanded: dict[str, Any]) -> Renderer:
    return Renderer(expanded)


def test_credentials_table_is_keyed_by_request_id_expires_and_keeps_no_backups(
    expanded: dict[str, Any],
) -> None:
    table = expanded["Resources"][TABLE]
    props = table["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "request_id", "KeyType": "HASH"}]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    # expires_at: the store's TTL attribute (adapters/credential_store.py)
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    # Backups would keep tokens' ciphertext long after their records were scrubbed
    assert "PointInTimeRecoverySpecification" not in props
    assert "StreamSpecification" not in props


def test_credentials_key_is_customer_managed_symmetric_and_rotated(
    expanded: dict[str, Any],
) -> None:
    key = expanded["Resources"][KEY]
    props = key["Properties"]
    assert key["Type"] == "AWS::KMS::Key"
    assert props["EnableKeyRotation"] is True
    assert props.get("KeySpec", "SYMMETRIC_DEFAULT") == "SYMMETRIC_DEFAULT"
    assert props.get("KeyUsage", "ENCRYPT_DECRYPT") == "ENCRYPT_DECRYPT"


def test_producer_policy_writes_and_encrypts_never_reads_or_decrypts(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the producer policy as deployed
    statements = as_list(expanded["Resources"][POLICY]["Properties"]["PolicyDocument"]["Statement"])
    granted = [
        (action, render.render(statement["Resource"]), render.render(statement.get("Condition")))
        for statement in statements
        if statement["Effect"] == "Allow"
        for action in as_list(statement["Action"])
    ]
    # Then it puts and deletes records of the credentials table, and encrypts with the key
    # only under the promise-token purpose: no GetItem, Query, Scan or Decrypt anywhere
    table, key = render.arn(TABLE), render.arn(KEY)
    purpose = {"StringEquals": {"kms:EncryptionContext:purpose": PURPOSE}}
    assert sorted(granted, key=lambda g: g[0]) == [
        ("dynamodb:DeleteItem", table, RECORD_ONLY),
        ("dynamodb:PutItem", table, RECORD_ONLY),
        ("kms:Encrypt", key, purpose),
    ]


def _grants(render: Renderer, statements: list[dict[str, Any]]) -> list[Grant]:
    return [
        (action, resource, render.render(statement.get("Condition")))
        for statement in statements
        if statement["Effect"] == "Allow"
        for action in as_list(statement["Action"])
        for resource in as_list(render.render(statement["Resource"]))
    ]


def _credential_grants(render: Renderer, statements: list[dict[str, Any]]) -> list[Grant]:
    """The grants on the credentials table or the key, sorted (action, resource)."""
    targets = {render.arn(TABLE), render.arn(KEY)}
    found = [grant for grant in _grants(render, statements) if grant[1] in targets]
    return sorted(found, key=lambda grant: (grant[0], grant[1]))


RECORD_ONLY = {
    "ForAllValues:StringEquals": {
        "dynamodb:Attributes": [
            "request_id",
            "workspace_id",
            "promise_token",
            "expires_at",
            "written_at",
        ]
    },
    "StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE"]},
}
"""A producer writes only a record's own attributes and never gets an old item back."""


def _purpose(purpose: str) -> dict[str, Any]:
    return {"StringEquals": {"kms:EncryptionContext:purpose": purpose}}


def test_allocator_reads_rolls_and_deletes_records_and_uses_the_key_for_requests_only(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the Allocator's role after the transform
    statements = role_statements(expanded)["AllocatorRole"]
    table, key = render.arn(TABLE), render.arn(KEY)
    # Then it reads records and updates them (roll, scrub: the code deletes none), never
    # Put/Delete/Query/Scan, and decrypts and encrypts only under the request purpose
    assert _credential_grants(render, statements) == [
        ("dynamodb:GetItem", table, None),
        ("dynamodb:UpdateItem", table, None),
        ("kms:Decrypt", key, _purpose(PURPOSE)),
        ("kms:Encrypt", key, _purpose(PURPOSE)),
    ]


def test_sweep_decrypts_its_run_token_only_and_writes_its_releases_records_as_a_producer(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the Sweep's role after the transform
    statements = role_statements(expanded)["SweepRole"]
    table, key = render.arn(TABLE), render.arn(KEY)
    # Then it decrypts and encrypts under its own run purpose only (a request's token does
    # not decrypt for it), and for its releases it holds exactly the producer's rights: put
    # and take back a record, encrypt under the request purpose; no read, no decrypt of one
    assert _credential_grants(render, statements) == [
        ("dynamodb:DeleteItem", table, RECORD_ONLY),
        ("dynamodb:PutItem", table, RECORD_ONLY),
        ("kms:Decrypt", key, _purpose(SWEEP_PURPOSE)),
        ("kms:Encrypt", key, _purpose(PURPOSE)),
        ("kms:Encrypt", key, _purpose(SWEEP_PURPOSE)),
    ]
    assert SWEEP_PURPOSE != PURPOSE


def test_no_other_role_reaches_the_credentials_table_or_the_key(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given every role but the two functions' (the state machine's, any SAM generates)
    others = {
        role: statements
        for role, statements in role_statements(expanded).items()
        if role not in {"AllocatorRole", "SweepRole"}
    }
    assert others  # the state machine's role at least
    # Then none has a grant on either
    assert {role: _credential_grants(render, s) for role, s in others.items()} == {
        role: [] for role in others
    }


def _all_allow_statements(expanded: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every Allow statement of a role, a policy or a resource policy (the key policy aside)."""
    found = [
        (owner, statement)
        for owner, statements in role_statements(expanded).items()
        for statement in statements
    ]
    for name, resource in expanded["Resources"].items():
        document = resource.get("Properties", {}).get("PolicyDocument")
        if document is not None and resource["Type"] != "AWS::IAM::Role":
            found += [(name, s) for s in as_list(document["Statement"])]
    return [(owner, s) for owner, s in found if s["Effect"] == "Allow"]


def test_no_grant_covers_the_credentials_table_or_the_key_by_a_wildcard(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given every Allow statement's resources, rendered as deployed
    table, key = render.arn(TABLE), render.arn(KEY)
    for owner, statement in _all_allow_statements(expanded):
        for action, resource, _ in _grants(render, [statement]):
            # Then a resource that matches the table or the key (and its index/stream ARNs)
            # is exactly that ARN: never "*", "table/*" or "key/*"
            for target in (table, key, f"{table}/index/any", f"{table}/stream/any"):
                if fnmatchcase(target, resource):
                    assert resource == target, f"{owner}: {action} on {resource}"
            # And no DynamoDB or KMS action is granted on "*" at all
            if action.split(":")[0] in {"dynamodb", "kms"}:
                assert "*" not in resource, f"{owner}: {action} on {resource}"


def test_the_ledger_readers_grant_reaches_no_token(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given the ledger ARN services are told to grant GetItem on (the outcome reader)
    ledger = render.render(expanded["Outputs"]["RequestLedgerTableArn"]["Value"])
    assert ledger == render.arn(LEDGER)
    table, key = render.arn(TABLE), render.arn(KEY)
    # Then it matches neither the credentials table nor the key
    assert not fnmatchcase(table, ledger) and not fnmatchcase(key, ledger)
    # And every statement that grants anything on the ledger names nothing else that
    # could hold a token (the credentials are separate statements on separate resources)
    for owner, statement in _all_allow_statements(expanded):
        resources = {grant[1] for grant in _grants(render, [statement])}
        if ledger in resources:
            assert resources == {ledger}, owner


def test_no_role_or_policy_reads_the_fleet_wide_token_any_more(
    expanded: dict[str, Any], render: Renderer
) -> None:
    # Given every Secrets Manager grant in the deployed template
    secret_grants = [
        (owner, action, resource)
        for owner, statement in _all_allow_statements(expanded)
        for action, resource, _ in _grants(render, [statement])
        if action.startswith("secretsmanager:")
    ]
    prefix = f"arn:aws:secretsmanager:{render.render({'Ref': 'AWS::Region'})}:"
    consumer = f"{prefix}{render.render({'Ref': 'AWS::AccountId'})}:secret:{CONSUMER_SECRET}-??????"
    emitter = consumer.replace(CONSUMER_SECRET, EMITTER_SECRET)
    # Then the two functions read the IMS consumer pair, the Sweep the emitter pair too, and
    # no other secret
    assert sorted(secret_grants) == [
        ("AllocatorRole", "secretsmanager:GetSecretValue", consumer),
        ("SweepRole", "secretsmanager:GetSecretValue", consumer),
        ("SweepRole", "secretsmanager:GetSecretValue", emitter),
    ]
    # And neither the old parameter nor its variable or secret is anywhere in the stack
    text = json.dumps(expanded)
    for gone in ("SemrushTokenSecretId", "SEMRUSH_TOKEN_SECRET_ID", "semrush-token"):
        assert gone not in text, gone


def test_outputs_name_the_table_the_key_and_the_policy(expanded: dict[str, Any]) -> None:
    outputs = expanded["Outputs"]
    assert outputs["CredentialsTableName"]["Value"] == {"Ref": TABLE}
    assert outputs["CredentialsKeyArn"]["Value"] == {"Fn::GetAtt": [KEY, "Arn"]}
    assert outputs["ProducerCredentialsPolicyArn"]["Value"] == {"Ref": POLICY}


def _deployed_environment(function: str) -> dict[str, str]:
    """The function's variables as a deployed stack would set them (ImsHost filled in)."""
    template = load_template()
    parameters = parameter_values(template, {"ImsHost": "https://ims.example.com"})
    resolver, render = IntrinsicResolver(template, parameters), Renderer(template)
    env = {}
    for name, value in function_environment(template, function).items():
        try:
            env[name] = str(resolver.resolve(value))
        except UnresolvableError:  # a resource's name or ARN: as CloudFormation renders it
            env[name] = str(render.render(value))
    return env


def test_the_deployed_environment_runs_both_functions_in_ims_mode(render: Renderer) -> None:
    # Given each function's environment as deployed
    allocator = AllocatorSettings.from_env(_deployed_environment("AllocatorFunction"))
    sweep = SweepSettings.from_env(_deployed_environment("SweepFunction"))
    # Then both settings accept it in IMS mode, with the stack's own table, key and pairs
    for settings in (allocator, sweep):
        assert settings.ims is not None
        assert settings.ims.host == "https://ims.example.com"
        assert settings.ims.consumer_secret_id == CONSUMER_SECRET
        assert settings.ims.credentials_table == render.physical_name(TABLE)
        assert settings.ims.credentials_key_arn == render.arn(KEY)
        assert settings.semrush.token is None
    # And a real sweep's releases carry the operator (the emitter pair and the table are set)
    assert sweep.emitter_secret_id == EMITTER_SECRET
    assert sweep.releases_carry_credentials
