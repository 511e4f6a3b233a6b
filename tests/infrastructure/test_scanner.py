"""The template scanner's gate: it runs in `make test`, and every skip says why.

checkov itself runs in `make scan` (its own venv, see the Makefile); these tests keep its
configuration honest: a skip without a reason, or one the docs do not list, fails here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.infrastructure._template import ROOT, load_template

CONFIG = ROOT / ".checkov.yaml"
CHECK_ID = re.compile(r"CKV2?_AWS_\d+")
SKIP_LINE = re.compile(r"^\s*-\s*(?P<id>\S+)\s*#\s*why:\s*(?P<why>.*)$")
MIN_REASON = 40  # characters: a reason, not a shrug


def _config_skips() -> dict[str, str]:
    """check id -> reason, read from the raw file (the reasons are comments)."""
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    listed = config["skip-check"]
    reasons = {}
    for line in CONFIG.read_text(encoding="utf-8").splitlines():
        match = SKIP_LINE.match(line)
        if match:
            reasons[match["id"]] = match["why"].strip()
    assert sorted(reasons) == sorted(listed), "every skip-check entry carries '# why: ...'"
    return reasons


def _resource_skips(template: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(resource, check id, comment) for each skip in a resource's Metadata."""
    return [
        (name, skip["id"], skip.get("comment", ""))
        for name, resource in template["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]


def test_make_test_runs_the_scanner_over_the_template() -> None:
    # Given the Makefile and the scanner's configuration
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    # Then `make test` runs the gates, among them `scan`, which runs checkov with that
    # configuration
    (test_recipe,) = re.findall(r"^test:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert re.search(r"\$\(MAKE\).* gates$", test_recipe, flags=re.MULTILINE)
    (gates,) = re.findall(r"^gates:.*\n\t(.*)$", makefile, flags=re.MULTILINE)
    assert "scan" in gates.split()
    assert re.search(r"^scan:.*\n\t.*checkov --config-file \.checkov\.yaml$", makefile, re.M)
    # And it scans template.yaml as CloudFormation, failing on any finding
    assert config["file"] == ["template.yaml"]
    assert config["framework"] == ["cloudformation"]
    assert not config.get("soft-fail", False)


def test_every_skip_in_the_list_names_a_check_and_why() -> None:
    for check, reason in _config_skips().items():
        assert CHECK_ID.fullmatch(check), check
        assert len(reason) >= MIN_REASON, f"{check}: reason too short: {reason!r}"


def test_every_resource_level_skip_names_why() -> None:
    skips = _resource_skips(load_template())
    assert skips, "expected the access-log bucket's own-logging skip"
    for resource, check, comment in skips:
        assert CHECK_ID.fullmatch(check), (resource, check)
        assert len(comment) >= MIN_REASON, (resource, check, comment)


@pytest.mark.parametrize("source", ["skip list", "resource metadata"])
def test_docs_list_every_skip(source: str) -> None:
    # Given the configuration docs' scanner section
    docs = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = docs.split("## Scanner skips", 1)[1].split("\n## ", 1)[0]
    if source == "skip list":
        checks = set(_config_skips())
    else:
        checks = {check for _, check, _ in _resource_skips(load_template())}
    # Then each skipped check is listed there
    for check in checks:
        assert f"`{check}`" in section, check
