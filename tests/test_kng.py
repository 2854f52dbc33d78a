"""Tests for the KNG sampler, QuantileSynthesizer and kng_simulation."""

from __future__ import annotations

import functools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.regression.quantile_regression import QuantReg

from surveysynth.datasets.kng import kng_simulation
from surveysynth.synth.base import NotFittedError
from surveysynth.synth.kng import (
    check_loss,
    clip_predictors,
    exact_quantile_regression,
    kng_log_density,
    kng_sample,
    kng_sensitivity,
    quantile_gradient,
)
from surveysynth.synth.quantile_synthesizer import QuantileSynthesizer as _QuantileSynthesizer
from surveysynth.synth.quantile_synthesizer import paper_quantile_grid

# These tests are about the KNG methods, written when "stepwise" was the default; the default
# is "jointexp" since issue 37 (tests/test_quantile_defaults.py). A method given in a call
# still wins (functools.partial keywords can be overridden).
QuantileSynthesizer = functools.partial(_QuantileSynthesizer, method="stepwise")

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
                     random_state=1, return_chain=True)
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
            np.abs(kng_sample(X, y, 0.5, eps, C_X=46, check_X=Z, n_iter=1500, random_state=s).beta - exact)
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
    a = kng_sample(X, y, 0.6, 0.5, random_state=7, **kw)
    b = kng_sample(X, y, 0.6, 0.5, random_state=np.random.default_rng(7), **kw)
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
X1_ONLY = dict(variables=["X1"], bounds={"X1": (0, 1000)}, progress=False)
GRID5 = [0.1, 0.3, 0.5, 0.7, 0.9]


@pytest.fixture(scope="module")
def small():
    return kng_simulation(400, seed=21)


@pytest.mark.parametrize("method,slopes", [("stepwise", "fixed"), ("stepwise", "varying"),
                                           ("sandwich", "fixed"), ("sandwich", "varying")])
def test_no_crossing_and_bounds(small, method, slopes):
    grid = [0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.95]
    s = QuantileSynthesizer(quantiles=grid, method=method, slopes=slopes, epsilon=1.0,
                            anchors=[0.05, 0.5, 0.95], n_iter=150, random_state=1, **SIM).fit(small)
    syn = s.synthesize(2)
    for d in syn:
        Zp = np.ones((len(d), 1))
        for v in SIM["variables"]:
            B = s.coefficients_[v].to_numpy()
            P = Zp @ B.T  # predictions at every quantile for every synthetic record
            assert np.all(np.diff(P, axis=1) >= -1e-8), f"{v} crosses"
            lb, ub = SIM["bounds"][v]
            assert P.min() >= lb - 1e-8 and P.max() <= ub + 1e-8
            assert d[v].min() >= lb and d[v].max() <= ub  # released values: never outside
            Zp = np.column_stack([Zp, d[v].to_numpy()])
    if slopes == "fixed":
        B = s.coefficients_["X3"].to_numpy()
        assert np.all(B[:, 1:] == B[4, 1:])  # every quantile keeps the median's slopes


def test_quantile_budget_sums_exactly_and_paper_splits():
    bud = {"variables": [0.5, 0.25, 0.25], "median": [0.25, 0.8, 0.8],
           "anchors": [0.6, 0.8, 0.8], "anchor_median": [0.25, 0.8, 0.8]}
    anchors = [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99]
    for method in ("kng", "stepwise", "sandwich"):
        s = QuantileSynthesizer(method=method, epsilon=1.0, budget=bud, anchors=anchors, **SIM)
        led = s.quantile_budget()
        assert len(led) == 3 * 49
        assert math.isclose(s.epsilon_total, 1.0, rel_tol=0, abs_tol=1e-14)
        by_var = led.groupby("variable")["epsilon"].apply(lambda e: math.fsum(e))
        np.testing.assert_allclose(by_var[["X1", "X2", "X3"]], [0.5, 0.25, 0.25], rtol=1e-14)
    s = QuantileSynthesizer(method="stepwise", epsilon=1.0, budget=bud, **SIM)
    led = s.quantile_budget().set_index(["variable", "tau"])["epsilon"]
    assert led[("X1", 0.5)] == pytest.approx(0.125)
    assert led[("X2", 0.5)] == pytest.approx(0.2)
    assert led[("X2", 0.01)] == pytest.approx(0.05 / 48)
    s = QuantileSynthesizer(method="sandwich", epsilon=1.0, budget=bud, anchors=anchors, **SIM)
    led = s.quantile_budget().set_index(["variable", "tau"])["epsilon"]
    assert led[("X1", 0.5)] == pytest.approx(0.5 * 0.6 * 0.25)
    assert led[("X1", 0.05)] == pytest.approx(0.5 * 0.6 * 0.75 / 6)
    assert led[("X3", 0.03)] == pytest.approx(0.25 * 0.2 / 42)


