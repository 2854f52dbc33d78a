"""predict.svyglm (total=, vcov=, quasi families), marginpred and svypredmeans against R survey,
live through rpy2 (R survey 4.1.1; 4.5's code for all three is the same, checked by running the
man-page examples under both): R's man-page examples (?svyglm's regression estimators of a
total, ?svypredmeans on nhanes and apistrat, ?marginpred's logistic example), a replicate design
(R's JKn of apistrat, its weights exported) and a calibrated design, to 1e-8 relative."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.analysis import marginpred, predict_svyglm, quasi, svyglm, svypredmeans
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages(library(survey)); data(api); data(nhanes)
pr_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
pr_rstrat <- as.svrepdesign(pr_dstrat)
pr_cal <- calibrate(pr_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
pr_nhanes <- svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, nest=TRUE, data=nhanes)
set.seed(42)
pr_df <- data.frame(x=rnorm(100))
pr_df$time <- rexp(100)*exp(pr_df$x-1)
pr_df$status <- 1
pr_df$group <- (pr_df$x+rnorm(100))>0
pr_des <- suppressWarnings(svydesign(id=~1, data=pr_df))
pr_newdf <- data.frame(group=c(FALSE,TRUE), x=c(0,0), time=c(0.1, 0.8))
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _r_frame(code: str) -> pd.DataFrame:
    with r_session("survey") as (ro, _):
        return r_to_pandas(ro.r(code))


def _svystat(code: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimates, SEs and the covariance of an R svystat / predict result."""
    with r_session("survey") as (ro, _):
        ro.r(f"pr_s <- {code}")
        est = np.array(ro.r("as.vector(coef(pr_s))"), dtype=float)
        V = np.array(ro.r("as.matrix(attr(pr_s, 'var'))"), dtype=float)
    if V.shape == (est.shape[0], est.shape[0]):
        return est, np.sqrt(np.diag(V)), V
    return est, np.sqrt(V.ravel()), V


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    rep = ReplicateDesign(api["apistrat"], repweights=_r("as.matrix(weights(pr_rstrat, 'analysis'))"),
                          weights=_r("as.numeric(pr_rstrat$pweights)"), type="other",
                          scale=float(_r("pr_rstrat$scale")[0]), rscales=_r("pr_rstrat$rscales"),
                          mse=bool(_r("as.numeric(pr_rstrat$mse)")[0]), combined_weights=True)
    nhanes = _r_frame("nhanes")
    df = _r_frame("pr_df")
    return {
        "pr_dstrat": strat,
        "pr_rstrat": rep,
        "pr_cal": strat.calibrate("~stype+api99", POP),
        "pr_nhanes": ss.SurveyDesign(nhanes, ids="SDMVPSU", strata="SDMVSTRA",
                                     weights="WTMEC2YR", nest=True),
        "pr_des": ss.SurveyDesign(df, weights=np.ones(df.shape[0])),
        "apipop": _r_frame("apipop"),
        "newdf": _r_frame("pr_newdf"),
    }


@pytest.mark.parametrize("family,r_family", [
    ("gaussian", "gaussian()"),
    (quasi("identity", "mu"), 'quasi(link="identity", var="mu")'),
    (quasi("identity", "mu^3"), 'quasi(link="identity", var="mu^3")'),
])
def test_predict_total_regression_estimator_equals_R(designs, family, r_family):
    """?svyglm: the regression and ratio estimators of the total of api.stu from the
    population's enrolment, predict(model, newdata=pop, total=npop)."""
    apipop = designs["apipop"]
    pop = pd.DataFrame({"enroll": [apipop["enroll"].sum()]})
    formula = "api.stu ~ enroll" if family == "gaussian" else "api.stu ~ enroll - 1"
    res = svyglm(formula, designs["pr_dstrat"], family=family)
    est, se, _ = _svystat(
        f"predict(svyglm({formula}, design=pr_dstrat, family={r_family}), "
        "newdata=data.frame(enroll=sum(apipop$enroll, na.rm=TRUE)), total=nrow(apipop))")
    p = res.predict(pop, total=apipop.shape[0])
    assert_rel(p["fit"], est, TOL, f"{r_family} total")
    assert_rel(p["se"], se, TOL, f"{r_family} total se")
    if family == "gaussian":  # the total= argument matters: without it, a different number
        assert abs(res.predict(pop)["fit"].iloc[0] - est[0]) > 1e3


