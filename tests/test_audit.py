"""The neighbouring-database auditor (surveysynth.audit) on every mechanism labelled pure
DP, at CI size, and the mutants it must refute: the OLD uniform-in-interval JointExp sampler and
the OLD inverse-CDF KNG sampler (copied below as they were before the public grid: their output
sets depend on the data), and a Laplace mechanism with half the scale. Full size (issue 35's
3,000 / 1,000 runs per side) in the slow tier; numbers in docs/privacy.md."""

from __future__ import annotations

import math

import numpy as np
import pytest

from surveysynth import audit as au
from surveysynth.privacy.noise import add_laplace
from surveysynth.privacy.randomness import secret_rng
from surveysynth.synth import private_quantiles as pq
from surveysynth.synth.kng import exact as kng_exact
from surveysynth.synth.kng.truncated_gauss import truncnorm_ppf

D_IN = [1.0] + [2.0] * 9  # issue 35's neighbours, public bounds [0, 100]
D_OUT = [1.1] + [2.0] * 9
Q3 = [0.25, 0.5, 0.75]
PERCENTILES = [round(0.01 * i, 2) for i in range(1, 100)]  # 99 values per run: the KNG lattice test's power


# ------------------------------------------------------------------ the OLD samplers (mutants)
def _old_pick(logw, u):
    flat = logw.ravel()
    p = np.exp(flat - flat.max())
    cdf = np.cumsum(p)
    k = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return min(k, flat.size - 1)


def old_joint_exp_draws(tables, size=1, random_state=None):
    """The JointExp sampler before the grid: sorted numpy uniforms inside [x_(i), x_(i+1)]."""
    rng = secret_rng(random_state)
    n, m = tables.n, tables.m
    out = np.empty((int(size), m))
    for s in range(int(size)):
        j, last, first = m - 1, n, True
        while j >= 0:
            upto = last + 1 if first else last
            logw = tables.log_run(j, upto) + tables.log_phi(j + 1, last - np.arange(upto))[:, None]
            k = _old_pick(logw, rng.random())
            i, r = divmod(k, j + 1)
            r += 1
            lo, hi = tables.edges[i], tables.edges[i + 1]
            out[s, j - r + 1: j + 1] = np.sort(rng.uniform(lo, hi, r))
            j -= r
            last, first = i, False
    return out


def old_kng_intercept_draws(pieces, size=1, random_state=None, grid_bits=None):
    """The KNG sampler before the grid: a truncated-normal inverse CDF inside a data piece."""
    rng = secret_rng(random_state)
    u = rng.random((2, int(size)))
    if pieces.b_lo == pieces.b_hi:
        return np.full(size, pieces.b_lo)
    w = np.exp(pieces.log_mass - np.max(pieces.log_mass))
    cdf = np.cumsum(w)
    last = int(np.flatnonzero(w > 0)[-1])
    k = np.minimum(np.searchsorted(cdf, u[0] * cdf[-1], side="right"), last)
    lo, hi = pieces.lo[k], pieces.hi[k]
    sd = 1.0 / math.sqrt(2.0 * pieces.c)
    b = sd * truncnorm_ppf(lo / sd, hi / sd, u[1])
    top = np.where(hi < pieces.b_hi, np.nextafter(hi, -np.inf), hi)
    return np.clip(b, lo, top)


def laplace_half_scale(data, seed):
    """Wrong scale: the Laplace sum with scale sensitivity / (2 epsilon), claiming epsilon 1."""
    x = np.clip(np.asarray(data, float), 0, 100)
    return add_laplace(np.array([x.sum()]), 100 / 2.0), np.nan, 1.0


# ------------------------------------------------------------------ building blocks
def test_clopper_pearson_and_the_issue_numbers():
    from scipy.stats import binomtest

    for k, n in ((418, 3000), (0, 3000), (335, 1005), (7, 20)):
        ref = binomtest(k, n).proportion_ci(0.95, method="exact")  # scipy's Clopper-Pearson
        assert au.clopper_pearson(k, n, 0.05) == pytest.approx((ref.low, ref.high), rel=1e-9, abs=1e-12)
    assert au.clopper_pearson(0, 3000, 0.05)[1] == pytest.approx(1 - 0.025 ** (1 / 3000), rel=1e-9)
    # issue 35: 418 / 0 of 3,000 -> 4.64; 824 / 0 -> 5.35; 335 / 0 of 1,005 -> 4.42
    assert au.epsilon_lower_bound(418, 3000, 0, 3000) == pytest.approx(4.64, abs=0.01)
    assert au.epsilon_lower_bound(824, 3000, 0, 3000) == pytest.approx(5.35, abs=0.01)
    assert au.epsilon_lower_bound(335, 1005, 0, 1005) == pytest.approx(4.42, abs=0.01)
    assert au.epsilon_lower_bound(0, 100, 0, 100) == 0.0


