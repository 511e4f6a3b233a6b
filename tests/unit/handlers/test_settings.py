"""Configuration at the handler edge: every variable validated, named when wrong."""

from __future__ import annotations

import pytest

from serenity_allocator.handlers.settings import AllocatorSettings, SettingsError, SweepSettings

SECRET_TOKEN = "tok-must-never-leak-3f9a"


def _env(**overrides: str | None) -> dict[str, str]:
    env = {
        "SEMRUSH_BASE_URL": "https://www.semrush.com",
        "IMS_HOST": "https://ims-na1.adobelogin.com",
        "IMS_CONSUMER_SECRET_ID": "serenity/ims-consumer",
        "CREDENTIALS_TABLE": "serenity-credentials",
        "CREDENTIALS_KEY_ARN": "arn:aws:kms:us-east-1:123456789012:key/k-1",
        "ENVIRONMENT": "unit",
        "MAX_RECEIVE_COUNT": "5",
    }
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _refusal(
    settings_cls: type[AllocatorSettings] | type[SweepSettings], env: dict[str, str]
) -> str:
    with pytest.raises(SettingsError) as raised:
        settings_cls.from_env(env)
    return str(raised.value)


def test_allocator_settings_minimal_environment_parses() -> None:
    # Given only the required variables / When parsed
    settings = AllocatorSettings.from_env(_env())

    # Then the documented defaults apply
    assert settings.semrush.base_url == "https://www.semrush.com"
    assert settings.ims is not None
    assert settings.ims.host == "https://ims-na1.adobelogin.com"
    assert settings.ims.consumer_secret_id == "serenity/ims-consumer"
    assert settings.ims.credentials_table == "serenity-credentials"
    assert settings.semrush.token is None
    assert settings.environment == "unit"
    assert settings.max_receive_count == 5
    assert settings.dynamic_allocation is False
    assert (settings.blocks.projects, settings.blocks.prompts) == (1, 100)
    assert settings.dlq_url is None and settings.outcome_bus_name is None


@pytest.mark.parametrize("name", ["SEMRUSH_BASE_URL", "ENVIRONMENT", "MAX_RECEIVE_COUNT"])
def test_allocator_settings_missing_required_variable_named(name: str) -> None:
    # Given the environment without one required variable / When parsed
    message = _refusal(AllocatorSettings, _env(**{name: None}))

    # Then the error names it
    assert name in message


_STATIC = {name: None for name in ("IMS_HOST", "IMS_CONSUMER_SECRET_ID", "CREDENTIALS_TABLE")}
_STATIC_LOCAL = {**_STATIC, "CREDENTIALS_KEY_ARN": None, "SEMRUSH_BASE_URL": "http://127.0.0.1:9"}


def _local(**overrides: str | None) -> dict[str, str]:
    """Static mode against a loopback simulator (local tools)."""
    return _env(**_STATIC_LOCAL, SEMRUSH_TOKEN=SECRET_TOKEN, **overrides)


def test_allocator_settings_missing_credentials_named() -> None:
    # Given neither IMS mode nor a (loopback) token / When parsed
    message = _refusal(AllocatorSettings, _env(**_STATIC, CREDENTIALS_KEY_ARN=None))

    # Then the error names both ways to give one
    assert "IMS_HOST" in message and "IMS_CONSUMER_SECRET_ID" in message
    assert "SEMRUSH_TOKEN" in message


@pytest.mark.parametrize("value", ["serenity/semrush-token", "arn:aws:secretsmanager:x"])
def test_allocator_settings_removed_token_secret_is_a_clear_error(value: str) -> None:
    # Given the fleet-wide token's secret id (removed) / When parsed
    message = _refusal(AllocatorSettings, _env(SEMRUSH_TOKEN_SECRET_ID=value))

    # Then it says it is no longer supported and what replaces it, never echoing the value
    assert "SEMRUSH_TOKEN_SECRET_ID is no longer supported" in message
    assert "IMS_HOST" in message and "CREDENTIALS_TABLE" in message
    assert value not in message


