"""r_bridge with calibrated designs, both ways, live through rpy2.

Python -> R: a design from calibrate / post_stratify / rake (/ trim_weights) goes to R as a
survey.design2 with R's postStrata, and R's own svymean / svytotal / svyby give our numbers.
R -> Python: R's calibrate (linear, raking, logit), postStratify, rake and trimWeights on
svydesign and svrepdesign objects come back with R's numbers. SEs to 1e-9 (SEs of calibrated
totals, zero up to rounding, with an allowance of 1e-10 of the largest estimate).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.designs import from_r, to_r
from surveysynth.calibration import trim_weights
from tests.conftest import assert_rel

POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
POP_TYPES = pd.DataFrame({"stype": ["E", "H", "M"], "Freq": [4421, 755, 1018]})
POP_SCHWIDE = pd.DataFrame({"sch.wide": ["No", "Yes"], "Freq": [1072, 5122]})
R_SETUP = ("data(api); pop.types <- data.frame(stype=c('E','H','M'), Freq=c(4421,755,1018)); "
           "pop.schwide <- data.frame(sch.wide=c('No','Yes'), Freq=c(1072,5122)); "
           "P <- c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)")

# estimates with R's own functions on an R design object
R_EST = """function(d) {
  m <- svymean(~api00 + stype, d); t <- svytotal(~enroll, d, na.rm = TRUE)
  b <- svyby(~api00, ~sch.wide, d, svymean)
  c(coef(m), coef(t), coef(b), SE(m), SE(t), SE(b))
}"""


def _ours(d) -> np.ndarray:
    m = d.mean(["api00", "stype"])
    t = d.total("enroll", na_rm=True)
    b = d.mean("api00", by="sch.wide")
    return np.r_[m.estimate, t.estimate, b.estimate, m.se, t.se, b.se]


def _r_est(rd) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(R_EST)(rd), dtype=float)


def _check(ours: np.ndarray, ref: np.ndarray, what: str, tol: float = 1e-9) -> None:
    k = ref.shape[0] // 2
    assert_rel(ours[:k], ref[:k], tol, f"{what} estimates")
    assert_rel(ours[k:], ref[k:], tol, f"{what} SEs", atol=1e-10 * float(np.abs(ref[:k]).max()))


# ----------------------------------------------------------------------------- Python -> R
PY_DESIGNS = {
    "clus2": lambda api: ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2"),
    "strat2": lambda api: ss.SurveyDesign(api["apistrat"], ids="~dnum+snum", strata="stype",
                                          weights="pw", nest=True),
    "strat": lambda api: ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw",
                                         fpc="fpc"),
}
PY_CALS = {
    "greg": lambda d: d.calibrate("~stype+api99", POP_API),
    "logit": lambda d: d.calibrate("~stype+api99", POP_API, calfun="logit", bounds=(0.5, 2.5)),
    "poststrat": lambda d: d.post_stratify("sch.wide", POP_SCHWIDE),
    "rake": lambda d: d.rake(["stype", "sch.wide"], [POP_TYPES, POP_SCHWIDE]),
    "poststrat_greg": lambda d: d.post_stratify("sch.wide", POP_SCHWIDE).calibrate(
        "~api99", {"(Intercept)": 6194, "api99": 3914069}),
    "greg_trimmed": lambda d: trim_weights(d.calibrate("~stype+api99", POP_API), upper=150,
                                           lower=10),
}


@pytest.mark.parametrize("cal", list(PY_CALS))
@pytest.mark.parametrize("design", list(PY_DESIGNS))
def test_python_calibrated_design_in_r(R, api, design, cal):
    d = PY_CALS[cal](PY_DESIGNS[design](api))
    rd = to_r(d)
    with r_session("survey") as (ro, _):
        w_r = np.array(ro.r("function(d) weights(d)")(rd), dtype=float)
        call = "".join(ro.r("function(d) deparse(d$call)")(rd))
        # the same R object without its postStrata: the uncalibrated variance
        plain = np.array(ro.r(f"function(d) {{ d$postStrata <- NULL; ({R_EST})(d) }}")(rd))
    assert_rel(w_r, d.weights, 1e-15, "weights")
    assert call.startswith("calibrated(svydesign(")
    ref = _r_est(rd)
    _check(_ours(d), ref, f"{design}/{cal}")
    # a conversion that dropped the calibration would give these SEs: they differ
    k = ref.shape[0] // 2
    assert np.abs(plain[k] / ref[k] - 1) > 0.01  # SE of mean api00


def test_python_calibrated_subset_in_r(api):
    d = PY_CALS["rake"](PY_DESIGNS["clus2"](api))
    sub = d.subset(d.data["comp.imp"] == "Yes")
    with r_session("survey") as (ro, _):
        ref = np.array(ro.r("function(d) { m <- svymean(~api00 + enroll, d, na.rm = TRUE); "
                            "c(coef(m), SE(m)) }")(to_r(sub)), dtype=float)
    m = sub.mean(["api00", "enroll"], na_rm=True)
    assert_rel(np.r_[m.estimate, m.se], ref, 1e-9, "subset of raked design")


def test_python_calibrated_replicate_in_r(R, api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc").jackknife("JK1")
    cal = d.calibrate("~stype+api99", POP_API)
    _check(_ours(cal), _r_est(to_r(cal)), "JK1 calibrated")
    back = from_r(to_r(cal))
    np.testing.assert_allclose(back.replicate_weights("analysis"),
                               cal.replicate_weights("analysis"), rtol=1e-15)


# ----------------------------------------------------------------------------- R -> Python
R_BASES = {
    "clus2": "svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)",
    "strat2": "svydesign(id=~dnum+snum, strata=~stype, weights=~pw, data=apistrat, nest=TRUE)",
    "strat": "svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)",
    "clus1_jk1": "as.svrepdesign(svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc), "
                 "type='JK1')",
    "strat_jkn": "as.svrepdesign(svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat), "
                 "type='JKn')",
}
R_CALS = {
    "greg": "calibrate(d, ~stype+api99, P)",
    "raking": "calibrate(d, ~stype+api99, P, calfun='raking')",
    "logit": "calibrate(d, ~stype+api99, P, calfun='logit', bounds=c(0.5, 2.5))",
    "poststrat": "postStratify(d, ~sch.wide, pop.schwide)",
    "rake": "rake(d, list(~stype, ~sch.wide), list(pop.types, pop.schwide))",
    "poststrat_greg": "calibrate(postStratify(d, ~sch.wide, pop.schwide), ~api99, "
                      "c(`(Intercept)`=6194, api99=3914069))",
    "greg_trimmed": "trimWeights(calibrate(d, ~stype+api99, P), upper=150, lower=10)",
}


def _r_obj(base: str, cal: str):
    with r_session("survey") as (ro, _):
        return ro.r(f"local({{ {R_SETUP}; d <- suppressWarnings({base}); {cal} }})")


# R's trimWeights on replicate designs is broken (see test_trim_weights): not converted
R_PAIRS = [(b, c) for b in R_BASES for c in R_CALS
           if not (b.endswith(("jk1", "jkn")) and c == "greg_trimmed")]


@pytest.mark.parametrize("base, cal", R_PAIRS)
def test_r_calibrated_design_to_python(R, base, cal):
    rd = _r_obj(R_BASES[base], R_CALS[cal])
    ref = _r_est(rd)
    d = from_r(rd)
    replicate = base.endswith(("jk1", "jkn"))
    assert type(d).__name__ == ("ReplicateDesign" if replicate else "SurveyDesign")
    with r_session("survey") as (ro, _):
        w_r = np.array(ro.r("function(d) weights(d, 'sampling')")(rd), dtype=float)
    assert_rel(d.weights, w_r, 1e-15, "weights")
    _check(_ours(d), ref, f"{base}/{cal}")
    _check(_r_est(to_r(d)), ref, f"{base}/{cal} back in R")
    if not replicate:
        # the uncalibrated design with the same weights has other SEs: the adjustments count
        plain = ss.SurveyDesign(d.full_data, ids=d.ids_vars or None, strata=d.strata_vars,
                                weights=d.weights, fpc=d.fpc_vars, nest=d.nest)
        k = ref.shape[0] // 2
        assert abs(float(plain.mean("api00").se.iloc[0]) / ref[k] - 1) > 0.01


def test_r_structure_read_back(R):
    d = from_r(_r_obj(R_BASES["strat2"], R_CALS["rake"]))
    assert d.ids_vars == ["dnum", "snum"] and d.strata_vars == ["stype"] and d.nest
    d = from_r(_r_obj(R_BASES["strat"], R_CALS["greg"]))
    assert d.fpc_vars == ["fpc"] and d.strata_vars == ["stype"]


@pytest.mark.parametrize("base, cal, match", [
    ("svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)",
     "subset(calibrate(d, ~stype, P[1:3]), sch.wide == 'Yes')", "subset of a calibrated"),
    ("svydesign(id=apiclus1$dnum, weights=~pw, data=apiclus1, fpc=~fpc)",
     "calibrate(d, ~stype, P[1:3])", "does not have R's clusters.*formulas of columns"),
    ("svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)",
     "{ d$variables$fpc <- NULL; postStratify(d, ~sch.wide, pop.schwide) }",
     "no column of the data holds the stage-1 population sizes"),
])
def test_r_calibrated_designs_refused(R, base, cal, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=match):
            from_r(_r_obj(base, cal))