def test_settings_stored_unchanged_and_validated_in_fit(small):
    # construction never validates (scikit-learn protocol): a bad setting fails in fit
    s = QuantileSynthesizer(variables="X1", method="magic", bounds={"X1": (0, 1000)})
    assert s.variables == "X1" and s.method == "magic" and s.get_params()["method"] == "magic"
    with pytest.raises(ValueError, match="method must be one of"):
        s.fit(small)
    with pytest.raises(NotFittedError):
        s.release()
    s.set_params(method="stepwise", quantiles=GRID5, progress=False, random_state=0)
    assert s.fit(small) is s and s.n_ == len(small)
    c = s.clone()
    assert c.get_params() == s.get_params() and getattr(c, "n_", None) is None


def _bad(**kw):
    return QuantileSynthesizer(**{**SIM, **kw}).quantile_budget()


def test_errors(small):
    with pytest.raises(ValueError, match="no 0.5"):
        _bad(quantiles=[0.1, 0.9], method="stepwise")
    with pytest.raises(ValueError, match="bracket"):
        _bad(method="sandwich", anchors=[0.05, 0.25, 0.5, 0.75, 0.95, 0.99])
    with pytest.raises(ValueError, match="epsilon"):
        _bad(epsilon=0)
    with pytest.raises(ValueError, match="epsilon"):
        _bad(epsilon=-1)
    for bad in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match=r"outside \(0, 1\)"):
            _bad(budget={"median": bad})
    with pytest.raises(ValueError, match="sum"):
        _bad(budget={"variables": [0.5, 0.3, 0.3]})
    with pytest.raises(ValueError, match="C_X is missing"):
        _bad(variables=["X1", "X2"], C_X=None, bounds={"X1": (0, 1), "X2": (0, 1)})
    with pytest.raises(ValueError, match="sampler"):
        _bad(sampler="gibbs")
    # public bounds are required, finite, and name the fix
    with pytest.raises(ValueError, match=r"bounds missing for \['X2'\].*bounds=\{'X2': \(lo, hi\)\}"):
        _bad(bounds={"X1": (0, 1000), "X3": (0, 2000)})
    with pytest.raises(ValueError, match="bounds missing"):
        QuantileSynthesizer(variables=["X1"], progress=False).fit(small)
    with pytest.raises(ValueError, match="finite"):
        _bad(bounds={"X1": (0, np.inf), "X2": (0, 1000), "X3": (0, 2000)})
    with pytest.raises(ValueError, match="unknown variables"):
        _bad(bounds={**SIM["bounds"], "X9": (0, 1)})
    df = kng_simulation(50, seed=1)
    df.loc[[3, 7], "X2"] = np.nan
    s = QuantileSynthesizer(quantiles=[0.25, 0.5, 0.75], n_iter=10, **SIM)
    with pytest.raises(ValueError, match=r"'X2'.*\[3, 7\]"):
        s.fit(df)
    assert not hasattr(s, "ledger_") or s.ledger_ == []  # bad input spends nothing
    # an integer column whose bounds hold no integer
    di = small.assign(X1=small["X1"].round().astype(int))
    with pytest.raises(ValueError, match="contain no integer"):
        QuantileSynthesizer(variables=["X1"], bounds={"X1": (0.2, 0.7)}, progress=False).fit(di)


