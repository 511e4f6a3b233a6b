"""``make stress``: the burners it starts are the ones it stops, and it fails on a failed check."""

from __future__ import annotations

import argparse

import pytest

from serenity_tools.verification import stress
from serenity_tools.verification.harness.config import HarnessConfig
from serenity_tools.verification.stress import StressRun, burners


def test_burners_run_while_held_and_exactly_those_are_stopped() -> None:
    # Given two burners
    with burners(2) as started:
        # When they are held
        # Then each is a live process
        assert len(started) == 2
        assert all(process.poll() is None for process in started)
    # And once released, each has ended
    assert all(process.poll() is not None for process in started)


def _args(**overrides: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    stress.configure(parser)
    args = parser.parse_args(["--burners", "0"])
    for name, value in overrides.items():
        setattr(args, name, value)
    return args


def test_stress_runs_the_demo_and_each_scenario_and_fails_when_one_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a demo that passes and scenarios of which "crash" fails
    ran: list[str] = []

    def demo(work_dir: object, endpoints: object) -> tuple[StressRun, str]:
        ran.append("demo")
        return StressRun("demo", True, 1.0, 0, 0.5), "demo report"

    def scenario(name: str, config: HarnessConfig) -> tuple[StressRun, str]:
        ran.append(name)
        return StressRun(f"harness {name}", name != "crash", 2.0, 3, 0.5), f"{name} report"

    monkeypatch.setattr(stress, "_demo", demo)
    monkeypatch.setattr(stress, "_scenario", scenario)
    monkeypatch.setattr(stress.time, "sleep", lambda seconds: None)

    # When stress runs with its default scenarios
    code = stress.run(_args())

    # Then it ran the demo and both scenarios, printed each report and the summary, and failed
    assert ran == ["demo", "concurrency", "crash"]
    out = capsys.readouterr().out
    assert "demo report" in out and "crash report" in out
    summary = out[out.index("Stress summary") :].splitlines()
    assert summary[0] == f"Stress summary (0 CPU burners on {stress.os.cpu_count()} cores)"
    assert [line.split()[0:3] for line in summary[3:]] == [
        ["demo", "PASS", "1.0"],
        ["harness", "concurrency", "PASS"],
        ["harness", "crash", "FAIL"],
    ]
    assert code == 1


def test_stress_passes_when_every_run_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given one scenario that passes, no demo
    monkeypatch.setattr(
        stress,
        "_scenario",
        lambda name, config: (StressRun(name, True, 1.0, 0, 0.1), "report"),
    )
    monkeypatch.setattr(stress.time, "sleep", lambda seconds: None)

    # When / Then
    assert stress.run(_args(no_demo=True, scenario=["faults"])) == 0
