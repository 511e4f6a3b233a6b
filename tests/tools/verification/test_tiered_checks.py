"""The local runs' check on the tiered and real-sized families (what the demo and harness print)."""

from __future__ import annotations

from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.verification.invariants import workspace_dim
from serenity_tools.verification.tiered import (
    check_real_sized,
    check_tiered,
    real_sized_requests,
    tiered_requests,
)


def outcomes_as_expected(cases: list, receive_count: int = 1) -> list[AllocationOutcome]:  # type: ignore[type-arg]
    return [
        AllocationOutcome(
            request_id=request.request_id,
            kind=request.kind,
            workspace_id=request.workspace_id,
            status=status,
            error_code=code,
            receive_count=receive_count,
        )
        for request, (status, code) in cases
    ]


def test_check_tiered_passes_when_every_case_ends_as_expected_with_no_flat_prompts() -> None:
    cases = tiered_requests()
    result = check_tiered(
        cases, outcomes_as_expected(cases), {"violations": {"flat_prompts_to_tiered": 0}}
    )
    assert result.passed, result.detail


def test_check_tiered_fails_on_a_flat_prompts_transfer() -> None:
    cases = tiered_requests()
    result = check_tiered(
        cases, outcomes_as_expected(cases), {"violations": {"flat_prompts_to_tiered": 2}}
    )
    assert not result.passed
    assert result.violations == ("2 flat prompts transfer(s) sent to a tiered workspace",)


def test_check_tiered_fails_on_a_tiered_refusal_that_was_retried() -> None:
    # Given every outcome on a second receive (a tieredPrompts refusal must be the first)
    cases = tiered_requests()
    result = check_tiered(cases, outcomes_as_expected(cases, receive_count=2), {})
    assert len(result.violations) == len(cases)


def test_check_real_sized_names_the_case_that_ended_otherwise() -> None:
    cases = real_sized_requests()
    outcomes = outcomes_as_expected(cases)
    wrong = outcomes[1].model_copy(update={"status": "topped-up", "error_code": None})
    result = check_real_sized(cases, [outcomes[0], wrong, outcomes[2]])
    assert result.violations == (
        "real-dev-child: expected rejected/orgPoolExhausted, got ('topped-up', None)",
    )


def test_workspace_dim_reads_a_tiered_workspace_as_its_tightest_tier() -> None:
    tiered = {
        "ai": {
            "projects": {"used": 1, "total": 2},
            "daily_prompts": {"used": 90, "total": 100},
            "weekly_prompts": {"used": 100, "total": 500},
        }
    }
    assert workspace_dim(tiered, "prompts", "total") == 100
    assert workspace_dim(tiered, "prompts", "used") == 90
    assert workspace_dim(tiered, "projects", "total") == 2
