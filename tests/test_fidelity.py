"""Fidelity flags of the confidential report (issue 18, item 3) and the api release with public
bounds (issue 18, must-show: no value outside the bounds, integers stay integers, utility and
fidelity reported).

Unit tests on constructed data: a clean copy of the data raises no flag; mutants (pile-up at a
bound, a shifted tail, a broken correlation, a value beyond a bound, a non-whole integer) each
raise theirs; the numbers are checked against numpy's own quantile / weighted covariance.
"""

from __future__ import annotations

import json
import re
from html import unescape

import numpy as np
import pandas as pd
import pytest

from surveysynth.fidelity import fidelity_flags, weighted_corr, weighted_quantile
from surveysynth.pipeline import run_release

BOUNDS = {"x": (0.0, 100.0), "y": (0.0, 1000.0)}


def _data(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(5, 95, n)
    y = 5 * x + rng.normal(0, 40, n) + 200  # corr(x, y) ~ 0.96, inside (0, 1000)
    z = rng.normal(0, 1, n) + 0.05 * x
    return pd.DataFrame({"x": x, "y": np.clip(y, 1, 999), "z": z,
                         "k": rng.integers(1, 50, n)})


def _clean_sets(df: pd.DataFrame, m: int = 2, seed: int = 1) -> list[pd.DataFrame]:
    """m copies of the data in random row order (a perfect synthesizer)."""
    rng = np.random.default_rng(seed)
    return [df.iloc[rng.permutation(len(df))].reset_index(drop=True) for _ in range(m)]


def _flags(fid) -> dict[str, pd.DataFrame]:
    return {name: t[t["flag"]] for name, t in
            (("bounds", fid.bounds), ("quantiles", fid.quantiles), ("corr", fid.correlations))}


def test_clean_copy_raises_no_flag():
    df = _data()
    before = df.copy()
    fid = fidelity_flags(df, _clean_sets(df), ["x", "y", "k"], bounds=BOUNDS, integer=["k"],
                         others=["z"])
    assert fid.warnings == [] and fid.n_flags == 0
    assert not any(len(t) for t in _flags(fid).values())
    assert len(fid.bounds) == 4 and len(fid.quantiles) == 12
    assert len(fid.correlations) == 3 + 3  # (x,y),(x,k),(y,k) and each with z
    pd.testing.assert_frame_equal(df, before)  # the caller's data are not changed


def test_pile_up_at_a_bound_flags():
    df = _data()
    sets = _clean_sets(df)
    mutant = sets[0].copy()
    top = mutant["x"] > np.quantile(mutant["x"], 0.8)  # the top 20% ratchet to the bound
    mutant.loc[top, "x"] = 100.0
    fid = fidelity_flags(df, [mutant, sets[1]], ["x", "y"], bounds=BOUNDS)
    row = fid.bounds[(fid.bounds["variable"] == "x") & (fid.bounds["bound"] == "upper")].iloc[0]
    # pooled over the two sets: 20% of one set, so 10% of the release
    assert row["synthetic_at_bound"] == pytest.approx(top.sum() / (2 * len(df)))
    assert row["confidential_at_bound"] == 0 and row["flag"]
    assert any("upper bound 100" in w and "pile up" in w and w.startswith("10.0% of the synthetic x")
               for w in fid.warnings), fid.warnings
    # the other bounds are not flagged
    assert fid.bounds["flag"].sum() == 1


def test_data_at_a_bound_is_not_a_pile_up_and_threshold_holds():
    df = _data()
    df.loc[df.index[:600], "x"] = 0.0  # 30% of the confidential data sit at the lower bound
    # the release reproduces them: 30% at the bound, below 3x the data's share
    fid = fidelity_flags(df, _clean_sets(df), ["x"], bounds={"x": (0, 100)})
    assert not fid.bounds["flag"].any() and not any("pile up" in w for w in fid.warnings)
    # 4% at a bound where the data have none: under the 5% threshold, not flagged; 6% is
    clean = _data()
    for share, flagged in ((0.04, False), (0.06, True)):
        mutant = clean.copy()
        mutant.loc[mutant.index[: int(share * len(clean))], "x"] = 100.0
        fid = fidelity_flags(clean, [mutant], ["x"], bounds={"x": (0, 100)})
        assert bool(fid.bounds["flag"].any()) is flagged, share
    # a value within 1e-9 relative of the bound counts as at the bound
    mutant = clean.copy()
    mutant.loc[mutant.index[:200], "x"] = 100.0 * (1 - 5e-10)
    fid = fidelity_flags(clean, [mutant], ["x"], bounds={"x": (0, 100)})
    assert fid.bounds["synthetic_at_bound"].max() == pytest.approx(0.1)


def test_beyond_bound_and_non_whole_integers_flag():
    df = _data()
    mutant = df.copy()
    mutant.loc[3, "y"] = 1000.5
    mutant["k"] = mutant["k"].astype(float)
    mutant.loc[[1, 2], "k"] = [2.5, 3.25]
    fid = fidelity_flags(df, [mutant], ["y", "k"], bounds={"y": (0, 1000)}, integer=["k"])
    upper = fid.bounds[fid.bounds["bound"] == "upper"].iloc[0]
    assert upper["flag"] and upper["synthetic_beyond_bound"] == pytest.approx(1 / len(df))
    assert any("beyond the declared upper bound 1,000" in w for w in fid.warnings)
    assert any(w.startswith("k is an integer column but 2 synthetic values") for w in fid.warnings)


def test_quantile_shift_flags_at_the_threshold():
    df = _data()
    for factor, flagged in ((1.20, False), (1.30, True)):
        mutant = df.assign(y=df["y"] * factor)
        fid = fidelity_flags(df, [mutant], ["y"])
        q = fid.quantiles
        # every quantile moves by the factor: relative difference factor - 1
        np.testing.assert_allclose(q["relative_difference"], factor - 1, rtol=1e-12)
        np.testing.assert_allclose(
            q["confidential"], np.quantile(df["y"], [0.1, 0.5, 0.9, 0.99], method="inverted_cdf"))
        assert bool(q["flag"].all()) is flagged and (len(fid.warnings) == 4) is flagged


def test_only_the_moved_tail_quantile_flags():
    df = _data()
    mutant = df.copy()
    hi = mutant["y"] > np.quantile(mutant["y"], 0.985)
    mutant.loc[hi, "y"] = mutant.loc[hi, "y"] * 2  # the top 1.5%: q99 doubles, q90 does not move
    fid = fidelity_flags(df, [mutant], ["y"])
    assert fid.quantiles.set_index("quantile")["flag"].to_dict() == {
        "q10": False, "q50": False, "q90": False, "q99": True}


def test_correlation_collapse_flags_and_matches_numpy():
    df = _data()
    rng = np.random.default_rng(3)
    mutant = df.assign(y=df["y"].to_numpy()[rng.permutation(len(df))])  # margins kept
    fid = fidelity_flags(df, [mutant], ["x", "y"], others=["z"])
    c = fid.correlations.set_index(["variable_1", "variable_2"])
    assert c.loc[("x", "y"), "confidential"] == pytest.approx(np.corrcoef(df["x"], df["y"])[0, 1])
    assert c.loc[("x", "y"), "synthetic"] == pytest.approx(
        np.corrcoef(mutant["x"], mutant["y"])[0, 1])
    assert c.loc[("x", "y"), "flag"] and not c.loc[("x", "z"), "flag"]
    assert c.loc[("y", "z"), "synthesized"] == "first only"
    assert any(w.startswith("corr(x, y) is") for w in fid.warnings)
    assert not fid.quantiles["flag"].any()  # a permutation keeps the margins
    # a drift of 0.15 (< 0.2) is not flagged, one of 0.3 is
    for target, flagged in ((0.81, False), (0.66, True)):
        r0 = np.corrcoef(df["x"], df["y"])[0, 1]
        xs = (df["x"] - df["x"].mean()) / df["x"].std()
        noise = rng.normal(0, 1, len(df))
        lam = np.sqrt(1 / (target / r0) ** 2 - 1)  # attenuates the correlation to ~ target
        mutant = df.assign(x=xs + lam * noise)
        fid = fidelity_flags(df, [mutant], ["x", "y"], quantile_tol=100)
        drift = fid.correlations["change"].iloc[0]
        assert bool(abs(drift) > 0.2) is flagged, drift  # the premise: drift ~ target - r0
        assert bool(fid.correlations["flag"].iloc[0]) is flagged, drift


def test_weighted_helpers_against_numpy():
    rng = np.random.default_rng(4)
    x = rng.lognormal(0, 1, 500)
    y = x + rng.normal(0, 1, 500)
    w = rng.integers(1, 6, 500).astype(float)
    probs = [0.1, 0.5, 0.9, 0.99]
    # integer weights = repeated records
    np.testing.assert_array_equal(
        weighted_quantile(x, w, probs),
        np.quantile(np.repeat(x, w.astype(int)), probs, method="inverted_cdf"))
    cov = np.cov(x, y, aweights=w)
    assert weighted_corr(x, y, w) == pytest.approx(cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1]))
    assert np.isnan(weighted_corr(np.ones(5), np.arange(5.0), np.ones(5)))
    # missing values are left out pair by pair
    xm = x.copy()
    xm[:10] = np.nan
    assert weighted_corr(xm, y, w) == pytest.approx(weighted_corr(x[10:], y[10:], w[10:]))


