"""Adobe IMS on the simulator's origin: users, access tokens and promise tokens.

Follows ``../shared/ims-promise-tokens.md`` and its section "Verified against the upstream's own
clients": every call is a ``POST`` whose form comes ``application/x-www-form-urlencoded`` (the
Go client, Adobe's token docs) or ``multipart/form-data`` (the upstream's published client),
answered with JSON.

- ``/ims/token/v4`` ``grant_type=promise`` (the EMITTER pair, ``promise_definition_id``,
  ``authenticating_token`` = a live user access token): ``{promise_token, token_type,
  expires_in}``.
- ``/ims/token/v4`` ``grant_type=promise_exchange`` (the CONSUMER pair, ``promise_token``):
  ``{access_token, token_type: "access_token", expires_in, promise_token,
  promise_token_expires_in, scope}``; the exchanged access token lives ``exchanged_ttl_s``
  (default 300 s: IMS's is about five minutes, ``expires_in: 299`` in the fixtures); the
  exchanged promise token stops working at once and the new one has a full time to live.
- ``/ims/invalidate_token/v2`` (the CONSUMER pair, ``token_type=promise_token``, ``token``):
  200 with an empty body; the whole chain the token belongs to is dead from then on. An
  unknown or expired token is ``400 invalid_parameter_value`` (as IMS answers).

Refusals carry IMS's codes: a wrong client id or secret ``401 invalid_client`` (OAuth's; the
fixtures have none, the doc allows 400 or 401); an expired, spent or invalidated promise token
at exchange ``401 invalid_promise_token``; a dead authenticating token at mint ``401
invalid_authenticating_token``; a malformed form ``400 invalid_request``. Where the shared doc
is silent the simulator chooses, and says so here: ``error_description`` beside ``error``;
``expires_in`` values are seconds; a spent token of a live chain, or one whose chain was
invalidated already, is still a known token, so invalidating it is a 200 (the chain dies, or
stays dead).

Scope: the exchanged token carries the ``semrush`` scope only when the promise was minted with
an emitter and exchanged with a consumer whose pairs' definition includes it (the deployment's
dedicated Semrush pair, ``ImsClientPair.semrush_scope``); ``other_pairs`` adds pairs without it
(a deployment's general pair). A Semrush route refuses an IMS bearer without the scope with the
same ``403 invalid access attempt`` a non-member gets: the shared doc says only that it "reads
as access denied for every request", so the simulator gives the caller nothing to tell it
apart by (the hard case). The exchange answer's ``scope`` field (the fixtures carry one) names
what the token holds.

Faults (``fail_next`` with ``op`` ``ims_mint``/``ims_exchange``/
``ims_invalidate``, ``error_rate``, latency) come from ``/__faults`` like the Semrush ones; a
``fail_next`` rule without an ``op`` and the ``error_rate`` draws apply to IMS calls too. An
injected fault is answered INSTEAD of the call (nothing is minted, spent or invalidated): a
5xx, 429 or held 504 never processed the request. An exchange of a spent token whose rolled
successor was never presented since (its answer never reached the caller: processed, then lost
in transit or before it was stored) is logged ``"answer_lost": true`` with its user, so a
harness can tell that ``needsReauth`` (ADR 0016's safe side) from any other.

Access tokens minted here start with :data:`ACCESS_TOKEN_PREFIX` and are JWT-shaped, their
claims naming the user (``user_id``, as IMS's tokens do). On the Semrush routes such a
bearer must be live (else 401), its user must have a Semrush record (else 403) and be a member
of the route's workspace (else ``403 invalid access attempt``); any other bearer is the static
one, checked as before (``/__auth``), so local tools keep working without IMS.

Control routes (loopback rules of :mod:`.control`): ``POST /__ims/users`` ``{"user",
"workspaces": [...], "semrush_record": true}`` -> ``{"access_token", "token_type",
"expires_in"}`` (memberships replace on a second call; every call mints a new access token),
``GET /__ims/clients`` (the two pairs) and ``GET /__ims/calls`` (the IMS call log).
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import json
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs

from .model import (
    _INVALID_JSON,
    MSG_INVALID_ACCESS,
    MSG_NOT_AUTHENTICATED,
    OP_IMS_EXCHANGE,
    OP_IMS_INVALIDATE,
    OP_IMS_MINT,
    SimResponse,
    SimulatorRequestError,
    _bad_request,
    _bearer_token,
    _number,
    _object,
    _parse_json_body,
)

IMS_PREFIX: Final = "/ims"
TOKEN_ROUTE: Final = "/ims/token/v4"  # noqa: S105 - a route, not a password
INVALIDATE_ROUTE: Final = "/ims/invalidate_token/v2"
ACCESS_TOKEN_PREFIX: Final = "sim-ims-at-"  # noqa: S105 - a prefix, not a secret
PROMISE_TOKEN_PREFIX: Final = "sim-ims-pt-"  # noqa: S105 - a prefix, not a secret
DEFAULT_PROMISE_TTL_S: Final = 3600.0
DEFAULT_ACCESS_TTL_S: Final = 86_400.0
"""A user's login token lives about a day (semrush-user-manager.md, Transport)."""
DEFAULT_EXCHANGED_TTL_S: Final = 300.0
"""The access token an exchange answers lives about five minutes (ims-promise-tokens.md:
``expires_in: 299`` in both published clients' fixtures)."""
SEMRUSH_SCOPE: Final = "semrush"
BASE_SCOPES: Final = ("openid", "AdobeID")