def test_reachability_search_is_exact():
    # numpy's uniform arithmetic on [0, 1.1]: its own outputs are found, a neighbour's are not all
    rng = np.random.default_rng(0)
    own = rng.uniform(0.0, 1.1, 500)
    f = lambda k: 0.0 + 1.1 * (k * 2.0**-53)  # noqa: E731
    assert au.reachable(f, own, 2**53 - 1).all()
    other = rng.uniform(0.0, 1.0, 2000)
    other = other[other < 0.5]  # below 0.5: finer doubles than 1.0 * k 2^-53 can hit...
    assert not au.reachable(lambda k: 1.0 * (k * 2.0**-53), other * 1.1, 2**53 - 1).all()


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="same size"):
        au.audit_mechanism("jointexp", [1.0, 2.0], [1.0], runs=20)
    with pytest.raises(ValueError, match="more than one record"):
        au.audit_mechanism("jointexp", [1.0, 2.0, 3.0], [5.0, 6.0, 3.0], runs=20)
    with pytest.raises(ValueError, match="mechanism="):
        au.audit_mechanism("fbs", D_IN, D_OUT, runs=20)
    with pytest.raises(ValueError, match="runs="):
        au.audit_mechanism("jointexp", D_IN, D_OUT, runs=5)


# ------------------------------------------------------------------ every pure-DP mechanism, CI size
@pytest.mark.parametrize("transform", ["identity", "log", "pareto"])
def test_jointexp_audit_at_or_below_the_claim(transform):
    r = au.audit_mechanism("jointexp", D_IN, D_OUT, epsilon=1.0, transform=transform,
                           quantiles=Q3, runs=150, seed=35)
    assert r.claimed_epsilon == 1.0
    assert r.lattice_flagged_in == 0 and r.lattice_flagged_out == 0  # every output on the grid
    assert r.passed and r.lower_bound <= 1.0, r.summary()


def test_kng_exact_audit_at_or_below_the_claim():
    r = au.audit_mechanism("kng-exact", D_IN, D_OUT, epsilon=4.0, quantiles=[0.5], runs=120, seed=35)
    assert r.claimed_epsilon == 4.0
    assert r.lattice_flagged_in == 0 and r.lattice_flagged_out == 0
    assert r.passed, r.summary()


def test_laplace_audit_at_or_below_the_claim():
    # OpenDP's noise cannot be seeded: confidence 0.999 keeps a false alarm below 1 in 1,000
    r = au.audit_mechanism("laplace", [0.0] * 10, [100.0] + [0.0] * 9, epsilon=1.0, runs=2000,
                           confidence=0.999)
    assert r.lattice_flagged_in is None and r.passed, r.summary()
    assert r.lower_bound > 0.2  # the test has power: the sums differ by the whole sensitivity


# ------------------------------------------------------------------ mutants the audit must refute
def test_old_jointexp_sampler_is_refuted(monkeypatch):
    monkeypatch.setattr(pq, "joint_exp_draws", old_joint_exp_draws)
    r = au.audit_mechanism("jointexp", D_IN, D_OUT, epsilon=1.0, transform="log", runs=60, seed=35)
    assert r.lattice_flagged_in == 0 and r.lattice_flagged_out > 40
    assert not r.passed and r.lower_bound > 1.0, r.summary()


def test_reachability_with_slack_finds_every_output_of_a_nearly_monotone_map():
    # a monotone map (steps of 4 ulps) plus a wobble of up to 6 ulps, like Newton's method: the
    # plain binary search misses outputs where the map steps back, the slack scan finds them all
    k_max = 2**48
    ulp = 2.0**-52  # spacing of the doubles in [1, 2); every output is 1 + (even integer) ulp

    def f(k):
        k = np.asarray(k, dtype=np.int64)
        return 1.0 + (4 * k + 2 * ((k * 40503) % 7 - 3)) * ulp

    slack = 64 * ulp
    rng = np.random.default_rng(1)
    own = f(rng.integers(0, k_max + 1, 3000))
    assert au.reachable(f, own, k_max, slack=slack).all()
    assert not au.reachable(f, own, k_max).all()  # the mutant without the scan: false flags
    # odd multiples of the ulp are never outputs; even ones near k = 12345 as a brute force says
    near = f(np.array([12345]))[0] + np.arange(-40, 41) * ulp
    brute = np.isin(near, f(np.arange(12345 - 500, 12345 + 500)))
    assert not brute[1::2].any() and brute.any() and not brute.all()
    assert (au.reachable(f, near, k_max, slack=slack) == brute).all()
    # a window longer than max_window counts as reachable (conservative: no false flag)
    assert au.reachable(lambda k: (k > 10**6).astype(float), np.array([0.5]), 10**7, slack=1.0,
                        max_window=1000).all()


