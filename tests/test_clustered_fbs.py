"""FBS and FBP on clustered designs (issue 36, D1-D5; docs/clustered_synthesis.md).

On R's apiclus1 (one-stage cluster sample of 15 districts, constant weights, fpc) and apiclus2
(two stages, 40 districts, weights constant within districts, fpc at both stages):

* the synthetic designs carry the confidential design's ids, strata and fpc as collected, and
  weights constant within PSUs (D2, D5);
* the combined SE of mean api00 (partial rule) is at least 0.8 x the confidential design's SE
  computed by R survey live, and the combined mean is within 2 combined SEs of the confidential
  weighted mean (D3);
* the per-record bounds are the conditional densities given u_j: numpy equals the Stan
  programs' generated log_lik, and the (cell x PSU) sufficient statistics give exactly the
  record sum (D4);
* mutants kept in the tests: synthesis from the posterior u_j (instead of fresh draws) makes the
  synthetic PSU means track the confidential ones; synthesis without the random effect fails
  the SE ratio.

Short chains (2 x 300): the release gates are lowered explicitly, as in test_pseudo_posterior.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import surveysynth as ss
from surveysynth.synth import FBP, FBS
from surveysynth.synth._stan import load_program  # noqa: PLC2701

pytestmark = pytest.mark.filterwarnings("ignore::surveysynth.synth._stan.ConvergenceWarning")

FAST = dict(chains=2, draws=300, warmup=300, progress=False, g=1.0, m=5,
            convergence={"ess_bulk": 50, "rhat": 1.1, "divergent_share": 0.02})

R_DESIGN = {
    "apiclus1": "svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1)",
    "apiclus2": "svydesign(id=~dnum+snum, weights=~pw, fpc=~fpc1+fpc2, data=apiclus2)",
}


def _design(api, name: str) -> ss.SurveyDesign:
    if name == "apiclus1":
        return ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    return ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", weights="pw", fpc="~fpc1+fpc2")


def _prepared(syn, design) -> dict:
    """What fit() would model, without a fit (the synthesizer's internal preparation)."""
    syn._cfg_ = syn._validate()  # noqa: SLF001 - the internals under test
    return syn._prepare(design)  # noqa: SLF001


def _fit(cls, design, seed: int = 1, **kw):
    return cls(outcome="api00", predictors=["stype"], log=True, random_state=seed,
               **{**FAST, **kw}).fit(design)


@pytest.fixture(scope="module")
def fits(api):
    """FBS and FBP fitted once per design (log_lik="stan": the generated log_lik is kept)."""
    out = {}
    for name in ("apiclus1", "apiclus2"):
        d = _design(api, name)
        for cls in (FBS, FBP):
            out[(cls.name, name)] = (_fit(cls, d, log_lik="stan"), d)
    return out


def _se_conf(R, name: str) -> tuple[float, float]:
    est = float(R(f"coef(svymean(~api00, {R_DESIGN[name]}))").ravel()[0])
    se = float(R(f"SE(svymean(~api00, {R_DESIGN[name]}))").ravel()[0])
    return est, se


def _psu_tracking(fit, design, rel) -> float:
    """Mean over the m sets of the correlation between the synthetic and the confidential PSU
    means of log api00 (each as deviations from its predictor cell's mean): near 0 when the PSU
    effects are drawn afresh, near 1 when the posterior u_j are used (they estimate each
    confidential PSU's mean)."""
    cl = fit._prep_["cluster"]
    psu, codes, J = cl["psu"], fit._prep_["cells"].codes, cl["J"]

    def psu_dev(y):
        cm = np.bincount(codes, weights=y) / np.bincount(codes)
        r = y - cm[codes]
        return np.bincount(psu, weights=r, minlength=J) / np.bincount(psu, minlength=J)

    conf = psu_dev(np.log(design.data["api00"].to_numpy(float)))
    perms = rel.confidential["_row_permutations"]
    cors = []
    for d, p in zip(rel.designs, perms, strict=True):
        y = np.empty(len(p))
        y[p] = np.log(d.data["api00"].to_numpy(float))    # back to confidential order
        cors.append(np.corrcoef(psu_dev(y), conf)[0, 1])
    return float(np.mean(cors))


# ------------------------------------------------------------------ the design carried (D2, D5)


@pytest.mark.parametrize("synth", ["FBS", "FBP"])
@pytest.mark.parametrize("name", ["apiclus1", "apiclus2"])
def test_synthetic_designs_carry_ids_strata_fpc(fits, synth, name):
    fit, d = fits[(synth, name)]
    assert fit.stan_program_ == f"{synth.lower()}_re"
    rel = fit.release()
    conf = d.data.reset_index(drop=True)
    for sd, p in zip(rel.designs, rel.confidential["_row_permutations"], strict=True):
        assert sd.ids_vars == d.ids_vars and sd.strata_vars == d.strata_vars
        assert sd.fpc_vars == d.fpc_vars and sd.nest == d.nest
        assert sd.n_stages == d.n_stages and sd.degf == d.degf
        # every design column as collected, row by row (released order: permutation p)
        for c in [*d.ids_vars, *d.fpc_vars]:
            np.testing.assert_array_equal(sd.data[c].to_numpy(), conf[c].to_numpy()[p])
        # D5: weights constant within PSUs, summing to N; here the collected ones
        w = pd.Series(sd.weights).groupby(sd.data[d.ids_vars[0]].to_numpy()).nunique()
        assert w.max() == 1
        np.testing.assert_allclose(sd.weights, d.weights[p], rtol=1e-12)
    assert set(d.ids_vars) | set(d.fpc_vars) <= set(fit.released_as_collected())
    assert any("random intercept per PSU" in n for n in rel.privacy.notes)
    with pytest.raises(ValueError, match="no synthesized weight to plot"):
        fit.plot_weights()


def test_stratified_clustered_design_with_nest_is_carried(api):
    """Districts within school-type strata (nest=True): 162 PSUs, 38 with several schools.
    The synthetic designs keep strata, ids, fpc and nest (so the same 159 df); the cell shares
    add no rank here (every PSU holds one school type) and are dropped."""
    d = ss.SurveyDesign(api["apistrat"], ids="dnum", strata="stype", weights="pw", fpc="fpc",
                        nest=True)
    fit = _fit(FBS, d)
    assert fit.stan_program_ == "fbs_re"
    assert fit._prep_["cluster"]["Zpsu"].shape == (162, 0)  # noqa: SLF001
    sd = fit.release().designs[0]
    assert (sd.ids_vars, sd.strata_vars, sd.fpc_vars) == (["dnum"], ["stype"], ["fpc"])
    assert sd.nest is True
    assert sd.degf == d.degf == 159


def test_weights_varying_within_psu_are_averaged(api):
    """D5: weights that vary within PSUs (calibration, say) are released as each PSU's mean
    weight (total N unchanged), listed as published without budget, not as collected."""
    df = api["apiclus1"].copy()
    df["pw2"] = df["pw"] * np.where(np.arange(len(df)) % 2 == 0, 1.0, 1.2)
    d = ss.SurveyDesign(df, ids="dnum", weights="pw2", fpc="fpc")
    cl = _prepared(FBS(outcome="api00", predictors=["stype"]), d)["cluster"]
    assert cl["weights_averaged"] == 14      # one district has a single school
    want = df.groupby("dnum")["pw2"].transform("mean").to_numpy()
    np.testing.assert_allclose(cl["w_release"], want, rtol=1e-12)
    np.testing.assert_allclose(cl["w_release"].sum(), df["pw2"].sum(), rtol=1e-12)
    assert "pw2" not in api["apiclus1"].columns  # the caller's frame untouched
    fit = _fit(FBS, d)
    rel = fit.release()
    p = rel.confidential["_row_permutations"][0]
    np.testing.assert_allclose(rel.designs[0].weights, want[p], rtol=1e-12)
    assert "pw2" not in fit.released_as_collected()
    items = [e["item"] for e in rel.privacy.published_without_budget]
    assert any("each PSU's mean of the confidential weights (they varied within 14 of 15"
               in i for i in items), items


def test_unclustered_designs_keep_the_old_programs(api):
    """ids=~1 and one record per PSU are not clustered: fbs/fbp and no carried ids."""
    d = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    d1 = ss.SurveyDesign(api["apistrat"], ids="snum", strata="stype", weights="pw", fpc="fpc")
    for design in (d, d1):
        assert _prepared(FBS(outcome="api00", predictors=["stype"]), design)["cluster"] is None


# ------------------------------------------------------------------ the design effect (D3)


@pytest.mark.parametrize("synth", ["FBS", "FBP"])
@pytest.mark.parametrize("name", ["apiclus1", "apiclus2"])
def test_combined_se_and_mean(fits, R, synth, name):
    fit, _ = fits[(synth, name)]
    est0, se0 = _se_conf(R, name)
    r = fit.release().mean("api00")
    se, est = float(r["se"].iloc[0]), float(r["estimate"].iloc[0])
    assert se >= 0.8 * se0, f"{synth} {name}: combined SE {se:.2f} < 0.8 x {se0:.2f}"
    assert abs(est - est0) <= 2 * se, f"{synth} {name}: {est:.1f} vs {est0:.1f} (SE {se:.2f})"
    # each synthetic design's own variance carries the clustering (not only the between-set
    # spread b/m, which alone can reach 0.8 x when the design is dropped: see the mutant)
    within = float(np.sqrt(r["within"].iloc[0]))
    assert within >= 0.7 * se0, f"{synth} {name}: within-set SE {within:.2f} vs {se0:.2f}"


@pytest.mark.parametrize("seed", [2, 3])
@pytest.mark.parametrize("name", ["apiclus1", "apiclus2"])
def test_combined_se_and_mean_more_seeds(api, R, name, seed):
    """test_combined_se_and_mean on two more fit seeds (three in all with the fixture's)."""
    est0, se0 = _se_conf(R, name)
    for cls in (FBS, FBP):
        r = _fit(cls, _design(api, name), seed=seed).release().mean("api00")
        se, est = float(r["se"].iloc[0]), float(r["estimate"].iloc[0])
        assert se >= 0.8 * se0, f"{cls.name} {name} seed {seed}: SE {se:.2f} vs {se0:.2f}"
        assert abs(est - est0) <= 2 * se, f"{cls.name} {name} seed {seed}: {est:.1f} vs {est0:.1f}"
        assert float(np.sqrt(r["within"].iloc[0])) >= 0.7 * se0


def test_mutant_design_not_carried_fails_the_within_se_ratio(fits, R, monkeypatch):
    """Mutant: the synthetic values keep the PSU effects but the designs drop ids and fpc (as
    before issue 36): single-stage variances within each set. Measured (fit seeds 1-5): the
    within-set SE ratio falls from 1.13-2.08 to 0.35-0.56 on apiclus1, while the combined SE
    ratio stays above 0.8 in 6 of 10 fits (b/m carries the fresh u* variance), so the
    within-set check of test_combined_se_and_mean is what catches it."""
    import surveysynth.synth.pseudo_posterior as pp

    real = pp.collected_design
    monkeypatch.setattr(pp, "collected_design", lambda d: {**real(d), "spec": {}})
    _, se0 = _se_conf(R, "apiclus1")
    for synth in ("FBS", "FBP"):
        fit, d = fits[(synth, "apiclus1")]
        fit = _fit(type(fit), d)
        rel = fit.release()
        assert rel.designs[0].ids_vars == []
        within = float(np.sqrt(rel.mean("api00")["within"].iloc[0]))
        assert within < 0.7 * se0, f"{synth}: the mutant passes ({within:.2f} vs {se0:.2f})"


def _domain_z(fit, design) -> np.ndarray:
    conf = design.mean("api00", by="stype")
    rel = fit.release().mean("api00", by="stype")
    return ((rel["estimate"] - conf["estimate"]) / rel["se"]).to_numpy(float)


@pytest.mark.parametrize("synth", ["FBS", "FBP"])
def test_domain_means_with_contextual_effects(fits, monkeypatch, synth):
    """The school-type means on apiclus2 within 2 combined SEs of the confidential ones. The
    PSU's cell shares in the outcome model carry the contextual effect (high schools sit in
    districts with low effects); the mutant without them (u taken independent of x) puts the
    synthetic high-school mean far above the confidential one."""
    fit, d = fits[(synth, "apiclus2")]
    z = _domain_z(fit, d)
    assert np.all(np.abs(z) <= 2), f"{synth}: domain z {np.round(z, 2)}"
    real = type(fit)._psu_covariates  # noqa: SLF001 - the mutant wraps it
    monkeypatch.setattr(type(fit), "_psu_covariates", staticmethod(
        lambda cells, psu, J, lw_psu: real(cells, psu, J, lw_psu)[:, :int(lw_psu is not None)]))
    mutant = _fit(type(fit), d)
    assert mutant._prep_["cluster"]["Zpsu"].shape[1] == (synth == "FBS")  # noqa: SLF001
    zm = _domain_z(mutant, d)
    assert zm[1] > 2, f"{synth}: the mutant without contextual effects is not caught ({zm})"


def test_mutant_without_random_effect_fails_the_se_ratio(fits, R, monkeypatch):
    """Mutant: synthesis with u* = 0 (the random effect dropped from the synthetic values)
    gives synthetic records independent across PSUs given the cells: the combined SE falls
    well below 0.8 x the confidential one, so test_combined_se_and_mean would fail."""
    for cls in (FBS, FBP):
        monkeypatch.setattr(cls, "_fresh_u", staticmethod(lambda res, s, J, rng: np.zeros(J)))
    for synth in ("FBS", "FBP"):
        fit, _ = fits[(synth, "apiclus1")]
        _, se0 = _se_conf(R, "apiclus1")
        se = float(fit.release().mean("api00")["se"].iloc[0])
        assert se < 0.8 * se0, f"{synth}: the mutant passes the SE ratio ({se:.2f} vs {se0:.2f})"


@pytest.mark.parametrize("synth", ["FBS", "FBP"])
def test_fresh_psu_effects_do_not_track_confidential_psu_means(fits, monkeypatch, synth):
    """D3: u* drawn afresh. The synthetic PSU means (net of cells) are uncorrelated with the
    confidential ones; the mutant that synthesizes from the posterior u_j publishes each
    cluster's mean (correlation near 1) and fails the same check."""
    fit, d = fits[(synth, "apiclus2")]
    fresh = _psu_tracking(fit, d, fit.release())
    assert abs(fresh) < 0.4, f"fresh u*: PSU means track the confidential ones ({fresh:.2f})"
    for cls in (FBS, FBP):
        monkeypatch.setattr(cls, "_fresh_u", staticmethod(lambda res, s, J, rng: res["u"][s]))
    mutant = _psu_tracking(fit, d, fit.release())
    assert mutant > 0.6, f"the posterior-u mutant is not caught ({mutant:.2f})"


# ------------------------------------------------------------------ the bound (D4)


def _re_scipy_loglik(fit, s: int) -> np.ndarray:
    """Each record's density given its PSU's u_j, written out with scipy."""
    prep, res = fit._prep_, fit.unweighted_fit_
    cells, cl = prep["cells"], prep["cluster"]
    y, psu = prep["y"], cl["psu"]
    u = res["u"][s][psu]
    if cl["Zpsu"].shape[1]:     # PSU covariates: log w (FBS), cell shares (both)
        u = u + (cl["Zpsu"] @ res["gamma"][s])[psu]
    if fit.name == "FBS":
        m = (cells.Xc @ res["b"][s])[cells.codes] + u
        return stats.norm.logpdf(y, m, res["tau"][s])
    xb = (cells.Xc @ res["beta"][s])[cells.codes] + u
    out = stats.norm.logpdf(y, xb, res["sigma_y"][s])
    if not cl["lw_free"]:
        return out
    w = prep["w_raw"]
    lpi = -np.log(w * len(w) / w.sum())
    kx = (cells.Xc @ res["kappa_x"][s])[cells.codes]
    ky, sy, sp = float(res["kappa_y"][s][0]), res["sigma_y"][s], float(res["sigma_pi"][s][0])
    return (out + stats.norm.logpdf(lpi, ky * y + kx, sp)
            - (kx + sp**2 / 2 + ky * xb + ky**2 * sy**2 / 2))


@pytest.mark.parametrize("synth", ["FBS", "FBP"])
@pytest.mark.parametrize("name", ["apiclus1", "apiclus2"])
def test_re_log_lik_numpy_equals_stan_and_scipy(fits, synth, name):
    fit, _ = fits[(synth, name)]
    prep, res = fit._prep_, fit.unweighted_fit_
    ll = res["log_lik"]
    assert ll.shape == (res.chains * res.draws_per_chain, prep["n"])
    for s in (0, 7, ll.shape[0] - 1):
        np.testing.assert_allclose(ll[s], _re_scipy_loglik(fit, s), rtol=1e-7, atol=1e-8)
        ours = fit._record_loglik(prep, res, slice(s, s + 1))[0]  # noqa: SLF001 - numpy path
        np.testing.assert_allclose(ours, ll[s], rtol=1e-7, atol=1e-8)
    absmax = fit._record_absmax(prep, res)  # noqa: SLF001 - the numpy bound under test
    np.testing.assert_allclose(absmax, np.abs(ll).max(axis=0), rtol=1e-7)
    np.testing.assert_allclose(fit.delta_, np.abs(ll).max(axis=0))


@pytest.mark.parametrize("synth", ["FBS", "FBP"])
def test_group_statistics_target_equals_record_sum(fits, synth):
    """The model block's alpha-weighted likelihood from (cell x PSU) statistics equals
    sum_i alpha_i log p(y_i | theta, u_j) (kills a collapse per cell, which ignores u_j)."""
    import stan

    fit, _ = fits[(synth, "apiclus2")]
    prep, res = fit._prep_, fit.unweighted_fit_
    n = prep["n"]
    a1, a2 = np.ones(n), np.random.default_rng(3).uniform(size=n)
    s = 11
    pars = {k: res[k][s].tolist() for k in res.param_names}
    lp = []
    for a in (a1, a2):
        data = fit._stan_data(prep, a, save_log_lik=False)  # noqa: SLF001 - the statistics
        post = stan.build(load_program(fit.stan_program_), data=data, random_seed=1)
        lp.append(post.log_prob(post.unconstrain_pars(pars), adjust_transform=False))
    ll = _re_scipy_loglik(fit, s)
    assert lp[0] - lp[1] == pytest.approx(np.sum((a1 - a2) * ll), rel=1e-8, abs=1e-6)
