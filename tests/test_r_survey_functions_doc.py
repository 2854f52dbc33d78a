"""docs/r_survey_functions.md covers every object R survey 4.5 exports, each with a status.

The list of exports is R's own (``getNamespaceExports("survey")`` of survey 4.5, stored by
tests/reference/r_survey45/exports.R in exports.json: 103 names, 99 functions and 4 calibration
function objects ``cal.*``). Every export must be named in the first (R) column of a table row
of the doc, and the first row naming it gives its status: the status cell starts with
``present``, ``different`` or ``absent``, and an absent row says why. The counts stated at the
top of the doc must equal the counts over the table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "r_survey_functions.md"
EXPORTS = json.loads((ROOT / "tests" / "reference" / "r_survey45" / "exports.json").read_text())
STATUSES = ("present", "different", "absent")
HEADER = re.compile(
    r"R survey 4\.5 exports (\d+) names \((\d+) functions and (\d+) calibration-function "
    r"objects[^)]*\)\. Of them, (\d+) are present, (\d+) different and (\d+) absent"
)


def _rows(text: str) -> list[tuple[str, str]]:
    """(R cell, status cell) of every row of the status tables (those whose header's first
    cell is "R"; other tables, e.g. the one of R 4.5's changed defaults, are skipped)."""
    rows = []
    lines = text.splitlines()
    in_status_table = False
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            in_status_table = False
            continue
        if set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if nxt.startswith("|") and set(nxt) <= set("|-: "):  # a header row
            in_status_table = cells[0] == "R"
            continue
        if in_status_table and len(cells) >= 3:
            rows.append((cells[0], cells[-1]))
    return rows


def _names_in(cell: str) -> set[str]:
    """R names written in code spans of a cell: each identifier in a span."""
    names = set()
    for span in re.findall(r"`([^`]*)`", cell):
        names.update(re.findall(r"[A-Za-z_.][A-Za-z0-9_.]*(?:<-)?", span))
    return names


def coverage(text: str, exports: list[str]) -> tuple[dict[str, str], list[str]]:
    """Status of every export (first row naming it) and the problems found."""
    rows = _rows(text)
    status: dict[str, str] = {}
    problems = []
    for name in exports:
        row = next((r for r in rows if name in _names_in(r[0])), None)
        if row is None:
            problems.append(f"{name}: in no table row of the doc")
            continue
        m = re.match(r"\W*(\w+)", row[1])
        word = m.group(1).lower() if m else ""
        if word not in STATUSES:
            problems.append(f"{name}: status cell {row[1][:40]!r} does not start with {STATUSES}")
            continue
        if word == "absent" and len(re.sub(r"\W", "", row[1])) < len("absent") + 8:
            problems.append(f"{name}: absent without a reason ({row[1]!r})")
        status[name] = word
    m = HEADER.search(re.sub(r"\s+", " ", text))
    if m is None:
        problems.append("header: no 'R survey 4.5 exports N names (...)' counts line")
    else:
        stated = [int(g) for g in m.groups()]
        kinds = [e["kind"] for e in EXPORTS["exports"] if e["name"] in exports]
        actual = [len(exports), kinds.count("function"), len(exports) - kinds.count("function"),
                  *(list(status.values()).count(s) for s in STATUSES)]
        if stated != actual:
            problems.append(f"header counts {stated} != table {actual}")
    return status, problems


NAMES = [e["name"] for e in EXPORTS["exports"]]


def test_reference_is_survey_45_with_its_103_exports():
    assert EXPORTS["survey_version"] == "4.5"
    assert EXPORTS["n_exports"] == len(NAMES) == 103
    assert EXPORTS["n_functions"] == 99
    assert sorted(n for n in NAMES if not n[0].isalpha() or n.startswith("cal.")) == [
        "cal.linear", "cal.logit", "cal.raking", "cal.sinh"]


def test_every_export_has_a_status_and_the_counts_match():
    text = DOC.read_text()
    assert "R `survey` 4.5" in text.split("\n\n")[1]
    status, problems = coverage(text, NAMES)
    assert not problems, "\n".join(problems)
    assert len(status) == 103


@pytest.mark.parametrize("mutant", ["drop_row", "status_word", "bare_absent", "count"])
def test_coverage_check_catches_a_broken_doc(mutant):
    """Mutants of the doc the check must reject: a row removed (its export unlisted), a status
    cell not starting with a status, an absent row without a reason, a count off by one."""
    text = DOC.read_text()
    if mutant == "drop_row":
        text = "\n".join(line for line in text.splitlines() if "`svyvar`" not in line)
    elif mutant == "status_word":
        text = re.sub(r"(\| `svyvar` \|[^\n]*\| )present", r"\1done", text)
    elif mutant == "bare_absent":
        text = re.sub(r"(\| `svyvar` \|[^\n]*\| )present[^\n]*\|", r"\1absent |", text)
    else:
        text = re.sub(r"(\d+) are present", lambda m: f"{int(m.group(1)) + 1} are present", text)
    _, problems = coverage(text, NAMES)
    assert problems
