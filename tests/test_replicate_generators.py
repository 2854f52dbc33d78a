"""Issue-42 replicate generators: successive-difference replication against svrep 0.9.0 (factors
deterministic: 1e-12), the Canty-Davison bootstrap by its defining properties and against R's
own ``as.svrepdesign(type="bootstrap")`` weights (live)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth import replicate_generators as rg
from surveysynth.replicate_design import ReplicateDesign
from surveysynth.variance.generators import (
    assign_hadamard_rows,
    canty_davison_factors,
    sdr_factors_sorted,
)
from tests.conftest import assert_rel

REF = Path(__file__).parent / "reference" / "svrep"


@pytest.fixture(scope="module")
def sdr_ref():
    return json.loads((REF / "sdr_reference.json").read_text())


@pytest.fixture(scope="module")
def lib():
    return pd.read_csv(REF / "library_stsys_sample.csv")


def _h179(ref):
    return np.array([[int(c) for c in row] for row in ref["hadamard_179"]]) * 2.0 - 1.0


# ------------------------------------------------------------------ SDR vs svrep
@pytest.mark.parametrize("key,n,r", [("make_sdr_n4_default", 4, 4), ("make_sdr_n7_r8", 7, 8),
                                     ("make_sdr_n50_r8", 50, 8), ("make_sdr_n37_r16", 37, 16)])
def test_sdr_factors_equal_svrep(sdr_ref, key, n, r):
    assert_rel(sdr_factors_sorted(n, r), sdr_ref[key], 1e-12, key)


def test_sdr_normal_hadamard_ash_table1(sdr_ref):
    """svrep's example (Ash 2014, Table 1): n = 4 with survey::hadamard(3), Sylvester's 4 x 4
    here (R's hadamard(3) is Sylvester's), one inactive replicate."""
    H = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=float)
    F = sdr_factors_sorted(4, 4, hadamard=H)
    assert_rel(F, sdr_ref["make_sdr_n4_normal"], 1e-12)
    assert np.isclose(F, 1).all(axis=0).sum() == 1  # the inactive ("dead") replicate


def test_sdr_rows_cover_successive_pairs():
    """Ash's RA1 assignment: with n <= order every unit's second row is the next unit's first
    (the circle closes at the end), so the replicate variance of a total is SD2's."""
    rows = assign_hadamard_rows(10, 16)
    assert (rows[1:, 0] == rows[:-1, 1]).all() and rows[-1, 1] == rows[0, 0]


def test_sdr_equals_sd2_quadratic_form():
    """Defining property (Ash 2014): 4/R sum_r (F_r - 1)(F_r - 1)' is the SD2 quadratic form
    (1/2 sum of squared successive differences, circular) for n <= R."""
    n, R = 9, 16
    F = sdr_factors_sorted(n, R)
    Q = 4.0 / F.shape[1] * (F - 1) @ (F - 1).T
    D = np.zeros((n, n))
    for k in range(n):
        j = (k + 1) % n
        D[k, k] += 1
        D[j, j] += 1
        D[k, j] -= 1
        D[j, k] -= 1
    assert_rel(Q, D / 2.0, 1e-12, atol=1e-14)


@pytest.mark.parametrize("key,rep,normal", [("lib_normal", 180, True),
                                            ("lib_default", 180, False)])
def test_sdr_man_example_equals_svrep(sdr_ref, lib, key, rep, normal):
    """svrep's ?as_sdr_design example: stratified systematic sample of libraries, stage-1 fpc,
    sorted by SAMPLING_SORT_ORDER; factors (first 12 replicates), totals, means and SEs."""
    e = sdr_ref[key]
    d = ss.SurveyDesign(lib, strata="SAMPLING_STRATUM", fpc="STRATUM_POP_SIZE")
    rd = d.sdr(rep, sort_variable="SAMPLING_SORT_ORDER",
               hadamard=_h179(sdr_ref) if normal else None)
    assert rd.replicates == e["replicates"] and rd.type == "successive-difference"
    assert rd.mse and np.isclose(rd.scale, e["scale"])
    F = rd.replicate_weights("replication")
    assert_rel(F[:, :12], e["factors"], 1e-12, key)
    t = rd.total(["TOTSTAFF", "VISITS"], na_rm=True)
    m = rd.mean(["TOTSTAFF", "VISITS"], na_rm=True)
    assert_rel(t["estimate"], e["total"], 1e-12)
    assert_rel(t["se"], e["total_se"], 1e-10)
    assert_rel(m["se"], e["mean_se"], 1e-10)


