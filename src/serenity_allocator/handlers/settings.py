"""Configuration read once at the handler edge, and the clients both functions build from it.

The environment is read into validated models.

Every variable name is part of the deployment contract (docs/configuration.md). A missing or
malformed required variable raises :class:`SettingsError` naming the variable, so the
invocation fails at start instead of misbehaving later.

At the end, what both functions build from it alike: the Semrush client (over a request's
token holder in IMS mode, the static loopback token otherwise), the IMS consumer and its
pair's source, a refused pair read again, and each gateway's time budget. Each imports its
adapter when called, so reading the settings loads no httpx and no boto3.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol, Self, runtime_checkable

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..adapters.aws_clients import AWS_CALL_BUDGET_S
from ..adapters.http_edge import MAX_RETRIES, is_loopback_origin, validate_base_url
from ..domain.messages import describe_validation_error
from ..domain.model import Blocks
from ..domain.sizing import Ceiling, parse_ceiling_value
from ..domain.transfer import CALL_BUDGET_S, SETTLE_POLL_ATTEMPTS, SETTLE_POLL_INTERVAL_S

if TYPE_CHECKING:
    from ..adapters.ims_client import ImsClient, ImsClientPair
    from ..adapters.semrush import SemrushClient, TokenProvider


class SettingsError(ValueError):
    """The environment is missing a required variable or holds a malformed one."""


def _is_on(value: object) -> bool:
    # A kill switch is ON only for the exact string "true": a typo must never enable writes.
    return value == "true"


class _EnvModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Validate ``env`` (usually ``os.environ``); errors name the variable."""
        try:
            return cls.model_validate(dict(env))
        except ValidationError as exc:
            problems = describe_validation_error(exc, whole="environment")
            raise SettingsError(f"invalid configuration: {problems}") from None


REMOVED_SECRET_VARIABLE = "SEMRUSH_TOKEN_SECRET_ID"  # noqa: S105 - a variable name
IMS_MODE_VARIABLES = (
    "IMS_HOST",
    "IMS_CONSUMER_SECRET_ID",
    "CREDENTIALS_TABLE",
    "CREDENTIALS_KEY_ARN",
)
"""What IMS mode needs (docs/configuration.md); the consumer pair may instead come as
``IMS_CONSUMER_CLIENT_ID`` + ``IMS_CONSUMER_CLIENT_SECRET`` with a loopback IMS host."""


def _blank_is_none(value: object) -> object:
    return None if isinstance(value, str) and not value.strip() else value


OptionalText = Annotated[str | None, BeforeValidator(_blank_is_none)]
"""An optional variable: set to blank (as a template leaves an unused one) means absent."""


class SemrushSettings(_EnvModel):
    """Where the upstream is, and the static token of local runs (loopback only)."""

    base_url: str = Field(alias="SEMRUSH_BASE_URL")
    removed_secret_id: OptionalText = Field(
        default=None, alias="SEMRUSH_TOKEN_SECRET_ID", repr=False
    )
    token: OptionalText = Field(default=None, alias="SEMRUSH_TOKEN", repr=False)
    timeout_s: float = Field(default=CALL_BUDGET_S, gt=0, le=60, alias="SEMRUSH_TIMEOUT_S")
    max_retries: int = Field(default=MAX_RETRIES, ge=0, le=5, alias="SEMRUSH_MAX_RETRIES")
    """Client retries on 429/5xx/transport errors. With the defaults one call takes at most
    3 x 15 s + 1.5 s of backoff, inside the Allocator's 60 s timeout."""

    @field_validator("base_url")
    @classmethod
    def _origin_only(cls, value: str) -> str:
        return validate_base_url(value)

    @model_validator(mode="after")
    def _static_token_is_local(self) -> Self:
        if self.removed_secret_id is not None:
            # The fleet-wide bearer is gone: every request runs as the user who asked.
            raise ValueError(
                f"{REMOVED_SECRET_VARIABLE} is no longer supported (no fleet-wide Semrush "
                "token): set IMS mode instead (" + ", ".join(IMS_MODE_VARIABLES) + ")"
            )
        if self.token is not None and not is_loopback_origin(self.base_url):
            # A plain token in the environment is for the local simulator only.
            raise ValueError(
                "SEMRUSH_TOKEN is accepted only with a loopback SEMRUSH_BASE_URL; "
                "against any other origin use IMS mode (" + ", ".join(IMS_MODE_VARIABLES) + ")"
            )
        return self


