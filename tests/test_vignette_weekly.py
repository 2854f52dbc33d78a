"""The weekly-workflow vignette runs (fast mode) and its numbers are the data's.

One run of ``vignettes/weekly_workflow.py --fast`` into a temporary directory (R's api data
through rpy2, FBS through Stan with short chains), then:

* the markdown has the publication table, the design regression, the release's guarantee and
  the side-by-side comparison of table and regression;
* the calibrated weights reproduce the population margins of R's ``apipop`` computed here, not
  by the vignette (kills: raking to the wrong counts, writing the design weights, a margin
  dropped), and differ from the design weights;
* the table's point estimates are the calibrated-weight shares computed here (kills: a table
  on the uncalibrated design, row/column percent swapped);
* the design regression's coefficients are weighted least squares with the calibrated
  weights (kills: a regression on the design weights or unweighted);
* the printed epsilon is 2 x Delta_alpha x m of the printed numbers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surveysynth.datasets import load_api

ROOT = Path(__file__).resolve().parent.parent
MEALS_BINS = [0, 25, 50, 101]          # the vignette's public band definitions
API_BINS = [-np.inf, 600, 800, np.inf]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("weekly")
    res = subprocess.run([sys.executable, str(ROOT / "vignettes" / "weekly_workflow.py"),
                          "--fast", "--out", str(out)], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out, (out / "weekly_workflow.md").read_text()


def _section(text: str, start: str, end: str | None) -> str:
    i = text.index(start)
    return text[i:text.index(end, i)] if end else text[i:]


def _md_rows(section: str) -> dict[str, list[str]]:
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_markdown_has_every_part(run):
    _, text = run
    table = _section(text, "## 3. Publication table", "## 4.")
    for label in ("below 600", "600-799", "800+", "All"):
        assert label in table
    for stype in ("| E |", "| H |", "| M |"):
        assert stype in table
    reg = _section(text, "## 4. Design-based regression", "## 5.")
    rows = _md_rows(reg)
    assert {"Intercept", "ell", "meals", "stype[T.H]", "stype[T.M]"} <= set(rows)
    rel = _section(text, "## 5. The private release", "## 6.")
    assert "guarantee (`rel.privacy.guarantee`): **" in rel
    assert "differential privacy" in rel
    cmp = _section(text, "## 6. Design and release side by side", None)
    assert "### The table" in cmp and "### The regression" in cmp
    creg = _md_rows(_section(cmp, "### The regression", None))
    terms = {"Intercept", "stype[T.H]", "stype[T.M]", "meals_band[T.25-49%]",
             "meals_band[T.50-100%]"}
    assert terms <= set(creg)
    header = creg["term"]
    assert header[:4] == ["design estimate", "design SE", "release estimate", "release SE"]
    for t in terms:  # numbers in every column, overlap at most 1
        vals = [float(v) for v in creg[t][:4]]
        assert np.all(np.isfinite(vals)) and vals[1] > 0 and vals[3] > 0
        assert float(creg[t][header.index("CI overlap")]) <= 1.0
    ctab = _md_rows(_section(cmp, "### The table", "### The regression"))
    assert sum(k in ("E", "H", "M", "All") for k in ctab) >= 1
    assert "CI overlap" in ctab["school type"]


def test_calibrated_totals_equal_population_margins(run):
    out, text = run
    w = pd.read_csv(out / "weekly_workflow_weights.csv")
    pop = load_api("apipop")
    assert len(w) == 126 and w["calibrated_weight"].gt(0).all()
    band_s = pd.cut(w["meals"], MEALS_BINS, right=False).astype(str)
    band_p = pd.cut(pop["meals"], MEALS_BINS, right=False).astype(str)
    for s_key, p_key in ((w["stype"].astype(str), pop["stype"].astype(str)), (band_s, band_p)):
        got = w["calibrated_weight"].groupby(s_key.to_numpy()).sum().sort_index()
        want = p_key.value_counts().sort_index().astype(float)
        assert list(got.index) == list(want.index)
        np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-8)
    # raking had work to do: the design weights miss both margins
    for s_key, p_key in ((w["stype"].astype(str), pop["stype"].astype(str)), (band_s, band_p)):
        before = w["pw"].groupby(s_key.to_numpy()).sum().sort_index()
        assert np.max(np.abs(before - p_key.value_counts().sort_index())) > 1
    assert w["calibrated_weight"].sum() == pytest.approx(6194, rel=1e-10)
    assert np.max(np.abs(w["calibrated_weight"] - w["pw"])) > 1   # raking moved the weights
    m = re.search(r"Largest \|calibrated total - population count\|: \*\*([0-9.e+-]+)\*\*", text)
    assert m and float(m.group(1)) < 1e-6


def _data(out: Path) -> pd.DataFrame:
    w = pd.read_csv(out / "weekly_workflow_weights.csv")
    st = load_api("apiclus2")
    d = st.merge(w[["snum", "calibrated_weight"]], on="snum", validate="one_to_one")
    assert len(d) == 126
    return d


def test_table_is_calibrated_row_percent(run):
    out, _ = run
    d = _data(out)
    band = pd.cut(d["api00"].astype(float), API_BINS, right=False,
                  labels=["below 600", "600-799", "800+"]).astype(str)
    cw = d["calibrated_weight"]
    share = 100 * cw.groupby([d["stype"].astype(str).to_numpy(), band.to_numpy()]).sum() \
        / cw.groupby(d["stype"].astype(str).to_numpy()).sum()
    t = pd.read_csv(out / "weekly_workflow_table.csv", comment="#")
    inner = t[t["cell"] == "interior"]
    assert len(inner) == 9
    for r in inner.itertuples():
        want = share.get((r.stype, r.api_band), 0.0)
        assert r.estimate == pytest.approx(want, abs=0.051)   # the CSV rounds to 1 decimal
    assert (out / "weekly_workflow_table.xlsx").stat().st_size > 0
    assert (out / "weekly_workflow_release_table.csv").exists()


def test_design_regression_is_calibrated_wls(run):
    out, text = run
    d = _data(out)
    X = np.column_stack([np.ones(len(d)), d["ell"], d["meals"],
                         d["stype"].astype(str).eq("H"), d["stype"].astype(str).eq("M")])
    sw = np.sqrt(d["calibrated_weight"].to_numpy())
    beta = np.linalg.lstsq(X * sw[:, None], d["api00"].to_numpy(float) * sw, rcond=None)[0]
    rows = _md_rows(_section(text, "## 4. Design-based regression", "## 5."))
    got = [float(rows[t][0]) for t in ("Intercept", "ell", "meals", "stype[T.H]", "stype[T.M]")]
    np.testing.assert_allclose(got, beta, atol=6e-5)   # printed to 4 decimals


def test_printed_epsilon_is_two_delta_m(run):
    _, text = run
    m = re.search(r"epsilon = ([0-9.]+) \(= 2 x Delta_alpha ([0-9.]+) x m (\d+)\)", text)
    assert m
    eps, da, mm = float(m.group(1)), float(m.group(2)), int(m.group(3))
    assert mm == 5
    assert eps == pytest.approx(2 * da * mm, abs=2e-3)
