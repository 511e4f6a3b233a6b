"""The sweep checkpoint's pure rules, at their edges: the payload hash, the storage names, a
checkpoint's consistency, resuming, re-verifying targets, leases and the result's failed list."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    RunInProgressError,
    SweepRefusedError,
)
from serenity_allocator.domain.sweep.model import (
    MAX_FAILED_LISTED,
    SweepCheckpoint,
    SweepCounts,
    SweepRequest,
    TargetFailure,
    parent_claim_name,
    parse_checkpoint,
    payload_sha256,
)
from serenity_allocator.domain.sweep.runs import (
    MAX_LEASE_S,
    ResumingInvocation,
    check_resumable,
    lease_is_held,
    list_targets,
    sweep_result,
    verify_targets,
)

NOW = 1_767_000_000.0
RUN = "rs-rules-1"
NAME = "rs-rules-1"


def _request(**fields: Any) -> SweepRequest:
    return SweepRequest.model_validate({"parent_workspace_ids": ["m1"], **fields})


def _checkpoint(request: SweepRequest, **fields: Any) -> SweepCheckpoint:
    body: dict[str, Any] = {
        "run_id": RUN,
        "dry_run": request.dry_run,
        "parent_workspace_ids": list(request.parent_workspace_ids),
        "workspace_ids": request.workspace_ids,
        "payload_sha256": payload_sha256(request),
        "targets": [("c1", "m1"), ("c2", "m1")],
        **fields,
    }
    return SweepCheckpoint.model_validate(body)


# ---------------------------------------------------------------- sweep_model


def test_payload_sha256_hashes_the_defining_fields_as_compact_sorted_json() -> None:
    # Given a payload with every defining field set, and pacing knobs that define nothing
    request = _request(
        dry_run=False,
        parent_workspace_ids=["m1", "m2"],
        workspace_ids=["c2"],
        limit=3,
        floor={"projects": 2, "prompts": 250},
        batch_size=7,
    )

    # Then its hash is that of the defining fields, keys sorted, no spaces
    canonical = (
        '{"dry_run":false,"floor":{"projects":2,"prompts":250},"limit":3,'
        '"parent_workspace_ids":["m1","m2"],"workspace_ids":["c2"]}'
    )
    assert payload_sha256(request) == hashlib.sha256(canonical.encode()).hexdigest()


def test_parent_claim_name_quotes_every_reserved_character_slash_included() -> None:
    assert parent_claim_name("m1") == "parents/m1"
    assert parent_claim_name("a/b c") == "parents/a%2Fb%20c"


@pytest.mark.parametrize(
    ("targets", "problem"),
    [
        ([["c1", "m9"]], "targets: a parent that the run does not list"),
        ([["c9", "m1"]], "targets: a child outside the run's workspace_ids"),
    ],
)
def test_parse_checkpoint_names_the_document_and_the_target_at_fault(
    targets: list[list[str]], problem: str
) -> None:
    # Given a stored checkpoint whose target contradicts its parents or allow-list
    request = _request(workspace_ids=["c1"])
    body = _checkpoint(request, targets=[("c1", "m1")]).model_dump(mode="json")
    body["targets"] = targets

    # Then it is corrupt under its own name, the problem named by the rule it breaks
    with pytest.raises(CheckpointCorruptError) as caught:
        parse_checkpoint(body, "dry/rs-rules-1")
    assert caught.value.name == "dry/rs-rules-1"
    assert caught.value.problem == f"document: Value error, {problem}"


def test_parse_checkpoint_refuses_a_parentless_target_without_an_allow_list() -> None:
    body = _checkpoint(_request()).model_dump(mode="json")
    body["targets"] = [["c1", ""]]

    with pytest.raises(CheckpointCorruptError) as caught:
        parse_checkpoint(body, NAME)
    assert caught.value.problem == (
        "document: Value error, targets: a parentless target without workspace_ids"
    )


# ---------------------------------------------------------------- sweep_runs: targets


def test_list_targets_keeps_a_child_listed_under_two_parents_once_under_the_first() -> None:
    families = {"m1": ["c1", "c2"], "m2": ["c2", "c3"]}

    targets = list_targets(_request(parent_workspace_ids=["m1", "m2"]), families)

    assert targets == [("c1", "m1"), ("c2", "m1"), ("c3", "m2")]


# ---------------------------------------------------------------- sweep_runs: resuming


def _refusal(checkpoint: SweepCheckpoint, request: SweepRequest, **kw: Any) -> BaseException:
    with pytest.raises((CheckpointCorruptError, SweepRefusedError)) as caught:
        check_resumable(checkpoint, request, RUN, NAME, ResumingInvocation("inv-2", now=NOW, **kw))
    return caught.value


def test_check_resumable_refuses_another_runs_checkpoint_under_its_name() -> None:
    request = _request()
    refused = _refusal(_checkpoint(request, run_id="rs-other"), request)

    assert isinstance(refused, CheckpointCorruptError)
    assert (refused.name, refused.problem) == (NAME, "it belongs to another run")


def test_check_resumable_calls_a_lease_past_the_longest_invocation_corrupt() -> None:
    request = _request()
    checkpoint = _checkpoint(request, lease_owner="inv-1", lease_until=NOW + MAX_LEASE_S + 0.5)

    refused = _refusal(checkpoint, request)

    assert isinstance(refused, CheckpointCorruptError)
    assert (refused.name, refused.problem) == (
        NAME,
        "its lease lies beyond any invocation's deadline",
    )


def test_check_resumable_takes_a_lease_ending_at_the_longest_invocation_as_held() -> None:
    # Given another invocation's lease ending exactly at the furthest a sound lease can lie
    request = _request()
    checkpoint = _checkpoint(request, lease_owner="inv-1", lease_until=NOW + MAX_LEASE_S)

    refused = _refusal(checkpoint, request)

    # Then the run is in progress elsewhere (not corrupt), named by its run id
    assert type(refused) is RunInProgressError
    assert refused.run_id == RUN


def test_check_resumable_refuses_another_payload_saying_how_to_go_on() -> None:
    refused = _refusal(_checkpoint(_request()), _request(limit=1))

    assert type(refused) is SweepRefusedError
    assert str(refused) == (
        "run 'rs-rules-1' was started with another payload (parents, workspace_ids, limit "
        "or floor differ); resume it with its own payload or start a new run_id"
    )


def test_check_resumable_continues_a_run_whose_lease_ends_now_clearing_abort_and_streak() -> None:
    # Given an aborted run with an error streak, whose other owner's lease ends this instant
    request = _request()
    checkpoint = _checkpoint(
        request, lease_owner="inv-1", lease_until=NOW, aborted="5 errors", error_streak=3
    )

    # When it is resumed
    check_resumable(checkpoint, request, RUN, NAME, ResumingInvocation("inv-2", now=NOW))

    # Then it may go on, its abort and its streak cleared
    assert (checkpoint.aborted, checkpoint.error_streak) == (None, 0)


# ---------------------------------------------------------------- sweep_runs: verifying


def test_verify_targets_counts_a_target_whose_parent_is_no_longer_listed_a_stranger() -> None:
    checkpoint = _checkpoint(_request())

    with pytest.raises(CheckpointCorruptError) as caught:
        verify_targets(checkpoint, {}, NAME, None)

    assert (caught.value.name, caught.value.problem) == (
        NAME,
        "2 target(s) are not children of their parent upstream",
    )


def test_verify_targets_allows_exactly_the_limit_and_refuses_one_more() -> None:
    checkpoint = _checkpoint(_request())
    families = {"m1": ["c1", "c2"]}

    verify_targets(checkpoint, families, NAME, 2)
    with pytest.raises(CheckpointCorruptError) as caught:
        verify_targets(checkpoint, families, NAME, 1)

    assert (caught.value.name, caught.value.problem) == (
        NAME,
        "it holds more targets than the run's limit",
    )


def test_lease_is_held_from_after_now_up_to_the_longest_invocation_inclusive() -> None:
    assert not lease_is_held(None, NOW)
    assert not lease_is_held(NOW, NOW)
    assert lease_is_held(NOW + 0.001, NOW)
    assert lease_is_held(NOW + MAX_LEASE_S, NOW)
    assert not lease_is_held(NOW + MAX_LEASE_S + 0.001, NOW)


# ---------------------------------------------------------------- sweep_runs: the result


def _with_final_failures(count: int) -> SweepCheckpoint:
    children = [f"c{i}" for i in range(count)]
    request = _request()
    return _checkpoint(
        request,
        targets=[(child, "m1") for child in children],
        processed=children,
        failures={
            child: TargetFailure(attempts=3, error_code="x", final=True) for child in children
        },
        counts=SweepCounts(unexpected_errors=count),
    )


@pytest.mark.parametrize(
    ("count", "listed_all"), [(MAX_FAILED_LISTED, True), (MAX_FAILED_LISTED + 1, False)]
)
def test_sweep_result_lists_at_most_the_failed_cap_and_says_when_it_cut(
    count: int, listed_all: bool
) -> None:
    result = sweep_result(RUN, _with_final_failures(count), [], "s3://b/rs-rules-1")

    assert len(result.failed) == MAX_FAILED_LISTED
    assert result.failed_listed_all is listed_all
    assert result.failed[0].model_dump() == {
        "workspace_id": "c0",
        "parent_workspace_id": "m1",
        "error_code": "x",
        "attempts": 3,
    }