class ImsSettings(_EnvModel):
    """IMS mode: where IMS is, the consumer pair, and the credentials table and key.

    The consumer pair is a Secrets Manager secret (``IMS_CONSUMER_SECRET_ID``, JSON
    ``{"client_id", "client_secret"}``); with a loopback ``IMS_HOST`` only (the simulator),
    ``IMS_CONSUMER_CLIENT_ID`` + ``IMS_CONSUMER_CLIENT_SECRET`` may be given instead.
    """

    host: str = Field(alias="IMS_HOST")
    consumer_secret_id: OptionalText = Field(default=None, alias="IMS_CONSUMER_SECRET_ID")
    consumer_client_id: OptionalText = Field(default=None, alias="IMS_CONSUMER_CLIENT_ID")
    consumer_client_secret: OptionalText = Field(
        default=None, alias="IMS_CONSUMER_CLIENT_SECRET", repr=False
    )
    credentials_table: OptionalText = Field(
        default=None, alias="CREDENTIALS_TABLE", pattern=r"^[A-Za-z0-9_.-]{3,255}$"
    )
    credentials_key_arn: OptionalText = Field(default=None, alias="CREDENTIALS_KEY_ARN")
    pair_name: str = Field(
        default="SEMRUSH", alias="IMS_PAIR_NAME", pattern=r"^[A-Z][A-Z0-9_]{0,31}$"
    )
    """Which pair of a secret holding pairs by name is the deployment's: the one whose promise
    definition carries the ``semrush`` scope (a secret holding one pair is that pair)."""

    @field_validator("host")
    @classmethod
    def _ims_origin(cls, value: str) -> str:
        from ..adapters.ims_client import validate_ims_origin

        return validate_ims_origin(value)

    @model_validator(mode="after")
    def _one_consumer_pair(self) -> Self:
        pair_given = self.consumer_client_id is not None or self.consumer_client_secret is not None
        if pair_given and self.consumer_secret_id is not None:
            raise ValueError(
                "give the IMS consumer pair once: IMS_CONSUMER_SECRET_ID or "
                "IMS_CONSUMER_CLIENT_ID + IMS_CONSUMER_CLIENT_SECRET, not both"
            )
        if pair_given:
            if self.consumer_client_id is None or self.consumer_client_secret is None:
                raise ValueError(
                    "IMS_CONSUMER_CLIENT_ID and IMS_CONSUMER_CLIENT_SECRET go together"
                )
            if not is_loopback_origin(self.host):
                raise ValueError(
                    "IMS_CONSUMER_CLIENT_ID/IMS_CONSUMER_CLIENT_SECRET are accepted only with a "
                    "loopback IMS_HOST; use IMS_CONSUMER_SECRET_ID"
                )
        elif self.consumer_secret_id is None:
            raise ValueError("IMS mode needs IMS_CONSUMER_SECRET_ID (the consumer pair's secret)")
        return self


_IMS_VARIABLES = (
    "IMS_HOST",
    "IMS_CONSUMER_SECRET_ID",
    "IMS_CONSUMER_CLIENT_ID",
    "IMS_CONSUMER_CLIENT_SECRET",
    "CREDENTIALS_TABLE",
    "CREDENTIALS_KEY_ARN",
)


def _ims_given(data: Mapping[str, object]) -> bool:
    return any(_blank_is_none(data.get(name)) is not None for name in _IMS_VARIABLES)


class CommonSettings(_EnvModel):
    """What every function reads: environment name, kill switch, blocks, Semrush access."""

    environment: str = Field(alias="ENVIRONMENT", min_length=1)
    dynamic_allocation: bool = Field(default=False, alias="SERENITY_DYNAMIC_ALLOCATION")
    block_projects: int = Field(default=1, ge=1, alias="BLOCK_PROJECTS")
    block_prompts: int = Field(default=100, ge=1, alias="BLOCK_PROMPTS")
    semrush: SemrushSettings
    ims: ImsSettings | None = None
    """IMS mode (every request runs as its user); None: static mode (local tools only)."""

    @field_validator("dynamic_allocation", mode="before")
    @classmethod
    def _exact_true(cls, value: object) -> bool:
        return _is_on(value)

    @model_validator(mode="before")
    @classmethod
    def _nest_semrush(cls, data: Any) -> Any:
        if isinstance(data, dict) and "semrush" not in data:
            data = {**data, "semrush": data}
        if isinstance(data, dict) and "ims" not in data and _ims_given(data):
            data = {**data, "ims": data}
        return data

    @model_validator(mode="after")
    def _one_credential_mode(self) -> Self:
        # Static mode is the simulator's; anything else acts as the user who asked (IMS).
        if self.ims is not None and self.semrush.token is not None:
            raise ValueError("SEMRUSH_TOKEN and IMS mode are exclusive: set one of them")
        if self.ims is None and self.semrush.token is None:
            raise ValueError(
                "no Semrush credential: set IMS mode (" + ", ".join(IMS_MODE_VARIABLES) + "), "
                "or SEMRUSH_TOKEN with a loopback SEMRUSH_BASE_URL (local tools only)"
            )
        return self

    @property
    def blocks(self) -> Blocks:
        """Top-up block sizes."""
        return Blocks(projects=self.block_projects, prompts=self.block_prompts)


