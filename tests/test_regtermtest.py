"""regTermTest, anova.svyglm, AIC and BIC for svyglm, pchisqsum and pFsum against R survey,
live (R survey 4.1.1 through rpy2), on R's man-page examples (?regTermTest, ?anova.svyglm:
``dclus2 <- svydesign(id=~dnum+snum, weights=~pw, data=apiclus2)``, ``model0/1/2``), on a
replicate design (R's JK1 of dclus2, its weights exported) and a calibrated design; where
R survey 4.5 computes differently (the Gaussian AIC; LRT refits on the model's rows) against
stored R survey 4.5 output (tests/reference/r_survey45/analysis.R)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.analysis import AIC, BIC, anova, pchisqsum, pFsum, regTermTest, svyglm
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8
REF45 = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "analysis.json")
                   .read_text())
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages(library(survey)); data(api)
rt_dclus2 <- svydesign(id=~dnum+snum, weights=~pw, data=apiclus2)
rt_rclus2 <- as.svrepdesign(rt_dclus2)
rt_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
rt_rstrat <- as.svrepdesign(rt_dstrat)
rt_dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
rt_cal <- calibrate(rt_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
"""
# ?anova.svyglm's models (R's as.numeric(stype) is the level code + 1)
M0 = ('I(sch.wide=="Yes")~ell+meals+mobility', 'I(sch.wide == "Yes") ~ ell + meals + mobility')
M1 = ('I(sch.wide=="Yes")~ell+meals+mobility+as.numeric(stype)',
      'I(sch.wide == "Yes") ~ ell + meals + mobility + I(stype.cat.codes + 1)')
M2 = ('I(sch.wide=="Yes")~ell+meals+mobility+stype',
      'I(sch.wide == "Yes") ~ ell + meals + mobility + stype')


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _rep_from_r(name: str, data: pd.DataFrame) -> ReplicateDesign:
    return ReplicateDesign(data, repweights=_r(f"as.matrix(weights({name}, 'analysis'))"),
                           weights=_r(f"as.numeric({name}$pweights)"), type="other",
                           scale=float(_r(f"{name}$scale")[0]), rscales=_r(f"{name}$rscales"),
                           mse=bool(_r(f"as.numeric({name}$mse)")[0]), combined_weights=True)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    return {
        "rt_dclus2": ss.SurveyDesign(api["apiclus2"], ids=["dnum", "snum"], weights="pw"),
        "rt_rclus2": _rep_from_r("rt_rclus2", api["apiclus2"]),
        "rt_dstrat": strat,
        "rt_rstrat": _rep_from_r("rt_rstrat", api["apistrat"]),
        "rt_dclus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
        "rt_cal": strat.calibrate("~stype+api99", POP_API),
    }


def _fit(designs, design: str, model: tuple[str, str], family: str = "quasibinomial",
         name: str = "rt_m"):
    with r_session("survey") as (ro, _):
        ro.r(f"{name} <- svyglm({model[0]}, design={design}, family={family}())")
    return svyglm(model[1], designs[design], family=family)


def _r_test(call: str) -> dict[str, np.ndarray]:
    with r_session("survey") as (ro, _):
        ro.r(f"rt_r <- {call}")
        out = {"p": np.array(ro.r("rt_r$p"), dtype=float),
               "df": np.array(ro.r("rt_r$df"), dtype=float),
               "ddf": np.array(ro.r("if (is.null(rt_r$ddf)) Inf else rt_r$ddf"), dtype=float)}
        out["stat"] = np.array(ro.r("if (is.null(rt_r$Ftest)) rt_r$chisq else rt_r$Ftest"),
                               dtype=float)
        out["lambda"] = np.array(ro.r("if (is.null(rt_r$lambda)) NA else rt_r$lambda"),
                                 dtype=float)
    return out


