"""The reliability harness: every scenario at CI size, with real processes, plus its parts.

The scenario tests (marked ``harness``) each start a local stack (moto in its own process, the
simulator, consumer processes) and run at a small but meaningful size with a fixed seed; the
same scenarios run bigger from ``serenity-allocator harness`` (docs/reliability.md). The
unmarked tests check the harness's own pieces without a stack.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from serenity_allocator.adapters.sqs import build_ensure, build_release
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import Totals
from serenity_tools import cli
from serenity_tools.standins.stack import CredentialMode
from serenity_tools.verification.harness import cli as harness_cli
from serenity_tools.verification.harness import scenarios
from serenity_tools.verification.harness.analysis import count_lost_updates
from serenity_tools.verification.harness.config import FEATURES_ON, IMS_FEATURES, HarnessConfig
from serenity_tools.verification.harness.poison import run_poison
from serenity_tools.verification.harness.poison_bodies import (
    POISON_KINDS,
    RandomDraws,
    is_refused_by_worker,
    poison_messages,
)
from serenity_tools.verification.harness.results import ScenarioResult
from serenity_tools.verification.harness.scenarios import run_scenario
from serenity_tools.verification.harness.worker_releases import with_worker_releases
from serenity_tools.verification.harness.workload import plan_workload
from serenity_tools.verification.invariants import InvariantResult

SEED = 7
CI = HarnessConfig(children=24, requests=120, consumers=4, seed=SEED, drain_timeout_s=600)
"""The CI size: three pools, every child kind, a burst, a tight pool that parks.