_EMPTY_OK: Final = SimResponse(200, "", content_type="application/json")


@dataclass(frozen=True)
class ImsClientPair:
    """One IMS client: id, secret and (emitter only) the promise definition it mints with."""

    client_id: str
    client_secret: str
    promise_definition_id: str | None = None
    semrush_scope: bool = True
    """The pair's promise definition includes the ``semrush`` scope (the dedicated pair)."""

    def as_dict(self) -> dict[str, Any]:
        """The pair as ``GET /__ims/clients`` shows it."""
        out: dict[str, Any] = {"client_id": self.client_id, "client_secret": self.client_secret}
        if self.promise_definition_id is not None:
            out["promise_definition_id"] = self.promise_definition_id
        return out


@dataclass(frozen=True)
class ImsConfig:
    """The simulator's IMS configuration (the defaults suit local use)."""

    emitter: ImsClientPair = ImsClientPair(
        "sim-emitter", "sim-emitter-secret", "sim-promise-definition"
    )
    consumer: ImsClientPair = ImsClientPair("sim-consumer", "sim-consumer-secret")
    promise_ttl_s: float = DEFAULT_PROMISE_TTL_S
    access_ttl_s: float = DEFAULT_ACCESS_TTL_S
    """A user's login token (``POST /__ims/users``)."""
    exchanged_ttl_s: float = DEFAULT_EXCHANGED_TTL_S
    """The access token an exchange answers."""
    other_pairs: tuple[tuple[ImsClientPair, ImsClientPair], ...] = ()
    """(emitter, consumer) pairs beside the Semrush pair, e.g. a general pair without scope."""

    @classmethod
    def from_mapping(cls, raw: Any) -> ImsConfig:
        """Parse ``{"emitter", "consumer", "promise_ttl_s", "access_ttl_s", "exchanged_ttl_s"}``."""
        body = _object(raw, "ims")
        default = cls()
        emitter = _pair(body.get("emitter"), "ims.emitter", default.emitter, emitter=True)
        consumer = _pair(body.get("consumer"), "ims.consumer", default.consumer, emitter=False)
        return cls(
            emitter=emitter,
            consumer=consumer,
            promise_ttl_s=_positive(body.get("promise_ttl_s", default.promise_ttl_s), "ims"),
            access_ttl_s=_positive(body.get("access_ttl_s", default.access_ttl_s), "ims"),
            exchanged_ttl_s=_positive(body.get("exchanged_ttl_s", default.exchanged_ttl_s), "ims"),
        )

    def emitters(self) -> tuple[ImsClientPair, ...]:
        """Every emitter pair (the Semrush one first)."""
        return (self.emitter, *(pair[0] for pair in self.other_pairs))

    def consumers(self) -> tuple[ImsClientPair, ...]:
        """Every consumer pair (the Semrush one first)."""
        return (self.consumer, *(pair[1] for pair in self.other_pairs))


