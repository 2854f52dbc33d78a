"""Risk-weighted mixture and negative binomial synthesizers on the synthesizer protocol (real Stan).

The Stan programs compile once (about 25-75 s each on a cold cache) and are reused from
~/.cache/httpstan. Each test says which wrong version it kills.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.optimize import minimize
from scipy.special import logsumexp

from surveysynth.datasets.risk import CE_KNOWN, ce_like, nb_mixture
from surveysynth.design import SurveyDesign
from surveysynth.privacy import risk_weights
from surveysynth.synth import MixtureSynthesizer, NBSynthesizer
from surveysynth.synth.base import ConvergenceError
from surveysynth.synthetic_utility import ecdf_utility

ROOT = Path(__file__).resolve().parent.parent
NB_FAST = {"chains": 4, "draws": 500, "warmup": 300, "progress": False}
NOT_DP = "not differentially private"


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


@pytest.fixture(scope="module")
def nb_data():
    return nb_mixture(1000, seed=2024)


@pytest.fixture(scope="module")
def nb_fits(nb_data):
    """Seed 002 Section 2.4: single-NB synthesizer, unweighted and marginal, r = 20%, L = 20."""
    return {a: NBSynthesizer("y", alpha=a, known=[], r=0.2, m=20, random_state=11, **NB_FAST).fit(nb_data)
            for a in (None, "marginal")}


# --------------------------------------------------------------------------------------------
# negative binomial: numbers


def test_nb_risk_ordering_and_ecdf_utility(nb_data, nb_fits):
    """Seed 002 Fig. 5a: Data > Synthesizer > Marginal in mean risk; Table 5: U_m Synthesizer <
    Marginal. Kills: marginal weights not applied in the likelihood (risk and utility tie)."""
    unw, mar = nb_fits[None], nb_fits["marginal"]
    assert unw.convergence_["passed"] and mar.convergence_["passed"]
    ir_u, ir_m = unw.identification_risk(), mar.identification_risk()
    data_mean = ir_u.data_risk.mean()
    assert data_mean == pytest.approx(0.64, abs=0.03)
    assert data_mean > ir_u.ir.mean() > ir_m.ir.mean()
    y = nb_data["y"].to_numpy()
    u_syn = ecdf_utility(y, list(unw.synthetic_))
    u_mar = ecdf_utility(y, list(mar.synthetic_))
    assert u_syn["U_m"] < u_mar["U_m"] and u_syn["U_a"] < u_mar["U_a"]
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

    mle = np.exp(minimize(nll, [np.log(y.mean()), 1.0], method="Nelder-Mead").x)
    d = nb_fits[None].draws_
    mu_post = np.exp(np.log(y.mean()) + d["beta"][:, 0])
    assert mu_post.mean() == pytest.approx(mle[0], rel=0.02)
    assert d["phi"].mean() == pytest.approx(mle[1], rel=0.1)


def test_synthetic_sets_come_from_evenly_spaced_distinct_draws(nb_data, nb_fits):
    """Each synthetic set l is drawn from ITS posterior draw s_l (randomised PIT uniform under
    s_l's NB), the s_l are m distinct draws spaced evenly over S. Kills: all m sets drawn
    from one posterior draw; draws chosen from the start of one chain."""
    fit = nb_fits[None]
    S = fit.draws_["phi"].shape[0]
    np.testing.assert_array_equal(fit.synthesis_draws_, np.floor(np.arange(1, 21) * S / 20) - 1)
    ybar = nb_data["y"].mean()
    rng = np.random.default_rng(0)
    for ell, s in enumerate(fit.synthesis_draws_):
        mu = np.exp(np.log(ybar) + fit.draws_["beta"][s, 0])
        phi = fit.draws_["phi"][s]
        ys = fit.synthetic_[ell]
        cdf = stats.nbinom.cdf(ys, phi, phi / (phi + mu))
        below = stats.nbinom.cdf(ys - 1, phi, phi / (phi + mu))
        pit = below + rng.random(ys.size) * (cdf - below)
        assert stats.kstest(pit, "uniform").pvalue > 1e-4


def test_each_set_follows_its_own_draw_when_draws_differ(nb_data, nb_fits):
    """The PIT test above has little power when the posterior is tight (every draw predicts
    nearly the same outcomes). Here the retained draws are made far apart on purpose (a copy
    of the fit whose intercept draws climb by log 2 every quarter of S), and m = 4 new sets are
    drawn: set l's mean must follow ITS draw's intercept, doubling from set to set. Kills: all
    m sets drawn from one posterior draw (equal means), draws in reverse order."""
    import copy

    fit = copy.deepcopy(nb_fits[None])
    S = fit.draws_["phi"].shape[0]
    fit.draws_.draws["beta"][:, 0] = np.log(2.0) * 4 * (np.arange(S) + 1) / S
    sets = fit.synthesize(4)
    np.testing.assert_array_equal(fit.synthesis_draws_, np.floor(np.arange(1, 5) * S / 4) - 1)
    steps = np.diff(np.log(sets.mean(axis=1)))
    np.testing.assert_allclose(steps, np.log(2.0), atol=0.25)


def test_nb_caller_alpha_label_bound_and_ledger(nb_data):
    """Caller-supplied alpha: log_lik = scipy's NB log pmf at the draws, Delta_alpha = max
    |alpha log p| over all S draws, family pseudo_posterior with alpha_source "caller", labelled
    NOT differentially private, epsilon = 2 Delta m; releases spend only new draws.
    Kills: caller alpha labelled DP or with the identification-risk family; Delta from alpha = 1;
    a re-release of the same draws spending again."""
    rng = np.random.default_rng(0)
    alpha = rng.uniform(0.3, 1.0, len(nb_data))
    alpha_before = alpha.copy()
    syn = NBSynthesizer("y", alpha=alpha, m=3, random_state=5, chains=4, draws=200, warmup=200,
                        progress=False)
    assert syn.fit(nb_data) is syn
    np.testing.assert_array_equal(alpha, alpha_before)
    assert syn.alpha_kind_ == "caller" and syn.log_lik_.shape == (800, 1000)
    y = nb_data["y"].to_numpy()
    s = np.array([0, 377, 799])
    mu = np.exp(np.log(y.mean()) + syn.draws_["beta"][s, 0])[:, None]
    phi = syn.draws_["phi"][s].reshape(-1)[:, None]
    np.testing.assert_allclose(syn.log_lik_[s], stats.nbinom.logpmf(y[None, :], phi, phi / (phi + mu)), rtol=1e-8)
    assert syn.delta_alpha_ == pytest.approx(np.max(np.abs(alpha * syn.log_lik_)))
    assert syn.delta_alpha_ < np.max(np.abs(syn.log_lik_))
    rel = syn.release()
    rec = rel.privacy
    assert rec.family == "pseudo_posterior" and rec.facts["alpha_source"] == "caller"
    assert rec.differentially_private is False and rec.guarantee.startswith(NOT_DP)
    assert rec.facts["draws"] == 800 and rec.delta_alpha == pytest.approx(syn.delta_alpha_)
    assert rec.epsilon == pytest.approx(2 * syn.delta_alpha_ * 3)
    assert syn.epsilon_spent_ == pytest.approx(2 * syn.delta_alpha_ * 3)
    syn.release()  # the same three draws again: post-processing, no new spend
    assert syn.epsilon_spent_ == pytest.approx(2 * syn.delta_alpha_ * 3)
    rel5 = syn.release(m=5)
    new = len(set(np.floor(np.arange(1, 6) * 800 / 5) - 1) - set(np.floor(np.arange(1, 4) * 800 / 3) - 1))
    assert syn.epsilon_spent_ == pytest.approx(2 * syn.delta_alpha_ * (3 + new))
    # the public record states the account (both releases), not one release's 2 Delta m
    assert rel5.privacy.epsilon == pytest.approx(syn.epsilon_spent_)


def test_labels_for_computed_and_no_alpha(nb_fits):
    """Computed alpha -> identification_risk with the weights kind, r and known; alpha=None ->
    family none. Neither claims DP, neither carries a per-record value."""
    rec = nb_fits["marginal"].privacy_record()
    assert rec.family == "identification_risk" and not rec.differentially_private
    assert rec.facts["weights"] == "marginal" and rec.facts["r"] == 0.2
    assert rec.facts["known"] == "(none: one pattern)" and rec.epsilon is None
    assert "marginal weights" in rec.guarantee and rec.guarantee.startswith(NOT_DP)
    none = nb_fits[None].privacy_record()
    assert none.family == "none" and none.guarantee.startswith(NOT_DP) and none.epsilon is None
    assert rec.m == 20 and rec.seeded


# --------------------------------------------------------------------------------------------
# the protocol


def test_protocol_clone_set_params_refit_ledger(nb_data):
    """clone / set_params / fit returns self / refit accounting in ledger_."""
    syn = NBSynthesizer("y", alpha="marginal", known=[], r=0.2, m=2, random_state=1, **NB_FAST)
    params = syn.get_params()
    c = syn.clone()
    assert type(c) is NBSynthesizer and c.get_params() == params and not hasattr(c, "n_")
    with pytest.raises(ValueError, match="unknown setting"):
        syn.set_params(weights="marginal")
    assert syn.set_params(r=0.25) is syn and syn.r == 0.25
    assert syn.fit(nb_data) is syn and syn.fits_ == 1 and syn.r_ == 0.25
    syn.release()
    assert [e["fit"] for e in syn.ledger_] == [1]
    with pytest.warns(UserWarning, match="refitted"):
        syn.fit(nb_data)
    syn.release()
    assert [e["fit"] for e in syn.ledger_] == [1, 2] and syn.fits_ == 2
    assert all(e["family"] == "identification_risk" for e in syn.ledger_)
    fresh = syn.clone()
    assert not hasattr(fresh, "ledger_") and fresh.epsilon_spent_ == 0.0
    with pytest.raises(ValueError, match="not fitted"):
        fresh.release()


def test_seeded_reproducible_unseeded_different(nb_data):
    """Same seed: the same release bit for bit; random_state=None: secret entropy, different
    output and a record that says it is not reproducible. Kills: a fixed internal seed."""
    a = NBSynthesizer("y", m=2, random_state=7, **NB_FAST).fit(nb_data).release()
    b = NBSynthesizer("y", m=2, random_state=7, **NB_FAST).fit(nb_data).release()
    for da, db in zip(a.designs, b.designs, strict=True):
        pd.testing.assert_frame_equal(da.data, db.data)
    u1 = NBSynthesizer("y", m=2, **NB_FAST).fit(nb_data)
    u2 = NBSynthesizer("y", m=2, **NB_FAST).fit(nb_data)
    assert not np.array_equal(u1.synthetic_, u2.synthetic_)
    assert a.privacy.seeded and not u1.privacy_record().seeded
    assert "not reproducible" in u1.privacy_record().reproducibility


def test_unconverged_fit_stops_release_unless_allowed(nb_data):
    """draws=20: the gates fail; release raises ConvergenceError naming the parameters and the
    fix; with allow_unconverged=True it releases and the public record says so."""
    syn = NBSynthesizer("y", m=2, chains=2, draws=20, warmup=20, random_state=3, progress=False)
    _quiet(syn.fit, nb_data)
    assert not syn.convergence_["passed"]
    with pytest.raises(ConvergenceError, match=r"bulk ESS .* for \[.*'lp__'.*warmup="):
        syn.release()
    syn.set_params(allow_unconverged=True)
    with pytest.warns(UserWarning, match="allow_unconverged=True"):
        rel = syn.release()
    assert rel.privacy.convergence_override is True
    assert "convergence checks failed" in rel.privacy.guarantee


def test_released_weights_population_and_order(nb_data):
    """Released weights (issue 36, D5): the collected ones rescaled to the public population
    size, with the strata as collected and log(weight) in the model (unequal weights); rows in
    random order; without population_size the manifest lists N. (Before issue 36: equal N/n.)"""
    df = nb_data.assign(w=np.random.default_rng(2).uniform(1, 9, len(nb_data)), g=np.arange(len(nb_data)) % 3)
    design = SurveyDesign(df, weights="w", strata="g")
    syn = NBSynthesizer("y", known=["g"], m=2, population_size=50_000, random_state=4, **NB_FAST).fit(design)
    assert syn.x_names_ == ["(Intercept)", "log(weight)"]
    rel = syn.release()
    perm = rel.confidential["_row_permutations"]
    for d, p in zip(rel.designs, perm, strict=True):
        w = d.data["w"].to_numpy()
        np.testing.assert_allclose(w, df["w"].to_numpy()[p] * 50_000 / df["w"].sum(), rtol=1e-12)
        assert w.sum() == pytest.approx(50_000) and d.strata_vars == ["g"]
        assert list(d.data.columns) == ["y", "g", "w"]
        assert not np.array_equal(d.data["g"].to_numpy(), df["g"].to_numpy())  # shuffled
        assert sorted(d.data["g"]) == sorted(df["g"])
    # a public N: not declared; the only item is the columns released as collected (the known
    # column, which is also the stratum, and the weights), not the outcome
    items = [e["item"] for e in rel.privacy.published_without_budget]
    assert len(items) == 1 and "released as collected (not synthesized): ['g', 'w']" in items[0]
    assert not any("population size" in i for i in items)
    syn2 = NBSynthesizer("y", m=2, random_state=4, **NB_FAST).fit(design)
    rel2 = syn2.release()
    assert rel2.designs[0].data["w"].sum() == pytest.approx(df["w"].sum())
    assert any("population size" in e["item"] for e in rel2.privacy.published_without_budget)
    with pytest.raises(ValueError, match="'w' is the design's sampling weight"):
        NBSynthesizer("y", release_columns=["w"], **NB_FAST).fit(design)


# --------------------------------------------------------------------------------------------
# mixture


@pytest.fixture(scope="module")
def ce_small():
    return ce_like(400, seed=8)


# short chains for tests that are not about convergence: gates relaxed explicitly
MIX = {"K": 3, "transform": "log", "shift": 10_000.0, "categorical": ["earner"], "chains": 2,
       "draws": 150, "warmup": 150, "progress": False, "convergence": {"rhat": 1.2, "ess_bulk": 20}}


def _x_independent(df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Design matrix built here independently: intercept, age dummies (first level dropped),
    earner dummy, standardised education."""
    age = pd.get_dummies(df["age"], drop_first=True, dtype=float)
    earner = pd.get_dummies(df["earner"].astype("category"), drop_first=True, dtype=float)
    ed = df["education"].to_numpy(dtype=float)
    X = np.column_stack([np.ones(len(df)), age.to_numpy(), earner.to_numpy(), (ed - ed.mean()) / ed.std()])
    return X, ["(Intercept)", *[f"age{c}" for c in age.columns], "earner2", "education"]


@pytest.fixture(scope="module")
def mix_fit(ce_small):
    syn = MixtureSynthesizer("income", ["age", "earner", "education"], alpha="pairwise", known=CE_KNOWN,
                             r=0.2, on_singleton="marginal", log_lik=True, m=4, random_state=21, **MIX)
    return _quiet(syn.fit, ce_small)


def test_mixture_log_lik_matches_scipy(ce_small, mix_fit):
    """Per-record log likelihood (generated quantities) = log sum_k theta_k N(log(y + shift);
    loc + sd x'beta_k, sd sigma_k), each component with ITS sigma_k, computed here with scipy."""
    t = np.log(ce_small["income"].to_numpy() + 10_000.0)
    loc, sd = t.mean(), t.std()
    X, names = _x_independent(ce_small)
    assert mix_fit.x_names_ == names
    for s in (0, 100, 299):
        th, be, si = (mix_fit.draws_[k][s] for k in ("theta", "beta", "sigma"))
        comp = stats.norm.logpdf(t[:, None], loc + sd * (X @ be), sd * si[None, :]) + np.log(th)[None, :]
        np.testing.assert_allclose(mix_fit.log_lik_[s], logsumexp(comp, axis=1), rtol=1e-8, atol=1e-10)


def test_mixture_model_block_density_matches_scipy(ce_small):
    """The density Stan samples from (model block, via pystan's log_prob) equals, up to a constant,
    sum_i alpha_i log sum_k theta_k N(z_i; x_i'beta_k, sigma_k) + the stated priors, at random
    parameter points. Kills: one component's sigma for every component in the model block;
    alpha not applied; a wrong prior."""
    import stan

    from surveysynth.synth._stan import load_program

    X, _ = _x_independent(ce_small)
    t = np.log(ce_small["income"].to_numpy() + 10_000.0)
    z = (t - t.mean()) / t.std()
    alpha = risk_weights(ce_small, CE_KNOWN, "income", 0.2, kind="marginal")
    N, P, K = X.shape[0], X.shape[1], 3
    data = {"N": N, "P": P, "K": K, "X": X, "z": z, "alpha": alpha, "gamma": 1.0, "beta_scale": 1.0,
            "sigma_scale": 0.5, "log_jacobian": 0.0, "save_log_lik": 0}
    post = _quiet(stan.build, load_program("mixture"), data=data, random_seed=1)
    rng = np.random.default_rng(3)
    diffs = []
    for _ in range(4):
        u = rng.normal(0, 0.7, (K - 1) + P * K + K).tolist()
        flat = np.asarray(post.constrain_pars(u, include_tparams=True, include_gqs=False))
        theta = flat[:K]
        beta = flat[2 * K + P * K: 2 * K + 2 * P * K].reshape((P, K), order="F")  # transformed beta
        sigma = flat[K + P * K: K + P * K + K]
        assert np.ptp(sigma) > 0.2  # the components' sigmas differ at these points
        comp = stats.norm.logpdf(z[:, None], X @ beta, sigma[None, :]) + np.log(theta)[None, :]
        ref = (alpha * logsumexp(comp, axis=1)).sum()
        ref += stats.dirichlet.logpdf(theta, np.full(K, 1.0 / K))
        ref += stats.norm.logpdf(beta, 0, 1.0).sum() + stats.halfnorm.logpdf(sigma, scale=0.5).sum()
        diffs.append(post.log_prob(u, adjust_transform=False) - ref)
    assert np.ptp(diffs) < 1e-6, diffs


def test_mixture_synthesis_uses_each_components_sigma():
    """Synthetic values of set l follow the mixture of ITS posterior draw, each record drawn with
    its component's sigma_k: the PIT under the draw's mixture is uniform (KS). Data with two
    well-separated components of very different spread (sd 0.1 and 0.6 on the log scale; with
    less separated ones the KS test had no power against the mutant: checked).
    Kills: one component's sigma used for every component in the synthesis."""
    rng = np.random.default_rng(4)
    n = 800
    g = rng.choice(["a", "b"], n)
    comp = rng.random(n) < 0.5
    logy = np.where(comp, 9.5, 11.5) + 0.5 * (g == "b") + rng.normal(0, np.where(comp, 0.1, 0.6))
    df = pd.DataFrame({"g": g, "y": np.exp(logy)})
    syn = MixtureSynthesizer("y", ["g"], K=2, chains=2, draws=150, warmup=200, m=5, random_state=2,
                             progress=False, convergence={"rhat": 1.2, "ess_bulk": 20})
    _quiet(syn.fit, df)
    X = np.column_stack([np.ones(n), (g == "b").astype(float)])
    loc, sd = logy.mean(), logy.std()
    for ell, s in enumerate(syn.synthesis_draws_):
        th, be, si = (syn.draws_[k][s] for k in ("theta", "beta", "sigma"))
        used = th > 0.05
        assert si[used].max() / si[used].min() > 2.5  # the draw's live components differ in spread
        zs = (np.log(syn.synthetic_[ell]) - loc) / sd
        pit = (th[None, :] * stats.norm.cdf((zs[:, None] - X @ be) / si[None, :])).sum(axis=1)
        assert stats.kstest(pit, "uniform").pvalue > 1e-4, ell
    assert syn.release().privacy.family == "none"


def test_mixture_release_and_confidentiality(ce_small, mix_fit, tmp_path):
    before = ce_small.copy(deep=True)
    np.testing.assert_array_equal(
        mix_fit.alpha_, risk_weights(ce_small, CE_KNOWN, "income", 0.2, kind="pairwise", on_singleton="marginal"))
    rel = mix_fit.release()
    assert rel.kind == "partial" and rel.m == 4
    rec = rel.privacy
    assert rec.family == "identification_risk" and rec.epsilon is None
    assert rec.facts["weights"] == "pairwise" and rec.facts["known"] == "gender, age, region"
    cols = list(rel.designs[0].data.columns)
    assert cols == ["gender", "age", "education", "region", "earner", "income", "weight"]
    orig = set(ce_small["income"].round(6))
    for d in rel.designs:
        assert not orig.intersection(np.round(d.data["income"].to_numpy(), 6))
        assert d.weights.sum() == pytest.approx(400.0)
    conf = mix_fit.confidential_summary()
    irs = conf["identification_risk_summary"]
    assert irs.loc["synthetic", "mean"] == pytest.approx(mix_fit.identification_risk().ir.mean())
    assert set(conf) >= {"fit_summary", "alpha_quantiles", "mcmc_diagnostics", "convergence"}
    gated = conf["mcmc_diagnostics"].query("gated").index.tolist()
    assert "lp__" in gated and "mean_z" in gated and not any(g.startswith("theta") for g in gated)
    path = rel.save(tmp_path / "rel")
    text = "".join(p.read_text() for p in (path / "public").glob("*.json"))
    alpha_strs = {f"{a:.6f}" for a in mix_fit.alpha_[:50]} - {"1.000000", "0.000000"}
    assert not any(s in text for s in alpha_strs)
    assert f"{irs.loc['synthetic', 'mean']:.6f}"[:7] not in text
    assert not set(json.loads((path / "public" / "manifest.json").read_text())) & {"identification_risk"}
    est = rel.mean("income")
    assert np.isfinite(est["estimate"].iloc[0]) and est["se"].iloc[0] > 0
    pd.testing.assert_frame_equal(ce_small, before)


def test_mixture_lipschitz_caller_alpha():
    """Lipschitz weights from an unweighted fit plug in as caller alpha; the bound is
    lipschitz_bound of the weighted fit's log_lik, the label pseudo_posterior / caller / not DP."""
    from surveysynth.privacy.lipschitz import lipschitz_bound, lipschitz_weights

    rng = np.random.default_rng(5)
    n = 300
    g = rng.choice(["a", "b"], n)
    df = pd.DataFrame({"g": g, "y": np.exp(10 + 0.8 * (g == "b") + rng.normal(0, 0.5, n))})
    kw = {"K": 2, "chains": 2, "draws": 100, "warmup": 150, "log_lik": True, "progress": False, "m": 5,
          "random_state": 1, "convergence": {"rhat": 1.2, "ess_bulk": 20}}
    unw = _quiet(MixtureSynthesizer("y", ["g"], **kw).fit, df)
    alpha = lipschitz_weights(unw.log_lik_, c=1.0, g=0.2)
    w = _quiet(MixtureSynthesizer("y", ["g"], alpha=alpha, **kw).fit, df)
    assert w.delta_alpha_ == pytest.approx(lipschitz_bound(w.log_lik_, alpha))
    rec = w.release().privacy
    assert rec.family == "pseudo_posterior" and rec.facts["alpha_source"] == "caller"
    assert not rec.differentially_private and rec.epsilon == pytest.approx(2 * 5 * w.delta_alpha_)


def test_errors():
    d = ce_like(200, seed=1)
    d.loc[7, "income"] = -500.0  # a loss
    MixtureSynthesizer("income", transform="sqrt")  # settings are stored unchecked ...
    with pytest.raises(ValueError, match="transform must be"):
        MixtureSynthesizer("income", transform="sqrt").fit(d)  # ... and validated by fit
    with pytest.raises(ValueError, match=r"values <= 0 \(rows \[7\].*shift=10000"):
        MixtureSynthesizer("income", ["age"], progress=False).fit(d)
    with pytest.raises(ValueError, match=r"values <= -100 \(rows \[7\]"):
        MixtureSynthesizer("income", ["age"], shift=100.0, progress=False).fit(d)
    with pytest.raises(ValueError, match="non-negative integer counts"):
        NBSynthesizer("income", progress=False).fit(d)
    with pytest.raises(ValueError, match=r"shape \(200,\)"):
        NBSynthesizer("education", alpha=np.ones(5)).fit(d)
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        NBSynthesizer("education", alpha=np.full(200, 1.5)).fit(d)
    with pytest.raises(ValueError, match="needs the ball radius r"):
        NBSynthesizer("education", alpha="marginal", known=CE_KNOWN).fit(d)
    with pytest.raises(ValueError, match=r"alpha='risk'"):
        NBSynthesizer("education", alpha="risk", r=0.2).fit(d)
    with pytest.raises(ValueError, match=r"known-pattern variable\(s\) \['zip'\]"):
        NBSynthesizer("education", alpha="marginal", known=["zip"], r=0.2).fit(d)
    with pytest.raises(ValueError, match=r"predictor column\(s\) \['nope'\]"):
        NBSynthesizer("education", ["nope"]).fit(d)
    with pytest.raises(ValueError, match=r"r=-1 is not valid.*r must be None or a number > 0"):
        NBSynthesizer("education", alpha="marginal", known=CE_KNOWN, r=-1).fit(d)
    with pytest.raises(ValueError, match="m=0"):
        NBSynthesizer("education", m=0).fit(d)
    with pytest.raises(ValueError, match="alpha_shift must be a finite number"):
        NBSynthesizer("education", alpha_shift=np.nan).fit(d)
    with pytest.raises(ValueError, match="population_size"):
        NBSynthesizer("education", population_size=-5, **NB_FAST).fit(d)


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
    for word in ("Synthesizer", "Marginal", "Pairwise", "U_m", "whack-a-mole", "convergence"):
        assert word in md
