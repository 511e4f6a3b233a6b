"""The Semrush User Manager API over httpx: the domain's ``WorkspaceGateway`` plus child creation.

Facts this rests on (../shared/semrush-user-manager.md): the base is an https origin with the API
under ``/enterprise/users/api``; auth is ``Authorization: Bearer``; a transfer is an absolute set
and therefore idempotent, so it is retried like the reads; creating a child is not; 429 carries
``Retry-After``; the status route answers one object although the swagger says an array.

Nothing raised here holds the token or a full URL: errors name the operation and the status.
The client does not log; callers log the typed errors it raises.

In order: where the bearer token comes from (:class:`TokenProvider`: in IMS mode the current
request's freshly exchanged access token, held by :mod:`.request_authority` (the worker) or the
Sweep's :mod:`.session_token_holder`; :class:`StaticTokenProvider`, a fixed token, for the local
simulator only); the operations the client sends and the table of what it may send again (the
retry-safety rules in one place: which operation is idempotent (a transfer is an absolute set,
so it is; creating a child is not), which answers and transport failures are retried, and how
long a retry waits: ``Retry-After`` first, else an exponential backoff, each capped); the
client.

At the end, the strict reading of the upstream's JSON bodies into domain values: the domain
receives ``AiResources`` and never sees a response body. A missing or mistyped field raises
``MalformedResponseError`` naming it, because a silent 0 would over- or under-allocate. Two
shapes of ``/resources`` are known (the doc's "The tiered prompt shape"): the flat one
(``prompts``) and, since 2026-08, the tiered one (``daily_prompts`` + ``weekly_prompts``, no
``prompts``). They are read as the upstream did: flat ``prompts`` first; else both tiers
complete; else the shape is unrecognised, a malformed answer. The flat shape may carry a
``weekly_prompts`` of its own, so only ``daily_prompts`` (without ``prompts``) marks a tiered
body.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import quote

import httpx

from serenity_allocator.adapters.http_edge import (
    API_PATH,
    MAX_RETRIES,
    ConfigurationError,
    OwnedHttpClient,
    redact_secret,
    retry_after_s,
    tls_context,
    validate_base_url,
)
from serenity_allocator.domain.errors import (
    MalformedResponseError,
    OutOfTimeError,
    UpstreamError,
    UpstreamUnavailableError,
    WiringError,
)
from serenity_allocator.domain.model import (
    AiResources,
    Dimension,
    DimensionUsage,
    PromptTiers,
    Totals,
    WorkspaceRecord,
)
from serenity_allocator.domain.transfer import CALL_BUDGET_S

__all__ = [
    "API_PATH",
    "MAX_BACKOFF_S",
    "MAX_RETRY_AFTER_S",
    "ConfigurationError",
    "SemrushClient",
    "SemrushClientConfig",
]


# -- the bearer token -------------------------------------------------------------------------


class TokenProvider(Protocol):
    """Supplies the bearer token for the Semrush User Manager API."""

    def get_token(self, *, refresh: bool = False) -> str:
        """Return the current token; ``refresh=True`` bypasses any cache (after a 401)."""
        ...


class TokenProviderError(RuntimeError):
    """The token could not be obtained; the message never holds the token or secret content."""


class StaticTokenProvider:
    """A fixed token (local runs against the simulator, tests).

    Args:
        token: The bearer token; must be non-blank.
    """

    def __init__(self, token: str) -> None:
        if not token.strip():
            raise TokenProviderError("the Semrush token is blank")
        self._token = token

    def get_token(self, *, refresh: bool = False) -> str:
        """Return the fixed token; a refresh has nothing newer to fetch."""
        return self._token

    def __repr__(self) -> str:
        # The default dataclass-like repr would print the token into any debug output.
        return "StaticTokenProvider(token=***)"


# -- the operations and what may be sent again -----------------------------------------------

MAX_RETRY_AFTER_S: Final = 10.0
"""Ceiling on an honoured ``Retry-After``: a worker's time budget is seconds, not minutes."""

