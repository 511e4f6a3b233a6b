"""The request ledger's settings: the table name and the record lifetime, validated at the edge."""

from __future__ import annotations

import pytest

from serenity_allocator.handlers.settings import AllocatorSettings, SettingsError

BASE = {
    "SEMRUSH_BASE_URL": "https://www.semrush.com",
    "IMS_HOST": "https://ims-na1.adobelogin.com",
    "IMS_CONSUMER_SECRET_ID": "serenity/ims-consumer",
    "CREDENTIALS_TABLE": "serenity-credentials",
    "CREDENTIALS_KEY_ARN": "arn:aws:kms:us-east-1:123456789012:key/k-1",
    "ENVIRONMENT": "unit",
    "MAX_RECEIVE_COUNT": "5",
}


def test_allocator_settings_ledger_is_off_when_unset_or_blank() -> None:
    # Given no ledger table, then a blank one / When parsed / Then there is no ledger
    assert AllocatorSettings.from_env(BASE).request_ledger_table is None
    blank = {**BASE, "REQUEST_LEDGER_TABLE": "  "}
    assert AllocatorSettings.from_env(blank).request_ledger_table is None


def test_allocator_settings_ledger_table_and_default_lifetime() -> None:
    # Given a table name / When parsed
    settings = AllocatorSettings.from_env({**BASE, "REQUEST_LEDGER_TABLE": "serenity-ledger"})

    # Then the table is used and records live 30 days
    assert (settings.request_ledger_table, settings.request_ledger_ttl_days) == (
        "serenity-ledger",
        30,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REQUEST_LEDGER_TABLE", "no spaces allowed"),
        ("REQUEST_LEDGER_TABLE", "ab"),
        ("REQUEST_LEDGER_TTL_DAYS", "14"),
        ("REQUEST_LEDGER_TTL_DAYS", "thirty"),
    ],
)
def test_allocator_settings_ledger_refuses_malformed_values_naming_them(
    name: str, value: str
) -> None:
    # Given a malformed ledger variable (a TTL shorter than the DLQ's retention included)
    # When parsed / Then the refusal names the variable
    with pytest.raises(SettingsError) as raised:
        AllocatorSettings.from_env({**BASE, name: value})
    assert name in str(raised.value)
