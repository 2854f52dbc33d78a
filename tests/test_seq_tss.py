"""Truncated normal steps of Sequential on sufficient statistics (issue 39 item 2):
seq_normal_tss.stan against the per-record seq_normal.stan and against scipy's truncated normal.

The weighted log likelihood of a truncated normal splits into the untruncated kernel (the weighted
sums W, G, h, q of seq_normal_ss) and the normaliser sum_d alpha_d log Z(x_d) over the distinct
predictor rows. The numpy reference below also computes three wrong versions (kept as mutants);
the Stan program matching the right one and not the mutants is what kills them: the normaliser
weighted by counts instead of summed alphas, the normaliser left out, and the standardised s in
place of sigma = scale * s inside Z.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from surveysynth.design import SurveyDesign
from surveysynth.synth import _seq_models as sm  # noqa: PLC2701 - the densities under test
from surveysynth.synth._stan import load_program  # noqa: PLC2701
from surveysynth.synth.sequential import Sequential

LO, HI, LOC, SCALE = 18.0, 90.0, 47.0, 15.0      # an age-like bounded variable
BOUNDS = {"both": (LO, HI), "lo_only": (LO, None), "hi_only": (None, HI)}


def _build(program: str, data: dict):
    import stan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stan.build(load_program(program), data=data, random_seed=1)


def _case(predictors: str, n: int, rng: np.random.Generator):
    """(X, y): few distinct predictor rows (a binary and a 3-level code, 6 rows), or a
    continuous predictor (every row distinct: nd = n); y ages within [LO, HI], in whole
    years, in steps of 6 with the discrete predictors (so that the (x, y) patterns repeat)."""
    if predictors == "discrete":
        X = np.c_[rng.integers(0, 2, n), rng.integers(0, 3, n) - 1.0].astype(float)
    else:
        X = np.c_[rng.normal(1.0, 2.0, n), rng.integers(0, 2, n)].astype(float)
    mu = 45.0 + 6.0 * X[:, 0] - 4.0 * X[:, 1]
    step = 6.0 if predictors == "discrete" else 1.0
    y = np.clip(step * np.round((mu + 20.0 * rng.standard_normal(n)) / step), LO, HI)
    return X, y


def _reference(theta_nat: dict, y, X, alpha, lo, hi, mutant: str | None = None) -> float:
    """sum_i alpha_i log p_i of the truncated normal (scipy), or a mutant's value."""
    mu = LOC + SCALE * (theta_nat["a"] + X @ theta_nat["b"])
    sigma = SCALE * theta_nat["s"]
    a = -np.inf if lo is None else (lo - mu) / sigma
    b = np.inf if hi is None else (hi - mu) / sigma
    right = stats.truncnorm.logpdf(y, a, b, loc=mu, scale=sigma)
    if mutant is None:
        return float(alpha @ right)
    kernel = stats.norm.logpdf(y, mu, sigma)
    log_z = kernel - right                                     # log Z(x_i) per record
    if mutant == "counts":             # normaliser weighted by counts, not the summed alphas
        return float(alpha @ kernel - log_z.sum())
    if mutant == "no_normaliser":
        return float(alpha @ kernel)
    if mutant == "sigma_standardised":  # Z with s in place of scale * s
        s = theta_nat["s"]
        zb = stats.norm.logcdf((hi - mu) / s) if hi is not None else np.zeros_like(mu)
        za = stats.norm.logcdf((lo - mu) / s) if lo is not None else np.full_like(mu, -np.inf)
        with np.errstate(divide="ignore"):
            lz = zb + np.log1p(-np.exp(za - zb))
        return float(alpha @ (kernel - lz))
    raise ValueError(mutant)


MUTANTS = ("counts", "no_normaliser", "sigma_standardised")


