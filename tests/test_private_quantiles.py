"""JointExp (Gillenwater, Joseph & Kulesza 2021) with its exact sampler, and QuantileSynthesizer
method="jointexp".

The reference numbers are computed here independently of the dynamic programme: by enumerating
every sequence of intervals (itertools) with the number of sorted grid tuples prod C(c + r - 1, r)
(c: grid points of the interval, counted by brute force), by enumerating every sorted tuple of a
coarse grid with the utility written from the counts, and by a midpoint grid of the continuous
density (the grid's limit).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from surveysynth.synth import private_quantiles as pq
from surveysynth.synth.quantile_synthesizer import QuantileSynthesizer

X_TINY = np.array([1.0, 2.5, 2.5, 6.0, 9.5])  # a tie and a value near the upper bound
A, B = 0.0, 10.0
BITS = pq.GRID_BITS


def brute_grid(a, b, bits=BITS):
    """The public grid written out: a + (b - a) k / 2^bits, k = 0..2^bits."""
    return a + (b - a) * (np.arange(2**bits + 1) / 2**bits)


def grid_counts(xs, a, b, bits=BITS):
    """Number of grid points t with exactly i data values <= t, i = 0..n (brute force)."""
    g = brute_grid(a, b, bits)
    below = np.concatenate([(xs[None, :] <= g[k: k + 65536, None]).sum(axis=1)
                            for k in range(0, g.size, 65536)])
    return np.bincount(below, minlength=xs.size + 1)


def enumerate_cells(x, q, eps, a, b, sensitivity=2.0, bits=BITS):
    """Probability of each sequence of intervals (i_1 <= ... <= i_m), by brute force."""
    xs = np.sort(np.clip(x, a, b))
    n, m = xs.size, len(q)
    counts = grid_counts(xs, a, b, bits)
    alpha = eps / (2 * sensitivity)
    c = np.diff(np.concatenate([[0], q, [1]])) * n
    w = {}
    for seq in itertools.combinations_with_replacement(range(n + 1), m):
        idx = [0, *seq, n]
        u = -sum(abs(idx[k + 1] - idx[k] - c[k]) for k in range(m + 1))
        vol = 1.0
        for i, r in Counter(seq).items():
            vol *= math.comb(int(counts[i]) + r - 1, r)  # sorted r-tuples of c grid points
        w[seq] = math.exp(alpha * u) * vol
    z = sum(w.values())
    return {k: v / z for k, v in w.items()}, math.log(z)


def direct_log_weight(o, x, q, eps, sensitivity=2.0):
    """Unnormalised log density of sorted outputs o (rows) written from the counts."""
    xs = np.sort(x)
    n = xs.size
    below = (xs[None, None, :] <= o[:, :, None]).sum(axis=2)
    cnt = np.diff(np.column_stack([np.zeros(len(o)), below, np.full(len(o), n)]), axis=1)
    c = np.diff(np.concatenate([[0], q, [1]])) * n
    return -(eps / (2 * sensitivity)) * np.abs(cnt - c).sum(axis=1)


@pytest.mark.parametrize("q,eps", [([0.3, 0.7], 1.0), ([0.1, 0.5, 0.9], 3.0), ([0.2, 0.4, 0.6, 0.8], 0.7)])
def test_normaliser_equals_enumeration(q, eps):
    t = pq.joint_exp_tables(X_TINY, q, eps, A, B)
    _, log_z = enumerate_cells(X_TINY, q, eps, A, B)
    assert t.log_z == pytest.approx(log_z, abs=1e-12)


def test_normaliser_equals_grid_integral_of_the_count_density():
    # two quantiles: integrate exp(alpha u(o)) over o1 <= o2 on a midpoint grid (independent of
    # the interval bookkeeping); the grid error is O(h) at the data points
    q, eps = [0.3, 0.7], 2.0
    h = 0.005
    g = np.arange(A + h / 2, B, h)
    o1, o2 = np.meshgrid(g, g, indexing="ij")
    keep = o1 < o2
    pts = np.column_stack([o1[keep], o2[keep]])
    w = np.exp(direct_log_weight(pts, X_TINY, np.array(q), eps))
    z_grid = w.sum() * h * h + np.exp(direct_log_weight(np.column_stack([g, g]), X_TINY, np.array(q), eps)).sum() * h * h / 2
    t = pq.joint_exp_tables(X_TINY, q, eps, A, B)
    # the public grid's counting measure is Lebesgue / step^m in the limit (step = (B - A) / 2^20)
    step = (B - A) / 2**BITS
    assert math.log(z_grid) == pytest.approx(t.log_z + 2 * math.log(step), abs=5e-3)


def test_exact_law_on_a_coarse_grid_by_enumerating_every_output():
    # grid_bits = 4: 17 grid points; every sorted triple enumerated with the utility written from
    # the counts; the sampler's frequencies against these exact probabilities (chi-square), and
    # every draw is a grid point (the output set is the public grid)
    q, eps, bits = [0.3, 0.5, 0.9], 2.0, 4
    g = brute_grid(A, B, bits)
    outs = np.array(list(itertools.combinations_with_replacement(g, len(q))))
    w = np.exp(direct_log_weight(outs, X_TINY, np.array(q), eps))
    p = w / w.sum()
    lp = pq.joint_exp_log_density(outs, X_TINY, q, eps, A, B, grid_bits=bits)
    np.testing.assert_allclose(np.exp(lp), p, rtol=1e-10, atol=0)
    t = pq.joint_exp_tables(X_TINY, q, eps, A, B, grid_bits=bits)
    draws = pq.joint_exp_draws(t, 6000, random_state=11)
    assert np.isin(draws, g).all()
    key = {tuple(o): i for i, o in enumerate(outs)}
    obs = np.bincount([key[tuple(r)] for r in draws], minlength=len(outs))
    big = p * draws.shape[0] >= 5
    exp_ = np.append(p[big], p[~big].sum()) * draws.shape[0]
    assert stats.chisquare(np.append(obs[big], obs[~big].sum()), exp_).pvalue > 1e-3
    # off-grid outputs have probability 0
    assert pq.joint_exp_log_density(outs[:1] + 1e-9, X_TINY, q, eps, A, B, grid_bits=bits)[0] == -np.inf


def _cells_of(draws, edges):
    return [tuple(row) for row in (np.searchsorted(edges, draws, side="right") - 1)]


def _gof(draws, q, eps):
    """p-values: chi-square over interval sequences, KS of each output's marginal CDF."""
    probs, _ = enumerate_cells(X_TINY, q, eps, A, B)
    edges = np.concatenate([[A], np.sort(X_TINY), [B]])
    counts = Counter(_cells_of(draws, edges))
    keys = [k for k, p in probs.items() if p > 0]
    exp = np.array([probs[k] for k in keys]) * len(draws)
    obs = np.array([counts.get(k, 0) for k in keys])
    assert sum(counts.get(k, 0) for k in probs if probs[k] == 0) == 0
    big = exp >= 5
    obs_b, exp_b = obs[big], exp[big]
    if exp[~big].sum() > 0:
        obs_b, exp_b = np.append(obs_b, obs[~big].sum()), np.append(exp_b, exp[~big].sum())
    p_chi = stats.chisquare(obs_b, exp_b).pvalue
    # marginal of output j: mixture over cells of the order statistic of r uniforms in its
    # interval (Beta(k, r - k + 1) on the interval)
    p_ks = []
    for j in range(len(q)):
        def cdf(t, j=j):
            t = np.atleast_1d(t)
            out = np.zeros_like(t, dtype=float)
            for k, p in zip(keys, exp / len(draws), strict=True):
                i = k[j]
                run = [jj for jj in range(len(q)) if k[jj] == i]
                r, pos = len(run), run.index(j) + 1
                lo, hi = edges[i], edges[i + 1]
                u = np.clip((t - lo) / (hi - lo), 0, 1)
                out += p * stats.beta.cdf(u, pos, r - pos + 1)
            return out
        p_ks.append(stats.kstest(draws[:, j], cdf).pvalue)
    return p_chi, min(p_ks)


