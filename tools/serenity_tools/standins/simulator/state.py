"""The simulated organisation behind one lock: workspaces, faults, auth and the call log.

The API routes live under ``/enterprise/users/api`` (the five User Manager operations), the
write gate under ``/project-engine`` (see :mod:`.write_gate`); both are authenticated, logged
and subject to faults. Control routes are answered by :mod:`.control`, over this state.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from . import ims, write_gate
from .model import (
    _DEFAULT_FAULT_BODIES,
    _INVALID_JSON,
    API_PREFIX,
    DEFAULT_ENFORCEMENT_LAG_MS,
    DEFAULT_TIMEOUT_HOLD_MS,
    DIMENSIONS,
    ERROR_RATE_KINDS,
    MSG_INSUFFICIENT,
    MSG_INVALID_ACCESS,
    MSG_NOT_AUTHENTICATED,
    MSG_NOT_READY,
    OP_CREATE_CHILD,
    OP_CREATE_PROJECT,
    OP_DELETE_PROJECT,
    OP_DELETE_PROMPTS,
    OP_DISCARD_DRAFTS,
    OP_FAMILY,
    OP_PUBLISH_PROMPTS,
    OP_READ_RESOURCES,
    OP_STATUS,
    OP_TRANSFER,
    OP_WRITE_PROMPTS,
    PROJECT_ENGINE_PREFIX,
    STATUS_CREATED,
    STATUS_NOT_READY,
    TIERED_DIMENSIONS,
    QuotaRefusedError,
    SimResponse,
    SimulatorRequestError,
    _bad_request,
    _bearer_token,
    _check_acyclic,
    _check_parents_known,
    _default_fault_body,
    _Faults,
    _format_retry_after,
    _match_route,
    _now_iso,
    _number,
    _parse_ai_request,
    _parse_fault_updates,
    _parse_json_body,
    _parse_seed_entry,
    _parse_usage_body,
    _resolve_limits_flags,
    _seed_entries,
    _Usage,
    _Workspace,
)


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
      consumed in order by matching requests), ``not_ready_next`` (``{id: n}``: the next
      ``n`` transfers on ``id`` get the not-ready 422) and ``enforcement_lag_ms`` (how far
      behind transfers the write gate enforces totals; 0 turns the lag off); omitted keys keep
      their value.
    - :meth:`set_auth`: ``None`` accepts any non-empty bearer, a list accepts only those.
    - :meth:`dump`, :meth:`calls`, :meth:`clear_calls`.

    Args:
        accepted_tokens: bearer tokens to accept; ``None`` accepts any non-empty bearer.
        latency_ms: added to every API request, slept outside the lock so requests overlap.
        not_ready_ms: how long a child stays ``not ready`` after a transfer or its creation.
        timeout_hold_ms: how long an injected ``timeout`` holds the request before its 504.
        seed: seed of the random source used by ``error_rate`` (deterministic when given).
        enforcement_lag_ms: how long after a transfer the write gate enforces the new total.
        clock: monotonic seconds; drives the not-ready window and the call log's ``t``.
        sleep: sleeps seconds; used for latency and timeout holds.
        ims_config: the IMS client pairs and times to live (:mod:`.ims`; defaults for local use).
    """

    def __init__(
        self,
        *,
        accepted_tokens: Iterable[str] | None = None,
        latency_ms: float = 0.0,
        not_ready_ms: float = 0.0,
        timeout_hold_ms: float = DEFAULT_TIMEOUT_HOLD_MS,
        seed: int | None = None,
        enforcement_lag_ms: float = DEFAULT_ENFORCEMENT_LAG_MS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        ims_config: ims.ImsConfig | None = None,
    ) -> None:
        self.clock = clock
        self.ims = ims.ImsState(ims_config or ims.ImsConfig(), clock)
        self.sleep = sleep
        self._lock = threading.Lock()
        self._initial_tokens = None if accepted_tokens is None else frozenset(accepted_tokens)
        self._initial_faults = _Faults(
            latency_ms=_number(latency_ms, "latency_ms"),
            not_ready_ms=_number(not_ready_ms, "not_ready_ms"),
            timeout_hold_ms=_number(timeout_hold_ms, "timeout_hold_ms"),
            seed=seed,
            enforcement_lag_ms=_number(enforcement_lag_ms, "enforcement_lag_ms"),
        )
        self._accepted_tokens: frozenset[str] | None = self._initial_tokens
        self._faults = _Faults()
        self._rng = random.Random(seed)
        self._workspaces: dict[str, _Workspace] = {}
        self._calls: list[dict[str, Any]] = []
        self._seq = 0
        self._child_counter = 0
        self._flat_prompts_to_tiered = 0
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
                enforcement_lag_ms=initial.enforcement_lag_ms,
            )
            self._rng = random.Random(initial.seed)
            self._accepted_tokens = self._initial_tokens
            self._workspaces = {}
            self._calls = []
            self._seq = 0
            self._child_counter = 0
            self._flat_prompts_to_tiered = 0
        self.ims.reset()

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
        entries = _seed_entries(workspaces)
        with self._lock:
            merged = dict(self._workspaces)
            parsed = [_parse_seed_entry(entry, index) for index, entry in enumerate(entries)]
            for workspace in parsed:
                # A seed is the state as it already is: the gate enforces it at once.
                write_gate.seed_history(workspace)
                merged[workspace.id] = workspace
            _check_parents_known(parsed, merged)
            _check_acyclic(merged)
            # limits_enabled defaults to the parent's flag, so resolve parents first.
            _resolve_limits_flags(entries, parsed, merged)
            self._workspaces = merged
        return len(parsed)

    def usage(self, body: Any) -> dict[str, Any]:
        """Set a workspace's ``used``/``drafted`` directly (absolute); return it, seed shape.

        For seeding usage: services write through the write gate routes instead. The legacy
        check stays: a metered ``used`` above the CURRENT total (no lag) is refused whole.

        Raises:
            SimulatorRequestError: 400 malformed, 404 unknown id.
            QuotaRefusedError: a metered workspace would go over (served as the disguised 405).
        """
        workspace_id, changes = _parse_usage_body(body)
        with self._lock:
            workspace = self._workspaces.get(workspace_id)
            if workspace is None:
                raise SimulatorRequestError(404, "unknown workspace")
            foreign = set(changes) - set(workspace.ai)
            if foreign:
                raise _bad_request(f"workspace has no {', '.join(sorted(foreign))}")
            if self._is_metered(workspace):
                for dim, values in changes.items():
                    current = workspace.ai[dim]
                    new_used = values.get("used", current.used)
                    if new_used > current.total and new_used > current.used:
                        raise QuotaRefusedError()
            for dim, values in changes.items():
                current = workspace.ai[dim]
                current.used = values.get("used", current.used)
                current.drafted = values.get("drafted", current.drafted)
            return self._seed_shape(workspace)

    def set_faults(self, body: Any) -> dict[str, Any]:
        """Change the fault configuration (omitted keys keep their value); return all of it."""
        updates = _parse_fault_updates(body)
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
        """``{"workspaces": [seed shape, effective status], "calls", "faults", "violations"}``.

        ``violations.flat_prompts_to_tiered`` counts transfers that carried a flat ``prompts``
        to a tiered workspace: what the allocator must never send (kept 0 by every scenario).
        """
        with self._lock:
            return {
                "workspaces": [self._seed_shape(w) for w in self._workspaces.values()],
                "calls": [dict(call) for call in self._calls],
                "faults": self._faults.as_dict(),
                "violations": {"flat_prompts_to_tiered": self._flat_prompts_to_tiered},
            }

    def calls(self) -> list[dict[str, Any]]:
        """The call log of the five API operations, oldest first."""
        with self._lock:
            return [dict(call) for call in self._calls]

    def clear_calls(self) -> None:
        """Empty the call log."""
        with self._lock:
            self._calls = []

    # -- the API and the write gate ------------------------------------------------------------

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
            # A plain JSON 405, not the disguised quota one.
            return SimResponse(405, {"message": "method not allowed"})
        return self._serve(method, API_PREFIX + path, route, authorization, body)

    def handle_write(
        self, method: str, path: str, *, authorization: str | None, body: bytes = b""
    ) -> SimResponse:
        """Answer one write-gate request; ``path`` is relative to ``/project-engine``.

        Same order as :meth:`handle_api`; a refusal is the disguised 405 (nginx HTML), any other
        method on a write path the gateway's JSON 405.
        """
        route = _match_route(method, path, write_gate.WRITE_ROUTES)
        if route is None:
            return SimResponse(404, {"message": "not found"})
        if not isinstance(route, tuple):
            return write_gate.METHOD_NOT_ALLOWED
        return self._serve(method, PROJECT_ENGINE_PREFIX + path, route, authorization, body)

    def handle_ims(
        self, method: str, path: str, *, body: bytes = b"", content_type: str | None = None
    ) -> SimResponse:
        """Answer one IMS request (:mod:`.ims`): route, injected faults, then the protocol.

        The form comes urlencoded or ``multipart/form-data`` (``content_type`` says which).
        """
        form = ims.parse_form(body, content_type)
        if form is None:
            return SimResponse(400, {"error": "invalid_request", "error_description": "form"})
        op = ims.route_op(method, path, form)
        if isinstance(op, SimResponse):
            return op
        latency_s = self._faults.latency_ms / 1000.0
        if latency_s > 0:
            self.sleep(latency_s)
        with self._lock:
            injected = self._injected_fault(op, "")
        if injected is None:
            return self.ims.answer(op, form)
        self.ims.log_fault(op, form, injected[0].status)
        if injected[1] > 0:
            self.sleep(injected[1])
        return injected[0]

    def _serve(
        self,
        method: str,
        full_path: str,
        route: tuple[str, str],
        authorization: str | None,
        body: bytes,
    ) -> SimResponse:
        op, workspace_id = route
        arrived = self.clock()
        parsed = _parse_json_body(body) if method in ("POST", "DELETE") else None
        latency_s = self._faults.latency_ms / 1000.0
        if latency_s > 0:
            self.sleep(latency_s)
        with self._lock:
            response, hold_s = self._decide(op, workspace_id, authorization, parsed)
            self._seq += 1
            call = {
                "method": method,
                "path": full_path,
                "op": op,
                "workspace_id": workspace_id,
                "status": response.status,
                "body": None if parsed is _INVALID_JSON else parsed,
                "t": arrived,
                "seq": self._seq,
            }
            user = self.ims.user_of(authorization)
            if user is not None:  # only IMS bearers name a user; static-bearer calls stay as-is
                call["user"] = user
            self._calls.append(call)
        if hold_s > 0:
            self.sleep(hold_s)
        return response

    def _decide(
        self, op: str, workspace_id: str, authorization: str | None, body: Any
    ) -> tuple[SimResponse, float]:
        if self.ims.is_ims_bearer(authorization):
            refusal = self.ims.semrush_refusal(authorization, workspace_id)
            if refusal is not None:
                return refusal, 0.0
        elif not self._is_authenticated(authorization):
            return SimResponse(401, {"detail": MSG_NOT_AUTHENTICATED}), 0.0
        injected = self._injected_fault(op, workspace_id)
        if injected is not None:
            return injected
        try:
            return self._answer(op, workspace_id, body), 0.0
        except SimulatorRequestError as exc:
            return SimResponse(exc.status, {"message": exc.message}), 0.0

    def _is_authenticated(self, authorization: str | None) -> bool:
        token = _bearer_token(authorization)
        return token is not None and (
            self._accepted_tokens is None or token in self._accepted_tokens
        )

    def _answer(self, op: str, workspace_id: str, body: Any) -> SimResponse:
        """The operation table: what each authenticated request gets when no fault is injected."""
        write = partial(self._write, op, workspace_id, body)
        operations: dict[str, Callable[[], SimResponse]] = {
            OP_READ_RESOURCES: partial(self._read_resources, workspace_id),
            OP_STATUS: partial(self._status_answer, workspace_id),
            OP_FAMILY: partial(self._family, workspace_id),
            OP_TRANSFER: partial(self._transfer, workspace_id, body),
            OP_CREATE_CHILD: partial(self._create_child, workspace_id, body),
            OP_WRITE_PROMPTS: write,
            OP_PUBLISH_PROMPTS: write,
            OP_DISCARD_DRAFTS: write,
            OP_CREATE_PROJECT: write,
            OP_DELETE_PROMPTS: write,
            OP_DELETE_PROJECT: write,
        }
        return operations[op]()

    def _status_answer(self, workspace_id: str) -> SimResponse:
        return SimResponse(200, {"status": self._status_of(self._get(workspace_id))})

    def _injected_fault(self, op: str, workspace_id: str) -> tuple[SimResponse, float] | None:
        scripted = self._scripted_fault(op, workspace_id)
        if scripted is not None:
            return scripted, 0.0
        return self._random_fault(op)

    def _scripted_fault(self, op: str, workspace_id: str) -> SimResponse | None:
        for rule in self._faults.fail_next:
            if rule.matches(op, workspace_id):
                rule.count -= 1
                if rule.count <= 0:
                    self._faults.fail_next.remove(rule)
                body = rule.body if rule.has_body else _default_fault_body(rule.status)
                headers = {}
                if rule.retry_after is not None:
                    headers["Retry-After"] = _format_retry_after(rule.retry_after)
                return SimResponse(rule.status, body, headers)
        return None

    def _random_fault(self, op: str) -> tuple[SimResponse, float] | None:
        rates = self._faults.error_rate
        if not any(rates.values()):
            return None
        # One seeded draw per request, against the cumulative rates in a fixed order.
        draw = self._rng.random()
        threshold = 0.0
        for kind in ERROR_RATE_KINDS:
            if kind == "not_ready" and op != OP_TRANSFER:
                continue
            threshold += rates.get(kind, 0.0)
            if draw < threshold:
                return self._fault_of_kind(kind)
        return None

    def _fault_of_kind(self, kind: str) -> tuple[SimResponse, float]:
        if kind == "timeout":
            hold_s = self._faults.timeout_hold_ms / 1000.0
            return SimResponse(504, _DEFAULT_FAULT_BODIES[504]), hold_s
        if kind == "5xx":
            status = self._rng.choice((500, 502, 503))
            return SimResponse(status, _DEFAULT_FAULT_BODIES[status]), 0.0
        if kind == "429":
            return SimResponse(429, _DEFAULT_FAULT_BODIES[429]), 0.0
        return SimResponse(422, {"message": MSG_NOT_READY}), 0.0

    def _get(self, workspace_id: str) -> _Workspace:
        workspace = self._workspaces.get(workspace_id)
        if workspace is None:
            raise SimulatorRequestError(403, MSG_INVALID_ACCESS)
        return workspace

    def _read_resources(self, workspace_id: str) -> SimResponse:
        workspace = self._get(workspace_id)
        return SimResponse(200, {"product_resources": {"ai": {"resources": _ai_shape(workspace)}}})

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
        if (child.tiered or parent.tiered) and "prompts" in requested:
            # Nobody knows which tier a flat prompts would move (the doc): record it, move none.
            self._flat_prompts_to_tiered += 1
            del requested["prompts"]
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
        # It had nothing before it existed: carved resources are enforced a lag later.
        write_gate.seed_history(child)
        self._carve(parent, child, {dim: v for dim, v in requested.items() if v != 0})
        self._workspaces[child.id] = child
        self._start_not_ready_window(child)
        created = self._workspace_object(child)
        # The doc: create answers 200 with the child "not ready", whatever the window length.
        created["status"] = STATUS_NOT_READY
        return SimResponse(200, created)

    def _write(self, op: str, workspace_id: str, body: Any) -> SimResponse:
        workspace = self._get(workspace_id)
        now, lag_s = self.clock(), self._faults.enforcement_lag_ms / 1000.0
        metered = self._is_metered(workspace)
        if op == OP_WRITE_PROMPTS:
            count = write_gate.parse_count(body)
            return write_gate.write_prompts(workspace, count, metered=metered, now=now, lag_s=lag_s)
        if op == OP_PUBLISH_PROMPTS:
            return write_gate.publish_prompts(workspace, write_gate.parse_count(body))
        if op == OP_DISCARD_DRAFTS:
            return write_gate.discard_drafted_prompts(workspace, write_gate.parse_count(body))
        if op == OP_DELETE_PROMPTS:
            return write_gate.delete_prompts(workspace, write_gate.parse_count(body))
        write_gate.parse_project_body(body)
        if op == OP_DELETE_PROJECT:
            return write_gate.delete_project(workspace)
        return write_gate.create_project(workspace, metered=metered, now=now, lag_s=lag_s)

    def _carve(self, parent: _Workspace, child: _Workspace, deltas: Mapping[str, int]) -> None:
        # All or nothing: every raise is checked against the parent's free units first.
        for dim, delta in deltas.items():
            pool = parent.ai[dim]
            if delta > 0 and delta > pool.total - pool.used:
                raise SimulatorRequestError(422, MSG_INSUFFICIENT)
        now = self.clock()
        for dim, delta in deltas.items():
            parent.ai[dim].total -= delta
            child.ai[dim].total += delta
            if delta:
                write_gate.record_total(parent, dim, now)
                write_gate.record_total(child, dim, now)

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
            "ai": _ai_shape(workspace),
        }


def _ai_shape(workspace: _Workspace) -> dict[str, dict[str, int]]:
    """The workspace's AI resources as served: flat, or tiered ({used, total}, no prompts)."""
    if workspace.tiered:
        return {
            dim: workspace.ai[dim].as_dict()
            if dim == "projects"
            else {"used": workspace.ai[dim].used, "total": workspace.ai[dim].total}
            for dim in TIERED_DIMENSIONS
        }
    return {dim: workspace.ai[dim].as_dict() for dim in DIMENSIONS}
