"""The simulator's vocabulary: constants, records, request validation and fault parsing.

Everything here is plain data and pure helpers shared by the state, the write gate, the control
routes and the HTTP layer; nothing here holds a lock or serves a request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

API_PREFIX = "/enterprise/users/api"

OP_READ_RESOURCES = "read_resources"
OP_TRANSFER = "transfer"
OP_STATUS = "status"
OP_FAMILY = "family"
OP_CREATE_CHILD = "create_child"
API_OPERATIONS = (OP_READ_RESOURCES, OP_TRANSFER, OP_STATUS, OP_FAMILY, OP_CREATE_CHILD)

# The Project Engine write gate: a different gateway upstream, the same origin here.
PROJECT_ENGINE_PREFIX = "/project-engine"
OP_WRITE_PROMPTS = "write_prompts"
OP_PUBLISH_PROMPTS = "publish_prompts"
OP_DISCARD_DRAFTS = "discard_drafts"
OP_CREATE_PROJECT = "create_project"
OP_DELETE_PROMPTS = "delete_prompts"
OP_DELETE_PROJECT = "delete_project"
WRITE_OPERATIONS = (
    OP_WRITE_PROMPTS,
    OP_PUBLISH_PROMPTS,
    OP_DISCARD_DRAFTS,
    OP_CREATE_PROJECT,
    OP_DELETE_PROMPTS,
    OP_DELETE_PROJECT,
)
OPERATIONS = API_OPERATIONS + WRITE_OPERATIONS

# Adobe IMS on the same origin (:mod:`.ims`): faults may target these too.
OP_IMS_MINT = "ims_mint"
OP_IMS_EXCHANGE = "ims_exchange"
OP_IMS_INVALIDATE = "ims_invalidate"
IMS_OPERATIONS = (OP_IMS_MINT, OP_IMS_EXCHANGE, OP_IMS_INVALIDATE)
FAULT_OPERATIONS = OPERATIONS + IMS_OPERATIONS

STATUS_CREATED = "created"
STATUS_NOT_READY = "not ready"
WORKSPACE_STATUSES = (STATUS_CREATED, STATUS_NOT_READY, "error", "deleting")

DIMENSIONS = ("projects", "prompts", "weekly_prompts")
TRANSFERABLE_DIMENSIONS = ("projects", "prompts")
# The tiered prompt shape (semrush-user-manager.md): daily + weekly tiers, each {used, total},
# and no ``prompts`` key at all; seeded and served in exactly that shape.
PROMPT_TIERS = ("daily_prompts", "weekly_prompts")
TIERED_DIMENSIONS = ("projects", *PROMPT_TIERS)

MSG_NOT_AUTHENTICATED = "Not authenticated"
MSG_INVALID_ACCESS = "invalid access attempt"
MSG_INSUFFICIENT = "insufficient available units in subscription"
MSG_NOT_READY = "workspace not ready"
MSG_METHOD_NOT_ALLOWED = "Method Not Allowed"

# The disguised quota 405 of the write gateway, byte for byte as captured live
# (semrush-user-manager.md, "Metered writes happen elsewhere"): bare nginx HTML, no quota wording.
DISGUISED_QUOTA_405 = (
    "<html>\r\n<head><title>405 Not Allowed</title></head>\r\n<body>\r\n"
    "<center><h1>405 Not Allowed</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)

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
        "enforcement_lag_ms",
    }
)
DEFAULT_TIMEOUT_HOLD_MS = 20_000.0
DEFAULT_ENFORCEMENT_LAG_MS = 9_000.0
"""The write gate catches up with a transfer about 9 s later (reproducible live)."""

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


class QuotaRefusedError(SimulatorRequestError):
    """A metered write over quota: answered with the disguised 405 page, never JSON."""

    def __init__(self) -> None:
        super().__init__(405, "quota refused")


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
    content_type: str | None = None
    """Overrides the default (``application/json``, or ``text/html; charset=utf-8`` for a str)."""


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
    tiered: bool = False
    """Seeded in the tiered prompt shape: ``ai`` holds projects and the two prompt tiers."""
    total_history: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Per dimension, ``(since, total)`` changes: the write gate enforces a lagged total."""


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
    enforcement_lag_ms: float = DEFAULT_ENFORCEMENT_LAG_MS

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
            "enforcement_lag_ms": self.enforcement_lag_ms,
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


