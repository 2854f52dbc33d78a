"""Risk-weighted mixture and negative binomial synthesizers (real Stan, small runs).

The Stan programs compile once (about 25-75 s each on a cold cache) and are reused from
~/.cache/httpstan; fits with a fixed seed are cached by httpstan too, so the same seed gives the
same draws.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import logsumexp

from surveysynth.datasets.risk import CE_KNOWN, ce_like, nb_mixture
from surveysynth.privacy import GUARANTEES, risk_weights
from surveysynth.synth import MixtureSynthesizer, NBSynthesizer
from surveysynth.synthetic_utility import ecdf_utility

ROOT = Path(__file__).resolve().parent.parent
FAST = {"chains": 2, "draws": 300, "warmup": 300, "progress": False}


@pytest.fixture(scope="module")
def nb_data():
    return nb_mixture(1000, seed=2024)


@pytest.fixture(scope="module")
def nb_fits(nb_data):
    """Seed 002 Section 2.4: single-NB synthesizer, unweighted and marginal, r = 20%, L = 20."""
    out = {}
    for w in (None, "marginal"):
        syn = NBSynthesizer("y", **FAST)
        out[w] = syn.fit(nb_data, weights=w, known=[], r=0.2, seed=11, m=20)
    return out


def test_nb_risk_ordering_and_ecdf_utility(nb_data, nb_fits):
    """Seed 002 Fig. 5a: Data > Synthesizer > Marginal in mean risk; Table 5: U_m Synthesizer <
    Marginal."""
    unw, mar = nb_fits[None], nb_fits["marginal"]
    ir_u, ir_m = unw.identification_risk(), mar.identification_risk()
    data_mean = ir_u.data_risk.mean()
    assert data_mean == pytest.approx(0.64, abs=0.03)
    assert data_mean > ir_u.ir.mean() > ir_m.ir.mean()
    y = nb_data["y"].to_numpy()
    u_syn = ecdf_utility(y, list(unw.synthetic_))
    u_mar = ecdf_utility(y, list(mar.synthetic_))
    assert u_syn["U_m"] < u_mar["U_m"]
    assert u_syn["U_a"] < u_mar["U_a"]
    # marginal weights are what risk_weights gives, and they shrink the fit (larger phi)
    np.testing.assert_array_equal(mar.alpha_, risk_weights(nb_data, [], "y", 0.2))
    assert mar.draws_["phi"].mean() > unw.draws_["phi"].mean()
    assert unw.synthetic_.shape == (20, 1000)
    assert np.all(unw.synthetic_ == np.round(unw.synthetic_)) and unw.synthetic_.min() >= 0


def test_nb_posterior_matches_independent_fit(nb_data, nb_fits):
    """Unweighted NB posterior mean vs scipy's maximum likelihood (flat-ish priors, n = 1000)."""
    y = nb_data["y"].to_numpy()

    def nll(par):
        mu, phi = np.exp(par)
        return -stats.nbinom.logpmf(y, phi, phi / (phi + mu)).sum()

    from scipy.optimize import minimize

    mle = np.exp(minimize(nll, [np.log(y.mean()), 1.0], method="Nelder-Mead").x)
    d = nb_fits[None].draws_
    mu_post = np.exp(np.log(y.mean()) + d["beta"][:, 0])
    assert mu_post.mean() == pytest.approx(mle[0], rel=0.02)
    assert d["phi"].mean() == pytest.approx(mle[1], rel=0.1)


def test_nb_custom_weights_log_lik_and_delta(nb_data):
    """An alpha array from anywhere: log_lik equals scipy's NB log pmf at the draws, Delta_alpha is
    max |alpha log p|, and the release is labelled pseudo_posterior with eps = 2 Delta m."""
    rng = np.random.default_rng(0)
    alpha = rng.uniform(0.3, 1.0, len(nb_data))
    syn = NBSynthesizer("y", chains=2, draws=100, warmup=200, progress=False)
    fit = syn.fit(nb_data, weights=alpha, seed=5, m=3)
    assert fit.weights_kind_ == "custom" and fit.log_lik_.shape == (200, 1000)
    y = nb_data["y"].to_numpy()
    s = np.array([0, 77, 199])
    mu = np.exp(np.log(y.mean()) + fit.draws_["beta"][s, 0])[:, None]
    phi = fit.draws_["phi"][s].reshape(-1)[:, None]
    np.testing.assert_allclose(fit.log_lik_[s], stats.nbinom.logpmf(y[None, :], phi, phi / (phi + mu)), rtol=1e-8)
    assert fit.delta_alpha_ == pytest.approx(np.max(np.abs(alpha * fit.log_lik_)))
    priv = fit.privacy()
    assert priv["guarantee"] == "pseudo_posterior"
    assert priv["epsilon"] == pytest.approx(2 * fit.delta_alpha_ * 3)


