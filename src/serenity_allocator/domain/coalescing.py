"""Coalescing: consecutive ensures for one child inside a batch become one top-up.

Each ensure stands for a write that has not consumed its units yet, so a run of them needs the
SUM of their needs. A release (or an invalid message) between two ensures is a barrier: the
requests around it are applied in their place in the order.

A run also carries its progress through the batch, here and nowhere else: the leader's
combined result, shared by the members behind it, or the split that sends each member to make
its own call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .allocation import EnsureResult
from .messages import EnsureRequest, ReleaseRequest
from .model import Totals
from .sizing import Ceiling, combine_ceilings


@dataclass
class EnsureRun:
    """Consecutive ensures of one child (same parent) served by one ensure call."""

    members: list[str] = field(default_factory=list)
    """Message ids in order; the first is the leader that performs the call."""
    requests: list[EnsureRequest] = field(default_factory=list)
    split: bool = False
    """Set when the combined call did not serve the run: members then apply one by one."""
    result: EnsureResult | None = None
    """The leader's combined result, once it stands: every member's result."""

    @property
    def leader(self) -> str:
        """The message id whose handling performs the combined call."""
        return self.members[0]

    @property
    def combined(self) -> bool:
        """True while one combined call serves several requests (not split)."""
        return len(self.members) > 1 and not self.split

    def served(self, result: EnsureResult) -> None:
        """The leader's combined call stood: its result is every member's."""
        self.result = result

    def leave(self, message_id: str) -> None:
        """A member (never the leader) leaves before the combined call: it is applied alone.

        Its need no longer counts in the run's sum (IMS mode: its own user could not read the
        child, so nothing is applied for it under the leader's call).
        """
        if message_id == self.leader or message_id not in self.members:
            raise ValueError("only a member behind the leader can leave a run")
        index = self.members.index(message_id)
        del self.members[index]
        del self.requests[index]

    def includes(self, message_id: str) -> bool:
        """True while ``message_id`` is served by this run (it has not left)."""
        return message_id in self.members

    def split_up(self) -> None:
        """The combined call did not serve the run: each member makes its own call, in order."""
        self.split = True

    @property
    def need(self) -> Totals:
        """The sum of the members' needs."""
        total = Totals()
        for request in self.requests:
            total = total.plus(request.need)
        return total

    @property
    def include_drafted(self) -> bool:
        """Drafts count when any member asked for it (the stricter reading)."""
        return any(request.include_drafted for request in self.requests)

    @property
    def ceiling(self) -> Ceiling | None:
        """The strictest ceiling any member gave, per dimension (unenforced ones do not count)."""
        given = [request.ceiling for request in self.requests if request.ceiling is not None]
        if not given:
            return None
        return combine_ceilings(*given)


@dataclass(frozen=True)
class PlannedMessage:
    """One message of the batch in the plan: its id, group and parsed request (or None)."""

    message_id: str
    group_id: str
    request: EnsureRequest | ReleaseRequest | None


def plan_ensure_runs(messages: Sequence[PlannedMessage]) -> dict[str, EnsureRun]:
    """Map each ensure's message id to its run; a run of one is a plain ensure.

    Messages are in batch order (SQS FIFO delivers a group's messages in order). Only
    consecutive ensures of the same group AND the same parent coalesce.
    """
    runs: dict[str, EnsureRun] = {}
    open_run: dict[str, EnsureRun] = {}
    for message in messages:
        request = message.request
        current = open_run.get(message.group_id)
        if not isinstance(request, EnsureRequest):
            open_run.pop(message.group_id, None)  # a release or invalid message is a barrier
            continue
        if (
            current is None
            or current.requests[0].parent_workspace_id != request.parent_workspace_id
        ):
            current = EnsureRun()
            open_run[message.group_id] = current
        current.members.append(message.message_id)
        current.requests.append(request)
        runs[message.message_id] = current
    return runs
