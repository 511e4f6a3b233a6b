"""Adobe IMS over httpx: promise tokens minted, exchanged and invalidated; the pairs that call it.

Facts this rests on (../shared/ims-promise-tokens.md): every call is an HTTPS ``POST`` with a
form-encoded body and no bearer header, answered with JSON; the emitter pair mints from the
user's access token, the consumer pair exchanges and invalidates; every exchange returns a NEW
promise token (the old one must not be relied on); a 401/403 at exchange means the promise is
dead (terminal); 429 and 5xx are transient and the upstream's client retries them at most
twice, ``1 s x 2^n`` with +/-20 % jitter, honouring ``Retry-After`` (it waits the larger). We
retry exactly that, plus transport failures, never past the deadline. IMS's ``invalid_client``
(or ``unauthorized_client``: a refusal of the pair itself, at any step and whatever its status)
is the deployment's configuration fault, never the user's: :class:`ImsClientRefusedError`, and
the client notes it (:attr:`ImsClient.pair_refused`) so its owner re-reads the pair.

An exchange whose answer is lost (a read timeout) may already have rolled the token upstream:
the retry then gets a 401 and ends :class:`NeedsReauthError`, the safe side (nothing runs
without a live authority; a human re-mints). Our own deadline never causes that: an exchange
attempt starts only when its whole timeout fits (else :class:`OutOfTimeError`, nothing sent).
Nothing raised, logged or repr'd here holds a token or a client secret: errors name the
operation, the status and IMS's short ``error`` code.

At the end, the pairs themselves: an IMS client pair kept in AWS Secrets Manager, the
worker's consumer or the Sweep's emitter. The secret's string is a JSON object with string
``client_id`` and ``client_secret``, and for an emitter also ``promise_definition_id``; or an
object of such pairs by NAME (a deployment may hold several: ims-promise-tokens.md), of which
the deployment names the one whose promise definition carries the ``semrush`` scope
(``IMS_PAIR_NAME``, default ``SEMRUSH``): an unknown name is a configuration error. Read once
per container (a pair does not rotate per request) through Powertools Parameters over a
Secrets Manager client with bounded timeouts and retries (:mod:`.aws_clients`). No error raised
there holds the secret's content: its role, its name and what is wrong with its shape only.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import SplitResult, urlsplit

import httpx

from ..domain.errors import (
    ImsClientRefusedError,
    ImsUnavailableError,
    MalformedExchangeError,
    MalformedResponseError,
    NeedsReauthError,
    OutOfTimeError,
)
from .aws_clients import AWS_CALL_BUDGET_S
from .http_edge import (
    ConfigurationError,
    OwnedHttpClient,
    is_dns_name,
    is_loopback_origin,
    redact_secret,
    retry_after_s,
    tls_context,
)

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient


TOKEN_PATH: Final = "/ims/token/v4"  # noqa: S105 - a route, not a password
INVALIDATE_PATH: Final = "/ims/invalidate_token/v2"
RETRY_DELAYS_S: Final = (1.0, 2.0)
"""The upstream's IMS client: at most two retries of a 429/5xx, 1 s then 2 s (``1 s x 2^n``)."""
RETRY_JITTER: Final = 0.2
"""+/-20 % on each of those delays (the upstream's client); ``Retry-After`` wins when larger."""
PAIR_REFUSALS: Final = frozenset({"invalid_client", "unauthorized_client"})
"""OAuth's codes for a refusal of the client pair itself (the shared doc: ``invalid_client``,
with 400 or 401): the deployment's configuration, not the user's promise."""
DEFAULT_TIMEOUT_S: Final = 5.0
"""Our per-request timeout: the time an attempt is sure to get (an exchange starts only when
it fits); the shared doc gives no IMS latency, token calls are small."""
PATIENT_EXCHANGE_S: Final = 10.0
"""How long an exchange waits for its answer when the time is there: the upstream client's
timeout. An exchange IMS processed but answered after our timeout has spent its token with the
answer lost (the next exchange is a 401: ``needsReauth`` for our impatience), so a started
exchange waits up to this long, never into the time its caller keeps after the answer."""

_ERROR_CODE: Final = re.compile(r"[a-z_]{1,40}")
_REFUSED: Final = frozenset({401, 403})