def test_sdr_shuffled_rows_follow_sort_variable(sdr_ref, lib):
    e = sdr_ref["lib_shuffled"]
    shuf = lib.iloc[np.asarray(e["rows"]) - 1].reset_index(drop=True)
    rd = ss.SurveyDesign(shuf, strata="SAMPLING_STRATUM", fpc="STRATUM_POP_SIZE").sdr(
        20, sort_variable="SAMPLING_SORT_ORDER")
    assert_rel(rd.replicate_weights("replication"), e["factors"], 1e-12)
    assert_rel(rd.total("TOTSTAFF", na_rm=True)["se"], e["total_se"], 1e-10)


@pytest.mark.parametrize("key,make,vars_,rep,sortv,mse", [
    ("apistrat_snum", lambda a: ss.SurveyDesign(a["apistrat"], strata="stype", weights="pw",
                                                fpc="fpc"), ["api00", "enroll"], 20, "snum", True),
    ("apiclus2_snum", lambda a: ss.SurveyDesign(a["apiclus2"], ids="~dnum+snum",
                                                fpc="~fpc1+fpc2"), ["api00", "enroll"], 50,
     "snum", True),
    ("apisrs_api99", lambda a: ss.SurveyDesign(a["apisrs"], weights="pw"), ["api00"], 250,
     "api99", True),
    ("apiclus1_dnum", lambda a: ss.SurveyDesign(a["apiclus1"], ids="dnum", weights="pw"),
     ["api00"], 8, "dnum", False),
])
def test_sdr_api_designs_equal_svrep(sdr_ref, api, key, make, vars_, rep, sortv, mse):
    """Stratified element sample with fpc; two-stage (units = schools, svrep's compression;
    stage-1 fpc in the factors); n <= R (circular); one-stage cluster sample, mse=False."""
    e = sdr_ref[key]
    rd = make(api).sdr(rep, sort_variable=sortv, mse=mse)
    F = rd.replicate_weights("replication")
    Fe = np.asarray(e["factors"])
    assert_rel(F[:, : Fe.shape[1]], Fe, 1e-12, key)
    assert rd.mse == e["mse"]
    assert_rel(rd.total(vars_, na_rm=True)["se"], e["total_se"], 1e-10, key)
    assert_rel(rd.mean(vars_, na_rm=True)["se"], e["mean_se"], 1e-10, key)


def test_sdr_errors(api):
    d = ss.SurveyDesign(api["apisrs"], weights="pw")
    with pytest.raises(ValueError, match="sort_variable"):
        d.sdr(20, sort_variable="nonesuch")
    with pytest.raises(ValueError, match="acs.k3.*missing"):
        d.sdr(20, sort_variable="acs.k3")
    with pytest.raises(ValueError, match="replicates"):
        d.sdr(1, sort_variable="snum")


def test_sdr_calibrated_and_subset(api):
    """SDR then rake: replicates recalibrated (totals exact in every replicate); subset keeps
    the factors."""
    d = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    rd = d.sdr(20, sort_variable="snum")
    cal = rd.calibrate("~stype", {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018})
    W = cal.replicate_weights("analysis")
    assert_rel(W.sum(axis=0), np.full(W.shape[1], 6194.0), 1e-12)
    sub = rd.subset(rd.data["stype"] == "E")
    assert sub.replicate_weights().shape == (100, 32)


