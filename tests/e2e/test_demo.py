"""The demo, run in-process at a small size: every check passes and no secret leaks."""

from __future__ import annotations

import io
import itertools
import secrets
from pathlib import Path

import pytest

from serenity_tools.verification import demo
from serenity_tools.verification.demo import DemoConfig, run_demo

CANARY = "canary-token-"
"""Every token the run makes (the stack's bearer, IMS access and promise tokens) holds it."""

EXPECTED_CHECKS = (
    "1 conservation",
    "2 bounds (used, ceiling, floor)",
    "3 one terminal outcome or DLQ",
    "4 per-child order",
    "5 headroom after ensure",
    "6 ledger: one terminal record, outcomes equal it",
    "7 own user's token, members only",
    "DLQ contents",
    "writes after ensure accepted",
    "guarded writes refused only when the pool was short",
    "broker: one holder per group",
    "broker: FIFO delivery order",
    "tiered workspaces",
    "real-sized pools",
    "credential outcomes",
    "no promise token at rest",
    "sweep token rolled per batch",
)


def test_demo_small_run_passes_every_invariant_without_leaking_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a small demo (10 children, 2 consumers) whose every token holds a known canary
    # (the stack's bearer, and the simulator's IMS access and promise tokens), each unique
    counter = itertools.count()
    monkeypatch.setattr(
        secrets, "token_urlsafe", lambda nbytes=None: f"{CANARY}{next(counter):06d}x9f3k2"
    )
    config = DemoConfig(
        children=10,
        consumers=2,
        producers=2,
        latency_ms=0.0,
        max_receive_count=2,  # the zombie reaches the DLQ after two receives
        work_dir=tmp_path / "demo",
    )
    out = io.StringIO()

    # When it runs
    code = run_demo(config, out)

    # Then it succeeds and prints PASS for every check
    report = out.getvalue()
    assert code == 0, report
    for check in EXPECTED_CHECKS:
        row = next(line for line in report.splitlines() if line.startswith(check))
        assert " PASS " in row, row
    assert "FAIL" not in report
    for title in (
        "Org pool and children",
        "Outcome events",
        "Semrush calls",
        "Metrics counted",
        "Dead-letter queue",
        "IMS calls made",
        "Rightsizing sweep",
        "Invariant checks",
    ):
        assert title in report
    # And the run acted as its users: the credential outcomes are in the report
    assert "accessDenied" in report and "needsReauth" in report and "noCredential" in report
    # And no token appears anywhere: not in the report, not in any log or trace
    assert CANARY not in report
    for path in (tmp_path / "demo").rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(encoding="utf-8", errors="replace"), path


def test_demo_config_refuses_sizes_it_cannot_run() -> None:
    # Given / When / Then: too few children to hold every kind, or no consumer
    with pytest.raises(ValueError, match="children"):
        DemoConfig(children=3)
    with pytest.raises(ValueError, match="consumer"):
        DemoConfig(consumers=0)


def test_demo_plans_each_child_kind_its_requests() -> None:
    # Given the default plan
    import random

    kinds = demo.plan_children(DemoConfig(), random.Random(1))
    plans = demo.plan_requests(kinds, random.Random(1))

    # Then the special children are there, the burst is coalescable, idle children get nothing
    assert sorted(set(kinds.values())) == [
        "burst",
        "ceiling",
        "drafts",
        "greedy",
        "idle",
        "over",
        "tight",
        "zombie",
    ]
    burst = next(c for c, k in kinds.items() if k == "burst")
    assert len(plans[burst]) == 8 and {r.kind for r in plans[burst]} == {"ensure"}
    assert all(child not in plans for child, kind in kinds.items() if kind == "idle")
    assert any(
        [r.kind for r in requests] == ["ensure", "release", "ensure"] for requests in plans.values()
    )