MAX_BACKOFF_S: Final = 8.0
"""Ceiling on one exponential backoff sleep."""

RETRY_AFTER_STATUSES: Final = frozenset({429, 503})
# Transport failures that prove the request never reached the server: safe to retry even for a
# non-idempotent call. A read timeout or a dropped connection may come after the server acted.
NOT_SENT_ERRORS: Final = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class Operation:
    """One User Manager route and whether sending it twice is harmless."""

    name: str
    method: str
    route: str
    """Path under the API base with ``{id}`` for the (quoted) workspace id."""
    idempotent: bool


# On a master id this is the org pool. Never ``/v1/workspaces/{id}/parent/resources``: that
# answers the workspace's OWN allocation, not the pool (the doc's read-side facts; pinned by
# tests/unit/adapters/test_settle_and_pool_reads.py).
READ_RESOURCES: Final = Operation(
    "read_resources", "GET", "/v1/workspaces/{id}/resources", idempotent=True
)
# An absolute set: sending the same totals twice moves nothing, so retrying is harmless.
TRANSFER: Final = Operation(
    "transfer", "POST", "/v2/workspaces/{id}/resources/transfer", idempotent=True
)
READ_STATUS: Final = Operation("read_status", "GET", "/v1/workspaces/{id}/status", idempotent=True)
LIST_FAMILY: Final = Operation("list_family", "GET", "/v1/workspaces/{id}/family", idempotent=True)
# A second POST after an unanswered first one could create a second child.
CREATE_CHILD: Final = Operation(
    "create_child", "POST", "/v2/workspaces/{id}/child", idempotent=False
)


def is_retryable_status(op: Operation, status: int) -> bool:
    """True when an answer with ``status`` may be sent again for ``op``."""
    if status == 429:
        # The rate limiter refused the request before it was handled: safe even to create.
        return True
    return op.idempotent and 500 <= status <= 599


def is_resendable(op: Operation, exc: httpx.TransportError) -> bool:
    """True when a transport failure may be sent again: idempotent, or provably never sent."""
    return op.idempotent or isinstance(exc, NOT_SENT_ERRORS)


def backoff_delay(base_s: float, retry: int) -> float:
    """The exponential backoff before retry number ``retry`` (0 first), capped."""
    return float(min(base_s * 2**retry, MAX_BACKOFF_S))


def retry_delay(status: int, retry_after: str | None, base_s: float, retry: int) -> float:
    """The pause before retrying an answer: ``Retry-After`` (capped) on 429/503, else backoff."""
    if status in RETRY_AFTER_STATUSES:
        seconds = retry_after_s(retry_after)
        if seconds is not None:
            return min(seconds, MAX_RETRY_AFTER_S)
    return backoff_delay(base_s, retry)


# -- the client ------------------------------------------------------------------------------


def _ai_body(totals: Totals) -> dict[str, Any]:
    # Both dimensions, always: a partial body would leave the other dimension to the upstream.
    return {"ai": {"projects": totals.projects, "prompts": totals.prompts}}


@dataclass(frozen=True)
class SemrushClientConfig:
    """How a :class:`SemrushClient` calls: its timeout, its retries and the time it runs on.

    ``timeout_s``: per-request timeout (connect, read, write and pool each). ``max_retries``:
    retries after the first attempt for a retryable failure. ``backoff_s``: base of the
    exponential backoff. ``sleep`` sleeps between attempts and ``clock`` reads monotonic
    seconds for the deadline (both injected so tests never wait).
    """

    timeout_s: float = CALL_BUDGET_S
    max_retries: int = MAX_RETRIES
    backoff_s: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


SEMRUSH_DEFAULTS = SemrushClientConfig()
"""A 15 s timeout, the default retries, real time."""