def test_quasi_mu_is_the_ratio_estimator(designs):
    """quasi(identity, mu) without intercept reproduces the ratio estimator (R's comment), and
    a wrong variance function (mu^2) does not."""
    d = designs["pr_dstrat"]
    apipop = designs["apipop"]
    ratio = d.ratio("api.stu", "enroll")["estimate"].iloc[0]
    pop = pd.DataFrame({"enroll": [apipop["enroll"].sum()]})
    fit = svyglm("api.stu ~ enroll - 1", d, family=quasi("identity", "mu"))
    assert_rel(fit.predict(pop)["fit"], [ratio * pop["enroll"].iloc[0]], 1e-10, "ratio")
    other = svyglm("api.stu ~ enroll - 1", d, family=quasi("identity", "mu^2"))
    assert abs(other.params.iloc[0] / ratio - 1) > 1e-4
    with pytest.raises(ValueError, match="variance='mu^4'".replace("^", r"\^")):
        quasi("identity", "mu^4")


@pytest.mark.parametrize("design", ["pr_dstrat", "pr_rstrat", "pr_cal"])
def test_predict_vcov_response_equals_R(designs, api, design):
    """predict(type='response', vcov=TRUE) at new rows: the full covariance (delta method)."""
    res = svyglm("sch.wide ~ ell + meals", designs[design], family="quasibinomial")
    new = api["apistrat"].iloc[:5]
    p = res.predict(new, type="response", vcov=True)
    est, se, V = _svystat(
        f"predict(svyglm(sch.wide ~ ell + meals, design={design}, family=quasibinomial()), "
        "newdata=apistrat[1:5, ], type='response', vcov=TRUE)")
    assert_rel(p["fit"], est, TOL, f"{design} fit")
    assert_rel(p["se"], se, TOL, f"{design} se")
    assert_rel(p.attrs["vcov"], V, TOL, f"{design} vcov")
    assert np.abs(V - np.diag(np.diag(V))).max() > 0  # the off-diagonal is checked
    assert_rel(predict_svyglm(res, new, type="link")["se"],
               np.sqrt(np.diag(_svystat(
                   f"predict(svyglm(sch.wide ~ ell + meals, design={design}, "
                   "family=quasibinomial()), newdata=apistrat[1:5, ], vcov=TRUE)")[2])),
               TOL, f"{design} link se")


def test_svypredmeans_nhanes_man_page_equals_R(designs):
    """?svypredmeans: high cholesterol by race adjusted for age and sex (nhanes), and the
    relative risks svycontrast(means, quote(`1`/`2`))."""
    d = designs["pr_nhanes"]
    model = svyglm("HI_CHOL ~ agecat + RIAGENDR", d, family="quasibinomial", na_rm=True)
    means = svypredmeans(model, "~factor(race)")
    est, se, V = _svystat("svypredmeans(svyglm(HI_CHOL~agecat+RIAGENDR, design=pr_nhanes, "
                          "family=quasibinomial), ~factor(race))")
    assert list(means["variable"]) == ["2", "3", "1", "4"]  # R: unique() order
    assert_rel(means["estimate"], est, TOL, "nhanes means")
    assert_rel(means["se"], se, TOL, "nhanes se")
    assert_rel(ss.vcov(means).to_numpy(), V, TOL, "nhanes vcov")
    rr = ss.contrast(means, lambda t: t["1"] / t["2"])
    ref = _svystat("svycontrast(svypredmeans(svyglm(HI_CHOL~agecat+RIAGENDR, design=pr_nhanes,"
                   " family=quasibinomial), ~factor(race)), quote(`1`/`2`))")
    assert_rel(rr["estimate"], ref[0], TOL, "relative risk")
    assert_rel(rr["se"], ref[1], TOL, "relative risk se")
    # the coefficients' part of the variance is needed: the design part alone is R's
    # attr(vv, "parts")[[2]], smaller
    parts = means.attrs["parts"]
    assert np.all(np.sqrt(np.diag(parts["design"])) < means["se"].to_numpy() * (1 - 1e-3))


@pytest.mark.parametrize("design", ["pr_dstrat", "pr_rstrat", "pr_cal"])
def test_svypredmeans_api_equals_R(designs, design):
    """?svypredmeans' apistrat example (a numeric group at given values), on the stratified,
    replicate and calibrated designs; and a categorical group (stype)."""
    model = svyglm("api00 ~ mobility + ell + hsg + meals", designs[design])
    r_model = f"svyglm(api00~mobility+ell+hsg+meals, design={design})"
    got = svypredmeans(model, "enroll", predictat=[100, 300, 1000, 3000])
    est, se, V = _svystat(f"svypredmeans({r_model}, ~enroll, predictat=c(100,300,1000,3000))")
    assert list(got["variable"]) == ["100", "300", "1000", "3000"]
    assert_rel(got["estimate"], est, TOL, f"{design} enroll")
    assert_rel(got["se"], se, TOL, f"{design} enroll se")
    assert_rel(ss.vcov(got).to_numpy(), V, TOL, f"{design} enroll vcov")
    if design == "pr_rstrat":
        return  # 200 replicate refits per model: the categorical group on the others
    got = svypredmeans(model, "stype")
    est, se, _ = _svystat(f"svypredmeans({r_model}, ~stype)")
    assert_rel(got["estimate"], est, TOL, f"{design} stype")
    assert_rel(got["se"], se, TOL, f"{design} stype se")


