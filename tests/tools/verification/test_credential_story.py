"""The demo's credential checks catch what they claim to catch (and pass what is fine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from serenity_allocator.adapters.sqs import build_ensure
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.credential_story import (
    NOT_SCRUBBED_LOG,
    Refusals,
    check_refusals,
    check_scrubbed,
    check_sweep_rolled,
    not_scrubbed_records,
)

DENIED = build_ensure("c-denied", "org", {"prompts": 50}, request_id="r-denied")
REVOKED = build_ensure("c-lapsed", "org", {"prompts": 50}, request_id="r-revoked")
MISSING = build_ensure("c-legacy", "org", {"prompts": 50}, request_id="r-missing")
REFUSALS = Refusals({"accessDenied": DENIED, "needsReauth": REVOKED, "noCredential": MISSING})


def _tight(child: str, prompts: int = 300) -> dict[str, Any]:
    return {
        "id": child,
        "parent_id": "org",
        "ai": {"projects": {"used": 2, "total": 2}, "prompts": {"used": 300, "total": prompts}},
    }


BEFORE = {c: _tight(c) for c in ("c-denied", "c-lapsed", "c-legacy")}


def _outcome(request_id: str, child: str, status: str, code: str) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id,
        kind="ensure",
        workspace_id=child,
        status=status,  # type: ignore[arg-type]
        error_code=code,
    )


OUTCOMES = [
    _outcome("r-denied", "c-denied", "rejected", "accessDenied"),
    _outcome("r-revoked", "c-lapsed", "failed", "needsReauth"),
    _outcome("r-missing", "c-legacy", "failed", "noCredential"),
]


def _letter(request_id: str, reason: str | None) -> DeadLetter:
    return DeadLetter("m-" + request_id, "g", "{}", request_id, reason, 1)


LETTERS = [_letter("r-revoked", "needsReauth"), _letter("r-missing", "noCredential")]


def test_the_three_refusals_as_designed_pass() -> None:
    result = check_refusals(REFUSALS, OUTCOMES, BEFORE, BEFORE, LETTERS)

    assert result.passed, result.detail


def test_an_access_denied_request_that_moved_its_child_is_a_violation() -> None:
    # Given the intruder's child raised after all
    after = {**BEFORE, "c-denied": _tight("c-denied", prompts=400)}

    result = check_refusals(REFUSALS, OUTCOMES, BEFORE, after, LETTERS)

    assert result.violations == ("accessDenied request r-denied: c-denied prompts changed",)


def test_a_refusal_with_another_outcome_or_dlq_reason_is_a_violation() -> None:
    # Given the revoked promise retried into success and the denied one dead-lettered
    outcomes = [OUTCOMES[0], _outcome("r-revoked", "c-lapsed", "hot-path", ""), OUTCOMES[2]]
    letters = [*LETTERS[1:], _letter("r-denied", "accessDenied")]

    result = check_refusals(REFUSALS, outcomes, BEFORE, BEFORE, letters)

    assert result.violations == (
        "accessDenied request r-denied: DLQ reason accessDenied, not None",
        "needsReauth request r-revoked: hot-path/, expected failed/needsReauth",
        "needsReauth request r-revoked: DLQ reason None, not needsReauth",
    )


def _item(request_id: str, *, token: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"request_id": {"S": request_id}, "workspace_id": {"S": "c"}}
    if token:
        item["promise_token"] = {"B": b"ciphertext"}
    return item


def test_a_record_still_holding_its_token_is_a_violation_unless_the_worker_reported_it(
    tmp_path: Path,
) -> None:
    # Given two records kept their tokens, one of them reported by the worker's warning
    log = tmp_path / "consumer.stdout.log"
    log.write_text(
        json.dumps({"message": NOT_SCRUBBED_LOG, "credential_request_id": "r2", "reason": "x"})
        + "\nnot json\n",
        encoding="utf-8",
    )
    items = [_item("r1", token=True), _item("r2", token=True), _item("r3", token=False)]

    reported = not_scrubbed_records([log, tmp_path / "missing.log"])
    result = check_scrubbed(items, reported)

    # Then only the unreported one is a violation
    assert reported == {"r2": "x"}
    assert result.violations == ("r1: record still holds its promise token",)
    assert check_scrubbed([_item("r2", token=True), _item("r3", token=False)], reported).passed


def test_a_sweep_run_that_did_not_roll_its_token_fails() -> None:
    # Given two runs of three batches each, ended with their claims scrubbed
    runs = [[{"done": False}, {"done": False}, {"done": True}]] * 2
    ended = {"run_id": "r", "ended": "done"}

    assert check_sweep_rolled(runs, 6, [ended, ended]).passed
    # When one batch made no exchange, a run stopped early, or a claim kept its token
    assert check_sweep_rolled(runs, 5, [ended, ended]).violations == (
        "5 exchanges for 6 batches (one each)",
    )
    stopped = [runs[0], [{"done": False}]]
    assert check_sweep_rolled(stopped, 4, [ended, ended]).violations == (
        "run 2: not done after 1 batches",
        "run 2: one batch only",
    )
    held = {"run_id": "r", "promise_token": "sealed", "ended": None}
    assert check_sweep_rolled(runs, 6, [ended, held]).violations == (
        "run 2: its claim still holds a token or never ended",
    )