# ------------------------------------------------------------------ Canty-Davison bootstrap
def test_cd_factor_sums_and_integers():
    soc = np.repeat([0, 1, 2], [3, 5, 8])
    F, scale = canty_davison_factors(soc, 400, seed=1)
    assert (F == np.round(F)).all() and (F >= 0).all()
    for h, n in enumerate([3, 5, 8]):
        assert (F[soc == h].sum(axis=0) == n).all()
    nbar = 1 / np.mean(1 / np.array([3, 5, 8]))
    assert np.isclose(scale, nbar / ((nbar - 1) * 399))


def test_cd_moments_with_replacement():
    """Multinomial(n, 1/n): E F = 1, Var F = (n-1)/n, Cov = -1/n."""
    soc = np.zeros(4, dtype=np.int64)
    F, _ = canty_davison_factors(soc, 40000, seed=2)
    C = np.cov(F)
    assert np.allclose(F.mean(axis=1), 1, atol=0.02)
    assert np.allclose(np.diag(C), 0.75, atol=0.03)
    assert np.allclose(C[np.triu_indices(4, 1)], -0.25, atol=0.03)


def test_cd_pseudo_population_moments():
    """Without-replacement draws from the pseudo-population: n = 4, N = 12 (3 copies each):
    Var F = n p (1-p)(N-n)/(N-1) = 0.75 * 8/11; with-replacement draws would give 0.75. N = 10:
    N mod n = 2 PSUs hold 3 copies (E F = 4 * 3/10), the other two 2 copies (E F = 0.8)."""
    soc = np.zeros(4, dtype=np.int64)
    F, _ = canty_davison_factors(soc, 40000, seed=3, popsize=np.array([12.0]))
    assert np.allclose(F.var(axis=1), 0.75 * 8 / 11, atol=0.025)
    F, _ = canty_davison_factors(soc, 20000, seed=4, popsize=np.array([10.0]))
    assert sorted(np.round(F.mean(axis=1), 1)) == [0.8, 0.8, 1.2, 1.2]
    with pytest.raises(ValueError, match="smaller than the sample size"):
        canty_davison_factors(soc, 5, seed=4, popsize=np.array([3.0]))
    with pytest.warns(UserWarning, match="<1%"):
        canty_davison_factors(soc, 5, seed=4, popsize=np.array([1000.0]))


def _strat_equal(api):
    """apistrat cut to 40 schools per stratum type and a stage-1 fpc of 3 n_h (so both the
    equal-size-strata scale and the pseudo-population matter)."""
    a = api["apistrat"].groupby("stype").head(40).reset_index(drop=True)
    a = a.assign(N=120.0, w=120.0 / 40.0)
    return a


def test_cd_expected_variance_of_a_total(api):
    """E[V_boot] = nbar/(nbar-1) sum_h (N_h-n_h)/(N_h-1) (n_h-1) s_h^2 exactly (hypergeometric
    draws, N_h = 3 n_h); the with-replacement draws (mutant: ignore fpc) give (n_h-1) s_h^2,
    a factor 119/80 larger, far outside the Monte Carlo error."""
    a = _strat_equal(api)
    d = ss.SurveyDesign(a, strata="stype", weights="w", fpc="N")
    R = 6000
    rd = d.canty_davison(R, seed=5)
    W = rd.replicate_weights("analysis")
    t = W.T @ a["enroll"].to_numpy(float)
    dev2 = (t - t.mean()) ** 2
    v = rd.scale * dev2.sum()
    z = a["w"] * a["enroll"]
    n, N = 40.0, 120.0
    s2 = z.groupby(a["stype"]).var(ddof=1)
    expect = n / (n - 1) * ((N - n) / (N - 1) * (n - 1) * s2).sum()
    mc_se = rd.scale * np.sqrt(R) * dev2.std()
    assert abs(v - expect) < 4 * mc_se, (v, expect, mc_se)
    assert expect * 119 / 80 - v > 4 * mc_se  # the with-replacement mutant is distinguishable
    se = rd.total("enroll")["se"].iloc[0]
    assert np.isclose(se, np.sqrt(v))