def test_allocator_settings_static_token_and_ims_mode_are_exclusive() -> None:
    env = _env(SEMRUSH_BASE_URL="http://127.0.0.1:9", SEMRUSH_TOKEN=SECRET_TOKEN)
    message = _refusal(AllocatorSettings, env)
    assert "SEMRUSH_TOKEN and IMS mode are exclusive" in message
    assert SECRET_TOKEN not in message


@pytest.mark.parametrize("name", ["CREDENTIALS_TABLE", "CREDENTIALS_KEY_ARN"])
def test_allocator_settings_ims_mode_needs_the_credentials_table(name: str) -> None:
    assert name in _refusal(AllocatorSettings, _env(**{name: None}))


def test_allocator_settings_ims_mode_needs_a_consumer_pair() -> None:
    message = _refusal(AllocatorSettings, _env(IMS_CONSUMER_SECRET_ID=None))
    assert "IMS_CONSUMER_SECRET_ID" in message


def test_allocator_settings_ims_env_pair_only_with_a_loopback_ims_host() -> None:
    pair = {
        "IMS_CONSUMER_SECRET_ID": None,
        "IMS_CONSUMER_CLIENT_ID": "sim-consumer",
        "IMS_CONSUMER_CLIENT_SECRET": SECRET_TOKEN,
    }
    # Against a real IMS host: refused, pointing at the secret, the secret not echoed
    message = _refusal(AllocatorSettings, _env(**pair))
    assert "loopback IMS_HOST" in message and SECRET_TOKEN not in message
    # Against the simulator: accepted, and never in the repr
    local = AllocatorSettings.from_env(_env(**pair, IMS_HOST="http://127.0.0.1:9"))
    assert local.ims is not None and local.ims.consumer_client_secret == SECRET_TOKEN
    assert SECRET_TOKEN not in repr(local)
    # Half a pair, or the pair and the secret: refused
    assert "go together" in _refusal(
        AllocatorSettings, _env(**{**pair, "IMS_CONSUMER_CLIENT_SECRET": None})
    )
    both = {**pair, "IMS_CONSUMER_SECRET_ID": "serenity/ims-consumer", "IMS_HOST": "http://[::1]:9"}
    assert "not both" in _refusal(AllocatorSettings, _env(**both))


@pytest.mark.parametrize(
    "host", ["http://ims.example.com", "https://ims.example.com/path", "ftp://ims.example.com"]
)
def test_allocator_settings_ims_host_must_be_an_https_origin(host: str) -> None:
    assert "IMS host" in _refusal(AllocatorSettings, _env(IMS_HOST=host))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_RECEIVE_COUNT", "five"),
        ("MAX_RECEIVE_COUNT", "0"),
        ("BLOCK_PROJECTS", "0"),
        ("BLOCK_PROMPTS", "1.5"),
        ("SAFETY_MARGIN_MS", "-1"),
        ("ENSURE_NOT_READY_RETRIES", "many"),
        ("UNMETERED_CACHE_TTL_S", "-5"),
        ("SIBLING_RECLAIM_MAX_SIBLINGS", "0"),
        ("SIBLING_RECLAIM_MAX_PARKS", "x"),
        ("POOL_LOW_RATIO", "1.5"),
        ("POOL_LOW_INTERVAL_S", "soon"),
        ("ENVIRONMENT", ""),
        ("AWS_CALL_BUDGET_S", "0"),
        ("AWS_CALL_BUDGET_S", "17"),
        ("AWS_CALL_BUDGET_S", "soon"),
    ],
)
def test_allocator_settings_malformed_variable_named(name: str, value: str) -> None:
    # Given one malformed variable / When parsed / Then the error names it
    assert name in _refusal(AllocatorSettings, _env(**{name: value}))


def test_allocator_settings_token_refused_with_non_loopback_base_url() -> None:
    # Given a plain token against the real upstream
    env = _env(**_STATIC, CREDENTIALS_KEY_ARN=None, SEMRUSH_TOKEN=SECRET_TOKEN)

    # When parsed
    message = _refusal(AllocatorSettings, env)

    # Then refused, pointing at the secret id, and the token is not echoed
    assert "SEMRUSH_TOKEN" in message and "loopback" in message
    assert SECRET_TOKEN not in message


