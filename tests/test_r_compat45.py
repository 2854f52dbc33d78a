"""The five defaults R survey 4.5 changed from 4.1.1, each equal to R 4.5 by default (stored
output of R 4.5: tests/reference/r_survey45/r_compat.R) and to R 4.1.1 live through rpy2
under the switch ``survey_version="4.1"``:

1. the "math"/"school"/"hf3" quantile rules' boundary test (``wlow <= 0``; R's Chile example),
2. ``lonely_psu="adjust"`` centring a lonely PSU on the mean PSU total over all strata
   (mu284 from R's tests/multistage-rcpp.R, R's tests/lonely.psu.R, Brewer PPS),
3. ``svrepdesign(type="ACS")`` defaulting to ``mse=TRUE``,
4. strict ``trimWeights`` sharing only among weights not yet trimmed,
5. ``svyciprop(method="likelihood")`` on replicate designs (dispersion 1; 4.1.1 gave NA).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import pandas_to_r, r_to_pandas
from surveysynth.calibration import CalibrationError, trim_weights
from surveysynth.variance import taylor
from tests.conftest import assert_rel

REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "r_compat.json")
                 .read_text())
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_POP = "c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)"
TYPES = pd.DataFrame({"stype": ["E", "H", "M"], "Freq": [4421, 755, 1018]})
R_TYPES = "data.frame(stype=c('E', 'H', 'M'), Freq=c(4421, 755, 1018))"


def test_fixture_is_r_survey_45():
    assert REF["survey_version"] == "4.5"
    assert REF["use_rcpp"] is True  # R 4.5's default variance code (C++), as users get it


def _to_r(name: str, df: pd.DataFrame) -> None:
    with r_session("survey") as (ro, _):
        ro.globalenv[name] = pandas_to_r(df)


# ----------------------------------------------------------------------------- quantiles
@pytest.fixture(scope="module")
def chile():
    data = pd.DataFrame(REF["chile_data"])
    _to_r("chile_data", data)
    return ss.SurveyDesign(data, ids="id_directorio", strata="estrato", weights="f_pers",
                           lonely_psu="remove")


R_CHILE = ("local({ options(survey.lonely.psu='remove'); on.exit(options(survey.lonely.psu="
           "'fail')); d <- svydesign(id=~id_directorio, strata=~estrato, weights=~f_pers, "
           "data=chile_data); as.vector(sapply(sort(unique(chile_data$CL_GRUPO_OCU_08)), "
           "function(g) coef(suppressWarnings(svyquantile(~ing_t_p, subset(d, CL_GRUPO_OCU_08 "
           "== g), c(0, 0.25, 0.5, 0.75, 1), qrule='{rule}', ci=FALSE))))) })")


@pytest.mark.parametrize("rule", ["math", "school", "hf3", "hf7"])
def test_chile_domain_quantiles(R, chile, rule):
    """R's tests/quantiles-chile.R data: every occupation group's quantiles at p = 0, 1/4,
    1/2, 3/4, 1 (groups of 2 to 200 rows), as R 4.5 by default and as R 4.1.1 live."""
    ps = REF["chile_p"]
    new = chile.quantile("ing_t_p", ps, by="CL_GRUPO_OCU_08", qrule=rule)
    assert new.CL_GRUPO_OCU_08.unique().tolist() == REF["chile_groups"]
    assert_rel(new.estimate, REF["chile_quantiles"][rule], 1e-12, f"{rule} vs R 4.5")
    old = chile.quantile("ing_t_p", ps, by="CL_GRUPO_OCU_08", qrule=rule, survey_version="4.1")
    assert_rel(old.estimate, R(R_CHILE.replace("{rule}", rule)), 1e-12, f"{rule} vs R 4.1.1")
    if rule in ("math", "school"):  # the boundary rules: the versions differ here
        assert not np.allclose(new.estimate, old.estimate)


def test_chile_issue_example(chile):
    """The issue's numbers: ISCO08_6 (two rows), first quartile 449,613 under 4.5 (equal to
    its median) and 551,525 under 4.1.1 (above its median: a rounding gap of -1e-17 read as
    'past the boundary')."""
    kw = dict(by="CL_GRUPO_OCU_08", quantiles=[0.25, 0.5])
    new = chile.quantile("ing_t_p", **kw).set_index(["CL_GRUPO_OCU_08", "quantile"])
    old = chile.quantile("ing_t_p", survey_version="4.1", **kw).set_index(
        ["CL_GRUPO_OCU_08", "quantile"])
    assert round(new.estimate[("ISCO08_6", 0.25)]) == 449613
    assert round(old.estimate[("ISCO08_6", 0.25)]) == 551525
    assert round(old.estimate[("ISCO08_6", 0.5)]) == 449613


def test_chile_interval_and_api_quantiles(R, api, chile):
    ref = REF["chile_isco8_ci"]
    sub = chile.subset(chile.data["CL_GRUPO_OCU_08"] == "ISCO08_8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = sub.quantile("ing_t_p", [0.25, 0.5])
    nan = np.nan
    assert_rel(q.estimate, ref["estimate"], 1e-12)
    assert_rel(q.ci_low, [nan if v == "NaN" else v for v in ref["ci_low"]], 1e-12)
    assert_rel(q.ci_high, [nan if v == "NaN" else v for v in ref["ci_high"]], 1e-12)
    dclus1 = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    dstrat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    a = REF["api_quantiles"]
    got = dclus1.quantile(["api00", "enroll"], [0, 0.1, 0.5, 1]).estimate
    assert_rel(got, a["dclus1_math"], 1e-12)
    r41 = R("local({ d <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc); "
            "as.vector(coef(svyquantile(~api00+enroll, d, c(0, 0.1, 0.5, 1), ci=FALSE))) })")
    assert_rel(dclus1.quantile(["api00", "enroll"], [0, 0.1, 0.5, 1],
                               survey_version="4.1").estimate, r41, 1e-12)
    assert r41[0] != a["dclus1_math"][0]  # p = 0: 4.1.1 skips the smallest value
    assert_rel(dstrat.quantile("api00", [0, 0.5, 1], qrule="school").estimate,
               a["dstrat_school"], 1e-12)
    one = dstrat.subset(dstrat.data["snum"] == api["apistrat"]["snum"].iloc[0])
    for rule in ("hf7", "hf8"):  # one row: its value (R 4.1.1 fails here)
        assert_rel(one.quantile("api00", [0.25, 0.5], qrule=rule).estimate,
                   a[f"dstrat_one_row_{rule}"], 1e-12)


def test_replicate_quantile_follows_the_switch(chile):
    """The replicate path (interval_type='quantile') reads quantiles by the same rule."""
    rep = chile.subset(chile.data["CL_GRUPO_OCU_08"].isin(["ISCO08_6", "ISCO08_5"]))
    tay = rep.quantile("ing_t_p", [0.25], by="CL_GRUPO_OCU_08")
    boot = chile.bootstrap(replicates=5, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in ("4.5", "4.1"):
            r = boot.quantile("ing_t_p", [0.25], by="CL_GRUPO_OCU_08", interval_type="quantile",
                              survey_version=v).set_index("CL_GRUPO_OCU_08")
            t = chile.quantile("ing_t_p", [0.25], by="CL_GRUPO_OCU_08",
                               survey_version=v).set_index("CL_GRUPO_OCU_08")
            assert r.estimate["ISCO08_6"] == t.estimate["ISCO08_6"]
    assert tay.estimate.iloc[-1] == pytest.approx(449613.03637458, rel=1e-12)


def test_bad_survey_version(chile):
    with pytest.raises(ValueError, match="survey_version='4.4'.*'4.5'.*'4.1'"):
        chile.quantile("ing_t_p", 0.5, survey_version="4.4")
    with pytest.raises(ValueError, match="survey_version"):
        ss.SurveyDesign(chile.data, strata="estrato", weights="f_pers", survey_version="4")
    with pytest.raises(ValueError, match="survey_version"):
        ss.ReplicateDesign(chile.data, repweights=np.ones((624, 3)), weights="f_pers",
                           survey_version="4")


# -------------------------------------------------------------------- lonely_psu="adjust"
@pytest.fixture(scope="module")
def mu284():
    with r_session("survey") as (ro, _):
        mu = r_to_pandas(ro.r("local({ data(mu284); mu284 })"))
    a = mu.assign(stratum=1, y2=mu.y1 + [0, 2, 1, 0, -1, 2, 0, 3, 0, 0, -1, -1, 1, -1, 0])
    b = mu.assign(stratum=2, y2=mu.y1 + [-1, 0, -1, 0, -1, 0, 0, 1, 2, -1, 1, 1, 0, 1, 0])
    c = mu.iloc[:1].assign(stratum=3, y2=mu.y1.iloc[:1] + 2)
    out = pd.concat([a, b, c], ignore_index=True)
    out["dom"] = (out.stratum == 1) | ((out.stratum == 2) & (out.id1 == 19))
    _to_r("mu_s", out)
    return out


R_MU = "svydesign(data=mu_s, strata=~stratum, nest=TRUE, id=~id1+id2{fpc})"


def _r_adjust(R, code: str, domain: bool = False) -> np.ndarray:
    return R("local({ options(survey.lonely.psu='adjust', survey.adjust.domain.lonely="
             f"{'TRUE' if domain else 'FALSE'}); on.exit(options(survey.lonely.psu='fail', "
             f"survey.adjust.domain.lonely=FALSE)); suppressWarnings({{ {code} }}) }})")


def _mu(data, version="4.5", fpc=True, **kw):
    if not fpc:  # R: "No weights or probabilities supplied, assuming equal probability"
        kw["weights"] = 1
    return ss.SurveyDesign(data, ids="~id1+id2", strata="stratum", nest=True,
                           fpc="~n1+n2" if fpc else None, lonely_psu="adjust",
                           survey_version=version, **kw)


@pytest.mark.parametrize("dense", [True, False])
def test_mu284_lonely_stratum(R, mu284, monkeypatch, dense):
    """R's tests/multistage-rcpp.R design: the issue's SE of the y1 total, 7,261 under 4.5
    and 10,723 under 4.1.1; totals, means (vcov), domains (svyby, covmat), both variance
    layouts (dense and sorted pairs)."""
    if not dense:
        monkeypatch.setattr(taylor, "DENSE_PAIRS_PER_ROW", -10**9)
    a = REF["adjust"]
    fpc = R_MU.format(fpc=", fpc=~n1+n2")
    for version in ("4.5", "4.1"):
        d = _mu(mu284, version)
        tot = d.total(["y1", "y2"], covmat=True)
        mean = d.mean(["y1", "y2"], covmat=True)
        by = d.total("y1", by="dom")
        byc = ss.vcov(d.total("y1", by="dom", covmat=True)).to_numpy()
        nofpc = ss.vcov(_mu(mu284, version, fpc=False).total(["y1", "y2"], covmat=True))
        if version == "4.5":
            ref_tot, ref_mean = a["mu284_total"]["vcov"], a["mu284_mean"]["vcov"]
            ref_by, ref_byc = a["mu284_by_dom"]["se"], a["mu284_by_dom_covmat"]
            ref_nofpc = a["mu284_nofpc_total"]["vcov"]
            assert round(float(tot.se.iloc[0])) == 7261
        else:
            ref_tot = _r_adjust(R, f"vcov(svytotal(~y1+y2, {fpc}))")
            ref_mean = _r_adjust(R, f"vcov(svymean(~y1+y2, {fpc}))")
            ref_by = _r_adjust(R, f"SE(svyby(~y1, ~dom, {fpc}, svytotal))")
            ref_byc = _r_adjust(R, f"vcov(svyby(~y1, ~dom, {fpc}, svytotal, covmat=TRUE))")
            ref_nofpc = _r_adjust(R, f"vcov(svytotal(~y1+y2, {R_MU.format(fpc='')}))")
            assert round(float(tot.se.iloc[0])) == 10723
        assert_rel(ss.vcov(tot).to_numpy().ravel(), ref_tot, 1e-10, f"{version} total")
        assert_rel(ss.vcov(mean).to_numpy().ravel(), ref_mean, 1e-10, f"{version} mean")
        assert_rel(by.se, ref_by, 1e-10, f"{version} svyby")
        assert_rel(byc.ravel(), ref_byc, 1e-10, f"{version} svyby covmat")
        assert_rel(nofpc.to_numpy().ravel(), ref_nofpc, 1e-10, f"{version} no fpc")


def test_mu284_domain_lonely_and_ultimate_cluster(R, mu284):
    """A domain reaching one PSU of a stratum with survey.adjust.domain.lonely, and the
    ultimate-cluster variance (first stage only: our designs without fpc at stage 2)."""
    a = REF["adjust"]
    two = mu284[mu284.stratum != 3].reset_index(drop=True)
    for version in ("4.5", "4.1"):
        d = _mu(two, version, adjust_domain_lonely=True)
        got = d.total("y1", by="dom").se
        if version == "4.5":
            ref = a["mu284_by_dom_adjust_domain"]["se"]
        else:
            ref = _r_adjust(R, "SE(svyby(~y1, ~dom, svydesign(data=subset(mu_s, stratum != 3), "
                               "strata=~stratum, nest=TRUE, id=~id1+id2, fpc=~n1+n2), "
                               "svytotal))", domain=True)
        assert_rel(got, ref, 1e-10, f"{version} domain lonely")
    one = ss.SurveyDesign(mu284.assign(w=_mu(mu284).weights), ids="id1", strata="stratum",
                          nest=True, fpc="n1", weights="w", lonely_psu="adjust")
    assert_rel(ss.vcov(one.total(["y1", "y2"], covmat=True)).to_numpy().ravel(),
               a["mu284_ultimate"]["vcov"], 1e-10, "ultimate cluster")


def test_r_lonely_psu_tests_and_poststratified(R, api):
    """R's tests/lonely.psu.R: apiclus1 stratified by district (lonely districts), its
    subset ds1 (with and without adjust.domain.lonely), the svytotal check (127,579.8 under
    4.5), and a post-stratified design."""
    a = REF["adjust"]
    x = api["apiclus1"]
    ds = ss.SurveyDesign(x, strata="dnum", weights="pw", lonely_psu="adjust")
    assert_rel(ss.vcov(ds.mean(["api00", "api99"], covmat=True)).to_numpy().ravel(),
               a["apiclus1_strata_dnum"]["vcov"], 1e-10)
    sub = x[x.dnum != 413].reset_index(drop=True)
    for adl, key in ((False, "apiclus1_ds1"), (True, "apiclus1_ds1_adjust_domain")):
        d = ss.SurveyDesign(sub, strata="dnum", weights="pw", lonely_psu="adjust",
                            adjust_domain_lonely=adl)
        keep = np.ones(len(sub), bool)
        keep[30] = False  # R's ds[-31, ]
        got = d.subset(keep).mean("api00").se.to_numpy() ** 2
        assert_rel(got, a[key]["vcov"], 1e-10, key)
    single = pd.DataFrame({"Stratum": [1, 1, 2, 2, 3], "PSU": [1, 2, 3, 4, 5],
                           "Design_Weight": [10.5, 10.5, 20, 20, 15],
                           "Age": [30.5, 40.5, 35, 52, 44]})
    for version, ref in (("4.5", 127579.8), ("4.1", None)):
        d = ss.SurveyDesign(single, ids="PSU", strata="Stratum", weights="Design_Weight",
                            lonely_psu="adjust", survey_version=version)
        v = float(d.total("Age").se.iloc[0]) ** 2
        if ref is None:
            _to_r("single", single)
            ref = float(np.ravel(_r_adjust(R, "vcov(svytotal(~Age, svydesign(data=single, "
                                              "ids=~PSU, strata=~Stratum, "
                                              "weights=~Design_Weight)))"))[0])
        else:
            assert_rel(v, a["singleton_total"]["vcov"], 1e-12)
        assert v == pytest.approx(ref, rel=1e-6)
    ps = ds.post_stratify("stype", TYPES)
    assert_rel(ps.mean("api00").se ** 2, a["apiclus1_poststrat"]["vcov"], 1e-10, "poststrat")
    ps41 = ss.SurveyDesign(x, strata="dnum", weights="pw", lonely_psu="adjust",
                           survey_version="4.1").post_stratify("stype", TYPES)
    r41 = _r_adjust(R, f"SE(svymean(~api00, postStratify(svydesign(id=~1, weights=~pw, "
                       f"strata=~dnum, data=apiclus1), ~stype, {R_TYPES})))")
    assert_rel(ps41.mean("api00").se, r41, 1e-10, "poststrat 4.1")


def test_brewer_lonely_stratum(R, api):
    x = api["apistrat"]
    one = x[(x.stype != "H") | (x.index == x.index[x.stype == "H"][0])].reset_index(drop=True)
    one = one.assign(pi=1 / one.pw)
    ref = REF["adjust"]["apistrat_brewer_one_h"]
    for version in ("4.5", "4.1"):
        d = ss.SurveyDesign(one, strata="stype", fpc="pi", pps="brewer", lonely_psu="adjust",
                            survey_version=version)
        got = ss.vcov(d.total(["api00", "meals"], covmat=True)).to_numpy().ravel()
        if version == "4.1":
            _to_r("brewer_one", one)
            ref_v = _r_adjust(R, "vcov(svytotal(~api00+meals, svydesign(id=~1, strata=~stype, "
                                 "fpc=~pi, pps='brewer', data=brewer_one)))")
        else:
            ref_v = ref["vcov"]
        assert_rel(got, ref_v, 1e-10, f"brewer {version}")


def test_other_lonely_rules_do_not_depend_on_the_version(api):
    x = api["apiclus1"]
    for rule in ("remove", "certainty", "average"):
        a, b = (ss.SurveyDesign(x, strata="dnum", weights="pw", lonely_psu=rule,
                                survey_version=v).mean("api00", by="stype") for v in ("4.5", "4.1"))
        np.testing.assert_array_equal(a.se, b.se)


# ---------------------------------------------------------------------------- ACS mse
def test_acs_replicates_use_mse(R, api):
    ref = REF["acs"]
    x = api["apistrat"]
    rep = np.array(ref["repweights"]).reshape(8, -1).T
    _to_r("acs_rep", pd.DataFrame(rep))

    def make(**kw):
        return ss.ReplicateDesign(x, repweights=rep, weights="pw", type="ACS", **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = make()
    assert d.mse and d.scale == ref["default"]["scale"]
    with pytest.warns(UserWarning, match="ACS uses MSE standard errors"):
        d_false = make(mse=False)
    assert not d_false.mse
    for dd, key in ((d, "default"), (d_false, "mse_false"), (make(mse=True), "mse_true")):
        v = ss.vcov(dd.mean(["api00", "api99"], covmat=True)).to_numpy().ravel()
        assert_rel(v, ref[key]["vcov"], 1e-12, key)
    old = make(survey_version="4.1")
    assert not old.mse
    r41 = R("local({ d <- svrepdesign(data=apistrat, repweights=as.matrix(acs_rep), "
            "weights=~pw, type='ACS', combined.weights=TRUE); vcov(svymean(~api00+api99, d)) })")
    assert_rel(ss.vcov(old.mean(["api00", "api99"], covmat=True)).to_numpy().ravel(), r41,
               1e-12, "4.1")
    # other types keep mse=False by default
    assert not ss.ReplicateDesign(x, repweights=rep, weights="pw", type="successive-difference").mse


# ------------------------------------------------------------------ trimWeights strict
TRIM = {
    "clus1_greg": (lambda api: ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw",
                                               fpc="fpc").calibrate("~stype+api99", POP),
                   f"calibrate(svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc), "
                   f"~stype+api99, {R_POP})", 45, 20),
    "clus1_greg_40_30": (None, None, 40, 30),
    "clus1_greg_38_25": (None, None, 38, 25),
    "strat2": (lambda api: ss.SurveyDesign(api["apistrat"], ids="~dnum+snum", strata="stype",
                                           weights="pw", nest=True),
               "svydesign(id=~dnum+snum, strata=~stype, weights=~pw, data=apistrat, nest=TRUE)",
               40, 20),
    "clus2_poststrat": (lambda api: ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum",
                                                    fpc="~fpc1+fpc2").post_stratify("stype",
                                                                                    TYPES),
                        f"postStratify(svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, "
                        f"data=apiclus2), ~stype, {R_TYPES})", 80, 15),
}


@pytest.mark.parametrize("case", list(TRIM))
def test_strict_trimming(R, api, case):
    """?trimWeights's calibrated apiclus1 (three pairs of bounds), a stratified two-stage and
    a post-stratified design: weights and vcov as R 4.5; under "4.1" as R 4.1.1 live."""
    build, r_design, upper, lower = TRIM[case]
    if build is None:
        build, r_design = TRIM["clus1_greg"][:2]
    ref = REF["trim_strict"][case]
    assert ref["warning"] == ""
    base = build(api)
    new = trim_weights(base, upper=upper, lower=lower, strict=True)
    assert_rel(new.weights, ref["weights"], 1e-12, f"{case} weights")
    assert_rel(ss.vcov(new.mean(["api00", "api99"], covmat=True)).to_numpy().ravel(),
               ref["vcov"], 1e-10, f"{case} vcov")
    old = trim_weights(base, upper=upper, lower=lower, strict=True, survey_version="4.1")
    r41 = R(f"local({{ t <- trimWeights({r_design}, upper={upper}, lower={lower}, "
            "strict=TRUE); weights(t) })")
    assert_rel(old.weights, r41, 1e-12, f"{case} weights 4.1")
    for t in (new, old):
        assert t.weights.sum() == pytest.approx(base.weights.sum(), rel=1e-13)


def test_strict_trimming_issue_difference(api):
    """?trimWeights's example: 4.1.1 re-shares to the weights trimmed up to 20 (smallest
    20.01), 4.5 leaves them at 20."""
    build = TRIM["clus1_greg"][0]
    new = trim_weights(build(api), upper=45, lower=20, strict=True)
    old = trim_weights(build(api), upper=45, lower=20, strict=True, survey_version="4.1")
    assert new.weights.min() == 20
    assert old.weights.min() == pytest.approx(20.01057, abs=1e-5)


def test_strict_trimming_out_of_receivers(api):
    """apiclus2, bounds 20-60: R 4.5 runs out of weights to share with and warns 'trimming
    failed' (its weights then lose the total); we refuse, naming the 4.1 switch."""
    ref = REF["trim_strict"]["clus2"]
    assert ref["warning"] == "trimming failed"
    assert sum(ref["weights"]) < ref["total_before"] - 100
    d = ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2")
    with pytest.raises(CalibrationError, match="trimming failed.*survey_version='4.1'"):
        trim_weights(d, upper=60, lower=20, strict=True)
    assert trim_weights(d, upper=60, lower=20, strict=True,
                        survey_version="4.1").weights.min() > 29


