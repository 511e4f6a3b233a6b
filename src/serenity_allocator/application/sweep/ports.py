"""The Sweep's ports and what one invocation of it works with.

The Sweep's use cases (``run_sweep_batch``, ``start_sweep_run``, ``resume_sweep_run``,
``abandon_sweep_run``) read the upstream through the domain's ``WorkspaceGateway``, keep their
checkpoints and parent claims in a :class:`CheckpointStore` and put each child's release on its
FIFO group through a :class:`SurplusReleaseQueue`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ...domain.model import DEFAULT_BLOCKS, Blocks, Totals
from ...domain.ports import AllocationObserver, Clock, NullObserver, Sleeper, WorkspaceGateway
from ...domain.sweep.model import StoredCheckpoint, SweepItem
from ...domain.sweep.runs import MAX_LEASE_S

__all__ = [
    "CheckpointStore",
    "ExchangedTokens",
    "PromiseExchange",
    "RunTokenCipher",
    "RunTokenEnder",
    "SurplusReleaseQueue",
    "SweepEnvironment",
]


class CheckpointStore(Protocol):
    """Where checkpoints and parent claims live; ``save`` is conditional on the version read.

    Names come from ``checkpoint_name`` and ``parent_claim_name`` (``domain.sweep_model``).
    """

    def load(self, name: str) -> StoredCheckpoint | None:
        """Read a document, or None when there is none.

        Raises CheckpointCorruptError when the document is not a JSON object.
        """
        ...

    def save(self, name: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        """Write if unchanged since ``expected_etag`` (None: only if absent); return the tag.

        Raises StaleCheckpointError when the condition fails.
        """
        ...

    def location(self, name: str) -> str:
        """Where the document is, for the report (e.g. ``s3://bucket/key``)."""
        ...


class SurplusReleaseQueue(Protocol):
    """Queues the release of a child's surplus on the child's own FIFO group.

    The worker re-reads and recomputes when it applies it, serialized with every ensure on that
    child; the sweep itself never transfers.
    """

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        floor: Totals | None = None,
        source: Literal["service", "sweep", "reclaim"] = "service",
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Enqueue one release; return its request id."""
        ...


class ExchangedTokens(Protocol):
    """What an exchange answers: the user's fresh access token and the ROLLED promise token."""

    @property
    def access_token(self) -> str:
        """The access token for this batch's Semrush calls."""
        ...

    @property
    def promise_token(self) -> str:
        """The new promise token; the one exchanged must not be relied on afterwards."""
        ...

    @property
    def expires_in(self) -> int | None:
        """Seconds the access token lives (IMS's ``expires_in``), None when not given."""
        ...

    def lacks_scope(self, scope: str) -> bool:
        """True only when IMS named the token's scopes and ``scope`` is not among them."""
        ...


class PromiseExchange(Protocol):
    """IMS with the consumer pair (``adapters.ims_client.ImsClient``).

    ``exchange`` raises the domain's ``NeedsReauthError`` when IMS refuses (401/403),
    ``ImsUnavailableError`` or ``OutOfTimeError`` when it cannot answer in time.
    """

    def exchange(self, promise_token: str) -> ExchangedTokens:
        """Exchange a promise token for an access token and a new promise token."""
        ...

    def invalidate(self, promise_token: str) -> bool:
        """Invalidate a token and its whole chain, best effort; True when IMS confirmed."""
        ...


class RunTokenCipher(Protocol):
    """Client-side KMS encryption bound to a context (``adapters.credential_store``)."""

    def encrypt(self, token: str, context: Mapping[str, str]) -> bytes:
        """The ciphertext of ``token`` under ``context``."""
        ...

    def decrypt(self, ciphertext: bytes, context: Mapping[str, str]) -> str:
        """The token ``ciphertext`` holds when ``context`` is the one it was made under."""
        ...


class RunTokenEnder(Protocol):
    """Ends a run's hold on its operator's authority: invalidate and scrub its token."""

    def end(self, run_id: str, reason: Literal["done", "aborted", "abandoned"]) -> None:
        """Invalidate the run's token (best effort) and scrub it from its claim."""
        ...


@dataclass(frozen=True)
class SweepEnvironment:
    """The sweep's collaborators and limits for one invocation."""

    gateway: WorkspaceGateway
    store: CheckpointStore
    enqueuer: SurplusReleaseQueue
    clock: Clock
    """Monotonic seconds, for the invocation's own deadline."""
    wall_clock: Clock
    """Epoch seconds, for leases shared between invocations."""
    sleep: Sleeper
    deadline: float
    """Monotonic time by which this invocation must have stopped starting targets."""
    invocation_id: str
    lease_until: float
    """Epoch seconds at which this invocation is certainly over (its Lambda deadline)."""
    dynamic_allocation: bool
    blocks: Blocks = DEFAULT_BLOCKS
    target_budget_s: float = 20.0
    max_lease_s: float = MAX_LEASE_S
    observer: AllocationObserver = field(default_factory=NullObserver)
    on_item: Callable[[SweepItem], None] | None = None
    run_tokens: RunTokenEnder | None = None
    """The runs' promise tokens (IMS mode); None with a static token (local tools)."""