def _feature_switch(value: object, default: bool) -> bool:
    # Feature switches take exactly "true" or "false" (absent: the feature's default); any
    # other spelling is a configuration error rather than a silent guess.
    if value is None:
        return default
    if value in ("true", "false"):
        return value == "true"
    if isinstance(value, bool):
        return value
    raise ValueError('must be "true" or "false"')


class AllocatorSettings(CommonSettings):
    """The Allocator worker's configuration."""

    queue_url: OptionalText = Field(default=None, alias="QUEUE_URL")
    dlq_url: OptionalText = Field(default=None, alias="DLQ_URL")
    max_receive_count: int = Field(alias="MAX_RECEIVE_COUNT", ge=1, le=1000)
    outcome_bus_name: OptionalText = Field(default=None, alias="OUTCOME_BUS_NAME")
    safety_margin_ms: int = Field(default=3000, ge=0, alias="SAFETY_MARGIN_MS")
    ensure_not_ready_retries: int = Field(default=2, ge=0, le=5, alias="ENSURE_NOT_READY_RETRIES")
    ensure_retry_interval_s: float = Field(
        default=0.25, ge=0, le=5, alias="ENSURE_RETRY_INTERVAL_S"
    )
    settle_poll_attempts: int = Field(
        default=SETTLE_POLL_ATTEMPTS, ge=0, le=60, alias="SETTLE_POLL_ATTEMPTS"
    )
    settle_poll_interval_s: float = Field(
        default=SETTLE_POLL_INTERVAL_S, gt=0, le=5, alias="SETTLE_POLL_INTERVAL_S"
    )
    unmetered_check: bool = Field(default=True, alias="SERENITY_UNMETERED_CHECK")
    unmetered_cache_ttl_s: float = Field(default=300.0, ge=0, alias="UNMETERED_CACHE_TTL_S")
    tight_pool_fallback: bool = Field(default=True, alias="SERENITY_TIGHT_POOL_FALLBACK")
    sibling_reclaim: bool = Field(default=False, alias="SERENITY_SIBLING_RECLAIM")
    sibling_reclaim_max_siblings: int = Field(
        default=3, ge=1, le=10, alias="SIBLING_RECLAIM_MAX_SIBLINGS"
    )
    sibling_reclaim_max_parks: int = Field(default=2, ge=1, alias="SIBLING_RECLAIM_MAX_PARKS")
    pool_low_ratio: float = Field(default=0.1, ge=0, le=1, alias="POOL_LOW_RATIO")
    pool_low_interval_s: float = Field(default=900.0, ge=0, alias="POOL_LOW_INTERVAL_S")
    # Kept as text on purpose: a malformed backstop is not enforced, never a start-up failure.
    brand_ai_ceiling_projects_text: str | None = Field(
        default=None, alias="SERENITY_BRAND_AI_CEILING_PROJECTS"
    )
    brand_ai_ceiling_prompts_text: str | None = Field(
        default=None, alias="SERENITY_BRAND_AI_CEILING_PROMPTS"
    )

    aws_call_budget_s: float = Field(
        default=AWS_CALL_BUDGET_S, gt=0, le=AWS_CALL_BUDGET_S, alias="AWS_CALL_BUDGET_S"
    )
    """The longest one AWS call (DynamoDB, SQS, EventBridge) may take, retries included. Its
    own setting, independent of ``SEMRUSH_TIMEOUT_S``: from 10 s up two attempts, below one.
    A function shorter than about three budgets applies little (docs/configuration.md)."""

    request_ledger_table: OptionalText = Field(
        default=None, alias="REQUEST_LEDGER_TABLE", pattern=r"^[A-Za-z0-9_.-]{3,255}$"
    )
    """The request ledger (DynamoDB). Unset: no ledger, so a replayed request is applied again
    (the template always sets it; unset is for unit tests and a bare local invoke)."""
    request_ledger_ttl_days: int = Field(default=30, ge=15, le=365, alias="REQUEST_LEDGER_TTL_DAYS")
    """How long a ledger record lives; at least the DLQ's 14-day retention plus a day, so a
    redrive still finds the dead-lettered record it supersedes."""

    @property
    def brand_ai_ceiling(self) -> Ceiling:
        """The environment's per-brand ceiling backstop (digits only and positive, else off)."""
        return Ceiling(
            projects=parse_ceiling_value(self.brand_ai_ceiling_projects_text),
            prompts=parse_ceiling_value(self.brand_ai_ceiling_prompts_text),
        )

    @property
    def ignored_ceiling_variables(self) -> tuple[str, ...]:
        """Backstop variables that are set but not a positive whole number (so not enforced)."""
        given = (
            ("SERENITY_BRAND_AI_CEILING_PROJECTS", self.brand_ai_ceiling_projects_text),
            ("SERENITY_BRAND_AI_CEILING_PROMPTS", self.brand_ai_ceiling_prompts_text),
        )
        return tuple(
            name
            for name, text in given
            if text is not None and text.strip() and parse_ceiling_value(text) is None
        )

    @field_validator("unmetered_check", "tight_pool_fallback", mode="before")
    @classmethod
    def _default_on(cls, value: object) -> bool:
        return _feature_switch(value, default=True)

    @field_validator("sibling_reclaim", mode="before")
    @classmethod
    def _default_off(cls, value: object) -> bool:
        return _feature_switch(value, default=False)

    @model_validator(mode="after")
    def _reclaim_needs_queue(self) -> Self:
        if self.sibling_reclaim and self.queue_url is None:
            raise ValueError("SERENITY_SIBLING_RECLAIM=true needs QUEUE_URL")
        return self

    @model_validator(mode="after")
    def _ims_needs_the_credentials_table(self) -> Self:
        ims = self.ims
        if ims is not None and (ims.credentials_table is None or ims.credentials_key_arn is None):
            raise ValueError("IMS mode needs CREDENTIALS_TABLE and CREDENTIALS_KEY_ARN")
        if ims is not None and self.sibling_reclaim:
            # Its sibling releases would carry no user's credential record (noCredential).
            raise ValueError(
                "SERENITY_SIBLING_RECLAIM=true is not supported in IMS mode: the sibling "
                "releases it enqueues carry no user's credential"
            )
        return self