def test_seeded_refits_reproducible_unseeded_differ(small):
    before = small.copy()
    kw = dict(quantiles=[0.1, 0.5, 0.9], method="sandwich", anchors=[0.1, 0.5, 0.9],
              epsilon=2.0, n_iter=60, **SIM)
    s = QuantileSynthesizer(random_state=5, **kw)
    a = s.fit(small).synthesize(2)
    coef_a = {v: c.copy() for v, c in s.coefficients_.items()}
    with pytest.warns(UserWarning, match="refitted"):
        b = s.fit(small).synthesize(2)  # a refit of the same object with the same seed
    for v in SIM["variables"]:
        pd.testing.assert_frame_equal(coef_a[v], s.coefficients_[v])
    for x, y in zip(a, b, strict=True):
        pd.testing.assert_frame_equal(x, y)
    c = QuantileSynthesizer(random_state=6, **kw).fit(small).synthesize(2)
    assert not a[0].equals(c[0])
    # unseeded: secret OS entropy, two fits differ
    u1 = QuantileSynthesizer(**kw).fit(small)
    u2 = QuantileSynthesizer(**kw).fit(small)
    assert not u1.coefficients_["X2"].equals(u2.coefficients_["X2"])
    assert u1.privacy_record().seeded is False and s.privacy_record().seeded is True
    pd.testing.assert_frame_equal(small, before)


def test_refit_accounting_and_clone(small):
    kw = dict(quantiles=GRID5, epsilon=0.7, n_iter=30, random_state=3, **SIM)
    s = QuantileSynthesizer(**kw).fit(small)
    assert len(s.ledger_) == 1 and s.epsilon_spent_ == pytest.approx(0.7, rel=1e-12)
    s.release(2)
    s.release()  # releases are post-processing: no spend
    assert len(s.ledger_) == 1
    with pytest.warns(UserWarning, match="refitted"):
        s.fit(small)
    assert len(s.ledger_) == 2 and [e["fit"] for e in s.ledger_] == [1, 2]
    assert s.epsilon_spent_ == pytest.approx(1.4, rel=1e-12)
    rec = s.privacy_record()
    assert rec.epsilon == pytest.approx(1.4, rel=1e-12) and len(rec.ledger) == 2
    assert rec.facts["fits"] == 2 and rec.facts["epsilon_per_fit"] == pytest.approx(0.7)
    assert "epsilon = 1.4" in rec.guarantee
    c = s.clone()
    assert getattr(c, "ledger_", []) == [] and c.epsilon_spent_ == 0
    c.fit(small)
    assert len(c.ledger_) == 1 and c.epsilon_spent_ == pytest.approx(0.7, rel=1e-12)
    assert len(s.ledger_) == 2  # the original account is untouched


def test_top_quantile_is_drawn(small):
    """Each record picks its quantile uniformly from the WHOLE grid (top one included)."""
    df = kng_simulation(2000, seed=4)
    s = QuantileSynthesizer(quantiles=GRID5, epsilon=50.0, random_state=8, **X1_ONLY).fit(df)
    B = s.coefficients_["X1"]["(Intercept)"].to_numpy()
    assert np.all(np.diff(B) > 0)  # distinct released quantiles: a value identifies its quantile
    rel = s.release(m=5)
    x = np.concatenate([d.data["X1"].to_numpy() for d in rel.designs])
    idx = np.searchsorted(B, x)
    assert np.array_equal(B[idx], x)  # every synthetic value is one released quantile
    counts = np.bincount(idx, minlength=B.size)
    assert counts[-1] > 0 and counts[0] > 0
    assert stats.chisquare(counts).pvalue > 1e-3, counts


