"""A stateful, thread-safe stand-in for the Semrush User Manager API.

It serves the five operations the allocator uses, under ``/enterprise/users/api``, and follows
every fact of ``../shared/semrush-user-manager.md`` (the doc wins over the vendored swagger;
``contract/corrections.yaml`` CR2-CR4 are honoured: status is one object, transfer answers the
child's workspace object):

- ``GET  /v1/workspaces/{id}/resources``: ``product_resources.ai.resources.{projects, prompts,
  weekly_prompts}``, each ``{used, drafted, total}``; on a master id this is the org pool.
- ``POST /v2/workspaces/{id}/resources/transfer``: ABSOLUTE per dimension; units are conserved
  (raising a child by ``d`` takes ``d`` from its parent's total, lowering gives it back); a raise
  beyond the parent's free units (``total - used``) rejects the whole request with
  ``422 insufficient available units in subscription``; a dimension sent as 0 is silently
  ignored; after a transfer the child is ``not ready`` for ``not_ready_ms`` and a transfer that
  races it gets ``422 workspace not ready``.
- ``GET  /v1/workspaces/{id}/status``: one object ``{"status": ...}``.
- ``GET  /v1/workspaces/{parent}/family``: a bare array, the parent and all its descendants.
- ``POST /v2/workspaces/{parent}/child``: 200 with the child ``not ready``; it settles to
  ``created`` after ``not_ready_ms``; ``resources`` are carved from the parent (same rules).

Missing or refused bearer: ``401 {"detail": "Not authenticated"}``; unknown id:
``403 {"message": "invalid access attempt"}``. Ids listed in the ``stuck`` fault are zombies:
``not ready`` forever, and every transfer on them gets the not-ready 422.

Metered writes (Project Engine) are modelled by the control route ``POST /__usage``: it sets a
workspace's ``used``/``drafted`` (absolute values). Metering follows the ``limits_enabled`` flag
of the parent's ``ai`` product tier (a master's own flag for the master): under an unmetered
parent usage may exceed the total and nothing is refused; under a metered parent a usage that
would raise ``used`` above ``total`` is refused whole with the DISGUISED
``405 {"message": "AI quota allocation exhausted"}``, as the Project Engine gateway answers.

Control routes (no auth, loopback peers only, never in the call log): ``POST /__reset``,
``POST /__seed``, ``POST /__usage``, ``POST /__faults``, ``POST /__auth``, ``GET /__dump``,
``GET /__calls``, ``POST /__calls/clear``. See :class:`SimulatorState` for their bodies.

The state model (:class:`SimulatorState`) is independent of HTTP so a harness can drive it in
process; :func:`start_simulator` serves it on a background thread; ``configure``/``run`` are the
``serenity-allocator simulator`` subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import random
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

API_PREFIX = "/enterprise/users/api"

OP_READ_RESOURCES = "read_resources"
OP_TRANSFER = "transfer"
OP_STATUS = "status"
OP_FAMILY = "family"
OP_CREATE_CHILD = "create_child"
OPERATIONS = (OP_READ_RESOURCES, OP_TRANSFER, OP_STATUS, OP_FAMILY, OP_CREATE_CHILD)

STATUS_CREATED = "created"
STATUS_NOT_READY = "not ready"
WORKSPACE_STATUSES = (STATUS_CREATED, STATUS_NOT_READY, "error", "deleting")

DIMENSIONS = ("projects", "prompts", "weekly_prompts")
TRANSFERABLE_DIMENSIONS = ("projects", "prompts")

MSG_NOT_AUTHENTICATED = "Not authenticated"
MSG_INVALID_ACCESS = "invalid access attempt"
MSG_INSUFFICIENT = "insufficient available units in subscription"
MSG_NOT_READY = "workspace not ready"
MSG_QUOTA_EXHAUSTED = "AI quota allocation exhausted"

ERROR_RATE_KINDS = ("timeout", "5xx", "429", "not_ready")
FAULT_KEYS = frozenset(
    {
        "latency_ms",
        "not_ready_ms",
        "timeout_hold_ms",
        "error_rate",
        "stuck",
        "seed",
        "fail_next",
        "not_ready_next",
    }
)
DEFAULT_TIMEOUT_HOLD_MS = 20_000.0

# One (method, pattern, operation) per API route; the id is URL-decoded after matching.
_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("GET", re.compile(r"^/v1/workspaces/([^/]+)/resources$"), OP_READ_RESOURCES),
    ("POST", re.compile(r"^/v2/workspaces/([^/]+)/resources/transfer$"), OP_TRANSFER),
    ("GET", re.compile(r"^/v1/workspaces/([^/]+)/status$"), OP_STATUS),
    ("GET", re.compile(r"^/v1/workspaces/([^/]+)/family$"), OP_FAMILY),
    ("POST", re.compile(r"^/v2/workspaces/([^/]+)/child$"), OP_CREATE_CHILD),
)

# Bodies of the injected transient failures; 502 is a bare HTML page because the doc says error
# bodies are "occasionally a bare text/html string", and clients must survive that.
_HTML_502 = "<html><head><title>502 Bad Gateway</title></head><body>Bad Gateway</body></html>"
_DEFAULT_FAULT_BODIES: dict[int, Any] = {
    429: {"message": "rate limit exceeded"},
    500: {"message": "internal server error"},
    502: _HTML_502,
    503: {"message": "service unavailable"},
    504: {"message": "gateway timeout"},
    422: {"message": MSG_NOT_READY},
}

_INVALID_JSON = object()


class SimulatorRequestError(Exception):
    """A request the simulator refuses; carries the HTTP status and the ``message`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SimulatorControlError(Exception):
    """A control-route call made by :class:`SimulatorServer` answered non-2xx."""

    def __init__(self, status: int, body: Any, text: str) -> None:
        super().__init__(f"simulator control call failed with HTTP {status}: {text[:200]}")
        self.status = status
        self.body = body
        self.text = text


@dataclass(frozen=True)
class SimResponse:
    """An answer of the simulator: status, a JSON value (or a bare string served as HTML)."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class _Usage:
    used: int = 0
    drafted: int = 0
    total: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"used": self.used, "drafted": self.drafted, "total": self.total}


@dataclass
class _Workspace:
    id: str
    title: str
    parent_id: str | None
    base_status: str
    limits_enabled: bool
    ai: dict[str, _Usage]
    created_at: str
    not_ready_until: float = float("-inf")


@dataclass
class _FailRule:
    status: int
    count: int
    op: str | None
    workspace_id: str | None
    body: Any
    has_body: bool
    retry_after: float | None

    def matches(self, op: str, workspace_id: str) -> bool:
        return (self.op is None or self.op == op) and (
            self.workspace_id is None or self.workspace_id == workspace_id
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "count": self.count,
            "op": self.op,
            "workspace_id": self.workspace_id,
            "retry_after": self.retry_after,
        }
        if self.has_body:
            out["body"] = self.body
        return out


@dataclass
class _Faults:
    latency_ms: float = 0.0
    not_ready_ms: float = 0.0
    timeout_hold_ms: float = DEFAULT_TIMEOUT_HOLD_MS
    error_rate: dict[str, float] = field(default_factory=dict)
    stuck: set[str] = field(default_factory=set)
    seed: int | None = None
    fail_next: list[_FailRule] = field(default_factory=list)
    not_ready_next: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "latency_ms": self.latency_ms,
            "not_ready_ms": self.not_ready_ms,
            "timeout_hold_ms": self.timeout_hold_ms,
            "error_rate": dict(self.error_rate),
            "stuck": sorted(self.stuck),
            "seed": self.seed,
            "fail_next": [rule.as_dict() for rule in self.fail_next],
            "not_ready_next": dict(self.not_ready_next),
        }


# ---------------------------------------------------------------------------------------------
# Validation helpers (400 on anything malformed)
# ---------------------------------------------------------------------------------------------


def _bad_request(message: str) -> SimulatorRequestError:
    return SimulatorRequestError(400, message)


def _count(value: Any, where: str) -> int:
    # bool is an int subclass; a JSON true is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_request(f"{where} must be an integer")
    if value < 0:
        raise _bad_request(f"{where} must not be negative")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_request(f"{where} must be a number")
    if value < 0:
        raise _bad_request(f"{where} must not be negative")
    return float(value)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad_request(f"{where} must be a JSON object")
    return value


def _parse_ai_request(resources: Any, where: str) -> dict[str, int]:
    """The ``ai`` part of a transfer or create body: only projects and prompts, counts >= 0."""
    resources = _object(resources, where)
    ai = resources.get("ai")
    if ai is None:
        return {}
    ai = _object(ai, f"{where}.ai")
    unknown = set(ai) - set(TRANSFERABLE_DIMENSIONS)
    if unknown:
        raise _bad_request(f"{where}.ai has unknown keys: {', '.join(sorted(unknown))}")
    return {
        dim: _count(ai[dim], f"{where}.ai.{dim}")
        for dim in TRANSFERABLE_DIMENSIONS
        if ai.get(dim) is not None
    }


def is_loopback_peer(host: str) -> bool:
    """True when ``host`` (a peer IP address) is a loopback address, IPv4-mapped ones included.

    Control routes reshape the simulator's whole state, so only local processes may call them.
    """
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _match_route(method: str, path: str) -> tuple[str, str] | bool | None:
    """``(op, workspace_id)`` for an API route; ``False`` for a known path with the wrong method."""
    path_known = False
    for route_method, pattern, op in _ROUTES:
        match = pattern.match(path)
        if match is None:
            continue
        if route_method == method:
            return op, unquote(match.group(1))
        path_known = True
    return False if path_known else None


def _parse_json_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return _INVALID_JSON


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# ---------------------------------------------------------------------------------------------
# The state model
# ---------------------------------------------------------------------------------------------


class SimulatorState:
    """The simulated organisation: workspaces, faults, auth and the call log, behind one lock.

    Control operations (each also a ``/__*`` route taking the same JSON):

    - :meth:`reset`: back to the constructor's configuration, no workspaces, empty call log.
    - :meth:`seed`: upsert ``[{"id", "title", "parent_id", "status", "limits_enabled",
      "ai": {"projects": {used, drafted, total}, "prompts": {...}, "weekly_prompts": {...}}}]``.
      ``status`` defaults to ``created`` and is kept as seeded (a seeded ``not ready`` stays so);
      ``limits_enabled`` defaults to the parent's flag, ``True`` for a master.
    - :meth:`usage`: ``{"id", "projects": {"used", "drafted"}, "prompts": {...}}`` (absolute).
    - :meth:`set_faults`: ``latency_ms``, ``not_ready_ms``, ``timeout_hold_ms``, ``error_rate``
      (``{"5xx", "429", "timeout", "not_ready"}`` probabilities summing to at most 1, one
      seeded draw per request; ``not_ready`` applies to transfers only; ``timeout`` holds the
      request ``timeout_hold_ms`` then answers 504), ``stuck`` (zombie ids), ``seed``,
      ``fail_next`` (``[{"status", "count", "op", "workspace_id", "body", "retry_after"}]``,
      consumed in order by matching requests) and ``not_ready_next`` (``{id: n}``: the next
      ``n`` transfers on ``id`` get the not-ready 422); omitted keys keep their value.
    - :meth:`set_auth`: ``None`` accepts any non-empty bearer, a list accepts only those.
    - :meth:`dump`, :meth:`calls`, :meth:`clear_calls`.

    Args:
        accepted_tokens: bearer tokens to accept; ``None`` accepts any non-empty bearer.
        latency_ms: added to every API request, slept outside the lock so requests overlap.
        not_ready_ms: how long a child stays ``not ready`` after a transfer or its creation.
        timeout_hold_ms: how long an injected ``timeout`` holds the request before its 504.
        seed: seed of the random source used by ``error_rate`` (deterministic when given).
        clock: monotonic seconds; drives the not-ready window and the call log's ``t``.
        sleep: sleeps seconds; used for latency and timeout holds.
    """

    def __init__(
        self,
        *,
        accepted_tokens: Iterable[str] | None = None,
        latency_ms: float = 0.0,
        not_ready_ms: float = 0.0,
        timeout_hold_ms: float = DEFAULT_TIMEOUT_HOLD_MS,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()
        self._initial_tokens = None if accepted_tokens is None else frozenset(accepted_tokens)
        self._initial_faults = _Faults(
            latency_ms=_number(latency_ms, "latency_ms"),
            not_ready_ms=_number(not_ready_ms, "not_ready_ms"),
            timeout_hold_ms=_number(timeout_hold_ms, "timeout_hold_ms"),
            seed=seed,
        )
        self._accepted_tokens: frozenset[str] | None = self._initial_tokens
        self._faults = _Faults()
        self._rng = random.Random(seed)
        self._workspaces: dict[str, _Workspace] = {}
        self._calls: list[dict[str, Any]] = []
        self._seq = 0
        self._child_counter = 0
        self.reset()

    # -- control operations --------------------------------------------------------------------

    def reset(self) -> None:
        """Drop every workspace, the call log and the faults; restore the constructor's config."""
        with self._lock:
            initial = self._initial_faults
            self._faults = _Faults(
                latency_ms=initial.latency_ms,
                not_ready_ms=initial.not_ready_ms,
                timeout_hold_ms=initial.timeout_hold_ms,
                seed=initial.seed,
            )
            self._rng = random.Random(initial.seed)
            self._accepted_tokens = self._initial_tokens
            self._workspaces = {}
            self._calls = []
            self._seq = 0
            self._child_counter = 0

    def set_auth(self, tokens: Iterable[str] | None) -> None:
        """Accept only ``tokens`` from now on, or any non-empty bearer when ``None``."""
        if tokens is None:
            accepted = None
        else:
            if isinstance(tokens, str | bytes) or not isinstance(tokens, Iterable):
                raise _bad_request("tokens must be a list of strings or null")
            listed = list(tokens)
            if not all(isinstance(token, str) and token for token in listed):
                raise _bad_request("tokens must be non-empty strings")
            accepted = frozenset(listed)
        with self._lock:
            self._accepted_tokens = accepted

    def seed(self, workspaces: Any) -> int:
        """Upsert workspaces (seed shape, see the class docstring); return how many were seeded.

        The whole batch is validated first: a bad entry, an unknown ``parent_id`` or a parent
        cycle changes nothing.
        """
        if not isinstance(workspaces, list):
            raise _bad_request("workspaces must be a list")
        entries = [_object(raw, f"workspaces[{index}]") for index, raw in enumerate(workspaces)]
        ids = [entry.get("id") for entry in entries]
        for index, workspace_id in enumerate(ids):
            if not isinstance(workspace_id, str) or not workspace_id:
                raise _bad_request(f"workspaces[{index}].id must be a non-empty string")
        if len(set(ids)) != len(ids):
            raise _bad_request("workspaces has duplicate ids")
        with self._lock:
            merged = dict(self._workspaces)
            parsed = [self._parse_seed_entry(entry, index) for index, entry in enumerate(entries)]
            for workspace in parsed:
                merged[workspace.id] = workspace
            for workspace in parsed:
                if workspace.parent_id is not None and workspace.parent_id not in merged:
                    raise _bad_request(f"unknown parent_id for workspace {workspace.id}")
            _check_acyclic(merged)
            # limits_enabled defaults to the parent's flag, so resolve parents first.
            flags = {entry["id"]: entry.get("limits_enabled") for entry in entries}
            for workspace in parsed:
                if flags[workspace.id] is None:
                    workspace.limits_enabled = _inherited_flag(workspace, merged, flags)
            self._workspaces = merged
        return len(parsed)

    def usage(self, body: Any) -> dict[str, Any]:
        """Set a workspace's ``used``/``drafted`` (a Project Engine write); return it, seed shape.

        Raises:
            SimulatorRequestError: 400 malformed, 404 unknown id, or the disguised
                ``405 AI quota allocation exhausted`` when a metered workspace would go over.
        """
        body = _object(body, "body")
        workspace_id = body.get("id")
        if not isinstance(workspace_id, str) or not workspace_id:
            raise _bad_request("id must be a non-empty string")
        unknown = set(body) - {"id", *DIMENSIONS}
        if unknown:
            raise _bad_request(f"unknown keys: {', '.join(sorted(unknown))}")
        changes: dict[str, dict[str, int]] = {}
        for dim in DIMENSIONS:
            if dim not in body:
                continue
            values = _object(body[dim], dim)
            extra = set(values) - {"used", "drafted"}
            if extra:
                raise _bad_request(f"{dim} has unknown keys: {', '.join(sorted(extra))}")
            changes[dim] = {key: _count(values[key], f"{dim}.{key}") for key in values}
        with self._lock:
            workspace = self._workspaces.get(workspace_id)
            if workspace is None:
                raise SimulatorRequestError(404, "unknown workspace")
            if self._is_metered(workspace):
                for dim, values in changes.items():
                    current = workspace.ai[dim]
                    new_used = values.get("used", current.used)
                    if new_used > current.total and new_used > current.used:
                        raise SimulatorRequestError(405, MSG_QUOTA_EXHAUSTED)
            for dim, values in changes.items():
                current = workspace.ai[dim]
                current.used = values.get("used", current.used)
                current.drafted = values.get("drafted", current.drafted)
            return self._seed_shape(workspace)

    def set_faults(self, body: Any) -> dict[str, Any]:
        """Change the fault configuration (omitted keys keep their value); return all of it."""
        body = _object(body, "body")
        unknown = set(body) - FAULT_KEYS
        if unknown:
            raise _bad_request(f"unknown fault keys: {', '.join(sorted(unknown))}")
        updates: dict[str, Any] = {}
        for key in ("latency_ms", "not_ready_ms", "timeout_hold_ms"):
            if key in body:
                updates[key] = _number(body[key], key)
        if "error_rate" in body:
            updates["error_rate"] = _parse_error_rate(body["error_rate"])
        if "stuck" in body:
            stuck = body["stuck"]
            if not isinstance(stuck, list) or not all(isinstance(i, str) for i in stuck):
                raise _bad_request("stuck must be a list of workspace ids")
            updates["stuck"] = set(stuck)
        if "seed" in body:
            seed = body["seed"]
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise _bad_request("seed must be an integer or null")
            updates["seed"] = seed
        if "fail_next" in body:
            updates["fail_next"] = _parse_fail_next(body["fail_next"])
        if "not_ready_next" in body:
            raw = _object(body["not_ready_next"], "not_ready_next")
            updates["not_ready_next"] = {
                str(key): _count(value, f"not_ready_next.{key}") for key, value in raw.items()
            }
        with self._lock:
            for key, value in updates.items():
                setattr(self._faults, key, value)
            if "seed" in updates:
                self._rng = random.Random(updates["seed"])
            return self._faults.as_dict()

    def faults(self) -> dict[str, Any]:
        """The current fault configuration."""
        with self._lock:
            return self._faults.as_dict()

    def dump(self) -> dict[str, Any]:
        """``{"workspaces": [seed shape, effective status], "calls": [...], "faults": {...}}``."""
        with self._lock:
            return {
                "workspaces": [self._seed_shape(w) for w in self._workspaces.values()],
                "calls": [dict(call) for call in self._calls],
                "faults": self._faults.as_dict(),
            }

    def calls(self) -> list[dict[str, Any]]:
        """The call log of the five API operations, oldest first."""
        with self._lock:
            return [dict(call) for call in self._calls]

    def clear_calls(self) -> None:
        """Empty the call log."""
        with self._lock:
            self._calls = []

    def handle_control(self, method: str, path: str, *, body: bytes = b"") -> SimResponse:
        """Answer one control route (``/__reset``, ``/__seed``, ...); no auth, never logged.

        The HTTP layer refuses non-loopback peers before calling this.
        """
        known = {
            "/__reset": "POST",
            "/__seed": "POST",
            "/__usage": "POST",
            "/__faults": "POST",
            "/__auth": "POST",
            "/__dump": "GET",
            "/__calls": "GET",
            "/__calls/clear": "POST",
        }
        if path not in known:
            return SimResponse(404, {"message": "unknown control route"})
        if known[path] != method:
            return SimResponse(405, {"message": "method not allowed"})
        parsed = _parse_json_body(body)
        try:
            if parsed is _INVALID_JSON:
                raise _bad_request("request body must be JSON")
            return SimResponse(200, self._control_answer(path, parsed))
        except SimulatorRequestError as exc:
            return SimResponse(exc.status, {"message": exc.message})

    def _control_answer(self, path: str, body: Any) -> Any:
        if path == "/__reset":
            self.reset()
            return {"ok": True}
        if path == "/__seed":
            return {"seeded": self.seed(_object(body, "body").get("workspaces"))}
        if path == "/__usage":
            return self.usage(body)
        if path == "/__faults":
            return self.set_faults({} if body is None else body)
        if path == "/__auth":
            tokens = _object(body, "body").get("tokens")
            self.set_auth(tokens)
            # Never echo tokens back: they are secrets even in a simulator's answers.
            return {"restricted": tokens is not None, "count": len(tokens or ())}
        if path == "/__dump":
            return self.dump()
        if path == "/__calls":
            return {"calls": self.calls()}
        self.clear_calls()
        return {"ok": True}

    # -- the API -------------------------------------------------------------------------------

    def handle_api(
        self, method: str, path: str, *, authorization: str | None, body: bytes = b""
    ) -> SimResponse:
        """Answer one API request; ``path`` is relative to ``/enterprise/users/api``.

        Order: route, bearer (401), injected faults, then the operation itself (403 unknown id,
        400 malformed body, the 422s). Latency and timeout holds are slept outside the lock.
        """
        route = _match_route(method, path)
        if route is None:
            return SimResponse(404, {"message": "not found"})
        if not isinstance(route, tuple):
            # A plain 405, not the disguised quota one: the body never mentions quota.
            return SimResponse(405, {"message": "method not allowed"})
        op, workspace_id = route
        arrived = self.clock()
        parsed = _parse_json_body(body) if method == "POST" else None
        latency_s = self._faults.latency_ms / 1000.0
        if latency_s > 0:
            self.sleep(latency_s)
        with self._lock:
            response, hold_s = self._decide(op, workspace_id, authorization, parsed)
            self._seq += 1
            self._calls.append(
                {
                    "method": method,
                    "path": API_PREFIX + path,
                    "op": op,
                    "workspace_id": workspace_id,
                    "status": response.status,
                    "body": None if parsed is _INVALID_JSON else parsed,
                    "t": arrived,
                    "seq": self._seq,
                }
            )
        if hold_s > 0:
            self.sleep(hold_s)
        return response

    def _decide(
        self, op: str, workspace_id: str, authorization: str | None, body: Any
    ) -> tuple[SimResponse, float]:
        token = _bearer_token(authorization)
        if token is None or (
            self._accepted_tokens is not None and token not in self._accepted_tokens
        ):
            return SimResponse(401, {"detail": MSG_NOT_AUTHENTICATED}), 0.0
        injected = self._injected_fault(op, workspace_id)
        if injected is not None:
            return injected
        try:
            if op == OP_READ_RESOURCES:
                return self._read_resources(workspace_id), 0.0
            if op == OP_STATUS:
                return SimResponse(200, {"status": self._status_of(self._get(workspace_id))}), 0.0
            if op == OP_FAMILY:
                return self._family(workspace_id), 0.0
            if op == OP_TRANSFER:
                return self._transfer(workspace_id, body), 0.0
            return self._create_child(workspace_id, body), 0.0
        except SimulatorRequestError as exc:
            return SimResponse(exc.status, {"message": exc.message}), 0.0

    def _injected_fault(self, op: str, workspace_id: str) -> tuple[SimResponse, float] | None:
        for rule in self._faults.fail_next:
            if rule.matches(op, workspace_id):
                rule.count -= 1
                if rule.count <= 0:
                    self._faults.fail_next.remove(rule)
                body = rule.body if rule.has_body else _default_fault_body(rule.status)
                headers = {}
                if rule.retry_after is not None:
                    headers["Retry-After"] = _format_retry_after(rule.retry_after)
                return SimResponse(rule.status, body, headers), 0.0
        rates = self._faults.error_rate
        if not any(rates.values()):
            return None
        draw = self._rng.random()
        threshold = 0.0
        for kind in ERROR_RATE_KINDS:
            if kind == "not_ready" and op != OP_TRANSFER:
                continue
            threshold += rates.get(kind, 0.0)
            if draw >= threshold:
                continue
            if kind == "timeout":
                hold_s = self._faults.timeout_hold_ms / 1000.0
                return SimResponse(504, _DEFAULT_FAULT_BODIES[504]), hold_s
            if kind == "5xx":
                status = self._rng.choice((500, 502, 503))
                return SimResponse(status, _DEFAULT_FAULT_BODIES[status]), 0.0
            if kind == "429":
                return SimResponse(429, _DEFAULT_FAULT_BODIES[429]), 0.0
            return SimResponse(422, {"message": MSG_NOT_READY}), 0.0
        return None

    def _get(self, workspace_id: str) -> _Workspace:
        workspace = self._workspaces.get(workspace_id)
        if workspace is None:
            raise SimulatorRequestError(403, MSG_INVALID_ACCESS)
        return workspace

    def _read_resources(self, workspace_id: str) -> SimResponse:
        workspace = self._get(workspace_id)
        resources = {dim: workspace.ai[dim].as_dict() for dim in DIMENSIONS}
        return SimResponse(200, {"product_resources": {"ai": {"resources": resources}}})

    def _family(self, workspace_id: str) -> SimResponse:
        root = self._get(workspace_id)
        children: dict[str, list[_Workspace]] = {}
        for workspace in self._workspaces.values():
            if workspace.parent_id is not None:
                children.setdefault(workspace.parent_id, []).append(workspace)
        family: list[dict[str, Any]] = []
        pending = [root]
        while pending:
            current = pending.pop(0)
            family.append(self._workspace_object(current))
            pending.extend(children.get(current.id, []))
        return SimResponse(200, family)

    def _transfer(self, workspace_id: str, body: Any) -> SimResponse:
        child = self._get(workspace_id)
        if body is _INVALID_JSON or not isinstance(body, Mapping):
            raise _bad_request("request body must be a JSON object")
        if "resources" not in body:
            raise _bad_request("resources is required")
        requested = _parse_ai_request(body["resources"], "resources")
        if child.parent_id is None:
            raise _bad_request("workspace has no parent to transfer from")
        self._refuse_if_not_ready(child)
        parent = self._workspaces[child.parent_id]
        # A 0 is silently ignored by the gateway (the doc): nothing moves for that dimension.
        deltas = {
            dim: value - child.ai[dim].total for dim, value in requested.items() if value != 0
        }
        self._carve(parent, child, deltas)
        self._start_not_ready_window(child)
        return SimResponse(200, self._workspace_object(child))

    def _create_child(self, parent_id: str, body: Any) -> SimResponse:
        parent = self._get(parent_id)
        if body is _INVALID_JSON or not isinstance(body, Mapping):
            raise _bad_request("request body must be a JSON object")
        title = body.get("title")
        if not isinstance(title, str) or not title.strip():
            raise _bad_request("title is required")
        resources = body.get("resources")
        requested = {} if resources is None else _parse_ai_request(resources, "resources")
        child = _Workspace(
            id=self._next_child_id(),
            title=title,
            parent_id=parent.id,
            base_status=STATUS_CREATED,
            limits_enabled=parent.limits_enabled,
            ai={dim: _Usage() for dim in DIMENSIONS},
            created_at=_now_iso(),
        )
        self._carve(parent, child, {dim: v for dim, v in requested.items() if v != 0})
        self._workspaces[child.id] = child
        self._start_not_ready_window(child)
        created = self._workspace_object(child)
        # The doc: create answers 200 with the child "not ready", whatever the window length.
        created["status"] = STATUS_NOT_READY
        return SimResponse(200, created)

    def _carve(self, parent: _Workspace, child: _Workspace, deltas: Mapping[str, int]) -> None:
        # All or nothing: every raise is checked against the parent's free units first.
        for dim, delta in deltas.items():
            pool = parent.ai[dim]
            if delta > 0 and delta > pool.total - pool.used:
                raise SimulatorRequestError(422, MSG_INSUFFICIENT)
        for dim, delta in deltas.items():
            parent.ai[dim].total -= delta
            child.ai[dim].total += delta

    def _refuse_if_not_ready(self, child: _Workspace) -> None:
        pending = self._faults.not_ready_next.get(child.id, 0)
        if pending > 0:
            if pending == 1:
                del self._faults.not_ready_next[child.id]
            else:
                self._faults.not_ready_next[child.id] = pending - 1
            raise SimulatorRequestError(422, MSG_NOT_READY)
        if self._status_of(child) != STATUS_CREATED:
            raise SimulatorRequestError(422, MSG_NOT_READY)

    def _start_not_ready_window(self, workspace: _Workspace) -> None:
        if self._faults.not_ready_ms > 0:
            workspace.not_ready_until = self.clock() + self._faults.not_ready_ms / 1000.0

    def _status_of(self, workspace: _Workspace) -> str:
        if workspace.id in self._faults.stuck:
            return STATUS_NOT_READY
        if workspace.base_status != STATUS_CREATED:
            return workspace.base_status
        if self.clock() < workspace.not_ready_until:
            return STATUS_NOT_READY
        return STATUS_CREATED

    def _is_metered(self, workspace: _Workspace) -> bool:
        # The doc: a parent whose ai product has limits_enabled false does not meter AI writes.
        if workspace.parent_id is None:
            return workspace.limits_enabled
        return self._workspaces[workspace.parent_id].limits_enabled

    def _next_child_id(self) -> str:
        while True:
            self._child_counter += 1
            candidate = f"sim-ws-{self._child_counter:06d}"
            if candidate not in self._workspaces:
                return candidate

    def _workspace_object(self, workspace: _Workspace) -> dict[str, Any]:
        """The workspace as the API serves it (swagger ``handlers.workspaceResponse``)."""
        out: dict[str, Any] = {
            "id": workspace.id,
            "title": workspace.title,
            "status": self._status_of(workspace),
        }
        if workspace.parent_id is not None:
            # A master has no parent: the keys are omitted rather than null (swagger: string).
            parent = self._workspaces.get(workspace.parent_id)
            out["parent_id"] = workspace.parent_id
            out["parent"] = {
                "id": workspace.parent_id,
                "title": parent.title if parent is not None else "",
            }
        out["is_master"] = workspace.parent_id is None
        out["created_at"] = workspace.created_at
        out["products"] = ["ai", "seo"]
        out["product_tiers"] = [
            {
                "product": {"id": "ai", "name": "AI", "limits_enabled": workspace.limits_enabled},
                "tier": {"id": "ai-enterprise", "name": "Enterprise", "rank": 3},
            },
            {
                "product": {"id": "seo", "name": "SEO", "limits_enabled": True},
                "tier": {"id": "seo-enterprise", "name": "Enterprise", "rank": 3},
            },
        ]
        return out

    def _seed_shape(self, workspace: _Workspace) -> dict[str, Any]:
        return {
            "id": workspace.id,
            "title": workspace.title,
            "parent_id": workspace.parent_id,
            "status": self._status_of(workspace),
            "limits_enabled": workspace.limits_enabled,
            "ai": {dim: workspace.ai[dim].as_dict() for dim in DIMENSIONS},
        }

    def _parse_seed_entry(self, entry: Mapping[str, Any], index: int) -> _Workspace:
        where = f"workspaces[{index}]"
        workspace_id: str = entry["id"]
        title = entry.get("title", workspace_id)
        if not isinstance(title, str):
            raise _bad_request(f"{where}.title must be a string")
        parent_id = entry.get("parent_id")
        if parent_id is not None and (not isinstance(parent_id, str) or not parent_id):
            raise _bad_request(f"{where}.parent_id must be a non-empty string or null")
        if parent_id == workspace_id:
            raise _bad_request(f"{where} cannot be its own parent")
        status = entry.get("status", STATUS_CREATED)
        if status not in WORKSPACE_STATUSES:
            raise _bad_request(f"{where}.status must be one of {', '.join(WORKSPACE_STATUSES)}")
        limits_enabled = entry.get("limits_enabled")
        if limits_enabled is not None and not isinstance(limits_enabled, bool):
            raise _bad_request(f"{where}.limits_enabled must be a boolean or null")
        ai_raw = _object(entry.get("ai") or {}, f"{where}.ai")
        unknown = set(ai_raw) - set(DIMENSIONS)
        if unknown:
            raise _bad_request(f"{where}.ai has unknown keys: {', '.join(sorted(unknown))}")
        ai: dict[str, _Usage] = {}
        for dim in DIMENSIONS:
            raw = _object(ai_raw.get(dim) or {}, f"{where}.ai.{dim}")
            ai[dim] = _Usage(
                used=_count(raw.get("used", 0), f"{where}.ai.{dim}.used"),
                drafted=_count(raw.get("drafted", 0), f"{where}.ai.{dim}.drafted"),
                total=_count(raw.get("total", 0), f"{where}.ai.{dim}.total"),
            )
        return _Workspace(
            id=workspace_id,
            title=title,
            parent_id=parent_id,
            base_status=status,
            limits_enabled=True if limits_enabled is None else limits_enabled,
            ai=ai,
            created_at=_now_iso(),
        )


def _check_acyclic(workspaces: Mapping[str, _Workspace]) -> None:
    for start in workspaces.values():
        seen = {start.id}
        current = start.parent_id
        while current is not None:
            if current in seen:
                raise _bad_request(f"parent cycle through workspace {start.id}")
            seen.add(current)
            parent = workspaces.get(current)
            current = parent.parent_id if parent is not None else None


def _inherited_flag(
    workspace: _Workspace, merged: Mapping[str, _Workspace], flags: Mapping[str, Any]
) -> bool:
    current = workspace
    while current.parent_id is not None:
        parent = merged[current.parent_id]
        explicit = flags.get(parent.id)
        if parent.id not in flags:
            return parent.limits_enabled
        if explicit is not None:
            return bool(explicit)
        current = parent
    return True


def _parse_error_rate(raw: Any) -> dict[str, float]:
    rates = _object(raw, "error_rate")
    unknown = set(rates) - set(ERROR_RATE_KINDS)
    if unknown:
        raise _bad_request(f"error_rate has unknown kinds: {', '.join(sorted(unknown))}")
    parsed = {kind: _number(value, f"error_rate.{kind}") for kind, value in rates.items()}
    if sum(parsed.values()) > 1.0 + 1e-9:
        raise _bad_request("error_rate probabilities must sum to at most 1")
    return parsed


def _parse_fail_next(raw: Any) -> list[_FailRule]:
    if not isinstance(raw, list):
        raise _bad_request("fail_next must be a list")
    rules = []
    for index, item in enumerate(raw):
        where = f"fail_next[{index}]"
        entry = _object(item, where)
        status = entry.get("status")
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise _bad_request(f"{where}.status must be an HTTP status code")
        count = _count(entry.get("count", 1), f"{where}.count")
        if count < 1:
            raise _bad_request(f"{where}.count must be at least 1")
        op = entry.get("op")
        if op is not None and op not in OPERATIONS:
            raise _bad_request(f"{where}.op must be one of {', '.join(OPERATIONS)} or null")
        workspace_id = entry.get("workspace_id")
        if workspace_id is not None and not isinstance(workspace_id, str):
            raise _bad_request(f"{where}.workspace_id must be a string or null")
        retry_after = entry.get("retry_after")
        rules.append(
            _FailRule(
                status=status,
                count=count,
                op=op,
                workspace_id=workspace_id,
                body=entry.get("body"),
                has_body="body" in entry,
                retry_after=None
                if retry_after is None
                else _number(retry_after, f"{where}.retry_after"),
            )
        )
    return rules


def _default_fault_body(status: int) -> Any:
    if status in _DEFAULT_FAULT_BODIES:
        return _DEFAULT_FAULT_BODIES[status]
    try:
        return {"message": HTTPStatus(status).phrase.lower()}
    except ValueError:
        return {"message": "error"}


def _format_retry_after(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


# ---------------------------------------------------------------------------------------------
# The HTTP layer
# ---------------------------------------------------------------------------------------------


class _SimulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Benchmarks open bursts of connections; the default backlog of 5 would refuse some.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], state: SimulatorState) -> None:
        self.state = state
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _SimulatorHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (e.g. after its own timeout) is normal here, not an error.
        pass


class _SimulatorHTTPServerV6(_SimulatorHTTPServer):
    address_family = socket.AF_INET6


class _SimulatorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: thousands of calls must not pay a connect each
    disable_nagle_algorithm = True  # small responses on kept-alive sockets would wait ~40 ms
    server: _SimulatorHTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request access log: benchmarks push thousands of requests."""

    def do_GET(self) -> None:
        """Serve a GET."""
        self._dispatch("GET")

    def do_POST(self) -> None:
        """Serve a POST."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """Serve a PUT (always a plain 405 or 404)."""
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        """Serve a PATCH (always a plain 405 or 404)."""
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        """Serve a DELETE (always a plain 405 or 404)."""
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        try:
            raw_body = self._read_body()
        except ValueError:
            self._send(SimResponse(400, {"message": "bad Content-Length"}))
            return
        path = urlsplit(self.path).path
        state = self.server.state
        if path.startswith("/__"):
            response = self._control(method, path, raw_body)
        elif path.startswith(API_PREFIX + "/"):
            response = state.handle_api(
                method,
                path[len(API_PREFIX) :],
                authorization=self.headers.get("Authorization"),
                body=raw_body,
            )
        else:
            response = SimResponse(404, {"message": "not found"})
        self._send(response)

    def _control(self, method: str, path: str, raw_body: bytes) -> SimResponse:
        if not is_loopback_peer(str(self.client_address[0])):
            return SimResponse(403, {"message": "control routes accept loopback clients only"})
        return self.server.state.handle_control(method, path, body=raw_body)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # Drain trailers up to the blank line that ends the message.
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _send(self, response: SimResponse) -> None:
        if isinstance(response.body, str):
            payload = response.body.encode("utf-8")
            content_type = "text/html; charset=utf-8"
        else:
            payload = json.dumps(response.body, separators=(",", ":")).encode("utf-8")
            content_type = "application/json"
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its own timeout): nothing left to answer.
            self.close_connection = True


# ---------------------------------------------------------------------------------------------
# The server handle
# ---------------------------------------------------------------------------------------------


class SimulatorServer:
    """A running simulator: its URLs, its state, and helpers calling the control routes over HTTP.

    Use it as a context manager (``with start_simulator() as sim:``) or call :meth:`stop`.
    """

    def __init__(self, httpd: _SimulatorHTTPServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self.state = httpd.state
        address = httpd.server_address
        self.host = str(address[0])
        self.port = int(address[1])
        # A wildcard bind is reached through loopback, which control routes also require.
        reach = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        self.origin = (
            f"http://[{reach}]:{self.port}" if ":" in reach else f"http://{reach}:{self.port}"
        )
        self.api_url = self.origin + API_PREFIX
        # Control calls must never go through a proxy taken from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def stop(self) -> None:
        """Stop serving, close idle kept-alive connections and release the port."""
        self._httpd.shutdown()
        with self._httpd.connections_lock:
            open_connections = list(self._httpd.connections)
        for connection in open_connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SimulatorServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def reset(self) -> None:
        """``POST /__reset``."""
        self._control("POST", "/__reset", {})

    def seed(self, workspaces: list[dict[str, Any]]) -> int:
        """``POST /__seed``; return how many workspaces were seeded."""
        answer = self._control("POST", "/__seed", {"workspaces": workspaces})
        return int(answer["seeded"])

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /__usage``; a refused metered write raises :class:`SimulatorControlError` 405."""
        answer: dict[str, Any] = self._control("POST", "/__usage", body)
        return answer

    def faults(self, **kwargs: Any) -> dict[str, Any]:
        """``POST /__faults`` with the given keys; return the whole fault configuration."""
        answer: dict[str, Any] = self._control("POST", "/__faults", kwargs)
        return answer

    def set_auth(self, tokens: list[str] | None) -> None:
        """``POST /__auth``: accept only ``tokens``, or any non-empty bearer when ``None``."""
        self._control("POST", "/__auth", {"tokens": tokens})

    def dump(self) -> dict[str, Any]:
        """``GET /__dump``: workspaces (seed shape), the call log and the faults."""
        answer: dict[str, Any] = self._control("GET", "/__dump", None)
        return answer

    def calls(self) -> list[dict[str, Any]]:
        """``GET /__calls``: the call log of the five API operations."""
        calls: list[dict[str, Any]] = self._control("GET", "/__calls", None)["calls"]
        return calls

    def clear_calls(self) -> None:
        """``POST /__calls/clear``."""
        self._control("POST", "/__calls/clear", {})

    def _control(self, method: str, route: str, payload: Any) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(  # noqa: S310 - the URL is our own loopback origin
            self.origin + route,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=30) as answer:
                text = answer.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", errors="replace")
            try:
                body = json.loads(text)
            except json.JSONDecodeError:
                body = text
            raise SimulatorControlError(exc.code, body, text) from exc
        return json.loads(text) if text else None


def start_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    accepted_tokens: Iterable[str] | None = None,
    state: SimulatorState | None = None,
    latency_ms: float = 0.0,
    not_ready_ms: float = 0.0,
) -> SimulatorServer:
    """Serve a simulator on a background thread and return its handle (port 0: ephemeral).

    Args:
        host: interface to bind; ``127.0.0.1`` by default.
        port: TCP port, 0 for an ephemeral one (read ``.port`` / ``.origin``).
        accepted_tokens: bearer tokens to accept; ``None`` accepts any non-empty bearer.
        state: a prepared :class:`SimulatorState` (e.g. with an injected clock); when given,
            ``latency_ms``/``not_ready_ms`` are ignored and ``accepted_tokens`` (if not None)
            replaces its accepted tokens.
        latency_ms: added latency per API request (new state only).
        not_ready_ms: not-ready window after a transfer or a creation (new state only).
    """
    if state is None:
        state = SimulatorState(
            accepted_tokens=accepted_tokens, latency_ms=latency_ms, not_ready_ms=not_ready_ms
        )
    elif accepted_tokens is not None:
        state.set_auth(accepted_tokens)
    server_class = _SimulatorHTTPServerV6 if ":" in host else _SimulatorHTTPServer
    httpd = server_class((host, port), state)
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.05},
        name=f"semrush-simulator-{httpd.server_address[1]}",
        daemon=True,
    )
    thread.start()
    return SimulatorServer(httpd, thread)


# ---------------------------------------------------------------------------------------------
# The CLI subcommand: serenity-allocator simulator
# ---------------------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator simulator`` options."""
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    parser.add_argument("--port", type=int, default=8765, help="TCP port (0: ephemeral)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="latency per API request")
    parser.add_argument(
        "--not-ready-ms", type=float, default=0.0, help="not-ready window after a transfer"
    )
    parser.add_argument(
        "--token",
        dest="tokens",
        action="append",
        default=None,
        help="accept only this bearer (repeatable); default: any non-empty bearer",
    )
    parser.add_argument(
        "--seed-file", type=Path, default=None, help="JSON file: a list of seed workspaces"
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (Ctrl-C or SIGTERM); return the exit code."""
    server = start_simulator(
        args.host,
        args.port,
        accepted_tokens=args.tokens,
        latency_ms=args.latency_ms,
        not_ready_ms=args.not_ready_ms,
    )
    stopping = threading.Event()

    def _request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    try:
        if args.seed_file is not None:
            seeded = json.loads(args.seed_file.read_text(encoding="utf-8"))
            workspaces = seeded.get("workspaces") if isinstance(seeded, dict) else seeded
            server.state.seed(workspaces)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _request_stop)
            signal.signal(signal.SIGINT, _request_stop)
        # One line a harness can wait for and parse (the port may have been ephemeral).
        print(f"semrush simulator listening on {server.origin} api={server.api_url}", flush=True)
        while not stopping.wait(0.5):
            pass
    except SimulatorRequestError as exc:
        print(f"semrush simulator: bad seed file: {exc.message}", flush=True)
        return 2
    finally:
        server.stop()
    return 0
