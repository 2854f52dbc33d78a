"""Proportion intervals (proportion(..., ci_method=)) equal R svyciprop's, live through rpy2:
logit, asin, beta, mean and xlogit to 1e-9 and likelihood to R's own tolerance, on nhanes
(stratified clusters), a stratified two-stage design with fpc, and JKn and BRR replicate
designs, with and without domains and missing values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.ciprop import CI_METHODS
from tests.conftest import assert_rel
from tests.test_contrast import R_STRAT2, strat2

TOL = 1e-9
NH = ("local({ data(nhanes); x <- nhanes; x$hc <- factor(x$HI_CHOL, 0:1, c('no', 'yes')); x })")
R_DESIGNS = {
    "nhanes": f"svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, nest=TRUE, data={NH})",
    "strat2": R_STRAT2,
    "strat_jkn": "as.svrepdesign(svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat), "
                 "type='JKn')",
    "nhanes_brr": "as.svrepdesign(svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, "
                  f"nest=TRUE, data=subset({NH}, SDMVPSU < 3)), type='BRR')",
}
# (variable, level, by) per design; nhanes has missing HI_CHOL (na_rm)
CASES = {
    "nhanes": ("hc", "yes", "agecat"),
    "strat2": ("sch.wide", "Yes", "stype"),
    "strat_jkn": ("awards", "No", "stype"),
    "nhanes_brr": ("hc", "yes", "agecat"),
}


@pytest.fixture(scope="module")
def designs(api):
    with r_session("survey") as (ro, _):
        nh = r_to_pandas(ro.r("local({ data(nhanes); nhanes })"))
    nh["hc"] = nh.HI_CHOL.map({0: "no", 1: "yes"})
    kw = dict(ids="SDMVPSU", strata="SDMVSTRA", weights="WTMEC2YR", nest=True)
    return {
        "nhanes": ss.SurveyDesign(nh, **kw),
        "strat2": strat2(api),
        "strat_jkn": ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw").jackknife(),
        "nhanes_brr": ss.SurveyDesign(nh[nh.SDMVPSU < 3].reset_index(drop=True), **kw).brr(),
    }


def r_ciprop(R, name: str, method: str, by: bool, extra: str = "") -> np.ndarray:
    var, lev, byv = CASES[name]
    f = f"~I({var} == '{lev}')"
    if by:
        code = (f"s <- svyby({f}, ~{byv}, d, svyciprop, vartype='ci', method='{method}', "
                f"na.rm=TRUE{extra}); c(coef(s), s$ci_l, s$ci_u)")
    else:
        code = (f"s <- svyciprop({f}, d, method='{method}', na.rm=TRUE{extra}); "
                "c(coef(s), attr(s, 'ci'))")
    return R(f"local({{ d <- {R_DESIGNS[name]}; {code} }})")


def r_fine_likelihood(R, name: str, by: bool) -> np.ndarray:
    """svyciprop's likelihood interval computed as svyciprop does (svyglm, confint with
    ddf=degf of the domain) but profiled finely (svyciprop does not pass del/maxsteps on)."""
    var, lev, byv = CASES[name]
    one = (f"function(s) plogis(confint(svyglm(I({var} == '{lev}') ~ 1, s, "
           "family=quasibinomial), 1, method='likelihood', ddf=degf(s), del=0.01, "
           "maxsteps=2000))")
    if by:
        code = (f"f <- {one}; lv <- sort(unique(as.character(d$variables${byv}))); "
                f"m <- sapply(lv, function(v) f(d[as.character(d$variables${byv}) == v, ])); "
                "c(m[1, ], m[2, ])")
    else:
        code = f"f <- {one}; as.vector(f(d))"
    return R(f"local({{ d <- {R_DESIGNS[name]}; {code} }})")


def ours(d, name: str, method: str, by: bool, **kw) -> pd.DataFrame:
    var, lev, byv = CASES[name]
    out = d.proportion(var, by=byv if by else None, na_rm=True, ci_method=method, **kw)
    return out[out.level == lev]


@pytest.mark.parametrize("name", list(R_DESIGNS))
@pytest.mark.parametrize("by", [False, True])
def test_closed_form_and_logit_methods(R, designs, name, by):
    for method in ("logit", "asin", "beta", "mean", "xlogit"):
        o = ours(designs[name], name, method, by)
        ref = r_ciprop(R, name, method, by)
        k = len(o)
        # R's logit estimate is expit of glm's coefficient (glm tolerance); ours the share
        assert_rel(o.estimate, ref[:k], 1e-8 if method == "logit" else TOL, f"{name} {method}")
        assert_rel(np.r_[o.ci_low, o.ci_high], ref[k:], TOL, f"{name} {method} by={by}")


@pytest.mark.parametrize("name", ["nhanes", "strat2"])
def test_likelihood_to_R_tolerance(R, designs, name):
    """R interpolates a spline through a few profile points; we solve the profile equation.
    Against R's default the limits agree to its interpolation error (< 2e-3 relative);
    against R profiling finely (del=0.01, maxsteps=2000, same code) to 1e-6."""
    for by in (False, True):
        o = ours(designs[name], name, "likelihood", by)
        k = len(o)
        mine = np.r_[o.ci_low, o.ci_high]
        ref = r_ciprop(R, name, "likelihood", by)
        assert_rel(mine, ref[k:], 2e-3, f"{name} likelihood vs R default")
        fine = r_fine_likelihood(R, name, by)
        assert_rel(mine, fine, 1e-6, f"{name} likelihood vs R fine profile")


@pytest.mark.parametrize("name", ["strat_jkn", "nhanes_brr"])
def test_likelihood_on_replicate_designs(R, designs, name):
    """R 4.1 returns NA here (residuals.svyglm reads design$prob, which replicate designs do
    not have); ours is the same profile with the replicate variance in lambda, so it lies
    near the logit interval, which uses the same variance."""
    ref = r_ciprop(R, name, "likelihood", True)
    assert np.isnan(ref[len(ref) // 3:]).all()
    o = ours(designs[name], name, "likelihood", True)
    lg = ours(designs[name], name, "logit", True)
    assert np.isfinite(o[["ci_low", "ci_high"]].to_numpy()).all()
    assert_rel(np.r_[o.ci_low, o.ci_high], np.r_[lg.ci_low, lg.ci_high], 0.1)
    assert ((o.ci_low < o.estimate) & (o.estimate < o.ci_high)).all()


def test_issue_example_and_df_and_level(R, designs):
    d = designs["nhanes"]
    o = ours(d, "nhanes", "logit", True)
    first = o.iloc[0]
    assert first.agecat == "(0,19]"
    # issue 19 quoted R's logit interval as 0.0045-0.020; R 4.1 live gives 0.0045-0.0166,
    # which test_closed_form_and_logit_methods matches to 1e-9 (the old Wald: 0.0034-0.0139)
    assert round(first.ci_low, 4) == 0.0045
    # df= and level= are passed through as R's df= and level=
    o = ours(d, "nhanes", "xlogit", False, df=5, level=0.9)
    ref = r_ciprop(R, "nhanes", "xlogit", False, ", df=5, level=0.9")
    assert_rel(np.r_[o.estimate, o.ci_low, o.ci_high], ref, TOL)
    assert (o.df == 5).all()
    with pytest.raises(ValueError, match="ci_method='wald-cc'"):
        d.proportion("hc", na_rm=True, ci_method="wald-cc")


def test_every_method_is_different(designs):
    """Each method gives its own interval (a dispatch slip would make two equal)."""
    d = designs["strat_jkn"]
    lims = {m: tuple(ours(d, "strat_jkn", m, True)[["ci_low", "ci_high"]].to_numpy().ravel())
            for m in CI_METHODS}
    assert len(set(lims.values())) == len(CI_METHODS)