def test_release_weights_and_population(small):
    from surveysynth.design import SurveyDesign

    des = SurveyDesign(small.assign(w=25.0), weights="w")
    s = QuantileSynthesizer(quantiles=GRID5, n_iter=30, random_state=2, **SIM).fit(des)
    rel = s.release()
    assert rel.m == 5 and rel.kind == "full"  # default m = 5
    for d in rel.designs:
        assert list(d.data.columns) == ["X1", "X2", "X3", "w"]
        assert d.weights.sum() == pytest.approx(25.0 * len(small), rel=1e-12)
    items = [e["item"] for e in rel.privacy.published_without_budget]
    assert any("population size" in i for i in items)
    s2 = QuantileSynthesizer(quantiles=GRID5, n_iter=30, random_state=2, population_size=12345,
                             **SIM).fit(des)
    rel2 = s2.release(2)
    assert all(d.weights.sum() == pytest.approx(12345, rel=1e-12) for d in rel2.designs)
    assert not any("population size" in e["item"] for e in rel2.privacy.published_without_budget)
    # a DataFrame is a simple random sample with weight 1
    rel3 = QuantileSynthesizer(quantiles=GRID5, n_iter=30, random_state=2, **SIM).fit(small).release(1)
    assert rel3.designs[0].weights.sum() == pytest.approx(len(small))
    assert "weight" in rel3.designs[0].data.columns
    # the record carries no seed and no confidential diagnostics
    d = rel.privacy.to_dict()
    text = repr(d)
    assert "random_state" not in text and "accept" not in text
    assert set(s.diagnostics_.columns) >= {"accept_rate", "sampler"}


def _record(df, **kw):
    return QuantileSynthesizer(**{"quantiles": GRID5, "n_iter": 30, "random_state": 1, **kw}).fit(df).privacy_record()


def test_labels_follow_what_was_done(small):
    # sound exact (intercept-only X1, exact sampler): pure epsilon-DP
    r = _record(small, **X1_ONLY)
    assert r.differentially_private and r.guarantee.startswith("pure epsilon-differential privacy")
    assert r.facts["sampler"] == "exact" and r.facts["nonprivate_start_used"] is False
    # a non-private start that never acted (the median was drawn exactly): still pure DP
    r = _record(small, init="nonprivate", **X1_ONLY)
    assert r.differentially_private and r.facts["init"] == "nonprivate"
    assert r.facts["nonprivate_start_used"] is False
    # sound MCMC: not labelled pure DP
    r = _record(small, sampler="mcmc", **X1_ONLY)
    assert not r.differentially_private and r.facts["sampler"] == "mcmc"
    assert r.guarantee.startswith("not differentially private") and not r.guarantee.startswith("pure")
    # a non-private start acting on an MCMC chain
    r = _record(small, sampler="mcmc", init="nonprivate", **X1_ONLY)
    assert r.facts["nonprivate_start_used"] is True and not r.differentially_private
    assert "non-private" in r.guarantee
    # later variables' medians are MCMC: mixed, not DP
    r = _record(small, **SIM)
    assert r.facts["sampler"] == "mixed" and not r.differentially_private
    # non-private baseline
    r = _record(small, method="nonprivate", variables=["X1", "X2"], progress=False)
    assert r.family == "none" and not r.differentially_private and r.epsilon is None


def test_paper_configuration_record_says_not_dp(small):
    paper = dict(sensitivity="paper", init="nonprivate", adapt=False, step={"X1": 0.03},
                 sampler="mcmc")
    r = _record(small, **paper, **X1_ONLY)
    assert r.guarantee.startswith("not differentially private")
    assert not r.differentially_private and "sensitivity" in r.guarantee
    # the paper's sensitivity alone, even with exact draws
    r = _record(small, sensitivity="paper", **X1_ONLY)
    assert r.guarantee.startswith("not differentially private") and r.facts["sensitivity"] == "paper"
    # and in the saved public manifest's guarantee field itself
    import json
    import tempfile

    s = QuantileSynthesizer(quantiles=GRID5, n_iter=30, random_state=1, **paper, **X1_ONLY).fit(small)
    with tempfile.TemporaryDirectory() as tmp:
        s.release(1).save(Path(tmp) / "rel")
        man = [json.loads(p.read_text()) for p in (Path(tmp) / "rel").rglob("manifest.json")]
    found = [m for m in man if "privacy" in m]
    assert found, man
    for m in found:
        assert m["privacy"]["guarantee"].startswith("not differentially private")


def test_nonprivate_uses_exact_qr(small):
    s = QuantileSynthesizer(quantiles=[0.25, 0.5, 0.75], method="nonprivate", **SIM).fit(small)
    X = np.column_stack([np.ones(len(small)), small[["X1", "X2"]]])
    ref = QuantReg(small["X3"].to_numpy(), X).fit(q=0.75).params
    np.testing.assert_allclose(s.coefficients_["X3"].loc[0.75], ref, rtol=1e-3, atol=1e-2)
    assert s.coefficients_["X1"].loc[0.5].iloc[0] == np.quantile(small["X1"], 0.5, method="inverted_cdf")