@dataclass(frozen=True)
class ImsClientPair:
    """One IMS client (the emitter's carries the promise definition it mints with).

    The secret never appears in a repr.
    """

    client_id: str
    client_secret: str = field(repr=False)
    promise_definition_id: str | None = None

    def __post_init__(self) -> None:
        if not self.client_id.strip() or not self.client_secret.strip():
            raise ConfigurationError("an IMS client pair needs a client id and a client secret")
        if self.promise_definition_id is not None and not self.promise_definition_id.strip():
            raise ConfigurationError("an IMS promise definition id must not be blank")

    def form(self) -> dict[str, str]:
        """The form fields every IMS call authenticates its client with."""
        return {"client_id": self.client_id, "client_secret": self.client_secret}


@dataclass(frozen=True)
class MintedPromise:
    """A promise token just minted; ``expires_in`` as IMS sent it (unit not documented)."""

    promise_token: str = field(repr=False)
    expires_in: int | None = None


@dataclass(frozen=True)
class ExchangedTokens:
    """The answer of an exchange: the user's fresh access token and the ROLLED promise token."""

    access_token: str = field(repr=False)
    promise_token: str = field(repr=False)
    expires_in: int | None = None
    promise_token_expires_in: int | None = None
    scope: str | None = None
    """The answer's ``scope`` when it sent one (the fixtures carry it; the five documented
    fields do not include it): read to tell a token without ``semrush`` apart."""

    def lacks_scope(self, scope: str) -> bool:
        """True only when IMS named the token's scopes and ``scope`` is not among them."""
        if self.scope is None:
            return False
        return scope not in {part for part in re.split(r"[\s,]+", self.scope) if part}


class ImsRequestError(Exception):
    """IMS refused a call for a reason a retry cannot fix (a 400: configuration or input).

    Attributes:
        status: The HTTP status.
        operation: ``mint``, ``exchange`` or ``invalidate``.
        error: IMS's short ``error`` code when it sent one (never a token).
    """

    def __init__(self, status: int, operation: str, error: str | None) -> None:
        self.status = status
        self.operation = operation
        self.error = error
        suffix = f" ({error})" if error else ""
        super().__init__(f"IMS {operation} answered {status}{suffix}")


def validate_ims_origin(url: str) -> str:
    """Check a configured IMS host and return it as an origin.

    An ``https://`` origin on a DNS name, or ``http(s)://`` on a loopback host (the local
    simulator); no user-info, path, query or fragment. A bare host (``ims-na1.adobelogin.com``,
    the upstream's form of ``IMS_HOST``, always HTTPS there) is that host over ``https://``.
    Messages never echo the value.

    Raises:
        ConfigurationError: The value is not an acceptable origin.
    """
    text = url.strip() if isinstance(url, str) else ""
    if text and "://" not in text:
        text = "https://" + text  # the upstream's bare host: always HTTPS
    parts = _origin_parts(text)
    if not is_loopback_origin(text) and (
        parts.scheme != "https" or not is_dns_name(parts.hostname or "")
    ):
        raise ConfigurationError("IMS host must be https on a DNS name (http only for loopback)")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def _origin_parts(text: str) -> SplitResult:
    """The URL's parts when it is a bare http(s) origin with a host; else a clear error."""
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        _ = parts.port  # raises on a bad port
    except ValueError:
        raise ConfigurationError("IMS host is not a valid URL") from None
    bare = parts.path in ("", "/") and not (parts.query or parts.fragment or "@" in parts.netloc)
    if not bare or parts.scheme not in ("https", "http") or not host:
        raise ConfigurationError(
            "IMS host must be an origin like https://ims.example.com (no path, query or user-info)"
        )
    return parts


