"""calibrate / rake / post_stratify against R survey 4.1, live through rpy2.

Weights, totals, means and domain estimates with their SEs on R's own ?calibrate examples
(apistrat, apiclus1, the two-stage apiclus2), linearization and JK1 replicate designs; then
the errors of bad calibration input.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.calibration import CalibrationError
from tests.conftest import assert_rel

POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018}
POP_API = {**POP, "api99": 3914069}
R_POP = "c(`(Intercept)`=6194, stypeH=755, stypeM=1018)"
R_POP_API = "c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)"
POP_TYPES = pd.DataFrame({"stype": ["E", "H", "M"], "Freq": [4421, 755, 1018]})
POP_SCHWIDE = pd.DataFrame({"sch.wide": ["No", "Yes"], "Freq": [1072, 5122]})
R_TABLES = ("pop.types <- data.frame(stype=c('E','H','M'), Freq=c(4421,755,1018)); "
            "pop.schwide <- data.frame(sch.wide=c('No','Yes'), Freq=c(1072,5122))")

DESIGNS = {
    "strat": ("svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)",
              lambda api: ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw",
                                          fpc="fpc")),
    "clus1": ("svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)",
              lambda api: ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")),
    "clus2": ("svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)",
              lambda api: ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2")),
    "clus1_jk1": ("as.svrepdesign(svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc), "
                  "type='JK1')",
                  lambda api: ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw",
                                              fpc="fpc").jackknife("JK1")),
}

def _force(d) -> dict:
    """Deleted-cluster JK1 replicates cannot all meet bounded totals: R warns and keeps their
    last weights; here that needs force=True (tested in test_replicate_non_convergence)."""
    return {"force": True} if d.design_kind == "replicate" else {}


# name -> (R call on design d, ours on design d, tolerance)
CALIBRATIONS = {
    "linear": (f"calibrate(d, ~stype+api99, {R_POP_API})",
               lambda d: d.calibrate("~stype+api99", POP_API), 1e-9),
    "linear_stype": (f"calibrate(d, ~stype, {R_POP})",
                     lambda d: d.calibrate(["stype"], POP), 1e-9),
    "linear_bounded": (f"calibrate(d, ~stype+api99, {R_POP_API}, bounds=c(0.6, 1.6))",
                       lambda d: d.calibrate("~stype+api99", POP_API, bounds=(0.6, 1.6),
                                                   **_force(d)), 1e-6),
    "raking": (f"calibrate(d, ~stype+api99, {R_POP_API}, calfun='raking')",
               lambda d: d.calibrate("~stype+api99", POP_API, calfun="raking"), 1e-6),
    "logit": (f"calibrate(d, ~stype+api99, {R_POP_API}, calfun='logit', bounds=c(0.7, 1.7))",
              lambda d: d.calibrate("~stype+api99", POP_API, calfun="logit",
                                    bounds=(0.7, 1.7), **_force(d)), 1e-6),
    "poststrat": ("postStratify(d, ~stype, pop.types)",
                  lambda d: d.post_stratify("stype", POP_TYPES), 1e-9),
    "rake": ("rake(d, list(~stype, ~sch.wide), list(pop.types, pop.schwide))",
             lambda d: d.rake(["stype", "sch.wide"], [POP_TYPES, POP_SCHWIDE]), 1e-6),
    "poststrat_then_linear": (
        "calibrate(postStratify(d, ~sch.wide, pop.schwide), ~api99, "
        "c(`(Intercept)`=6194, api99=3914069))",
        lambda d: d.post_stratify("sch.wide", POP_SCHWIDE).calibrate(
            "~api99", {"(Intercept)": 6194, "api99": 3914069}), 1e-9),
}

STATS = [
    ("svytotal(~enroll, cal, na.rm=TRUE)", lambda c: c.total("enroll", na_rm=True)),
    ("svymean(~api00, cal)", lambda c: c.mean("api00")),
    ("svytotal(~stype, cal)", lambda c: c.total("stype")),
    ("svyratio(~api.stu, ~enroll, cal, na.rm=TRUE)",
     lambda c: c.ratio("api.stu", "enroll", na_rm=True)),
    ("svyby(~api00, ~sch.wide, cal, svymean)", lambda c: c.mean("api00", by="sch.wide")),
    ("svyby(~enroll, ~awards, cal, svytotal, na.rm=TRUE)",
     lambda c: c.total("enroll", by="awards", na_rm=True)),
    ("svymean(~api00, subset(cal, comp.imp == 'Yes'))",
     lambda c: c.subset(c.data["comp.imp"] == "Yes").mean("api00")),
]


def _r(R, design: str, cal: str, expr: str) -> np.ndarray:
    return R(f"local({{ {R_TABLES}; d <- {design}; cal <- suppressWarnings({cal}); {expr} }})")


@pytest.mark.parametrize("cal_name", list(CALIBRATIONS))
@pytest.mark.parametrize("design_name", list(DESIGNS))
def test_matches_r(R, api, design_name, cal_name):
    r_design, py_design = DESIGNS[design_name]
    r_cal, py_cal, tol = CALIBRATIONS[cal_name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = py_cal(py_design(api))
    assert type(cal) is type(py_design(api))
    w_r = _r(R, r_design, r_cal, "weights(cal, 'sampling')")
    assert_rel(cal.weights, w_r, tol, f"{design_name}/{cal_name} weights")
    if cal.design_kind == "replicate":
        rep_r = _r(R, r_design, r_cal, "as.vector(weights(cal, 'analysis'))")
        assert_rel(cal.replicate_weights("analysis").T.ravel(), rep_r, tol,
                   f"{design_name}/{cal_name} replicate weights")
    for expr, ours in STATS:
        out = _r(R, r_design, r_cal, f"s <- {expr}; c(coef(s), SE(s))")
        k = out.shape[0] // 2
        res = ours(cal)
        assert_rel(res.estimate, out[:k], tol, f"{design_name}/{cal_name} {expr} estimate")
        # SEs of calibrated totals are 0 up to rounding (1e-13 of the total)
        assert_rel(res.se, out[k:], tol, f"{design_name}/{cal_name} {expr} SE",
                   atol=1e-10 * float(np.max(np.abs(out[:k]))))


def test_calibrated_totals_reached_and_variance_changes(api):
    """The calibrated totals are the population's; a wrong variance (the uncalibrated
    formula on calibrated weights) would leave the SE of the calibrated total non-zero."""
    d = DESIGNS["clus1"][1](api)
    cal = d.calibrate("~stype+api99", POP_API)
    tot = cal.total(["stype", "api99"])
    assert_rel(tot.estimate, [4421, 755, 1018, 3914069], 1e-12)
    assert np.all(tot.se < 1e-6 * tot.estimate)
    assert d.total("api99").se.iloc[0] > 1e5
    # the caller's design is unchanged
    assert_rel(d.weights, api["apiclus1"]["pw"], 0)


def test_population_as_dataframe_and_series(api):
    d = DESIGNS["strat"][1](api)
    a = d.calibrate("~stype", POP)
    b = d.calibrate("~stype", pd.Series(POP))
    c = d.calibrate("~stype", pd.DataFrame({"term": list(POP), "total": list(POP.values())}))
    e = d.post_stratify("stype", {"E": 4421, "H": 755, "M": 1018})
    for other in (b, c, e):
        assert_rel(other.weights, a.weights, 1e-12)


# ---------------------------------------------------------------------------- errors
def test_level_absent_from_sample(api):
    d = DESIGNS["clus1"][1](api)
    with pytest.raises(ValueError, match=r"stypeX.*no column.*collapse"):
        d.calibrate("~stype", {**POP, "stypeX": 10})
    df = api["apiclus1"].copy()
    df["stype"] = pd.Categorical(df["stype"], categories=["E", "H", "M", "X"])
    d2 = ss.SurveyDesign(df, ids="dnum", weights="pw", fpc="fpc")
    with pytest.raises(ValueError, match=r"stypeX.*absent from the sample"):
        d2.calibrate("~stype", {**POP, "stypeX": 10})
    # a zero total for the absent level is dropped, as R does
    assert_rel(d2.calibrate("~stype", {**POP, "stypeX": 0}).weights,
               d.calibrate("~stype", POP).weights, 1e-12)
    pop = pd.concat([POP_TYPES, pd.DataFrame({"stype": ["X"], "Freq": [5]})])
    with pytest.raises(ValueError, match=r"\('X',\).*absent from the sample.*partial=True"):
        d.post_stratify("stype", pop)
    with pytest.raises(ValueError, match=r"\('M',\).*no \(or a zero\) population count"):
        d.post_stratify("stype", POP_TYPES.iloc[:2])
    with pytest.raises(ValueError, match=r"no total for \['stypeM'\]"):
        d.calibrate("~stype", {"(Intercept)": 6194, "stypeH": 755})


def test_non_convergence_says_how_far(api):
    d = DESIGNS["clus1"][1](api)
    with pytest.raises(CalibrationError, match=r"maxit=2 .*reached [0-9.e-]+ .*raise maxit"):
        d.calibrate("~stype+api99", POP_API, calfun="raking", maxit=2)
    with pytest.warns(UserWarning, match="did not converge"):
        d.calibrate("~stype+api99", POP_API, calfun="raking", maxit=2, force=True)
    with pytest.raises(CalibrationError, match=r"rake did not converge in maxit=1 sweeps: .*moved"):
        d.rake(["stype", "sch.wide"], [POP_TYPES, POP_SCHWIDE], maxit=1)


def test_infeasible_bounds(api):
    d = DESIGNS["clus1"][1](api)
    with pytest.raises(CalibrationError, match=r"stypeH.*between .*widen the bounds"):
        d.calibrate("~stype", {**POP, "stypeH": 3000}, calfun="logit", bounds=(0.5, 2))
    with pytest.raises(CalibrationError, match="include 1"):
        d.calibrate("~stype", POP, bounds=(1.2, 2))
    with pytest.raises(CalibrationError, match="finite bounds"):
        d.calibrate("~stype", POP, calfun="logit")


def test_nonpositive_weights_reported(R, api):
    d = DESIGNS["clus1"][1](api)
    pop = {"(Intercept)": 6194, "api99": 1_000_000}
    g_r = R("local({ d <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc); "
            "weights(calibrate(d, ~api99, c(`(Intercept)`=6194, api99=1000000))) })")
    neg = np.flatnonzero(g_r <= 0)
    assert neg.shape[0] > 0  # R gives negative weights here
    label = api["apiclus1"].index[neg[0]]
    first = re.escape(repr(label) if isinstance(label, str) else str(label))
    with pytest.raises(CalibrationError, match=rf"zero or negative in rows {first},.*bounds"):
        d.calibrate("~api99", pop)
    kept = d.calibrate("~api99", pop, allow_nonpositive=True)
    assert_rel(kept.weights, g_r, 1e-9)


def test_subset_design_refused(api):
    d = DESIGNS["clus1"][1](api)
    sub = d.subset(d.data["stype"] == "E")
    with pytest.raises(ValueError, match="calibrate the full design"):
        sub.calibrate("~api99", {"(Intercept)": 4421, "api99": 1})


def test_replicate_non_convergence(api):
    """R only warns when a replicate cannot meet the totals within the bounds; here it is an
    error naming the replicate unless force=True (then R's weights, checked in test_matches_r)."""
    rep = DESIGNS["clus1_jk1"][1](api)
    with pytest.raises(CalibrationError, match=r"replicate \d+: calfun='linear' did not converge"):
        rep.calibrate("~stype+api99", POP_API, bounds=(0.6, 1.6))


def test_other_engines_refused_on_calibrated_linearization(api):
    """The R and samplics engines would rebuild the design without its calibration and
    return uncalibrated SEs: refused rather than wrong."""
    cal = DESIGNS["clus1"][1](api).calibrate("~stype", POP)
    with pytest.raises(ValueError, match="calibrated"):
        cal.total("enroll", engine="r")


@pytest.mark.parametrize("design_name", ["clus1", "strat"])
def test_glm_ciprop_and_covmat_on_calibrated(R, api, design_name):
    """svyglm, svyciprop and svyby covariances read the calibrated variance through the core
    (a module computing its own Taylor variance would give R's uncalibrated numbers)."""
    from surveysynth.analysis import svyglm

    r_design, py_design = DESIGNS[design_name]
    r_cal, py_cal, _ = CALIBRATIONS["linear"]
    cal = py_cal(py_design(api))
    fit = svyglm("api00 ~ ell + meals", cal)
    ref = _r(R, r_design, r_cal, "m <- svyglm(api00~ell+meals, cal); c(coef(m), SE(m))")
    assert_rel(fit.params, ref[:3], 1e-9, "svyglm coef")
    assert_rel(fit.bse, ref[3:], 1e-9, "svyglm se")
    p = cal.proportion("sch.wide", ci_method="logit").iloc[1]
    ref = _r(R, r_design, r_cal, "s <- svyciprop(~I(sch.wide=='Yes'), cal, method='logit'); "
             "c(coef(s), SE(s), confint(s))")
    assert_rel([p.estimate, p.se, p.ci_low, p.ci_high], ref, 1e-9, "svyciprop logit")
    # (R's svyby(covmat=TRUE) fails on calibrated designs: the covariance of two totals)
    out = cal.total(["api00", "ell"], covmat=True)
    V = out.attrs["covmat"]["vcov"]
    ref = _r(R, r_design, r_cal, "vcov(svytotal(~api00+ell, cal))")
    assert_rel(V.ravel(), ref, 1e-9, "vcov of totals")