def _check(res, ref, what: str) -> None:
    assert_rel(res.statistic, ref["stat"], TOL, f"{what} statistic")
    assert_rel(res.p_value, ref["p"], TOL, f"{what} p")
    ddf = res.parameter.get("ddf", math.inf)
    assert ddf == ref["ddf"][0], f"{what}: ddf {ddf} vs R {ref['ddf']}"
    assert res.parameter.get("ndf", res.parameter.get("df")) == ref["df"][0]
    if "lambda" in res.details:
        assert_rel(res.details["lambda"], ref["lambda"], TOL, f"{what} lambda")
        assert_rel(res.details["working_statistic"], ref["stat"] / ref["lambda"].mean(), TOL,
                   f"{what} printed statistic")


def test_regtermtest_man_page_equals_R(designs):
    """?regTermTest: model2 on dclus2 with each call of the example."""
    m = _fit(designs, "rt_dclus2", M0)
    for ours, call in [
        (regTermTest(m, "~ell"), "regTermTest(rt_m, ~ell)"),
        (regTermTest(m, "~ell", df=None), "regTermTest(rt_m, ~ell, df=NULL)"),
        (regTermTest(m, "~ell", method="LRT", df=math.inf),
         "regTermTest(rt_m, ~ell, method='LRT', df=Inf)"),
        (regTermTest(m, "~ell+meals", method="LRT"),
         "regTermTest(rt_m, ~ell+meals, method='LRT', df=NULL)"),
        (regTermTest(m, "~ell+meals", method="WorkingWald"),
         "regTermTest(rt_m, ~ell+meals, method='WorkingWald', df=NULL)"),
    ]:
        _check(ours, _r_test(call), call)


@pytest.mark.parametrize("design", ["rt_rclus2", "rt_cal", "rt_dstrat"])
@pytest.mark.parametrize("method", ["Wald", "WorkingWald", "LRT"])
def test_regtermtest_designs_equal_R(designs, design, method):
    """A replicate design, a calibrated design and a stratified one; a factor term (two
    columns) in a Gaussian model and two terms in a logistic one; F and chi-square forms."""
    g = _fit(designs, design, ("api00~ell+meals+stype", "api00 ~ ell + meals + stype"),
             "gaussian", "rt_g")
    b = _fit(designs, design, M0)
    for df, rdf in [(None, "NULL"), (math.inf, "Inf")]:
        _check(regTermTest(g, "stype", method=method, df=df),
               _r_test(f"regTermTest(rt_g, ~stype, method='{method}', df={rdf})"),
               f"{design} gaussian {method} {rdf}")
        _check(regTermTest(b, ["meals", "mobility"], method=method, df=df),
               _r_test(f"regTermTest(rt_m, ~meals+mobility, method='{method}', df={rdf})"),
               f"{design} binomial {method} {rdf}")


def test_regtermtest_intercept_null_interaction_equal_R(designs):
    """``~1+ell`` tests the intercept too; ``null=``; ``meals:ell`` matches ``ell:meals``;
    the satterthwaite approximation."""
    m = _fit(designs, "rt_dstrat", ("api00~ell*meals", "api00 ~ ell * meals"), "gaussian")
    _check(regTermTest(m, "~1+ell"), _r_test("regTermTest(rt_m, ~1+ell)"), "intercept")
    _check(regTermTest(m, "~1+ell", method="WorkingWald"),
           _r_test("regTermTest(rt_m, ~1+ell, method='WorkingWald')"), "intercept WW")
    _check(regTermTest(m, "meals:ell", null=[0.01]),
           _r_test("regTermTest(rt_m, ~meals:ell, null=0.01)"), "null, interaction")
    _check(regTermTest(m, "~meals+ell:meals", method="LRT", lrt_approximation="satterthwaite"),
           _r_test("regTermTest(rt_m, ~meals+ell:meals, method='LRT', "
                   "lrt.approximation='satterthwaite')"), "satterthwaite")


