"""The DP-products evidence vignette (issue 40 item 4) in its fast mode: shape of the outputs,
and properties that fail for a wrong table product.

Mutant kept here: ``noise_ignored``, a DP table whose interval holds the sampling error only
(the DP estimate +- 1.96 x the confidential sample's SE). At epsilon 10.8 its intervals
under-cover far below the loose bound the real intervals meet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "vignettes"))

#: pooled coverage over every DP interval of the fast run (3 samples x 78 cells x 4 DP
#: products); nominal 0.95. Cells of one sample are correlated, so the bound is loose: at
#: 0.95 and ~100 effectively independent intervals per product, 0.85 is > 4 binomial SEs away.
COVERAGE_FLOOR = 0.85


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    import dp_products_evidence as ev

    out = tmp_path_factory.mktemp("evidence")
    res = ev.main(["--fast", "--out", str(out), "--quiet"])
    return ev, out, res


def _covered(df: pd.DataFrame) -> pd.Series:
    return (df["ci_low"] <= df["truth"]) & (df["truth"] <= df["ci_high"])


def test_outputs_have_the_expected_shape(fast):
    ev, out, res = fast
    summ = pd.read_csv(out / "dp_products_evidence_tables.csv")
    cells = pd.read_csv(out / "dp_products_evidence_cells.csv")
    assert set(summ["population"]) == {"SDR", "apistrat", "SDR (24 cells of Tables 8-9)"}
    # 27 rows of seed 001 Tables 2-5 and 12 apistrat cells, counts and means
    for pop, n in (("SDR", 27), ("apistrat", 12)):
        c = cells[cells["population"] == pop]
        assert c.groupby("method")["estimand"].nunique().eq(2 * n).all()
    methods = {pop: set(g["method"]) for pop, g in summ.groupby("population")}
    assert methods["SDR"] == {"Sample", "DP pure", "DP zCDP", "Laplace"}
    # the local-sensitivity baseline refuses apistrat (constant weights within cells)
    assert methods["apistrat"] == {"Sample", "DP pure", "DP zCDP"}
    assert set(summ["epsilon"].dropna()) == {e for e, _, _ in ev.BUDGETS}
    # every sample gives the sample's own estimates and every DP count; a DP mean of a small
    # cell may have no estimate in all 3 fast samples (its noisy count was 0: about 30% of
    # samples in the smallest cells), so its row may count 0 samples and no coverage
    means = summ["kind"] == "mean"
    assert (summ.loc[summ["method"] == "Sample", "samples"] == 3).all()
    assert (summ.loc[~means, "samples"] >= 1).all() and (summ["samples"] >= 0).all()
    has = summ["samples"] > 0
    assert summ.loc[has, "coverage"].between(0, 1).all()
    assert res["reps"] == 3


def test_matched_rho_implies_the_epsilon(fast):
    ev, _, _ = fast
    for eps in (1.0, 10.8, 68.0):
        rho = ev.matched_rho(eps)
        assert rho + 2 * np.sqrt(rho * np.log(1 / ev.ZCDP_DELTA)) == pytest.approx(eps, rel=1e-12)
        # a wrong matching (pure eps-DP's own zCDP, rho = eps^2 / 2) would be far weaker
        assert rho < eps ** 2 / 2


def test_dp_intervals_cover_and_the_noise_ignored_mutant_does_not(fast):
    _, _, res = fast
    r = res["replicates"]
    r = r[r["estimate"].notna() & np.isfinite(r["ci_low"]) & np.isfinite(r["ci_high"])]
    dp = r[r["method"].str.startswith("DP ")]
    assert len(dp) > 500
    for method, g in dp.groupby("method"):
        assert _covered(g).mean() >= COVERAGE_FLOOR - 0.1, method   # per product, looser
    assert _covered(dp).mean() >= COVERAGE_FLOOR
    # mutant: the DP estimate with the sampling SE only (noise variance ignored)
    sample = r[r["method"] == "Sample"].set_index(["population", "rep", "estimand"])["se"]
    low = dp[dp["method"].str.endswith("eps=10.8")].copy()
    se = sample.reindex(pd.MultiIndex.from_frame(low[["population", "rep", "estimand"]]))
    low["ci_low"] = low["estimate"].to_numpy() - 1.96 * se.to_numpy()
    low["ci_high"] = low["estimate"].to_numpy() + 1.96 * se.to_numpy()
    assert _covered(low).mean() < COVERAGE_FLOOR - 0.1


def test_rmse_orders_where_certain(fast):
    _, _, res = fast
    s = res["summary"]
    sdr = s[(s["population"] == "SDR") & (s["kind"] == "count")]

    def rmse(method, eps=None):
        g = sdr[sdr["method"] == method]
        g = g if eps is None else g[g["epsilon"] == eps]
        return float(g["rel_rmse"].iloc[0])

    # the noise at epsilon 10.8 is several times the sampling error of the SDR counts: DP
    # adds it to the sample's own error; 6.3 times less noise at 68 lowers the RMSE
    assert rmse("DP pure", 10.8) > rmse("Sample")
    assert rmse("DP pure", 68.0) < rmse("DP pure", 10.8)


def test_microdata_rows_carry_their_own_epsilon_and_guarantee(tmp_path):
    """Part (b) reader: AIM/MST at a further budget keep that budget (not the Sequential
    release's), CART has none, and the runs are averaged by method."""
    import json

    import dp_products_evidence as ev

    dirs = []
    for i, (seq, aim1) in enumerate(((0.4, 0.5), (0.6, 0.3))):
        d = tmp_path / f"run{i}"
        d.mkdir()
        methods = [{"method": "Sequential", "CI overlap (mean)": seq, "pMSE ratio": 5.0},
                   {"method": "AIM", "CI overlap (mean)": 0.7, "pMSE ratio": 6.0},
                   {"method": "AIM eps=1", "CI overlap (mean)": aim1, "pMSE ratio": 12.0},
                   {"method": "CART", "CI overlap (mean)": 0.8, "pMSE ratio": 2.0}]
        (d / "public_use_agency.json").write_text(json.dumps(
            {"epsilon": 40.0 + i, "methods": methods, "m": 2, "chains": 2, "draws": 150}))
        dirs.append(d)
    per_run, summ = ev.microdata(dirs)
    assert len(per_run) == 8
    s = summ.set_index("method")
    assert s.loc["AIM eps=1", "epsilon"] == 1.0
    assert s.loc["AIM", "epsilon"] == 40.0 and np.isnan(s.loc["CART", "epsilon"])
    assert s.loc["Sequential", "CI overlap (mean)"] == pytest.approx(0.5)
    assert s.loc["AIM eps=1", "CI overlap (mean) range"] == "0.3 to 0.5"
    assert s.loc["AIM eps=1", "guarantee"].startswith("pure eps-DP")
    assert s.loc["CART", "guarantee"].startswith("none")
    assert (s["runs"] == 2).all()
