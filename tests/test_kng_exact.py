"""Tests for the exact (MCMC-free) KNG sampler of the intercept and sampler="exact"."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from surveysynth.datasets.kng import kng_simulation
from surveysynth.synth.kng import (
    kng_intercept_draws,
    kng_intercept_pieces,
    kng_log_density,
    kng_sample_intercept_exact,
    quantile_gradient,
)
from surveysynth.synth.kng.truncated_gauss import log_gauss_mass, series_rel, truncnorm_ppf
from surveysynth.synth.quantile_synthesizer import QuantileSynthesizer, paper_quantile_grid

# hand data: 7 records, x clipped at C_X = 5 (the 9 becomes 5), tied residuals at 3 and ties in y
X7 = np.array([[1, 2.0], [1, 0.5], [1, 3], [1, 9], [1, 1], [1, 2], [1, 4]])
Y7 = np.array([3.0, 1, 5, 2, 1.5, 4, 5])
S7 = np.array([0.5])  # fixed nonzero slope
# residuals y - 0.5 * clip(x): 2, 0.75, 3.5, -0.5, 1, 3, 3  (two tied at 3)
R7 = np.array([2.0, 0.75, 3.5, -0.5, 1.0, 3.0, 3.0])


def _quad_log_mass(lo, hi, tau, eps, c, slopes=S7, X=X7, y=Y7, C_X=5.0):
    beta = lambda b: np.r_[b, slopes]  # noqa: E731
    f = lambda b: math.exp(kng_log_density(beta(b), X, y, tau, eps, C_X, c=c))  # noqa: E731
    val, err = integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-12, limit=200)
    return math.log(val)


# ------------------------------------------------------------------ numerical building blocks
def testlog_gauss_mass_against_quad_and_series():
    cases = [(-np.inf, np.inf), (-np.inf, -3.0), (2.0, np.inf), (-1.0, 2.0), (0.5, 0.5001),
             (5.0, 5.0001), (-3.0, -2.99), (8.0, 9.0), (30.0, 31.0), (-0.005, 0.004), (1.0, 1.02)]
    got = log_gauss_mass([a for a, _ in cases], [b for _, b in cases])
    for (a, b), g in zip(cases, got, strict=True):
        ref = integrate.quad(lambda z: math.exp(-z * z / 2), a, b, epsabs=0, epsrel=1e-13, limit=200)[0]
        assert math.exp(g) == pytest.approx(ref, rel=1e-12), (a, b)
    assert log_gauss_mass(1.5, 1.5) == -np.inf
    # just outside the narrow regime the erfcx/ndtr branch (least accurate there) must agree with
    # the Hermite series, which is itself exact to < 1e-18 for h M < 0.01 and still to ~1e-17 here
    for m in (-7.0, -0.4, 0.0, 0.3, 1.0, 3.0, 10.0):
        h = 0.0100001 / max(1.0, abs(m))
        series = math.log(2 * h) - m * m / 2 + math.log1p(float(series_rel(np.array(m), np.array(h))))
        assert log_gauss_mass(m - h, m + h) == pytest.approx(series, rel=0, abs=1e-12)


def testtruncnorm_ppf_matches_scipy():
    u = np.linspace(0.001, 0.999, 11)
    for a, b in [(-1.0, 2.0), (2.0, np.inf), (-np.inf, -3.0), (0.5, 0.5001), (5.0, 5.0001),
                 (-3.0, -2.99), (8.0, 9.0), (1.0, 1.02), (-np.inf, np.inf)]:
        np.testing.assert_allclose(truncnorm_ppf(a, b, u), stats.truncnorm.ppf(u, a, b),
                                   rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ piece masses
def test_piece_masses_equal_quad_of_kng_density_with_ties_and_slopes():
    Z = np.array([[1, 0.0], [1, 5.0]])
    lower = np.array([-3.0, 0.5])  # neighbour: b >= -3 on both rows (z's slope part is 0 and 2.5)
    for tau, eps, c in [(0.3, 2.0, 0.01), (0.7, 0.8, 1e-5), (0.5, 5.0, 0.2)]:
        P = kng_intercept_pieces(X7, Y7, tau, eps, 5.0, slopes=S7, check_X=Z, lower=lower,
                                 lb=-4, ub=10, c=c)
        # b_lo: max(-4 - 0, -4 - 2.5, -3 (neighbour)) = -3; b_hi = min(10, 10 - 2.5) = 7.5
        assert (P.b_lo, P.b_hi) == (-3.0, 7.5)
        r = np.sort(R7)
        np.testing.assert_array_equal(P.lo[1:], np.clip(r, -3, 7.5))
        live = P.hi > P.lo
        assert live.sum() == 7 and P.log_mass[~live].tolist() == [-np.inf]  # the tie at 3
        for lo, hi, lm, g in zip(P.lo[live], P.hi[live], P.log_mass[live], P.g[live], strict=True):
            assert lm == pytest.approx(_quad_log_mass(lo, hi, tau, eps, c), rel=0, abs=1e-9)
            # the sup norm on the piece, recomputed directly from the clipped data at its middle
            G = quantile_gradient(np.r_[0.5 * (lo + hi), S7], np.clip(X7, -5, 5), Y7, tau)
            assert g == pytest.approx(np.max(np.abs(G)), abs=1e-12)
    # unbounded interval (no constraints): infinite outer pieces
    P = kng_intercept_pieces(X7, Y7, 0.4, 1.0, 5.0, slopes=S7, c=0.01)
    assert P.lo[0] == -np.inf and P.hi[-1] == np.inf
    for lo, hi, lm in zip(P.lo, P.hi, P.log_mass, strict=True):
        if hi > lo:
            assert lm == pytest.approx(_quad_log_mass(lo, hi, 0.4, 1.0, 0.01), rel=0, abs=1e-8)


def _reference_cdf(tau, eps, c, lo_b, hi_b, slopes=S7, X=X7, y=Y7, C_X=5.0, nodes=60):
    """CDF of the KNG intercept by Gauss-Legendre integration of kng_log_density per piece.

    Independent of the closed forms: the breakpoints are the hand residuals, the density is the
    direct O(n p) kng_log_density, and only interior points of each piece are evaluated.
    """
    brk = np.unique(np.clip(np.r_[lo_b, R7, hi_b], lo_b, hi_b))
    xg, wg = np.polynomial.legendre.leggauss(nodes)

    def integral(a, b):  # arrays a <= b inside one piece each
        t = a[:, None] + (b - a)[:, None] * (xg[None, :] + 1) / 2
        beta = np.column_stack([t.ravel(), np.tile(slopes, (t.size, 1))])
        f = np.exp(kng_log_density(beta, X, y, tau, eps, C_X, c=c)).reshape(t.shape)
        return (f * wg).sum(axis=1) * (b - a) / 2

    piece = integral(brk[:-1], brk[1:])
    before = np.r_[0.0, np.cumsum(piece)]
    total = before[-1]

    def cdf(b):
        b = np.asarray(b, dtype=float)
        k = np.clip(np.searchsorted(brk, b, side="right") - 1, 0, brk.size - 2)
        return (before[k] + integral(brk[k], b)) / total

    return cdf


@pytest.mark.parametrize("tau,eps,c,lb,ub", [(0.3, 2.0, 1e-5, -2.0, 8.0), (0.6, 3.0, 0.05, -30.0, 40.0)])
def test_exact_draws_goodness_of_fit(tau, eps, c, lb, ub):
    Z = np.array([[1, 0.0]])  # slope part 0: the bounds act on the intercept directly
    P = kng_intercept_pieces(X7, Y7, tau, eps, 5.0, slopes=S7, check_X=Z, lb=lb, ub=ub, c=c)
    draws = kng_intercept_draws(P, 20_000, random_state=2024)
    assert draws.min() >= lb and draws.max() <= ub
    cdf = _reference_cdf(tau, eps, c, lb, ub)
    res = stats.kstest(draws, cdf)
    assert res.pvalue > 1e-3, res
    # the piece probabilities also match the empirical frequencies (chi-square)
    brk = np.r_[P.lo[P.hi > P.lo], ub]
    obs = np.histogram(draws, bins=brk)[0]
    expct = P.probabilities()[P.hi > P.lo] * draws.size
    assert stats.chisquare(obs, expct).pvalue > 1e-3


def test_exact_draw_matches_kng_density_shape_not_uniform():
    # guard that the KS test can fail: draws from a wrong (uniform-within-bounds) law are rejected
    Z = np.array([[1, 0.0]])
    cdf = _reference_cdf(0.6, 3.0, 0.05, -30.0, 40.0)
    wrong = np.random.default_rng(1).uniform(-30, 40, 2000)
    assert stats.kstest(wrong, cdf).pvalue < 1e-10
    P = kng_intercept_pieces(X7, Y7, 0.6, 3.0, 5.0, slopes=S7, check_X=Z, lb=-30, ub=40, c=0.05)
    assert stats.kstest(kng_intercept_draws(P, 2000, random_state=3), cdf).pvalue > 1e-3


# ------------------------------------------------------------------ constraints, seeds, large epsilon
def test_constraints_seed_and_large_epsilon():
    df = kng_simulation(400, seed=4)
    X = np.column_stack([np.ones(400), df["X1"]])
    y = df["X2"].to_numpy()
    Z = np.column_stack([np.ones(30), np.linspace(0, 46, 30)])
    low, up = np.array([5.0, 3.0]), np.array([30.0, 3.0])
    kw = dict(slopes=[3.0], check_X=Z, lower=low, upper=up, lb=0, ub=300)
    P = kng_intercept_pieces(X, y, 0.6, 0.5, 46, **kw)
    assert (P.b_lo, P.b_hi) == pytest.approx((5.0, 30.0), abs=1e-12)
    d = kng_intercept_draws(P, 5000, random_state=1)
    assert d.min() >= P.b_lo and d.max() <= P.b_hi
    a = kng_sample_intercept_exact(X, y, 0.6, 0.5, 46, random_state=7, **kw)
    b = kng_sample_intercept_exact(X, y, 0.6, 0.5, 46, random_state=np.random.default_rng(7), **kw)
    c = kng_sample_intercept_exact(X, y, 0.6, 0.5, 46, random_state=8, **kw)
    assert a.beta.tolist() == b.beta.tolist() and a.beta[0] != c.beta[0]
    assert a.beta[1] == 3.0 and a.sampler == "exact" and a.n_iter == 0
    pred = Z @ a.beta
    assert np.all(pred >= Z @ low - 1e-9) and np.all(pred <= Z @ up + 1e-9)
    # restricting the unconstrained pieces equals computing them with the neighbour constraints
    y1 = df["X1"].to_numpy()
    full = kng_intercept_pieces(np.ones((400, 1)), y1, 0.8, 0.3, 1.0, lb=0, ub=1000)
    direct = kng_intercept_pieces(np.ones((400, 1)), y1, 0.8, 0.3, 1.0, lb=0, ub=1000,
                                  lower=[7.5], upper=[40.0])
    sub = full.restrict(7.5, 40.0)
    assert (sub.b_lo, sub.b_hi) == (direct.b_lo, direct.b_hi) == (7.5, 40.0)
    np.testing.assert_array_equal(sub.log_mass, direct.log_mass)
    # a single feasible point is returned as is
    pt = kng_sample_intercept_exact(X, y, 0.6, 0.5, 46, slopes=[3.0], check_X=Z, lower=low,
                                    upper=low, random_state=1)
    assert pt.beta == pytest.approx([5.0, 3.0], abs=1e-12)
    # huge epsilon: the draw lies in the set of check-loss minimisers [r_(k), r_(k+1)), k = tau n
    yy = np.random.default_rng(5).exponential(10, 200)
    r = np.sort(yy)
    for tau, k in ((0.5, 100), (0.3, 60), (0.95, 190)):
        bs = [kng_sample_intercept_exact(np.ones((200, 1)), yy, tau, 1e4, 1.0, lb=0, ub=200,
                                         random_state=s).beta[0]
              for s in range(5)]
        assert all(r[k - 1] <= v < r[k] for v in bs), (tau, bs)
        assert r[k - 1] == np.quantile(yy, tau, method="inverted_cdf")


def test_errors():
    with pytest.raises(ValueError, match="slopes"):
        kng_intercept_pieces(X7, Y7, 0.5, 1.0, 5.0, slopes=[1.0, 2.0])
    with pytest.raises(ValueError, match="check_X"):
        kng_intercept_pieces(X7, Y7, 0.5, 1.0, 5.0, slopes=S7, lb=0)
    with pytest.raises(ValueError, match="no intercept"):
        kng_intercept_pieces(X7, Y7, 0.5, 1.0, 5.0, slopes=S7, check_X=[[1, 0.0]],
                             lower=[3.0, 0.0], upper=[2.0, 0.0])
    with pytest.raises(ValueError, match="improper"):
        kng_intercept_pieces(X7, Y7, 0.5, 1.0, 5.0, slopes=S7, c=0)
    with pytest.raises(ValueError, match="non-finite"):
        kng_intercept_pieces(X7, np.r_[Y7[:-1], np.nan], 0.5, 1.0, 5.0, slopes=S7)
    with pytest.raises(ValueError, match="sampler"):
        QuantileSynthesizer(variables=["X1"], bounds={"X1": (0, 1)}, sampler="gibbs").exact_plan()


# ------------------------------------------------------------------ synthesizer integration
SIM = dict(variables=["X1", "X2", "X3"], C_X={"X2": 46, "X3": 106},
           bounds={"X1": (0, 1000), "X2": (0, 1000), "X3": (0, 2000)}, progress=False)
BUD = {"variables": [0.5, 0.25, 0.25], "median": [0.25, 0.8, 0.8]}


@pytest.mark.parametrize("method", ["stepwise", "sandwich"])
def test_synthesizer_exact_fixed_slopes(method):
    df = kng_simulation(600, seed=3)
    before = df.copy()
    kw = dict(method=method, slopes="fixed", epsilon=1.0, budget=BUD, n_iter=200, **SIM)
    s = QuantileSynthesizer(random_state=1, **kw).fit(df)  # sampler="exact" is the default
    ref = QuantileSynthesizer(sampler="mcmc", random_state=1, **kw)
    assert s.quantile_budget().equals(ref.quantile_budget()) and s.epsilon_total == ref.epsilon_total
    assert math.isclose(s.epsilon_total, 1.0, rel_tol=0, abs_tol=1e-14)
    assert s.epsilon_spent_ == s.epsilon_total
    assert df.equals(before)
    diag = s.diagnostics_.set_index(["variable", "tau"])
    assert (diag.loc["X1", "sampler"] == "exact").all()
    for v in ("X2", "X3"):
        assert diag.loc[(v, 0.5), "sampler"] == "mcmc"
        assert (diag.loc[v].drop(index=0.5)["sampler"] == "exact").all()
        assert np.isnan(diag.loc[v].drop(index=0.5)["accept_rate"]).all()
    # no crossing and bounds on every synthetic record; fixed slopes kept
    for d in s.synthesize(2):
        Zp = np.ones((len(d), 1))
        for v in SIM["variables"]:
            B = s.coefficients_[v].to_numpy()
            P = Zp @ B.T
            assert np.all(np.diff(P, axis=1) >= -1e-8), f"{v} crosses"
            lb, ub = SIM["bounds"][v]
            assert P.min() >= lb - 1e-8 and P.max() <= ub + 1e-8
            Zp = np.column_stack([Zp, d[v].to_numpy()])
        B3 = s.coefficients_["X3"].to_numpy()
        assert np.all(B3[:, 1:] == B3[24, 1:])
    rec = s.privacy_record(1)
    ex = [n for n in rec.notes if n.startswith("drawn exactly")]
    mc = [n for n in rec.notes if n.startswith("drawn by MCMC")]
    assert len(ex) == 1 and len(mc) == 1
    assert "X1: all 49 quantiles; X2: all 49 quantiles but the median; X3: all 49 quantiles but the median" in ex[0]
    assert "(X2: the median; X3: the median)" in mc[0] and "not to verified convergence" in mc[0]
    assert rec.epsilon == pytest.approx(1.0) and rec.facts["sampler"] == "mixed"
    assert not rec.differentially_private
    # same seed -> same coefficients
    t = QuantileSynthesizer(random_state=1, **kw).fit(df)
    for v in SIM["variables"]:
        assert s.coefficients_[v].equals(t.coefficients_[v])


def test_synthesizer_exact_notes_other_methods():
    df = kng_simulation(300, seed=8)
    grid = [0.1, 0.25, 0.5, 0.75, 0.9]
    # a single (intercept-only) variable: every quantile exact, no MCMC caveat at all
    s = QuantileSynthesizer(variables=["X1"], quantiles=grid, method="sandwich",
                            anchors=[0.1, 0.5, 0.9], epsilon=1.0, bounds={"X1": (0, 1000)},
                            init="nonprivate", random_state=2, progress=False).fit(df)
    rec = s.privacy_record()
    assert any(n.startswith("every quantile was drawn exactly") for n in rec.notes)
    assert not any("not to verified convergence" in n for n in rec.notes)
    assert rec.facts["nonprivate_start_used"] is False  # the exact median ignores the start
    assert rec.differentially_private and rec.facts["sampler"] == "exact"
    B = s.coefficients_["X1"].to_numpy()[:, 0]
    assert np.all(np.diff(B) >= 0) and B.min() >= 0 and B.max() <= 1000
    # plain KNG, varying slopes: X1 exact, the later variables entirely MCMC
    s = QuantileSynthesizer(quantiles=grid, method="kng", epsilon=1.0, n_iter=50,
                            random_state=2, **SIM).fit(df)
    notes = s.privacy_record().notes
    assert any(n.startswith("drawn exactly") and "X1: all 5 quantiles." in n for n in notes)
    assert any(n.startswith("drawn by MCMC (X2: all 5 quantiles; X3: all 5 quantiles)") for n in notes)
    # sampler="mcmc": every quantile by MCMC
    s = QuantileSynthesizer(quantiles=grid, method="kng", epsilon=1.0, n_iter=20, sampler="mcmc",
                            random_state=2, **SIM).fit(df)
    assert not any(n.startswith("drawn exactly") for n in s.privacy_record().notes)
    assert (s.diagnostics_["sampler"] == "mcmc").all() and s.sampler_used_ == "mcmc"
    assert paper_quantile_grid().size == 49


def test_study_fast(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, str(root / "vignettes" / "kng_exact_x1.py"), "--fast", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "kng_exact_x1.md").read_text()
    assert "| released q(0.99): mean [5%, 95%] |" in md and "| quantity | true (sample) | plain KNG | stepwise |" in md