def _pair(raw: Any, where: str, default: ImsClientPair, *, emitter: bool) -> ImsClientPair:
    if raw is None:
        return default
    values = _object(raw, where)
    keys = ("client_id", "client_secret", "promise_definition_id")[: 3 if emitter else 2]
    for key in keys:
        if not isinstance(values.get(key), str) or not values[key]:
            raise _bad_request(f"{where}.{key} must be a non-empty string")
    return ImsClientPair(*(values[key] for key in keys))


def _positive(value: Any, where: str) -> float:
    seconds = _number(value, where)
    if seconds <= 0:
        raise _bad_request(f"{where}: a time to live must be positive")
    return seconds


@dataclass
class _User:
    workspaces: frozenset[str]
    semrush_record: bool


@dataclass
class _Promise:
    user: str
    chain: int
    expires_at: float
    semrush_scope: bool = True
    """Minted by an emitter whose definition includes the ``semrush`` scope."""
    spent: bool = False
    presented: bool = False
    """Sent back to an exchange or an invalidate since it was issued."""
    successor: str | None = None
    """The token the exchange that spent this one answered with."""


@dataclass
class _Tokens:
    users: dict[str, _User] = field(default_factory=dict)
    access: dict[str, tuple[str, float]] = field(default_factory=dict)
    """access token -> (user, expires at)."""
    unscoped: set[str] = field(default_factory=set)
    """Access tokens without the ``semrush`` scope."""
    promises: dict[str, _Promise] = field(default_factory=dict)
    dead_chains: set[int] = field(default_factory=set)
    chains: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)


def _oauth_error(status: int, error: str, description: str) -> SimResponse:
    return SimResponse(status, {"error": error, "error_description": description})


_INVALID_CLIENT: Final = _oauth_error(401, "invalid_client", "invalid client id or secret")
_UNKNOWN_TOKEN: Final = _oauth_error(400, "invalid_parameter_value", "token is not valid")