class SweepSettings(CommonSettings):
    """The Sweep function's configuration.

    IMS mode (production): ``IMS_HOST``, the consumer pair and ``CREDENTIALS_KEY_ARN``: each
    run acts with the promise token on its claim, encrypted with that key (the Sweep reads no
    credential record, so ``CREDENTIALS_TABLE`` is not needed). Static mode (local tools):
    ``SEMRUSH_TOKEN`` with a loopback ``SEMRUSH_BASE_URL``.
    """

    sweep_bucket: str = Field(alias="SWEEP_BUCKET", min_length=1)
    queue_url: str = Field(alias="QUEUE_URL", min_length=1)
    safety_margin_ms: int = Field(default=10000, ge=0, alias="SAFETY_MARGIN_MS")
    emitter_secret_id: OptionalText = Field(default=None, alias="IMS_EMITTER_SECRET_ID")
    """The emitter pair (JSON ``{"client_id", "client_secret", "promise_definition_id"}``) a
    real run mints each release's promise token with, from the operator's access token."""
    emitter_client_id: OptionalText = Field(default=None, alias="IMS_EMITTER_CLIENT_ID")
    emitter_client_secret: OptionalText = Field(
        default=None, alias="IMS_EMITTER_CLIENT_SECRET", repr=False
    )
    promise_definition_id: OptionalText = Field(default=None, alias="IMS_PROMISE_DEFINITION_ID")

    @model_validator(mode="after")
    def _ims_needs_the_key(self) -> Self:
        if self.ims is not None and self.ims.credentials_key_arn is None:
            raise ValueError(
                "IMS mode needs CREDENTIALS_KEY_ARN (the key of each run's token on its claim)"
            )
        return self

    @model_validator(mode="after")
    def _one_emitter_pair(self) -> Self:
        local = (self.emitter_client_id, self.emitter_client_secret, self.promise_definition_id)
        given = [value for value in local if value is not None]
        if not given:
            return self
        if self.emitter_secret_id is not None or len(given) != len(local):
            raise ValueError(
                "give the IMS emitter pair once: IMS_EMITTER_SECRET_ID, or all of "
                "IMS_EMITTER_CLIENT_ID, IMS_EMITTER_CLIENT_SECRET, IMS_PROMISE_DEFINITION_ID"
            )
        if self.ims is None or not is_loopback_origin(self.ims.host):
            raise ValueError(
                "IMS_EMITTER_CLIENT_ID/_SECRET are accepted only with a loopback IMS_HOST; "
                "use IMS_EMITTER_SECRET_ID"
            )
        return self

    @property
    def releases_carry_credentials(self) -> bool:
        """IMS mode with what a release's credential record needs: the emitter pair, the table."""
        emitter = self.emitter_secret_id is not None or self.emitter_client_id is not None
        return self.ims is not None and emitter and self.ims.credentials_table is not None


