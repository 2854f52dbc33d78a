"""Identification risk, risk weights and diagnostics (seed 002; METHODS.md section 11).

Every number is checked against an independent computation: direct (triple) loops written from
the paper's equations, closed forms from scipy's negative binomial pmf, or hand-built cases.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from surveysynth.datasets.risk import CE_KNOWN, ce_like, nb_mixture
from surveysynth.privacy import identification_risk, risk_weights
from surveysynth.privacy.identification import IdentificationRisk, data_risk
from surveysynth.privacy.identification_report import (
    bootstrap_estimates,
    plot_risk_violins,
    plot_whack_a_mole,
    whack_a_mole,
)

# --------------------------------------------------------------------------------------------
# brute-force references: direct loops over records, straight from seed 002 eqs. (1), (2), (6)-(8)
# --------------------------------------------------------------------------------------------


def _in_ball(v: float, c: float, r: float) -> bool:
    return (c - r * abs(c)) <= v <= (c + r * abs(c))


def bf_data_risk(y, pat, r):
    n = len(y)
    out = []
    for i in range(n):
        members = [h for h in range(n) if pat[h] == pat[i]]
        out.append(sum(not _in_ball(y[h], y[i], r) for h in members) / len(members))
    return np.array(out)


def bf_pairwise(y, pat, r):
    n = len(y)
    out = []
    for i in range(n):
        members = [h for h in range(n) if pat[h] == pat[i]]
        tot = 0.0
        for j in members:
            if j == i:
                continue
            ir_ij = sum(
                (not _in_ball(y[h], y[i], r)) and (not _in_ball(y[h], y[j], r)) for h in members
            ) / len(members)
            tot += 1.0 - ir_ij  # alpha_ij, eq. (7)
        out.append(tot / (len(members) - 1))  # eq. (8)
    return np.array(out)


def bf_release_risk(y, ysyn, pat, r):
    n_sets, n = ysyn.shape
    out = np.zeros((n_sets, n))
    for ell in range(n_sets):
        for i in range(n):
            members = [h for h in range(n) if pat[h] == pat[i]]
            outside = sum(not _in_ball(ysyn[ell, h], y[i], r) for h in members)
            t = _in_ball(ysyn[ell, i], y[i], r)
            out[ell, i] = outside / len(members) * t
    return out


def _random_frame(seed: int, n: int = 70):
    """Values with many ties, negatives, zeros and exact ball boundaries (r = 0.5 / 0.25)."""
    rng = np.random.default_rng(seed)
    values = np.array([-40, -20, -10, -5, -4, 0, 3, 4, 5, 6, 8, 10, 15, 20, 30, 40, 100], dtype=float)
    df = pd.DataFrame(
        {
            "g": rng.choice(["a", "b"], n),
            "k": rng.integers(0, 3, n),
            "y": rng.choice(values, n),
            "other": rng.normal(size=n),
        },
        index=rng.permutation(np.arange(1000, 1000 + n)),  # non-default index
    )
    return df


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("r", [0.5, 0.25, 0.2])
def test_weights_and_data_risk_match_brute_force(seed, r):
    df = _random_frame(seed)
    y = df["y"].to_numpy()
    pat = list(zip(df["g"], df["k"], strict=True))
    ref_irc = bf_data_risk(y, pat, r)
    ref_pw = bf_pairwise(y, pat, r)
    np.testing.assert_allclose(data_risk(df, ["g", "k"], "y", r), ref_irc, rtol=0, atol=1e-12)
    am = risk_weights(df, ["g", "k"], "y", r, kind="marginal")
    apw = risk_weights(df, ["g", "k"], "y", r, kind="pairwise")
    np.testing.assert_allclose(am, 1 - ref_irc, rtol=0, atol=1e-12)
    np.testing.assert_allclose(apw, ref_pw, rtol=0, atol=1e-12)
    assert (apw >= am - 1e-12).all()
    # the data are not trivially all-in / all-out: weights really vary
    assert am.std() > 0.05 and apw.std() > 0.01


@pytest.mark.parametrize("seed", [3, 4])
def test_release_risk_matches_brute_force(seed):
    df = _random_frame(seed, n=50)
    y = df["y"].to_numpy()
    pat = list(zip(df["g"], df["k"], strict=True))
    rng = np.random.default_rng(seed + 10)
    # synthetic values: perturbed originals with ties and exact copies
    ysyn = np.where(rng.random((4, y.size)) < 0.4, y, rng.choice([-10.0, 0, 5, 10, 12, 20], (4, y.size)))
    ref = bf_release_risk(y, ysyn, pat, 0.25)
    res = identification_risk(df, ysyn, ["g", "k"], "y", r=0.25)
    np.testing.assert_allclose(res.ir_by_set, ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.ir, ref.mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.data_risk, bf_data_risk(y, pat, 0.25), atol=1e-12)
    # blocks of synthetic sets give the same answer as all sets at once
    small = identification_risk(df, ysyn, ["g", "k"], "y", r=0.25, block_records=60)
    np.testing.assert_array_equal(small.ir_by_set, res.ir_by_set)
    # the same sets passed as DataFrames and as a release-like object
    frames = []
    for k in range(4):
        f = df.copy()
        f["y"] = ysyn[k]
        frames.append(f)

    class _Rel:  # duck-typed SyntheticRelease: .designs with .data
        designs = [type("D", (), {"data": f})() for f in frames]

    np.testing.assert_array_equal(identification_risk(df, frames, ["g", "k"], "y", r=0.25).ir_by_set, ref)
    np.testing.assert_array_equal(identification_risk(df, _Rel(), ["g", "k"], "y", r=0.25).ir_by_set, ref)


@settings(max_examples=25, deadline=None)
@given(
    vals=st.lists(st.integers(-30, 30), min_size=2, max_size=25),
    pats=st.lists(st.integers(0, 2), min_size=25, max_size=25),
    r=st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.0]),
)
def test_property_pairwise_against_brute_force(vals, pats, r):
    n = len(vals)
    df = pd.DataFrame({"p": pats[:n], "y": np.array(vals, dtype=float)})
    sizes = df["p"].map(df["p"].value_counts())
    pat = df["p"].tolist()
    y = df["y"].to_numpy()
    am = risk_weights(df, "p", "y", r)
    np.testing.assert_allclose(am, 1 - bf_data_risk(y, pat, r), atol=1e-12)
    if (sizes == 1).any():
        with pytest.raises(ValueError, match="alone in their known pattern"):
            risk_weights(df, "p", "y", r, kind="pairwise")
        apw = risk_weights(df, "p", "y", r, kind="pairwise", on_singleton="marginal")
        single = (sizes == 1).to_numpy()
        np.testing.assert_allclose(apw[single], am[single])
    else:
        apw = risk_weights(df, "p", "y", r, kind="pairwise")
        np.testing.assert_allclose(apw, bf_pairwise(y, pat, r), atol=1e-12)
    assert (apw >= am - 1e-12).all()


def test_seed002_figure1_betty():
    """Seed 002 Fig. 1: |M| = 13; 10 outside with T = 1 -> 10/13; 5 outside -> 5/13; T = 0 -> 0."""
    y_betty = 50_000.0  # ball at r = 0.2: [40000, 60000]
    rng = np.random.default_rng(0)
    original = pd.DataFrame({"pattern": ["p"] * 13 + ["q"] * 3, "income": np.r_[y_betty, rng.uniform(1e4, 1e5, 15)]})
    inside, outside = [45_000.0, 52_000.0, 58_000.0, 40_000.0], [10_000.0, 90_000.0, 61_000.0, 39_000.0]

    def synthetic(betty, n_in_others, n_out):
        others = (inside * 4)[:n_in_others] + (outside * 4)[:n_out]
        return np.r_[betty, others, [1.0, 2.0, 3.0]]

    cases = [
        (synthetic(52_000.0, 2, 10), 10 / 13),  # (a) few covering records, T = 1
        (synthetic(52_000.0, 7, 5), 5 / 13),  # (b) well covered
        (synthetic(90_000.0, 3, 9), 0.0),  # (c) 10 outside incl. Betty's own synthetic value: T = 0
    ]
    for ys, expected in cases:
        assert ys.size == 16
        res = identification_risk(original, ys, ["pattern"], "income", r=0.2)
        assert res.ir[0] == pytest.approx(expected, abs=1e-15)
    # (c) really has 10 records outside the ball
    ys_c = cases[2][0][:13]
    assert ((ys_c < 40_000) | (ys_c > 60_000)).sum() == 10


def _nb_mixture_expected_irc(r: float, n: int) -> float:
    """Closed form: E[IR^c] = (n-1)/n * (1 - E_Y P(Y' in B(Y, r))) for Y, Y' iid from the mixture."""
    def pmf(k):
        return 0.7 * stats.nbinom.pmf(k, 20, 20 / 120) + 0.3 * stats.nbinom.pmf(k, 5, 5 / 105)

    grid = np.arange(0, 6000)
    cdf = np.r_[0.0, np.cumsum(pmf(grid))]
    k = np.arange(0, 3000)
    lo, hi = k - r * k, k + r * k
    inside = cdf[np.floor(hi).astype(int) + 1] - cdf[np.ceil(lo).astype(int)]
    return (n - 1) / n * (1.0 - float((pmf(k) * inside).sum()))


@pytest.mark.parametrize("r,target", [(0.20, 0.64), (0.15, 0.73)])
def test_nb_mixture_data_risk(r, target):
    expected = _nb_mixture_expected_irc(r, 1000)
    assert expected == pytest.approx(target, abs=0.03)  # the brief's numbers
    means = [data_risk(nb_mixture(1000, seed=s), [], "y", r).mean() for s in range(8)]
    assert np.mean(means) == pytest.approx(expected, abs=0.01)  # MC sd of the mean ~0.004
    assert max(abs(m - target) for m in means) < 0.03


def test_nb_mixture_is_the_design_and_reproducible():
    a, b = nb_mixture(1000, seed=5), nb_mixture(1000, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(nb_mixture(1000, seed=6))
    big = nb_mixture(200_000, seed=1)
    # mixture mean 100, variance 0.7 (100 + 100^2/20) + 0.3 (100 + 100^2/5) = 100 + 950
    assert big["y"].mean() == pytest.approx(100, rel=0.01)
    assert big["y"].var() == pytest.approx(1050, rel=0.03)
    assert big["component"].eq(1).mean() == pytest.approx(0.7, abs=0.005)


def test_ce_like_shape_and_patterns():
    d = ce_like(seed=3)
    assert len(d) == 6208
    assert d.groupby(CE_KNOWN, observed=True).ngroups == 40
    assert d.groupby(CE_KNOWN, observed=True).size().min() > 1  # no singleton patterns, as the CE
    inc = d["income"]
    assert 60_000 < inc.mean() < 90_000 and 40_000 < inc.median() < 60_000
    assert 200_000 < inc.quantile(0.975) < 350_000
    assert inc.min() < 0 and inc.max() <= 1_800_000
    pd.testing.assert_frame_equal(d, ce_like(seed=3))


# --------------------------------------------------------------------------------------------
# input checking
# --------------------------------------------------------------------------------------------


def test_errors_are_clear():
    df = _random_frame(0)
    with pytest.raises(ValueError, match=r"known-pattern variable\(s\) \['nope'\] not found"):
        risk_weights(df, ["g", "nope"], "y", 0.2)
    for bad_r in (0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="r must be a positive"):
            risk_weights(df, ["g"], "y", bad_r)
    with pytest.raises(ValueError, match="r must be a positive"):
        identification_risk(df, df, ["g"], "y", r=0.0)
    one = pd.DataFrame({"p": ["a", "a", "b"], "y": [1.0, 2.0, 3.0]}, index=[10, 11, 12])
    with pytest.raises(ValueError, match=r"rows \[12\].*kind='marginal'"):
        risk_weights(one, "p", "y", 0.2, kind="pairwise")
    np.testing.assert_allclose(risk_weights(one, "p", "y", 0.2, kind="pairwise", on_singleton="marginal")[2], 1.0)
    na = df.copy()
    na.loc[na.index[3], "y"] = np.nan
    with pytest.raises(ValueError, match=rf"missing or non-finite values in rows \[{na.index[3]}\]"):
        data_risk(na, ["g"], "y", 0.2)
    nak = df.astype({"g": object}).copy()
    nak.loc[nak.index[5], "g"] = None
    with pytest.raises(ValueError, match=rf"'g' in data is missing in rows \[{nak.index[5]}\]"):
        data_risk(nak, ["g"], "y", 0.2)
    with pytest.raises(ValueError, match="outcome column 'zz'"):
        data_risk(df, ["g"], "zz", 0.2)
    with pytest.raises(ValueError, match="kind must be"):
        risk_weights(df, ["g"], "y", 0.2, kind="triple")
    with pytest.raises(ValueError, match="has 3 rows but the original has"):
        identification_risk(df, df.head(3), ["g"], "y")
    moved = df.copy()
    moved["g"] = moved["g"].iloc[::-1].to_numpy()
    with pytest.raises(ValueError, match="known variable 'g' differs"):
        identification_risk(df, moved, ["g"], "y")


def test_inputs_not_mutated_and_design_accepted():
    from surveysynth.design import SurveyDesign

    df = _random_frame(1)
    df["w"] = 1.0 + np.arange(len(df)) % 3
    before = df.copy(deep=True)
    syn = df.copy()
    syn["y"] = syn["y"] * 1.1
    syn_before = syn.copy(deep=True)
    a = risk_weights(df, ["g", "k"], "y", 0.3, kind="pairwise")
    identification_risk(df, [syn, syn], ["g", "k"], "y", r=0.3)
    bootstrap_estimates(df, [syn], "y", B=20, seed=1)
    pd.testing.assert_frame_equal(df, before)
    pd.testing.assert_frame_equal(syn, syn_before)
    d = SurveyDesign(df, weights="w")
    np.testing.assert_array_equal(risk_weights(d, ["g", "k"], "y", 0.3, kind="pairwise"), a)


def test_adjustment_scale_shift_clip():
    df = _random_frame(2)
    a = risk_weights(df, ["g"], "y", 0.25)
    b = risk_weights(df, ["g"], "y", 0.25, scale=1.5, shift=-0.2)
    np.testing.assert_allclose(b, np.clip(1.5 * a - 0.2, 0, 1))
    assert (b == 0).any() or (b == 1).any() or (b > 0).all()


# --------------------------------------------------------------------------------------------
# summaries, whack-a-mole, plots, bootstrap
# --------------------------------------------------------------------------------------------


def test_summary_and_whack_a_mole_numbers():
    rng = np.random.default_rng(7)
    u = rng.uniform(0, 0.6, 500)
    w = u.copy()
    w[:10] += 0.3  # rise of 0.3 for 10 records
    w[10:15] += 0.25  # exactly 0.25 counts (">= 0.25")
    w[15:20] += 0.2  # below the rise
    w[20:] *= 0.5
    w = np.clip(w, 0, 1)
    wm = whack_a_mole(w, u)
    assert wm.n_rise == 15 and set(wm.rise_records) == set(range(15))
    assert wm.n_above_weighted == int((w > 0.5).sum())
    assert wm.n_above_unweighted == int((u > 0.5).sum())
    assert wm.n_below_diagonal == int((w < u).sum())
    res = IdentificationRisk(ir=w, ir_by_set=w[None, :], data_risk=u, r=0.2, threshold=0.5)
    s = res.summary()
    assert s.loc["synthetic", "mean"] == pytest.approx(w.mean())
    assert s.loc["data", "q50"] == pytest.approx(np.median(u))
    assert s.loc["synthetic", "n_above_0.5"] == (w > 0.5).sum()
    assert s.loc["data", "iqr"] == pytest.approx(np.subtract(*np.quantile(u, [0.75, 0.25])))


def test_plots(tmp_path):
    rng = np.random.default_rng(1)
    u, w = rng.uniform(size=300), rng.uniform(size=300)
    fig = plot_whack_a_mole(w, u)
    ax = fig.axes[0]
    # two scatter layers: the highlighted records are exactly the whack-a-mole ones
    n_hit = whack_a_mole(w, u).n_rise
    assert ax.collections[1].get_offsets().shape[0] == n_hit > 0
    fig.savefig(tmp_path / "wam.png")
    fig2 = plot_risk_violins({"Data": u, "Synthesizer": w, "Marginal": w * 0.5})
    fig2.savefig(tmp_path / "violins.png")
    assert (tmp_path / "wam.png").stat().st_size > 5000 and (tmp_path / "violins.png").stat().st_size > 5000
    assert [t.get_text() for t in fig2.axes[0].get_xticklabels()] == ["Data", "Synthesizer", "Marginal"]


def test_bootstrap_estimates():
    rng = np.random.default_rng(3)
    y = rng.lognormal(4, 0.5, 2000)
    df = pd.DataFrame({"y": y})
    syn = [rng.lognormal(4, 0.5, 2000) for _ in range(5)]
    out = bootstrap_estimates(df, syn, "y", B=1000, seed=11)
    again = bootstrap_estimates(df, syn, "y", B=1000, seed=11)
    pd.testing.assert_frame_equal(out, again)
    data_mean = out.query("source == 'Data' and statistic == 'mean'").iloc[0]
    assert data_mean.estimate == pytest.approx(y.mean())
    half = 1.959964 * y.std(ddof=1) / np.sqrt(y.size)  # normal-theory half width
    assert data_mean.length / 2 == pytest.approx(half, rel=0.1)
    syn_q90 = out.query("source == 'Synthetic' and statistic == 'q90'").iloc[0]
    assert syn_q90.estimate == pytest.approx(np.mean([np.quantile(s, 0.9) for s in syn]))
    # pooling over L sets: one copy of the data reproduces the data interval (same B, same draws)
    one = bootstrap_estimates(df, [y], "y", B=500, seed=2)
    d, s = one[one.source == "Data"], one[one.source == "Synthetic"]
    assert (s.estimate.to_numpy() == d.estimate.to_numpy()).all()
    assert np.allclose(s.length.to_numpy(), d.length.to_numpy(), rtol=0.25)
    with pytest.raises(ValueError, match="unknown statistic"):
        bootstrap_estimates(df, syn, "y", statistics=["mode"])


def test_ir_on_nb_scale_benchmark_sized_quickly():
    """Vectorized: 100,000 records in 40 patterns, pairwise, well under a few seconds."""
    import time

    rng = np.random.default_rng(0)
    n = 100_000
    df = pd.DataFrame({"p": rng.integers(0, 40, n), "y": np.round(rng.lognormal(10, 1, n), -2)})
    t = time.perf_counter()
    apw = risk_weights(df, "p", "y", 0.2, kind="pairwise")
    am = risk_weights(df, "p", "y", 0.2)
    assert time.perf_counter() - t < 20  # generous: shared 2-core machine
    assert (apw >= am - 1e-12).all()
    # check a random subsample of records against the direct loop inside their pattern
    sub = rng.choice(n, 5, replace=False)
    y, p = df["y"].to_numpy(), df["p"].to_numpy()
    for i in sub:
        members = np.flatnonzero(p == p[i])
        yi = y[i]
        out_i = (y[members] < yi - 0.2 * abs(yi)) | (y[members] > yi + 0.2 * abs(yi))
        assert am[i] == pytest.approx(1 - out_i.mean(), abs=1e-12)