@pytest.mark.parametrize("q,eps", [([0.3, 0.7], 1.0), ([0.1, 0.5, 0.9], 3.0)])
def test_exact_draws_fit_the_closed_form(q, eps):
    t = pq.joint_exp_tables(X_TINY, q, eps, A, B)
    draws = pq.joint_exp_draws(t, 5_000, random_state=7)
    assert np.all(np.diff(draws, axis=1) >= 0) and draws.min() >= A and draws.max() <= B
    p_chi, p_ks = _gof(draws, q, eps)
    assert p_chi > 1e-3 and p_ks > 1e-3


def test_mutant_wrong_interval_weights_fails(monkeypatch):
    # every non-empty interval weighted as if it held one grid point (volume ignored)
    monkeypatch.setattr(pq, "_log_lengths", lambda count: np.where(count > 0, 0.0, -np.inf))
    q, eps = [0.3, 0.7], 1.0
    t = pq.joint_exp_tables(X_TINY, q, eps, A, B)
    draws = pq.joint_exp_draws(t, 5_000, random_state=7)
    p_chi, _ = _gof(draws, q, eps)
    assert p_chi < 1e-6


def test_mutant_without_run_factorial_fails(monkeypatch):
    # the backward pass forgets 1/r! for several outputs in one interval
    monkeypatch.setattr(pq, "gammaln", lambda r: np.zeros_like(np.asarray(r, float)))
    q, eps = [0.3, 0.7], 1.0
    t = pq.joint_exp_tables(X_TINY, q, eps, A, B)
    draws = pq.joint_exp_draws(t, 5_000, random_state=7)
    p_chi, _ = _gof(draws, q, eps)
    assert p_chi < 1e-6


