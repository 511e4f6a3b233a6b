"""One sweep target at its edges, in memory: a tiered child, an id that is no child, the 429
backoff's two budgets (the target's own and the invocation's deadline)."""

from __future__ import annotations

from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.model import AiResources, DimensionUsage, PromptTiers
from serenity_allocator.domain.observations import CredentialOutcome
from tests.fakes import READ_STATUS, InMemoryGateway
from tests.unit.application.sweep.sweep_rig import RUN, Rig, surplus_family


class TieredChildGateway(InMemoryGateway):
    """The in-memory family, but ``k1`` reads in the tiered prompt shape (5 projects, 1 used)."""

    def read_resources(self, workspace_id: str) -> AiResources:
        if workspace_id != "k1":
            return super().read_resources(workspace_id)
        super().read_resources(workspace_id)  # the call is counted like any other
        return AiResources.tiered(
            DimensionUsage(used=1, total=5),
            PromptTiers(
                daily=DimensionUsage(used=10, total=100), weekly=DimensionUsage(used=50, total=700)
            ),
        )


def _tiered_family() -> TieredChildGateway:
    gateway = TieredChildGateway()
    source = surplus_family(2)
    gateway.workspaces.update(source.workspaces)
    return gateway


def test_a_tiered_child_is_previewed_on_its_projects_and_counted_as_tiered() -> None:
    rig = Rig(_tiered_family())

    result = rig.run(dry_run=True)

    by_id = {item.workspace_id: item for item in result.items}
    assert by_id["k1"].tiered is True
    assert by_id["k1"].outcome == "would-release"
    assert by_id["k2"].tiered is None
    assert result.counts.tiered == 1
    assert (result.counts.would_release, result.processed) == (2, 2)


def test_an_allow_listed_id_that_is_no_child_is_processed_under_its_id() -> None:
    rig = Rig(surplus_family(1))

    result = rig.run(workspace_ids=["k1", "stranger"])

    assert [(i.workspace_id, i.outcome) for i in result.items][1] == ("stranger", "not-a-child")
    assert rig.store.body(f"dry/{RUN}")["processed"] == ["k1", "stranger"]
    assert result.counts.not_a_child == 1


def test_a_denied_target_is_counted_as_an_access_denied_credential_outcome() -> None:
    rig = Rig(surplus_family(1))
    rig.gateway.script_errors(READ_STATUS, "k1", [UpstreamError(403, "forbidden", "read_status")])

    rig.run(dry_run=False)

    assert [e for e in rig.observer.events if isinstance(e, CredentialOutcome)] == [
        CredentialOutcome("accessDenied")
    ]


def _rate_limited(rig: Rig, *retry_after_s: float) -> None:
    errors = [
        UpstreamError(429, "slow down", "read_status", retry_after_s=s) for s in retry_after_s
    ]
    rig.gateway.script_errors(READ_STATUS, "k1", errors)


def test_backoff_waits_up_to_exactly_the_targets_backoff_budget() -> None:
    # Given two 429s asking for 5 s each, and a backoff budget of 10 s
    rig = Rig(surplus_family(1))
    _rate_limited(rig, 5, 5)

    result = rig.run(rate_limit_backoff_s=10)

    # Then both pauses fit (10 s in all) and the third attempt previews the child
    assert rig.clock.sleeps == [5.0, 5.0]
    assert result.items[0].outcome == "would-release"


def test_backoff_fails_the_attempt_whose_pause_would_pass_the_budget() -> None:
    # Given three 429s asking for 5 s each, and a backoff budget of 10 s
    rig = Rig(surplus_family(1))
    _rate_limited(rig, 5, 5, 5)

    result = rig.run(rate_limit_backoff_s=10)

    # Then the third pause (15 s in all) is not taken: the attempt fails rate-limited
    assert rig.clock.sleeps == [5.0, 5.0]
    assert (result.items[0].outcome, result.items[0].error_code) == (
        "unexpected-error",
        "rateLimited",
    )


def test_backoff_pauses_when_the_retry_still_fits_the_deadline_exactly() -> None:
    # Given 30 s left, a target budget of 20 s and a 429 asking for 10 s
    rig = Rig(surplus_family(1))
    _rate_limited(rig, 10)

    result = rig.run(budget_s=30, target_budget_s=20)

    assert rig.clock.sleeps == [10.0]
    assert result.items[0].outcome == "would-release"


def test_backoff_fails_at_once_when_the_retry_would_pass_the_deadline() -> None:
    # Given 30 s left, a target budget of 20 s and a 429 asking for 11 s
    rig = Rig(surplus_family(1))
    _rate_limited(rig, 11)

    result = rig.run(budget_s=30, target_budget_s=20)

    assert rig.clock.sleeps == []
    assert result.items[0].error_code == "rateLimited"
