"""The demo, run in-process at a small size: every check passes and no secret leaks."""

from __future__ import annotations

import io
import secrets
from pathlib import Path

import pytest

from serenity_tools.verification import demo
from serenity_tools.verification.demo import DemoConfig, run_demo

CANARY_TOKEN = "canary-bearer-0123456789abcdef"

EXPECTED_CHECKS = (
    "1 conservation",
    "2 bounds (used, ceiling, floor)",
    "3 one terminal outcome or DLQ",
    "4 per-child order",
    "5 headroom after ensure",
    "DLQ contents",
    "writes after ensure accepted",
    "guarded writes refused only when the pool was short",
    "broker: one holder per group",
    "broker: FIFO delivery order",
    "tiered workspaces",
    "real-sized pools",
)


def test_demo_small_run_passes_every_invariant_without_leaking_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a small demo (10 children, 2 consumers) whose stack token is a known canary
    monkeypatch.setattr(secrets, "token_urlsafe", lambda nbytes=None: CANARY_TOKEN)
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
        "Rightsizing sweep",
        "Invariant checks",
    ):
        assert title in report
    # And the bearer token appears nowhere: not in the report, not in any log or trace
    assert CANARY_TOKEN not in report
    for path in (tmp_path / "demo").rglob("*"):
        if path.is_file():
            assert CANARY_TOKEN not in path.read_text(encoding="utf-8", errors="replace"), path


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
