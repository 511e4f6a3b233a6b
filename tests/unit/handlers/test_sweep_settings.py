"""The Sweep's credential modes: its operator's IMS token (production) or a loopback token."""

from __future__ import annotations

import pytest

from serenity_allocator.handlers.settings import SettingsError, SweepSettings

BASE = {
    "SEMRUSH_BASE_URL": "https://www.semrush.com",
    "ENVIRONMENT": "unit",
    "SWEEP_BUCKET": "serenity-sweep",
    "QUEUE_URL": "https://q",
}
IMS = {
    "IMS_HOST": "https://ims-na1.adobelogin.com",
    "IMS_CONSUMER_SECRET_ID": "serenity/ims-consumer",
    "CREDENTIALS_KEY_ARN": "arn:aws:kms:us-east-1:123456789012:key/k-1",
}


def _refusal(env: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as raised:
        SweepSettings.from_env(env)
    return str(raised.value)


def test_sweep_ims_mode_needs_no_credentials_table() -> None:
    # Given IMS mode without CREDENTIALS_TABLE (the Sweep reads no credential record)
    settings = SweepSettings.from_env({**BASE, **IMS})

    # Then it parses, with the consumer pair's secret and the key of the run claims
    assert settings.ims is not None
    assert settings.ims.consumer_secret_id == "serenity/ims-consumer"
    assert settings.ims.credentials_key_arn == IMS["CREDENTIALS_KEY_ARN"]
    assert settings.ims.credentials_table is None


def test_sweep_ims_mode_without_the_key_names_it() -> None:
    env = {**BASE, **IMS}
    del env["CREDENTIALS_KEY_ARN"]
    message = _refusal(env)
    assert "IMS mode needs CREDENTIALS_KEY_ARN" in message


def test_sweep_refuses_the_removed_token_secret_naming_what_replaces_it() -> None:
    message = _refusal({**BASE, "SEMRUSH_TOKEN_SECRET_ID": "serenity/semrush-token"})
    assert "SEMRUSH_TOKEN_SECRET_ID is no longer supported" in message
    assert "IMS_HOST" in message and "CREDENTIALS_KEY_ARN" in message


def test_sweep_without_any_credential_is_a_configuration_error() -> None:
    message = _refusal(dict(BASE))
    assert "no Semrush credential" in message and "IMS_HOST" in message


def test_sweep_static_token_only_on_loopback_and_never_beside_ims() -> None:
    # Given the local simulator's origin and its static token / Then static mode parses
    local = {**BASE, "SEMRUSH_BASE_URL": "http://127.0.0.1:8900", "SEMRUSH_TOKEN": "tok-local"}
    assert SweepSettings.from_env(local).ims is None
    # And against a real origin the static token is refused
    assert "loopback" in _refusal({**BASE, "SEMRUSH_TOKEN": "tok-local"})
    # And beside IMS settings it is refused too
    assert "exclusive" in _refusal({**local, **IMS, "IMS_HOST": "http://127.0.0.1:8900"})