def _bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _match_route(
    method: str, path: str, routes: tuple[tuple[str, re.Pattern[str], str], ...] = _ROUTES
) -> tuple[str, str] | bool | None:
    """``(op, workspace_id)`` for a route; ``False`` for a known path with the wrong method."""
    path_known = False
    for route_method, pattern, op in routes:
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


def _seed_entries(workspaces: Any) -> list[Mapping[str, Any]]:
    """``/__seed``: the entries as objects, each with a non-empty ``id``, no id twice."""
    if not isinstance(workspaces, list):
        raise _bad_request("workspaces must be a list")
    entries = [_object(raw, f"workspaces[{index}]") for index, raw in enumerate(workspaces)]
    ids = [entry.get("id") for entry in entries]
    for index, workspace_id in enumerate(ids):
        if not isinstance(workspace_id, str) or not workspace_id:
            raise _bad_request(f"workspaces[{index}].id must be a non-empty string")
    if len(set(ids)) != len(ids):
        raise _bad_request("workspaces has duplicate ids")
    return entries


def _parse_seed_entry(entry: Mapping[str, Any], index: int) -> _Workspace:
    """One seed entry (its ``id`` already checked); a 400 naming the first bad field."""
    where = f"workspaces[{index}]"
    workspace_id: str = entry["id"]
    title = entry.get("title", workspace_id)
    if not isinstance(title, str):
        raise _bad_request(f"{where}.title must be a string")
    parent_id = _seed_parent_id(entry.get("parent_id"), workspace_id, where)
    status = entry.get("status", STATUS_CREATED)
    if status not in WORKSPACE_STATUSES:
        raise _bad_request(f"{where}.status must be one of {', '.join(WORKSPACE_STATUSES)}")
    limits_enabled = entry.get("limits_enabled")
    if limits_enabled is not None and not isinstance(limits_enabled, bool):
        raise _bad_request(f"{where}.limits_enabled must be a boolean or null")
    return _Workspace(
        id=workspace_id,
        title=title,
        parent_id=parent_id,
        base_status=status,
        limits_enabled=True if limits_enabled is None else limits_enabled,
        ai=_parse_seed_ai(entry.get("ai"), f"{where}.ai"),
        created_at=_now_iso(),
        tiered=_is_tiered_seed(entry.get("ai")),
    )


def _seed_parent_id(parent_id: Any, workspace_id: str, where: str) -> str | None:
    if parent_id is not None and (not isinstance(parent_id, str) or not parent_id):
        raise _bad_request(f"{where}.parent_id must be a non-empty string or null")
    if parent_id == workspace_id:
        raise _bad_request(f"{where} cannot be its own parent")
    return parent_id


def _is_tiered_seed(raw: Any) -> bool:
    return isinstance(raw, Mapping) and "daily_prompts" in raw


