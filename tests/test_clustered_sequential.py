"""Sequential on clustered designs (issue 36 D1/D3/D4/D5; docs/sequential.md "Clustered designs").

* The random-intercept Stan programs (seq_*_re.stan) weight the same conditional density (given
  u_j) that numpy computes for the Lipschitz bound and synthesizes from, draw by draw; what
  Sequential hands them (the distinct (x, y, PSU) patterns with summed alphas) has the per-record
  log density exactly.
* On R's apiclus1 and apiclus2 the synthetic designs carry the confidential ids / strata / fpc,
  and the combined SE of mean api00 is at least 0.8x the confidential design's SE computed by R
  survey live; on apiclus2 the weighted synthetic mean tracks the weighted confidential mean.
* Mutants kept here and killed: the random effect dropped (SE ratio ~0.4), the posterior u_j
  used for synthesis instead of fresh u*_j (the synthetic cluster means then track the
  confidential ones).
* Unclustered designs keep the original programs (and no log-weight predictor).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from surveysynth.design import SurveyDesign
from surveysynth.synth import _seq_models as sm  # noqa: PLC2701 - the densities under test
from surveysynth.synth import sequential as seqmod
from surveysynth.synth._stan import load_program, run_stan  # noqa: PLC2701
from surveysynth.synth.sequential import Sequential, psu_codes

FAST = dict(chains=2, draws=200, warmup=200, allow_unconverged=True, progress=False)
API00 = {"name": "api00", "type": "bounded", "bounds": (200, 1000)}
R_DESIGN = {
    "apiclus1": "svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1)",
    "apiclus2": "svydesign(id=~dnum+snum, weights=~pw, fpc=~fpc1+fpc2, data=apiclus2)",
}


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


def _design(api, name: str) -> SurveyDesign:
    d = api[name]
    if name == "apiclus1":
        return SurveyDesign(d, ids="dnum", weights="pw", fpc="fpc")
    if name == "apiclus2":
        return SurveyDesign(d, ids="~dnum+snum", weights="pw", fpc="~fpc1+fpc2")
    return SurveyDesign(d, strata="stype", weights="pw", fpc="fpc")


def _fit_api00(design: SurveyDesign, seed: int, **kw) -> Sequential:
    syn = Sequential(variables=[API00], public=["stype"], m=5, random_state=seed,
                     **{**FAST, **kw})
    return _quiet(syn.fit, design)


# ------------------------------------------------------------------ PSU index (D1)
def test_psu_codes_are_the_designs_first_stage_units(api):
    """apiclus1: 15 districts; apiclus2: 40 districts (the first stage; no effect for schools);
    no clusters (ids=~1), or one record per PSU: None (the original programs). With nest=True
    the PSU codes are unique within strata (the design's own index)."""
    g1 = psu_codes(_design(api, "apiclus1"))
    assert g1.max() + 1 == 15 and len(g1) == 183
    d1 = api["apiclus1"]
    assert pd.crosstab(g1, d1["dnum"].to_numpy()).astype(bool).sum(axis=1).eq(1).all()
    g2 = psu_codes(_design(api, "apiclus2"))
    assert g2.max() + 1 == 40
    assert psu_codes(_design(api, "apistrat")) is None
    assert psu_codes(SurveyDesign(d1, ids=None, weights="pw")) is None
    assert psu_codes(SurveyDesign(d1, ids="snum", weights="pw")) is None
    # the same id in two strata, nested: two PSUs
    df = pd.DataFrame({"h": [1, 1, 1, 1, 2, 2, 2, 2], "id": [1, 1, 2, 2, 1, 1, 2, 2],
                       "w": 1.0})
    assert psu_codes(SurveyDesign(df, ids="id", strata="h", weights="w", nest=True)).max() == 3


# ------------------------------------------------------------------ Stan vs numpy (D4)
RNG = np.random.default_rng(36)
N, J = 40, 6
RE_CASES = {
    "normal": (RNG.uniform(-1, 3, N), {"lo": -1.0, "hi": 3.0, "loc": 1.0, "scale": 1.0}),
    "normal_untruncated": (RNG.normal(1, 1, N), {"lo": None, "hi": None, "loc": 1.0,
                                                 "scale": 1.0}),
    "negbin": (RNG.integers(0, 16, N), {"hi": 15.0, "eta0": 2.5}),
    "logistic": (RNG.integers(0, 2, N), {}),
    "categorical": (RNG.integers(0, 3, N), {"K": 3}),
    "ordinal": (RNG.integers(0, 4, N), {"K": 4}),
}


def _family(case: str) -> str:
    return case.split("_")[0]


@pytest.mark.parametrize("case", sorted(RE_CASES))
def test_re_stan_log_lik_is_the_numpy_conditional_density(case):
    """Each seq_*_re program's generated log_lik (the same function as its model block) equals
    the numpy density GIVEN the draw's u_j, draw by draw: the bound (D4) is computed from the
    density Stan weights, random intercept and truncation normaliser included. Kills: u of the
    wrong PSU, u left out of the normaliser, a sign or scale error in u."""
    y, spec = RE_CASES[case]
    spec = {**spec, "J": J}
    model = sm.MODELS_RE[_family(case)]
    X = RNG.normal(size=(N, 2))
    g = np.r_[np.arange(J), RNG.integers(0, J, N - J)]
    Xg = np.c_[X, g]
    data = model.stan_data(np.asarray(y), Xg, np.ones(N), spec, save_log_lik=True)
    res = _quiet(run_stan, load_program(model.program), data, chains=1, draws=20, warmup=30,
                 seed=3, progress=False, warn=False)
    u = model.posterior_u(res.draws, slice(None))
    assert np.abs(u).max() > 1e-3                     # the intercepts are in play
    ll = model.loglik(res.draws, slice(None), np.asarray(y), Xg, spec)
    np.testing.assert_allclose(ll, res["log_lik"], rtol=1e-7, atol=1e-8)
    # and u matters: the density with every record moved to PSU 0 differs
    moved = model.loglik(res.draws, slice(None), np.asarray(y), np.c_[X, np.zeros(N)], spec)
    assert np.abs(moved - res["log_lik"]).max() > 1e-3


def _unflatten(post, flat, names):
    flat = np.asarray(flat, float)
    out = {}
    for name in names:
        idx = [i for i, c in enumerate(post.constrained_param_names)
               if c == name or c.startswith(name + ".")]
        dims = post.dims[post.param_names.index(name)]
        out[name] = flat[idx].reshape(tuple(dims), order="F")[None, ...]
    return out


@pytest.mark.parametrize("case", ["normal", "negbin", "logistic", "categorical", "ordinal"])
def test_patterns_per_psu_have_the_per_record_log_density(case):
    """What Sequential hands Stan on a clustered design, the distinct (x, y, PSU) patterns with
    summed alphas, has the same log posterior density at any parameter as one row per record;
    the model block's weighted likelihood is sum_i alpha_i log p_i with the numpy conditional
    density. Collapsing over (x, y) WITHOUT the PSU (a pattern's records in several clusters
    given the first one's u) changes the density: killed."""
    import stan

    y0, spec = RE_CASES[case]
    spec = {**spec, "J": 3}
    model = sm.MODELS_RE[case]
    rng = np.random.default_rng(5)
    n = 300
    X = np.c_[rng.integers(0, 2, n), rng.integers(0, 2, n) - 0.5].astype(float)
    hi = {"normal": 3, "negbin": 5, "logistic": 1, "categorical": 2, "ordinal": 3}[case]
    y = rng.integers(0, hi + 1, n).astype(np.asarray(y0).dtype)
    g = rng.integers(0, 3, n)
    Xg = np.c_[X, g]
    alpha = rng.uniform(0.05, 1.0, n)
    first, inv = sm.patterns(Xg, y)
    assert len(first) < n / 2
    pre = model.sampler_pre(sm.whitening(X), y, spec)    # categorical: with Q (not identity)
    full = model.stan_data(y, Xg, alpha, spec, save_log_lik=True, pre=pre)
    comp = model.stan_data(y[first], Xg[first], np.bincount(inv, weights=alpha), spec,
                           save_log_lik=False, pre=pre)
    f2, inv2 = sm.patterns(X, y)                          # the wrong collapse: PSU ignored
    wrong = model.stan_data(y[f2], Xg[f2], np.bincount(inv2, weights=alpha), spec,
                            save_log_lik=False, pre=pre)
    prog = load_program(model.program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pf = stan.build(prog, data=full, random_seed=1)
        pc = stan.build(prog, data=comp, random_seed=1)
        pw = stan.build(prog, data=wrong, random_seed=1)
        p0 = stan.build(prog, data=dict(full, alpha=np.zeros(n)), random_seed=1)
    init = model.sampler_inits(model.inits(y, Xg, spec, 1, rng), spec, pre)[0]
    k = len(pf.unconstrain_pars(init))
    worst = 0.0
    for _ in range(4):
        theta = rng.normal(0, 0.7, k).tolist()
        lf = pf.log_prob(theta)
        assert np.isfinite(lf)
        assert pc.log_prob(theta) == pytest.approx(lf, rel=1e-10, abs=1e-8)
        draws = _unflatten(pf, pf.constrain_pars(theta), model.params)
        ll = model.loglik(draws, slice(None), y, Xg, spec)[0]
        assert lf - p0.log_prob(theta) == pytest.approx(float(alpha @ ll), rel=1e-9)
        worst = max(worst, abs(pw.log_prob(theta) - lf))
    assert worst > 1.0


@pytest.mark.parametrize("case", ["normal", "negbin", "logistic", "categorical", "ordinal"])
def test_re_sampler_inits_round_trip_through_the_program(case):
    """The random-intercept programs sample whitened coefficients (categorical: in the logit
    coordinates Q as well): natural inits put through ``sampler_inits`` come back through the
    program's transformed parameters as themselves, random-intercept parameters included. Kills
    inits left in natural coordinates (or without Q) while the program samples the others."""
    import stan

    y0, spec = RE_CASES[case]
    spec = {**spec, "J": 3}
    model = sm.MODELS_RE[case]
    rng = np.random.default_rng(9)
    n = 200
    X = np.c_[rng.normal(3.0, 2.0, n), rng.normal(0, 1, n)]
    X[:, 1] += 0.9 * X[:, 0]                             # correlated, off-centre predictors
    hi = {"normal": 3, "negbin": 5, "logistic": 1, "categorical": 2, "ordinal": 3}[case]
    y = rng.integers(0, hi + 1, n).astype(np.asarray(y0).dtype)
    Xg = np.c_[X, rng.integers(0, 3, n)]
    pre = model.sampler_pre(sm.whitening(X), y, spec)
    if case == "categorical":
        assert np.abs(pre["Q"] - np.eye(len(pre["Q"]))).max() > 0.5
    nat = model.inits(y, Xg, spec, 2, rng)
    for d0 in nat:                                       # away from zero in every slot
        for k in ("a", "b", "B"):
            if k in d0:
                d0[k] = (np.asarray(d0[k], float) + rng.normal(0, 0.3, np.shape(d0[k]))).tolist()
    data = model.stan_data(y, Xg, np.ones(n), spec, False, pre=pre)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = stan.build(load_program(model.program), data=data, random_seed=1)
    for d_nat, d_smp in zip(nat, model.sampler_inits(nat, spec, pre), strict=True):
        back = _unflatten(post, post.constrain_pars(post.unconstrain_pars(d_smp)), model.params)
        for k in model.params:
            if k in ("s", "phi"):                        # scale parameters: not transformed
                continue
            np.testing.assert_allclose(np.ravel(back[k][0]), np.ravel(np.asarray(d_nat[k], float)),
                                       rtol=1e-9, atol=1e-9, err_msg=f"{case}: {k}")


def test_fresh_u_are_new_draws_from_sigma_u_not_the_posterior_u():
    """Synthesis draws u*_j ~ N(0, sigma_u^(s)) afresh (D3): their spread is sigma_u of the
    draw, and they do not follow the draw's posterior z_u."""
    model = sm.MODELS_RE["normal"]
    S, JJ = 3, 4000
    rng = np.random.default_rng(1)
    draws = {"sigma_u": np.array([0.5, 2.0, 1.0]), "z_u": rng.normal(size=(S, JJ))}
    u = model.fresh_u(draws, 1, {"J": JJ}, np.random.default_rng(2))
    assert u.shape == (1, JJ)
    assert np.std(u) == pytest.approx(2.0, rel=0.05)
    assert abs(np.corrcoef(u[0], draws["z_u"][1])[0, 1]) < 0.1
    cat = sm.MODELS_RE["categorical"]
    uc = cat.fresh_u({"sigma_u": np.array([[0.5, 3.0]])}, 0, {"J": JJ},
                     np.random.default_rng(3))
    assert uc.shape == (1, 2, JJ)
    np.testing.assert_allclose(uc[0].std(axis=1), [0.5, 3.0], rtol=0.05)


# ------------------------------------------------------------------ fresh u*: simulated clusters
def _clustered_frame(seed: int = 4, n_clu: int = 30, per: int = 8) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    clu = np.repeat(np.arange(n_clu), per)
    u = rng.normal(0, 1.0, n_clu)
    x = rng.integers(0, 2, len(clu))
    y = 10 + 0.5 * x + u[clu] + rng.normal(0, 0.6, len(clu))
    return pd.DataFrame({"clu": clu, "x": x, "y": y, "w": 20.0})


def _cluster_mean_check(syn: Sequential, frame: pd.DataFrame) -> tuple[float, float]:
    """(mean over the sets of corr(synthetic cluster means, confidential cluster means), the
    synthetic sets' mean between-cluster variance / the confidential one)."""
    conf = frame.groupby("clu")["y"].mean().to_numpy()
    cors, ratios = [], []
    for f in syn.synthesize(5):
        sm_ = f.groupby("clu")["y"].mean().to_numpy()
        cors.append(np.corrcoef(sm_, conf)[0, 1])
        ratios.append(np.var(sm_) / np.var(conf))
    return float(np.mean(cors)), float(np.mean(ratios))


def _fit_sim(frame: pd.DataFrame, seed: int = 1) -> Sequential:
    d = SurveyDesign(frame, ids="clu", weights="w")
    syn = Sequential(variables=[{"name": "y", "type": "continuous"}], public=["x"], m=5,
                     random_state=seed, **FAST)
    return _quiet(syn.fit, d)


def test_synthetic_clusters_have_the_spread_but_not_the_means_of_the_confidential_ones(
        monkeypatch):
    """Fresh u*: the synthetic cluster means vary between clusters as much as the confidential
    ones (ratio of between-cluster variances near 1; the design effect), but do not track
    them (correlation near 0: no cluster's mean is published). Mutants killed: the posterior
    u_j used for synthesis (correlation ~0.9) and the random effect dropped (variance ratio
    ~0.05)."""
    frame = _clustered_frame()
    syn = _fit_sim(frame)
    assert syn.summary()["stan_program"].iloc[0] == "seq_normal_re"
    cor, ratio = _cluster_mean_check(syn, frame)
    assert abs(cor) < 0.5
    assert 0.4 < ratio < 2.5
    # mutant 1: the posterior u_j of the set's draw instead of fresh ones
    monkeypatch.setattr(sm._RandomIntercept, "fresh_u",  # noqa: SLF001
                        lambda self, draws, s, spec, rng: self.posterior_u(draws,
                                                                           slice(s, s + 1)))
    cor_m, _ = _cluster_mean_check(syn, frame)
    assert cor_m > 0.5                                  # the check above fails on it
    monkeypatch.undo()
    # mutant 2: no random effect (the design treated as unclustered)
    monkeypatch.setattr(seqmod, "psu_codes", lambda design: None)
    syn0 = _fit_sim(frame)
    assert syn0.summary()["stan_program"].iloc[0] == "seq_normal_ss"
    _, ratio0 = _cluster_mean_check(syn0, frame)
    assert ratio0 < 0.4                                 # the check above fails on it


# ------------------------------------------------------------------ R's clustered api samples
def _r_se(R, name: str) -> tuple[float, float]:
    est = R(f"coef(svymean(~api00, {R_DESIGN[name]}))").ravel()[0]
    se = R(f"SE(svymean(~api00, {R_DESIGN[name]}))").ravel()[0]
    return float(est), float(se)


def _check_release(syn: Sequential, design: SurveyDesign, name: str) -> pd.DataFrame:
    rel = syn.release()
    cols = [*design.ids_vars, *(design.fpc_vars or []), "pw"]
    conf = design.data[cols].sort_values(cols).reset_index(drop=True)
    for d in rel.designs:      # the release may reorder the rows: compare the sorted columns
        assert d.ids_vars == design.ids_vars
        assert d.strata_vars == design.strata_vars
        assert d.fpc_vars == design.fpc_vars
        pd.testing.assert_frame_equal(d.data[cols].sort_values(cols).reset_index(drop=True),
                                      conf)   # ids, fpc and design weights as collected
        assert d.data["api00"].between(200, 1000).all()
        assert d.degf == design.degf
    # the record says what was done: PSU random effects, bounds given u, fresh u*
    rec = rel.privacy
    assert rec.facts["random_effects"] == "psu"
    assert "random intercept per first-stage sampling unit" in rec.guarantee_text
    assert "never the fitted ones" in rec.guarantee_text
    return rel.mean("api00")


@pytest.mark.parametrize("name", ["apiclus1", "apiclus2"])
def test_clustered_api_se_is_at_least_0_8_of_the_confidential_design(R, api, name):
    """Synthetic designs with the confidential ids/strata/fpc (and weights), values in the
    public bounds, every step with the PSU random intercept; the combined SE of mean api00 is
    >= 0.8x R survey's SE of the confidential design (it was 0.39x / 0.71x without the random
    effect: the mutant below)."""
    design = _design(api, name)
    syn = _fit_api00(design, seed=11)
    assert (syn.summary()["stan_program"] == "seq_normal_re").all()
    est = _check_release(syn, design, name)
    _, se_r = _r_se(R, name)
    assert float(est["se"].iloc[0]) >= 0.8 * se_r


def test_mutant_without_random_effect_fails_the_se_check(R, api, monkeypatch):
    """The random effect dropped (the original programs on apiclus1): SE ratio ~0.4 < 0.8."""
    monkeypatch.setattr(seqmod, "psu_codes", lambda design: None)
    design = _design(api, "apiclus1")
    syn = _fit_api00(design, seed=11)
    est = syn.release().mean("api00")
    _, se_r = _r_se(R, "apiclus1")
    assert float(est["se"].iloc[0]) < 0.8 * se_r


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_apiclus2_weighted_synthetic_mean_tracks_the_weighted_confidential_mean(R, api, seed):
    """apiclus2's weights vary between PSUs (design weights, released as collected): log w is a
    predictor of every step (D5), so the weighted synthetic mean lies within 2 combined SEs of
    the weighted confidential mean (R's), on three seeds."""
    design = _design(api, "apiclus2")
    syn = _fit_api00(design, seed=seed)
    assert syn._cfg_["log_weight_predictor"]       # noqa: SLF001
    est = syn.release().mean("api00")
    mean_r, _ = _r_se(R, "apiclus2")
    assert abs(float(est["estimate"].iloc[0]) - mean_r) <= 2 * float(est["se"].iloc[0])


def test_log_weight_predictor_only_when_it_adds_a_direction(api):
    """apiclus1's weights are constant: no log-weight column (it would be a second intercept);
    apistrat (unclustered): no random effect, no log-weight predictor, the original program
    (seeded output unchanged, D3)."""
    syn1 = _fit_api00(_design(api, "apiclus1"), seed=2, chains=1, draws=50, warmup=50)
    assert not syn1._cfg_["log_weight_predictor"]      # noqa: SLF001
    syn = _fit_api00(_design(api, "apistrat"), seed=2, chains=1, draws=50, warmup=50)
    assert not syn._cfg_["clustered"] and not syn._cfg_["log_weight_predictor"]  # noqa: SLF001
    # the unclustered program (bounded api00: sums and distinct rows, issue 39)
    assert (syn.summary()["stan_program"] == "seq_normal_tss").all()
    assert "J" not in syn.steps_[0].spec
    rec = _quiet(syn.release).privacy
    assert "random_effects" not in rec.facts
    assert "random intercept" not in rec.guarantee_text


FAMILY_PROGRAMS = ["seq_normal_re", "seq_logistic_re", "seq_negbin_re", "seq_categorical_re",
                   "seq_ordinal_re"]


def _check_families(syn: Sequential, frame: pd.DataFrame, ids: str, count_hi: int) -> None:
    assert syn.summary()["stan_program"].tolist() == FAMILY_PROGRAMS
    for f in syn.synthesize(2):
        assert f["v_bounded"].between(200, 1000).all()
        assert f["v_count"].between(0, count_hi).all()
        assert set(f["v_binary"]) <= set(frame["v_binary"])
        assert set(f["v_cat"].astype(str)) <= {"a", "b", "c"}
        assert set(f["v_ord"].astype(str)) <= {"low", "mid", "high"}
        np.testing.assert_array_equal(f[ids].to_numpy(), frame[ids].to_numpy())


FAMILY_VARIABLES = [
    {"name": "v_bounded", "type": "bounded", "bounds": (200, 1000)},
    {"name": "v_binary", "type": "binary"},
    {"name": "v_count", "type": "count", "bounds": (0, 12)},
    {"name": "v_cat", "type": "categorical"},
    {"name": "v_ord", "type": "ordinal"},
]


def test_every_family_with_random_intercepts_fast():
    """Bounded, binary, count (truncated), categorical and ordinal steps on a
    small simulated clustered design (16 clusters of 4): each fits its seq_*_re program; the
    synthetic values keep the types and public ranges, the cluster ids are carried. (The same
    on apiclus1: the slow test below.)"""
    rng = np.random.default_rng(8)
    clu = np.repeat(np.arange(16), 4)
    u = rng.normal(0, 0.7, 16)[clu]
    f = pd.DataFrame({"clu": clu, "w": 10.0, "x": rng.integers(0, 2, len(clu))})
    f["v_bounded"] = np.clip(600 + 100 * u + rng.normal(0, 60, len(clu)), 200, 1000)
    f["v_binary"] = np.where(rng.uniform(size=len(clu)) < 1 / (1 + np.exp(-u)), "Yes", "No")
    f["v_count"] = np.minimum(rng.poisson(np.exp(1 + 0.5 * u)), 12)
    f["v_cat"] = rng.choice(["a", "b", "c"], len(clu))
    f["v_ord"] = pd.Categorical(rng.choice(["low", "mid", "high"], len(clu)),
                                categories=["low", "mid", "high"], ordered=True)
    design = SurveyDesign(f, ids="clu", weights="w")
    syn = Sequential(variables=FAMILY_VARIABLES, public=["x"], m=2, random_state=5, chains=1,
                     draws=50, warmup=100, allow_unconverged=True, progress=False)
    _quiet(syn.fit, design)
    _check_families(syn, f, "clu", 12)


@pytest.mark.slow
def test_every_family_with_random_intercepts_on_apiclus1(api):
    """The fast test above on apiclus1 (183 schools in 15 districts): api00 (logit scale),
    sch.wide, mobility (count, 0..100), bands of meals (categorical) and ell (ordinal)."""
    d = api["apiclus1"].copy()
    d["v_bounded"] = d["api00"]
    d["v_binary"] = d["sch.wide"]
    d["v_count"] = d["mobility"]
    d["v_ord"] = pd.cut(d["ell"], [-1, 10, 30, 100], labels=["low", "mid", "high"])
    d["v_cat"] = pd.cut(d["meals"], [-1, 30, 60, 100], labels=["a", "b", "c"]).astype(str)
    design = SurveyDesign(d[["dnum", "pw", "fpc", "stype", *(v["name"] for v in
                                                             FAMILY_VARIABLES)]],
                          ids="dnum", weights="pw", fpc="fpc")
    variables = [dict(v, bounds=(0, 100)) if v["name"] == "v_count" else
                 dict(v, scale="logit") if v["name"] == "v_bounded" else v
                 for v in FAMILY_VARIABLES]
    syn = Sequential(variables=variables, public=["stype"], m=2, random_state=5, chains=1,
                     draws=100, warmup=100, allow_unconverged=True, progress=False)
    _quiet(syn.fit, design)
    _check_families(syn, d, "dnum", 100)


def test_modelled_weights_constant_within_psus_stay_so():
    """Weights that are not design weights (no strata or fpc, yet they vary) but are constant
    within each PSU as collected are modelled (a step with the random intercept) and released
    constant within each PSU, summing to N (D5: the PSU's average, rescaled)."""
    frame = _clustered_frame(seed=6, n_clu=16, per=5)
    rng = np.random.default_rng(2)
    frame["w"] = rng.uniform(5, 40, 16)[frame["clu"]]
    d = SurveyDesign(frame, ids="clu", weights="w")
    syn = Sequential(variables=[{"name": "y", "type": "continuous"}], public=["x"], m=2,
                     random_state=3, chains=1, draws=60, warmup=100, allow_unconverged=True,
                     progress=False)
    _quiet(syn.fit, d)
    assert syn.summary()["stan_program"].tolist() == ["seq_normal_re", "seq_normal_re"]
    for f in syn.synthesize(2):
        assert f.groupby("clu")["w"].nunique().eq(1).all()
        assert f["w"].sum() == pytest.approx(frame["w"].sum(), rel=1e-12)