def test_anova_man_page_equals_R(designs):
    """?anova.svyglm: anova(model2) (sequential, LRT and Wald), anova(model0, model2) (F and
    Chisq), AIC(model0, model1, model2), BIC(model0, model2, maximal=model2)."""
    m0 = _fit(designs, "rt_dclus2", M0, name="rt_m0")
    m1 = _fit(designs, "rt_dclus2", M1, name="rt_m1")
    m2 = _fit(designs, "rt_dclus2", M2, name="rt_m2")
    for method, stat in [("LRT", "chisq"), ("Wald", "Ftest")]:
        tab = anova(m2, method=method)
        ref = _r(f"rt_a <- anova(rt_m2, method='{method}'); "
                 f"c(sapply(rt_a, '[[', '{stat}'), sapply(rt_a, '[[', 'p'))")
        assert list(tab.index) == ["ell", "meals", "mobility", "stype"]
        assert_rel(np.concatenate([tab["statistic"], tab["p"]]), ref, TOL, f"anova {method}")
        assert_rel(tab["ddf"], _r("sapply(rt_a, '[[', 'ddf')"), 0, "anova ddf")
        if method == "LRT":
            assert_rel(tab["DEff"], _r("sapply(rt_a, function(x) mean(x$lambda))"), TOL,
                       "DEff")
    for test in ("F", "Chisq"):
        _check(anova(m0, m2, test=test), _r_test(f"anova(rt_m0, rt_m2, test='{test}')"),
               f"nested {test}")
        _check(anova(m2, m0, test=test, method="Wald"),
               _r_test(f"anova(rt_m2, rt_m0, test='{test}', method='Wald')"), "nested Wald")
    aic = AIC(m0, m1, m2)
    assert_rel(aic.to_numpy(), _r("AIC(rt_m0, rt_m1, rt_m2)").reshape(3, 3, order="F"), TOL,
               "AIC")
    assert list(aic.columns) == ["eff.p", "AIC", "deltabar"]
    bic = BIC(m0, m2, maximal=m2)
    assert_rel(bic.to_numpy(), _r("BIC(rt_m0, rt_m2, maximal=rt_m2)").reshape(2, 3, order="F"),
               TOL, "BIC")
    with pytest.raises(ValueError, match="not symbolically nested"):
        anova(m1, m2)


@pytest.mark.parametrize("design", ["rt_rclus2", "rt_cal"])
def test_aic_bic_replicate_calibrated_equal_R(designs, design):
    m0 = _fit(designs, design, M0, name="rt_m0")
    m2 = _fit(designs, design, M2, name="rt_m2")
    assert_rel(AIC(m2).to_numpy(), _r("AIC(rt_m2)"), TOL, f"{design} AIC")
    assert_rel(AIC(m2, null_has_intercept=False).to_numpy(),
               _r("AIC(rt_m2, null_has_intercept=FALSE)"), TOL, f"{design} AIC no intercept")
    assert_rel(BIC(m0, maximal=m2).to_numpy(), _r("BIC(rt_m0, maximal=rt_m2)"), TOL,
               f"{design} BIC")


@pytest.mark.parametrize("design", ["rt_dstrat", "rt_dclus2", "rt_rstrat"])
def test_gaussian_aic_survey41_equals_R(designs, design):
    """R 4.1.1's Gaussian AIC (summary.svyglm dispersion, everything divided by sigma^2)."""
    m = _fit(designs, design, ("api00~ell+meals+mobility", "api00 ~ ell + meals + mobility"),
             "gaussian")
    if design == "rt_rstrat":  # R 4.1's residuals.svyglm needs design$prob: fails on replicates
        with r_session("survey") as (ro, _):
            assert ro.r("inherits(try(AIC(rt_m), silent=TRUE), 'try-error')")[0]
        with pytest.raises(ValueError, match="fails on Gaussian svyglm fits of replicate"):
            AIC(m, survey_version="4.1")
        return
    assert_rel(AIC(m, survey_version="4.1").to_numpy(), _r("AIC(rt_m)"), TOL, "AIC 4.1")


