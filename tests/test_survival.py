"""svykm, svycoxph and svylogrank against R survey, live through rpy2 (survey 4.1.1 with survival
3.5; 4.5 computes the same numbers: its svykm/svylogrank code is 4.1.1's, svycoxph's differs only
in what it stores as inv.info). R's man-page examples on the pbc data (?svykm, ?svycoxph,
?svylogrank: ``dpbc``, the randomized patients weighted by a fitted response propensity), the
replicate design ``as.svrepdesign(dpbc)`` (its weights exported) and a calibrated design, to
1e-8 relative."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.analysis import (
    marginpred,
    predict_svycoxph,
    svycoxph,
    svykm,
    svylogrank,
    svysurvreg,
)
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8
# ?svykm and ?svylogrank fit the propensity by a linear model, ?svycoxph by a logistic one
R_SETUP = """
suppressMessages({library(survey); library(survival)})
sv_pbc <- survival::pbc
sv_pbc$randomized <- with(sv_pbc, !is.na(trt) & trt>0)
sv_pbc$randprob <- fitted(glm(randomized~age*edema, data=sv_pbc))
sv_pbc$randprob_logit <- fitted(glm(randomized~age*edema, data=sv_pbc, family=binomial))
sv_pbc$tstart <- pmax(0, sv_pbc$time - 1500)
sv_data <- subset(sv_pbc, randomized)
sv_dpbc <- svydesign(id=~1, prob=~randprob, strata=~edema, data=sv_data)
sv_cpbc <- svydesign(id=~1, prob=~randprob_logit, strata=~edema, data=sv_data)
sv_rpbc <- as.svrepdesign(sv_dpbc)
sv_rcpbc <- as.svrepdesign(sv_cpbc)
sv_cal <- calibrate(sv_dpbc, ~sex+age, c(`(Intercept)`=420, sexf=370, age=420*50.7))
sv_ccal <- calibrate(sv_cpbc, ~sex+age, c(`(Intercept)`=420, sexf=370, age=420*50.7))
"""
POP = {"(Intercept)": 420, "sexf": 370, "age": 420 * 50.7}


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _rep(name: str, data: pd.DataFrame) -> ReplicateDesign:
    return ReplicateDesign(data, repweights=_r(f"as.matrix(weights({name}, 'analysis'))"),
                           weights=_r(f"as.numeric({name}$pweights)"), type="other",
                           scale=float(_r(f"{name}$scale")[0]), rscales=_r(f"{name}$rscales"),
                           mse=bool(_r(f"as.numeric({name}$mse)")[0]), combined_weights=True)


@pytest.fixture(scope="module")
def designs(R):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
        data = r_to_pandas(ro.r("sv_data"))
    dpbc = ss.SurveyDesign(data, probs="randprob", strata="edema")
    cpbc = ss.SurveyDesign(data, probs="randprob_logit", strata="edema")
    return {"sv_dpbc": dpbc, "sv_cpbc": cpbc,
            "sv_rpbc": _rep("sv_rpbc", data), "sv_rcpbc": _rep("sv_rcpbc", data),
            "sv_cal": dpbc.calibrate("~sex+age", POP),
            "sv_ccal": cpbc.calibrate("~sex+age", POP)}


def _curve(code: str) -> dict[str, np.ndarray]:
    with r_session("survey") as (ro, _):
        ro.r(f"sv_s <- {code}")
        out = {k: np.array(ro.r(f"sv_s${k}"), dtype=float) for k in ("time", "surv")}
        if ro.r("!is.null(sv_s$varlog)")[0]:
            out["varlog"] = np.array(ro.r("sv_s$varlog"), dtype=float)
    return out


def _same_curve(ours, ref, what):
    assert_rel(ours.time, ref["time"], 0, f"{what} time")
    # atol: the last step of a curve reaching 0 is 1 - d/N with d = N, R's rounding 2e-16
    assert_rel(ours.surv, ref["surv"], TOL, f"{what} surv", atol=1e-14)
    if "varlog" in ref:
        assert_rel(ours.varlog, ref["varlog"], TOL, f"{what} varlog")
    else:
        assert ours.varlog is None


def test_svykm_man_page_equals_R(designs):
    """?svykm: s1 (one curve) and its quantiles, s2 (by I(bili>6)), s3 (with SEs), its
    confint at 1..5 years and quantiles with intervals."""
    d = designs["sv_dpbc"]
    s1 = svykm("Surv(time, status > 0) ~ 1", d)
    _same_curve(s1, _curve("svykm(Surv(time,status>0)~1, design=sv_dpbc)"), "s1")
    probs = [0.9, 0.75, 0.5, 0.25, 0.1]
    q = _r("quantile(svykm(Surv(time,status>0)~1, design=sv_dpbc), "
           "probs=c(0.9,0.75,0.5,0.25,0.1))")
    np.testing.assert_array_equal(s1.quantile(probs)["time"], q)
    s2 = svykm("Surv(time, status > 0) ~ I(bili > 6)", d)
    assert list(s2) == ["FALSE", "TRUE"]
    for i, lev in enumerate(s2, start=1):
        _same_curve(s2[lev], _curve(f"svykm(Surv(time,status>0)~I(bili>6), "
                                    f"design=sv_dpbc)[[{i}]]"), f"s2 {lev}")
    s3 = svykm("Surv(time, status > 0) ~ I(bili > 6)", d, se=True)
    for i, lev in enumerate(s3, start=1):
        _same_curve(s3[lev], _curve(f"svykm(Surv(time,status>0)~I(bili>6), design=sv_dpbc, "
                                    f"se=TRUE)[[{i}]]"), f"s3 {lev}")
    ci = s3["TRUE"].confint(365 * np.arange(1, 6))
    ref = _r("as.vector(confint(svykm(Surv(time,status>0)~I(bili>6), design=sv_dpbc, "
             "se=TRUE)[[2]], parm=365*(1:5)))")
    assert_rel(np.concatenate([ci["ci_low"], ci["ci_high"]]), ref, TOL, "s3 confint")
    qq = s3["FALSE"].quantile(ci=True)
    with r_session("survey") as (ro, _):
        ro.r("sv_q <- quantile(svykm(Surv(time,status>0)~I(bili>6), design=sv_dpbc, "
             "se=TRUE)[[1]], ci=TRUE)")
        ref_q = np.array(ro.r("as.vector(sv_q)"), dtype=float)
        ref_ci = np.array(ro.r("as.vector(attr(sv_q, 'ci'))"), dtype=float)
    np.testing.assert_array_equal(qq["time"], ref_q)  # times of the data: exact
    np.testing.assert_array_equal(np.concatenate([qq["ci_low"], qq["ci_high"]]), ref_ci)
    assert np.isinf(ref_ci).any() and np.isfinite(ref_ci).any()


def test_svykm_se_is_nelson_aalen_not_product_limit(designs):
    """With se=TRUE R's curve is exp(-cumulative hazard), not the product limit: the two
    differ (a product-limit curve with R's SEs would fail the test above)."""
    d = designs["sv_dpbc"]
    pl = svykm("Surv(time, status > 0) ~ 1", d)
    na = svykm("Surv(time, status > 0) ~ 1", d, se=True)
    last = pl.surv[np.searchsorted(pl.time, na.time[-1])]
    assert abs(na.surv[-1] - last) > 1e-3


@pytest.mark.parametrize("design", ["sv_rpbc", "sv_cal"])
def test_svykm_replicate_and_calibrated_equal_R(designs, design):
    """A replicate design (curve only: R has no SEs there) and a calibrated one (with SEs:
    the calibration enters the variance)."""
    se = design == "sv_cal"
    ours = svykm("Surv(time, status > 0) ~ 1", designs[design], se=se)
    _same_curve(ours, _curve(f"svykm(Surv(time,status>0)~1, design={design}, "
                             f"se={'TRUE' if se else 'FALSE'})"), design)
    if se:  # the calibration matters for the SEs
        plain = svykm("Surv(time, status > 0) ~ 1", designs["sv_dpbc"], se=True)
        assert np.max(np.abs(plain.varlog / ours.varlog - 1)) > 1e-3


def _cox_ref(design: str, formula: str, extra: str = "") -> dict[str, np.ndarray]:
    # The formula is written where strata is survival's: a package attached later in the R
    # session (sampling, by another test) would mask it (sampling::strata fails on strata(sex)).
    # survival::strata(sex) is no answer: svycoxph does not read it as the strata special.
    with r_session("survey") as (ro, _):
        ro.r(f"sv_m <- local({{strata <- survival::strata; "
             f"svycoxph({formula}, design={design}{extra})}})")
        return {"coef": np.array(ro.r("coef(sv_m)"), dtype=float),
                "vcov": np.array(ro.r("as.vector(vcov(sv_m))"), dtype=float)}


COX = ("Surv(time, status > 0) ~ np.log(bili) + protime + albumin",
       "Surv(time,status>0)~log(bili)+protime+albumin")


@pytest.mark.parametrize("design", ["sv_cpbc", "sv_rcpbc", "sv_ccal"])
def test_svycoxph_man_page_equals_R(designs, design):
    """?svycoxph: model on dpbc and rpbc; and on a calibrated design."""
    res = svycoxph(COX[0], designs[design])
    ref = _cox_ref(design, COX[1])
    assert_rel(res.params, ref["coef"], TOL, f"{design} coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, f"{design} vcov")
    assert list(res.params.index) == ["np.log(bili)", "protime", "albumin"]


def test_predict_svycoxph_curves_man_page_equals_R(designs):
    """?svycoxph: predict(model, se=TRUE, type="curve", newdata=...) at bili 3 and 9,
    quantile(s[[1]], ci=TRUE) and confint(s[[2]], parm=365*(1:5)); and the curves without
    SEs."""
    res = svycoxph(COX[0], designs["sv_cpbc"])
    nd = pd.DataFrame({"bili": [3.0, 9.0], "protime": [10.0, 10.0], "albumin": [3.5, 3.5]})
    curves = predict_svycoxph(res, nd, se=True)
    plain = res.predict_curve(nd)
    call = (f"predict(svycoxph({COX[1]}, design=sv_cpbc), type='curve', newdata=data.frame("
            "bili=c(3,9), protime=c(10,10), albumin=c(3.5,3.5))")
    for i, lab in enumerate(["0", "1"], start=1):
        _same_curve(curves[lab], _curve(f"{call}, se=TRUE)[[{i}]]"), f"curve {lab}")
        _same_curve(plain[lab], _curve(f"{call})[[{i}]]"), f"plain curve {lab}")
    with r_session("survey") as (ro, _):
        ro.r(f"sv_c <- {call}, se=TRUE)")
        q = np.array(ro.r("as.vector(quantile(sv_c[[1]], ci=TRUE))"), dtype=float)
        qci = np.array(ro.r("as.vector(attr(quantile(sv_c[[1]], ci=TRUE), 'ci'))"), dtype=float)
        ci = np.array(ro.r("as.vector(confint(sv_c[[2]], parm=365*(1:5)))"), dtype=float)
    qq = curves["0"].quantile(ci=True)
    np.testing.assert_array_equal(np.concatenate([qq["time"], qq["ci_low"], qq["ci_high"]]),
                                  np.concatenate([q, qci]))
    got = curves["1"].confint(365 * np.arange(1, 6))
    assert_rel(np.concatenate([got["ci_low"], got["ci_high"]]), ci, TOL, "curve confint")


MP_SETUP = """
set.seed(42)
sv_mdf <- data.frame(x=rnorm(100))
sv_mdf$time <- rexp(100)*exp(sv_mdf$x-1)
sv_mdf$status <- 1
sv_mdf$group <- (sv_mdf$x+rnorm(100))>0
sv_mdes <- suppressWarnings(svydesign(id=~1, data=sv_mdf))
sv_newdf <- data.frame(group=c(FALSE,TRUE), x=c(0,0))
"""


def test_marginpred_survival_man_page_equals_R(designs):
    """?marginpred: conditional curves of m0 (group) and m1 (group + x), the curves of m0
    adjusted for x, and the Kaplan-Meier curves by group adjusted for x, all with SEs; the
    adjustment moves the curves (a version without the raking would fail)."""
    with r_session("survey") as (ro, _):
        ro.r(MP_SETUP)
        df, nd = r_to_pandas(ro.r("sv_mdf")), r_to_pandas(ro.r("sv_newdf"))
    d = ss.SurveyDesign(df, weights=np.ones(df.shape[0]))
    m0 = svycoxph("Surv(time, status) ~ group", d)
    m1 = svycoxph("Surv(time, status) ~ group + x", d)
    cases = {
        "predict(svycoxph(Surv(time,status)~group, design=sv_mdes), type='curve', "
        "newdata=sv_newdf, se=TRUE)": predict_svycoxph(m0, nd, se=True),
        "predict(svycoxph(Surv(time,status)~group+x, design=sv_mdes), type='curve', "
        "newdata=sv_newdf, se=TRUE)": predict_svycoxph(m1, nd, se=True),
        "marginpred(svycoxph(Surv(time,status)~group, design=sv_mdes), adjustfor=~x, "
        "predictat=sv_newdf, se=TRUE)": marginpred(m0, "~x", nd, se=True),
        "marginpred(svykm(Surv(time,status>0)~group, design=sv_mdes), adjustfor=~x, "
        "predictat=sv_newdf, se=TRUE)": marginpred(svykm("Surv(time, status > 0) ~ group", d),
                                                   "~x", nd, se=True),
    }
    for call, ours in cases.items():
        for i, curve in enumerate(ours.values(), start=1):
            _same_curve(curve, _curve(f"{call}[[{i}]]"), call[:40])
    adjusted = list(cases.values())[2]["1"].surv
    conditional = list(cases.values())[0]["1"].surv
    assert np.max(np.abs(adjusted - conditional)) > 1e-3


def test_svycoxph_ties_and_factors_equal_R(designs):
    """Efron (default) and Breslow ties, a factor covariate, on the stratified design; the
    data have tied death times, so the two tie rules differ."""
    d = designs["sv_cpbc"]
    ef = svycoxph("Surv(time, status > 0) ~ age + C(stage) + sex", d)
    ref = _cox_ref("sv_cpbc", "Surv(time,status>0)~age+factor(stage)+sex")
    assert_rel(ef.params, ref["coef"], TOL, "efron coef")
    assert_rel(ef.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, "efron vcov")
    br = svycoxph("Surv(time, status > 0) ~ age + C(stage) + sex", d, ties="breslow")
    ref = _cox_ref("sv_cpbc", "Surv(time,status>0)~age+factor(stage)+sex",
                   ", method='breslow'")
    assert_rel(br.params, ref["coef"], TOL, "breslow coef")
    assert_rel(br.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, "breslow vcov")
    assert np.max(np.abs(br.params.to_numpy() / ef.params.to_numpy() - 1)) > 1e-4


@pytest.mark.parametrize("design,extra", [("sv_dpbc", ""), ("sv_dpbc", ", rho=1"),
                                          ("sv_rpbc", ""), ("sv_cal", ", gamma=1")])
def test_svylogrank_equals_R(designs, design, extra):
    """?svylogrank on dpbc (logrank and rho=1) and rpbc, and a calibrated design."""
    kw = {"rho": 1.0} if "rho" in extra else {"gamma": 1.0} if "gamma" in extra else {}
    res = svylogrank("Surv(time, status == 2) ~ trt", designs[design], **kw)
    ref = _r(f"unlist(svylogrank(Surv(time,status==2)~trt, design={design}{extra}))")
    t = res.details["table"].iloc[0]
    assert_rel([t["score"], t["se"], t["z"], t["p"], res.statistic, res.p_value], ref, TOL,
               f"{design}{extra}")


@pytest.mark.parametrize("design,dist", [("sv_dpbc", "weibull"), ("sv_dpbc", "exponential"),
                                         ("sv_dpbc", "lognormal"), ("sv_dpbc", "loglogistic"),
                                         ("sv_cal", "weibull")])
def test_svysurvreg_equals_R(designs, design, dist):
    """?svysurvreg (Weibull on dpbc), the other distributions, and a calibrated design:
    coefficients with Log(scale), vcov and residual df (agreement limited by R's survreg
    stopping rule, rel.tolerance 1e-9: within 1e-8 here)."""
    res = svysurvreg("Surv(time, status > 0) ~ bili + protime + albumin", designs[design],
                     dist=dist)
    with r_session("survey") as (ro, _):
        ro.r(f"sv_m <- svysurvreg(Surv(time, status>0)~bili+protime+albumin, design={design}, "
             f"dist='{dist}')")
        coef = np.array(ro.r("coef(sv_m)"), dtype=float)
        if dist != "exponential":
            coef = np.append(coef, np.log(np.array(ro.r("sv_m$scale"), dtype=float)))
        V = np.array(ro.r("as.vector(vcov(sv_m))"), dtype=float)
        df = float(ro.r("sv_m$degf.resid")[0])
    assert_rel(res.params, coef, TOL, f"{design} {dist} coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), V, TOL, f"{design} {dist} vcov")
    assert res.df_resid == df
    assert res.params.index[-1] == ("albumin" if dist == "exponential" else "Log(scale)")


@pytest.mark.parametrize("design", ["sv_dpbc", "sv_rpbc"])
def test_svylogrank_score_method_equals_R(designs, design):
    """method="score": the one-step Cox estimate over its design SE (R's z, Chisq, p)."""
    res = svylogrank("Surv(time, status == 2) ~ trt", designs[design], method="score")
    ref = _r(f"unclass(svylogrank(Surv(time,status==2)~trt, design={design}, "
             "method='score'))")
    got = [res.details["table"]["z"].iloc[0], res.statistic, res.p_value]
    assert_rel(got, ref, TOL, f"{design} score")
    with pytest.raises(ValueError, match="rho or gamma"):
        svylogrank("Surv(time, status == 2) ~ trt", designs[design], rho=1, method="score")


@pytest.mark.parametrize("design", ["sv_cpbc", "sv_rcpbc"])
def test_svycoxph_strata_equals_R(designs, design):
    """A stratified Cox model (strata(sex): a baseline hazard per sex), linearization and
    replicate designs; curves of a stratified model are refused, as in R."""
    res = svycoxph(COX[0] + " + strata(sex)", designs[design])
    ref = _cox_ref(design, COX[1] + "+strata(sex)")
    assert_rel(res.params, ref["coef"], TOL, f"{design} strata coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, f"{design} vcov")
    plain = svycoxph(COX[0], designs[design])
    assert np.max(np.abs(plain.params.to_numpy() / res.params.to_numpy() - 1)) > 1e-4
    if design == "sv_cpbc":
        with pytest.raises(ValueError, match="Stratified models"):
            res.predict_curve(pd.DataFrame({"bili": [3.0], "protime": [10.0],
                                            "albumin": [3.5], "sex": ["f"]}))


@pytest.mark.parametrize("design,extra", [("sv_cpbc", ""), ("sv_rcpbc", "+strata(sex)")])
def test_svycoxph_counting_process_equals_R(designs, design, extra):
    """Surv(start, stop, event) (at risk on (start, stop], here entry 1500 days before the
    end of follow-up), on the stratified and the replicate design, the latter with strata."""
    res = svycoxph("Surv(tstart, time, status > 0) ~ np.log(bili) + protime + albumin"
                   + extra.replace("+", " + "), designs[design])
    ref = _cox_ref(design, f"Surv(tstart,time,status>0)~log(bili)+protime+albumin{extra}")
    assert_rel(res.params, ref["coef"], TOL, f"{design} counting coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, f"{design} vcov")
    right = svycoxph(COX[0] + extra.replace("+", " + "), designs[design])
    assert np.max(np.abs(right.params.to_numpy() / res.params.to_numpy() - 1)) > 1e-3


def test_subset_and_missing_values_equal_R(designs):
    """A domain (subset(dpbc, sex == "f"): the full design for the variance) for svykm with
    SEs and svycoxph, and svycoxph with a covariate missing in 28 rows (R's na.omit: out of
    the fit, in the design)."""
    d = designs["sv_cpbc"]
    sub = d.subset(d.data["sex"] == "f")
    k = svykm("Surv(time, status > 0) ~ 1", sub, se=True)
    _same_curve(k, _curve("svykm(Surv(time,status>0)~1, design=subset(sv_cpbc, sex=='f'), "
                          "se=TRUE)"), "subset km")
    res = svycoxph(COX[0], sub)
    ref = _cox_ref("subset(sv_cpbc, sex=='f')", COX[1])
    assert_rel(res.params, ref["coef"], TOL, "subset coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, "subset vcov")
    assert d.data["chol"].isna().sum() == 28
    res = svycoxph(COX[0] + " + chol", d)
    ref = _cox_ref("sv_cpbc", COX[1] + "+chol")
    assert_rel(res.params, ref["coef"], TOL, "NA coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, "NA vcov")
    assert res.nobs == 312 - 28


def test_survival_errors(designs):
    d = designs["sv_dpbc"]
    with pytest.raises(ValueError, match="Surv"):
        svykm("time ~ 1", d)
    with pytest.raises(ValueError, match="0/1 or logical"):
        svykm("Surv(time, status) ~ 1", d)
    with pytest.raises(ValueError, match="not available on replicate"):
        svykm("Surv(time, status > 0) ~ 1", designs["sv_rpbc"], se=True)
    with pytest.raises(ValueError, match="ties="):
        svycoxph("Surv(time, status > 0) ~ age", d, ties="exact")
    with pytest.raises(ValueError, match="replicate designs are not supported"):
        svysurvreg("Surv(time, status > 0) ~ bili", designs["sv_rpbc"])
    with pytest.raises(ValueError, match="dist="):
        svysurvreg("Surv(time, status > 0) ~ bili", d, dist="gamma")
    with pytest.raises(ValueError, match="only right-censored"):
        svykm("Surv(age, time, status > 0) ~ sex", d)
    with pytest.raises(ValueError, match="start < stop"):
        svycoxph("Surv(time, age, status > 0) ~ sex", d)
