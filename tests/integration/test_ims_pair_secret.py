"""IMS pairs from Secrets Manager (moto over HTTP): the consumer's two keys, the emitter's three."""

from __future__ import annotations

import json
import uuid

import pytest

from serenity_allocator.adapters.ims_client import ImsClientPair, ImsPairSecretError, read_ims_pair
from serenity_tools.standins.resources import LocalResources, local_client

EMITTER = {"client_id": "em-id", "client_secret": "em-secret-5c1f", "promise_definition_id": "pd"}


def _secret(local_resources: LocalResources, **value: str | bytes) -> str:
    name = f"ims-pair-{uuid.uuid4().hex[:8]}"
    secrets = local_client("secretsmanager", local_resources.endpoint_url)
    secrets.create_secret(Name=name, **value)
    return name


def _read(local_resources: LocalResources, name: str, role: str) -> ImsClientPair:
    client = local_client("secretsmanager", local_resources.endpoint_url)
    return read_ims_pair(name, role, client=client)


def test_the_emitter_pair_has_three_keys_and_the_consumer_two(
    local_resources: LocalResources,
) -> None:
    # Given one secret holding an emitter pair (as JSON text) and one a consumer's (as bytes)
    emitter = _secret(local_resources, SecretString=json.dumps(EMITTER))
    consumer = _secret(
        local_resources,
        SecretBinary=json.dumps({"client_id": " c-id ", "client_secret": "c-secret"}).encode(),
    )
    # When each is read for its role / Then each is its pair, blanks trimmed
    assert _read(local_resources, emitter, "emitter") == ImsClientPair(
        "em-id", "em-secret-5c1f", "pd"
    )
    assert _read(local_resources, consumer, "consumer") == ImsClientPair("c-id", "c-secret")


@pytest.mark.parametrize(
    "stored",
    [
        json.dumps({k: v for k, v in EMITTER.items() if k != "promise_definition_id"}),
        json.dumps({**EMITTER, "client_id": "  "}),
        "em-secret-5c1f not json",
        json.dumps(["em-secret-5c1f"]),
    ],
)
def test_a_malformed_emitter_secret_is_refused_naming_its_role_never_its_content(
    local_resources: LocalResources, stored: str
) -> None:
    name = _secret(local_resources, SecretString=stored)
    with pytest.raises(ImsPairSecretError) as raised:
        _read(local_resources, name, "emitter")
    assert f"the IMS emitter secret {name!r}" in str(raised.value)
    assert "em-secret-5c1f" not in str(raised.value)
    assert raised.value.__cause__ is None


def test_a_missing_secret_is_a_pair_error(local_resources: LocalResources) -> None:
    with pytest.raises(ImsPairSecretError, match="could not read the IMS consumer secret"):
        _read(local_resources, f"absent-{uuid.uuid4().hex[:8]}", "consumer")


def test_a_secret_of_pairs_by_name_gives_the_deployments_named_pair(
    local_resources: LocalResources,
) -> None:
    # Given a secret holding the dedicated Semrush pair beside a general one
    named = {
        "GENERAL": {"client_id": "gen-id", "client_secret": "gen-secret-77"},
        "SEMRUSH": {"client_id": "sem-id", "client_secret": "sem-secret-91"},
    }
    name = _secret(local_resources, SecretString=json.dumps(named))
    client = local_client("secretsmanager", local_resources.endpoint_url)
    # When it is read / Then the default name is SEMRUSH, another name picks its own pair
    assert read_ims_pair(name, "consumer", client=client) == ImsClientPair(
        "sem-id", "sem-secret-91"
    )
    assert read_ims_pair(name, "consumer", client=client, pair_name="GENERAL") == ImsClientPair(
        "gen-id", "gen-secret-77"
    )
    # And a name the secret does not hold is a configuration error naming it, never a secret
    with pytest.raises(ImsPairSecretError) as raised:
        read_ims_pair(name, "consumer", client=client, pair_name="SEMRUSH_EU")
    assert "holds no pair named 'SEMRUSH_EU'" in str(raised.value)
    assert "secret-91" not in str(raised.value) and "secret-77" not in str(raised.value)