@pytest.fixture(scope="module")
def ce_small():
    return ce_like(400, seed=8)


MIX = {"K": 3, "transform": "log", "shift": 10_000.0, "categorical": ["earner"], "chains": 2, "draws": 100, "warmup": 150, "progress": False}


@pytest.fixture(scope="module")
def mix_fit(ce_small):
    syn = MixtureSynthesizer("income", ["age", "earner", "education"], log_lik=True, **MIX)
    return syn.fit(ce_small, weights="pairwise", known=CE_KNOWN, r=0.2, seed=21, m=4, on_singleton="marginal")


def test_mixture_log_lik_matches_scipy(ce_small, mix_fit):
    """Per-record log likelihood (generated quantities) = log sum_k theta_k N(log(y + shift); ...)
    computed independently on the transformed, unstandardised scale."""
    t = np.log(ce_small["income"].to_numpy() + 10_000.0)
    loc, sd = t.mean(), t.std()
    X, _ = mix_fit.synthesizer._design_matrix(ce_small)
    assert X.shape == (400, 1 + 4 + 1 + 1)
    for s in (0, 100, 199):
        th, be, si = (mix_fit.draws_[k][s] for k in ("theta", "beta", "sigma"))
        comp = stats.norm.logpdf(t[:, None], loc + sd * (X @ be), sd * si[None, :]) + np.log(th)[None, :]
        np.testing.assert_allclose(mix_fit.log_lik_[s], logsumexp(comp, axis=1), rtol=1e-8, atol=1e-10)


def test_mixture_fit_release_and_confidentiality(ce_small, mix_fit, tmp_path):
    from surveysynth.release import load_release

    before = ce_small.copy(deep=True)
    np.testing.assert_array_equal(mix_fit.alpha_, risk_weights(ce_small, CE_KNOWN, "income", 0.2, kind="pairwise", on_singleton="marginal"))
    assert mix_fit.synthetic_.shape == (4, 400)
    rel = mix_fit.release()
    assert rel.kind == "partial" and rel.m == 4
    assert rel.privacy["guarantee"] == "identification_risk"
    assert rel.privacy["epsilon"] is None
    cols = list(rel.designs[0].data.columns)
    assert cols == ["gender", "age", "education", "region", "earner", "income"]  # original column order
    orig = set(ce_small["income"].round(6))
    for d in rel.designs:
        syn_income = d.data["income"].to_numpy()
        # synthetic draws from a continuous model: no released value equals a confidential one
        assert not orig.intersection(np.round(syn_income, 6))
        np.testing.assert_allclose(d.weights, 1.0)
    path = rel.save(tmp_path / "rel")
    text = json.dumps(json.loads((path / "manifest.json").read_text()))
    assert GUARANTEES["identification_risk"] in text
    alpha_strs = {f"{a:.6f}" for a in mix_fit.alpha_[:50]}
    assert not any(s in text for s in alpha_strs if s not in ("1.000000", "0.000000"))
    back = load_release(path)
    stored = pd.concat([d.data for d in back.designs])
    assert "income" in stored and not orig.intersection(stored["income"].round(6))
    assert set(stored.columns) == set(cols) | set(stored.columns.difference(cols))
    assert not set(stored.columns) & {"marital", "urban", "cbsa", "family_size", "urban_type"}
    est = rel.mean("income")
    assert np.isfinite(est["estimate"].iloc[0]) and est["se"].iloc[0] > 0
    pd.testing.assert_frame_equal(ce_small, before)


def test_mixture_same_seed_same_output(ce_small, mix_fit):
    syn = MixtureSynthesizer("income", ["age", "earner", "education"], log_lik=True, **MIX)
    again = syn.fit(ce_small, weights="pairwise", known=CE_KNOWN, r=0.2, seed=21, m=4, on_singleton="marginal")
    np.testing.assert_array_equal(again.synthetic_, mix_fit.synthetic_)
    other = syn.fit(ce_small, weights="pairwise", known=CE_KNOWN, r=0.2, seed=22, m=4, on_singleton="marginal")
    assert not np.array_equal(other.synthetic_, mix_fit.synthetic_)