def _max_privacy_loss(eps, q):
    """max over replace-one neighbours and a grid of outputs of |log f_D(o) - log f_D'(o)|."""
    g = brute_grid(A, B)[:: 2**BITS // 32]  # 33 points of the public grid
    outs = np.array([o for o in itertools.combinations_with_replacement(g, len(q))])
    base = pq.joint_exp_log_density(outs, X_TINY, q, eps, A, B)
    worst = 0.0
    for k in range(X_TINY.size):
        for v in (A, 0.5, 4.0, 7.5, B):
            x2 = X_TINY.copy()
            x2[k] = v
            other = pq.joint_exp_log_density(outs, x2, q, eps, A, B)
            worst = max(worst, float(np.max(np.abs(base - other))))
    return worst


def test_privacy_loss_is_at_most_epsilon_and_mutant_sensitivity_exceeds_it(monkeypatch):
    q, eps = [0.3, 0.7], 1.0
    loss = _max_privacy_loss(eps, q)
    assert loss <= eps + 1e-9
    assert loss >= 0.5 * eps  # the bound is not vacuous on this data
    monkeypatch.setattr(pq, "JOINTEXP_SENSITIVITY", 1.0)  # wrong: one record moves two counts
    assert _max_privacy_loss(eps, q) > eps + 1e-6


def test_outputs_sorted_within_bounds_with_clipping_and_log_scale():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.exponential(10, 300), [-5.0, 2000.0]])  # two values outside bounds
    grid = np.linspace(0.05, 0.95, 19)
    for transform in ("identity", "log"):
        for s in range(5):
            r = pq.joint_exp_quantiles(x, grid, 0.5, 0.0, 1000.0, transform=transform, random_state=s)
            assert np.all(np.diff(r.values) >= 0)
            assert r.values.min() >= 0.0 and r.values.max() <= 1000.0
            assert r.n_clipped == 2 and r.epsilon == 0.5


def test_log_scale_is_the_mechanism_on_transformed_data():
    x = np.random.default_rng(4).exponential(10, 200)
    fwd, inv, lo, hi = pq.tail_transform(0.0, 1000.0, "log")
    a = pq.joint_exp_quantiles(x, [0.25, 0.5, 0.9], 1.0, 0.0, 1000.0, transform="log", random_state=9)
    b = pq.joint_exp_quantiles(fwd(x), [0.25, 0.5, 0.9], 1.0, lo, hi, random_state=9)
    np.testing.assert_allclose(a.values, inv(b.values), rtol=1e-12)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="bounds"):
        pq.joint_exp_quantiles([1.0, 2.0], [0.5], 1.0, 0.0, np.inf)
    with pytest.raises(ValueError, match="positions \\[1\\]"):
        pq.joint_exp_quantiles([1.0, np.nan], [0.5], 1.0, 0.0, 5.0)
    with pytest.raises(ValueError, match="increasing"):
        pq.joint_exp_quantiles([1.0, 2.0], [0.5, 0.4], 1.0, 0.0, 5.0)
    with pytest.raises(ValueError, match="epsilon"):
        pq.joint_exp_quantiles([1.0, 2.0], [0.5], -1.0, 0.0, 5.0)


def _frame(n=400, seed=0):
    rng = np.random.default_rng(seed)
    x1 = rng.exponential(10, n)
    x2 = 4 + 3 * x1 + rng.exponential(10, n)
    return pd.DataFrame({"X1": x1, "X2": x2, "K": rng.integers(0, 50, n)})