@runtime_checkable
class TimeLimited(Protocol):
    """A gateway that can bound its calls (requests, retries, backoff) to a time budget."""

    def limit_time(self, seconds: float | None) -> None:
        """Bound every later call to ``seconds`` from now (None: unbounded)."""
        ...


def limit_gateway_time(gateway: object, seconds: float) -> None:
    """Give a time-limitable gateway this invocation's budget, so no call outlives it."""
    if isinstance(gateway, TimeLimited):
        gateway.limit_time(max(0.0, seconds))


def build_semrush_client(
    semrush: SemrushSettings, tokens: TokenProvider | None = None
) -> SemrushClient:
    """The Semrush client over ``tokens``; without them, the static token (loopback only).

    In IMS mode the caller passes the holder of the current request's access token.
    """
    from ..adapters.semrush import SemrushClient, SemrushClientConfig, StaticTokenProvider

    if tokens is None:
        if semrush.token is None:
            raise ValueError("no Semrush token source: IMS mode needs the request token holder")
        tokens = StaticTokenProvider(semrush.token)
    return SemrushClient(
        semrush.base_url,
        tokens,
        config=SemrushClientConfig(timeout_s=semrush.timeout_s, max_retries=semrush.max_retries),
    )


def build_ims_consumer(
    ims: ImsSettings,
    *,
    call_budget_s: float,
    sleep: Callable[[float], None] | None = None,
    jitter: Callable[[], float] | None = None,
) -> ImsClient:
    """The IMS client with the consumer pair: from its secret, or the loopback-only env pair.

    ``sleep`` and ``jitter`` replace the client's pauses and its retry jitter's draws.
    """
    from ..adapters.ims_client import ImsClient, ImsClientConfig, ImsClientPair, read_ims_pair

    if ims.consumer_secret_id is not None:
        pair = read_ims_pair(
            ims.consumer_secret_id,
            "consumer",
            call_budget_s=call_budget_s,
            pair_name=ims.pair_name,
        )
    else:
        pair = ImsClientPair(ims.consumer_client_id or "", ims.consumer_client_secret or "")
    return ImsClient(
        ims.host,
        consumer=pair,
        config=ImsClientConfig(sleep=sleep or time.sleep, jitter=jitter or random.random),
    )


PairSource = Callable[[], "ImsClientPair"]


def consumer_pair_source(ims: ImsSettings, *, call_budget_s: float) -> PairSource | None:
    """How to read the consumer pair again: from its secret.

    None for the loopback env pair (a changed environment rebuilds the runtime anyway).
    """
    from ..adapters.ims_client import read_ims_pair

    secret_id, name = ims.consumer_secret_id, ims.pair_name
    if secret_id is None:
        return None
    return lambda: read_ims_pair(secret_id, "consumer", call_budget_s=call_budget_s, pair_name=name)


def renew_refused_pair(ims: object, source: PairSource | None) -> bool:
    """Read the consumer pair again when IMS refused it (``invalid_client``) since last read.

    A warm container must not keep a bad pair: after the secret is fixed, its next invocation
    uses the new one. One Secrets Manager read per invocation while the pair stays refused;
    a read that fails keeps the pair in hand (the refusal repeats, alarmed). True when renewed.
    """
    from ..adapters.ims_client import ImsClient, ImsPairSecretError
    from ..adapters.observability import logger

    if source is None or not isinstance(ims, ImsClient) or not ims.pair_refused:
        return False
    try:
        ims.use_consumer(source())
    except ImsPairSecretError as exc:
        logger.warning("IMS consumer pair refused and not read again", extra={"why": str(exc)})
        return False
    logger.info("IMS consumer pair read again after IMS refused it")
    return True


def ready_ims(
    ims: object, settings: ImsSettings | None, *, call_budget_s: float, seconds: float
) -> None:
    """Ready IMS for an invocation: a pair it refused is read again, then its calls are bounded.

    A pair IMS refused last time is read again from its secret (:func:`renew_refused_pair`: a
    warm container never keeps a bad one), each read bounded by ``call_budget_s``; then every
    later IMS call (retries and pauses included) is bounded to ``seconds`` from now.
    """
    source = (
        None if settings is None else consumer_pair_source(settings, call_budget_s=call_budget_s)
    )
    renew_refused_pair(ims, source)
    limit_gateway_time(ims, seconds)