def test_marginpred_man_page_equals_R(designs):
    """?marginpred's logistic regression: group ~ time adjusted for x, against R; the
    adjustment matters (plain predictions differ)."""
    d = designs["pr_des"]
    newdf = designs["newdf"]
    m = svyglm("group ~ time", d, family="quasibinomial")
    got = marginpred(m, "~x", newdf)
    est, se, _ = _svystat("marginpred(svyglm(group~time, family=quasibinomial, design=pr_des),"
                          " adjustfor=~x, predictat=pr_newdf)")
    assert_rel(got["fit"], est, TOL, "marginpred")
    assert_rel(got["se"], se, TOL, "marginpred se")
    plain = m.predict(newdf)
    assert np.abs(plain["fit"].to_numpy() - est).max() > 0.1


@pytest.mark.parametrize("design,adjust", [("pr_dstrat", "meals"), ("pr_cal", "stype")])
def test_marginpred_api_equals_R(designs, api, design, adjust):
    """A linear model on apistrat adjusted for meals (stratified design) or stype (calibrated
    design), with vcov; and where R's raking fails (adjusting for both), the same failure."""
    m = svyglm("api00 ~ mobility + ell", designs[design])
    new = api["apistrat"].iloc[:3]
    got = marginpred(m, f"~ {adjust}", new, vcov=True)
    est, se, V = _svystat(f"marginpred(svyglm(api00~mobility+ell, design={design}), "
                          f"adjustfor=~{adjust}, predictat=apistrat[1:3,], vcov=TRUE)")
    assert_rel(got["fit"], est, TOL, f"{design} marginpred")
    assert_rel(got["se"], se, TOL, f"{design} marginpred se")
    assert_rel(got.attrs["vcov"], V, TOL, f"{design} marginpred vcov")
    if design == "pr_dstrat":
        # R: "Failed to converge: eps=0.000372742302715778 in 101 iterations"
        with pytest.raises(ss.calibration.CalibrationError, match="misfit 0.000373"):
            marginpred(m, "~ meals + stype", new)


def test_prediction_errors(designs):
    rep = designs["pr_rstrat"]
    with pytest.raises(ValueError, match="replicate designs are not supported"):
        marginpred(svyglm("api00 ~ ell", rep), "~meals", rep.data.iloc[:2])
    d = designs["pr_dstrat"]
    m = svyglm("api00 ~ ell + meals", d)
    with pytest.raises(ValueError, match="all in the model"):
        marginpred(m, "~meals", d.data.iloc[:2])
    with pytest.raises(ValueError, match="'nosuch' is not a column"):
        svypredmeans(m, "~nosuch")
    sub = svyglm("api00 ~ ell", d.subset(d.data["stype"] == "E"))
    with pytest.raises(ValueError, match="subset"):
        marginpred(sub, "~meals", d.data.iloc[:2])
    with pytest.raises(ValueError, match="type='lp'"):
        m.predict(type="lp")


@pytest.mark.parametrize("design", ["pr_dstrat", "pr_rstrat", "pr_cal"])
def test_predict_terms_equals_R(designs, design):
    """predict(type="terms", se.fit=TRUE) (R's predterms): each term's centred contribution,
    a factor term over its columns and an interaction, with SEs and the constant."""
    res = svyglm("api00 ~ ell + meals + stype + ell:meals", designs[design])
    got = res.predict(type="terms")
    with r_session("survey") as (ro, _):
        ro.r(f"pr_t <- predict(svyglm(api00~ell+meals+stype+ell:meals, design={design}), "
             "type='terms', se.fit=TRUE)")
        fit = np.array(ro.r("as.vector(pr_t$fit)"), dtype=float)
        se = np.array(ro.r("as.vector(pr_t$se.fit)"), dtype=float)
        const = float(ro.r("attr(pr_t$fit, 'constant')")[0])
        names = list(ro.r("colnames(pr_t$fit)"))
    assert list(got.columns) == names
    assert_rel(got.to_numpy().ravel(order="F"), fit, TOL, f"{design} terms", atol=1e-10)
    assert_rel(got.attrs["se"].to_numpy().ravel(order="F"), se, TOL, f"{design} terms se")
    assert_rel([got.attrs["constant"]], [const], TOL, f"{design} constant")
