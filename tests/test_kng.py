"""Tests for the KNG sampler, QuantileSynthesizer and kng_simulation."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.regression.quantile_regression import QuantReg

from surveysynth.datasets.kng import kng_simulation
from surveysynth.synth.kng import (
    check_loss,
    clip_predictors,
    exact_quantile_regression,
    kng_log_density,
    kng_sample,
    kng_sensitivity,
    quantile_gradient,
)
from surveysynth.synth.quantile import QuantileSynthesizer, paper_quantile_grid

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ density, gradient, sensitivity
def test_log_density_hand_case():
    # y = (1, 2, 3, 10), x = (1, 1, 1, 20) before clipping at C_X = 5 -> last x becomes 5
    X = np.array([[1.0, 1], [1, 1], [1, 1], [1, 20]])
    y = np.array([1.0, 2, 3, 10])
    beta = np.array([2.0, 0.5])  # predictions on clipped X: 2.5, 2.5, 2.5, 4.5
    # indicators y <= pred: 1, 1, 0, 0 ; tau = 0.25
    # G0 = (1 + 1) - 0.25 * 4 = 1 ; G1 = (1 + 1) - 0.25 * (1 + 1 + 1 + 5) = 0
    # sound Delta = 2 * 0.75 * 5 = 7.5 ; log f = -eps * 1 / 15 - 1e-5 * 4.25
    eps = 0.3
    got = kng_log_density(beta, X, y, 0.25, eps, C_X=5)
    assert got == pytest.approx(-eps * 1 / 15 - 1e-5 * 4.25, rel=1e-12)
    # paper sensitivity at tau = 0.75: Delta = 2 * 0.25 * 5 = 2.5 (sound: 7.5)
    # indicators same; G0 = 2 - 3 = -1, G1 = 2 - 0.75 * 8 = -4 -> ||G|| = 4
    got_p = kng_log_density(beta, X, y, 0.75, eps, C_X=5, sensitivity="paper")
    assert got_p == pytest.approx(-eps * 4 / 5 - 1e-5 * 4.25, rel=1e-12)
    assert kng_sensitivity(0.75, 5) == 7.5 and kng_sensitivity(0.75, 5, "paper") == 2.5
    assert kng_sensitivity(0.25, 5) == kng_sensitivity(0.25, 5, "paper") == 7.5


def test_gradient_batch_and_ties():
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(30), rng.integers(0, 4, 30)])
    y = rng.integers(0, 5, 30).astype(float)
    B = rng.normal(size=(6, 2)).round(0)  # many exact ties y == x'beta
    G = quantile_gradient(B, X, y, 0.3)
    for k in range(6):
        brute = sum(X[i] * ((y[i] <= X[i] @ B[k]) - 0.3) for i in range(30))
        np.testing.assert_allclose(G[k], brute)


def test_check_loss_and_clipping():
    np.testing.assert_allclose(check_loss([-2.0, 0.0, 3.0], 0.2), [1.6, 0.0, 0.6])
    X = np.array([[1.0, -9.0], [1.0, 9.0]])
    Xc = clip_predictors(X, 4)
    np.testing.assert_array_equal(Xc, [[1, -4], [1, 4]])
    assert X[0, 1] == -9.0  # input untouched
    with pytest.raises(ValueError, match="intercept"):
        clip_predictors(X, 0.5)


def test_exact_qr_matches_statsmodels():
    df = kng_simulation(800, seed=5)
    X = np.column_stack([np.ones(800), df[["X1", "X2"]]])
    for tau in (0.1, 0.5, 0.9):
        ours = exact_quantile_regression(X, df["X3"], tau)
        ref = QuantReg(df["X3"].to_numpy(), X).fit(q=tau).params
        loss = lambda b, t=tau: check_loss(df["X3"].to_numpy() - X @ b, t).sum()  # noqa: E731
        assert loss(ours) <= loss(ref) + 1e-6
        assert np.all(np.abs(ours - ref) <= 0.05 * (1 + np.abs(ref)))


def test_fixed_slope_fast_path_matches_direct_density():
    """The sorted-residual intercept path must target exactly the KNG density."""
    df = kng_simulation(500, seed=2)
    X = np.column_stack([np.ones(500), df["X1"]])
    y = df["X2"].to_numpy()
    res = kng_sample(X, y, 0.3, 2.0, C_X=46, init=[10.0, 3.0], slopes="fixed", n_iter=200,
                     seed=1, return_chain=True)
    direct = kng_log_density(res.chain, X, y, 0.3, 2.0, C_X=46)
    np.testing.assert_allclose(res.log_density, direct, rtol=1e-10, atol=1e-10)
    assert np.all(res.chain[:, 1] == 3.0)


def test_sampler_approaches_exact_qr_as_epsilon_grows():
    df = kng_simulation(2000, seed=11)
    X = np.column_stack([np.ones(2000), df["X1"]])
    y = df["X2"].to_numpy()
    exact = QuantReg(y, clip_predictors(X, 46)).fit(q=0.5).params
    Z = np.column_stack([np.ones(50), np.linspace(0, 46, 50)])
    errs = []
    for eps in (0.05, 1.0, 50.0):
        e = [
            np.abs(kng_sample(X, y, 0.5, eps, C_X=46, check_X=Z, n_iter=1500, seed=s).beta - exact)
            for s in range(3)
        ]
        errs.append(np.mean(e, axis=0))
    assert errs[2][0] < errs[1][0] < errs[0][0]
    assert errs[2][1] < errs[0][1]
    assert errs[2][0] < 0.5 and errs[2][1] < 0.05


def test_sampler_seed_and_constraints():
    df = kng_simulation(500, seed=3)
    X = np.column_stack([np.ones(500), df["X1"]])
    y = df["X2"].to_numpy()
    Z = np.column_stack([np.ones(20), np.linspace(0, 40, 20)])
    low = np.array([5.0, 2.5])
    kw = dict(C_X=46, check_X=Z, n_iter=300, lower=low, lb=0, ub=200, return_chain=True)
    a = kng_sample(X, y, 0.6, 0.5, seed=7, **kw)
    b = kng_sample(X, y, 0.6, 0.5, seed=np.random.default_rng(7), **kw)
    np.testing.assert_array_equal(a.chain, b.chain)
    pred = a.chain[1:] @ Z.T
    assert np.all(pred >= Z @ low - 1e-9) and np.all(pred <= 200) and np.all(pred >= 0)
    with pytest.raises(ValueError, match="check_X"):
        kng_sample(X, y, 0.6, 0.5, C_X=46, lb=0)
    with pytest.raises(ValueError, match="epsilon"):
        kng_sample(X, y, 0.6, 0.0, C_X=46)


# ------------------------------------------------------------------ synthesizer
SIM = dict(variables=["X1", "X2", "X3"], C_X={"X2": 46, "X3": 106},
           bounds={"X1": (0, 1000), "X2": (0, 1000), "X3": (0, 2000)}, progress=False)


@pytest.fixture(scope="module")
def small():
    return kng_simulation(400, seed=21)


@pytest.mark.parametrize("method,slopes", [("stepwise", "fixed"), ("stepwise", "varying"),
                                           ("sandwich", "fixed"), ("sandwich", "varying")])
def test_no_crossing_and_bounds(small, method, slopes):
    grid = [0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.95]
    s = QuantileSynthesizer(quantiles=grid, method=method, slopes=slopes, epsilon=1.0,
                            anchors=[0.05, 0.5, 0.95], n_iter=150, seed=1, **SIM).fit(small)
    syn = s.synthesize(2)
    for d in syn:
        Zp = np.ones((len(d), 1))
        for v in SIM["variables"]:
            B = s.coefficients_[v].to_numpy()
            P = Zp @ B.T  # predictions at every quantile for every synthetic record
            assert np.all(np.diff(P, axis=1) >= -1e-8), f"{v} crosses"
            lb, ub = SIM["bounds"][v]
            assert P.min() >= lb - 1e-8 and P.max() <= ub + 1e-8
            Zp = np.column_stack([Zp, d[v].to_numpy()])
    if slopes == "fixed":
        B = s.coefficients_["X3"].to_numpy()
        assert np.all(B[:, 1:] == B[4, 1:])  # every quantile keeps the median's slopes


def test_ledger_sums_exactly_and_paper_splits(small):
    bud = {"variables": [0.5, 0.25, 0.25], "median": [0.25, 0.8, 0.8],
           "anchors": [0.6, 0.8, 0.8], "anchor_median": [0.25, 0.8, 0.8]}
    anchors = [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99]
    for method in ("kng", "stepwise", "sandwich"):
        s = QuantileSynthesizer(method=method, epsilon=1.0, budget=bud, anchors=anchors, **SIM)
        led = s.ledger()
        assert len(led) == 3 * 49
        assert math.isclose(s.epsilon_total, 1.0, rel_tol=0, abs_tol=1e-14)
        by_var = led.groupby("variable")["epsilon"].apply(lambda e: math.fsum(e))
        np.testing.assert_allclose(by_var[["X1", "X2", "X3"]], [0.5, 0.25, 0.25], rtol=1e-14)
    s = QuantileSynthesizer(method="stepwise", epsilon=1.0, budget=bud, **SIM)
    led = s.ledger().set_index(["variable", "tau"])["epsilon"]
    assert led[("X1", 0.5)] == pytest.approx(0.125)
    assert led[("X2", 0.5)] == pytest.approx(0.2)
    assert led[("X2", 0.01)] == pytest.approx(0.05 / 48)
    s = QuantileSynthesizer(method="sandwich", epsilon=1.0, budget=bud, anchors=anchors, **SIM)
    led = s.ledger().set_index(["variable", "tau"])["epsilon"]
    assert led[("X1", 0.5)] == pytest.approx(0.5 * 0.6 * 0.25)
    assert led[("X1", 0.05)] == pytest.approx(0.5 * 0.6 * 0.75 / 6)
    assert led[("X3", 0.03)] == pytest.approx(0.25 * 0.2 / 42)


def test_errors():
    with pytest.raises(ValueError, match="no 0.5"):
        QuantileSynthesizer(quantiles=[0.1, 0.9], method="stepwise", **SIM)
    with pytest.raises(ValueError, match="bracket"):
        QuantileSynthesizer(method="sandwich", anchors=[0.05, 0.25, 0.5, 0.75, 0.95, 0.99], **SIM)
    with pytest.raises(ValueError, match="epsilon"):
        QuantileSynthesizer(epsilon=0, **SIM)
    with pytest.raises(ValueError, match="epsilon"):
        QuantileSynthesizer(epsilon=-1, **SIM)
    for bad in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match=r"outside \(0, 1\)"):
            QuantileSynthesizer(budget={"median": bad}, **SIM)
    with pytest.raises(ValueError, match="sum"):
        QuantileSynthesizer(budget={"variables": [0.5, 0.3, 0.3]}, **SIM)
    with pytest.raises(ValueError, match="C_X is missing"):
        QuantileSynthesizer(variables=["X1", "X2"], progress=False)
    df = kng_simulation(50, seed=1)
    df.loc[[3, 7], "X2"] = np.nan
    s = QuantileSynthesizer(quantiles=[0.25, 0.5, 0.75], n_iter=10, **SIM)
    with pytest.raises(ValueError, match=r"'X2'.*\[3, 7\]"):
        s.fit(df)


def test_seed_reproducible_and_no_mutation(small):
    before = small.copy()
    kw = dict(quantiles=[0.1, 0.5, 0.9], method="sandwich", anchors=[0.1, 0.5, 0.9],
              epsilon=2.0, n_iter=60, **SIM)
    a = QuantileSynthesizer(seed=5, **kw).fit(small).synthesize(2)
    b = QuantileSynthesizer(seed=5, **kw).fit(small).synthesize(2)
    c = QuantileSynthesizer(seed=6, **kw).fit(small).synthesize(2)
    for x, y in zip(a, b, strict=True):
        pd.testing.assert_frame_equal(x, y)
    assert not a[0].equals(c[0])
    pd.testing.assert_frame_equal(small, before)


def test_nonprivate_uses_exact_qr(small):
    s = QuantileSynthesizer(quantiles=[0.25, 0.5, 0.75], method="nonprivate", **SIM).fit(small)
    X = np.column_stack([np.ones(len(small)), small[["X1", "X2"]]])
    ref = QuantReg(small["X3"].to_numpy(), X).fit(q=0.75).params
    np.testing.assert_allclose(s.coefficients_["X3"].loc[0.75], ref, rtol=1e-3, atol=1e-2)
    assert s.coefficients_["X1"].loc[0.5].iloc[0] == np.quantile(small["X1"], 0.5, method="inverted_cdf")


def test_release(small):
    import surveysynth.release  # noqa: F401  (part of the package: must import)
    from surveysynth.design import SurveyDesign

    des = SurveyDesign(small, weights=np.full(len(small), 25.0))
    s = QuantileSynthesizer(quantiles=[0.25, 0.5, 0.75], epsilon=1.0, n_iter=30, seed=2, **SIM)
    rel = s.fit(des).release(m=2)
    priv = s.privacy_record(2)
    assert priv["guarantee"] == "kng" and priv["epsilon"] == pytest.approx(1.0)
    assert any("not to verified convergence" in n for n in priv["notes"])
    assert len(priv["ledger"]) == 9 and set(priv["ledger"][0]) == {"variable", "tau", "epsilon", "role"}
    assert rel is not None


def test_kng_simulation():
    a = kng_simulation(2000, seed=1)
    pd.testing.assert_frame_equal(a, kng_simulation(2000, seed=1))
    assert list(a.columns) == ["X1", "X2", "X3"]
    assert np.all(a["X2"] - 4 - 3 * a["X1"] > 0) and np.all(a["X3"] - 3 - 2 * a["X1"] - a["X2"] > 0)
    assert a["X1"].mean() == pytest.approx(10, rel=0.1)
    assert paper_quantile_grid().size == 49 and 0.5 in paper_quantile_grid()


def test_vignette_fast(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "vignettes" / "kng_heavy_tails.py"), "--fast", "--config", "sound",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "kng_heavy_tails.md").read_text()
    assert "| Sandwich-Fixed |" in md and "pMSE WOI (paper)" in md and "952.3" in md
    assert (tmp_path / "kng_heavy_tails_x1.png").exists()