# ------------------------------------------------- svyciprop(method="likelihood"), replicates
@pytest.fixture(scope="module")
def rep_designs(api):
    with r_session("survey") as (ro, _):
        nh = r_to_pandas(ro.r("local({ data(nhanes); nhanes })"))
    nh["hc"] = nh.HI_CHOL.map({0: "no", 1: "yes"})
    kw = dict(ids="SDMVPSU", strata="SDMVSTRA", weights="WTMEC2YR", nest=True)
    return {
        "strat_jkn": (ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw").jackknife(),
                      "awards", "No", "stype"),
        "nhanes_brr": (ss.SurveyDesign(nh[nh.SDMVPSU < 3].reset_index(drop=True), **kw).brr(),
                       "hc", "yes", "agecat"),
        "clus1_jk1_greg": (ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw",
                                           fpc="fpc").jackknife("JK1").calibrate(
                               "~stype+api99", POP), "sch.wide", "Yes", "stype"),
    }


@pytest.mark.parametrize("name", ["strat_jkn", "clus1_jk1_greg"])
def test_likelihood_interval_on_replicate_designs(rep_designs, name):
    """R 4.5's interval (JKn; a calibrated JK1): equal to R profiled finely to 1e-7 (we
    solve the profile equation; R interpolates a spline, its default within 1e-4)."""
    d, var, lev, by = rep_designs[name]
    ref = REF["ciprop_likelihood"][name]
    assert ref["dispersion"] == pytest.approx(1, abs=1e-12)
    o = d.proportion(var, na_rm=True, ci_method="likelihood")
    o = o[o.level == lev]
    assert_rel(o.estimate, ref["estimate"], 1e-12)
    mine = np.r_[o.ci_low, o.ci_high]
    assert_rel(mine, ref["fine"], 1e-7, f"{name} fine")
    assert_rel(mine, ref["ci"], 1e-4, f"{name} R default")
    ob = d.proportion(var, by=by, na_rm=True, ci_method="likelihood")
    ob = ob[ob.level == lev]
    assert_rel(np.r_[ob.ci_low, ob.ci_high], np.r_[ref["by_fine_low"], ref["by_fine_high"]],
               1e-7, f"{name} by fine")


