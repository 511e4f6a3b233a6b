"""Sizes, timings and switches of a harness run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from serenity_tools.standins.aws_endpoints import AwsEndpoints
from serenity_tools.standins.stack import CredentialMode
from serenity_tools.verification.harness.workload import MIN_CHILDREN

SCENARIOS = ("concurrency", "standard-queue", "crash", "faults", "poison", "sweep-crash")

FEATURES_ON: Mapping[str, str] = {
    "SERENITY_UNMETERED_CHECK": "true",
    "SERENITY_TIGHT_POOL_FALLBACK": "true",
    # Needs QUEUE_URL, which the stack's environment always carries.
    "SERENITY_SIBLING_RECLAIM": "true",
    # The tight pool starts at a 0.565 free ratio (130 free of 230): it warns from its first
    # read, whatever the draws; the roomy and unmetered pools stay at 1.0.
    "POOL_LOW_RATIO": "0.6",
    "POOL_LOW_INTERVAL_S": "2",
}
"""The feature settings every scenario runs with: unmetered check, tight-pool fallback,
sibling reclaim and the pool early warning, all on."""

IMS_FEATURES: Mapping[str, str] = {**FEATURES_ON, "SERENITY_SIBLING_RECLAIM": "false"}
"""Under IMS, sibling reclaim is off: the Allocator refuses it at start in IMS mode (the
releases it enqueues on a parked ensure's siblings would carry no user's credential record and
end ``noCredential``; ADR 0016). Every other feature stays on."""


@dataclass(frozen=True)
class HarnessConfig:
    """Sizes and timings of one scenario run.

    Attributes:
        children: Children seeded over the three pools (the sweep's targets in sweep-crash).
        requests: Requests enqueued by the services (poison comes on top).
        consumers: Consumer processes.
        seed: Seed of the workload, the crash draws and the injected faults.
        latency_ms: Simulator latency on every Semrush request.
        visibility_timeout_s: The queue's visibility timeout (the function timeout is 1 s
            less). None: each scenario's own, generous unless the scenario is about
            redelivery after a crash or a timeout (``crash``, ``faults``).
        max_receive_count: The redrive policy's maxReceiveCount (template: 5).
        crash_probability: Per batch, the chance a consumer SIGKILLs itself (crash scenario;
            half of it again for a crash in the middle of outcome publishing).
        poison: Poison messages (poison scenario); None means a tenth of ``requests``.
        drain_timeout_s: Give up on a run after this long.
        work_dir: Where traces and logs go (a new temporary directory per run when absent).
        endpoints: AWS endpoints given for some services (``--aws-endpoint``); moto serves
            the rest.
        credentials: ``"ims"`` (the real path: every request enqueued with its child's
            user's promise token, the consumers in IMS mode) or ``"static"`` (the simulator's
            bearer). ``standard-queue`` and ``sweep-crash`` always run static (their senders
            and the crashing in-process sweep hand over no credential).
    """

    children: int = 200
    requests: int = 2000
    consumers: int = 4
    seed: int = 7
    latency_ms: float = 5.0
    visibility_timeout_s: int | None = None
    max_receive_count: int = 5
    crash_probability: float = 0.1
    poison: int | None = None
    drain_timeout_s: float = 900.0
    work_dir: Path | None = None
    endpoints: AwsEndpoints = field(default_factory=AwsEndpoints)
    credentials: CredentialMode = "ims"

    def __post_init__(self) -> None:
        if self.children < MIN_CHILDREN:
            raise ValueError(f"the harness needs at least {MIN_CHILDREN} children")
        if self.requests < 1 or self.consumers < 1:
            raise ValueError("the harness needs at least one request and one consumer")
        if not 0.0 <= self.crash_probability <= 0.5:
            raise ValueError("crash probability must be within [0, 0.5]")

    @property
    def poison_count(self) -> int:
        """How many poison messages the poison scenario mixes in."""
        return self.poison if self.poison is not None else max(10, self.requests // 10)