def _draws_per_piece(d, size, seed):
    """The old sampler's draws from every piece of d's median density, the pieces made equally
    likely (the pipeline rarely visits the narrow data pieces), one call per draw as in the
    pipeline."""
    import dataclasses

    from surveysynth.synth.kng import kng_intercept_pieces

    P = kng_intercept_pieces(np.ones((len(d), 1)), np.asarray(d), 0.5, 4.0, 1.0, lb=0.0, ub=100.0)
    P = dataclasses.replace(P, log_mass=np.where(P.hi > P.lo, 0.0, -np.inf))
    rng = np.random.default_rng(seed)
    return np.array([old_kng_intercept_draws(P, 1, rng)[0] for _ in range(size)])


def test_lattice_model_of_the_old_kng_arithmetic_is_bit_exact():
    v_in = _draws_per_piece(D_IN, 1500, 1)
    v_out = _draws_per_piece(D_OUT, 1500, 2)
    assert (v_in < 2).sum() > 800  # most draws in the narrow pieces [0, 1) and [1, 2)
    kw = dict(epsilon=4.0, quantiles=[0.5])
    assert not au.lattice_flags("kng-exact", D_IN, v_in, **kw).any()  # no false flag
    flagged_out = au.lattice_flags("kng-exact", D_IN, v_out, **kw)
    assert flagged_out.sum() > 150 and (v_out[flagged_out] < 2).all()  # only D_out's own pieces


def test_old_kng_sampler_is_flagged_by_the_lattice_test(monkeypatch):
    # 99 quantiles per run: each value falls in a data piece with probability ~2%; the slow tier
    # refutes the claim at 1,000 runs per side (test_full_size_old_kng_sampler_is_refuted)
    monkeypatch.setattr(kng_exact, "kng_intercept_draws", old_kng_intercept_draws)
    r = au.audit_mechanism("kng-exact", D_IN, D_OUT, epsilon=4.0, quantiles=PERCENTILES, runs=60,
                           seed=35)
    assert r.lattice_flagged_in == 0, r.summary()  # the model of the old arithmetic is bit-exact
    assert r.lattice_flagged_out >= 15 and r.lattice_lower_bound > 1.5, r.summary()


def test_laplace_with_half_the_scale_is_refuted():
    r = au.audit_mechanism(laplace_half_scale, [0.0] * 10, [100.0] + [0.0] * 9, runs=2000,
                           confidence=0.999)
    assert r.claimed_epsilon == 1.0 and not r.passed and r.lower_bound > 1.0, r.summary()


# ------------------------------------------------------------------ full size (issue 35)
FULL = [("jointexp", "identity", 3000, 1.0), ("jointexp", "log", 3000, 1.0),
        ("kng-exact", "identity", 1000, 4.0)]


@pytest.mark.slow
@pytest.mark.parametrize("mechanism,transform,runs,eps", FULL)
def test_full_size_audit_new_vs_old(mechanism, transform, runs, eps, monkeypatch, capsys):
    kw = dict(epsilon=eps, transform=transform, runs=runs, seed=2035,
              quantiles=[0.5] if mechanism == "kng-exact" else None)
    new = au.audit_mechanism(mechanism, D_IN, D_OUT, **kw)
    if mechanism == "jointexp":
        monkeypatch.setattr(pq, "joint_exp_draws", old_joint_exp_draws)
    else:
        monkeypatch.setattr(kng_exact, "kng_intercept_draws", old_kng_intercept_draws)
    old = au.audit_mechanism(mechanism, D_IN, D_OUT, **kw)
    with capsys.disabled():
        print("\nNEW", new.summary(), "\nOLD", old.summary())
    assert new.passed and new.lattice_flagged_in == 0 and new.lattice_flagged_out == 0
    assert old.lattice_flagged_in == 0 and old.lattice_flagged_out > 0
    if mechanism == "jointexp":
        assert not old.passed  # at the KNG median only ~1% of D_out's releases are unreachable
        # by D_in's arithmetic: too few for 1,000 runs; the 99-quantile audit below refutes it


@pytest.mark.slow
def test_full_size_old_kng_sampler_is_refuted(monkeypatch, capsys):
    # 99 quantiles per run (the grid sampler takes ~1 s per such run, so it is audited at the
    # median above; its outputs lie on the public grid whatever the quantiles)
    monkeypatch.setattr(kng_exact, "kng_intercept_draws", old_kng_intercept_draws)
    old = au.audit_mechanism("kng-exact", D_IN, D_OUT, epsilon=4.0, quantiles=PERCENTILES,
                             runs=1000, seed=2035)
    with capsys.disabled():
        print("\nOLD", old.summary())
    assert old.lattice_flagged_in == 0 and not old.passed and old.lower_bound > 4.0, old.summary()