def _parse_seed_ai(raw: Any, where: str) -> dict[str, _Usage]:
    """The seed's ``ai`` object: every dimension, an omitted one (or count) being 0.

    A ``daily_prompts`` key makes it the tiered shape: projects and both tiers, no ``prompts``
    (the flat ``prompts`` slot stays 0 and is never served for it).
    """
    ai_raw = _object(raw or {}, where)
    dims = TIERED_DIMENSIONS if _is_tiered_seed(ai_raw) else DIMENSIONS
    unknown = set(ai_raw) - set(dims)
    if unknown:
        raise _bad_request(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    parsed = {dim: _parse_seed_usage(ai_raw.get(dim), f"{where}.{dim}") for dim in dims}
    return {dim: parsed.get(dim, _Usage()) for dim in (*DIMENSIONS, *dims)}


def _parse_seed_usage(raw: Any, where: str) -> _Usage:
    values = _object(raw or {}, where)
    return _Usage(
        used=_count(values.get("used", 0), f"{where}.used"),
        drafted=_count(values.get("drafted", 0), f"{where}.drafted"),
        total=_count(values.get("total", 0), f"{where}.total"),
    )


def _check_parents_known(
    workspaces: Iterable[_Workspace], merged: Mapping[str, _Workspace]
) -> None:
    for workspace in workspaces:
        if workspace.parent_id is not None and workspace.parent_id not in merged:
            raise _bad_request(f"unknown parent_id for workspace {workspace.id}")


def _resolve_limits_flags(
    entries: Iterable[Mapping[str, Any]],
    parsed: Iterable[_Workspace],
    merged: Mapping[str, _Workspace],
) -> None:
    """A seeded workspace without ``limits_enabled`` takes its nearest flagged ancestor's."""
    flags = {entry["id"]: entry.get("limits_enabled") for entry in entries}
    for workspace in parsed:
        if flags[workspace.id] is None:
            workspace.limits_enabled = _inherited_flag(workspace, merged, flags)


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
    return [_parse_fail_rule(item, f"fail_next[{index}]") for index, item in enumerate(raw)]


def _parse_fail_rule(item: Any, where: str) -> _FailRule:
    """One ``fail_next`` entry; each field checked in turn, the 400 naming the first bad one."""
    entry = _object(item, where)
    status = _http_status(entry.get("status"), f"{where}.status")
    count = _count(entry.get("count", 1), f"{where}.count")
    if count < 1:
        raise _bad_request(f"{where}.count must be at least 1")
    op = entry.get("op")
    if op is not None and op not in FAULT_OPERATIONS:
        raise _bad_request(f"{where}.op must be one of {', '.join(FAULT_OPERATIONS)} or null")
    workspace_id = entry.get("workspace_id")
    if workspace_id is not None and not isinstance(workspace_id, str):
        raise _bad_request(f"{where}.workspace_id must be a string or null")
    retry_after = entry.get("retry_after")
    return _FailRule(
        status=status,
        count=count,
        op=op,
        workspace_id=workspace_id,
        body=entry.get("body"),
        has_body="body" in entry,
        retry_after=None if retry_after is None else _number(retry_after, f"{where}.retry_after"),
    )


def _http_status(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 599:
        raise _bad_request(f"{where} must be an HTTP status code")
    return value


def _default_fault_body(status: int) -> Any:
    if status in _DEFAULT_FAULT_BODIES:
        return _DEFAULT_FAULT_BODIES[status]
    try:
        return {"message": HTTPStatus(status).phrase.lower()}
    except ValueError:
        return {"message": "error"}


def _format_retry_after(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _parse_usage_body(body: Any) -> tuple[str, dict[str, dict[str, int]]]:
    """``/__usage``: ``(workspace id, {dim: {"used"?, "drafted"?}})``; a 400 naming the field."""
    body = _object(body, "body")
    workspace_id = body.get("id")
    if not isinstance(workspace_id, str) or not workspace_id:
        raise _bad_request("id must be a non-empty string")
    unknown = set(body) - {"id", *DIMENSIONS, *PROMPT_TIERS}
    if unknown:
        raise _bad_request(f"unknown keys: {', '.join(sorted(unknown))}")
    changes: dict[str, dict[str, int]] = {}
    for dim in (d for d in (*DIMENSIONS, *PROMPT_TIERS) if d in body):
        values = _object(body[dim], dim)
        extra = set(values) - {"used", "drafted"}
        if extra:
            raise _bad_request(f"{dim} has unknown keys: {', '.join(sorted(extra))}")
        changes[dim] = {key: _count(values[key], f"{dim}.{key}") for key in values}
    return workspace_id, changes


_FAULT_NUMBERS = ("latency_ms", "not_ready_ms", "timeout_hold_ms", "enforcement_lag_ms")


def _parse_fault_updates(body: Any) -> dict[str, Any]:
    """``/__faults``: the validated updates (only the keys given); a 400 naming the field."""
    body = _object(body, "body")
    unknown = set(body) - FAULT_KEYS
    if unknown:
        raise _bad_request(f"unknown fault keys: {', '.join(sorted(unknown))}")
    parsers: dict[str, Any] = {
        **{key: (lambda value, key=key: _number(value, key)) for key in _FAULT_NUMBERS},
        "error_rate": _parse_error_rate,
        "stuck": _parse_stuck,
        "seed": _parse_seed,
        "fail_next": _parse_fail_next,
        "not_ready_next": _parse_not_ready_next,
    }
    return {key: parsers[key](value) for key, value in body.items()}


def _parse_stuck(raw: Any) -> set[str]:
    if not isinstance(raw, list) or not all(isinstance(i, str) for i in raw):
        raise _bad_request("stuck must be a list of workspace ids")
    return set(raw)


def _parse_seed(raw: Any) -> int | None:
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int)):
        raise _bad_request("seed must be an integer or null")
    return raw


def _parse_not_ready_next(raw: Any) -> dict[str, int]:
    entries = _object(raw, "not_ready_next")
    return {str(key): _count(value, f"not_ready_next.{key}") for key, value in entries.items()}
