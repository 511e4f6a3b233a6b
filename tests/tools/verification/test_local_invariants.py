"""The invariant checks catch what they claim to catch (and pass what is fine)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from serenity_allocator.adapters.sqs import build_ensure, build_release
from serenity_allocator.domain.ledger import LedgerEntry, TransferIntent
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_tools.verification.checks import DEMO_CHECKS, RunRecord, run_checks
from serenity_tools.verification.invariants import (
    UNTRACED_REPEAT,
    InvariantResult,
    check_bounds,
    check_conservation,
    check_fifo_delivery,
    check_group_exclusivity,
    check_headroom,
    check_order,
    check_terminal_outcomes,
    workspaces_by_id,
)
from serenity_tools.verification.replays import (
    NOT_PUBLISHED_LOG,
    PUBLISH_LANDED,
    explain_replays,
    explained_table,
    publish_failures,
)
from serenity_tools.verification.writes import last_served_ensures


def _ws(
    workspace_id: str,
    parent: str | None,
    projects: tuple[int, int],
    prompts: tuple[int, int],
    drafted: int = 0,
) -> dict[str, Any]:
    return {
        "id": workspace_id,
        "parent_id": parent,
        "ai": {
            "projects": {"used": projects[0], "drafted": 0, "total": projects[1]},
            "prompts": {"used": prompts[0], "drafted": drafted, "total": prompts[1]},
        },
    }


def _outcome(
    request_id: str,
    workspace: str,
    status: str,
    before: tuple[int, int] | None,
    after: tuple[int, int] | None,
    kind: str = "ensure",
) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id,
        kind=kind,  # type: ignore[arg-type]
        workspace_id=workspace,
        status=status,  # type: ignore[arg-type]
        totals_before=Totals(projects=before[0], prompts=before[1]) if before else None,
        totals_after=Totals(projects=after[0], prompts=after[1]) if after else None,
    )


def _transfer(seq: int, workspace: str, projects: int, prompts: int) -> dict[str, Any]:
    return {
        "op": "transfer",
        "workspace_id": workspace,
        "status": 200,
        "seq": seq,
        "body": {"resources": {"ai": {"projects": projects, "prompts": prompts}}},
    }


def test_check_conservation_detects_units_created_from_nothing() -> None:
    # Given a pool whose child grew without the master shrinking
    before = workspaces_by_id([_ws("m", None, (0, 10), (0, 1000)), _ws("c", "m", (1, 1), (0, 100))])
    after = workspaces_by_id([_ws("m", None, (0, 10), (0, 1000)), _ws("c", "m", (1, 2), (0, 100))])
    moved = workspaces_by_id([_ws("m", None, (0, 9), (0, 1000)), _ws("c", "m", (1, 2), (0, 100))])

    # When / Then
    assert not check_conservation("m", before, after).passed
    assert check_conservation("m", before, moved).passed


def test_check_bounds_flags_child_below_used_ceiling_and_floor_breaches() -> None:
    # Given a child below its usage, an ensure past its ceiling, a release below its floor
    ensure = build_ensure(
        "c", "m", {"projects": 0, "prompts": 50}, ceiling={"projects": 5, "prompts": 300}
    )
    release = build_release("d", floor={"projects": 1, "prompts": 200})
    after = workspaces_by_id(
        [
            _ws("m", None, (0, 10), (0, 1000)),
            _ws("c", "m", (1, 1), (500, 400)),
            _ws("d", "m", (0, 1), (0, 100)),
        ]
    )
    outcomes = [
        _outcome(ensure.request_id, "c", "topped-up", (1, 200), (1, 400)),
        _outcome(release.request_id, "d", "released", (1, 500), (1, 100), kind="release"),
    ]

    # When
    result = check_bounds(after, [ensure, release], outcomes, parent_id="m")

    # Then
    assert not result.passed
    assert len(result.violations) == 3
    assert (
        check_bounds(after, [ensure, release], outcomes, parent_id="m", metered_below_used={"c"})
        .violations[0]
        .startswith(ensure.request_id)
    )


def test_check_bounds_partial_ceiling_caps_only_the_dimension_it_names() -> None:
    # Given an ensure whose ceiling names prompts only, raising projects to 9 and prompts to 400
    ensure = build_ensure("c", "m", {"projects": 8, "prompts": 50}, ceiling={"prompts": 300})
    after = workspaces_by_id(
        [_ws("m", None, (0, 10), (0, 1000)), _ws("c", "m", (1, 9), (200, 400))]
    )
    outcomes = [_outcome(ensure.request_id, "c", "topped-up", (1, 200), (9, 400))]

    # When the bounds are checked
    result = check_bounds(after, [ensure], outcomes, parent_id="m")

    # Then only prompts is past its ceiling; projects is not capped at all (never at 0)
    assert result.violations == (f"{ensure.request_id} raised c prompts to 400 past ceiling 300",)


def test_check_terminal_outcomes_finds_lost_and_differing_requests() -> None:
    # Given four requests: one with two identical outcomes, one lost, one in the DLQ, one with
    # two outcomes of different content
    a, b, c, d = (build_ensure(w, "m") for w in ("a", "b", "c", "d"))
    outcomes = [_outcome(a.request_id, "a", "hot-path", (1, 1), (1, 1))] * 2
    outcomes += [
        _outcome(d.request_id, "d", "topped-up", (1, 100), (1, 200)),
        _outcome(d.request_id, "d", "topped-up", (1, 200), (1, 300)),
    ]

    # When
    strict = check_terminal_outcomes([a, b, c, d], outcomes, {c.request_id})
    lenient = check_terminal_outcomes([a, b, c, d], outcomes, {c.request_id}, allow_replays=True)

    # Then the identical repeat is at-least-once, reported; the lost and the differing fail
    assert sorted(strict.violations) == sorted(
        [
            f"{b.request_id}: no outcome and not in the DLQ",
            f"{d.request_id}: 2 outcomes with 2 different contents "
            "(topped-up/-/r0, topped-up/-/r0)",
        ]
    )
    assert strict.explained == (f"{a.request_id}: 2 identical outcomes ({UNTRACED_REPEAT})",)
    assert lenient.violations == (f"{b.request_id}: no outcome and not in the DLQ",)


def test_a_timed_out_publish_that_landed_is_explained_and_a_real_double_outcome_fails() -> None:
    # Given a record the handler failed after its PutEvents timed out but landed: the outcome
    # is on the bus once from the first delivery and once from the redelivery (stored outcome)
    a, b = (build_ensure(w, "m") for w in ("a", "b"))
    events = [
        _batch(21, 1, ("m1", "a", a.request_id), ("m2", "b", b.request_id)),
        {"ev": "release", "pid": 21, "batch": 1, "failures": ["m1", "m2"], "deleted": []},
        _batch(21, 2, ("m1", "a", a.request_id), ("m2", "b", b.request_id)),
        {"ev": "release", "pid": 21, "batch": 2, "failures": [], "deleted": ["m1", "m2"]},
    ]
    causes = explain_replays(events).by_request
    landed = [_outcome(a.request_id, "a", "topped-up", (1, 100), (1, 200))] * 2
    # And b, in the same batch, published two DIFFERENT outcomes: a real double outcome
    double = [
        _outcome(b.request_id, "b", "topped-up", (1, 100), (1, 200)),
        _outcome(b.request_id, "b", "topped-up", (1, 200), (1, 300)),
    ]

    # When check 3 judges them
    result = check_terminal_outcomes([a, b], [*landed, *double], set(), replay_causes=causes)

    # Then the landed publish is explained, named, and the double outcome is a violation
    assert causes[a.request_id] == PUBLISH_LANDED
    assert result.explained == (f"{a.request_id}: 2 identical outcomes ({PUBLISH_LANDED})",)
    assert result.violations == (
        f"{b.request_id}: 2 outcomes with 2 different contents (topped-up/-/r0, topped-up/-/r0)",
    )
    alone = check_terminal_outcomes([a], landed, set(), replay_causes=causes)
    assert alone.passed and "1 repeated (1 identical: at-least-once)" in alone.detail


def test_check_terminal_outcomes_counts_terminal_ledger_records() -> None:
    # Given two requests with one outcome each, only one of them with a terminal record
    a, b = (build_ensure(w, "m") for w in ("a", "b"))
    outcomes = [
        _outcome(a.request_id, "a", "hot-path", (1, 1), (1, 1)),
        _outcome(b.request_id, "b", "hot-path", (1, 1), (1, 1)),
    ]
    ledger = {
        a.request_id: LedgerEntry(request_id=a.request_id, state="final", outcome=outcomes[0]),
        b.request_id: LedgerEntry(
            request_id=b.request_id,
            state="intent",
            intent=TransferIntent(
                before=Totals(projects=1, prompts=1), target=Totals(projects=1, prompts=2)
            ),
        ),
    }

    result = check_terminal_outcomes([a, b], outcomes, set(), ledger=ledger)

    assert result.violations == (f"{b.request_id}: no terminal ledger record",)
    assert result.detail.startswith("1 violation(s)")
    passing = check_terminal_outcomes([a], outcomes[:1], set(), ledger=ledger)
    assert passing.passed and passing.detail.endswith("; 1 terminal ledger records")


def _batch(pid: int, batch: int, *msgs: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "ev": "receive",
        "pid": pid,
        "batch": batch,
        "consumer": pid % 10,
        "msgs": [{"id": mid, "group": group, "request_id": rid} for mid, group, rid in msgs],
    }


def test_explain_replays_names_dead_consumers_and_failed_deletes_only() -> None:
    # Given four batches: one released cleanly, one whose consumer was killed by its function
    # timeout, one killed with no trace line, one released with a failed delete
    events = [
        _batch(11, 1, ("m1", "g1", "r1")),
        {"ev": "release", "pid": 11, "batch": 1, "deleted": ["m1"], "delete_failed": []},
        _batch(12, 1, ("m2", "g2", "r2"), ("m3", "g3", "r3")),
        {"ev": "crash", "pid": 12, "at": "function_timeout"},
        _batch(13, 1, ("m4", "g4", "r4")),
        _batch(14, 1, ("m5", "g5", "r5"), ("m6", "g6", "r6")),
        {"ev": "release", "pid": 14, "batch": 1, "deleted": ["m5"], "delete_failed": ["m6"]},
    ]

    # When the traces are read
    causes = explain_replays(events)

    # Then each interrupted request has its cause, and nothing else has one
    assert causes.by_request == {
        "r2": "consumer 2 died: function_timeout",
        "r3": "consumer 2 died: function_timeout",
        "r4": "consumer 3 died: SIGKILL inside the handler, no trace line",
        "r6": "delete failed",
    }
    assert causes.interrupted_groups == {"g2", "g3", "g4"}
    assert causes.interrupted_batches == 2


def test_explained_table_counts_replays_per_cause() -> None:
    # Given three explained replays, two of one cause (which holds parentheses itself)
    lines = [
        "r1: 2 outcomes (consumer 1 died: function_timeout)",
        "r2: 2 outcomes (consumer 2 died: x (y))",
        "r3: 3 outcomes (consumer 2 died: x (y))",
    ]

    # When they are tabled
    table = explained_table(lines)

    # Then each cause is counted once with its number, then the requests are listed
    rows = [line.rstrip() for line in table.splitlines()]
    assert rows[0] == "Explained replays (3: not violations)"
    assert any(r.startswith("consumer 2 died: x (y)") and r.endswith(" 2") for r in rows)
    assert any(r.startswith("consumer 1 died: function_timeout") and r.endswith(" 1") for r in rows)
    assert sum(1 for r in rows if r.startswith("r")) == 3


def test_check_order_accepts_an_unreported_transfer_only_for_an_interrupted_child() -> None:
    # Given two children each with a transfer no outcome reports (set 300, then 400)
    before = workspaces_by_id(
        [_ws("c", "m", (1, 1), (100, 100)), _ws("d", "m", (1, 1), (100, 100))]
    )
    requests = [build_ensure(w, "m", {"projects": 0, "prompts": 300}) for w in ("c", "d")]
    outcomes = [
        _outcome(r.request_id, r.workspace_id, "topped-up", (1, 300), (1, 400)) for r in requests
    ]
    calls = [
        _transfer(1, "c", 1, 300),
        _transfer(2, "c", 1, 400),
        _transfer(3, "d", 1, 300),
        _transfer(4, "d", 1, 400),
    ]

    # When only c had a batch interrupted
    result = check_order(requests, outcomes, calls, before, lenient_children={"c"})

    # Then c passes and d is a violation
    assert len(result.violations) == 1
    assert result.violations[0].startswith("d: outcomes report totals [1/400]")


def test_run_checks_runs_a_list_of_small_checks_in_order() -> None:
    # Given a record of an empty run and a list with one added check
    record = RunRecord(
        masters=["m"],
        requests=[],
        before=workspaces_by_id([_ws("m", None, (0, 10), (0, 100))]),
        after=workspaces_by_id([_ws("m", None, (0, 10), (0, 100))]),
        calls=[],
        outcomes=[],
        letters=[],
        events=[],
        visibility_timeout_s=60,
        max_receive_count=5,
    )

    def nothing_refused(run: RunRecord) -> InvariantResult:
        return InvariantResult("nothing refused", not run.outcomes, "no outcomes")

    # When the demo's checks plus the new one run
    results = run_checks(record, [*DEMO_CHECKS, nothing_refused])

    # Then every check ran, in order, and passed
    assert [r.name for r in results][-2:] == ["queue drained", "nothing refused"]
    assert len(results) == len(DEMO_CHECKS) + 1
    assert all(r.passed for r in results), [r for r in results if not r.passed]


def test_check_order_detects_outcomes_out_of_enqueue_order_and_transfer_mismatch() -> None:
    # Given an ensure then a release for one child
    ensure = build_ensure("c", "m", {"projects": 0, "prompts": 300})
    release = build_release("c")
    before = workspaces_by_id([_ws("c", "m", (1, 1), (100, 100))])
    in_order = [
        _outcome(ensure.request_id, "c", "topped-up", (1, 100), (1, 400)),
        _outcome(release.request_id, "c", "released", (1, 400), (1, 100), kind="release"),
    ]
    calls = [_transfer(1, "c", 1, 400), _transfer(2, "c", 1, 100)]

    # When / Then: the right order passes, the reverse fails twice (order and totals)
    assert check_order([ensure, release], in_order, calls, before).passed
    reversed_result = check_order([ensure, release], in_order[::-1], calls[::-1], before)
    assert not reversed_result.passed
    # A transfer nobody reported fails the strict check only
    extra = [*calls, _transfer(3, "c", 1, 900)]
    assert not check_order([ensure, release], in_order, extra, before).passed
    assert check_order([ensure, release], in_order, extra, before, strict_transfers=False).passed


def test_check_order_places_no_keyless_dead_letter_and_still_orders_every_other_outcome() -> None:
    # Given three ensures of one child: the middle one ran out of receives before any
    # receive reached the ledger (the audit's letter carries no order key), the others applied
    first, middle, last = (build_ensure("c", "m", {"prompts": n}) for n in (300, 400, 500))
    before = workspaces_by_id([_ws("c", "m", (1, 1), (100, 100))])
    keyed = [
        _outcome(first.request_id, "c", "topped-up", (1, 100), (1, 400)).model_copy(
            update={"sequence_number": "0001"}
        ),
        _outcome(last.request_id, "c", "topped-up", (1, 400), (1, 600)).model_copy(
            update={"sequence_number": "0003"}
        ),
    ]
    letter = _outcome(middle.request_id, "c", "failed", None, None).model_copy(
        update={"dead_lettered": True, "error_code": "receivesExhausted"}
    )
    calls = [_transfer(1, "c", 1, 400), _transfer(2, "c", 1, 600)]

    # When the order is checked / Then it passes, naming the letter it placed nowhere
    result = check_order([first, middle, last], [*keyed, letter], calls, before)
    assert result.passed, result.detail
    assert "1 dead letter(s) without an order key, placed nowhere" in result.detail
    assert middle.request_id in result.detail
    # But a keyless outcome that applied something is still ordered (after the keyed ones)
    applied = letter.model_copy(
        update={
            "status": "topped-up",
            "dead_lettered": None,
            "error_code": None,
            "totals_before": Totals(projects=1, prompts=100),
            "totals_after": Totals(projects=1, prompts=100),
        }
    )
    assert not check_order([first, middle, last], [*keyed, applied], calls, before).passed


def test_check_order_reports_an_outcome_on_a_child_its_request_was_not_enqueued_for() -> None:
    # Given a release enqueued for child c whose outcome names child d
    release = build_release("c")
    before = workspaces_by_id(
        [_ws("c", "m", (1, 1), (100, 100)), _ws("d", "m", (1, 1), (100, 100))]
    )
    elsewhere = [
        _outcome(release.request_id, "d", "nothing-to-release", (1, 100), (1, 100), kind="release")
    ]

    # When the order is checked
    result = check_order([release], elsewhere, [], before)

    # Then it is a violation naming the child and the request, not a crash
    assert not result.passed
    assert result.violations == (
        f"d: outcome #1 is {release.request_id}, enqueued for another child",
    )


def test_check_headroom_requires_used_plus_need_plus_drafted_when_asked() -> None:
    # Given a child using 200 prompts with 150 drafted
    usage = workspaces_by_id([_ws("c", "m", (1, 1), (200, 400), drafted=150)])
    with_drafts = build_ensure("c", "m", {"projects": 0, "prompts": 100}, include_drafted=True)
    without = build_ensure("c", "m", {"projects": 0, "prompts": 100}, include_drafted=False)

    # When: both report totals of 400 prompts
    outcomes = [
        _outcome(with_drafts.request_id, "c", "hot-path", (1, 400), (1, 400)),
        _outcome(without.request_id, "c", "hot-path", (1, 400), (1, 400)),
    ]
    result = check_headroom([with_drafts, without], outcomes, usage)

    # Then: 200 + 150 + 100 = 450 > 400 fails; 200 + 100 <= 400 passes
    assert [v.split(" ")[0] for v in result.violations] == [with_drafts.request_id]


def _receive(
    pid: int, batch: int, t: float, group: str, rids: list[str], receive_count: int = 1
) -> dict[str, Any]:
    return {
        "ev": "receive",
        "consumer": pid,
        "pid": pid,
        "batch": batch,
        "t": t,
        "t_req": t - 0.01,
        "groups": {group: [f"m-{rid}" for rid in rids]},
        "msgs": [
            {"id": f"m-{rid}", "group": group, "request_id": rid, "receive_count": receive_count}
            for rid in rids
        ],
    }


def _release(
    pid: int, batch: int, t: float, deleted: list[str], failures: list[str] | None = None
) -> dict[str, Any]:
    return {
        "ev": "release",
        "consumer": pid,
        "pid": pid,
        "batch": batch,
        "t": t,
        "deleted": [f"m-{rid}" for rid in deleted],
        "failures": [f"m-{rid}" for rid in failures or []],
        "error": None,
    }


def test_check_group_exclusivity_flags_two_holders_and_respects_crashed_holds() -> None:
    # Given consumer 1 holding group g from t=1 to t=2, and consumer 2 receiving g at 1.5
    overlapping = [
        _receive(1, 1, 1.0, "g", ["a"]),
        _receive(2, 1, 1.5, "g", ["b"]),
        _release(1, 1, 2.0, ["a"]),
        _release(2, 1, 2.5, ["b"]),
    ]
    sequential = [
        _receive(1, 1, 1.0, "g", ["a"]),
        _release(1, 1, 2.0, ["a"]),
        _receive(2, 1, 2.1, "g", ["b"]),
        _release(2, 1, 2.5, ["b"]),
    ]
    # A crashed holder (no release) holds until its receive started + the visibility timeout
    crashed_then_early = [_receive(1, 1, 1.0, "g", ["a"]), _receive(2, 1, 3.0, "g", ["a"])]
    crashed_then_late = [_receive(1, 1, 1.0, "g", ["a"]), _receive(2, 1, 4.1, "g", ["a"])]

    # When / Then
    assert not check_group_exclusivity(overlapping, 3.0).passed
    assert check_group_exclusivity(sequential, 3.0).passed
    assert not check_group_exclusivity(crashed_then_early, 3.0).passed
    assert check_group_exclusivity(crashed_then_late, 3.0).passed


def test_check_fifo_delivery_flags_the_moto_redelivery_bug_shape() -> None:
    # Given requests a, b, c of one group
    a, b, c = (build_ensure("g", "m", request_id=rid) for rid in ("a", "b", "c"))
    # moto's bug: all three fail, then the LAST one comes back alone
    buggy = [
        _receive(1, 1, 1.0, "g", ["a", "b", "c"]),
        _release(1, 1, 1.1, [], ["a", "b", "c"]),
        _receive(2, 1, 5.0, "g", ["c"]),
    ]
    correct = [
        _receive(1, 1, 1.0, "g", ["a", "b", "c"]),
        _release(1, 1, 1.1, [], ["a", "b", "c"]),
        _receive(2, 1, 5.0, "g", ["a", "b", "c"]),
        _release(2, 1, 5.1, ["a", "b", "c"]),
    ]
    # A message that failed its final receive is gone (redriven): the next one is due
    redriven = [
        _receive(1, 1, 1.0, "g", ["a"], receive_count=5),
        _release(1, 1, 1.1, [], ["a"]),
        _receive(2, 1, 5.0, "g", ["b", "c"]),
    ]

    # When / Then
    assert not check_fifo_delivery(buggy, [a, b, c], 5).passed
    assert check_fifo_delivery(correct, [a, b, c], 5).passed
    assert check_fifo_delivery(redriven, [a, b, c], 5).passed


def test_a_put_events_timeout_the_worker_logged_is_named_as_the_cause(tmp_path: Path) -> None:
    from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublishError
    from serenity_allocator.adapters.observability import logger

    # Given the worker's own log line for a PutEvents that timed out (what a consumer's
    # stdout holds), for a chunk of two requests whose records then failed
    log = tmp_path / "consumer-00.stdout.log"
    with log.open("w", encoding="utf-8") as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logger.registered_formatter)
        logger.addHandler(handler)
        try:
            raise OutcomePublishError(["r1", "r2"], "ReadTimeoutError")
        except OutcomePublishError:
            logger.exception(NOT_PUBLISHED_LOG)
        finally:
            logger.removeHandler(handler)
    events = [
        _batch(31, 1, ("m1", "a", "r1"), ("m2", "b", "r2"), ("m3", "c", "r3")),
        {"ev": "release", "pid": 31, "batch": 1, "failures": ["m1", "m3"], "deleted": ["m2"]},
    ]

    # When the replays are explained with the logs
    failures = publish_failures([log, tmp_path / "missing.log"])
    causes = explain_replays(events, failures).by_request

    # Then the failed record whose publish timed out gets the named cause; the other keeps
    # the generic one, and a request whose record did not fail gets none from the log
    assert set(failures) == {"r1", "r2"}
    assert causes["r1"] == (
        "PutEvents failed (ReadTimeoutError) but its events had landed; the record came back "
        "and republished the stored outcome"
    )
    assert causes["r3"] == PUBLISH_LANDED
    assert "r2" not in causes


def _served(request_id: str, status: str, error_code: str | None = None) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id,
        kind="ensure",
        workspace_id="c",
        status=status,
        org_id="m",
        error_code=error_code,
    )


def test_the_write_after_ensures_follows_the_last_served_one_a_rightsized_ensure_included() -> None:
    # Given a child whose big ensure was topped up, then a small one rightsized (its surplus,
    # the big ensure's room among it, went back to the pool), then one refused for the pool
    big = build_ensure("c", "m", {"prompts": 150})
    small = build_ensure("c", "m", {"prompts": 10})
    refused = build_ensure("c", "m", {"prompts": 500})
    outcomes = [
        _served(big.request_id, "topped-up"),
        _served(small.request_id, "rightsized"),
        _served(refused.request_id, "rejected", "orgPoolExhausted"),
    ]

    # When the service's write is chosen
    last = last_served_ensures({"c": [big, small, refused]}, outcomes)

    # Then it is the rightsized ensure's: the refusal moved nothing after it
    assert last == [small]
    # And a child with no served ensure writes nothing
    assert last_served_ensures({"c": [refused]}, outcomes) == []


def test_no_write_is_checked_where_a_later_request_may_have_taken_the_room_back() -> None:
    # Given a served ensure followed by a release, by an ensure that failed (it may have
    # moved the child), or by one with no outcome at all (dead-lettered unannounced)
    served = build_ensure("c", "m", {"prompts": 150})
    release = build_release("c")
    failed = build_ensure("c", "m", {"prompts": 10})
    silent = build_ensure("c", "m", {"prompts": 10})
    outcomes = [
        _served(served.request_id, "topped-up"),
        AllocationOutcome(
            request_id=release.request_id, kind="release", workspace_id="c", status="released"
        ),
        _served(failed.request_id, "failed", "receivesExhausted"),
    ]

    # When the service's write is chosen, then there is none to check for that child
    for later in (release, failed, silent):
        assert last_served_ensures({"c": [served, later]}, outcomes) == []
    # And a release that handed nothing back leaves the ensure's room in place
    nothing = AllocationOutcome(
        request_id=release.request_id,
        kind="release",
        workspace_id="c",
        status="nothing-to-release",
    )
    assert last_served_ensures({"c": [served, release]}, [outcomes[0], nothing]) == [served]
