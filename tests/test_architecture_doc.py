"""docs/architecture.md names every module of the package (issue 38): its table "Modules and
their one reason to change" has one row per module of ``surveysynth`` and ``r_bridge``, as a
path in backquotes. A module added without a row, or a row whose module is gone, fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("surveysynth", "r_bridge")
ROW = re.compile(r"^\| `((?:surveysynth|r_bridge)/[\w/]+\.py)` \|", re.M)


def modules_in_tree() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if "rpkg" not in p.relative_to(ROOT).parts}


def modules_in_doc(text: str) -> list[str]:
    section = text.split("### Modules and their one reason to change", 1)[1].split("\n### ", 1)[0]
    return ROW.findall(section)


def test_every_module_has_one_row_and_every_row_a_module():
    rows = modules_in_doc(DOC.read_text())
    tree = modules_in_tree()
    twice = sorted({m for m in rows if rows.count(m) > 1})
    assert not twice, f"modules with more than one row: {twice}"
    missing = sorted(tree - set(rows))
    assert not missing, (f"modules not in docs/architecture.md's module table: {missing}. Fix: "
                         "add a row (module, what it holds, its one reason to change).")
    stale = sorted(set(rows) - tree)
    assert not stale, f"rows of modules that do not exist: {stale}"


def test_the_check_sees_a_new_module_and_a_removed_one(tmp_path):
    """The comparison itself: a doc without one row, or with a row of a module that does not
    exist, is caught (a parser that found nothing, or read the whole page, would not)."""
    text = DOC.read_text()
    rows = modules_in_doc(text)
    assert len(rows) == len(modules_in_tree()) > 50
    row = "| `surveysynth/levels.py` |"
    assert row in text
    assert "surveysynth/levels.py" not in modules_in_doc(text.replace(row, "| levels.py |"))
    # a module path mentioned elsewhere on the page is not a row of the table
    walk = text.replace("### Modules and their one reason to change",
                        "`surveysynth/nothing.py` here\n\n### Modules and their one reason "
                        "to change")
    assert "surveysynth/nothing.py" not in modules_in_doc(walk)
    extra = text.replace(row, "| `surveysynth/gone.py` | x | y |\n" + row)
    assert "surveysynth/gone.py" in modules_in_doc(extra)


def test_the_release_walk_names_real_modules():
    """Every module path the walk of one release mentions exists."""
    text = DOC.read_text()
    walk = text.split("### A release, from TOML to the public folder", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:synth|privacy|variance|engines|analysis)/\w+\.py|\w+\.py)", walk))
    assert len(named) > 15, named
    tree = {p.relative_to(ROOT / "surveysynth").as_posix()
            for p in (ROOT / "surveysynth").rglob("*.py")}
    assert not named - tree, sorted(named - tree)
