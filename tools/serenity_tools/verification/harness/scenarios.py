"""The scenarios by name: one module each, imported when chosen."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from serenity_tools.verification.harness.config import SCENARIOS, HarnessConfig
from serenity_tools.verification.harness.results import ScenarioResult

RUNNERS: Mapping[str, tuple[str, str]] = {
    "concurrency": ("concurrency", "run_concurrency"),
    "standard-queue": ("standard_queue", "run_standard_queue"),
    "crash": ("crash", "run_crash"),
    "faults": ("faults", "run_faults"),
    "poison": ("poison", "run_poison"),
    "sweep-crash": ("sweep_crash", "run_sweep_crash"),
}
"""Scenario name -> (module of this package, its runner)."""


def runner(name: str) -> Callable[[HarnessConfig], ScenarioResult]:
    """The runner of scenario ``name``.

    Raises:
        ValueError: No such scenario.
    """
    if name not in RUNNERS:
        raise ValueError(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")
    module_name, function_name = RUNNERS[name]
    module = importlib.import_module(f"{__package__}.{module_name}")
    run: Callable[[HarnessConfig], ScenarioResult] = getattr(module, function_name)
    return run


def run_scenario(name: str, config: HarnessConfig) -> ScenarioResult:
    """Run one scenario by name."""
    return runner(name)(config)