def test_mixture_recovers_a_known_mixture():
    """Unweighted fit of data simulated from the model itself: the synthetic distribution matches
    the data (ECDF U_m at the scale of two independent samples) and group means are kept."""
    rng = np.random.default_rng(4)
    n = 500
    g = rng.choice(["a", "b"], n)
    comp = rng.random(n) < 0.7
    logy = np.where(comp, 10.0, 11.5) + 0.8 * (g == "b") + rng.normal(0, np.where(comp, 0.3, 0.6))
    df = pd.DataFrame({"g": g, "y": np.exp(logy)})
    syn = MixtureSynthesizer("y", ["g"], K=2, chains=2, draws=100, warmup=150, log_lik=True, progress=False)
    fit = syn.fit(df, seed=1, m=5)
    assert fit.release().privacy["guarantee"] == "none"
    # Lipschitz weights (METHODS 6) from this unweighted fit plug straight in
    from surveysynth.privacy.lipschitz import lipschitz_bound, lipschitz_weights

    alpha = lipschitz_weights(fit.log_lik_, c=1.0, g=0.2)
    wfit = syn.fit(df, weights=alpha, seed=1, m=5)
    assert wfit.delta_alpha_ == pytest.approx(lipschitz_bound(wfit.log_lik_, alpha))
    priv = wfit.release().privacy
    assert priv["guarantee"] == "pseudo_posterior" and priv["epsilon"] == pytest.approx(2 * 5 * wfit.delta_alpha_)
    u = ecdf_utility(np.log(df["y"]), [np.log(s) for s in fit.synthetic_])
    fresh = np.where(rng.random(n) < 0.7, 10.0, 11.5) + 0.8 * (g == "b") + rng.normal(0, np.where(rng.random(n) < 0.7, 0.3, 0.6))
    u_ref = ecdf_utility(logy, [fresh])  # sampling noise of the measure between two samples
    assert u["U_m"] < 3 * u_ref["U_m"] + 0.02
    for lev in ("a", "b"):
        m_syn = np.mean([np.log(s[g == lev]).mean() for s in fit.synthetic_])
        assert m_syn == pytest.approx(logy[g == lev].mean(), abs=0.1)


def test_errors():
    d = ce_like(200, seed=1)
    d.loc[7, "income"] = -500.0  # a loss
    with pytest.raises(ValueError, match=r"values <= 0 \(rows \[7\].*shift=10000"):
        MixtureSynthesizer("income", ["age"], progress=False).fit(d)
    with pytest.raises(ValueError, match="non-negative integer counts"):
        NBSynthesizer("income", progress=False).fit(d)
    with pytest.raises(ValueError, match=r"shape \(200,\)"):
        NBSynthesizer("education", progress=False).fit(d, weights=np.ones(5))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        NBSynthesizer("education", progress=False).fit(d, weights=np.full(200, 1.5))
    with pytest.raises(ValueError, match="needs the ball radius r"):
        NBSynthesizer("education", progress=False).fit(d, weights="marginal", known=CE_KNOWN)
    with pytest.raises(ValueError, match=r"known-pattern variable\(s\) \['zip'\]"):
        NBSynthesizer("education", progress=False).fit(d, weights="marginal", known=["zip"], r=0.2)
    with pytest.raises(ValueError, match=r"predictor column\(s\) \['nope'\]"):
        NBSynthesizer("education", ["nope"], progress=False).fit(d)
    with pytest.raises(ValueError, match="r must be a positive"):
        NBSynthesizer("education", progress=False).fit(d, weights="marginal", known=CE_KNOWN, r=-1)
    with pytest.raises(ValueError, match=r"values <= -100 \(rows \[7\]"):
        MixtureSynthesizer("income", ["age"], shift=100.0, progress=False).fit(d)
    with pytest.raises(ValueError, match="transform must be"):
        MixtureSynthesizer("income", transform="sqrt")


def test_vignette_fast(tmp_path):
    out = tmp_path / "vig"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "vignettes" / "identification_risk.py"), "--fast", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (out / "identification_risk.md").read_text()
    for png in ("risk_violins.png", "whack_a_mole_marginal.png", "whack_a_mole_pairwise.png"):
        assert (out / png).stat().st_size > 5000
        assert png in md
    for word in ("Synthesizer", "Marginal", "Pairwise", "U_m", "whack-a-mole"):
        assert word in md
