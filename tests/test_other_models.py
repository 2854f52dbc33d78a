"""svygofchisq, svyivreg and svynls against R survey, live through rpy2 (survey 4.1.1, AER for
ivreg), on R's man-page examples (?svygofchisq on apiclus2, ?svynls's simulated stratified
sample), R's own tests (tests/svyivreg-var.R: a 2SLS without instruments equals svyglm), a
replicate and a calibrated design; svyivreg's summary against stored R survey 4.5 output
(tests/reference/r_survey45/svyivreg.R: 4.1.1 scaled vcov() and summary() by sigma^2, fixed in
4.5). 1e-8 relative, except svynls (see its test)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.analysis import (
    svyglm,
    svygofchisq,
    svyivreg,
    svymle,
    svynls,
    svystandardize,
)
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8
REF45 = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "svyivreg.json")
                   .read_text())
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages({library(survey); library(AER)}); data(api)
om_dclus2 <- svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)
om_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
om_rstrat <- as.svrepdesign(om_dstrat, type="bootstrap", replicates=50)
om_cal <- calibrate(om_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
set.seed(2020-4-3)
x<-rep(seq(0,50,1),10)
y<-((runif(1,10,20)*x)/(runif(1,0,10)+x))+rnorm(510,0,1)
pop_model<-nls(y~a*x/(b+x), start=c(a=15,b=5))
df<-data.frame(x=x,y=y)
df$p<-ifelse((y-fitted(pop_model))*(x-mean(x))>0, .4,.1)
df$strata<-ifelse(df$p==.4,"a","b")
in_sample<-stratsample(df$strata, round(table(df$strat)*c(0.4,0.1)))
om_sdf<-df[in_sample,]
om_des<-svydesign(id=~1, strata=~strata, prob=~p, data=om_sdf)
om_rdes <- as.svrepdesign(om_des)
om_cdes <- calibrate(om_des, ~x, c(`(Intercept)`=510, x=12750))
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
        sdf = r_to_pandas(ro.r("om_sdf"))
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    rep = ReplicateDesign(api["apistrat"],
                          repweights=_r("as.matrix(weights(om_rstrat, 'analysis'))"),
                          weights=_r("as.numeric(om_rstrat$pweights)"), type="other",
                          scale=float(_r("om_rstrat$scale")[0]),
                          rscales=_r("om_rstrat$rscales"),
                          mse=bool(_r("as.numeric(om_rstrat$mse)")[0]), combined_weights=True)
    return {"om_dclus2": ss.SurveyDesign(api["apiclus2"], ids=["dnum", "snum"],
                                         fpc=["fpc1", "fpc2"]),
            "om_dstrat": strat, "om_rstrat": rep,
            "om_cal": strat.calibrate("~stype+api99", POP),
            "om_des": ss.SurveyDesign(sdf, strata="strata", probs="p"),
            "om_cdes": ss.SurveyDesign(sdf, strata="strata", probs="p").calibrate(
                "~x", {"(Intercept)": 510, "x": 12750}),
            "om_rdes": ReplicateDesign(
                sdf, repweights=_r("as.matrix(weights(om_rdes, 'analysis'))"),
                weights=_r("as.numeric(om_rdes$pweights)"), type="other",
                scale=float(_r("om_rdes$scale")[0]), rscales=_r("om_rdes$rscales"),
                mse=bool(_r("as.numeric(om_rdes$mse)")[0]), combined_weights=True)}


def _gof_ref(call: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        ro.r(f"om_g <- {call}")
        return np.array(ro.r("c(om_g$statistic, om_g$parameter, om_g$p.value)"), dtype=float)


@pytest.mark.parametrize("design,var,cases", [
    ("om_dclus2", "stype", (([4421, 755, 1018], "table(apipop$stype)"),
                            ([1 / 3] * 3, "c(1/3,1/3,1/3)"))),
    ("om_rstrat", "awards", (([0.4, 0.6], "c(0.4,0.6)"),)),
    ("om_cal", "awards", (([0.4, 0.6], "c(0.4,0.6)"),)),
])
def test_svygofchisq_equals_R(designs, design, var, cases):
    """?svygofchisq: stype against the population's shares (table(apipop$stype)) and against
    1/3 each on the man page's two-stage design; a replicate and a calibrated design (both fix
    the stype totals, so another factor: awards)."""
    for p, rp in cases:
        res = svygofchisq(f"~{var}", p, designs[design])
        ref = _gof_ref(f"svygofchisq(~{var}, {design}, p={rp})")
        got = [res.statistic, res.parameter["scale"], res.parameter["df"], res.p_value]
        assert_rel(got, ref, TOL, f"{design} gof {rp}")


def test_svygofchisq_dict_and_errors(designs):
    d = designs["om_dclus2"]
    a = svygofchisq("stype", {"E": 4421, "H": 755, "M": 1018}, d)
    b = svygofchisq("stype", [4421, 755, 1018], d)
    assert a.statistic == b.statistic and a.p_value == b.p_value
    with pytest.raises(ValueError, match="2 values for 3 levels"):
        svygofchisq("stype", [0.5, 0.5], d)


IV = "api00 ~ ell + meals | ell + mobility + api99"


@pytest.mark.parametrize("design", ["om_dstrat", "om_dclus2", "om_cal", "om_rstrat"])
def test_svyivreg_equals_R(designs, design):
    """2SLS with meals instrumented by mobility and api99: coefficients and the design
    covariance (R's m$cov.unscaled; for replicate designs vcov of withReplicates)."""
    res = svyivreg(IV, designs[design])
    with r_session("survey") as (ro, _):
        ro.r(f"om_m <- svyivreg({IV}, design={design})")
        coef = np.array(ro.r("as.vector(coef(om_m))"), dtype=float)
        V = np.array(ro.r("as.vector(om_m$cov.unscaled)" if design != "om_rstrat"
                          else "as.vector(vcov(om_m))"), dtype=float)
    assert_rel(res.params, coef, TOL, f"{design} coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), V, TOL, f"{design} vcov")
    assert list(res.params.index) == ["(Intercept)", "ell", "meals"]


def test_svyivreg_summary_equals_R45(designs):
    """R 4.5's summary (t tests on degf + 1 - p with the design variance)."""
    ref = REF45["dstrat_iv"]
    res = svyivreg(IV, designs["om_dstrat"])
    assert_rel(res.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, "vcov 4.5")
    table = res.coef_table()[["estimate", "se", "t", "p"]].to_numpy().ravel(order="F")
    assert_rel(table, ref["summary"], TOL, "summary 4.5")
    assert res.df_resid == ref["df"]


def test_svyivreg_without_instruments_is_svyglm(designs):
    """R's tests/svyivreg-var.R: regressors as their own instruments give svyglm's fit."""
    d = designs["om_dstrat"]
    iv = svyivreg("api00 ~ ell + meals + mobility | ell + meals + mobility", d)
    glm = svyglm("api00 ~ ell + meals + mobility", d)
    assert_rel(iv.params, glm.params, 1e-10, "coef")
    assert_rel(iv.vcov().to_numpy(), glm.vcov().to_numpy(), 1e-9, "vcov")
    with pytest.raises(ValueError, match="not identified"):
        svyivreg("api00 ~ ell + meals | ell", d)


NLS_TOL = (1e-7, 1e-6)  # coefficients, variances


def test_svynls_man_page_equals_R(designs):
    """?svynls: the corrected Michaelis-Menten fit. R's nls differentiates numerically
    (forward differences with step sqrt(eps)|theta|), which amplifies rounding differences in
    the parameters (1e-15, from LINPACK's vs LAPACK's QR) by 1e8 in the gradient, so R's own
    stopping point is defined to about 1e-8: coefficients agree to 1e-7 and variances to 1e-6
    (measured 7e-9 and 1.3e-7)."""
    res = svynls("y ~ a*x/(b+x)", designs["om_des"], start={"a": 15, "b": 5})
    with r_session("survey") as (ro, _):
        ro.r("om_n <- svynls(y~a*x/(b+x), design=om_des, start=c(a=15,b=5))")
        coef = np.array(ro.r("coef(om_n)"), dtype=float)
        V = np.array(ro.r("as.vector(vcov(om_n))"), dtype=float)
        naive = np.array(ro.r("as.vector(om_n$naive.cov)"), dtype=float)
    assert_rel(res.params, coef, NLS_TOL[0], "nls coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), V, NLS_TOL[1], "nls vcov")
    assert_rel(res.naive_cov.to_numpy().ravel(order="F"), naive, NLS_TOL[1], "nls naive")
    # the design matters: the unweighted fit is biased (R's biased_sample)
    biased = _r("coef(nls(y~a*x/(b+x), data=om_sdf, start=c(a=15,b=5)))")
    assert np.max(np.abs(biased / coef - 1)) > 1e-2


def test_svynls_calibrated_and_replicate(designs):
    """A calibrated design against R (the man page's model: on a model with a badly scaled
    parameter, b0 + b1 exp(-meals/b2) on apistrat, R's nls stops 2e-5 away from where ours
    does, within its 1e-5 relative-offset test); a replicate design against R's method computed by hand
    in R (every replicate refitted from the full-sample estimate, svrVar)."""
    res = svynls("y ~ a*x/(b+x)", designs["om_cdes"], start={"a": 15, "b": 5})
    with r_session("survey") as (ro, _):
        ro.r("om_n <- svynls(y~a*x/(b+x), design=om_cdes, start=c(a=15,b=5))")
        coef = np.array(ro.r("coef(om_n)"), dtype=float)
        V = np.array(ro.r("as.vector(vcov(om_n))"), dtype=float)
        # R's svynls.svyrep.design, by hand: 4.1.1's fails (it selects the parameters as
        # columns), 4.5's refits only the last replicate
        ro.r("""om_w <- weights(om_rdes, 'sampling'); om_mw <- mean(om_w)
            om_dat <- om_sdf; om_dat$w <- om_w / om_mw
            om_fit <- nls(y~a*x/(b+x), om_dat, weights=w, start=c(a=15, b=5))
            om_rw <- weights(om_rdes, 'analysis')
            om_th <- t(sapply(seq_len(ncol(om_rw)), function(i) {
                om_dat$rw <- om_rw[, i] / om_mw
                coef(nls(y~a*x/(b+x), om_dat, weights=rw, start=coef(om_fit)))}))
            om_rv <- svrVar(om_th, om_rdes$scale, om_rdes$rscales, mse=om_rdes$mse,
                            coef=coef(om_fit))""")
        rcoef = np.array(ro.r("coef(om_fit)"), dtype=float)
        rV = np.array(ro.r("as.vector(om_rv)"), dtype=float)
    assert_rel(res.params, coef, NLS_TOL[0], "cal coef")
    assert_rel(res.vcov().to_numpy().ravel(order="F"), V, NLS_TOL[1], "cal vcov")
    rep = svynls("y ~ a*x/(b+x)", designs["om_rdes"], start={"a": 15, "b": 5})
    assert_rel(rep.params, rcoef, NLS_TOL[0], "rep coef")
    assert_rel(rep.vcov().to_numpy().ravel(order="F"), rV, NLS_TOL[1], "rep vcov")


def test_svynls_errors(designs):
    d = designs["om_des"]
    with pytest.raises(ValueError, match="start must be a dict"):
        svynls("y ~ a*x/(b+x)", d, start=[15, 5])
    with pytest.raises(ValueError, match="also column names"):
        svynls("y ~ x*x", d, start={"x": 1.0})


POPAGE = [55901, 77670, 72816, 45364]
STD_SETUP = """
data(nhanes)
om_nh <- svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, data=nhanes, nest=TRUE)
om_popage <- c(55901, 77670, 72816, 45364)
om_nhc <- svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, nest=TRUE,
                    data=subset(nhanes, !is.na(HI_CHOL)))
om_rnh <- as.svrepdesign(om_nhc)
"""


@pytest.fixture(scope="module")
def nhanes(designs):
    with r_session("survey") as (ro, _):
        ro.r(STD_SETUP)
        return r_to_pandas(ro.r("nhanes"))


def _by_ref(code: str) -> tuple[np.ndarray, np.ndarray]:
    with r_session("survey") as (ro, _):
        ro.r(f"om_b <- {code}")
        return (np.array(ro.r("as.vector(coef(om_b))"), dtype=float),
                np.array(ro.r("as.vector(SE(om_b))"), dtype=float))


def test_svystandardize_man_page_equals_R(nhanes):
    """?svystandardize: high cholesterol by race and sex, age-standardized to the 2000 US
    population (NCHS data brief 92) over the adults, and the overall age-adjusted mean
    (over=~1, and the equivalent all_adults column of the man page)."""
    d = ss.SurveyDesign(nhanes, ids="SDMVPSU", strata="SDMVSTRA", weights="WTMEC2YR",
                        nest=True)
    st = svystandardize(d, by="~agecat", over="~race+RIAGENDR", population=POPAGE,
                        excluding_missing="~HI_CHOL")
    adults = st.subset(st.data["agecat"] != "(0,19]")
    got = adults.mean("HI_CHOL", by=["race", "RIAGENDR"])
    est, se = _by_ref("svyby(~HI_CHOL, ~race+RIAGENDR, svymean, design=subset(svystandardize("
                      "om_nh, by=~agecat, over=~race+RIAGENDR, population=om_popage, "
                      "excluding.missing=~HI_CHOL), agecat!='(0,19]'))")
    assert_rel(got["estimate"], est, TOL, "by race, sex")
    assert_rel(got["se"], se, TOL, "by race, sex se")
    ref = _by_ref("svymean(~I(HI_CHOL == 1), svystandardize(om_nh, by=~agecat, over=~1, "
                  "population=om_popage, excluding.missing=~HI_CHOL), na.rm=TRUE)")
    for over, data in ((None, nhanes), ("~all_adults", nhanes.assign(all_adults="1"))):
        dd = ss.SurveyDesign(data, ids="SDMVPSU", strata="SDMVSTRA", weights="WTMEC2YR",
                             nest=True)
        adj = svystandardize(dd, by="~agecat", over=over, population=POPAGE,
                             excluding_missing="~HI_CHOL")
        m = adj.mean("HI_CHOL")
        # R: the logical I(HI_CHOL == 1) gives FALSE and TRUE; TRUE is the mean of HI_CHOL
        assert_rel(m["estimate"], ref[0][1], TOL, f"overall {over}")
        assert_rel(m["se"], ref[1][1], TOL, f"overall {over} se")
    crude = d.mean("HI_CHOL", na_rm=True)["estimate"].iloc[0]
    assert abs(crude - ref[0][1]) > 1e-3  # the standardization changes the estimate


def test_svystandardize_replicate_equals_R(nhanes):
    """A replicate design (R's JKn of the complete rows): post-stratification of every
    replicate."""
    comp = nhanes[nhanes["HI_CHOL"].notna()]
    with r_session("survey") as (ro, _):
        ro.r(STD_SETUP)
    rep = ReplicateDesign(comp, repweights=_r("as.matrix(weights(om_rnh, 'analysis'))"),
                          weights=_r("as.numeric(om_rnh$pweights)"), type="other",
                          scale=float(_r("om_rnh$scale")[0]), rscales=_r("om_rnh$rscales"),
                          mse=bool(_r("as.numeric(om_rnh$mse)")[0]), combined_weights=True)
    st = svystandardize(rep, by="agecat", over=["RIAGENDR"], population=POPAGE)
    got = st.mean("HI_CHOL", by="RIAGENDR")
    est, se = _by_ref("svyby(~HI_CHOL, ~RIAGENDR, svymean, design=svystandardize(om_rnh, "
                      "by=~agecat, over=~RIAGENDR, population=om_popage))")
    assert_rel(got["estimate"], est, TOL, "replicate")
    assert_rel(got["se"], se, TOL, "replicate se")
    with pytest.raises(ValueError, match="4 cells"):
        svystandardize(rep, by="agecat", population=POPAGE[:3])


def test_svystandardize_calibrated_equals_R(nhanes):
    """A calibrated design (complete rows calibrated to a population size and the sex
    total), standardized by age within race."""
    comp = nhanes[nhanes["HI_CHOL"].notna()]
    with r_session("survey") as (ro, _):
        ro.r(STD_SETUP)
        ro.r("om_cnh <- calibrate(om_nhc, ~RIAGENDR, c(`(Intercept)`=2.5e8, RIAGENDR=3.8e8))")
    d = ss.SurveyDesign(comp, ids="SDMVPSU", strata="SDMVSTRA", weights="WTMEC2YR",
                        nest=True).calibrate("~RIAGENDR", {"(Intercept)": 2.5e8,
                                                           "RIAGENDR": 3.8e8})
    got = svystandardize(d, by="~agecat", over="~race", population=POPAGE).mean(
        "HI_CHOL", by="race")
    est, se = _by_ref("svyby(~HI_CHOL, ~race, svymean, design=svystandardize(om_cnh, "
                      "by=~agecat, over=~race, population=om_popage))")
    assert_rel(got["estimate"], est, TOL, "calibrated")
    assert_rel(got["se"], se, TOL, "calibrated se")


def _norm_ll(x, mean, sd):
    from scipy import stats

    return stats.norm.logpdf(x, mean, sd)


def _norm_gr(x, mean, sd):  # ?svymle's gr, term for term
    dm = 2 * (x - mean) / (2 * sd**2)
    ds = (x - mean) ** 2 * (2 * (2 * sd)) / (2 * sd**2) ** 2 - np.sqrt(2 * np.pi) / (
        sd * np.sqrt(2 * np.pi))
    return np.column_stack([dm, ds])


MLE_R = """
om_gr <- function(x,mean,sd,log){
  dm<-2*(x - mean)/(2*sd^2)
  ds<-(x-mean)^2*(2*(2 * sd))/(2*sd^2)^2 - sqrt(2*pi)/(sd*sqrt(2*pi))
  cbind(dm,ds)
}
"""


def _mle_ref(call: str) -> dict[str, np.ndarray]:
    with r_session("survey") as (ro, _):
        ro.r(MLE_R)
        ro.r(f"om_mle <- {call}")
        return {"coef": np.array(ro.r("coef(om_mle)"), dtype=float),
                "vcov": np.array(ro.r("as.vector(vcov(om_mle))"), dtype=float),
                "model": np.array(ro.r("as.vector(vcov(om_mle, stderr='model'))"),
                                  dtype=float)}


def _cov_close(ours: np.ndarray, ref: np.ndarray, tol: float, what: str) -> None:
    """Covariances relative to the product of SEs (entries that are 0 in theory are R's
    rounding of a numerical Hessian)."""
    p = int(round(np.sqrt(ref.shape[0])))
    R = ref.reshape(p, p, order="F")
    scale = np.sqrt(np.outer(np.diag(R), np.diag(R)))
    err = float(np.max(np.abs(ours - R) / scale))
    assert err <= tol, f"{what}: covariance off by {err:.3g} of the SEs"


@pytest.mark.parametrize("design,sd", [("om_dstrat", "~1"), ("om_dstrat", "~stype"),
                                       ("om_cal", "~1")])
def test_svymle_man_page_equals_R(designs, design, sd):
    """?svymle's normal model with gradient (method="BFGS": R's vmmin replicated), one and
    three linear predictors for sd, and a calibrated design: coefficients to 1e-8, the
    covariances to 1e-8 of the SEs (R's Hessian is a numerical difference of the gradient,
    so is ours; measured 1e-10)."""
    start = {"mean": [80, 1, 0], "sd": [20] if sd == "~1" else [20, 0, 0]}
    res = svymle(_norm_ll, designs[design], {"mean": "api00 ~ api99 + ell", "sd": sd}, start,
                 gradient=_norm_gr)
    rstart = "c(20)" if sd == "~1" else "c(20,0,0)"
    ref = _mle_ref(f"svymle(loglike=dnorm, gradient=om_gr, design={design}, formulas=list("
                   f"mean=api00~api99+ell, sd={sd}), start=list(c(80,1,0),{rstart}), "
                   "log=TRUE, method='BFGS')")
    assert_rel(res.params, ref["coef"], TOL, f"{design} {sd} coef")
    _cov_close(res.vcov().to_numpy(), ref["vcov"], TOL, f"{design} {sd} vcov")
    _cov_close(res.vcov_model().to_numpy(), ref["model"], TOL, f"{design} {sd} model")
    assert res.params.index[0] == "mean.(Intercept)"


def test_svymle_without_gradient_and_exact(designs):
    """No gradient: R's BFGS on its numerical gradient, model-based SEs only (robust NA); and
    the exact optimum of the censored log-normal model equals svysurvreg's fit (?svymle's
    closing remark) on the mean coefficients, SEs included."""
    d = designs["om_dstrat"]
    res = svymle(_norm_ll, d, {"mean": "api00 ~ api99 + ell", "sd": "~1"},
                 [[80, 1, 0], [20]])
    ref = _mle_ref("svymle(loglike=dnorm, gradient=NULL, design=om_dstrat, formulas=list("
                   "mean=api00~api99+ell, sd=~1), start=list(c(80,1,0),c(20)), log=TRUE, "
                   "method='BFGS')")
    # R's Hessian without a gradient is a second difference (step 1e-3) of a log-likelihood
    # near -1e3 * n: rounding alone moves it by ~1e-5 (measured 7e-6)
    assert_rel(res.params, ref["coef"], 1e-7, "no gradient coef")
    _cov_close(res.vcov_model().to_numpy(), ref["model"], 1e-4, "no gradient model")
    assert np.isnan(res.vcov().to_numpy()).all()
    from scipy import stats

    from surveysynth.analysis import svysurvreg

    def lcens(x, mean, sd):
        z = (np.log(x[:, 0]) - mean) / sd
        return np.where(x[:, 1] == 1, stats.norm.logpdf(np.log(x[:, 0]), mean, sd),
                        stats.norm.logsf(z))

    def gcens(x, mean, sd):
        # ?svymle's gcens divides the censored rows' derivatives by sd once too often
        # (dnorm(log t, mean, sd) already carries 1/sd); harmless there (newuoa does not use
        # it to optimize, and sd is near 1) but not for a gradient-based optimum
        lt = np.log(x[:, 0])
        haz = stats.norm.pdf(lt, mean, sd) / stats.norm.sf(lt, mean, sd)
        dm = np.where(x[:, 1] == 1, (lt - mean) / sd**2, haz)
        ds = np.where(x[:, 1] == 1, (lt - mean) ** 2 / sd**3 - 1 / sd, haz * (lt - mean) / sd)
        return np.column_stack([dm, ds])

    with r_session("survey") as (ro, _):
        ro.r("""om_pbc <- survival::pbc
            om_pbc$randomized <- with(om_pbc, !is.na(trt) & trt>0)
            om_pbc$randprob <- fitted(glm(randomized~age*edema, data=om_pbc))""")
        pbc = r_to_pandas(ro.r("subset(om_pbc, randomized)"))
    dpbc = ss.SurveyDesign(pbc, probs="randprob", strata="edema")
    mle = svymle(lcens, dpbc, {"mean": "cbind(time, status > 0) ~ bili + protime + albumin",
                               "sd": "~1"}, [[10, 0, 0, 0], [1]], gradient=gcens,
                 method="exact")
    sr = svysurvreg("Surv(time, status > 0) ~ bili + protime + albumin", dpbc,
                    dist="lognormal")
    assert_rel(mle.params.iloc[:4], sr.params.iloc[:4], 1e-8, "lognormal coef")
    assert_rel(mle.params.iloc[4], np.exp(sr.params.iloc[4]), 1e-8, "lognormal sd")
    # svymle's information is R's optimhess (central differences, step 1e-3): its truncation
    # error moves the SEs by ~1e-5 from svysurvreg's analytic one (measured 1.6e-5)
    assert_rel(mle.bse.iloc[:4], sr.bse.iloc[:4], 1e-4, "lognormal se")
