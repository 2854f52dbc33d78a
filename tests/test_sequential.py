"""Sequential risk-weighted pseudo posterior synthesis (issue 22, surveysynth.synth.Sequential).

Log densities against scipy.stats (and Stan's own generated quantities), composition of epsilon
over variables, each step's bound under its target, sequential draws given the SYNTHETIC earlier
values, types and ranges of every released value, the design carried, missing values.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from surveysynth.design import SurveyDesign
from surveysynth.synth import _seq_models as sm  # noqa: PLC2701 - the densities under test
from surveysynth.synth._stan import load_program, run_stan  # noqa: PLC2701
from surveysynth.synth.sequential import Sequential

FAST = dict(chains=2, draws=150, warmup=150, allow_unconverged=True, progress=False)


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


# ------------------------------------------------------------------ log densities vs scipy
RNG = np.random.default_rng(20261124)
S, N = 4, 30


def test_normal_loglik_vs_scipy_with_truncation():
    y = RNG.uniform(-1, 2, N)
    mu = RNG.normal(0.5, 1, (S, N))
    sig = RNG.uniform(0.3, 2, (S, 1))
    np.testing.assert_allclose(sm.normal_loglik(y, mu, sig), stats.norm.logpdf(y, mu, sig),
                               rtol=1e-12)
    lo, hi = -1.0, 2.0
    ref = stats.truncnorm.logpdf(y, (lo - mu) / sig, (hi - mu) / sig, loc=mu, scale=sig)
    np.testing.assert_allclose(sm.normal_loglik(y, mu, sig, lo, hi), ref, rtol=1e-10)
    # one-sided truncation (positive variables with only an upper bound, on the log scale)
    ref1 = stats.truncnorm.logpdf(y, -np.inf, (hi - mu) / sig, loc=mu, scale=sig)
    np.testing.assert_allclose(sm.normal_loglik(y, mu, sig, None, hi), ref1, rtol=1e-10)
    ref2 = stats.truncnorm.logpdf(y, (lo - mu) / sig, np.inf, loc=mu, scale=sig)
    np.testing.assert_allclose(sm.normal_loglik(y, mu, sig, lo, None), ref2, rtol=1e-10)


def test_negbin_loglik_vs_scipy_truncated_pmf_has_its_normaliser():
    y = RNG.integers(0, 40, N).astype(float)
    mu = np.exp(RNG.normal(2.5, 0.7, (S, N)))
    phi = RNG.uniform(0.5, 8, (S, 1))
    p = phi / (phi + mu)
    np.testing.assert_allclose(sm.negbin_loglik(y, mu, phi), stats.nbinom.logpmf(y, phi, p),
                               rtol=1e-10)
    hi = 40.0
    ref = stats.nbinom.logpmf(y, phi, p) - stats.nbinom.logcdf(hi, phi, p)
    got = sm.negbin_loglik(y, mu, phi, hi)
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    # the normaliser matters here (a pmf without it would pass the untruncated check only)
    assert np.max(np.abs(ref - stats.nbinom.logpmf(y, phi, p))) > 1e-3
    # from the linear predictor (log_mu: the model's path, the per-count table of betaln):
    # the same values; a record-by-record table index gone wrong (wrong y per column) fails
    np.testing.assert_allclose(sm.negbin_loglik(y, None, phi, hi, log_mu=np.log(mu)), ref,
                               rtol=1e-9)
    np.testing.assert_allclose(sm.negbin_loglik(y, None, phi, log_mu=np.log(mu)),
                               stats.nbinom.logpmf(y, phi, p), rtol=1e-10)
    # the truncated pmf sums to one over the support
    k = np.arange(0, 41, dtype=float)
    tot = np.exp(sm.negbin_loglik(k, np.full((1, 41), 30.0), np.array([[1.5]]), hi)).sum()
    assert abs(tot - 1) < 1e-10


def _negbin_exact(y, mu, phi):
    """log NB2(y | mu, phi) with lgamma(y + phi) - lgamma(phi) as an fsum of logs (exact to
    rounding at any phi) and log p = -log1p(mu / phi): the reference for huge phi."""
    import math

    return np.array([math.fsum(math.log(phi + j) for j in range(int(k))) - math.lgamma(k + 1)
                     - phi * math.log1p(m / phi) + k * (math.log(m) - math.log(phi + m))
                     for k, m in zip(y, mu, strict=True)])


@pytest.mark.parametrize("hi", [None, 12])
@pytest.mark.parametrize("phi", [1e13, 1e15])
def test_negbin_density_is_exact_at_huge_phi_in_numpy_and_stan(phi, hi):
    """At huge phi (a Poisson-like count lets phi wander there) the difference of two lgammas
    loses |lgamma(phi)| x 1e-16 to cancellation: 0.01-0.1 per count at 1e13, which made a
    spurious high-density region where Stan chains stuck at tree depth 10. The numpy density
    (bounds) and the program's weighted likelihood must equal the exact one there. Kills:
    gammaln(y + phi) - gammaln(phi) in numpy, lgamma(k + phi) - lgamma(phi) in the program,
    also in the truncation normaliser (hi = 12: the exact pmf summed over 0..hi)."""
    import stan

    y = np.array([0, 1, 2, 3, 5, 8, 12, 2, 1, 0])
    X = np.linspace(-1, 1, len(y))[:, None]
    a, b = 0.4, 0.3
    mu = np.exp(a + b * X[:, 0])
    ref = _negbin_exact(y, mu, phi)
    if hi is not None:
        k = np.arange(hi + 1)
        ref = ref - np.array([special.logsumexp(_negbin_exact(k, np.full(hi + 1, m), phi))
                              for m in mu])
    got = sm.negbin_loglik(y.astype(float), mu[None, :], np.array([[phi]]), hi)[0]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-7)
    naive = special.gammaln(y + phi) - special.gammaln(phi)
    exact_part = np.array([sum(np.log(phi + j) for j in range(k)) for k in y])
    assert np.max(np.abs(naive - exact_part)) > 1e-3      # the cancellation is real here
    model = sm.MODELS["negbin"]
    spec = {"hi": None if hi is None else float(hi), "eta0": 0.0}
    alpha = np.linspace(0.2, 1.0, len(y))
    data = model.stan_data(y, X, alpha, spec, save_log_lik=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pf = stan.build(load_program(model.program), data=data, random_seed=1)
        p0 = stan.build(load_program(model.program), data=dict(data, alpha=np.zeros(len(y))),
                        random_seed=1)
    theta = pf.unconstrain_pars({"at": a, "bt": [b], "phi": phi})
    assert pf.log_prob(theta) - p0.log_prob(theta) == pytest.approx(float(alpha @ ref),
                                                                     rel=0, abs=1e-6)


def test_discrete_logliks_vs_scipy():
    eta = RNG.normal(0, 2, (S, N))
    y = RNG.integers(0, 2, N)
    np.testing.assert_allclose(sm.logistic_loglik(y, eta),
                               stats.bernoulli.logpmf(y, special.expit(eta)), rtol=1e-10)
    K = 4
    e3 = RNG.normal(0, 1.5, (S, N, K))
    e3[..., 0] = 0.0
    yc = RNG.integers(0, K, N)
    pr = special.softmax(e3, axis=-1)
    ref = np.array([[stats.multinomial.logpmf(np.eye(K)[yc[i]], 1, pr[s, i]) for i in range(N)]
                    for s in range(S)])
    np.testing.assert_allclose(sm.categorical_loglik(yc, e3), ref, rtol=1e-10)
    cut = np.sort(RNG.normal(0, 2, (S, K - 1)), axis=1)
    # ordered logistic: P(y <= k) = F(c_k - eta), F the standard logistic cdf
    F = stats.logistic.cdf(cut[:, None, :] - eta[..., None])           # (S, N, K-1)
    cdf = np.concatenate([np.zeros((S, N, 1)), F, np.ones((S, N, 1))], axis=-1)
    refo = np.log(np.take_along_axis(cdf, yc[None, :, None] + 1, -1)[..., 0]
                  - np.take_along_axis(cdf, yc[None, :, None], -1)[..., 0])
    np.testing.assert_allclose(sm.ordinal_loglik(yc, eta, cut), refo, rtol=1e-9)


STAN_CASES = {
    "normal": dict(y=RNG.uniform(-1, 3, N), spec={"lo": -1.0, "hi": 3.0, "loc": 1.0,
                                                   "scale": 1.0}),
    "negbin": dict(y=RNG.integers(0, 16, N), spec={"hi": 15.0, "eta0": 2.5}),
    "logistic": dict(y=RNG.integers(0, 2, N), spec={}),
    "categorical": dict(y=RNG.integers(0, 3, N), spec={"K": 3}),
    "ordinal": dict(y=RNG.integers(0, 4, N), spec={"K": 4}),
}


@pytest.mark.parametrize("family", sorted(STAN_CASES))
def test_stan_log_lik_is_the_numpy_density(family):
    """The density the Stan program weights (its generated log_lik, same function as the model
    block) equals the numpy density used for the bound and for synthesis, draw by draw."""
    case = STAN_CASES[family]
    model = sm.MODELS[family]
    X = RNG.normal(size=(N, 2))
    y = np.asarray(case["y"])
    data = model.stan_data(y, X, np.ones(N), case["spec"], save_log_lik=True)
    res = _quiet(run_stan, load_program(model.program), data, chains=1, draws=20, warmup=30,
                 seed=3, progress=False, warn=False)
    ll = model.loglik(res.draws, slice(None), y, X, case["spec"])
    np.testing.assert_allclose(ll, res["log_lik"], rtol=1e-7, atol=1e-8)


def _n_unconstrained(family, P, K):
    return {"normal": P + 2, "negbin": P + 2, "logistic": P + 1,
            "categorical": (K - 1) * (P + 1), "ordinal": P + K - 1}[family]


def _unflatten(post, flat, names):
    """Stan's constrained values (``constrain_pars``) of the named parameters as a one-draw
    dict: the natural parameters (a, b / B, c, s / phi; transformed parameters of the
    per-record programs, which sample a centred, whitened version of them)."""
    flat = np.asarray(flat, float)
    out = {}
    for name in names:
        idx = [i for i, c in enumerate(post.constrained_param_names)
               if c == name or c.startswith(name + ".")]
        dims = post.dims[post.param_names.index(name)]
        out[name] = flat[idx].reshape(tuple(dims), order="F")[None, ...]
    return out


PATTERN_CASES = {
    # untruncated normal: the sufficient-statistics program against the per-record one
    "normal_ss": ("normal", lambda r, n: r.normal(2.0, 1.5, n).round(0),
                  {"lo": None, "hi": None, "loc": 2.0, "scale": 1.5}),
    "normal_truncated": ("normal", lambda r, n: r.integers(0, 5, n).astype(float),
                         {"lo": 0.0, "hi": 4.0, "loc": 2.0, "scale": 1.0}),
    "negbin": ("negbin", lambda r, n: r.integers(0, 6, n), {"hi": 5.0, "eta0": 1.0}),
    "logistic": ("logistic", lambda r, n: r.integers(0, 2, n), {}),
    "categorical": ("categorical", lambda r, n: r.integers(0, 3, n), {"K": 3}),
    "ordinal": ("ordinal", lambda r, n: r.integers(0, 4, n), {"K": 4}),
}


@pytest.mark.parametrize("case", sorted(PATTERN_CASES))
def test_pattern_and_sufficient_statistic_programs_have_the_per_record_log_density(case):
    """What Sequential hands Stan (the distinct (x, y) patterns with summed alphas; for an
    untruncated normal the weighted sums of seq_normal_ss.stan) has the same log posterior
    density, at any parameter, as the per-record program with each record's own alpha. Kills:
    counts instead of summed alphas, a lost normalising constant or a wrong cross-product in
    the sufficient statistics, a pattern map that mixes records up."""
    import stan

    family, gen, spec = PATTERN_CASES[case]
    model = sm.MODELS[family]
    rng = np.random.default_rng(7)
    n = 240
    X = np.c_[rng.integers(0, 2, n), rng.integers(0, 3, n) - 1.0].astype(float)
    y = np.asarray(gen(rng, n))
    alpha = rng.uniform(0.05, 1.0, n)
    first, inv = sm.patterns(X, y)
    assert len(first) < n / 2                      # the patterns compress this data
    np.testing.assert_array_equal(np.c_[X, y][first][inv], np.c_[X, y])
    # a non-trivial sampling parametrization, the same for both (categorical: with the logit
    # coordinates Q of sampler_pre)
    pre = model.sampler_pre(sm.whitening(X), y, spec)
    full = model.stan_data(y, X, alpha, spec, save_log_lik=True, pre=pre)
    comp = model.stan_data(y[first], X[first], np.bincount(inv, weights=alpha), spec,
                           save_log_lik=False, pre=pre)
    prog_full = load_program(model.program_for(spec, save_log_lik=True))
    prog_comp = load_program(model.program_for(spec))
    # the normal cases run sums programs (seq_normal_ss, seq_normal_tss truncated)
    assert (prog_comp != prog_full) == case.startswith("normal")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pf = stan.build(prog_full, data=full, random_seed=1)
        pc = stan.build(prog_comp, data=comp, random_seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p0 = stan.build(prog_full, data=dict(full, alpha=np.zeros(n)), random_seed=1)
    k = _n_unconstrained(family, X.shape[1], spec.get("K", 2))
    for _ in range(5):
        theta = rng.normal(0, 0.7, k).tolist()
        lf = pf.log_prob(theta)
        draws = _unflatten(pf, pf.constrain_pars(theta), model.params)
        # seq_normal_ss samples (a, b, s) themselves: the same point in its coordinates (the
        # whitening is linear and adds no Jacobian term, so the densities are equal)
        theta_c = (pc.unconstrain_pars({k: v[0].tolist() for k, v in draws.items()})
                   if case == "normal_ss" else theta)
        lc = pc.log_prob(theta_c)
        assert np.isfinite(lf)
        assert lc == pytest.approx(lf, rel=1e-10, abs=1e-8)
        # the model block's weighted likelihood (per-distinct-x normalisers included) is
        # sum_i alpha_i log p_i with the numpy density: log_prob(alpha) - log_prob(alpha = 0)
        ll = model.loglik(draws, slice(None), y, X, spec)[0]
        assert lf - p0.log_prob(theta) == pytest.approx(float(alpha @ ll), rel=1e-9)
    # and the pattern weights matter: counts in place of summed alphas change the density
    wrong = model.stan_data(y[first], X[first], np.bincount(inv).astype(float), spec,
                            save_log_lik=False, pre=pre)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pw = stan.build(prog_comp, data=wrong, random_seed=1)
    assert abs(pw.log_prob(theta_c) - lf) > 1.0


def test_categorical_log_sum_exp_both_branches_are_the_numpy_density():
    """seq_categorical.stan's log-sum-exp takes log1p(rowsum(exp(eta))) while every eta < 300
    and the stable running log1p_exp otherwise: at points on both sides (eta up to ~1e3,
    where exp overflows) the weighted likelihood is the numpy density's. Kills an overflowing
    fast branch without the fallback (-inf or nan there) and a fallback that drops a column."""
    import stan

    model, spec = sm.MODELS["categorical"], {"K": 4}
    rng = np.random.default_rng(21)
    n = 150
    X = rng.normal(size=(n, 2))
    y = rng.integers(0, 4, n)
    alpha = rng.uniform(0.05, 1.0, n)
    pre = model.sampler_pre(sm.whitening(X), y, spec)
    data = model.stan_data(y, X, alpha, spec, save_log_lik=False, pre=pre)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pf = stan.build(load_program(model.program), data=data, random_seed=1)
        p0 = stan.build(load_program(model.program), data=dict(data, alpha=np.zeros(n)),
                        random_seed=1)
    k = _n_unconstrained("categorical", 2, 4)
    top = []
    for scale in (0.5, 0.5, 60.0, 60.0):
        theta = rng.normal(0, scale, k).tolist()
        draws = _unflatten(pf, pf.constrain_pars(theta), model.params)
        eta = model._eta(draws, slice(None), X)                   # noqa: SLF001
        top.append(float(eta.max()))
        ll = model.loglik(draws, slice(None), y, X, spec)[0]
        got = pf.log_prob(theta) - p0.log_prob(theta)
        assert np.isfinite(got)
        assert got == pytest.approx(float(alpha @ ll), rel=1e-9, abs=1e-9)
    assert max(top[:2]) < 300 < min(top[2:]), top                # both branches were taken


@pytest.mark.parametrize("family", sorted(STAN_CASES))
def test_sampler_inits_are_the_natural_inits_in_the_whitened_coordinates(family):
    """The per-record programs sample (at, bt) with b = L bt, a = at - xbar' b (ordinal:
    c = ct + xbar' b; categorical: B = L Bt, a = at - B' xbar).
    (1) ``whitening``: (X - xbar) L has identity covariance.
    (2) ``sampler_inits`` puts natural inits into those coordinates: they map back through the
    program's transformed parameters to themselves."""
    import stan

    case = STAN_CASES[family]
    model = sm.MODELS[family]
    rng = np.random.default_rng(11)
    X = np.c_[rng.normal(3.0, 2.0, N), rng.normal(0, 1, N)]
    X[:, 1] += 0.9 * X[:, 0]                            # correlated, off-centre predictors
    y = np.asarray(case["y"])
    w = sm.whitening(X)
    Z = (X - w["xbar"]) @ w["L"]
    np.testing.assert_allclose(Z.T @ Z / N, np.eye(2), atol=1e-10)
    pre = model.sampler_pre(w, y, case["spec"])         # categorical: adds Q
    if family == "categorical":                         # not the identity: the test bites
        assert np.abs(pre["Q"] - np.eye(len(pre["Q"]))).max() > 0.5
    # (2) inits round trip through the Stan program
    nat = model.inits(y, X, case["spec"], 2, rng)
    for d0 in nat:                                      # inits far from zero in every slot
        for k in d0:
            d0[k] = (np.asarray(d0[k], float) + rng.normal(0, 0.3, np.shape(d0[k]))).tolist()
        if family == "ordinal":
            d0["c"] = np.sort(d0["c"]).tolist()
    smp = model.sampler_inits(nat, case["spec"], pre)
    data = model.stan_data(y, X, np.ones(N), case["spec"], False, pre=pre)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = stan.build(load_program(model.program_for(case["spec"])), data=data,
                           random_seed=1)
    for d_nat, d_smp in zip(nat, smp, strict=True):
        back = _unflatten(post, post.constrain_pars(post.unconstrain_pars(d_smp)), model.params)
        for k in model.params:
            if family == "normal" and k == "s" or family == "negbin" and k == "phi":
                continue                                # scale parameters are not transformed
            np.testing.assert_allclose(back[k][0], np.asarray(d_nat[k], float), rtol=1e-9,
                                       atol=1e-9)