@pytest.mark.parametrize("case,design,formula,kw", [
    ("dstrat", "rt_dstrat", "api00 ~ ell + meals + mobility", {}),
    ("dclus2", "rt_dclus2", "api00 ~ ell + meals + mobility", {}),
    ("rstrat", "rt_rstrat", "api00 ~ ell + meals + mobility", {}),
    ("cal", "rt_cal", "api00 ~ ell + meals + mobility", {}),
    ("dstrat_no_null_intercept", "rt_dstrat", "api00 ~ ell + meals",
     {"null_has_intercept": False}),
])
def test_gaussian_aic_equals_R45(designs, case, design, formula, kw):
    """R survey 4.5's corrected Gaussian AIC (stored 4.5 output); 4.1's differs (mutant)."""
    m = svyglm(formula, designs[design])
    ref = REF45["aic_gaussian"][case]
    assert_rel(AIC(m, **kw).to_numpy(), ref, TOL, f"AIC 4.5 {case}")
    if designs[design].design_kind != "replicate":
        old = AIC(m, survey_version="4.1", **kw).to_numpy()
        assert abs(old[1] / ref[1] - 1) > 0.1


def test_gaussian_aic_two_models_equals_R45(designs):
    d = designs["rt_dclus2"]
    out = AIC(svyglm("api00 ~ ell", d), svyglm("api00 ~ ell + meals + mobility", d))
    assert_rel(out.to_numpy().ravel(), REF45["aic_gaussian"]["dclus2_two_models"], TOL,
               "AIC two models")


def test_lrt_with_missing_values_equals_R45(designs):
    """R 4.5 refits the smaller model on the model's rows (R 4.1 on the whole design)."""
    m = svyglm("api00 ~ ell + acs.k3", designs["rt_dclus1"], na_rm=True)
    t = regTermTest(m, "acs.k3", method="LRT")
    ref = REF45["lrt_missing"]
    assert_rel(t.statistic, ref["chisq"], TOL, "chisq")
    assert_rel(t.p_value, ref["p"], TOL, "p")
    assert_rel(t.details["lambda"], ref["lambda"], TOL, "lambda")
    assert t.parameter["ddf"] == ref["ddf"]


@pytest.mark.parametrize("x,a,ddf", [(5.3, [1.2, 0.7, 2.1], 30), (0.4, [1.0, 0.5], 12),
                                     (12.0, [3.0], 7), (25.0, [1.1, 1.3, 0.9, 0.8], 150),
                                     (3.0, [1.0, 1.0, 1.0], 20)])
def test_pchisqsum_pfsum_equal_R(R, x, a, ddf):
    """R's saddlepoint (uniroot's root, and the Satterthwaite fallback where the saddlepoint
    is ~0: x = sum(a)) and Satterthwaite tails, both tails."""
    al = f"c({','.join(map(str, a))})"
    ones = f"rep(1, {len(a)})"
    for method in ("saddlepoint", "satterthwaite"):
        for lower in (True, False):
            lt = "TRUE" if lower else "FALSE"
            assert_rel(pchisqsum(x, [1] * len(a), a, lower_tail=lower, method=method),
                       R(f"survey:::pchisqsum({x}, {ones}, {al}, lower.tail={lt}, "
                         f"method='{method}')"), 1e-12, f"pchisqsum {method}")
            assert_rel(pFsum(x, [1] * len(a), a, ddf=ddf, lower_tail=lower, method=method),
                       R(f"survey:::pFsum({x}, {ones}, {al}, ddf={ddf}, lower.tail={lt}, "
                         f"method='{method}')"), 1e-12, f"pFsum {method}")


def test_errors(designs):
    d = designs["rt_dstrat"]
    m = svyglm("api00 ~ ell + meals", d)
    with pytest.raises(ValueError, match="not in the model"):
        regTermTest(m, "mobility")
    with pytest.raises(ValueError, match="method"):
        regTermTest(m, "ell", method="Score")
    with pytest.raises(ValueError, match="integration"):
        pchisqsum(1.0, [1], [1.0], method="integration")
    with pytest.raises(ValueError, match="no intercept"):
        AIC(svyglm("api00 ~ ell + meals + 0", d, family="poisson"))
    with pytest.raises(ValueError, match="fewer than 2"):
        anova(svyglm("api00 ~ ell", d))
    with pytest.raises(ValueError, match="not in the maximal"):
        BIC(m, maximal=svyglm("api00 ~ ell", d))