def test_weights_count():
    df = _data()
    w = np.where(df["x"] > 50, 10.0, 1.0)  # the upper half of x is ten times as many units
    # an unweighted copy of a weighted sample: the release's weighted median is off
    fid = fidelity_flags(df, [df], ["x"], weights=w)
    q = fid.quantiles.set_index("quantile")
    assert q.loc["q50", "confidential"] == weighted_quantile(df["x"], w, [0.5])[0]
    assert q.loc["q50", "synthetic"] == pytest.approx(np.quantile(df["x"], 0.5, method="inverted_cdf"))
    assert q.loc["q50", "flag"]


@pytest.mark.parametrize("kwargs, match", [
    ({"bound_share": 0}, "bound_share"), ({"corr_tol": "big"}, "corr_tol"),
    ({"quantile_tol": -1}, "quantile_tol"), ({"bounds": {"z": (0, 1)}}, "bounds given for"),
    ({"synthetic_weights": [np.ones(3)]}, r"synthetic_weights\[0\]: 3 weights"),
])
def test_bad_arguments_are_named(kwargs, match):
    df = _data(50)
    with pytest.raises(ValueError, match=match):
        fidelity_flags(df, [df], ["x"], **kwargs)


def test_missing_column_is_named():
    df = _data(50)
    with pytest.raises(ValueError, match=r"synthetic\[0\]: column 'y' is missing"):
        fidelity_flags(df, [df.drop(columns="y")], ["x", "y"])


