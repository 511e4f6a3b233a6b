"""Shared helpers for the infrastructure tests: the parsed template and small walkers."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
EVENTS_DIR = ROOT / "events"
RUNBOOKS_DIR = ROOT / "docs" / "runbooks"


@cache
def _load() -> str:
    # cfn-lint's own loader: the same reading of the short tags that the cfn-lint gate uses.
    from cfnlint.decode import cfn_yaml

    # A JSON round trip turns cfn-lint's node classes into plain dicts, lists and strings.
    return json.dumps(cfn_yaml.load(str(TEMPLATE_PATH)))


def load_template() -> dict[str, Any]:
    """A fresh, plain-Python copy of template.yaml (long-form intrinsics)."""
    document: dict[str, Any] = json.loads(_load())
    return document


def resources_of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    """Logical id -> resource for every resource of one type."""
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == resource_type
    }


def function_environment(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    """Globals environment merged with the function's own (the function wins), unresolved."""
    merged = dict(template["Globals"]["Function"]["Environment"]["Variables"])
    own = template["Resources"][logical_id]["Properties"].get("Environment", {})
    merged.update(own.get("Variables", {}))
    return merged


_SUB_VARIABLE = re.compile(r"\$\{([^}!][^}]*)\}")


def sub_variables(text: str) -> list[str]:
    """The ``${...}`` names a Fn::Sub string references (escaped ``${!x}`` excluded)."""
    return _SUB_VARIABLE.findall(text)


def dashboard_sub(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The dashboard's ``Fn::Sub``: the JSON body and its local variables (unresolved)."""
    (dashboard,) = resources_of_type(template, "AWS::CloudWatch::Dashboard").values()
    argument = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    body, variables = (argument, {}) if isinstance(argument, str) else argument
    assert isinstance(body, str), "DashboardBody must be !Sub of one JSON string"
    return body, dict(variables)
