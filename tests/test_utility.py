"""Tests for surveysynth.synthetic_utility against brute-force and independent references."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from surveysynth.synthetic_utility import ecdf_utility


def _brute_ecdf(orig, syn):
    orig = np.atleast_2d(np.asarray(orig, float).T).T
    syn = np.atleast_2d(np.asarray(syn, float).T).T
    pooled = np.vstack([orig, syn])
    diffs = []
    for z in pooled:
        fo = sum(all(r <= z) for r in orig) / len(orig)
        fs = sum(all(r <= z) for r in syn) / len(syn)
        diffs.append(fo - fs)
    diffs = np.array(diffs)
    return np.abs(diffs).max(), np.mean(diffs**2)


def test_ecdf_hand_case():
    # original {1,2,3}, synthetic {2,4}; pooled 1,2,3,2,4
    # F_o: 1/3, 2/3, 1, 2/3, 1 ; F_s: 0, 1/2, 1/2, 1/2, 1
    d = np.array([1 / 3, 1 / 6, 1 / 2, 1 / 6, 0.0])
    out = ecdf_utility([1, 2, 3], np.array([2, 4]))
    assert out["U_m"] == pytest.approx(0.5)
    assert out["U_a"] == pytest.approx(np.mean(d**2))


def test_ecdf_matches_brute_force_and_ks_with_ties():
    rng = np.random.default_rng(1)
    orig = rng.integers(0, 6, 40).astype(float)  # many ties
    syns = [rng.integers(0, 7, 30).astype(float) for _ in range(3)]
    out = ecdf_utility(orig, syns)
    ref = [_brute_ecdf(orig, s) for s in syns]
    assert out["U_m_each"] == pytest.approx([r[0] for r in ref])
    assert out["U_a_each"] == pytest.approx([r[1] for r in ref])
    assert out["U_m"] == pytest.approx(np.mean([r[0] for r in ref]))
    assert out["U_a"] == pytest.approx(np.mean([r[1] for r in ref]))
    ks = [stats.ks_2samp(orig, s).statistic for s in syns]
    assert out["U_m_each"] == pytest.approx(ks)


def test_ecdf_multivariate_brute_force():
    rng = np.random.default_rng(2)
    orig = rng.normal(size=(25, 2)).round(1)
    syn = rng.normal(0.3, 1, size=(20, 2)).round(1)
    out = ecdf_utility(pd.DataFrame(orig, columns=["a", "b"]), syn)
    um, ua = _brute_ecdf(orig, syn)
    assert out["U_m"] == pytest.approx(um)
    assert out["U_a"] == pytest.approx(ua)


def test_ecdf_identical_is_zero_and_shift_is_positive():
    x = np.random.default_rng(3).normal(size=200)
    assert ecdf_utility(x, x.copy())["U_m"] == 0.0
    assert ecdf_utility(x, x + 1.0)["U_m"] > 0.3


def test_ecdf_errors_and_no_mutation():
    df = pd.DataFrame({"a": [1.0, 2.0, np.nan]})
    with pytest.raises(ValueError, match=r"original .*rows \[2\]"):
        ecdf_utility(df, [1.0, 2.0])
    with pytest.raises(ValueError, match="columns"):
        ecdf_utility(np.zeros((3, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="empty"):
        ecdf_utility([1.0], [])
    orig = pd.DataFrame({"a": [3.0, 1.0, 2.0]})
    before = orig.copy()
    ecdf_utility(orig, [orig.to_numpy()[:, 0] + 1])
    pd.testing.assert_frame_equal(orig, before)


# ---------------------------------------------------------------- pMSE, k-marginal, WRT, specific
from surveysynth.synthetic_utility import (  # noqa: E402
    ci_overlap,
    coef_difference,
    k_marginal_score,
    nrmse,
    pmse,
    wasserstein_distance_1d,
    wasserstein_ratio,
)


def _pair(seed=0, n=300, shift=0.3):
    rng = np.random.default_rng(seed)
    o = pd.DataFrame({"a": rng.exponential(1, n), "b": rng.normal(size=n), "c": rng.normal(size=n)})
    s = pd.DataFrame({"a": rng.exponential(1, n) + shift, "b": rng.normal(size=n) * 1.3,
                      "c": rng.normal(size=n)})
    return o, s


@pytest.mark.parametrize("interactions", [False, True])
def test_pmse_saturated_model_has_closed_form(interactions):
    """Binary variables: main effects (one variable) or main effects + interaction (two) make
    the logistic model saturated, so each fitted propensity is the synthetic share of its cell
    (closed form, no logistic solver). Kills a wrong intercept, a wrong c, a dropped column."""
    rng = np.random.default_rng(3)
    cols = ["a", "b"] if interactions else ["a"]
    o = pd.DataFrame({c: rng.integers(0, 2, 300) for c in cols}).astype(float)
    s = pd.DataFrame({c: (rng.random(200) < 0.35 + 0.2 * k).astype(float)
                      for k, c in enumerate(cols)})
    pooled = pd.concat([o, s], ignore_index=True)
    t = np.r_[np.zeros(len(o)), np.ones(len(s))]
    share = pd.Series(t).groupby([pooled[c] for c in cols]).transform("mean").to_numpy()
    ref = np.mean((share - len(s) / len(pooled)) ** 2)
    got = pmse(o, s, interactions=interactions)
    assert got["pMSE"] == pytest.approx(ref, rel=1e-8)
    assert got["converged"]


def test_pmse_continuous_is_the_likelihood_maximum():
    """Continuous variables: the fitted propensities maximize the logistic likelihood (checked
    by scipy.optimize on the same design, an independent optimizer)."""
    from scipy.optimize import minimize

    o, s = _pair(n=250)
    s = s.iloc[:200]
    t = np.r_[np.zeros(250), np.ones(200)]
    Y = np.vstack([o.to_numpy(), s.to_numpy()])
    D = np.column_stack([np.ones(450), (Y - Y.mean(0)) / Y.std(0)])  # same span as 1, a, b, c

    def nll(b):
        eta = D @ b
        return np.sum(np.logaddexp(0.0, eta) - t * eta), D.T @ (1 / (1 + np.exp(-eta)) - t)

    b = minimize(nll, np.zeros(D.shape[1]), jac=True, method="BFGS", options={"gtol": 1e-10}).x
    ref = np.mean((1 / (1 + np.exp(-(D @ b))) - 200 / 450) ** 2)
    assert pmse(o, s)["pMSE"] == pytest.approx(ref, rel=1e-6)


def test_pmse_orders_and_averages():
    o, s = _pair(shift=0.0)
    _, bad = _pair(seed=1, shift=2.0)
    good = pmse(o, s)["pMSE"]
    assert good < pmse(o, bad)["pMSE"]
    both = pmse(o, [s, bad])
    assert both["pMSE"] == pytest.approx(np.mean(both["pMSE_each"]))
    assert both["pMSE_each"][0] == pytest.approx(good)


def test_k_marginal_brute_force():
    o, s = _pair(n=120)
    s = s.iloc[:90]
    br = {c: np.quantile(o[c], [0, 0.25, 0.5, 0.75, 1]) for c in o}

    def cell(row):  # findInterval(left.open=TRUE): number of breakpoints strictly below x
        return tuple(int(sum(x > q for q in br[c])) for c, x in row.items())

    co = pd.Series([cell(r) for _, r in o.iterrows()]).value_counts() / len(o)
    cs = pd.Series([cell(r) for _, r in s.iterrows()]).value_counts() / len(s)
    td = co.sub(cs, fill_value=0).abs().sum()
    assert k_marginal_score(o, s)["score"] == pytest.approx(1000 * (2 - td) / 2)
    assert k_marginal_score(o, o.copy())["score"] == pytest.approx(1000.0)
    far = o + 100
    assert k_marginal_score(o, far)["score"] == pytest.approx(0.0)
    # k = 1 averages the three one-way scores
    one = [k_marginal_score(o[[c]], s[[c]])["score"] for c in o]
    assert k_marginal_score(o, s, k=1)["score"] == pytest.approx(np.mean(one))


def test_wasserstein_exact_and_ratio():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=70), rng.normal(0.5, 2, size=55)
    # equal sizes: W1 is the mean gap between order statistics (closed form)
    assert wasserstein_distance_1d(a[:55], b) == pytest.approx(
        np.mean(np.abs(np.sort(a[:55]) - np.sort(b))), rel=1e-12)
    # unequal sizes: the integral of |F_a - F_b| on a fine grid
    grid = np.linspace(min(a.min(), b.min()), max(a.max(), b.max()), 400_001)
    Fa = np.searchsorted(np.sort(a), grid, side="right") / a.size
    Fb = np.searchsorted(np.sort(b), grid, side="right") / b.size
    assert wasserstein_distance_1d(a, b) == pytest.approx(
        np.sum(np.abs(Fa - Fb)[:-1] * np.diff(grid)), rel=1e-3)
    o, s = _pair(n=200, shift=0.0)
    r1 = wasserstein_ratio(o, s, n_perm=200, seed=1)
    r2 = wasserstein_ratio(o, s, n_perm=200, seed=1)
    assert r1 == r2
    # brute-force check of one variable's ratio with the same permutations
    rng = np.random.default_rng(1)
    pooled = np.r_[o["a"], s["a"]]
    null = [stats.wasserstein_distance(*np.split(pooled[np.argsort(rng.random(400))], [200]))
            for _ in range(200)]
    ref = stats.wasserstein_distance(o["a"], s["a"]) / np.median(null)
    assert r1["ratio_by_variable"][0] == pytest.approx(ref, rel=0.25)
    _, far = _pair(seed=2, shift=3.0)
    assert wasserstein_ratio(o, far, n_perm=100, seed=1)["ratio"] > 3 * r1["ratio"]


def test_coef_difference_and_nrmse_vs_normal_equations():
    rng = np.random.default_rng(8)
    o = pd.DataFrame({"x": rng.normal(size=200)})
    o["y"] = 1 + 2 * o["x"] + rng.normal(size=200)
    s = pd.DataFrame({"x": rng.normal(size=150)})
    s["y"] = 1.5 + 1.8 * s["x"] + rng.normal(size=150)

    def ols(d):  # normal equations and the classical variance s^2 (X'X)^-1
        X = np.column_stack([np.ones(len(d)), d["x"]])
        XtX = X.T @ X
        b = np.linalg.solve(XtX, X.T @ d["y"].to_numpy())
        r = d["y"].to_numpy() - X @ b
        return b, np.sqrt(np.diag(r @ r / (len(d) - 2) * np.linalg.inv(XtX)))

    bo, se_o = ols(o)
    bs, _ = ols(s)
    got = coef_difference(o, s, "y", ["x"])
    np.testing.assert_allclose(got["se_orig"], se_o, rtol=1e-10)
    np.testing.assert_allclose(got["std_diff"], np.abs(bo - bs) / se_o, rtol=1e-10)
    test = pd.DataFrame({"x": rng.normal(size=100)})
    test["y"] = 1 + 2 * test["x"] + rng.normal(size=100)
    pred = bs[0] + bs[1] * test["x"]
    ref = np.sqrt(np.mean((test["y"] - pred) ** 2)) / test["y"].std(ddof=1)
    assert nrmse(s, test, "y", ["x"])["NRMSE"] == pytest.approx(ref, rel=1e-10)
    with pytest.raises(ValueError, match="lacks columns"):
        nrmse(s, test, "y", ["z"])


def test_ci_overlap():
    # identical -> 1; [0,2] vs [1,3]: overlap 1, each width 2 -> 0.5; disjoint gives negative
    np.testing.assert_allclose(ci_overlap([0, 0, 0], [2, 2, 1], [0, 1, 2], [2, 3, 3]), [1, 0.5, -0.5 * (1 / 1 + 1 / 1)])