def test_cli_prints_the_bound_beside_the_claim(capsys):
    from surveysynth.cli import main

    rc = main(["audit", "jointexp", "--d-in", "1,2,2,2,2,2,2,2,2,2", "--d-out", "1.1,2,2,2,2,2,2,2,2,2",
               "--quantiles", "0.5", "--runs", "40", "--seed", "3"])
    out = capsys.readouterr().out
    assert rc == 0 and "empirical lower bound" in out and "claimed epsilon 1" in out


# ----------------------------------------------------------------------------- zCDP
def _gaussian_epsilon(mu: float, delta: float) -> float:
    """The Gaussian mechanism's exact (epsilon, delta) curve at sensitivity / sigma = mu (Balle &
    Wang 2018), the least epsilon any rho-zCDP conversion (rho = mu^2 / 2) can give."""
    from scipy import optimize, stats

    def f(e):
        return stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta

    return 0.0 if f(0.0) <= 0 else optimize.brentq(f, 0.0, 200.0)


def test_zcdp_conversion_lies_between_the_gaussian_curve_and_the_simple_bound():
    """rho-zCDP -> (epsilon, delta): at or above the Gaussian mechanism's exact curve (which is
    rho-zCDP, so no valid conversion gives less: kills an understated claim, e.g. the curve at
    mu = sqrt(rho)) and strictly below rho + 2 sqrt(rho log(1/delta)) (kills a conversion that
    drops CKS's (1 - 1/alpha)^alpha / (alpha - 1) factor, which is the simple bound's
    Chernoff form); zcdp_delta inverts zcdp_epsilon."""
    for rho in (0.01, 0.125, 0.5, 2.0, 8.0):
        for delta in (1e-6, 1e-3, 0.03):
            e = au.zcdp_epsilon(rho, delta)
            assert _gaussian_epsilon(math.sqrt(2 * rho), delta) <= e, (rho, delta, e)
            assert e < rho + 2 * math.sqrt(rho * math.log(1 / delta)) - 1e-3, (rho, delta, e)
            assert au.zcdp_delta(rho, e) == pytest.approx(delta, rel=1e-6)
    assert au.zcdp_epsilon(0.01, 0.2) == 0.0  # delta above the total-variation bound
    with pytest.raises(ValueError, match="delta"):
        au.zcdp_epsilon(0.5, 0.0)


def test_epsilon_delta_lower_bound_subtracts_delta():
    """delta 0 gives the pure bound; the bound falls as delta grows, and is 0 once delta
    reaches the lower confidence bound of P_1(S)."""
    assert au.epsilon_delta_lower_bound(300, 1000, 30, 1000, 0.0) == pytest.approx(
        au.epsilon_lower_bound(300, 1000, 30, 1000))
    b = [au.epsilon_delta_lower_bound(300, 1000, 30, 1000, d) for d in (0.0, 0.05, 0.2, 0.3)]
    assert b[0] > b[1] > b[2] > 0 and b[3] == 0.0


def _gauss_runner(sigma: float, rho: float):
    """A Gaussian mechanism on a sum of values in [0, 1] (numpy noise, seeded): claims rho."""
    def run(data, seed):
        x = np.clip(np.asarray(data, float), 0, 1).sum()
        return x + np.random.default_rng(seed).normal(0, sigma), np.nan, rho

    return run


def test_zcdp_audit_of_a_gaussian_mechanism_and_its_mutant():
    """A Gaussian sum with sigma = 1 / sqrt(2 rho) (sensitivity 1) passes at rho 0.5; the same
    claim with half the sigma (true rho 2) is refuted (seeded numpy noise: replayable)."""
    d_in, d_out = [0.0] * 9 + [0.0], [0.0] * 9 + [1.0]
    good = au.audit_zcdp(_gauss_runner(1.0, 0.5), d_in, d_out, runs=2000, seed=4, confidence=0.99)
    assert good.claimed_rho == 0.5 and good.passed, good.summary()
    assert good.claimed_epsilon == pytest.approx(au.zcdp_epsilon(0.5, good.delta))
    bad = au.audit_zcdp(_gauss_runner(0.5, 0.5), d_in, d_out, runs=2000, seed=4, confidence=0.99)
    assert not bad.passed and bad.rho_lower_bound > 0.5, bad.summary()
    assert "CLAIM REFUTED" in bad.summary()
    with pytest.raises(ValueError, match="runs"):
        au.audit_zcdp(_gauss_runner(1.0, 0.5), d_in, d_out, runs=10)
    with pytest.raises(ValueError, match="deltas"):
        au.audit_zcdp(_gauss_runner(1.0, 0.5), d_in, d_out, runs=40, deltas=[0.0])