@pytest.mark.parametrize(
    "base_url", ["http://127.0.0.1:8765", "http://localhost:9", "http://[::1]:8765"]
)
def test_allocator_settings_token_accepted_with_loopback_base_url(base_url: str) -> None:
    # Given a plain token against a local simulator / When parsed
    settings = AllocatorSettings.from_env(
        _env(
            **_STATIC,
            CREDENTIALS_KEY_ARN=None,
            SEMRUSH_BASE_URL=base_url,
            SEMRUSH_TOKEN=SECRET_TOKEN,
        )
    )

    # Then it is kept, and never shown in the settings' repr
    assert settings.semrush.token == SECRET_TOKEN
    assert SECRET_TOKEN not in repr(settings)


@pytest.mark.parametrize(
    "base_url",
    [
        "https://www.semrush.com/enterprise/users/api",
        "https://www.semrush.com/v1",
        "https://www.semrush.com?x=1",
        "http://www.semrush.com",
        "ftp://www.semrush.com",
        "www.semrush.com",
    ],
)
def test_allocator_settings_base_url_must_be_an_https_origin(base_url: str) -> None:
    # Given a base URL that is not an origin (or not https off loopback) / When parsed
    message = _refusal(AllocatorSettings, _env(SEMRUSH_BASE_URL=base_url))

    # Then refused, naming the variable
    assert "SEMRUSH_BASE_URL" in message


def test_allocator_settings_base_url_normalized_to_origin() -> None:
    # Given an origin with a trailing slash and upper case / When parsed / Then normalized
    settings = AllocatorSettings.from_env(_env(SEMRUSH_BASE_URL="https://WWW.Semrush.com/"))
    assert settings.semrush.base_url == "https://www.semrush.com"


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("true", True),
        ("True", False),
        ("TRUE", False),
        ("1", False),
        ("yes", False),
        ("on", False),
        (" true", False),
        ("", False),
        ("false", False),
    ],
)
def test_allocator_settings_kill_switch_on_only_for_exact_true(value: str, on: bool) -> None:
    # Given SERENITY_DYNAMIC_ALLOCATION set to some spelling / When parsed
    settings = AllocatorSettings.from_env(_env(SERENITY_DYNAMIC_ALLOCATION=value))

    # Then only the exact string "true" turns writes on: a typo never enables them
    assert settings.dynamic_allocation is on


def test_allocator_settings_kill_switch_off_when_absent() -> None:
    # Given no kill switch variable / When parsed / Then allocation is off
    assert AllocatorSettings.from_env(_env()).dynamic_allocation is False


def test_allocator_settings_feature_switches_default_as_documented() -> None:
    # Given none of the feature switches (ADR 0006) / When parsed
    settings = AllocatorSettings.from_env(_env())

    # Then unmetered check and tight-pool fallback are on, sibling reclaim is off
    assert settings.unmetered_check is True
    assert settings.tight_pool_fallback is True
    assert settings.sibling_reclaim is False
    assert settings.sibling_reclaim_max_siblings == 3
    assert settings.sibling_reclaim_max_parks == 2
    assert settings.unmetered_cache_ttl_s == 300.0
    assert (settings.pool_low_ratio, settings.pool_low_interval_s) == (0.1, 900.0)


def test_allocator_settings_feature_switches_turned_off_with_false() -> None:
    # Given the default-on features explicitly off / When parsed / Then they are off
    settings = AllocatorSettings.from_env(
        _env(SERENITY_UNMETERED_CHECK="false", SERENITY_TIGHT_POOL_FALLBACK="false")
    )
    assert settings.unmetered_check is False
    assert settings.tight_pool_fallback is False


def test_allocator_settings_sibling_reclaim_takes_true_or_false_and_needs_queue() -> None:
    # Given sibling reclaim asked for without a queue to enqueue the releases into
    message = _refusal(AllocatorSettings, _local(SERENITY_SIBLING_RECLAIM="true"))

    # Then refused, naming what is missing
    assert "QUEUE_URL" in message

    # And with the queue it is on; "false" is off; any other spelling is refused, named
    queue = "https://sqs.us-east-1.amazonaws.com/123456789012/serenity.fifo"
    assert AllocatorSettings.from_env(
        _local(SERENITY_SIBLING_RECLAIM="true", QUEUE_URL=queue)
    ).sibling_reclaim
    assert not AllocatorSettings.from_env(
        _local(SERENITY_SIBLING_RECLAIM="false", QUEUE_URL=queue)
    ).sibling_reclaim
    for spelling in ("True", "1", "yes"):
        refusal = _refusal(AllocatorSettings, _local(SERENITY_SIBLING_RECLAIM=spelling))
        assert "SERENITY_SIBLING_RECLAIM" in refusal
        assert 'must be "true" or "false"' in refusal


