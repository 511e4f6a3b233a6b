"""The unit and tool tests mirror the house: each file sits in the folder of what it tests.

``tests/unit/<part>/`` mirrors ``src/serenity_allocator/<part>`` (a package or a module:
``adapters/semrush/`` is ``adapters/semrush.py``), ``tests/tools/<part>/`` mirrors
``tools/serenity_tools/<part>``, and ``tests/tools/bench/`` the benchmarks (docs/testing.md has
the table). A test file straight in ``tests/unit`` or ``tests/tools`` has no layer, and a folder
without ``__init__.py`` would make two ``test_errors.py`` one module to pytest's default import
mode, so both fail here.
"""

from __future__ import annotations

from pathlib import Path

from tests.infrastructure._template import ROOT

TESTS = ROOT / "tests"
MIRRORED = {
    "unit": {"": ROOT / "src" / "serenity_allocator"},
    "tools": {"": ROOT / "tools" / "serenity_tools", "bench": ROOT / "bench"},
}
"""Each tier of the house's own tests, and where its folders' names must exist: under the
source named by the folder's first part, or else under the tier's default ("")."""


def loose_files(tier: Path) -> list[str]:
    """The Python files straight in ``tier``, its package marker aside."""
    return sorted(p.name for p in tier.glob("*.py") if p.name != "__init__.py")


def folders(tier: Path) -> list[Path]:
    """Every folder under ``tier`` that holds a Python file."""
    return sorted({p.parent for p in tier.rglob("*.py")} - {tier})


def mirrors(folder: Path, tier: Path, sources: dict[str, Path]) -> bool:
    """Whether ``folder`` names a package or a module of the source it belongs to."""
    first, *rest = folder.relative_to(tier).parts
    source, parts = (sources[first], rest) if first in sources else (sources[""], [first, *rest])
    path = source.joinpath(*parts)
    return path.is_dir() or path.with_suffix(".py").is_file()


def test_no_file_sits_straight_in_the_unit_or_the_tools_tier() -> None:
    assert {tier: loose_files(TESTS / tier) for tier in MIRRORED} == {"unit": [], "tools": []}


def test_every_folder_of_the_unit_and_tools_tiers_is_a_package() -> None:
    missing = [
        folder.relative_to(ROOT).as_posix()
        for tier in MIRRORED
        for folder in [TESTS / tier, *folders(TESTS / tier)]
        if not (folder / "__init__.py").is_file()
    ]
    assert missing == []


def test_every_folder_names_what_it_tests() -> None:
    stray = [
        folder.relative_to(ROOT).as_posix()
        for tier, sources in MIRRORED.items()
        for folder in folders(TESTS / tier)
        if not mirrors(folder, TESTS / tier, sources)
    ]
    assert stray == []


def test_the_checks_see_a_loose_file_a_missing_marker_and_a_stray_folder(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "domain").mkdir(parents=True)
    (source / "producer.py").touch()
    tier = tmp_path / "unit"
    for name in ("domain", "producer", "helpers"):
        (tier / name).mkdir(parents=True)
        (tier / name / "test_it.py").touch()
    (tier / "domain" / "__init__.py").touch()
    (tier / "test_loose.py").touch()
    (tier / "__init__.py").touch()

    assert loose_files(tier) == ["test_loose.py"]
    assert [f.name for f in folders(tier) if not (f / "__init__.py").is_file()] == [
        "helpers",
        "producer",
    ]
    assert [f.name for f in folders(tier) if not mirrors(f, tier, {"": source})] == ["helpers"]
    bench = tmp_path / "bench"
    bench.mkdir()
    assert mirrors(bench, tmp_path, {"": source, "bench": bench})
    assert not mirrors(tmp_path / "src", tmp_path, {"": source, "bench": bench})