# ------------------------------------------------------------------ api release with bounds
API_BOUNDS = {"enroll": (0, 5000), "api99": (200, 1000), "api00": (200, 1000)}
API_CONFIG = """
[input]
path = "apistrat.csv"
[design]
strata = "stype"
weights = "pw"
fpc = "fpc"
[synthesizer]
method = "quantile"
variables = ["enroll", "api99", "api00"]
epsilon = 5.0
m = 3
seed = 7
population_size = 6194
init = {{ method = "{method}", quantiles = [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99], bounds = {{ enroll = [0, 5000], api99 = [200, 1000], api00 = [200, 1000] }}, C_X = {{ api99 = 5000, api00 = 1000 }}{extra} }}
[output]
folder = "release"
"""


def _text(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


@pytest.mark.parametrize("method, extra", [
    ("jointexp", ""),
    ("stepwise", ', sampler = "exact", slopes = "fixed", n_iter = 200'),
])
def test_api_release_with_public_bounds(tmp_path, method, extra):
    """Issue 18 must-show: a KNG release of R's apistrat through `surveysynth release` with
    public bounds keeps every value inside them, keeps enroll/api00/api99 integers in the
    public Parquet, and reports utility and fidelity; a collapsed corr(api99, api00) is flagged
    (and only a moved one)."""
    from surveysynth.datasets import load_api
    data = load_api("apistrat")
    data.to_csv(tmp_path / "apistrat.csv", index=False)
    (tmp_path / "release.toml").write_text(API_CONFIG.format(method=method, extra=extra))
    # in-process: the command line itself is tested once, in tests/test_pipeline.py
    run_release(tmp_path / "release.toml", quiet=True)
    pub = tmp_path / "release" / "public" / "synthetic"
    manifest = json.loads((pub / "manifest.json").read_text())
    frames = [pd.read_parquet(pub / d["file"]) for d in manifest["datasets"]]
    assert len(frames) == 3
    for f in frames:
        assert len(f) == len(data)
        for v, (lo, hi) in API_BOUNDS.items():
            assert pd.api.types.is_integer_dtype(f[v]), (v, f[v].dtype)  # integers stay integers
            assert f[v].between(lo, hi).all(), (v, f[v].min(), f[v].max())
    html = (tmp_path / "release" / "confidential" / "report.html").read_text()
    text = _text(html)
    # utility reported for every synthesized variable, with its ECDF picture
    for v in API_BOUNDS:
        m = re.search(rf"Distribution of {v} ECDF utility \(Woo et al\. 2009\): "
                      rf"U_m = ([\d.]+)", text)
        assert m and 0 <= float(m.group(1)) <= 1, v
        assert f'alt="Difference between the empirical distribution functions of {v} ' in html
    assert "<h2>Fidelity flags</h2>" in html
    for sub in ("Bounds and types", "Quantiles", "Correlations"):
        assert f"<h3>{sub}</h3>" in html, sub
    # the correlation flag against an independent computation from the public Parquet
    pooled = pd.concat(frames, ignore_index=True)
    w_s = pooled["pw"].to_numpy(float)
    # the released weights: each stratum's design weight, scaled to N (issue 36, D7: apistrat's
    # strata are synthesized separately, each record keeps its stratum's weight)
    w_h = data.groupby("stype")["pw"].first()
    assert np.allclose(w_s, pooled["stype"].map(w_h).to_numpy(float) * 6194 / data["pw"].sum())
    cov_s = np.cov(pooled["api99"], pooled["api00"], aweights=w_s)
    cov_c = np.cov(data["api99"], data["api00"], aweights=data["pw"])
    r_s = cov_s[0, 1] / np.sqrt(cov_s[0, 0] * cov_s[1, 1])
    r_c = cov_c[0, 1] / np.sqrt(cov_c[0, 0] * cov_c[1, 1])
    assert r_c == pytest.approx(0.976, abs=0.005)  # the data's (issue 18: 0.97)
    flagged = f"Fidelity: corr(api99, api00) is {r_s:.3f} in the release against {r_c:.3f}" in text
    assert flagged is bool(abs(r_s - r_c) > 0.2), (r_s, r_c)
    # the warnings at the top list each flag, and the section counts them
    n_flags = text.count("Fidelity: ")
    assert ('role="alert"' in html) is (n_flags > 0)
    assert (f"{n_flags} flag(s), listed among the warnings" in text) is (n_flags > 0)
    # the report's q99 of api00: the public data's, weighted by the released weights (the
    # stratum weights since issue 36, D7)
    row = re.search(r"<td>api00</td>\s*<td>q99</td>\s*<td>([\d,.]+)</td>\s*<td>([\d,.]+)</td>",
                    html)
    assert row, "no q99 row for api00"
    assert float(row.group(1).replace(",", "")) == pytest.approx(
        weighted_quantile(data["api00"], data["pw"], [0.99])[0])
    assert float(row.group(2).replace(",", "")) == pytest.approx(
        weighted_quantile(pooled["api00"], pooled["pw"], [0.99])[0], rel=5e-4)