class SemrushClient(OwnedHttpClient):
    """The User Manager operations the allocator needs, with auth, timeouts and retries.

    Implements :class:`serenity_allocator.domain.ports.WorkspaceGateway` and adds
    :meth:`create_child`. One ``httpx.Client`` is reused for every call (connection pooling
    across warm invocations); an injected client stays owned by the caller, one built here is
    closed by :meth:`close`.

    Retries: 429, 5xx and transport errors (connection failures, timeouts) are retried up to
    ``max_retries`` times, sleeping ``Retry-After`` seconds when a 429/503 carries it (capped at
    :data:`MAX_RETRY_AFTER_S`), else ``backoff_s * 2**n`` (capped at :data:`MAX_BACKOFF_S`).
    ``create_child`` is retried only when the request provably never took effect (429, or a
    failure to connect). A 401 refreshes the token once and retries once, outside that budget.
    Which operation and which failure may be sent again: :mod:`.semrush`.

    Time: without a deadline one call can take ``(max_retries + 1) x timeout_s`` plus a
    ``Retry-After`` of up to 10 s per retry (65 s with the defaults, 15 s more after a 401), so
    what bounds a call in a Lambda is :meth:`limit_time`, which both handlers set to a deadline
    inside the invocation (at most its remaining time less ``SAFETY_MARGIN_MS``).

    Args:
        base_url: The API origin, see :func:`validate_base_url`.
        token_provider: Supplies the bearer token, refreshed once after a 401.
        http: An optional ready client (tests, custom transports); absolute URLs are used, so
            its own ``base_url`` does not matter.
        config: Timeout, retries and the injected time (:class:`SemrushClientConfig`).

    Raises:
        ConfigurationError: A bad base URL or negative retry settings.
    """

    def __init__(
        self,
        base_url: str,
        token_provider: TokenProvider,
        http: httpx.Client | None = None,
        *,
        config: SemrushClientConfig = SEMRUSH_DEFAULTS,
    ) -> None:
        timeout_s, max_retries, backoff_s = config.timeout_s, config.max_retries, config.backoff_s
        sleep, clock = config.sleep, config.clock
        if timeout_s <= 0:
            raise ConfigurationError("Semrush timeout must be positive")
        if max_retries < 0 or backoff_s < 0:
            raise ConfigurationError("Semrush retry settings must not be negative")
        self.origin = validate_base_url(base_url)
        self._api_url = self.origin + API_PATH
        self._tokens = token_provider
        self._timeout = httpx.Timeout(timeout_s)
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._sleep = sleep
        self._clock = clock
        self._deadline: float | None = None
        self._owns_http = http is None
        # Redirects are not followed: the API never redirects, and following one could carry
        # the bearer to wherever the redirect points.
        self._http = (
            http
            if http is not None
            else httpx.Client(timeout=self._timeout, follow_redirects=False, verify=tls_context())
        )

    def limit_time(self, seconds: float | None) -> None:
        """Bound every later call to ``seconds`` from now (None: unbounded).

        A Lambda sets this to its remaining time at the start of an invocation: then no
        attempt starts past the deadline, each attempt's timeout is cut to the time left, and a
        retry whose pause leaves no time for a request is not taken (the last answer's error is
        raised). A call with no time left raises :class:`OutOfTimeError` (transient) instead of
        being cut off mid-flight. httpx applies the timeout to each phase of a request
        (connect, write, every read), not to the whole exchange: the safety margin the
        handlers keep below the Lambda deadline absorbs that slack.
        """
        self._deadline = None if seconds is None else self._clock() + seconds

    def _time_left(self) -> float | None:
        return None if self._deadline is None else self._deadline - self._clock()

    def _fits(self, pause_s: float) -> bool:
        """True when a retry after ``pause_s`` still leaves time for a request."""
        left = self._time_left()
        return left is None or pause_s < left

    @property
    def max_call_duration_s(self) -> float:
        """Seconds one call takes when every attempt times out and every retry backs off.

        Not the bound of a call: a ``Retry-After`` (up to :data:`MAX_RETRY_AFTER_S` per retry)
        and the single 401 refresh retry come on top; the deadline set by :meth:`limit_time`
        is what bounds a call.
        """
        attempts = self._max_retries + 1
        sleeps = sum(self._backoff_delay(n) for n in range(self._max_retries))
        return attempts * self._timeout_s + sleeps

    # -- the gateway -------------------------------------------------------------------------

    def read_resources(self, workspace_id: str) -> AiResources:
        """Read a workspace's AI resources (the org pool when given a master id).

        Raises:
            UpstreamError: A non-2xx answer after retries.
            UpstreamUnavailableError: No answer (connection error or timeout) after retries.
            MalformedResponseError: A 2xx whose body breaks the documented shape.
        """
        body = self._json(self._call(READ_RESOURCES, workspace_id), READ_RESOURCES)
        return parse_ai_resources(body)

    def transfer(self, workspace_id: str, totals: Totals, *, include_prompts: bool = True) -> None:
        """Set the child's AI totals ABSOLUTELY, both dimensions in one body.

        ``include_prompts=False`` sends ``projects`` alone: a tiered workspace must never get a
        flat ``prompts`` (see :func:`.semrush.transfer_body`).

        The answer (the child's workspace object) is not read: the caller re-reads what it needs.

        Raises:
            UpstreamError: A non-2xx answer after retries (the caller classifies the 422s).
            UpstreamUnavailableError: No answer after retries.
        """
        self._call(TRANSFER, workspace_id, transfer_body(totals, include_prompts=include_prompts))

    def read_status(self, workspace_id: str) -> str:
        """Read the workspace's lifecycle status (``created``, ``not ready``, ...).

        Accepts the live API's single object and, leniently, the swagger's one-element array.

        Raises:
            UpstreamError: A non-2xx answer after retries.
            UpstreamUnavailableError: No answer after retries.
            MalformedResponseError: No string ``status`` in the body.
        """
        body = self._json(self._call(READ_STATUS, workspace_id), READ_STATUS)
        if isinstance(body, list) and len(body) == 1:
            body = body[0]
        status = body.get("status") if isinstance(body, Mapping) else None
        if not isinstance(status, str):
            raise MalformedResponseError("read_status: body has no string status")
        return status

    def list_family(self, parent_id: str) -> list[WorkspaceRecord]:
        """List the parent and all its descendants (a bare JSON array of workspace objects).

        Raises:
            UpstreamError: A non-2xx answer after retries.
            UpstreamUnavailableError: No answer after retries.
            MalformedResponseError: The body is not an array of workspace objects.
        """
        body = self._json(self._call(LIST_FAMILY, parent_id), LIST_FAMILY)
        if not isinstance(body, list):
            raise MalformedResponseError("list_family: body is not a JSON array")
        return [workspace_record(item, LIST_FAMILY.name) for item in body]

    def create_child(
        self, parent_id: str, title: str, resources: Totals | None = None
    ) -> WorkspaceRecord:
        """Create a child workspace under ``parent_id``; it starts ``not ready``.

        Not idempotent, so a 5xx or a timeout is not retried (the child may exist): the caller
        lists the family before trying again.

        Args:
            parent_id: The parent (master) workspace.
            title: The child's title.
            resources: Initial AI totals carved from the parent; ``None`` carves nothing (the
                swagger requires the ``resources`` key, so an empty object is sent).

        Raises:
            UpstreamError: A non-2xx answer.
            UpstreamUnavailableError: No answer.
            MalformedResponseError: The 2xx body is not a workspace object.
        """
        body = {"title": title, "resources": {} if resources is None else _ai_body(resources)}
        answer = self._json(self._call(CREATE_CHILD, parent_id, body), CREATE_CHILD)
        return workspace_record(answer, CREATE_CHILD.name)

    # -- the request loop --------------------------------------------------------------------

    def _call(
        self, op: Operation, workspace_id: str, body: dict[str, Any] | None = None
    ) -> httpx.Response:
        if not isinstance(workspace_id, str) or not workspace_id.strip():
            raise WiringError(f"{op.name}: workspace id must be a non-blank string")
        url = self._api_url + op.route.format(id=quote(workspace_id, safe=""))
        token = self._tokens.get_token()
        refreshed = False
        retry = 0
        while True:
            response = self._attempt(op, url, body, token, retry)
            if response is None:  # a transport failure, slept off: send again
                retry += 1
                continue
            status = response.status_code
            if 200 <= status <= 299:
                return response
            if status == 401 and not refreshed:
                # An expired token: ask for a fresh one once (IMS mode: the request's promise is
                # exchanged again); a second 401 is a real auth failure (accessDenied there).
                refreshed = True
                token = self._tokens.get_token(refresh=True)
                continue
            retryable = is_retryable_status(op, status)
            if self._slept_before_retry(retry, retryable, self._retry_delay(response, retry)):
                retry += 1
                continue
            # The domain classifies the raw answer; only the logged form is redacted.
            raise UpstreamError(
                status,
                response.text,
                op.name,
                shown=redact_secret(response.text, token),
                retry_after_s=retry_after_s(response.headers.get("Retry-After")),
            )

    def _attempt(
        self, op: Operation, url: str, body: dict[str, Any] | None, token: str, retry: int
    ) -> httpx.Response | None:
        """Send once within the time left; None when a transport failure may be retried."""
        left = self._time_left()
        if left is not None and left <= 0:
            raise OutOfTimeError()
        timeout = self._timeout if left is None else httpx.Timeout(min(self._timeout_s, left))
        try:
            return self._http.request(
                op.method,
                url,
                json=body,
                headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                timeout=timeout,
            )
        except httpx.TransportError as exc:
            # Only what the retry-safety table allows: a request that may have reached the
            # upstream is sent again only when the operation is idempotent.
            resendable = is_resendable(op, exc)
            if self._slept_before_retry(retry, resendable, self._backoff_delay(retry)):
                return None
            # The cause is kept for the traceback; httpx's messages carry no URL or header.
            raise UpstreamUnavailableError() from exc

    def _slept_before_retry(self, retry: int, allowed: bool, delay: float) -> bool:
        """Sleep ``delay`` and say True when another attempt is allowed and still fits."""
        if retry < self._max_retries and allowed and self._fits(delay):
            self._sleep(delay)
            return True
        return False

    def _backoff_delay(self, retry: int) -> float:
        return backoff_delay(self._backoff_s, retry)

    def _retry_delay(self, response: httpx.Response, retry: int) -> float:
        return retry_delay(
            response.status_code, response.headers.get("Retry-After"), self._backoff_s, retry
        )

    @staticmethod
    def _json(response: httpx.Response, op: Operation) -> Any:
        try:
            return response.json()
        except ValueError:
            # from None: the decoder's message quotes the body, which we do not need twice.
            raise MalformedResponseError(f"{op.name}: response body is not JSON") from None