@pytest.mark.parametrize("family", sorted(STAN_CASES))
def test_sampler_inits_without_predictors(family):
    """A step with no predictors (the first variable, no public columns): the inits convert
    (P = 0) and the program starts from them at the same point."""
    import stan

    case = STAN_CASES[family]
    model = sm.MODELS[family]
    X = np.zeros((N, 0))
    y = np.asarray(case["y"])
    nat = model.inits(y, X, case["spec"], 1, np.random.default_rng(2))
    smp = model.sampler_inits(nat, case["spec"], sm.identity_pre(0))
    data = model.stan_data(y, X, np.ones(N), case["spec"], False, pre=sm.identity_pre(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = stan.build(load_program(model.program_for(case["spec"])), data=data,
                           random_seed=1)
    back = _unflatten(post, post.constrain_pars(post.unconstrain_pars(smp[0])), model.params)
    for k in model.params:
        np.testing.assert_allclose(back[k][0].ravel(), np.ravel(np.asarray(nat[0][k], float)),
                                   rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ a mixed-type design
def _mixed(n=300, seed=5):
    rng = np.random.default_rng(seed)
    st = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    x = rng.normal(size=n)
    inc = np.exp(10 + 0.5 * x + 0.3 * rng.normal(size=n))
    score = np.clip(500 + 80 * x + 40 * rng.normal(size=n), 200, 1000).round().astype(int)
    kids = np.minimum(rng.poisson(np.exp(0.5 + 0.3 * x)), 8)
    own = rng.uniform(size=n) < special.expit(0.8 * x)
    reg = pd.Categorical(rng.choice(["N", "S", "E", "W"], n))
    rating = pd.Categorical(np.clip(np.round(2 + x + 0.7 * rng.normal(size=n)), 1, 4).astype(int),
                            categories=[1, 2, 3, 4], ordered=True)
    Nh = {"a": 5000, "b": 3000, "c": 1000}
    cnt = pd.Series(st).value_counts()
    # adjusted weights (a nonresponse-style factor, mean 1 within each stratum, so each
    # stratum's weights still sum to N_h): they vary within the strata, so Sequential models
    # them (the weights step); design weights N_h / n_h alone would pass through unmodelled
    adj = pd.Series(np.exp(0.15 * rng.normal(size=n)))
    adj = (adj / adj.groupby(st).transform("mean")).to_numpy()
    df = pd.DataFrame({"stratum": st, "x_cont": x, "income": inc, "score": score,
                       "kids": kids, "owner": own, "region": reg, "rating": rating,
                       "fpc": [Nh[s] for s in st],
                       "w": np.array([Nh[s] / cnt[s] for s in st]) * adj})
    return df, SurveyDesign(df, strata="stratum", weights="w", fpc="fpc")


VARS = [{"name": "x_cont", "type": "continuous"},
        {"name": "income", "type": "positive"},
        {"name": "score", "type": "bounded", "bounds": (200, 1000)},
        {"name": "kids", "type": "count", "bounds": (0, 8)},
        {"name": "owner", "type": "binary"},
        {"name": "region", "type": "categorical"},
        {"name": "rating", "type": "ordinal"}]


@pytest.fixture(scope="module")
def tuned():
    df, des = _mixed()
    syn = Sequential(variables=VARS, target_epsilon=40.0, m=3, random_state=11,
                     population_size=9000, **FAST)
    _quiet(syn.fit, des)
    rel = _quiet(syn.release)
    return df, des, syn, rel


def test_epsilon_composes_over_variables_and_each_bound_under_its_target(tuned):
    df, des, syn, rel = tuned
    m, eps = 3, 40.0
    steps = syn.steps_
    assert [s.name for s in steps] == [v["name"] for v in VARS] + ["w"]
    shares = np.array([s.share for s in steps])
    np.testing.assert_allclose(shares, 1 / 8)
    # each step's bound, recomputed here from its released fit's draws with scipy densities
    indep = []
    for step, r in zip(steps, syn.step_fits_, strict=True):
        assert r["delta_alpha"] <= eps * step.share / (2 * m) + 1e-12, step.name
        # not wastefully low either. The final aims at target x exp(-1.645 x the spread of
        # the bound across chains); with FAST's 2 chains of 150 draws that spread is wide
        # (since run_stan orders draws by real chain: e.g. 0.756 vs 0.586, a margin of
        # 0.30), and a final fit lands up to ~2x off its aim at this size, so the floor
        # is 35% of the target: a final below it would mean a broken tuning path
        assert r["delta_alpha"] >= 0.35 * eps * step.share / (2 * m), step.name
        indep.append(_independent_bound(syn, step, r, df))
    # each step's bound against scipy's densities (scipy's log of a difference of cdfs loses
    # ~1e-9 in the tails that our log_diff_exp keeps: hence 1e-8), then the composition exactly
    np.testing.assert_allclose([r["delta_alpha"] for r in syn.step_fits_], indep, rtol=1e-8)
    da = np.array([r["delta_alpha"] for r in syn.step_fits_])
    targets = np.array([eps * step.share / (2 * m) for step in steps])
    assert (da <= targets + 1e-12).all()
    # the account charges each step's public target per released draw (issue 35: the
    # achieved bounds, at most the targets, stay confidential)
    total = 2 * m * float(targets.sum())
    rec = rel.privacy
    assert rec.epsilon == pytest.approx(total, rel=1e-12) and rec.epsilon == pytest.approx(eps)
    assert rec.epsilon >= 2 * m * sum(indep) - 1e-9
    led = [e for e in rec.ledger if e.get("step") == "release"]
    assert [e["variable"] for e in led] == [s.name for s in steps]
    np.testing.assert_allclose([e["epsilon"] for e in led], 2 * m * targets, rtol=1e-12)
    np.testing.assert_allclose([e["delta_alpha"] for e in led], targets, rtol=1e-12)
    # the budget account: the release charged every variable's draws
    assert syn.epsilon_spent_ == pytest.approx(total, rel=1e-12)
    assert rec.family == "pseudo_posterior_sequential" and not rec.differentially_private
    assert rec.guarantee_class == "asymptotic database-local (epsilon, delta)-pDP"
    assert f"{rec.epsilon:.4g}" in rec.guarantee_text


def _independent_bound(syn, step, r, df):
    """max_i max_s |alpha_i log p_i| from the step's final draws, with scipy.stats densities
    and the design matrix rebuilt from the confidential data."""
    res, alpha = r["fit"], r["alpha"]
    X = _design_matrix(syn, step, df)[r["rows"]]
    sp = step.spec
    if step.role == "weights":
        y = df["w"].to_numpy()
    else:
        y = df[step.column].to_numpy()[r["rows"]]
    if step.family == "normal":
        yy = np.log(y.astype(float)) if step.type in ("positive",) or step.role == "weights" \
            else y.astype(float)
        mu = sp["loc"] + sp["scale"] * (res["a"][:, None] + res["b"] @ X.T)
        sig = sp["scale"] * res["s"][:, None]
        a = -np.inf if sp["lo"] is None else (sp["lo"] - mu) / sig
        b = np.inf if sp["hi"] is None else (sp["hi"] - mu) / sig
        ll = stats.truncnorm.logpdf(yy, a, b, loc=mu, scale=sig)
    elif step.family == "negbin":
        mu = np.exp(sp["eta0"] + res["a"][:, None] + res["b"] @ X.T)
        phi = res["phi"][:, None]
        k = y.astype(float) - sp["shift"]
        ll = stats.nbinom.logpmf(k, phi, phi / (phi + mu))
        if sp["hi"] is not None:
            ll = ll - stats.nbinom.logcdf(sp["hi"], phi, phi / (phi + mu))
    elif step.family == "logistic":
        codes = pd.Index(step.levels, dtype=object).get_indexer(pd.Series(y).astype(object))
        p = special.expit(res["a"][:, None] + res["b"] @ X.T)
        ll = stats.bernoulli.logpmf(codes, p)
    elif step.family == "ordinal":
        codes = pd.Index(step.levels, dtype=object).get_indexer(pd.Series(y).astype(object))
        eta = res["b"] @ X.T
        F = stats.logistic.cdf(res["c"][:, None, :] - eta[..., None])
        cdf = np.concatenate([np.zeros((*eta.shape, 1)), F, np.ones((*eta.shape, 1))], -1)
        idx = codes[None, :, None].repeat(eta.shape[0], 0)
        ll = np.log(np.take_along_axis(cdf, idx + 1, -1)[..., 0]
                    - np.take_along_axis(cdf, idx, -1)[..., 0])
    else:
        codes = pd.Index(step.levels, dtype=object).get_indexer(pd.Series(y).astype(object))
        eta = res["a"][:, None, :] + np.einsum("np,spk->snk", X, res["B"])
        eta = np.concatenate([np.zeros((*eta.shape[:2], 1)), eta], axis=-1)
        ll = np.log(np.take_along_axis(special.softmax(eta, -1),
                                       codes[None, :, None].repeat(eta.shape[0], 0), -1)[..., 0])
    return float(np.max(alpha * np.abs(ll).max(axis=0)))


def _design_matrix(syn, step, df):
    """Public columns (strata one-hot) then the confidential earlier variables, encoded."""
    cols = [syn._prep_["X_pub"]]
    for s in syn.steps_:
        if s is step:
            break
        cols.append(syn._encode_step(s, df))  # noqa: SLF001
    return np.column_stack(cols)


def test_types_ranges_and_design_in_every_synthetic_set(tuned):
    df, des, syn, rel = tuned
    assert rel.kind == "partial" and len(rel.designs) == 3
    for d in rel.designs:
        f = d.data
        assert len(f) == len(df)
        assert d.strata_vars == ["stratum"] and d.fpc_vars == ["fpc"]
        np.testing.assert_allclose(f["w"].sum(), 9000)
        # the fpc is the stratum's population size, carried
        assert (f.groupby("stratum")["fpc"].nunique() == 1).all()
        assert dict(zip(f["stratum"], f["fpc"], strict=True)) == dict(
            zip(df["stratum"], df["fpc"], strict=True))
        assert f["income"].gt(0).all() and f["income"].dtype == float
        assert f["score"].between(200, 1000).all()
        assert pd.api.types.is_integer_dtype(f["score"])
        assert pd.api.types.is_integer_dtype(f["kids"]) and f["kids"].between(0, 8).all()
        assert f["owner"].dtype == bool
        assert isinstance(f["region"].dtype, pd.CategoricalDtype)
        assert list(f["region"].cat.categories) == list(df["region"].cat.categories)
        assert f["rating"].dtype == df["rating"].dtype and f["rating"].cat.ordered
        assert f.notna().all().all()
    # stratum sizes kept (partial synthesis: released as collected)
    assert rel.designs[0].data["stratum"].value_counts().equals(df["stratum"].value_counts())


def test_draws_given_synthetic_not_confidential_predecessors():
    """B ~ A + noise, no public predictors: B* must follow the synthetic A*, and be unrelated
    to the confidential A of the same record (a synthesizer drawing B given confidential A
    fails here)."""
    rng = np.random.default_rng(3)
    n = 300
    a = rng.normal(size=n)
    df = pd.DataFrame({"A": a, "B": a + 0.2 * rng.normal(size=n), "w": np.full(n, 10.0)})
    des = SurveyDesign(df, weights="w")
    syn = Sequential(variables=[{"name": "A", "type": "continuous"},
                                {"name": "B", "type": "continuous"}],
                     risk_weights="none", m=2, random_state=4, **FAST)
    _quiet(syn.fit, des)
    for f in syn.synthesize(2):   # confidential row order
        assert np.corrcoef(f["A"], f["B"])[0, 1] > 0.9
        assert abs(np.corrcoef(f["B"], df["A"])[0, 1]) < 0.25


def test_missing_refused_or_modelled():
    rng = np.random.default_rng(8)
    n = 300
    x = rng.normal(size=n)
    y = np.round(np.clip(10 + 3 * x + 2 * rng.normal(size=n), 0, 20))
    ys = pd.Series(y).astype("Int64")
    miss = rng.uniform(size=n) < 0.25
    ys[miss] = pd.NA
    # weights that vary (a constant weight would be a design weight, released unmodelled)
    df = pd.DataFrame({"x": x, "y": ys, "w": 5.0 * np.exp(0.1 * rng.normal(size=n))})
    des = SurveyDesign(df, weights="w")
    vars_ = [{"name": "x", "type": "continuous"},
             {"name": "y", "type": "count", "bounds": (0, 20)}]
    with pytest.raises(ValueError, match=r"'y' has missing values at rows \[") as e:
        Sequential(variables=vars_, **FAST).fit(des)
    assert "missing='model'" in str(e.value)
    # alpha = 1: the mechanics of the indicator (Lipschitz weights at c = 1 shrink the rarer
    # class: the missing share fell from 25% to 7% in a run, a property of risk weighting)
    syn = Sequential(variables=vars_, missing="model", risk_weights="none", m=2, random_state=2,
                     **FAST)
    _quiet(syn.fit, des)
    assert [s.name for s in syn.steps_] == ["x", "y (missing)", "y", "w"]
    np.testing.assert_allclose([s.share for s in syn.steps_], [1 / 3, 1 / 6, 1 / 6, 1 / 3])
    for f in syn.synthesize(2):
        assert f["y"].dtype == "Int64"
        share = f["y"].isna().mean()
        assert 0.12 < share < 0.38        # 25% +- 4 SE of a proportion at n = 300
        assert f["y"].dropna().between(0, 20).all()


@pytest.mark.parametrize("bad, match", [
    ([{"name": "nope", "type": "continuous"}], "not in the design's data"),
    ([{"name": "x", "type": "gaussian"}], "type 'gaussian' is not one of"),
    ([{"name": "x", "type": "bounded"}], "needs public bounds"),
    ([{"name": "x", "type": "bounded", "bounds": (-0.5, 0.5)}], r"rows \[.*outside the declared"),
    ([{"name": "x", "type": "positive"}], "must be > 0"),
    ([{"name": "x", "type": "count"}], "must hold integers"),
])
def test_bad_input_names_column_rows_and_fix(bad, match):
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"x": rng.normal(size=50), "w": np.ones(50)})
    before = df.copy()
    with pytest.raises(ValueError, match=match):
        Sequential(variables=bad, **FAST).fit(SurveyDesign(df, weights="w"))
    pd.testing.assert_frame_equal(df, before)


APISTRAT_VARS = [
    {"name": "api99", "type": "bounded", "bounds": (200, 1000)},
    {"name": "api00", "type": "bounded", "bounds": (200, 1000)},
    {"name": "growth", "type": "continuous"},
    {"name": "meals", "type": "count", "bounds": (0, 100)},
    {"name": "ell", "type": "count", "bounds": (0, 100)},
    {"name": "mobility", "type": "count", "bounds": (0, 100)},
    {"name": "emer", "type": "integer", "bounds": (0, 100)},
    {"name": "enroll", "type": "positive"},
    {"name": "avg.ed", "type": "bounded", "bounds": (1, 5)},
    {"name": "sch.wide", "type": "binary"},
    {"name": "comp.imp", "type": "binary"},
    {"name": "awards", "type": "binary"},
]


@pytest.mark.slow  # default tier: test_types_ranges_and_design_in_every_synthetic_set (all 7 types)
def test_apistrat_twelve_variables_in_type_range_and_design(api):
    """R's apistrat: 12 variables of 5 types in one release; every value in its type and
    range; the strata and fpc in every synthetic design; epsilon per variable in the ledger."""
    df = api["apistrat"]
    des = SurveyDesign(df, strata="stype", weights="pw", fpc="fpc")
    syn = Sequential(variables=APISTRAT_VARS, m=2, random_state=7, population_size=6194,
                     **{**FAST, "draws": 100, "warmup": 100})
    rel = _quiet(lambda: syn.fit(des).release())
    assert len({v["type"] for v in APISTRAT_VARS}) >= 4
    led = [e for e in rel.privacy.ledger if e.get("step") == "release"]
    # pw = N_h / n_h is design information: released as collected, no ledger step
    assert [e["variable"] for e in led] == [v["name"] for v in APISTRAT_VARS]
    assert rel.privacy.epsilon == pytest.approx(sum(e["epsilon"] for e in led), rel=1e-12)
    for d in rel.designs:
        f = d.data
        assert d.strata_vars == ["stype"] and d.fpc_vars == ["fpc"]
        assert set(f.columns) == {v["name"] for v in APISTRAT_VARS} | {"stype", "fpc", "pw"}
        np.testing.assert_allclose(f["pw"].sum(), 6194)
        for v in APISTRAT_VARS:
            x, src = f[v["name"]], df[v["name"]]
            assert x.notna().all(), v["name"]
            if v["type"] == "binary":
                assert x.dtype == src.dtype and set(x) <= set(src), v["name"]
                continue
            assert pd.api.types.is_integer_dtype(x) == pd.api.types.is_integer_dtype(src), \
                v["name"]
            lo, hi = v.get("bounds", (None, None))
            if lo is not None:
                assert x.min() >= lo and x.max() <= hi, v["name"]
            if v["type"] == "positive":
                assert x.min() > 0
        # the design is usable: a stratified mean with fpc has a finite SE
        est = d.mean("api00")
        assert np.isfinite(est["se"].iloc[0]) and est["se"].iloc[0] > 0


def test_release_config_sequential_end_to_end(tmp_path):
    """`[synthesizer] method = "sequential"` with [[variables]]: the example config (short
    chains) runs through the pipeline; the public manifest carries the composed guarantee
    and one ledger entry per variable and the weights."""
    import json

    from surveysynth.pipeline import run_release
    from surveysynth.release_config import example_config, example_data

    text = example_config("sequential").replace(
        "chains = 4, draws = 1000, warmup = 1000",
        "chains = 2, draws = 150, warmup = 150, allow_unconverged = true")
    (tmp_path / "example.csv").write_text(example_data().to_csv(index=False))
    cfg = tmp_path / "release.toml"
    cfg.write_text(text)
    out = _quiet(run_release, cfg, quiet=True)
    man = json.loads((out / "public" / "manifest.json").read_text())
    rec = man["privacy"]
    assert man["method"] == "sequential" and rec["family"] == "pseudo_posterior_sequential"
    led = [e for e in rec["ledger"] if e.get("step") == "release"]
    assert [e["variable"] for e in led] == ["gender", "salary", "visits", "weight"]
    assert rec["epsilon"] == pytest.approx(sum(e["epsilon"] for e in led), rel=1e-12)
    assert rec["epsilon"] <= 30.0
    files = sorted((out / "public" / "synthetic").rglob("*.parquet"))
    assert files
    syn = pd.concat([pd.read_parquet(f) for f in files])
    assert syn["visits"].between(0, 60).all() and (syn["salary"] > 0).all()
    # the confidential report's joint utility section (issue 22 item 5; its numbers are
    # tested in tests/test_report_joint_utility.py); none of it in the public folder
    html = (out / "confidential" / "report.html").read_text()
    assert "Utility: joint distribution of the synthesized variables" in html
    assert "pMSE with all pairwise interactions" in html and "k-marginal scores" in html
    assert "Regression salary" in html and "gender[T.male]" in html
    assert "could not be compared" not in html and "Joint utility could not" not in html
    public = "".join(p.read_text(errors="ignore") for p in (out / "public").rglob("*.json"))
    assert "pMSE" not in public and "k-marginal" not in public


# ------------------------------------------------------------------ design weights (pw = N_h / n_h)
def test_weights_are_design_exact_check_per_stratum_fpc_cell(api):
    """The decision itself, exactly: apistrat's pw (constant within stype x fpc) is design
    information; the same weights with ONE record moved by one ulp are not (a check up to a
    tolerance, or on fewer columns, would pass that one through unmodelled); weights constant
    within strata but not overall need the cells (a check of global constancy fails there)."""
    from surveysynth.synth.sequential import weights_are_design

    df = api["apistrat"]
    before = df.copy()
    w = df["pw"].to_numpy(float)
    assert weights_are_design(df, w, ["stype", "fpc"])
    assert weights_are_design(df, w, ["stype"])
    assert not weights_are_design(df, w, [])          # pw differs between strata
    w1 = w.copy()
    w1[17] = np.nextafter(w1[17], np.inf)              # one record, one ulp
    assert not weights_are_design(df, w1, ["stype", "fpc"])
    adj = w * np.random.default_rng(5).uniform(0.8, 1.25, len(w))   # nonresponse-like
    assert not weights_are_design(df, adj, ["stype", "fpc"])
    assert weights_are_design(df, np.full(len(w), 31.0), [])        # equal weights, no design
    pd.testing.assert_frame_equal(df, before)


def _api_two(df):
    return [{"name": "api00", "type": "bounded", "bounds": (200, 1000)},
            {"name": "sch.wide", "type": "binary"}]


def test_apistrat_design_weights_pass_through_without_budget(api):
    """apistrat's pw = N_h / n_h: released exactly as collected in every set (no model, no
    step, no ledger entry, no share), listed as published without budget; a mutant that still
    models the weights (a "pw" step, smoothed weights that differ) fails here."""
    df = api["apistrat"]
    des = SurveyDesign(df, strata="stype", weights="pw", fpc="fpc")
    syn = Sequential(variables=_api_two(df), target_epsilon=30.0, m=2, random_state=3,
                     **{**FAST, "draws": 100, "warmup": 100})
    _quiet(syn.fit, des)
    assert syn.design_weights_ is True
    assert [s.name for s in syn.steps_] == ["api00", "sch.wide"]
    np.testing.assert_allclose([s.share for s in syn.steps_], [0.5, 0.5])
    for f in syn.synthesize(2):                  # confidential row order: pw unchanged, exactly
        np.testing.assert_array_equal(f["pw"].to_numpy(), df["pw"].to_numpy())
    rel = _quiet(syn.release)
    rec = rel.privacy
    led = [e for e in rec.ledger if e.get("step") == "release"]
    assert [e["variable"] for e in led] == ["api00", "sch.wide"]
    assert rec.epsilon == pytest.approx(sum(e["epsilon"] for e in led), rel=1e-12)
    assert rec.facts["weights_step"] == "design"
    assert any("'pw'" in p["item"] for p in rec.published_without_budget)
    nh = df["stype"].value_counts()
    for d in rel.designs:                        # permuted rows: pw is the row's stratum's N_h/n_h
        f = d.data
        got = f.groupby("stype", observed=True)["pw"].agg(["min", "max"])
        assert (got["min"] == got["max"]).all()
        ref = df.groupby("stype", observed=True)["pw"].first()
        np.testing.assert_array_equal(got["min"].to_numpy(), ref[got.index].to_numpy())
        np.testing.assert_allclose(got["min"], (f.groupby("stype", observed=True)["fpc"].first()
                                                / nh[got.index]), rtol=1e-6)  # float32 pw
    # a public N rescales by the one public factor N / sum(pw), nothing else
    syn2 = Sequential(variables=_api_two(df), m=2, random_state=3, population_size=6194,
                      **{**FAST, "draws": 100, "warmup": 100})
    _quiet(syn2.fit, des)
    w = df["pw"].to_numpy(float)
    np.testing.assert_array_equal(syn2.synthesize(1)[0]["pw"].to_numpy(), w * (6194 / w.sum()))
    # a budget share for design weights is refused, naming the column and the fix
    with pytest.raises(ValueError, match=r"'pw' is given a share.*design weights.*remove it"):
        Sequential(variables=_api_two(df), target_epsilon=30.0,
                   budget={"api00": 0.4, "sch.wide": 0.4, "pw": 0.2}, **FAST).fit(des)


def test_adjusted_weights_still_take_the_weights_step(api):
    """Weights that vary within a stratum (pw times a nonresponse-like factor) carry record
    information: they are modelled (a "pw" step with its share and ledger entry) and the
    released weights are model output, not the confidential ones; a mutant that passes every
    weight through unmodelled fails here."""
    df = api["apistrat"].copy()
    df["pw"] = df["pw"] * np.random.default_rng(9).uniform(0.8, 1.25, len(df))
    des = SurveyDesign(df, strata="stype", weights="pw", fpc="fpc")
    syn = Sequential(variables=_api_two(df), target_epsilon=30.0, m=2, random_state=4,
                     **{**FAST, "draws": 100, "warmup": 100})
    _quiet(syn.fit, des)
    assert syn.design_weights_ is False
    assert [s.name for s in syn.steps_] == ["api00", "sch.wide", "pw"]
    rec = _quiet(syn.release).privacy
    led = [e for e in rec.ledger if e.get("step") == "release"]
    assert [e["variable"] for e in led] == ["api00", "sch.wide", "pw"] and led[-1]["epsilon"] > 0
    assert rec.facts["weights_step"] == "modelled"
    assert not any("'pw'" in p["item"] for p in rec.published_without_budget)
    for f in syn.synthesize(2):
        assert not np.isin(f["pw"].to_numpy(), df["pw"].to_numpy()).any()


def test_step_bounds_on_patterns_are_each_records_own_bound():
    """_StepFit.bounds_of works on the distinct (x, y) patterns and maps back: each record gets
    max_s |log p(y_i | x_i, theta_s)| of its own row (numpy, per record, no patterns), and the
    Stan weights are the per-pattern sums of the records' alphas. Kills a map that permutes
    patterns (which the max over all records alone would not see) and counts in place of sums."""
    from surveysynth.synth._stan import StanDraws  # noqa: PLC2701 - the step internals under test
    from surveysynth.synth.sequential import _StepFit  # noqa: PLC2701

    rng = np.random.default_rng(3)
    n, S = 400, 50
    X = np.c_[rng.integers(0, 3, n) - 1.0, rng.integers(0, 2, n)].astype(float)
    y = rng.integers(0, 2, n)
    fit = object.__new__(_StepFit)
    fit.model, fit.step = sm.MODELS["logistic"], type("S", (), {"spec": {}})()
    first, fit.inv = sm.patterns(X, y)
    fit.yu, fit.Xu, fit.n = y[first], X[first], n
    assert len(first) == 12
    draws = {"a": rng.normal(0, 1, S), "b": rng.normal(0, 1, (S, 2))}
    res = StanDraws(draws, 1, S, pd.DataFrame(), {}, ["a", "b"], {})
    own = np.abs(sm.logistic_loglik(y, draws["a"][:, None] + draws["b"] @ X.T)).max(axis=0)
    np.testing.assert_allclose(fit.bounds_of(res), own, rtol=1e-12)
    alpha = rng.uniform(size=n)
    wsum = np.bincount(fit.inv, weights=alpha, minlength=len(first))
    for j in range(len(first)):
        same = (X == fit.Xu[j]).all(axis=1) & (y == fit.yu[j])
        assert wsum[j] == pytest.approx(alpha[same].sum(), rel=1e-12)


# ------------------------------------------------------------ identification-risk weights
def _ir_by_loop(values, groups, r=None):
    """IR^c_i by the definition, record by record (O(n^2)): the share of i's pattern whose value
    is outside [y_i - r|y_i|, y_i + r|y_i|] (r None: whose value differs)."""
    values, groups = np.asarray(values), np.asarray(groups)
    out = np.empty(len(values))
    for i in range(len(values)):
        mates = values[groups == groups[i]]
        if r is None:
            out[i] = np.mean(mates != values[i])
        else:
            out[i] = np.mean(np.abs(mates - values[i]) > r * abs(values[i]))
    return out


def test_step_identification_risk_is_the_definition_on_the_original_scale():
    """Each step's IR^c on the variable's ORIGINAL scale within the known patterns: kills a risk
    computed on the modelled scale (log income, count minus its shift), across patterns, or with
    a ball on category codes."""
    from surveysynth.synth.sequential import step_identification_risk

    df, des = _mixed(n=240, seed=9)
    syn = Sequential(variables=VARS + [{"name": "x_cont2", "type": "count",
                                        "bounds": (3, None)}],
                     risk_weights="identification", known=["stratum"], r=0.1, **FAST)
    df["x_cont2"] = 3 + np.minimum(np.random.default_rng(2).poisson(2, len(df)), 9)
    des = SurveyDesign(df, strata="stratum", weights="w", fpc="fpc")
    cfg = syn._validate_design(des)                      # noqa: SLF001
    cfg["design_weights"] = False
    steps = syn._build_steps(df, des.weights, cfg)       # noqa: SLF001
    groups = pd.factorize(df["stratum"])[0]
    checked = set()
    for step in steps:
        rows, y = syn._response(step, df, np.asarray(des.weights, float))   # noqa: SLF001
        got = step_identification_risk(step, y, groups[rows], 0.1)
        if step.role == "weights":
            orig, r = np.asarray(des.weights, float), 0.1
        elif step.family in ("normal", "negbin"):
            orig, r = pd.to_numeric(df[step.column]).to_numpy(float), 0.1
        else:
            orig, r = df[step.column].astype(str).to_numpy(), None
        np.testing.assert_allclose(got, _ir_by_loop(orig[rows], groups[rows], r), atol=1e-12,
                                   err_msg=step.name)
        checked.add(step.family)
    assert checked == {"normal", "negbin", "logistic", "categorical", "ordinal"}
    # patterns matter: the same values with one pattern give other risks
    step = next(s for s in steps if s.name == "income")
    rows, y = syn._response(step, df, np.asarray(des.weights, float))   # noqa: SLF001
    assert not np.allclose(step_identification_risk(step, y, np.zeros(rows.sum(), int), 0.1),
                           step_identification_risk(step, y, groups[rows], 0.1))


def test_identification_weighted_release_tunes_each_step_and_says_so():
    """risk_weights='identification': every step's alpha is clip(c (1 - D_i), 0, 1) with D_i its
    records' normalised identification risks (recomputed here), its bound <= its share of the
    target, epsilon composed as with the Lipschitz weights, and the guarantee names the known
    pattern and r. Kills: the Lipschitz bounds used in place of the risks, an untuned c, a label
    that hides which weights were used."""
    from surveysynth.privacy.lipschitz import lipschitz_weights

    df, des = _mixed(n=240, seed=3)
    vars3 = [VARS[1], VARS[3], VARS[4]]               # positive, count, binary
    # random_state: the weights step's bound sits near its target (1.875) at these short
    # chains; measured before issue 38's encoder (public predictors then in order of first
    # appearance) seeds 6, 7, 8 failed to tune and 5 passed; since (R's order) 5, 6, 7 fail, 8
    # passes. The seed is incidental to what this test checks.
    syn = Sequential(variables=vars3, target_epsilon=30.0, m=2, random_state=8,
                     population_size=9000, risk_weights="identification", known=["stratum"],
                     **FAST)
    _quiet(syn.fit, des)
    rel = _quiet(syn.release)
    groups = pd.factorize(df["stratum"])[0]
    from surveysynth.synth.sequential import step_identification_risk

    weighted = 0
    for step, r in zip(syn.steps_, syn.step_fits_, strict=True):
        target = 30.0 * step.share / (2 * 2)
        assert r["delta_alpha"] <= target + 1e-12, step.name
        rows, y = syn._response(step, df, np.asarray(des.weights, float))   # noqa: SLF001
        risk = step_identification_risk(step, y, groups[rows], 0.2)
        if r["c"] is None:                          # alpha = 1 branch: target already met
            np.testing.assert_array_equal(r["alpha"], 1.0)
            continue
        weighted += 1
        base = np.where(np.isfinite(r["delta"]), risk, np.inf)
        np.testing.assert_allclose(r["alpha"], lipschitz_weights(None, c=r["c"], bounds=base),
                                   atol=1e-15, err_msg=step.name)
        lips = lipschitz_weights(None, c=r["c"], bounds=r["delta"])
        assert not np.allclose(r["alpha"], lips), step.name
    assert weighted >= 2
    rec = rel.privacy
    targets = np.array([r["target"] for r in syn.step_fits_])
    # the account charges each step's public target (the achieved bounds are at most it)
    assert rec.epsilon == pytest.approx(2 * 2 * targets.sum(), rel=1e-12)
    assert rec.epsilon == pytest.approx(30.0, rel=1e-12)
    assert rec.facts["alpha_source"] == "identification_tuned"
    assert "identification risk" in rec.guarantee_text and "(stratum)" in rec.guarantee_text
    assert "r = 0.2" in rec.guarantee_text and not rec.differentially_private
    assert rec.guarantee_class == "asymptotic database-local (epsilon, delta)-pDP"


@pytest.mark.parametrize("kw, match", [
    (dict(known=["stratum"]), "apply only with risk_weights='identification'"),
    (dict(r=0.3), "apply only with risk_weights='identification'"),
    (dict(risk_weights="identification", known=["income"]), r"known: \['income'\] are synthesized"),
    (dict(risk_weights="identification", known=["nope"]), r"\['nope'\] not found in the design's data"),
    (dict(risk_weights="identification", r=0), r"r must be None or a number > 0"),
])
def test_identification_settings_refused_with_the_fix(kw, match):
    df, des = _mixed(n=60, seed=1)
    with pytest.raises(ValueError, match=match):
        Sequential(variables=[VARS[1]], **{**FAST, **kw}).fit(des)


def test_release_config_passes_identification_settings_to_sequential():
    """[synthesizer] known / r and init.risk_weights reach Sequential (no MCMC): kills a
    pipeline that drops them for method = "sequential" (they were mixture / NB keys), and the
    schema refuses neither."""
    import tomllib

    from surveysynth.pipeline import _construct  # noqa: PLC2701 - the settings builder
    from surveysynth.release_config import check_keys, example_config

    cfg = tomllib.loads(example_config("sequential"))
    s = cfg["synthesizer"]
    s.update(known=["gender"], r=0.3)
    s.setdefault("init", {})["risk_weights"] = "identification"
    check_keys(cfg)
    syn = _construct("sequential", {**s, "variables": cfg["variables"]})
    assert (syn.risk_weights, syn.known, syn.r) == ("identification", ["gender"], 0.3)


# ------------------------------------------------------------------ bounded shares on the logit
def test_logit_scale_round_trip_and_range():
    """t(y) = log((y - lo + e) / (hi - y + e)), e = (hi - lo) / 200, and its inverse: exact on
    the data, every real maps into [lo, hi] (no overflow at |t| of 800), and the truncation
    points are t(lo), t(hi). Kills a plain logit (infinite at the bounds), a forgotten offset,
    and an inverse that leaves the range."""
    from surveysynth.synth.sequential import _from_model, _to_model  # noqa: PLC2701

    spec = {"tf": "logit", "tf_lo": 0.0, "tf_hi": 100.0, "tf_e": 0.5}
    y = np.array([0.0, 0.5, 1.0, 4.0, 22.86, 50.0, 99.0, 100.0])
    t = _to_model(spec, y)
    np.testing.assert_allclose(t, np.log((y + 0.5) / (100.5 - y)), rtol=1e-14)
    np.testing.assert_allclose(_from_model(spec, t), y, atol=1e-10)
    wild = np.r_[np.linspace(-800, 800, 1001), t]
    back = _from_model(spec, wild)
    assert np.isfinite(back).all() and back.min() >= 0.0 and back.max() <= 100.0
    assert t[0] == pytest.approx(np.log(0.5 / 100.5)) and t[-1] == pytest.approx(-t[0])


def test_logit_step_models_the_logit_and_its_risk_is_on_the_original_scale():
    from surveysynth.synth.sequential import step_identification_risk

    df, des = _mixed(n=240, seed=9)
    df["share"] = np.clip(np.round(100 * np.random.default_rng(4).beta(0.6, 3, len(df))), 0, 100)
    des = SurveyDesign(df, strata="stratum", weights="w", fpc="fpc")
    syn = Sequential(variables=[{"name": "share", "type": "bounded", "bounds": (0, 100),
                                 "scale": "logit"}], risk_weights="identification",
                     known=["stratum"], r=0.1, **FAST)
    cfg = syn._validate_design(des)                      # noqa: SLF001
    cfg["design_weights"] = True
    step = syn._build_steps(df, des.weights, cfg)[0]     # noqa: SLF001
    v = df["share"].to_numpy(float)
    t_lo, t_hi = np.log(0.5 / 100.5), np.log(100.5 / 0.5)
    assert (step.spec["lo"], step.spec["hi"]) == pytest.approx((t_lo, t_hi))
    rows, y = syn._response(step, df, np.asarray(des.weights, float))   # noqa: SLF001
    np.testing.assert_allclose(y, np.log((v + 0.5) / (100.5 - v)), rtol=1e-13)
    groups = pd.factorize(df["stratum"])[0]
    orig = syn._original(step, df, np.asarray(des.weights, float), rows)   # noqa: SLF001
    np.testing.assert_array_equal(orig, v)
    np.testing.assert_allclose(step_identification_risk(step, y, groups, 0.1, orig),
                               _ir_by_loop(v, groups, 0.1), atol=1e-12)
    # from the modelled scale alone the inverse's rounding can move values on a ball's edge
    # (integers 10 and 11 at r = 0.1): the fit passes the collected values


@pytest.mark.parametrize("var, match", [
    ({"name": "income", "type": "positive", "scale": "logit"}, "type 'bounded' only"),
    ({"name": "score", "type": "bounded", "bounds": (200, 1000), "scale": "probit"},
     "choose 'identity'"),
])
def test_scale_setting_refused_with_the_fix(var, match):
    df, des = _mixed(n=60)
    with pytest.raises(ValueError, match=match):
        Sequential(variables=[var], **FAST).fit(des)


def test_logit_share_release_in_range_and_says_its_scale():
    """Real Stan: a skewed share (mass near 0) synthesized on the logit scale lands in its
    bounds, keeps integers, and the public notes name the scale of its log density."""
    df, des = _mixed(n=240, seed=9)
    df["share"] = np.clip(np.round(100 * np.random.default_rng(4).beta(0.6, 3, len(df))),
                          0, 100).astype(int)
    des = SurveyDesign(df, strata="stratum", weights="w", fpc="fpc")
    syn = Sequential(variables=[{"name": "share", "type": "bounded", "bounds": (0, 100),
                                 "scale": "logit"}], target_epsilon=30.0, m=2, random_state=3,
                     **FAST)
    rel = _quiet(lambda: syn.fit(des).release())
    for d in rel.designs:
        x = d.data["share"]
        assert pd.api.types.is_integer_dtype(x) and x.min() >= 0 and x.max() <= 100
    notes = " ".join(rel.privacy.notes) if hasattr(rel.privacy, "notes") else str(rel.privacy)
    assert "empirical logit" in notes and "for share" in notes