def test_cd_without_fpc_matches_linearization_in_expectation(api):
    """No fpc, equal strata: E[V_boot] = sum_h n_h s_h^2, R's with-replacement linearization
    variance of the total (svytotal SE, live), within 4 Monte Carlo SEs."""
    a = _strat_equal(api)
    d = ss.SurveyDesign(a, strata="stype", weights="w")
    rd = d.canty_davison(6000, seed=6)
    t = rd.replicate_weights("analysis").T @ a["enroll"].to_numpy(float)
    dev2 = (t - t.mean()) ** 2
    v = rd.scale * dev2.sum()
    lin = d.total("enroll")["se"].iloc[0] ** 2
    assert abs(v - lin) < 4 * rd.scale * np.sqrt(6000) * dev2.std()


def test_cd_on_r_own_weights(api):
    """R's as.svrepdesign(type="bootstrap") on apistrat (with fpc: pseudo-population draws)
    and apiclus1: R's factors have the defining properties (integers, stratum sums n_h), R's
    scale equals ours, and our replicate estimator on R's weights gives R's SEs (1e-10)."""
    cases = {
        "apistrat": ("svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=apistrat)",
                     ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc"),
                     "stype"),
        "apiclus1": ("svydesign(id=~dnum, weights=~pw, data=apiclus1)",
                     ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw"), None),
    }
    for name, (rcode, d, strat) in cases.items():
        with r_session("survey") as (ro, _):
            ro.r("suppressMessages(library(survey)); data(api); set.seed(11)")
            ro.r(f"rb <- as.svrepdesign({rcode}, type='bootstrap', replicates=60)")
            F = np.array(ro.r("as.matrix(weights(rb, 'replication'))"), dtype=float)
            scale = float(ro.r("rb$scale")[0])
            se = np.array(ro.r("c(SE(svytotal(~enroll, rb)), SE(svymean(~api00, rb)), "
                               "SE(svyratio(~api00, ~api99, rb)))"), dtype=float)
        ours = d.canty_davison(60, seed=1)
        assert np.isclose(ours.scale, scale, rtol=1e-14), name
        assert (F == np.round(F)).all()
        if strat:
            for s in api[name][strat].unique():
                rows = (api[name][strat] == s).to_numpy()
                assert (F[rows].sum(axis=0) == rows.sum()).all()
        else:  # one stratum of PSUs: each replicate draws 15 districts
            first = ~api[name]["dnum"].duplicated().to_numpy()
            assert (F[first].sum(axis=0) == 15).all()
        rd = ReplicateDesign(api[name], repweights=F, weights=d.full_weights, type="other",
                             scale=scale, rscales=np.ones(60), combined_weights=False)
        got = np.r_[rd.total("enroll")["se"], rd.mean("api00")["se"],
                    rd.ratio("api00", "api99")["se"]]
        assert_rel(got, se, 1e-10, name)


def test_cd_seed_and_warnings(api):
    d = ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2")
    with pytest.warns(UserWarning, match="after first stage"):
        a = d.canty_davison(30, seed=9)
    with pytest.warns(UserWarning, match="after first stage"):
        b = d.canty_davison(30, seed=9)
    assert np.array_equal(a.replicate_weights(), b.replicate_weights())
    assert a.type == "bootstrap" and not a.mse
    with pytest.warns(UserWarning, match="after first stage"):
        c = d.bootstrap(30, method="canty-davison", seed=9)  # the same generator
    assert np.array_equal(a.replicate_weights(), c.replicate_weights())


# ------------------------------------------------------------------ generalized replication
@pytest.fixture(scope="module")
def gen_ref():
    return json.loads((REF / "genrep_reference.json").read_text())


def _gen_designs(api, ref):
    strat = api["apistrat"][api["apistrat"]["snum"].isin(ref["small_strat_snum"])]
    clus2 = api["apiclus2"][api["apiclus2"]["dnum"].isin(ref["small_clus2_dnum"])]
    return {
        "strat": ss.SurveyDesign(strat.reset_index(drop=True), strata="stype", weights="pw",
                                 fpc="fpc"),
        "clus2": ss.SurveyDesign(clus2.reset_index(drop=True), ids="~dnum+snum",
                                 fpc="~fpc1+fpc2"),
        "clus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw"),
    }


