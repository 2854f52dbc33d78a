"""Logical terms in svyglm coded as R codes them (two-level factors), against R survey live.

R's man page ?subset.survey.design: ``summary(svyglm(x~I(x>4)+0, design=dfpc))`` on R's
``fpc`` data gives two coefficients (the domain means of x > 4 and x <= 4, equal to
``svyby(~x, ~I(x>4), dfpc, svymean)``); formulaic alone codes the logical as one 0/1 column.
Also: a replicate design (R's JKn of dfpc, its weights exported), a calibrated design, a
logical term with an intercept, a logical response (``I(sch.wide == "Yes")``, R's
?anova.svyglm), ``predict`` on new data, and formulaic's own materializer left unchanged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from formulaic import model_matrix

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.analysis import svyglm
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages(library(survey)); data(api); data(fpc)
lg_dfpc <- svydesign(id=~psuid, strat=~stratid, weight=~weight, data=fpc, nest=TRUE)
lg_rfpc <- as.svrepdesign(lg_dfpc)
lg_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
lg_cal <- calibrate(lg_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
        env = ro.r("new.env()")
        ro.r["data"]("fpc", package="survey", envir=env)
        fpc = r_to_pandas(env["fpc"])
    rep = ReplicateDesign(fpc, repweights=_r("as.matrix(weights(lg_rfpc, 'analysis'))"),
                          weights=_r("as.numeric(lg_rfpc$pweights)"), type="other",
                          scale=float(_r("lg_rfpc$scale")[0]), rscales=_r("lg_rfpc$rscales"),
                          combined_weights=True)
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    return {
        "lg_dfpc": ss.SurveyDesign(fpc, ids="psuid", strata="stratid", weights="weight",
                                   nest=True),
        "lg_rfpc": rep,
        "lg_cal": strat.calibrate("~stype+api99", POP_API),
        "lg_dstrat": strat,
    }


def _check(res, r_design: str, r_formula: str, family: str = "gaussian") -> None:
    with r_session("survey") as (ro, _):
        ro.r(f"lg_m <- svyglm({r_formula}, design={r_design}, family={family}())")
    coef = _r("coef(lg_m)")
    assert res.params.shape[0] == coef.shape[0], (
        f"{r_formula} on {r_design}: {list(res.params.index)} vs R's {coef.shape[0]} coefs")
    assert_rel(res.params, coef, TOL, f"{r_design} coef")
    assert_rel(res.bse, _r("SE(lg_m)"), TOL, f"{r_design} SE")
    assert res.df_resid == _r("lg_m$df.residual")[0]


@pytest.mark.parametrize("design", ["lg_dfpc", "lg_rfpc"])
def test_logical_without_intercept_is_two_level_factor(designs, design):
    """The issue's case: two coefficients, R's numbers; and they are the domain means."""
    res = svyglm("x ~ I(x > 4) + 0", designs[design])
    assert list(res.params.index) == ["I(x > 4)[False]", "I(x > 4)[True]"]
    _check(res, design, "x ~ I(x > 4) + 0")
    by = _r(f"coef(svyby(~x, ~I(x>4), {design}, svymean))")
    assert_rel(res.params, by, 1e-12, "svyby domain means")


def test_logical_with_intercept_and_calibrated_design(designs):
    """With an intercept: the TRUE contrast (R's ``I(ell > 20)TRUE``); a calibrated design;
    a boolean column behaves as the expression does."""
    _check(svyglm("api00 ~ I(ell > 20) + 0", designs["lg_cal"]), "lg_cal",
           "api00 ~ I(ell > 20) + 0")
    res = svyglm("api00 ~ I(ell > 20) + meals", designs["lg_cal"])
    assert list(res.params.index) == ["Intercept", "I(ell > 20)[T.True]", "meals"]
    _check(res, "lg_cal", "api00 ~ I(ell > 20) + meals")
    d = designs["lg_dstrat"]
    df = d.data.assign(high=d.data["ell"] > 20)
    dd = ss.SurveyDesign(df, strata="stype", weights="pw", fpc="fpc")
    a = svyglm("api00 ~ high + 0", dd)
    b = svyglm("api00 ~ I(ell > 20) + 0", d)
    assert_rel(a.params, b.params, 1e-14, "boolean column")
    assert a.params.shape[0] == 2


def test_logical_response_equals_R(designs):
    """R's ?anova.svyglm response I(sch.wide == "Yes") (a logical response is its 0/1)."""
    res = svyglm('I(sch.wide == "Yes") ~ ell + meals', designs["lg_dstrat"],
                 family="quasibinomial")
    _check(res, "lg_dstrat", 'I(sch.wide == "Yes") ~ ell + meals', "quasibinomial")
    g = svyglm('I(api00 > 10000) ~ ell', designs["lg_dstrat"])  # all FALSE: y is 0
    assert np.allclose(g.params, 0.0)


def test_predict_new_data_keeps_factor_coding(designs):
    """predict() on new data codes the logical as the fit did (R's predict with newdata)."""
    res = svyglm("x ~ I(x > 4) + 0", designs["lg_dfpc"])
    new = pd.DataFrame({"x": [3.0, 5.0]})
    p = res.predict(new)
    assert_rel(p["fit"], res.params.to_numpy(), 1e-14, "predict")
    assert_rel(p["se"], res.bse.to_numpy(), 1e-14, "predict se")


def test_formulaic_default_unchanged():
    """Only the package's own model matrices code logicals as factors."""
    df = pd.DataFrame({"x": [1.0, 5.0, 6.0]})
    assert list(model_matrix("x ~ I(x > 4) + 0", df).rhs.columns) == ["I(x > 4)"]