class ImsState:
    """Users, their access tokens and promise-token chains, behind their own lock.

    Lock order: the Semrush state may call in here while holding its lock; nothing here calls
    back into it.

    Args:
        config: Client pairs and times to live.
        clock: Monotonic seconds (the simulator's), for every expiry.
    """

    def __init__(self, config: ImsConfig, clock: Callable[[], float]) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = _Tokens()

    def reset(self) -> None:
        """Forget every user, token and call."""
        with self._lock:
            self._tokens = _Tokens()

    # -- control -----------------------------------------------------------------------------

    def put_user(self, body: Any) -> dict[str, Any]:
        """``POST /__ims/users``: create or replace a user; return a new access token for it."""
        values = _object(body, "body")
        user = values.get("user")
        if not isinstance(user, str) or not user:
            raise _bad_request("user must be a non-empty string")
        workspaces = values.get("workspaces", [])
        if not isinstance(workspaces, list) or not all(
            isinstance(item, str) and item for item in workspaces
        ):
            raise _bad_request("workspaces must be a list of non-empty workspace ids")
        semrush_record = values.get("semrush_record", True)
        if not isinstance(semrush_record, bool):
            raise _bad_request("semrush_record must be a boolean")
        token = _access_token(user)
        with self._lock:
            self._tokens.users[user] = _User(frozenset(workspaces), semrush_record)
            self._tokens.access[token] = (user, self._clock() + self.config.access_ttl_s)
        return {
            "access_token": token,
            "token_type": "bearer",
            "expires_in": int(self.config.access_ttl_s),
        }

    def clients(self) -> dict[str, Any]:
        """``GET /__ims/clients``: what the emitter and the consumer pairs are."""
        return {
            "emitter": self.config.emitter.as_dict(),
            "consumer": self.config.consumer.as_dict(),
        }

    def calls(self) -> list[dict[str, Any]]:
        """The IMS call log, oldest first (never a token or a secret in it)."""
        with self._lock:
            return [dict(call) for call in self._tokens.calls]

    # -- the Semrush side --------------------------------------------------------------------

    @staticmethod
    def is_ims_bearer(authorization: str | None) -> bool:
        """True when the bearer has the shape of an access token minted here."""
        token = _bearer_token(authorization)
        return token is not None and token.startswith(ACCESS_TOKEN_PREFIX)

    def semrush_refusal(self, authorization: str | None, workspace_id: str) -> SimResponse | None:
        """The 401/403 a Semrush route gives this IMS bearer on ``workspace_id``, or None."""
        with self._lock:
            bearer = _bearer_token(authorization) or ""
            user = self._live_user(bearer)
            if user is None:
                return SimResponse(401, {"detail": MSG_NOT_AUTHENTICATED})
            if bearer in self._tokens.unscoped:
                # No semrush scope: "reads as access denied for every request" (the doc).
                return SimResponse(403, {"message": MSG_INVALID_ACCESS})
            record = self._tokens.users.get(user)
            if record is None or not record.semrush_record:
                # The doc: a user without a Semrush record gets 4xx on every call, for good.
                return SimResponse(403, {"message": MSG_INVALID_ACCESS})
            if workspace_id not in record.workspaces:
                return SimResponse(403, {"message": MSG_INVALID_ACCESS})
        return None

    def user_of(self, authorization: str | None) -> str | None:
        """The user an IMS bearer belongs to (live or not), for the call log; else None."""
        token = _bearer_token(authorization)
        if token is None or not token.startswith(ACCESS_TOKEN_PREFIX):
            return None
        with self._lock:
            entry = self._tokens.access.get(token)
        return None if entry is None else entry[0]

    def _live_user(self, access_token: str) -> str | None:
        entry = self._tokens.access.get(access_token)
        if entry is None or self._clock() >= entry[1]:
            return None
        return entry[0]

    # -- the IMS protocol --------------------------------------------------------------------

    def answer(self, op: str, form: Mapping[str, str]) -> SimResponse:
        """Answer one IMS call already routed to ``op`` (no fault injected); log it."""
        handlers: dict[str, Callable[[Mapping[str, str]], tuple[SimResponse, str | None]]] = {
            OP_IMS_MINT: self._mint,
            OP_IMS_EXCHANGE: self._exchange,
            OP_IMS_INVALIDATE: self._invalidate,
        }
        with self._lock:
            if op == OP_IMS_EXCHANGE and self._answer_was_lost(form):
                return self._refuse_lost_answer(form)
            try:
                response, user = handlers[op](form)
            except SimulatorRequestError as exc:
                response, user = _oauth_error(exc.status, "invalid_request", exc.message), None
            self.log_call(op, form.get("client_id"), response.status, user)
        return response

    def log_call(
        self, op: str, client_id: str | None, status: int, user: str | None, **extra: Any
    ) -> None:
        """Append to the IMS call log (callers hold the lock, or pass a faulted call)."""
        self._tokens.calls.append(
            {
                "op": op,
                "client_id": client_id,
                "status": status,
                "user": user,
                "t": self._clock(),
                **extra,
            }
        )

    def _answer_was_lost(self, form: Mapping[str, str]) -> bool:
        """The consumer exchanges a spent token whose exchange's answer never came back.

        The rolled token that exchange answered with was never presented since (to an exchange
        or an invalidate), and its chain is alive: the answer never reached the caller's record
        (lost in transit after IMS processed it, or lost by the caller before it was stored).
        """
        if self._client(form, self.config.consumers()) is None:
            return False
        promise = self._tokens.promises.get(form.get("promise_token", ""))
        if promise is None or not promise.spent or promise.successor is None:
            return False
        successor = self._tokens.promises.get(promise.successor)
        return (
            successor is not None
            and not successor.presented
            and promise.chain not in self._tokens.dead_chains
        )

    def _refuse_lost_answer(self, form: Mapping[str, str]) -> SimResponse:
        """The 401 of a token a lost answer spent, logged as such with its user."""
        response = _oauth_error(401, "invalid_promise_token", "promise_token is not valid")
        promise = self._tokens.promises[form.get("promise_token", "")]
        promise.presented = True
        client_id = form.get("client_id")
        self.log_call(OP_IMS_EXCHANGE, client_id, 401, promise.user, answer_lost=True)
        return response

    def log_fault(self, op: str, form: Mapping[str, str], status: int) -> None:
        """Log a call answered by an injected fault."""
        with self._lock:
            self.log_call(op, form.get("client_id"), status, None)

    @staticmethod
    def _client(form: Mapping[str, str], pairs: tuple[ImsClientPair, ...]) -> ImsClientPair | None:
        """The pair among ``pairs`` whose id and secret the form carries, else None."""
        client_id, client_secret = _field(form, "client_id"), _field(form, "client_secret")
        for pair in pairs:
            if client_id == pair.client_id and secrets.compare_digest(
                client_secret.encode(), pair.client_secret.encode()
            ):
                return pair
        return None

    def _mint(self, form: Mapping[str, str]) -> tuple[SimResponse, str | None]:
        emitter = self._client(form, self.config.emitters())
        if emitter is None:
            return _INVALID_CLIENT, None
        if _field(form, "promise_definition_id") != emitter.promise_definition_id:
            return _oauth_error(400, "invalid_request", "unknown promise_definition_id"), None
        user = self._live_user(_field(form, "authenticating_token"))
        if user is None:
            refusal = _oauth_error(
                401, "invalid_authenticating_token", "authenticating_token is not valid"
            )
            return refusal, None
        self._tokens.chains += 1
        token = self._new_promise(user, self._tokens.chains)
        self._tokens.promises[token].semrush_scope = emitter.semrush_scope
        body = {
            "promise_token": token,
            "token_type": "promise_token",
            "expires_in": int(self.config.promise_ttl_s),
        }
        return SimResponse(200, body), user

    def _exchange(self, form: Mapping[str, str]) -> tuple[SimResponse, str | None]:
        consumer = self._client(form, self.config.consumers())
        if consumer is None:
            return _INVALID_CLIENT, None
        promise = self._tokens.promises.get(_field(form, "promise_token"))
        if promise is not None:
            promise.presented = True
        if promise is None or not self._is_alive(promise):
            refusal = _oauth_error(401, "invalid_promise_token", "promise_token is not valid")
            return refusal, None
        # Every exchange rolls the token: the old one must not be relied on afterwards.
        promise.spent = True
        access = _access_token(promise.user)
        self._tokens.access[access] = (promise.user, self._clock() + self.config.exchanged_ttl_s)
        scoped = promise.semrush_scope and consumer.semrush_scope
        if not scoped:
            self._tokens.unscoped.add(access)
        promise.successor = self._new_promise(promise.user, promise.chain)
        self._tokens.promises[promise.successor].semrush_scope = promise.semrush_scope
        body = {
            "access_token": access,
            "token_type": "access_token",
            "expires_in": int(self.config.exchanged_ttl_s),
            "promise_token": promise.successor,
            "promise_token_expires_in": int(self.config.promise_ttl_s),
            "scope": ",".join((*BASE_SCOPES, SEMRUSH_SCOPE) if scoped else BASE_SCOPES),
        }
        return SimResponse(200, body), promise.user

    def _invalidate(self, form: Mapping[str, str]) -> tuple[SimResponse, str | None]:
        if self._client(form, self.config.consumers()) is None:
            return _INVALID_CLIENT, None
        if _field(form, "token_type") != "promise_token":
            return _oauth_error(400, "invalid_request", "token_type must be promise_token"), None
        promise = self._tokens.promises.get(_field(form, "token"))
        if promise is None or self._clock() >= promise.expires_at:
            return _UNKNOWN_TOKEN, None
        promise.presented = True
        # Rotation is not revocation; invalidation is: the whole chain dies.
        self._tokens.dead_chains.add(promise.chain)
        return _EMPTY_OK, promise.user

    def _is_alive(self, promise: _Promise) -> bool:
        return (
            not promise.spent
            and promise.chain not in self._tokens.dead_chains
            and self._clock() < promise.expires_at
        )

    def _new_promise(self, user: str, chain: int) -> str:
        token = PROMISE_TOKEN_PREFIX + secrets.token_urlsafe(32)
        self._tokens.promises[token] = _Promise(
            user, chain, self._clock() + self.config.promise_ttl_s
        )
        return token