def test_api_release_bounds_and_integers():
    """R's apistrat (through rpy2): bounded, integer-valued releases of enroll and api00."""
    from surveysynth.datasets import load_api
    from surveysynth.design import SurveyDesign

    api = load_api("apistrat")
    before = api.copy()
    assert pd.api.types.is_integer_dtype(api["enroll"]) and pd.api.types.is_integer_dtype(api["api00"])
    des = SurveyDesign(api, strata="stype", weights="pw", fpc="fpc")
    bounds = {"enroll": (0, 5000), "api00": (200, 1000)}
    kw = dict(variables=["enroll", "api00"], quantiles=[0.05, 0.25, 0.5, 0.75, 0.95],
              C_X={"api00": 5000}, epsilon=1.0, n_iter=100, progress=False)
    with pytest.raises(ValueError, match=r"bounds=\{'enroll': \(lo, hi\), 'api00': \(lo, hi\)\}"):
        QuantileSynthesizer(**kw).fit(des)
    s = QuantileSynthesizer(bounds=bounds, random_state=3, population_size=6194, **kw).fit(des)
    assert s.integer_variables_ == ["enroll", "api00"]
    rel = s.release(m=4)
    for d in rel.designs:
        data = d.data
        for v, (lo, hi) in bounds.items():
            assert data[v].dtype == np.int64, v
            assert data[v].min() >= lo and data[v].max() <= hi, v
        assert d.weights.sum() == pytest.approx(6194, rel=1e-12) and "pw" in data.columns
    assert "enroll, api00" in rel.privacy.facts["integer_variables"]
    pd.testing.assert_frame_equal(api, before)
    # a bound that cuts the data: warned to the curator, values still inside the bound
    with pytest.warns(UserWarning, match="outside the declared public bounds"):
        s2 = QuantileSynthesizer(bounds={"enroll": (0, 1000), "api00": (500, 800)},
                                 random_state=3, **kw).fit(des)
    assert s2.data_outside_bounds_["enroll"] == int((api["enroll"] > 1000).sum())
    for d in s2.release(2).designs:
        assert d.data["enroll"].max() <= 1000 and d.data["api00"].between(500, 800).all()


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
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "kng_heavy_tails.md").read_text()
    assert "| Sandwich-Fixed |" in md and "pMSE WOI (paper)" in md and "952.3" in md
    assert (tmp_path / "kng_heavy_tails_x1.png").exists()
    # the pMSE-mechanism row of seed 004's Table 1, beside the paper's numbers, stated not DP
    rows = [line for line in md.splitlines() if line.startswith("| pMSE mechanism |")]
    assert any("0.0374" in r and "742.8" in r for r in rows)
    assert any("| not differentially private as run" in r for r in rows)


def test_pmse_mechanism_cart_pmse_extremes():
    # pMSE of the vignette's CART: identical data sets cannot be told apart (every propensity
    # = c = 1/2: pMSE 0); disjoint ones are separated exactly (propensities 0/1: pMSE 1/4)
    sys.path.insert(0, str(ROOT / "vignettes"))
    try:
        import kng_heavy_tails as K
    finally:
        sys.path.pop(0)
    x = np.random.default_rng(0).exponential(10, (300, 3))
    assert K._cart_pmse(x, x.copy()) == pytest.approx(0.0, abs=1e-15)
    assert K._cart_pmse(x, x + 1000.0) == pytest.approx(0.25, abs=1e-15)
    # the synthetic model of the mechanism: rates enter by absolute value, means 1 / rate
    syn = K._pmse_syn(np.array([-0.1, 4, 3, 0.1, 3, 2, 1, 0.1]), 200_000, np.random.default_rng(1))
    assert syn[:, 0].mean() == pytest.approx(10, rel=0.02)
    assert (syn[:, 1] - 3 * syn[:, 0]).mean() == pytest.approx(14, rel=0.02)
