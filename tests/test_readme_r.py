"""The README's R example runs as written, with the install command the README gives, and its
numbers equal what the Python API computes on the same data.

The ```r block of README.md's "## R" section is extracted, the R package installed into a
temporary library with the README's command (``R CMD INSTALL`` plus ``-l``), and the block
evaluated expression by expression by Rscript; every data.frame an expression returns is
written to CSV (and character values to a text file) for the comparison here.

Issue 37 ("the README's Python and R examples run in the suite and their outputs are shown in
the README"): what each expression prints is captured and must equal the ``#>`` lines shown
under it in the README (reprex style; the block stays runnable as pasted, R skips comments).
``SURVEYSYNTH_UPDATE_README=1`` writes the printed output into README.md instead of comparing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

pytestmark = pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")

RUNNER = r"""
exprs <- parse(file = "{code}", keep.source = TRUE)
srcs <- attr(exprs, "srcref")
out <- "{out}"
for (i in seq_along(exprs)) {{
  v <- NULL
  printed <- capture.output({{
    v <- withVisible(eval(exprs[[i]], globalenv()))
    if (v$visible) print(v$value)
  }})
  writeLines(printed)
  # what the expression printed, after the number of its last line (the README's #> lines)
  writeLines(c(as.character(srcs[[i]][3]), printed), file.path(out, sprintf("print%02d.txt", i)))
  if (!v$visible) next
  val <- v$value
  if (is.data.frame(val)) {{
    write.csv(as.data.frame(val), file.path(out, sprintf("expr%02d.csv", i)), row.names = FALSE)
  }} else if (is.character(val)) {{
    writeLines(val, file.path(out, sprintf("expr%02d.txt", i)))
  }} else if (inherits(val, "svystat")) {{
    write.csv(data.frame(estimate = as.numeric(coef(val)), se = as.numeric(SE(val))),
              file.path(out, sprintf("expr%02d.csv", i)), row.names = FALSE)
  }}
}}
cat("README R example: done\n")
"""


def _r_section() -> tuple[str, str]:
    text = README.read_text()
    m = re.search(r"^## R\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert m, "README.md has no '## R' section"
    section = m.group(1)
    blocks = re.findall(r"```r\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"expected one ```r block in the R section, found {len(blocks)}"
    return section, blocks[0]


def _code(block: str) -> str:
    """The block without its shown output (the ``#>`` lines, as reprex writes them)."""
    return "".join(ln for ln in block.splitlines(keepends=True) if not ln.startswith("#>"))


def _with_output(code: str, out: Path) -> str:
    """``code`` with what each expression printed as ``#>`` lines below the expression."""
    after: dict[int, list[str]] = {}
    for f in sorted(out.glob("print*.txt")):
        last, *printed = f.read_text().splitlines()
        after.setdefault(int(last), []).extend(printed)
    lines = []
    for i, line in enumerate(code.splitlines(), start=1):
        lines.append(line)
        lines += [f"#> {p}".rstrip() for p in after.get(i, [])]
    return "\n".join(lines) + "\n"


def test_readme_gives_the_install_command():
    section, _ = _r_section()
    assert "R CMD INSTALL r_bridge/rpkg" in section
    assert "library(surveysynth)" in section


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    section, block = _r_section()
    code = _code(block)
    install = re.search(r"`(R CMD INSTALL [^`]+)`", section).group(1).split()
    lib = tmp_path_factory.mktemp("rlib")
    out = tmp_path_factory.mktemp("readme_out")
    env = dict(os.environ, RETICULATE_PYTHON=sys.executable,
               R_LIBS=str(lib) + os.pathsep + os.environ.get("R_LIBS", ""))
    r = subprocess.run(install[:3] + ["-l", str(lib)] + install[3:], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"the README's install command failed:\n{r.stdout}\n{r.stderr}"
    (out / "readme.R").write_text(code)
    runner = RUNNER.format(code=out / "readme.R", out=out)
    r = subprocess.run(["Rscript", "-e", runner], cwd=out, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0 and "README R example: done" in r.stdout, (
        f"the README's R example failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
    (out / "stdout.txt").write_text(r.stdout)  # what the user sees printed
    (out / "rlib.txt").write_text(str(lib))
    return code, out


def _result(out: Path, code: str, needle: str, ext: str = "csv"):
    """The saved value of the README expression whose text contains ``needle``."""
    exprs = _top_level_lines(code)
    idx = [i for i, e in enumerate(exprs, start=1) if needle in e]
    assert idx, f"no README expression contains {needle!r}"
    path = out / f"expr{idx[0]:02d}.{ext}"
    assert path.exists(), f"README expression {needle!r} returned no saved value"
    return pd.read_csv(path) if ext == "csv" else path.read_text().strip()


def _top_level_lines(code: str) -> list[str]:
    """Top-level R expressions of the block (an expression continues while brackets are open)."""
    exprs, cur, depth = [], "", 0
    for line in code.splitlines():
        body = line.split("#", 1)[0]
        if not body.strip() and depth == 0:
            continue
        cur += line + "\n"
        depth += body.count("(") - body.count(")")
        if depth == 0:
            exprs.append(cur)
            cur = ""
    return exprs


@pytest.fixture(scope="module")
def python_side():
    import surveysynth as ss
    from surveysynth.datasets import load_api

    d = ss.SurveyDesign(load_api("apistrat"), strata="stype", weights="pw", fpc="fpc")
    syn = ss.synth.QuantileSynthesizer(variables="api00", bounds={"api00": (200, 1000)},
                                       epsilon=5, m=20, random_state=1, progress=False)
    rel = syn.fit(d).release()
    return d, rel


def test_readme_r_estimates_equal_python(readme_run, python_side):
    code, out = readme_run
    d, _ = python_side
    r = _result(out, code, 'ss_estimate(sd, "mean", ~api00, by = ~stype)')
    py = d.mean("api00", by="stype")
    assert list(r.stype) == [str(s) for s in py.stype]
    for col in ("estimate", "se", "ci_low", "ci_high", "df"):
        np.testing.assert_allclose(r[col], py[col], rtol=1e-12, err_msg=col)
    t = _result(out, code, "ss_tabulate(sd")
    import surveysynth as ss

    pt = ss.tabulate(d, rows="stype", value="enroll", na_rm=True).long
    assert list(t.cell) == list(pt.cell)
    for col in ("estimate", "se", "cv", "n_unweighted"):
        np.testing.assert_allclose(t[col], pt[col].astype(float), rtol=1e-12, err_msg=col)


def test_readme_r_release_equals_python(readme_run, python_side):
    """The same seed gives the same release from R and from Python: the combined estimate,
    its SE, the guarantee, and the first synthetic set's svymean."""
    code, out = readme_run
    _, rel = python_side
    r = _result(out, code, 'ss_release_estimate(rel, "mean", ~api00)')
    py = rel.mean("api00")
    for col in ("estimate", "se", "between", "within"):
        np.testing.assert_allclose(r[col], py[col], rtol=1e-12, err_msg=col)
    assert _result(out, code, "ss_privacy(rel)$guarantee", "txt") == rel.privacy.guarantee
    first = _result(out, code, "svymean(~api00, ss_release_designs(rel)[[1]])")
    p1 = rel.designs[0].mean("api00")
    np.testing.assert_allclose(first.estimate, p1.estimate, rtol=1e-12)
    np.testing.assert_allclose(first.se, p1.se, rtol=1e-9)


def test_readme_r_release_estimate_prints_df_and_ci(readme_run, python_side):
    """Issue 37: the printed release estimate shows df and the CI, and explains a df < 2."""
    _, out = readme_run
    _, rel = python_side
    printed = (out / "stdout.txt").read_text()
    py = rel.mean("api00").iloc[0]
    m = re.search(r"^\s+mean\s+SE\s+df\s+2\.5 %\s+97\.5 %\n(api00 .*)$", printed, flags=re.M)
    assert m, printed
    values = [float(v) for v in m.group(1).split()[1:]]
    np.testing.assert_allclose(values, [py.estimate, py.se, py.df, py.ci_low, py.ci_high],
                               rtol=1e-5)
    assert ("df < 2 (1 row(s)): full synthesis" in printed) is bool(py.df < 2)
    # the rule, its df (capped by the synthetic design's df) and its assumptions (D8)
    assert rel.mean("api00").rule_note() in printed


def test_r_prints_the_df_below_2_line(readme_run, tmp_path):
    """A constructed full-synthesis release with df < 2 (three shifted copies of one sample),
    saved by Python and loaded in R: the print has the df, the CI and the one-line reason."""
    import surveysynth as ss
    from surveysynth.privacy.record import build_record
    from surveysynth.release import SyntheticRelease

    _, out = readme_run
    base = np.linspace(0.0, 10.0, 50)
    designs = [ss.SurveyDesign(pd.DataFrame({"x": base + s, "w": 2.0}), weights="w")
               for s in (-0.6, 0.0, 0.6)]
    rel = SyntheticRelease(designs, "full", build_record("none", "test copy", m=3, epsilon=None,
                                                         seeded=True, notes=["test"]),
                           n_original=50)
    rel.save_public(tmp_path / "rel")
    py = rel.mean("x")
    assert py["df"].iloc[0] < 2
    lib = (out / "rlib.txt").read_text()
    env = dict(os.environ, RETICULATE_PYTHON=sys.executable,
               R_LIBS=lib + os.pathsep + os.environ.get("R_LIBS", ""))
    code = (f'library(surveysynth); rel <- ss_load_release("{tmp_path / "rel"}"); '
            'print(ss_release_estimate(rel, "mean", ~x))')
    r = subprocess.run(["Rscript", "-e", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert re.match(r"\s+mean\s+SE\s+df\s+2\.5 %\s+97\.5 %", lines[0]), r.stdout
    vals = [float(v) for v in lines[1].split()[1:]]
    row = py.iloc[0]
    np.testing.assert_allclose(vals, [row.estimate, row.se, row.df, row.ci_low, row.ci_high],
                               rtol=1e-5)
    # the rule, its df and its assumptions (issue 36, D8), then the df < 2 line: as Python's
    assert "\n".join(lines[2:4]) == py.rule_note(), r.stdout
    assert lines[4] == py.df_note(), r.stdout  # the same one line as Python's print


def test_readme_r_shows_its_output(readme_run):
    """Issue 37: the README's R block shows, as ``#>`` lines under each call, exactly what the
    call prints (seed 1: deterministic; no line is excluded). ``SURVEYSYNTH_UPDATE_README=1``
    writes the printed output into README.md instead of comparing."""
    code, out = readme_run
    _, block = _r_section()
    printed = _with_output(code, out)
    if os.environ.get("SURVEYSYNTH_UPDATE_README"):
        README.write_text(README.read_text().replace(f"```r\n{block}```", f"```r\n{printed}```", 1))
        return
    assert block == printed, (
        "the README's R block does not show what it prints (SURVEYSYNTH_UPDATE_README=1 "
        f"rewrites it after a deliberate change); README:\n{block}\nprinted:\n{printed}")
    # the confidential estimate is shown beside the release's (R survey's svymean of apistrat)
    shown = block.split('ss_release_estimate(rel, "mean", ~api00)', 1)[1]
    assert re.search(r"^svymean\(~api00, d\)", shown, flags=re.M), block
    assert re.search(r"^#> api00 662\.29 9\.4089$", shown, flags=re.M), block