def _access_token(user: str) -> str:
    """A fresh access token, JWT-shaped like IMS's, its claims naming the user (``user_id``).

    The worker compares that claim only (two requests of one user admitted by one read); the
    simulator itself never reads it back (a token is looked up whole).
    """
    claims = json.dumps({"user_id": user, "type": "access_token"}).encode()
    payload = base64.urlsafe_b64encode(claims).decode().rstrip("=")
    return f"{ACCESS_TOKEN_PREFIX}{_JWT_HEADER}.{payload}.{secrets.token_urlsafe(24)}"


_JWT_HEADER: Final = base64.urlsafe_b64encode(b'{"alg":"none"}').decode().rstrip("=")


def _field(form: Mapping[str, str], name: str) -> str:
    value = form.get(name)
    if not value:
        raise _bad_request(f"{name} is required")
    return value


def route_op(method: str, path: str, form: Mapping[str, str]) -> str | SimResponse:
    """The IMS operation of a request, or the 404/405/400 it gets."""
    if path not in (TOKEN_ROUTE, INVALIDATE_ROUTE):
        return SimResponse(404, {"error": "not_found", "error_description": "unknown route"})
    if method != "POST":
        return SimResponse(405, {"error": "method_not_allowed", "error_description": method})
    if path == INVALIDATE_ROUTE:
        return OP_IMS_INVALIDATE
    grant = form.get("grant_type")
    if grant == "promise":
        return OP_IMS_MINT
    if grant == "promise_exchange":
        return OP_IMS_EXCHANGE
    return _oauth_error(400, "unsupported_grant_type", "grant_type must be promise(_exchange)")