ESTIMATORS = [(d, v) for d in ("strat", "clus2", "clus1")
              for v in ("Ultimate Cluster", "Stratified Multistage SRS", "SD1", "SD2")
              if not (d == "clus1" and v == "Stratified Multistage SRS")]


def _three_ses(rd):
    return np.r_[rd.total("enroll")["se"], rd.mean("api00")["se"],
                 rd.ratio("api00", "api99")["se"]]


@pytest.mark.parametrize("d,v", [x for x in ESTIMATORS if x[0] != "clus1"])
def test_quad_form_equals_svrep(api, gen_ref, d, v):
    """svrep's get_design_quad_form (deterministic) over the rows, to 1e-12 (clus1's
    183 x 183 form is not stored; its totals' SEs are tested below)."""
    e = gen_ref[f"{d} {v}"]
    Q, unit = rg.quad_form(_gen_designs(api, gen_ref)[d], v)
    assert_rel(Q[np.ix_(unit, unit)], e["Q"], 1e-12, f"{d} {v}", atol=1e-15)


@pytest.mark.parametrize("d,v", ESTIMATORS)
def test_gen_boot_exact_and_fay_equal_svrep(api, gen_ref, d, v):
    """Defining property: with exact_vcov (generalized bootstrap) and for Fay's generalized
    replication, the replicate variance of any total is the quadratic form exactly, so the SE
    of a total equals svrep's (computed on svrep's own random factors) to 1e-10; the factors
    average 1 (exact_vcov); means and ratios are replicate estimates of nonlinear statistics
    and only agree to within their replicate noise (a sanity bound of 25%: 8 Fay replicates
    on clus2)."""
    e = gen_ref[f"{d} {v}"]
    design = _gen_designs(api, gen_ref)[d]
    gb = rg.gen_boot(design, v, replicates=200, exact_vcov=True, seed=1)
    assert np.isclose(gb.scale, e["gen_boot_scale"])
    F = gb.replicate_weights("replication")
    assert np.allclose(F.mean(axis=1), 1.0, atol=1e-12)
    got = _three_ses(gb)
    assert_rel(got[0], e["gen_boot_se"][0], 1e-10, "gen boot total")
    assert_rel(got[1:], e["gen_boot_se"][1:], 0.25, "gen boot mean, ratio")
    fg = rg.fays_gen_rep(design, v, seed=2)
    assert fg.mse and fg.scale == e["fay_scale"] == 1
    got = _three_ses(fg)
    assert_rel(got[0], e["fay_se"][0], 1e-10, "Fay total")
    assert_rel(got[1:], e["fay_se"][1:], 0.25, "Fay mean, ratio")


def test_exact_designs_reproduce_linearization(api, gen_ref):
    """'Stratified Multistage SRS' is R survey's multistage formula and 'Ultimate Cluster'
    its with-replacement stage 1: totals' SEs equal R's svytotal (the stored linearization
    SEs, also live in test_design_r_parity) to 1e-10."""
    ds = _gen_designs(api, gen_ref)
    for d, v in (("strat", "Stratified Multistage SRS"), ("clus2", "Stratified Multistage SRS"),
                 ("clus1", "Ultimate Cluster")):
        fg = rg.fays_gen_rep(ds[d], v, seed=3)
        assert_rel(fg.total("enroll")["se"], gen_ref["linearization_se"][d][0], 1e-10, d)
        assert_rel(ds[d].total("enroll")["se"], gen_ref["linearization_se"][d][0], 1e-10, d)