def test_allocator_settings_default_on_features_refuse_unknown_spellings() -> None:
    # Given a default-on feature switch spelled loosely / When parsed / Then refused, named
    for name in ("SERENITY_UNMETERED_CHECK", "SERENITY_TIGHT_POOL_FALLBACK"):
        refusal = _refusal(AllocatorSettings, _env(**{name: "False"}))
        assert name in refusal


def test_allocator_settings_blank_optional_urls_are_absent() -> None:
    # Given blank optional variables (as a template leaves them) / When parsed
    settings = AllocatorSettings.from_env(_env(DLQ_URL=" ", OUTCOME_BUS_NAME="", QUEUE_URL=""))

    # Then they read as not configured
    assert (settings.dlq_url, settings.outcome_bus_name, settings.queue_url) == (None, None, None)


def test_allocator_settings_blocks_from_environment() -> None:
    # Given custom block sizes / When parsed / Then the blocks follow them
    settings = AllocatorSettings.from_env(_env(BLOCK_PROJECTS="2", BLOCK_PROMPTS="250"))
    assert (settings.blocks.projects, settings.blocks.prompts) == (2, 250)


@pytest.mark.parametrize("name", ["SWEEP_BUCKET", "QUEUE_URL", "ENVIRONMENT", "SEMRUSH_BASE_URL"])
def test_sweep_settings_missing_required_variable_named(name: str) -> None:
    # Given the sweep's environment without one required variable
    env = _env(MAX_RECEIVE_COUNT=None, SWEEP_BUCKET="serenity-sweep", QUEUE_URL="https://q")
    env.pop(name)

    # When parsed / Then the error names it
    assert name in _refusal(SweepSettings, env)


def test_sweep_settings_parse_with_defaults() -> None:
    # Given a complete sweep environment / When parsed
    settings = SweepSettings.from_env(
        _env(MAX_RECEIVE_COUNT=None, SWEEP_BUCKET="serenity-sweep", QUEUE_URL="https://q")
    )

    # Then the sweep's own defaults apply
    assert settings.sweep_bucket == "serenity-sweep"
    assert settings.safety_margin_ms == 10_000
    assert settings.dynamic_allocation is False


def test_aws_call_budget_does_not_follow_the_semrush_timeout() -> None:
    # Given a short upstream timeout and no AWS budget of its own
    from serenity_allocator.handlers.allocator_runtime import build_runtime

    settings = AllocatorSettings.from_env(
        _env(**_STATIC_LOCAL, SEMRUSH_TOKEN=SECRET_TOKEN, SEMRUSH_TIMEOUT_S="1.5")
    )

    # When the runtime is built / Then AWS calls keep their own, most patient budget
    runtime = build_runtime(settings)
    assert (settings.aws_call_budget_s, runtime.aws_call_budget_s) == (16.0, 16.0)
    assert runtime.attempt_budget_s == 1.5


def test_aws_call_budget_is_set_on_its_own() -> None:
    # Given AWS_CALL_BUDGET_S / When the runtime is built / Then every AWS call gets it
    from serenity_allocator.handlers.allocator_runtime import build_runtime

    env = _env(**_STATIC_LOCAL, SEMRUSH_TOKEN=SECRET_TOKEN, AWS_CALL_BUDGET_S="4")
    runtime = build_runtime(AllocatorSettings.from_env(env))
    assert runtime.aws_call_budget_s == 4.0


def test_allocator_settings_sibling_reclaim_is_refused_in_ims_mode() -> None:
    env = _env(SERENITY_SIBLING_RECLAIM="true", QUEUE_URL="https://q")
    assert "not supported in IMS mode" in _refusal(AllocatorSettings, env)
