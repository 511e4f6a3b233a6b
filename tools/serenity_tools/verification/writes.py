"""The services' metered writes after their ensures, on the simulator's metered gateway."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from serenity_allocator.contract.outcome_table import outcome_table
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_tools.standins.stack import LocalStack
from serenity_tools.verification.invariants import InvariantResult, workspaces_by_id

Request = EnsureRequest | ReleaseRequest
SERVED_STATUSES = frozenset({"hot-path", "topped-up", "rightsized", "topped-up-after-reclaim"})
"""Ensure outcomes after which the child has the headroom the write needs (on a metered pool).

``rightsized`` is one of them: its transfer carries the request's own room while it gives the
surplus back, so a child's earlier ensures stop counting once it is served (their needs may
exceed what is left)."""


@dataclass(frozen=True)
class MeteredWrites:
    """The services' writes after their ensures, as the metered gateway answered them."""

    accepted: int
    refused: tuple[str, ...]

    def result(self) -> InvariantResult:
        """PASS when the gateway accepted every write an applied ensure prepared for."""
        name = "writes after ensure accepted"
        if self.refused:
            detail = f"{len(self.refused)} refused (405 quota): {', '.join(self.refused)}"
            return InvariantResult(name, False, detail, self.refused)
        return InvariantResult(name, True, f"{self.accepted} metered writes accepted")


def last_served_ensures(
    plans: Mapping[str, Sequence[Request]], outcomes: Sequence[AllocationOutcome]
) -> list[EnsureRequest]:
    """Each child's last served ensure, where no later request may have taken its room back.

    A later release that handed surplus back, or a later request whose outcome is missing or
    may have moved the child (``failed``: a crash or the receives ran out), leaves no write to
    check for that child; one that applied nothing (a refusal, nothing to release) does not.
    """
    by_id = {o.request_id: o for o in outcomes}
    last = []
    for plan in plans.values():
        current: EnsureRequest | None = None
        for request in plan:
            outcome = by_id.get(request.request_id)
            if isinstance(request, EnsureRequest) and outcome and outcome.status in SERVED_STATUSES:
                current = request
            elif outcome is None or not _applied_nothing(outcome):
                current = None
        if current is not None:
            last.append(current)
    return last


def _applied_nothing(outcome: AllocationOutcome) -> bool:
    """The contract table says this outcome moved nothing (its code's row, else its status's)."""
    table = outcome_table()
    code = table.code_row(outcome.error_code) if outcome.error_code else None
    row = code or table.status_row(outcome.status)
    return row is not None and row.applied == "no"


def meter_writes(
    stack: LocalStack, plans: Mapping[str, Sequence[Request]], outcomes: Sequence[AllocationOutcome]
) -> MeteredWrites:
    """Each child's service now makes the write its last served ensure prepared for.

    The write consumes that ensure's ``need`` on the metered gateway (the simulator's
    ``/__usage``, which refuses with the disguised 405 past the total). Only the last ensure
    is written: an ensure guarantees headroom over the usage it saw, it reserves nothing, so
    two ensures answered before either write are not both covered (a real service writes
    right after its own ensure, and the next ensure then sees that usage).
    """
    from serenity_tools.standins.simulator import SimulatorControlError

    current = workspaces_by_id(stack.simulator.dump()["workspaces"])
    accepted, refused = 0, []
    for ensure in last_served_ensures(plans, outcomes):
        child, need = ensure.workspace_id, ensure.need
        ai = current[child]["ai"]
        body = {
            "id": child,
            "projects": {"used": ai["projects"]["used"] + need.projects},
            "prompts": {"used": ai["prompts"]["used"] + need.prompts},
        }
        try:
            stack.simulator.usage(body)
            accepted += 1
        except SimulatorControlError:
            refused.append(child)
    return MeteredWrites(accepted, tuple(refused))
