"""The Sweep payloads the ``sweep`` command's flags describe, validated with the handler's models.

A bad value is refused here, before anything is invoked, naming the flag and the payload field.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from serenity_allocator.domain.sweep.model import (
    SweepAbandonRequest,
    SweepParentAbandonRequest,
    SweepRequest,
)

FIELD_FLAGS: dict[str, str] = {
    "dry_run": "--dry-run",
    "parent_workspace_ids": "--parent",
    "workspace_ids": "--workspace",
    "limit": "--limit",
    "rate_limit_ms": "--rate-limit-ms",
    "max_consecutive_errors": "--max-consecutive-errors",
    "batch_size": "--batch-size",
    "max_attempts": "--max-attempts",
    "rate_limit_backoff_s": "--rate-limit-backoff-s",
    "run_id": "--run-id",
    "floor": "--floor-projects/--floor-prompts",
    "allow_when_disabled": "--allow-when-disabled",
}
"""Which flag sets which payload field (for error messages)."""


class SweepCliError(ValueError):
    """A flag or the configuration is unusable; nothing was invoked."""


def int_or_text(value: str) -> int | str:
    """A numeric flag's value: an int, or the text itself for the payload model to refuse."""
    # Non-numbers are passed on as text so the payload model refuses them, naming the field.
    try:
        return int(value)
    except ValueError:
        return value


def _split_ids(values: Sequence[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def build_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The Sweep payload the flags describe, validated with the handler's model.

    Raises:
        SweepCliError: A flag value breaks the payload contract; the message names the flag
            and the payload field.
    """
    payload: dict[str, Any] = {
        "dry_run": bool(args.dry_run),
        "parent_workspace_ids": _split_ids(args.parents) or [],
    }
    workspaces = _split_ids(args.workspaces)
    if workspaces is not None:
        payload["workspace_ids"] = workspaces
    numbers = ("limit", "rate_limit_ms", "max_consecutive_errors", "batch_size", "max_attempts")
    for name in (*numbers, "rate_limit_backoff_s", "run_id"):
        value = getattr(args, name)
        if value is not None:
            payload[name] = value
    if (args.floor_projects is None) != (args.floor_prompts is None):
        raise SweepCliError("--floor-projects and --floor-prompts go together: give both")
    if args.floor_projects is not None:
        payload["floor"] = {"projects": args.floor_projects, "prompts": args.floor_prompts}
    if args.allow_when_disabled:
        payload["allow_when_disabled"] = True
    _validate(SweepRequest, payload)
    return payload


def build_abandon_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The abandon payload the flags describe, validated.

    ``--abandon --run-id ID`` ends that run; ``--abandon --parent P`` ends the run holding P
    (or clears P's claim when it is unreadable); either with ``--reason TEXT``.

    Raises:
        SweepCliError: No run id or parent, or a flag that only a sweep takes.
    """
    parents = _split_ids(args.parents) or []
    if args.workspaces or args.dry_run or len(parents) > 1 or (parents and args.run_id):
        raise SweepCliError(
            "--abandon takes --run-id or one --parent (and --reason) only, not a sweep's flags"
        )
    model: type[SweepAbandonRequest] | type[SweepParentAbandonRequest] = SweepAbandonRequest
    payload: dict[str, Any] = {"abandon": True}
    if parents:
        model = SweepParentAbandonRequest
        payload["parent_workspace_id"] = parents[0]
    else:
        payload["run_id"] = args.run_id
    if args.reason is not None:
        payload["reason"] = args.reason
    _validate(model, payload)
    return payload


def _validate(
    model: type[SweepRequest] | type[SweepAbandonRequest] | type[SweepParentAbandonRequest],
    payload: Any,
) -> None:
    try:
        model.model_validate(payload)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            location = ".".join(str(part) for part in error["loc"]) or "payload"
            flag = FIELD_FLAGS.get(str(error["loc"][0]) if error["loc"] else "", "")
            where = f"{flag} (payload field {location})" if flag else f"payload field {location}"
            problems.append(f"{where}: {error['msg']}")
        raise SweepCliError("invalid sweep flags: " + "; ".join(problems)) from None
