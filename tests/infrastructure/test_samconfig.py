"""samconfig.toml: one stack per environment, overrides that name real template parameters."""

from __future__ import annotations

import shlex
import tomllib
from typing import Any

import pytest

from tests.infrastructure._template import ROOT, load_template


@pytest.fixture(scope="module")
def samconfig() -> dict[str, Any]:
    return tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))


def _overrides(deploy: dict[str, Any]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in shlex.split(deploy["parameter_overrides"]))


def test_samconfig_has_default_dev_and_prod(samconfig: dict[str, Any]) -> None:
    assert samconfig["version"] == 0.1
    assert {"default", "dev", "prod"} <= set(samconfig)


@pytest.mark.parametrize(
    ("environment", "stack", "name"),
    [
        ("default", "serenity-allocator-dev", "dev"),
        ("dev", "serenity-allocator-dev", "dev"),
        ("prod", "serenity-allocator-prod", "prod"),
    ],
)
def test_deploy_settings_per_environment(
    samconfig: dict[str, Any], environment: str, stack: str, name: str
) -> None:
    # Given one environment's deploy parameters
    deploy = samconfig[environment]["deploy"]["parameters"]
    parameters = load_template()["Parameters"]
    # Then it deploys its own stack with IAM capability and a managed artifact bucket
    assert deploy["stack_name"] == stack
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["resolve_s3"] is True
    # And its overrides name template parameters with allowed values
    overrides = _overrides(deploy)
    assert overrides["EnvironmentName"] == name
    for key, value in overrides.items():
        assert key in parameters, key
        allowed = parameters[key].get("AllowedValues")
        assert allowed is None or value in allowed, key
    # And no environment turns the kill switch on from config (it is flipped deliberately)
    assert overrides.get("DynamicAllocation", "false") == "false"


def test_prod_asks_before_changing_anything(samconfig: dict[str, Any]) -> None:
    assert samconfig["prod"]["deploy"]["parameters"]["confirm_changeset"] is True