@dataclass(frozen=True)
class ImsClientConfig:
    """How an :class:`ImsClient` calls: its timeout and the time it runs on.

    ``timeout_s``: per-request timeout, shortened to the time left before the deadline (never
    for an exchange: one starts only when the whole timeout fits). ``sleep`` sleeps between
    attempts, ``clock`` reads monotonic seconds for the deadline, ``jitter`` draws uniformly
    in [0, 1) for the retry jitter (all injected so tests never wait and are exact).
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[], float] = random.random


IMS_DEFAULTS = ImsClientConfig()
"""The default timeout, real time, real jitter."""


class ImsClient(OwnedHttpClient):
    """Mint, exchange and invalidate promise tokens, with timeouts, retries and a deadline.

    One ``httpx.Client`` is reused; an injected one stays the caller's. Redirects are never
    followed (one could carry the form, secrets included, elsewhere).

    Args:
        origin: The IMS origin (``IMS_HOST``), see :func:`validate_ims_origin`.
        emitter: The pair that mints (a service holding the user's request); None if unused.
        consumer: The pair that exchanges and invalidates (the worker); None if unused.
        http: An optional ready client (tests point it at the simulator).
        config: The timeout and the injected time (:class:`ImsClientConfig`).
    """

    def __init__(
        self,
        origin: str,
        *,
        emitter: ImsClientPair | None = None,
        consumer: ImsClientPair | None = None,
        http: httpx.Client | None = None,
        config: ImsClientConfig = IMS_DEFAULTS,
    ) -> None:
        timeout_s = config.timeout_s
        if timeout_s <= 0:
            raise ConfigurationError("IMS timeout must be positive")
        if emitter is not None and emitter.promise_definition_id is None:
            raise ConfigurationError("the IMS emitter pair needs a promise definition id")
        self.origin = validate_ims_origin(origin)
        self._emitter = emitter
        self._consumer = consumer
        self._timeout_s = timeout_s
        self._sleep = config.sleep
        self._clock = config.clock
        self._jitter = config.jitter
        self._deadline: float | None = None
        self._after_answer_s = 0.0
        self.pair_refused = False
        """True once IMS refused a pair of this client (``invalid_client``) since it was set:
        its owner re-reads the pair (:meth:`use_consumer`) instead of keeping a bad one."""
        self._owns_http = http is None
        self._http = (
            http if http is not None else httpx.Client(follow_redirects=False, verify=tls_context())
        )

    @property
    def timeout_s(self) -> float:
        """The per-request timeout: one attempt's longest wait (an exchange is never cut short)."""
        return self._timeout_s

    def keep_after_answer(self, seconds: float) -> None:
        """Keep ``seconds`` after an exchange's answer, before the deadline (the roll's store).

        An exchange waits longer than :attr:`timeout_s` only into time beyond that.
        """
        self._after_answer_s = max(0.0, seconds)

    def use_consumer(self, pair: ImsClientPair) -> None:
        """Exchange and invalidate with ``pair`` from now on (a pair read again).

        Clears :attr:`pair_refused`.
        """
        self._consumer = pair
        self.pair_refused = False

    def limit_time(self, seconds: float | None) -> None:
        """Bound every later call, retries and sleeps included, to ``seconds`` from now.

        A call with no time left raises :class:`OutOfTimeError` (transient) instead of starting.
        """
        self._deadline = None if seconds is None else self._clock() + seconds

    def mint(self, access_token: str) -> MintedPromise:
        """Mint a promise token from the user's IMS access token (the emitter pair).

        Raises:
            NeedsReauthError: IMS refused the user's access token (401/403).
            ImsClientRefusedError: IMS refused the emitter pair (``invalid_client``).
            ImsUnavailableError: 429/5xx/no answer after the retries, or no time left for one.
            ImsRequestError: Another refusal (400: a wrong promise definition, say).
            MalformedResponseError: A 2xx without a promise token.
        """
        pair = _required(self._emitter, "emitter", "mint")
        form = {
            **pair.form(),
            "grant_type": "promise",
            "promise_definition_id": pair.promise_definition_id or "",
            "authenticating_token": _token(access_token, "access token"),
        }
        body = self._json(self._call("mint", TOKEN_PATH, form), "mint")
        return MintedPromise(_string(body, "promise_token", "mint"), _int(body, "expires_in"))

    def exchange(self, promise_token: str) -> ExchangedTokens:
        """Exchange a promise token for the user's access token and a NEW promise token.

        Store the returned promise token before doing anything else: the one passed in must not
        be relied on afterwards.

        Raises:
            NeedsReauthError: IMS refused the exchange (401/403): terminal, never retried.
            ImsClientRefusedError: IMS refused the consumer pair (``invalid_client``): the
                promise was not looked at, it is still good.
            ImsUnavailableError: 429/5xx/no answer after the retries, or no time left for one.
            OutOfTimeError: A whole attempt (the full timeout) no longer fits before the
                deadline: nothing was sent, the token passed in is still good.
            ImsRequestError: Another refusal (400).
            MalformedExchangeError: A 2xx with the rolled promise token but no access token:
                store :attr:`~MalformedExchangeError.rolled` (the token passed in is spent).
            MalformedResponseError: A 2xx without a promise token.
        """
        pair = _required(self._consumer, "consumer", "exchange")
        form = {
            **pair.form(),
            "grant_type": "promise_exchange",
            "promise_token": _token(promise_token, "promise token"),
        }
        body = self._json(self._call("exchange", TOKEN_PATH, form, whole=True), "exchange")
        rolled = _string(body, "promise_token", "exchange")
        access = body.get("access_token")
        if not isinstance(access, str) or not access:
            raise MalformedExchangeError(rolled)
        return ExchangedTokens(
            access_token=access,
            promise_token=rolled,
            expires_in=_int(body, "expires_in"),
            promise_token_expires_in=_int(body, "promise_token_expires_in"),
            scope=body.get("scope") if isinstance(body.get("scope"), str) else None,
        )

    def invalidate(self, promise_token: str) -> bool:
        """Invalidate a promise token and its whole chain, best effort (the consumer pair).

        Returns:
            True when IMS confirmed (2xx); False when it refused or could not be reached in
            time: the caller logs that and goes on (the token still expires on its own).
        """
        pair = _required(self._consumer, "consumer", "invalidate")
        form = {
            **pair.form(),
            "token_type": "promise_token",
            "token": _token(promise_token, "promise token"),
        }
        try:
            self._call("invalidate", INVALIDATE_PATH, form)
        except (
            NeedsReauthError,
            ImsClientRefusedError,
            ImsUnavailableError,
            ImsRequestError,
            OutOfTimeError,
        ):
            return False
        return True

    # -- the request loop --------------------------------------------------------------------

    def _call(
        self, operation: str, path: str, form: Mapping[str, str], *, whole: bool = False
    ) -> httpx.Response:
        """Send with the retries; ``whole``: every attempt gets the full timeout or none starts.

        An exchange is ``whole``: it spends the token it carries, so one cut short by our own
        deadline could be processed upstream with its answer lost (a spent token on the record).
        """
        need_s = self._timeout_s if whole else 0.0
        for retry in range(len(RETRY_DELAYS_S) + 1):
            answer = self._attempt(form, path, need_s)
            try:
                response = _judged(answer, operation, form)
            except ImsClientRefusedError:
                self.pair_refused = True
                raise
            if response is not None:
                return response
            if retry == len(RETRY_DELAYS_S):
                break
            pause_s = self._pause_s(retry, answer)
            if not self._fits(pause_s + need_s):
                break
            self._sleep(pause_s)
        raise ImsUnavailableError()

    def _pause_s(self, retry: int, answer: httpx.Response | None) -> float:
        """The upstream's wait: ``1 s x 2^n`` +/-20 %, or ``Retry-After`` when that is longer."""
        base = RETRY_DELAYS_S[retry] * (1.0 + RETRY_JITTER * (2.0 * self._jitter() - 1.0))
        asked = None if answer is None else retry_after_s(answer.headers.get("Retry-After"))
        return max(base, asked or 0.0)

    def _attempt(self, form: Mapping[str, str], path: str, need_s: float) -> httpx.Response | None:
        """Send once within the time left (at least ``need_s``); None on a transport failure."""
        left = None if self._deadline is None else self._deadline - self._clock()
        if left is not None and (left <= 0 or left < need_s):
            raise OutOfTimeError()
        if need_s > 0:
            # A whole attempt (an exchange): its timeout is sure; it waits longer, up to the
            # upstream's, only into time the caller does not keep for after the answer.
            room = PATIENT_EXCHANGE_S if left is None else left - self._after_answer_s
            timeout = max(self._timeout_s, min(PATIENT_EXCHANGE_S, room))
        else:
            timeout = self._timeout_s if left is None else min(self._timeout_s, left)
        try:
            return self._http.post(
                self.origin + path,
                data=dict(form),
                headers={"Accept": "application/json"},
                timeout=httpx.Timeout(timeout),
            )
        except httpx.TransportError:
            # httpx's transport messages carry no form field; none is kept anyway.
            return None

    def _fits(self, pause_s: float) -> bool:
        return self._deadline is None or self._clock() + pause_s < self._deadline

    @staticmethod
    def _json(response: httpx.Response, operation: str) -> Mapping[str, Any]:
        try:
            body = response.json()
        except ValueError:
            raise MalformedResponseError(f"IMS {operation}: response body is not JSON") from None
        if not isinstance(body, Mapping):
            raise MalformedResponseError(f"IMS {operation}: response body is not an object")
        return body


def _judged(
    response: httpx.Response | None, operation: str, form: Mapping[str, str]
) -> httpx.Response | None:
    """A 2xx answer; None when worth retrying (no answer, 429/5xx); otherwise raises."""
    if response is None or _is_transient(response.status_code):
        return None
    if response.status_code < 300:
        return response
    if _raw_error_code(response) in PAIR_REFUSALS:
        # Matched against our own constants, so nothing of the answer is kept.
        raise ImsClientRefusedError()
    if response.status_code in _REFUSED:
        raise NeedsReauthError()
    raise ImsRequestError(response.status_code, operation, _error_code(response, form))


def _is_transient(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def _error_code(response: httpx.Response, form: Mapping[str, str]) -> str | None:
    """IMS's ``error`` field when it is a short code; anything else is dropped (could echo).

    A code that holds any form value we sent (a secret, a token) in any encoding is dropped too.
    """
    code = _raw_error_code(response)
    if code is None or not _ERROR_CODE.fullmatch(code):
        return None
    if any(redact_secret(code, value) != code for value in form.values()):
        return None
    return code


def _raw_error_code(response: httpx.Response) -> str | None:
    """The answer's ``error`` string as sent (compare only; :func:`_error_code` to keep one)."""
    try:
        body = response.json()
    except ValueError:
        return None
    code = body.get("error") if isinstance(body, Mapping) else None
    return code if isinstance(code, str) else None


def _required(pair: ImsClientPair | None, role: str, operation: str) -> ImsClientPair:
    if pair is None:
        raise ConfigurationError(f"IMS {operation} needs the {role} client pair")
    return pair


def _token(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"the {what} is blank")
    return value


def _string(body: Mapping[str, Any], key: str, operation: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedResponseError(f"IMS {operation}: answer has no {key}")
    return value


def _int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


PairRole = Literal["consumer", "emitter"]

DEFAULT_PAIR_NAME: Final = "SEMRUSH"
"""The dedicated Semrush pair's name (the shared doc's example)."""

PAIR_KEYS: Final[dict[PairRole, tuple[str, ...]]] = {
    "consumer": ("client_id", "client_secret"),
    "emitter": ("client_id", "client_secret", "promise_definition_id"),
}


class ImsPairSecretError(ConfigurationError):
    """The pair could not be read or is malformed (never quotes the secret)."""


def read_ims_pair(
    secret_id: str,
    role: PairRole,
    *,
    call_budget_s: float = AWS_CALL_BUDGET_S,
    client: SecretsManagerClient | None = None,
    pair_name: str = DEFAULT_PAIR_NAME,
) -> ImsClientPair:
    """The ``role`` pair stored in ``secret_id`` (the one named ``pair_name`` if it holds many).

    Raises:
        ImsPairSecretError: The secret could not be read, or is not that JSON object.
    """
    from aws_lambda_powertools.utilities.parameters import GetParameterError, SecretsProvider

    from .aws_clients import secretsmanager_client

    what = f"the IMS {role} secret {secret_id!r}"
    provider = SecretsProvider(boto3_client=client or secretsmanager_client(call_budget_s))
    try:
        value = provider.get(secret_id, force_fetch=True)
    except GetParameterError:
        # from None: the cause is botocore's, which names the secret and the failure only,
        # but a Powertools transform error could quote the value.
        raise ImsPairSecretError(f"could not read {what}") from None
    return _pair_from(value, PAIR_KEYS[role], what, pair_name)


def _pair_from(value: object, keys: tuple[str, ...], what: str, pair_name: str) -> ImsClientPair:
    document, what = _named_pair(_json_of(value, what), what, pair_name)
    if not isinstance(document, dict) or not all(
        isinstance(document.get(key), str) and document[key].strip() for key in keys
    ):
        raise ImsPairSecretError(
            f"{what} must be a JSON object with non-blank string " + ", ".join(keys)
        )
    return ImsClientPair(*(document[key].strip() for key in keys))


def _json_of(value: object, what: str) -> object:
    """The secret's JSON document (None when it is not a string at all)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    try:
        return json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        # from None: the decode error quotes the document, which is the secret.
        raise ImsPairSecretError(f"{what} is not JSON") from None


def _named_pair(document: object, what: str, pair_name: str) -> tuple[object, str]:
    """The deployment's pair of a secret of pairs by name, ``what`` then naming it.

    The deployment's is the one whose promise definition gives semrush; a secret of one pair
    is that pair.
    """
    if not isinstance(document, dict) or "client_id" in document:
        return document, what
    if pair_name not in document:
        raise ImsPairSecretError(f"{what} holds no pair named {pair_name!r} (IMS_PAIR_NAME)")
    return document[pair_name], f"{what} pair {pair_name!r}"
