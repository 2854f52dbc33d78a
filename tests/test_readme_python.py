"""The README's Python examples run as written, and the output the README shows is the output
they print (issue 37: "the README's Python and R examples run in the suite and their outputs are
shown in the README"; the R example: tests/test_readme_r.py).

The ```python blocks of README.md's "## Python" section run in order in one namespace, in a
temporary folder (what they write stays there). A block followed by a ```text block must print
exactly that text. The private FBS release (default chains, tuning, the report's attack
evidence) runs in the slow tier; the default tier runs the others, the estimates beside the
confidential ones among them. ``SURVEYSYNTH_UPDATE_README=1`` writes the printed output into
README.md instead of comparing (after a deliberate change of a synthesizer).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

pytestmark = pytest.mark.skipif(shutil.which("Rscript") is None,
                                reason="R is not installed (load_api reads R's api data)")


def _blocks() -> list[tuple[str, str | None]]:
    """(code, shown output or None) of each ```python block of the "## Python" section."""
    text = README.read_text()
    m = re.search(r"^## Python\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert m, "README.md has no '## Python' section"
    found = re.findall(r"```python\n(.*?)```\n(?:\n```text\n(.*?)```\n)?", m.group(1), flags=re.S)
    return [(code, out or None) for code, out in found]


def _slow(code: str) -> bool:
    return "ss.synth.FBS(" in code


def _run(blocks: list[tuple[str, str | None]], tmp: Path) -> list[str]:
    """Run the blocks in one namespace in ``tmp``; the stdout of each."""
    ns: dict = {"__name__": "__readme__"}
    printed = []
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        for code, _ in blocks:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - the README's code
            printed.append(buf.getvalue())
    finally:
        os.chdir(cwd)
    return printed


def _check(blocks, printed) -> None:
    text = README.read_text()
    for (code, shown), out in zip(blocks, printed, strict=True):
        if shown is None:
            continue
        if os.environ.get("SURVEYSYNTH_UPDATE_README"):
            text = text.replace(f"{code}```\n\n```text\n{shown}```",
                                f"{code}```\n\n```text\n{out}```", 1)
            continue
        assert out == shown, f"README shows\n{shown}\nbut the block prints\n{out}"
    if os.environ.get("SURVEYSYNTH_UPDATE_README"):
        README.write_text(text)


def test_readme_has_the_estimates_beside_the_confidential_ones():
    blocks = _blocks()
    shown = [out for code, out in blocks if out is not None and "rel.mean(" in code]
    assert len(shown) == 1, "one block prints the release's mean beside the design's"
    lines = shown[0].splitlines()
    assert lines[0].split() == ["estimate", "se", "df", "ci_low", "ci_high"]
    assert [ln.split()[0] for ln in lines[1:]] == ["confidential", "release"]
    assert lines[1].split()[1:3] == ["662.29", "9.41"]  # R survey: svymean(~api00, apistrat design)


def test_readme_python_examples_run(tmp_path):
    """Every block but the FBS release (slow tier, below), in order; shown output checked."""
    blocks = [b for b in _blocks() if not _slow(b[0])]
    assert blocks and any(out for _, out in blocks)
    _check(blocks, _run(blocks, tmp_path))


@pytest.mark.slow
def test_readme_python_examples_run_all(tmp_path):
    """Every block as written, the FBS release with its default chains and rel.save's report
    included (fast counterpart: test_readme_python_examples_run; the report of rel.save:
    tests/test_report_shape.py)."""
    blocks = _blocks()
    printed = _run(blocks, tmp_path)
    _check(blocks, printed)
    assert (tmp_path / "out" / "confidential" / "report.html").exists()
    assert (tmp_path / "counts.xlsx").exists()