def _count(value: Any, where: str) -> int:
    # bool is an int subclass in Python; a JSON true is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedResponseError(f"{where} must be an integer, got {type(value).__name__}")
    return value


_WHERE = "product_resources.ai.resources"
_TIERS = ("daily_prompts", "weekly_prompts")


def _dimension(block: Mapping[str, Any], key: str) -> DimensionUsage:
    where = f"{_WHERE}.{key}"
    raw = block.get(key)
    if not isinstance(raw, Mapping):
        raise MalformedResponseError(f"{where} is missing")
    for required in ("used", "total"):
        # A missing used/total must fail loudly: a silent 0 would over- or under-allocate.
        if raw.get(required) is None:
            raise MalformedResponseError(f"{where}.{required} is missing")
    drafted = raw.get("drafted")
    return DimensionUsage(
        used=_count(raw["used"], f"{where}.used"),
        total=_count(raw["total"], f"{where}.total"),
        drafted=0 if drafted is None else _count(drafted, f"{where}.drafted"),
    )


def parse_ai_resources(body: Any) -> AiResources:
    """Parse ``GET /v1/workspaces/{id}/resources`` in either shape; ``drafted`` defaults to 0.

    Raises:
        MalformedResponseError: a missing or mistyped field, or neither shape (naming it).
    """
    if not isinstance(body, Mapping):
        raise MalformedResponseError("resources body is not a JSON object")
    product = body.get("product_resources")
    ai = product.get("ai") if isinstance(product, Mapping) else None
    resources = ai.get("resources") if isinstance(ai, Mapping) else None
    if not isinstance(resources, Mapping):
        raise MalformedResponseError("product_resources.ai.resources is missing")
    projects = _dimension(resources, Dimension.PROJECTS.value)
    # ``weekly_prompts`` alone is part of the flat shape too: only ``daily_prompts`` says tiered.
    if Dimension.PROMPTS.value in resources or _TIERS[0] not in resources:
        return AiResources(
            projects=projects, prompts=_dimension(resources, Dimension.PROMPTS.value)
        )
    # Tiered: both tiers must be complete; half a tiered body is as malformed as no prompts.
    daily, weekly = (_dimension(resources, tier) for tier in _TIERS)
    return AiResources.tiered(projects, PromptTiers(daily=daily, weekly=weekly))