The drain budget is far above an idle run's (crash: ~40 s) so that a machine whose cores are
busy with other work, where every injected crash also waits out its visibility timeout, is
slow rather than failed; a run that truly stops draining still fails, only later.
"""


def _assert_passed(result: ScenarioResult) -> None:
    failed = [f"{c.name}: {c.detail}" for c in result.checks if not c.passed]
    assert result.passed, "\n".join(failed) + "\n\n" + result.report()


# ---------------------------------------------------------------- the scenarios (real processes)


@pytest.mark.harness
@pytest.mark.parametrize(("consumers", "credentials"), [(1, "static"), (4, "ims")])
def test_harness_concurrency_keeps_every_invariant_with_the_allocation_features_on(
    consumers: int, credentials: CredentialMode
) -> None:
    # Given the CI workload and C consumer processes, with every allocation feature on (under
    # IMS all but sibling reclaim, whose releases carry no credential record)
    assert FEATURES_ON["SERENITY_SIBLING_RECLAIM"] == "true"
    assert IMS_FEATURES["SERENITY_SIBLING_RECLAIM"] == "false"

    # When the containers drain it, as each request's user under IMS
    config = replace(CI, consumers=consumers, credentials=credentials)
    result = run_scenario("concurrency", config)

    # Then invariants 1-5, the broker checks and the services' writes all hold
    _assert_passed(result)
    names = {check.name for check in result.checks}
    assert {
        "1 conservation",
        "4 per-child order",
        "broker: one holder per group",
        "tiered workspaces",
        "real-sized pools",
    } <= names
    # And the features were exercised, not just switched on
    numbers = result.numbers
    assert numbers["HeadroomCheck{unmetered}"] > 0
    # (top-ups sized by the pool: refilled ahead where it has room, exact where it is tight; the
    # exact fallback serves only a pool drained between its read and the transfer)
    assert numbers["HeadroomCheck{refilled}"] > 0
    assert numbers["serenity.pool.low events"] >= 1
    assert numbers["CoalescedEnsures"] > 0
    user_tokens = next(c for c in result.checks if c.name.startswith("7 "))
    if credentials == "static":
        assert numbers["SiblingReclaim{enqueued}"] > 0
        assert numbers["worker-enqueued releases (reclaim)"] > 0
        assert user_tokens.detail == "static-token run: no user tokens to check"
    else:
        # Every call under its own request's user, nothing applied for a non-member
        assert user_tokens.passed and "users, each its own request's" in user_tokens.detail


@pytest.mark.harness
def test_harness_standard_queue_contrast_counts_the_violations_fifo_prevents() -> None:
    # Given the same workload through a STANDARD queue, 4 containers, 20 ms upstream latency
    config = replace(CI, latency_ms=20.0)

    # When a worker that trusts the body drains it
    result = run_scenario("standard-queue", config)

    # Then the run completes and the report carries the counts
    _assert_passed(result)
    for key in (
        "stale ensures (lost updates)",
        "stale releases (overwrote a top-up)",
        "out-of-order applications",
        "writes refused after ensure said ok",
        "violations: 4 per-child order",
    ):
        assert key in result.numbers
    # And the order violations show up at this size (10 to 22 in every run measured); stale
    # reads and refused writes are rarer and only reported
    assert result.numbers["out-of-order applications"] > 0
    assert result.numbers["violations: 4 per-child order"] > 0
    assert result.numbers["violations: broker: one holder per group"] > 0
    assert "standard-queue" in result.report() and "VIOLATED" in result.report()


@pytest.mark.harness
def test_harness_crash_converges_after_many_kill_9s() -> None:
    # Given consumers that SIGKILL themselves at random points (1 batch in 5, plus 1 in 10
    # halfway through publishing outcomes), restarted as they die
    config = replace(CI, requests=160, crash_probability=0.2)

    # When they drain the workload
    result = run_scenario("crash", config)

    # Then every invariant holds after redelivery; every replay is an identical, explained repeat
    _assert_passed(result)
    numbers = result.numbers
    assert numbers["identical replays explained"] == numbers["requests replayed"]
    assert numbers["consumers killed (SIGKILL)"] >= 3
    assert numbers["consumer restarts"] >= numbers["consumers killed (SIGKILL)"] - 4
    assert "outcome replays (at-least-once)" in numbers


@pytest.mark.harness
def test_harness_faults_end_every_request_terminal_or_in_the_dlq_within_bounded_attempts() -> None:
    # Given the simulator injecting 5xx, 429, timeouts and not-ready answers, and one zombie
    # When the containers drain the workload
    result = run_scenario("faults", CI)

    # Then every request has a terminal outcome or sits in the DLQ, only the zombie's do,
    # and nothing took more than MAX_RECEIVE_COUNT receives
    _assert_passed(result)
    numbers = result.numbers
    assert numbers["zombie requests in the DLQ"] == 2
    assert numbers["highest receive count"] <= CI.max_receive_count
    injected = (
        numbers["injected 5xx answers"]
        + numbers["injected 429 answers"]
        + numbers["timeouts (504 after the hold)"]
    )
    assert injected > 0


@pytest.mark.harness
def test_harness_poison_never_reaches_semrush_and_delays_nobody() -> None:
    # Given 30 poison bodies, every kind in turn (each two or three times, each in its own
    # group and in valid children's), each body drawn from a seeded source. Not hypothesis:
    # one example per stack is its simplest, the same minimal body over and over; hypothesis
    # explores each kind's bodies where examples are cheap
    # (tests/unit/application/allocator/test_poison_bodies.py).
    workload = plan_workload(CI.children, CI.requests, random.Random(SEED), tight_pool=False)
    valid_groups = sorted(workload.plans)
    poison = poison_messages(RandomDraws(random.Random(SEED)), 30, valid_groups, every_kind=True)
    assert Counter(p.kind for p in poison) == {
        kind: 3 if index < 8 else 2 for index, kind in enumerate(POISON_KINDS)
    }
    in_valid = [p for p in poison if p.group_id in workload.plans]
    assert {p.kind for p in in_valid} == set(POISON_KINDS)
    assert len(in_valid) == 11
    assert len({p.group_id for p in in_valid}) == 11  # seeded: 11 different children

    # When they are mixed into the stream (and the same workload runs once without them)
    result = run_poison(CI, poison)

    # Then each is in the DLQ with its reason, none reached Semrush, and the valid requests
    # were neither redelivered nor delayed beyond one visibility timeout
    _assert_passed(result)
    names = {check.name for check in result.checks}
    assert {
        "poison dead-lettered with its reason",
        "poison never reached Semrush",
        "valid requests not delayed by poison",
    } <= names
    assert result.numbers["poison messages"] == 30
    assert result.numbers["poison in a valid child's group"] == 11


@pytest.mark.harness
def test_harness_sweep_crash_resumes_without_enqueuing_a_child_twice() -> None:
    # Given the sweep killed between targets and around its checkpoint writes
    # When it is resumed by run id after each crash (once the dead invocation's lease passed)
    result = run_scenario("sweep-crash", CI)

    # Then no child has two release messages, the checkpoint always parsed, and an immediate
    # resume was refused while the lease held
    _assert_passed(result)
    crashes = sum(v for k, v in result.numbers.items() if k.startswith("crashes "))
    assert crashes >= 3
    assert result.numbers["release sends"] >= result.numbers["release messages in the queue"]


# ---------------------------------------------------------------- the harness's parts (no stack)


def test_poison_messages_are_all_refused_by_the_worker_and_cover_every_kind() -> None:
    # Given the CLI's seeded generator
    # When it draws 300 poison messages, some into valid groups
    messages = poison_messages(RandomDraws(random.Random(3)), 300, ["c0001", "c0002"])

    # Then the worker's own rule refuses each, and every kind of poison is there
    assert all(is_refused_by_worker(m.group_id, m.body) for m in messages)
    assert {m.kind for m in messages} == set(POISON_KINDS)
    assert any(m.group_id in ("c0001", "c0002") for m in messages)
    assert len({m.dedup_id for m in messages}) == 300


def test_plan_workload_sizes_and_orders_the_requests() -> None:
    # Given the CI size
    workload = plan_workload(24, 120, random.Random(SEED))

    # Then about M requests over the active children, each child's last one an ensure
    assert len(workload.requests) == 120
    for child, plan in workload.plans.items():
        assert isinstance(plan[-1], EnsureRequest), child
    # And bursts travel as multi-request units (coalescable), the rest one by one
    assert any(len(unit) > 1 for unit in workload.units)
    assert all(len({r.workspace_id for r in unit}) == 1 for unit in workload.units)
    # And the three pools are there
    assert set(workload.org.masters) == {"org-main", "org-unmetered", "org-tight"}


def _outcome(request_id: str, kind: str, child: str, before: int, after: int) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id,
        kind=kind,  # type: ignore[arg-type]
        workspace_id=child,
        status="topped-up" if kind == "ensure" else "released",
        totals_before=Totals(projects=1, prompts=before),
        totals_after=Totals(projects=1, prompts=after),
    )


def _transfer(seq: int, child: str, prompts: int) -> dict[str, Any]:
    body = {"resources": {"ai": {"projects": 0, "prompts": prompts}}}
    return {"op": "transfer", "status": 200, "workspace_id": child, "body": body, "seq": seq}


def test_count_lost_updates_flags_a_release_computed_from_a_stale_read() -> None:
    # Given a child at 300 prompts; an ensure raises it to 500, then a release that READ 300
    # (before the ensure) sets it to 400: part of the top-up is lost
    child = "c1"
    ensure = build_ensure(child, "m", {"projects": 0, "prompts": 200}, request_id="e1")
    release = build_release(child, request_id="r1")
    before = {child: {"ai": {"projects": {"total": 1}, "prompts": {"total": 300}}}}
    calls = [_transfer(1, child, 500), _transfer(2, child, 400)]
    outcomes = [
        _outcome("e1", "ensure", child, 300, 500),
        _outcome("r1", "release", child, 300, 400),
    ]

    # When the outcomes are matched against the simulator's transfers
    lost = count_lost_updates([release, ensure], outcomes, calls, before)

    # Then the release is stale, the ensure is not, and the release overtook nothing
    # (it was enqueued first) while the ensure was applied before it: one out-of-order
    assert (lost.stale_ensures, lost.stale_releases) == (0, 1)
    assert lost.out_of_order == 1
    # And a serial history shows nothing
    serial = [_outcome("r1", "release", child, 300, 300), _outcome("e1", "ensure", child, 300, 500)]
    clean = count_lost_updates([release, ensure], serial, [_transfer(1, child, 500)], before)
    assert (clean.stale_ensures, clean.stale_releases, clean.out_of_order) == (0, 0, 0)


def test_with_worker_releases_places_reclaim_releases_where_the_broker_delivered_them() -> None:
    # Given a donor with one service request, and a reclaim release the worker enqueued
    # later, delivered after it; plus two poison bodies that also carry a request id, one in
    # the donor's group, each answered ``invalid`` under its id (its body's kind, if readable)
    service = [build_ensure("d1", "m", request_id="s1")]
    events = [
        {"ev": "receive", "msgs": [{"group": "d1", "request_id": "s1", "id": "m1"}]},
        {"ev": "receive", "msgs": [{"group": "d1", "request_id": "reclaim-abc", "id": "m2"}]},
        {"ev": "receive", "msgs": [{"group": "px-1", "request_id": "px-1-r", "id": "m3"}]},
        {"ev": "receive", "msgs": [{"group": "d1", "request_id": "px-2-r", "id": "m4"}]},
    ]
    invalid = [
        AllocationOutcome(
            request_id=rid,
            kind=kind,
            workspace_id=workspace,
            status="invalid",
            error_code="invalidMessage",
            dead_lettered=True,
        )
        for rid, kind, workspace in (("px-1-r", "unknown", "px-1"), ("px-2-r", "release", "px-2"))
    ]

    # When the request list is completed
    requests = with_worker_releases(service, events, invalid)

    # Then the reclaim release follows the service request in its child's order; the poison
    # is not taken for a request
    assert [r.request_id for r in requests] == ["s1", "reclaim-abc"]
    assert isinstance(requests[1], ReleaseRequest) and requests[1].source == "reclaim"


def test_harness_config_refuses_sizes_it_cannot_run() -> None:
    # Given / When / Then
    with pytest.raises(ValueError, match="children"):
        HarnessConfig(children=5)
    with pytest.raises(ValueError, match="consumer"):
        HarnessConfig(consumers=0)
    with pytest.raises(ValueError, match="crash"):
        HarnessConfig(crash_probability=0.9)


def test_harness_cli_runs_each_consumer_count_and_exits_non_zero_on_a_failed_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given scenarios that pass at C = 1 and fail one check at C = 2
    seen: list[tuple[str, int]] = []

    def fake(name: str, config: HarnessConfig) -> ScenarioResult:
        seen.append((name, config.consumers))
        check = InvariantResult("1 conservation", config.consumers != 2, "pool sums")
        return ScenarioResult(name, config, 0.1, [check])

    monkeypatch.setattr(scenarios, "run_scenario", fake)

    # When the CLI runs concurrency with --consumers 1,2
    argv = ["harness", "--scenario", "concurrency", "--children", "24", "--consumers", "1,2"]
    code = cli.main(argv)

    # Then it ran once per count, printed the invariant tables and the summary, and failed
    assert seen == [("concurrency", 1), ("concurrency", 2)]
    out = capsys.readouterr().out
    assert "Invariant checks" in out and "Harness summary" in out and "FAIL" in out
    assert code == 1


def test_harness_cli_refuses_a_bad_consumer_list() -> None:
    # Given / When / Then: argparse rejects it (exit 2)
    parser = argparse.ArgumentParser()
    harness_cli.configure(parser)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--consumers", "0,4"])
    assert exc.value.code == 2