@pytest.mark.parametrize("bounds", sorted(BOUNDS))
@pytest.mark.parametrize("predictors", ["discrete", "continuous"])
def test_tss_log_density_is_seq_normal_and_scipy(predictors, bounds):
    """seq_normal_tss on what Sequential hands Stan (the distinct (x, y) patterns, summed
    alphas) has the log density of seq_normal.stan with each record's own alpha, at random
    parameters in the same whitened coordinates, to 1e-8; and its weighted likelihood
    (log_prob(alpha) - log_prob(alpha = 0): the priors cancel) is scipy's truncated normal.
    The mutants (MUTANTS) differ from it by far more than the tolerance."""
    rng = np.random.default_rng(31)
    n = 150
    X, y = _case(predictors, n, rng)
    lo, hi = BOUNDS[bounds]
    spec = {"lo": lo, "hi": hi, "loc": LOC, "scale": SCALE}
    model = sm.MODELS["normal"]
    assert model.program_for(spec) == "seq_normal_tss"
    assert model.program_for(spec, save_log_lik=True) == "seq_normal"
    alpha = rng.uniform(0.05, 1.0, n)
    first, inv = sm.patterns(X, y)
    wsum = np.bincount(inv, weights=alpha)
    nd = len(np.unique(X, axis=0))
    assert nd == (6 if predictors == "discrete" else n)
    if predictors == "discrete":
        assert len(first) < n / 2                 # the patterns compress this data
    pre = sm.whitening(X)          # a non-trivial sampling parametrization, the same for both
    full = model.stan_data(y, X, alpha, spec, save_log_lik=True, pre=pre)
    comp = model.stan_data(y[first], X[first], wsum, spec, save_log_lik=False, pre=pre)
    assert comp["nd"] == nd and "y" not in comp   # sums and distinct rows only
    pf = _build("seq_normal", full)
    pc = _build("seq_normal_tss", comp)
    p0 = _build("seq_normal_tss", dict(comp, W=0.0, G=np.zeros_like(comp["G"]),
                                       h=np.zeros_like(comp["h"]), q=0.0,
                                       alpha_d=np.zeros(nd)))
    # two of the mutants as wrong data to the real program: the record counts per distinct
    # predictor row in place of the summed alphas, and no normaliser (alpha_d = 0)
    counts = np.array([(X == row).all(axis=1).sum() for row in comp["Xd"]], float)
    p_counts = _build("seq_normal_tss", dict(comp, alpha_d=counts))
    p_none = _build("seq_normal_tss", dict(comp, alpha_d=np.zeros(nd)))
    names = ("a", "b", "s")
    gap = dict.fromkeys(MUTANTS, 0.0)
    for _ in range(5):
        theta = rng.normal(0, 0.7, X.shape[1] + 2).tolist()
        lf, lc = pf.log_prob(theta), pc.log_prob(theta)
        assert np.isfinite(lf)
        assert lc == pytest.approx(lf, rel=1e-10, abs=1e-8)
        flat = np.asarray(pc.constrain_pars(theta), float)
        nat = {k: flat[[i for i, c in enumerate(pc.constrained_param_names)
                        if c == k or c.startswith(k + ".")]] for k in names}
        nat["a"], nat["s"] = float(nat["a"][0]), float(nat["s"][0])
        ll = lc - p0.log_prob(theta)
        ref = _reference(nat, y, X, alpha, lo, hi)
        assert ll == pytest.approx(ref, rel=1e-9, abs=1e-8)
        # the package's numpy density (the bound's) agrees too
        draws = {"a": np.array([nat["a"]]), "b": nat["b"][None, :], "s": np.array([nat["s"]])}
        assert float(alpha @ model.loglik(draws, slice(None), y, X, spec)[0]) == \
            pytest.approx(ref, rel=1e-9)
        # the numpy mutants are what such a program computes
        assert p_counts.log_prob(theta) - p0.log_prob(theta) == pytest.approx(
            _reference(nat, y, X, alpha, lo, hi, "counts"), rel=1e-9, abs=1e-8)
        assert p_none.log_prob(theta) - p0.log_prob(theta) == pytest.approx(
            _reference(nat, y, X, alpha, lo, hi, "no_normaliser"), rel=1e-9, abs=1e-8)
        for m in MUTANTS:
            gap[m] = max(gap[m], abs(_reference(nat, y, X, alpha, lo, hi, m) - ref))
    # each mutant is off by far more than the tolerance at some of these points (at a point
    # whose means lie far inside the bounds Z ~ 1 and the normaliser hardly matters)
    assert min(gap.values()) > 0.1, gap


def test_tss_data_are_the_distinct_rows_with_summed_alphas():
    """alpha_d sums the alphas of the rows sharing a predictor row (not their counts), and the
    whitened sums reproduce sum_i alpha_i (z_i - u_i' beta)^2 at any beta."""
    rng = np.random.default_rng(5)
    n = 80
    X, y = _case("discrete", n, rng)
    alpha = rng.uniform(0.05, 1.0, n)
    spec = {"lo": LO, "hi": HI, "loc": LOC, "scale": SCALE}
    pre = sm.whitening(X)
    d = sm.MODELS["normal"].stan_data(y, X, alpha, spec, save_log_lik=False, pre=pre)
    for k, row in enumerate(d["Xd"]):
        mask = (X == row).all(axis=1)
        assert d["alpha_d"][k] == pytest.approx(alpha[mask].sum(), rel=1e-12)
        assert d["alpha_d"][k] != pytest.approx(float(mask.sum()))
    beta = rng.normal(size=3)
    U = np.c_[np.ones(n), (X - pre["xbar"]) @ pre["L"]]
    z = (y - LOC) / SCALE
    rss = d["q"] - 2 * beta @ d["h"] + beta @ d["G"] @ beta
    assert rss == pytest.approx(float(alpha @ (z - U @ beta) ** 2), rel=1e-10)
    assert (d["has_lo"], d["has_hi"], d["lo"], d["hi"]) == (1, 1, LO, HI)