MULTIPART: Final = "multipart/form-data"


def parse_form(body: bytes, content_type: str | None = None) -> dict[str, str] | None:
    """A form as single values (the last one wins), or None when unreadable.

    ``multipart/form-data`` (with its boundary) when the content type says so, else
    form-urlencoded (as before: the content type is not required for it).
    """
    if content_type is not None and content_type.split(";")[0].strip().lower() == MULTIPART:
        return _multipart_form(body, content_type)
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    return {key: values[-1] for key, values in parsed.items()}


def _multipart_form(body: bytes, content_type: str) -> dict[str, str] | None:
    """The text fields of a ``multipart/form-data`` body, or None when it is not one."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart() or message.defects:
        return None
    form: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(name, str) or not isinstance(payload, bytes):
            return None
        try:
            form[name] = payload.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return form


def handle_control(ims: ImsState, method: str, path: str, body: bytes) -> SimResponse:
    """Answer ``/__ims/users``, ``/__ims/clients`` and ``/__ims/calls``."""
    routes = {"/__ims/users": "POST", "/__ims/clients": "GET", "/__ims/calls": "GET"}
    if path not in routes:
        return SimResponse(404, {"message": "unknown control route"})
    if routes[path] != method:
        return SimResponse(405, {"message": "method not allowed"})
    if path == "/__ims/clients":
        return SimResponse(200, ims.clients())
    if path == "/__ims/calls":
        return SimResponse(200, {"calls": ims.calls()})
    parsed = _parse_json_body(body)
    try:
        if parsed is _INVALID_JSON:
            raise _bad_request("request body must be JSON")
        return SimResponse(200, ims.put_user(parsed))
    except SimulatorRequestError as exc:
        return SimResponse(exc.status, {"message": exc.message})