def test_likelihood_interval_with_missing_values(rep_designs):
    """nhanes (BRR) has missing HI_CHOL: R 4.5's dispersion is not 1 but the mean weight of
    the rows kept over that of all rows (1.0115: its prior weights are scaled by the one
    mean, its Pearson residuals by the other); so is ours, and the limits are R's."""
    d, var, lev, by = rep_designs["nhanes_brr"]
    ref = REF["ciprop_likelihood"]["nhanes_brr"]
    w = d.weights
    keep = d.data[var].notna().to_numpy()
    assert w[keep].mean() / w.mean() == pytest.approx(ref["dispersion"], rel=1e-10)
    o = d.proportion(var, na_rm=True, ci_method="likelihood")
    o = o[o.level == lev]
    assert_rel(np.r_[o.ci_low, o.ci_high], ref["fine"], 1e-7)
    ob = d.proportion(var, by=by, na_rm=True, ci_method="likelihood")
    ob = ob[ob.level == lev]
    assert_rel(np.r_[ob.ci_low, ob.ci_high], np.r_[ref["by_fine_low"], ref["by_fine_high"]],
               1e-7, "by fine")


def test_likelihood_on_replicates_under_41_is_na(R, rep_designs):
    """R 4.1.1 returns NA here (its dispersion is about n); "4.1" gives NaN limits."""
    d, var, lev, _ = rep_designs["strat_jkn"]
    r41 = R("local({ d <- as.svrepdesign(svydesign(id=~1, strata=~stype, weights=~pw, "
            "data=apistrat), type='JKn'); attr(svyciprop(~I(awards == 'No'), d, "
            "method='likelihood'), 'ci') })")
    assert np.isnan(r41).all()
    o = d.proportion(var, ci_method="likelihood", survey_version="4.1")
    assert np.isnan(o[["ci_low", "ci_high"]].to_numpy()).all()
    assert np.isfinite(o.estimate).all()
    # Taylor designs: both versions the same
    t = ss.SurveyDesign(rep_designs["strat_jkn"][0].data, strata="stype", weights="pw")
    a, b = (t.proportion(var, ci_method="likelihood", survey_version=v) for v in ("4.5", "4.1"))
    np.testing.assert_array_equal(a.ci_low, b.ci_low)