def test_synthesizer_jointexp_accounting_bounds_types_and_label():
    df = _frame()
    df_copy = df.copy()
    syn = QuantileSynthesizer(
        variables=["X1", "X2", "K"], method="jointexp", epsilon=0.9,
        budget={"variables": [0.4, 0.3, 0.3], "median": [0.25, 0.1, 0.2]},
        C_X={"X2": 46, "K": 300}, bounds={"X1": (0, 1000), "X2": (0, 1000), "K": (0, 60)},
        random_state=1, progress=False,
    ).fit(df)
    pd.testing.assert_frame_equal(df, df_copy)
    budget = syn.quantile_budget()
    assert math.fsum(budget["epsilon"]) == pytest.approx(0.9, abs=1e-12)
    # X2: 10% of its 0.27 for the slope, 10% (default) for the DP median that centres the
    # pareto scale, the rest for the joint intercepts
    x2 = budget[budget["variable"] == "X2"]["epsilon"].to_numpy()
    np.testing.assert_allclose(x2, [0.1 * 0.27, 0.1 * 0.27, 0.8 * 0.27])
    for v, share in (("X1", 0.4), ("X2", 0.3), ("K", 0.3)):
        assert math.fsum(budget[budget["variable"] == v]["epsilon"]) == pytest.approx(0.9 * share, abs=1e-12)
    assert syn.epsilon_spent_ == pytest.approx(0.9)
    for f in syn.synthesize(3):
        assert f["X1"].between(0, 1000).all() and f["X2"].between(0, 1000).all()
        assert f["K"].dtype == np.int64 and f["K"].between(0, 60).all()
    rec = syn.privacy_record()
    assert rec.facts["sampler"] == "exact" and rec.facts["method"] == "jointexp"
    assert rec.facts["transform"] == "pareto" and "DP median" in rec.facts["transform_center"]
    assert set(syn.centers_) == {"X1", "X2", "K"}
    assert rec.epsilon == pytest.approx(0.9)
    # quantiles never cross: one slope per variable, sorted intercepts
    for v in ("X1", "X2", "K"):
        assert np.all(np.diff(syn.coefficients_[v]["(Intercept)"].to_numpy()) >= 0)
    with pytest.warns(UserWarning):
        syn.fit(df)
    assert syn.privacy_record().epsilon == pytest.approx(1.8)


def test_theil_sen_slope_recovers_the_slope_at_large_epsilon():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 40, 2000)
    y = 5 + 3 * x + rng.normal(0, 1, 2000)
    s = pq.dp_theil_sen_slope(x, y, 50.0, 20.0, np.random.default_rng(0))
    assert s == pytest.approx(3.0, abs=0.05)


def test_tails_vignette_fast(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(root / "vignettes" / "private_quantiles_tails.py"), "--fast",
                    "--out", str(tmp_path)], check=True, cwd=root, capture_output=True)
    md = (tmp_path / "private_quantiles_tails.md").read_text()
    df = pd.read_csv(tmp_path / "private_quantiles_tails.csv")
    assert df["rep"].nunique() == 2 and df["method"].nunique() == 8
    assert {"X1 q99 err", "X3 q90 err", "pMSE", "KM", "Slope Diff", "NRMSE X3"} <= set(df.columns)
    assert "Code: commit" in md
    rows = dict(line.split(" | ", 1) for line in md.splitlines() if line.startswith("| ") and " | " in line)
    paper = next(v for k, v in rows.items() if "paper config" in k and "differentially" in v)
    assert paper.startswith("not differentially private")
    joint = [v for k, v in rows.items() if k.startswith("| JointExp") and "differential" in v]
    assert joint and all(v.startswith("pure epsilon-differential privacy") for v in joint)


def test_jointexp_refuses_kng_only_settings():
    for bad in ({"sensitivity": "paper"}, {"init": "nonprivate"}):
        syn = QuantileSynthesizer(variables=["X1"], method="jointexp", bounds={"X1": (0, 1000)},
                                  progress=False, **bad)
        with pytest.raises(ValueError, match="jointexp"):
            syn.fit(_frame())
        assert getattr(syn, "ledger_", []) == []  # refused before any budget was booked


def test_jointexp_single_variable_record():
    syn = QuantileSynthesizer(variables=["X1"], method="jointexp", epsilon=0.5,
                              bounds={"X1": (0, 1000)}, random_state=0, progress=False).fit(_frame())
    rec = syn.privacy_record()
    assert rec.differentially_private is True and rec.epsilon == 0.5
    assert rec.facts["sampler"] == "exact" and rec.mechanism == "jointexp-pareto"
    np.testing.assert_allclose(syn.quantile_budget()["epsilon"], [0.05, 0.45])
    log = QuantileSynthesizer(variables=["X1"], method="jointexp", epsilon=0.5, transform="log",
                              bounds={"X1": (0, 1000)}, random_state=0, progress=False).fit(_frame())
    assert log.privacy_record().mechanism == "jointexp-log"
    assert log.quantile_budget()["epsilon"].tolist() == [0.5] and log.centers_ == {}