def test_random_effect_normal_keeps_its_own_program():
    """NormalREModel inherits NormalModel but must not pick up the sums program."""
    spec = {"lo": LO, "hi": HI, "loc": LOC, "scale": SCALE, "J": 4}
    assert sm.MODELS_RE["normal"].program_for(spec) == "seq_normal_re"
    assert sm.MODELS_RE["normal"].program_for(spec, save_log_lik=True) == "seq_normal_re"


def test_sequential_bounded_step_fits_on_sums():
    """Real Stan, short chains: a bounded variable given public predictors is fitted by
    seq_normal_tss, its step's bound stays under its target, and the synthetic values respect
    the public bounds."""
    rng = np.random.default_rng(8)
    n = 240
    region = rng.choice(["N", "S", "E", "W"], n)
    female = rng.integers(0, 2, n)
    age = np.clip(np.round(45 + 5 * (region == "S") - 3 * female + 18 * rng.standard_normal(n)),
                  18, 90).astype(int)
    df = pd.DataFrame({"stratum": np.where(region == "N", "a", "b"),
                       "w": rng.uniform(5, 15, n), "region": pd.Categorical(region),
                       "female": female, "age": age})
    des = SurveyDesign(df, strata="stratum", weights="w")
    syn = Sequential(variables=[{"name": "age", "type": "bounded", "bounds": (18, 90)}],
                     public=["region", "female"], target_epsilon=20.0, m=2, random_state=4,
                     chains=2, draws=150, warmup=150, allow_unconverged=True, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = syn.fit(des).release()
    summ = syn.summary()
    assert summ.loc["age", "stan_program"] == "seq_normal_tss"
    for step, r in zip(syn.steps_, syn.step_fits_, strict=True):
        assert 0 < r["delta_alpha"] <= 20.0 * step.share / (2 * 2) + 1e-12, step.name
    assert rel.privacy.epsilon == pytest.approx(20.0)
    for d in rel.designs:
        x = d.data["age"]
        assert x.min() >= 18 and x.max() <= 90


@pytest.mark.parametrize("bounds", sorted(BOUNDS))
def test_numpy_bound_density_with_normaliser_per_distinct_row(bounds):
    """The per-record log density behind the bound (NormalModel.loglik, which computes the
    normaliser once per distinct predictor row when rows repeat) is scipy's truncated normal
    element by element, for the plain and the random-intercept model (the PSU code a last
    column of X). Kills a normaliser mapped back to the wrong rows, or taken from the first
    draw for all draws."""
    rng = np.random.default_rng(12)
    n, S, J = 90, 7, 3
    X, y = _case("discrete", n, rng)
    lo, hi = BOUNDS[bounds]
    spec = {"lo": lo, "hi": hi, "loc": LOC, "scale": SCALE}
    draws = {"a": rng.normal(0, 0.7, S), "b": rng.normal(0, 0.7, (S, 2)),
             "s": np.exp(rng.normal(0, 0.5, S))}
    sig = SCALE * draws["s"][:, None]

    def ref(mu):
        a = -np.inf if lo is None else (lo - mu) / sig
        b = np.inf if hi is None else (hi - mu) / sig
        return stats.truncnorm.logpdf(y, a, b, loc=mu, scale=sig)

    mu = LOC + SCALE * (draws["a"][:, None] + draws["b"] @ X.T)
    got = sm.MODELS["normal"].loglik(draws, slice(None), y, X, spec)
    np.testing.assert_allclose(got, ref(mu), rtol=1e-10, atol=1e-10)
    # the random-intercept model: u_j per PSU, the normaliser per distinct (x, PSU)
    g = rng.integers(0, J, n)
    dre = dict(draws, sigma_u=np.exp(rng.normal(0, 0.3, S)), z_u=rng.normal(0, 1, (S, J)))
    u = dre["sigma_u"][:, None] * dre["z_u"]
    got_re = sm.MODELS_RE["normal"].loglik(dre, slice(None), y, np.c_[X, g], dict(spec, J=J))
    np.testing.assert_allclose(got_re, ref(mu + SCALE * u[:, g]), rtol=1e-10, atol=1e-10)
