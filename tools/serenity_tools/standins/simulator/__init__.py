"""A stateful, thread-safe stand-in for the Semrush User Manager API and its write gate.

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

Metered writes go through the Project Engine write gate on the same origin, under
``/project-engine`` (authenticated, in the call log, subject to faults; :mod:`.write_gate`):

- ``POST /v1/workspaces/{id}/prompts`` ``{"count": n}``: drafts n prompts, refused when
  ``used + drafted + n`` passes the enforced total (the batch whole: nothing of it lands);
- ``POST /v1/workspaces/{id}/prompts/publish`` ``{"count": n}``: moves n drafted to used;
- ``POST /v1/workspaces/{id}/prompts/discard`` ``{"count": n}``: deletes n drafted prompts (a
  refused request's rollback; the doc names no route, this one is shaped like publish);
- ``POST /v1/workspaces/{id}/projects`` ``{}``: one project, refused when ``used + drafted + 1``
  passes the enforced total.

A refusal is the DISGUISED ``405`` bare nginx ``text/html`` page; any other method is a JSON 405.
The gate enforces the total as it was ``enforcement_lag_ms`` ago (default 9000; a fault key).
Metering follows the ``limits_enabled`` flag of the parent's ``ai`` product tier (a master's
own flag for the master): under an unmetered parent nothing is refused.

Control routes (no auth, never in the call log; loopback peers and loopback ``Host`` names
only, and never with an ``Origin``): ``POST /__reset``, ``POST /__seed``, ``POST /__usage``
(sets usage directly, for seeding), ``POST /__faults``, ``POST /__auth``, ``GET /__dump``,
``GET /__calls``, ``POST /__calls/clear``. See :class:`SimulatorState` for their bodies.

Adobe IMS (``../shared/ims-promise-tokens.md``) is served on the same origin under ``/ims``
(mint, exchange, invalidate; form-encoded, JSON answers), with the control routes
``POST /__ims/users``, ``GET /__ims/clients`` and ``GET /__ims/calls``. A bearer minted by it
is checked for expiry and workspace membership on every Semrush route; any other bearer is the
static one and works as before. See :mod:`.ims`.

Modules: :mod:`.model` (vocabulary), :mod:`.ims`, :mod:`.state` (the state, independent of
HTTP, so a harness can drive it in process), :mod:`.write_gate`, :mod:`.control`, :mod:`.server`
(:func:`start_simulator` serves it on a background thread) and :mod:`.cli` (``configure``/``run``,
the ``serenity-allocator simulator`` subcommand).
"""

from __future__ import annotations

from .cli import configure, run
from .control import is_loopback_host, is_loopback_peer
from .ims import ImsClientPair, ImsConfig
from .model import (
    API_PREFIX,
    DEFAULT_ENFORCEMENT_LAG_MS,
    DISGUISED_QUOTA_405,
    OPERATIONS,
    PROJECT_ENGINE_PREFIX,
    SimResponse,
    SimulatorControlError,
    SimulatorRequestError,
)
from .server import SimulatorServer, start_simulator
from .state import SimulatorState

__all__ = [
    "API_PREFIX",
    "DEFAULT_ENFORCEMENT_LAG_MS",
    "DISGUISED_QUOTA_405",
    "OPERATIONS",
    "PROJECT_ENGINE_PREFIX",
    "ImsClientPair",
    "ImsConfig",
    "SimResponse",
    "SimulatorControlError",
    "SimulatorRequestError",
    "SimulatorServer",
    "SimulatorState",
    "configure",
    "is_loopback_host",
    "is_loopback_peer",
    "run",
    "start_simulator",
]