def test_gen_boot_man_example_sd2(lib, gen_ref):
    """svrep's ?as_sdr_design example: generalized bootstrap on SD2 (exact) beside SDR. 180
    replicates for 219 units: svrep's whitening leaves 40 columns of rounding noise on the
    null space of SD2, which moves its SE by ~1e-10 relative: tested to 1e-8."""
    d = ss.SurveyDesign(lib, strata="SAMPLING_STRATUM", fpc="STRATUM_POP_SIZE")
    gb = d.gen_boot("SD2", replicates=180, exact_vcov=True, seed=4)
    assert_rel(gb.total("TOTSTAFF", na_rm=True)["se"], gen_ref["lib_sd2_total_se"], 1e-8)


def test_gen_boot_random_moments(api, gen_ref):
    """Without exact_vcov: factors ~ N(1, Q); the Monte Carlo covariance of 20000 draws is
    Q within sampling error and the bootstrap variance of a total is unbiased (4 MC SEs)."""
    d = _gen_designs(api, gen_ref)["clus2"]
    Q, unit = rg.quad_form(d, "Stratified Multistage SRS")
    gb = d.gen_boot("Stratified Multistage SRS", replicates=20000, seed=5)
    first = np.unique(unit, return_index=True)[1]
    F = gb.replicate_weights("replication")[first]
    C = np.cov(F)
    assert np.abs(C - Q).max() < 0.05 * np.abs(Q).max()
    t = gb.replicate_weights("analysis").T @ d.data["enroll"].to_numpy(float)
    dev2 = (t - t.mean()) ** 2
    lin = d.total("enroll")["se"].iloc[0] ** 2
    assert abs(dev2.mean() - lin) < 4 * dev2.std() / np.sqrt(dev2.shape[0])


def test_gen_boot_tau(api, gen_ref):
    """tau='auto': every factor >= 0.01, tau^2 has two decimals and is the smallest such
    (svrep's rule: the factor nearest 0 lands within rounding of 0.01), scale tau^2/B; a
    given tau rescales 1 + (f-1)/tau and multiplies the scale by tau^2 (variances unchanged)."""
    d = _gen_designs(api, gen_ref)["clus1"]
    base = d.gen_boot("Ultimate Cluster", replicates=50, seed=6)
    auto = d.gen_boot("Ultimate Cluster", replicates=50, seed=6, tau="auto")
    Fb, Fa = base.replicate_weights("replication"), auto.replicate_weights("replication")
    assert Fb.min() < 0.01 <= Fa.min() < 0.0105
    tau2 = auto.tau ** 2
    assert np.isclose(tau2 * 100, round(tau2 * 100)) and np.isclose(auto.scale, tau2 / 50)
    assert_rel(Fa - 1, (Fb - 1) / auto.tau, 1e-12)
    assert_rel(auto.total("enroll")["se"], base.total("enroll")["se"], 1e-10)
    r = gen_ref["tau_auto"]  # svrep's own (random) draw obeys the same rule
    assert 0.01 <= r["min_factor"] < 0.0105 and np.isclose(r["scale"], r["tau"] ** 2 / 50)


def test_fay_subsample_and_unbalanced(api, gen_ref):
    d = _gen_designs(api, gen_ref)["strat"]
    Q, unit = rg.quad_form(d, "SD2")
    full = d.fays_gen_rep("SD2", seed=7)
    k = full.replicates
    assert k == 64 and k > np.linalg.matrix_rank(Q)
    sub = d.fays_gen_rep("SD2", seed=7, max_replicates=20)
    assert sub.replicates == 20 and np.isclose(sub.scale, k / 20)
    unb = d.fays_gen_rep("SD2", balanced=False, seed=8)
    assert unb.replicates == np.linalg.matrix_rank(Q)
    assert_rel(unb.total("enroll")["se"], full.total("enroll")["se"], 1e-10)
    with pytest.warns(UserWarning, match="mse = FALSE"):
        d.fays_gen_rep("SD2", seed=7, mse=False)
    with pytest.raises(ValueError, match="variance_estimator"):
        d.fays_gen_rep("Horvitz-Thompson")
    with pytest.raises(ValueError, match="needs the design's fpc"):
        _gen_designs(api, gen_ref)["clus1"].gen_boot("Stratified Multistage SRS")