def transfer_body(totals: Totals, *, include_prompts: bool = True) -> dict[str, Any]:
    """The body of ``POST /v2/workspaces/{id}/resources/transfer``.

    Both dimensions, normally: a partial body would leave the other dimension to the upstream.
    Without prompts only for a tiered workspace, where that is exactly the point: nobody knows
    what a flat ``prompts`` does to its daily and weekly tiers.
    """
    ai: dict[str, int] = {"projects": totals.projects}
    if include_prompts:
        ai["prompts"] = totals.prompts
    return {"resources": {"ai": ai}}


def workspace_record(item: Any, operation: str) -> WorkspaceRecord:
    """One workspace object of a listing or a creation, read strictly (``operation`` names it)."""
    if not isinstance(item, Mapping):
        raise MalformedResponseError(f"{operation}: workspace is not a JSON object")
    workspace_id = item.get("id")
    status = item.get("status")
    title = item.get("title") or ""
    if not isinstance(workspace_id, str) or not workspace_id:
        raise MalformedResponseError(f"{operation}: workspace has no string id")
    if not isinstance(status, str):
        raise MalformedResponseError(f"{operation}: workspace has no string status")
    if not isinstance(title, str):
        raise MalformedResponseError(f"{operation}: workspace title is not a string")
    return WorkspaceRecord(
        id=workspace_id,
        title=title,
        status=status,
        parent_id=_parent_id(item, operation),
        ai_limits_enabled=_ai_limits_enabled(item, operation),
    )


