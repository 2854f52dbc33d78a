"""R survey's small exports against R live (survey 4.1.1 through rpy2; 4.1.1 and 4.5 share
their code): ``svykappa`` (R/svykappa.R), ``psrsq`` (R/rsquared.R), calibration with
``make.calfun`` distances and ``cal.sinh`` (R/grake.R), ``cal_names`` and ``make.formula``.
R's man-page examples, a replicate (JKn) and a calibrated design each."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-9
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages(library(survey)); data(api)
k_dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
k_dclus2 <- svydesign(id=~dnum+snum, weights=~pw, data=apiclus2)
k_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
k_jk <- as.svrepdesign(k_dstrat)
k_cal <- calibrate(k_dstrat, ~stype+api99,
                   c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
hellinger <- make.calfun(Fm1=function(u, bounds) ((1-u/2)^-2)-1,
                         dF=function(u, bounds) (1-u/2)^-3, name="hellinger distance")
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def d(api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    st = api["apistrat"].assign(comp_imp=(api["apistrat"]["comp.imp"] == "Yes").astype(float))
    strat = ss.SurveyDesign(st, strata="stype", weights="pw", fpc="fpc")
    jk = ReplicateDesign(st, repweights=_r("as.matrix(weights(k_jk, 'analysis'))"),
                         weights=_r("as.numeric(k_jk$pweights)"), type="other",
                         scale=float(_r("k_jk$scale")[0]), rscales=_r("k_jk$rscales"),
                         mse=False, combined_weights=True)
    c2 = api["apiclus2"].copy()
    c2["yes"] = (c2["sch.wide"] == "Yes").astype(float)
    c2["stype_num"] = c2["stype"].map({"E": 1, "H": 2, "M": 3}).astype(float)
    return {"dclus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
            "dclus2": ss.SurveyDesign(c2, ids=["dnum", "snum"], weights="pw"),
            "dstrat": strat, "jk": jk, "cal": strat.calibrate("~stype+api99", POP)}


def _kappa_r(expr: str) -> np.ndarray:
    return _r(f"k <- {expr}; c(coef(k), SE(k))")


# ------------------------------------------------------------------------------ svykappa
def test_svykappa_man_example(d):
    k = ss.svykappa(["comp.imp", "sch.wide"], d["dclus1"])
    assert_rel([k.estimate[0], k.se[0]], _kappa_r("svykappa(~comp.imp+sch.wide, k_dclus1)"),
               TOL, "svykappa dclus1")
    assert k.vcov().to_numpy()[0, 0] == pytest.approx(k.se[0] ** 2, rel=1e-12)


def test_svykappa_perfect_agreement_is_one_with_se_zero(d, api):
    a = api["apiclus1"].assign(stypecopy=api["apiclus1"]["stype"])
    k = ss.svykappa("~stype+stypecopy", ss.SurveyDesign(a, ids="dnum", weights="pw", fpc="fpc"))
    r = _kappa_r("svykappa(~stype+stypecopy, update(k_dclus1, stypecopy=stype))")
    assert k.estimate[0] == pytest.approx(r[0], rel=1e-12) and r[0] == 1
    assert k.se[0] == pytest.approx(0, abs=1e-7) and r[1] < 1e-7  # R: 3e-9 of rounding


@pytest.mark.parametrize("name", ["jk", "cal", "dstrat"])
def test_svykappa_replicate_calibrated_stratified(d, name):
    r_name = {"jk": "k_jk", "cal": "k_cal", "dstrat": "k_dstrat"}[name]
    k = ss.svykappa(["comp.imp", "awards"], d[name])
    assert_rel([k.estimate[0], k.se[0]], _kappa_r(f"svykappa(~comp.imp+awards, {r_name})"),
               TOL, f"svykappa {name}")


def test_svykappa_subset_and_errors(d):
    sub = d["dstrat"].subset(d["dstrat"].full_data["stype"].to_numpy() != "H")
    k = ss.svykappa(["comp.imp", "sch.wide"], sub)
    assert_rel([k.estimate[0], k.se[0]],
               _kappa_r("svykappa(~comp.imp+sch.wide, subset(k_dstrat, stype != 'H'))"),
               TOL, "svykappa subset")
    with pytest.raises(ValueError, match="two variables"):
        ss.svykappa(["comp.imp"], d["dstrat"])
    with pytest.raises(ValueError, match="number of categories"):
        ss.svykappa(["comp.imp", "stype"], d["dstrat"])


def test_svykappa_missing_values_need_na_rm(api):
    a = api["apistrat"].copy()
    a.loc[a.index[:3], "awards"] = np.nan
    dd = ss.SurveyDesign(a, strata="stype", weights="pw", fpc="fpc")
    with pytest.raises(ValueError, match="na_rm=True"):
        ss.svykappa(["comp.imp", "awards"], dd)
    k = ss.svykappa(["comp.imp", "awards"], dd, na_rm=True)
    # R's svykappa counts NA as a category (so fails); na_rm=True is R's svymean(na.rm=TRUE):
    # the rows with a missing value dropped as a domain, i.e. R on the subset
    r = _kappa_r("svykappa(~comp.imp+aw, subset(update(k_dstrat, aw=ifelse(seq_along(awards)"
                 " <= 3, NA, as.character(awards))), !is.na(aw)))")
    assert_rel([k.estimate[0], k.se[0]], r, TOL, "svykappa na.rm")


# ------------------------------------------------------------------------------ psrsq
PSRSQ_R = ("model1 <- svyglm(I(sch.wide=='Yes')~ell+meals+mobility+as.numeric(stype), "
           "design={d}, family=quasibinomial()); c(psrsq(model1), "
           "psrsq(model1, method='Nagelkerke'))")


def test_psrsq_man_example(d):
    m = ss.svyglm("yes ~ ell + meals + mobility + stype_num", d["dclus2"],
                  family="quasibinomial")
    ours = [ss.psrsq(m), ss.psrsq(m, method="Nagelkerke")]
    assert_rel(ours, _r(PSRSQ_R.format(d="k_dclus2")), TOL, "psrsq dclus2")


@pytest.mark.parametrize("name", ["jk", "cal"])
def test_psrsq_replicate_and_calibrated(d, name):
    r_name = {"jk": "k_jk", "cal": "k_cal"}[name]
    m = ss.svyglm("comp_imp ~ api99 + meals", d[name], family="quasibinomial")
    r = _r(f"m <- svyglm(I(comp.imp=='Yes')~api99+meals, design={r_name}, "
           "family=quasibinomial()); c(psrsq(m), psrsq(m, method='Nagelkerke'))")
    assert_rel([ss.psrsq(m), ss.psrsq(m, method="Nagelkerke")], r, TOL, f"psrsq {name}")


def test_psrsq_poisson_offset_and_refusals(d):
    """Poisson with an offset: the null deviance is R's glm.fit refit of intercept + offset
    (the wrong version, a mean of y, is killed here)."""
    m = ss.svyglm("enroll ~ meals + offset(np.log(api99))", d["dstrat"], family="quasipoisson")
    r = _r("m <- svyglm(enroll ~ meals + offset(log(api99)), design=k_dstrat, "
           "family=quasipoisson()); c(psrsq(m), psrsq(m, method='Nagelkerke'))")
    assert_rel([ss.psrsq(m), ss.psrsq(m, method="Nagelkerke")], r, TOL, "psrsq offset")
    g = ss.svyglm("api00 ~ meals", d["dstrat"])
    with pytest.raises(ValueError, match="discrete"):
        ss.psrsq(g)
    with pytest.raises(ValueError, match="Cox-Snell"):
        ss.psrsq(m, method="McFadden")


# ------------------------------------------------------------------------------ calfuns
def _hellinger():
    return ss.make_calfun(lambda u, bounds: (1 - u / 2) ** -2 - 1,
                          lambda u, bounds: (1 - u / 2) ** -3, "hellinger distance")


def _mean_r(design: str, calfun: str, extra: str = "") -> np.ndarray:
    return _r(f"m <- svymean(~api00, calibrate({design}, ~api99, pop=c(6194, 3914069), "
              f"calfun={calfun}{extra})); c(coef(m), SE(m))")


@pytest.mark.parametrize("calfun,r_calfun,bounds", [
    ("hellinger", "hellinger", None), ("cal_linear", "cal.linear", None),
    ("cal_raking", "cal.raking", None), ("cal_sinh", "cal.sinh", (0.5, 2.0)),
    ("cal_logit", "cal.logit", (0.5, 2.0))])
def test_make_calfun_man_example_and_sinh(d, calfun, r_calfun, bounds):
    cf = _hellinger() if calfun == "hellinger" else getattr(ss, calfun)
    extra = "" if bounds is None else f", bounds=c({bounds[0]}, {bounds[1]})"
    m = d["dclus1"].calibrate("~api99", [6194, 3914069], calfun=cf, bounds=bounds).mean("api00")
    assert_rel([m.estimate[0], m.se[0]], _mean_r("k_dclus1", r_calfun, extra), TOL, calfun)


@pytest.mark.parametrize("calfun", ["hellinger", "cal_sinh"])
def test_user_calfun_on_a_replicate_design(d, calfun):
    cf = _hellinger() if calfun == "hellinger" else ss.cal_sinh
    bounds = (0.3, 3.0)
    m = d["jk"].calibrate("~api99", [6194, 3914069], calfun=cf, bounds=bounds).mean("api00")
    r = _mean_r("k_jk", "hellinger" if calfun == "hellinger" else "cal.sinh",
                ", bounds=c(0.3, 3)")
    assert_rel([m.estimate[0], m.se[0]], r, TOL, f"{calfun} replicate")


def test_sinh_differs_from_linear_and_needs_bounds(d):
    """The sinh distance is not the linear one under the same bounds (a mutant returning
    linear's F would pass only if these were equal), and without finite bounds it is
    refused, as R's."""
    lin = d["dstrat"].calibrate("~api99", [6194, 3914069], calfun=ss.cal_linear,
                                bounds=(0.5, 2.0))
    sinh = d["dstrat"].calibrate("~api99", [6194, 3914069], calfun=ss.cal_sinh,
                                 bounds=(0.5, 2.0))
    assert not np.allclose(lin.full_weights, sinh.full_weights, rtol=1e-6)
    with pytest.raises(ValueError, match="finite bounds"):
        d["dstrat"].calibrate("~api99", [6194, 3914069], calfun=ss.cal_sinh)


def test_make_calfun_checks_argument_names():
    with pytest.raises(ValueError, match="wrong argument names"):
        ss.make_calfun(lambda x, bounds: x, lambda u, bounds: u, "bad")
    assert repr(_hellinger()) == "calibration metric: hellinger distance"


# ------------------------------------------------------------------------------ names
def test_cal_names_and_make_formula(d, api):
    with r_session("survey") as (ro, _):
        r_names = list(ro.r("cal_names(~stype+api99, k_dstrat)"))
        r_formula = str(ro.r("paste(deparse(make.formula(c('stype', 'api99'))))")[0])
        r_noint = list(ro.r("cal_names(~0+stype+api99, k_dclus1)"))
    assert ss.cal_names("~stype+api99", d["dstrat"]) == r_names
    assert ss.cal_names("~0+stype+api99", d["dclus1"]) == r_noint
    assert ss.make_formula(["stype", "api99"]) == r_formula.replace(" ", "").replace("+", " + ")
    a = api["apistrat"].copy()
    a.loc[a.index[0], "api99"] = np.nan  # names need no complete data
    assert ss.cal_names("~stype+api99", ss.SurveyDesign(a, strata="stype", weights="pw")) == (
        r_names)
    pop = dict(zip(r_names, [6194, 755, 1018, 3914069], strict=True))
    assert isinstance(d["dstrat"].calibrate("~stype+api99", pop), ss.SurveyDesign)
    assert isinstance(pd.Series(pop), pd.Series)