def _parent_id(item: Mapping[str, Any], operation: str) -> str | None:
    parent_id = item.get("parent_id")
    if parent_id is None:
        # The swagger also has a nested ``parent: {id, title}``; take it when the flat field
        # is absent.
        parent = item.get("parent")
        parent_id = parent.get("id") if isinstance(parent, Mapping) else None
    if parent_id is None or parent_id == "":
        # A master workspace has no parent; an empty string means the same.
        return None
    if not isinstance(parent_id, str):
        raise MalformedResponseError(f"{operation}: workspace parent_id is not a string")
    return parent_id


def _ai_limits_enabled(item: Mapping[str, Any], operation: str) -> bool | None:
    # swagger: product_tiers[] of {product: {id: "ai" | "seo" | ..., limits_enabled}, tier}.
    tiers = item.get("product_tiers")
    if tiers is None:
        return None
    if not isinstance(tiers, list):
        raise MalformedResponseError(f"{operation}: workspace product_tiers is not an array")
    for tier in tiers:
        product = tier.get("product") if isinstance(tier, Mapping) else None
        if isinstance(product, Mapping) and product.get("id") == "ai":
            enabled = product.get("limits_enabled")
            if enabled is None:
                return None
            if not isinstance(enabled, bool):
                raise MalformedResponseError(f"{operation}: ai limits_enabled is not a boolean")
            return enabled
    return None
