"""svyvar against R survey::svyvar, live (R survey 4.1.1 through rpy2), on R's man-page
examples (?surveysummary: ``svyvar(~api00+api99, dclus1)`` and ``svyvar(~api00+api99,
jkstrat)``), a calibrated design, a subset and missing values; R survey 4.5's counting of
``n`` with ``na.rm=TRUE`` against stored output of R survey 4.5
(tests/reference/r_survey45/analysis.R)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.analysis import svyvar
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-10
REF45 = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "analysis.json")
                   .read_text())
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}

R_SETUP = """
suppressMessages(library(survey)); data(api)
sv_dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
sv_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
sv_jkstrat <- as.svrepdesign(sv_dstrat)
sv_cal <- calibrate(sv_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
sv_rcal <- calibrate(sv_jkstrat, ~stype+api99,
                     c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _rep_from_r(name: str, data: pd.DataFrame) -> ReplicateDesign:
    M = _r(f"as.matrix(weights({name}, 'analysis'))")
    return ReplicateDesign(data, repweights=M, weights=_r(f"as.numeric({name}$pweights)"),
                           type="other", scale=float(_r(f"{name}$scale")[0]),
                           rscales=_r(f"{name}$rscales"),
                           mse=bool(_r(f"as.numeric({name}$mse)")[0]), combined_weights=True)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    return {
        "sv_dclus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
        "sv_dstrat": strat,
        "sv_jkstrat": _rep_from_r("sv_jkstrat", api["apistrat"]),
        "sv_cal": strat.calibrate("~stype+api99", POP_API),
        "sv_rcal": _rep_from_r("sv_rcal", api["apistrat"]),
    }


def _vcov_close(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    """Covariances on the correlation scale (|diff| / sqrt(V_ii V_jj)): an off-diagonal
    covariance near 0 carries the rounding of the variances it is computed beside."""
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    err = float(np.max(np.abs(ours - ref) / scale))
    assert err <= TOL, f"{what}: max err {err:.3g}"


def _compare(out: pd.DataFrame, call: str, what: str) -> float:
    est = _r(f"sv_v <- {call}; as.vector(sv_v)")
    V = _r("as.vector(attr(sv_v, 'var'))")
    k = est.shape[0]
    assert_rel(out["estimate"], est, TOL, f"{what} estimate")
    se = np.sqrt(np.diag(V.reshape(k, k)))
    assert_rel(out["se"], se, TOL, f"{what} SE")  # print(v, covariance=TRUE)'s SE column
    _vcov_close(ss.vcov(out).to_numpy(), V.reshape(k, k, order="F"), f"{what} vcov")
    return float(np.max(np.abs(out["se"].to_numpy() - se) / se))


@pytest.mark.parametrize("design", ["sv_dclus1", "sv_jkstrat", "sv_cal", "sv_rcal"])
def test_svyvar_man_page_equals_R(designs, design):
    """?surveysummary: svyvar(~api00+api99, dclus1) and (jkstrat); calibrated designs."""
    d = designs[design]
    out = svyvar(["api00", "api99"], d)
    _compare(out, f"svyvar(~api00+api99, {design})", design)
    assert list(out["variable"]) == ["api00", "api99", "api00", "api99"]
    assert list(out["variable2"]) == ["api00", "api00", "api99", "api99"]
    m = out.attrs["matrix"].to_numpy()
    assert np.allclose(m, m.T) and m.shape == (2, 2)
    one = svyvar("api00", d)
    _compare(one, f"svyvar(~api00, {design})", f"{design} one variable")


def test_svyvar_subset_and_missing_equal_R(designs):
    """A domain (subset keeps the design) and na_rm on both design kinds; R 4.1's n on a
    linearization design with missing values under survey_version='4.1'."""
    d = designs["sv_dstrat"]
    sub = d.subset(d.data["sch.wide"] == "Yes")
    _compare(svyvar(["api00", "ell"], sub), "svyvar(~api00+ell, subset(sv_dstrat, sch.wide=='Yes'))",
             "subset")
    _compare(svyvar(["api00", "acs.k3"], d, na_rm=True, survey_version="4.1"),
             "svyvar(~api00+acs.k3, sv_dstrat, na.rm=TRUE)", "na_rm 4.1")
    _compare(svyvar(["api00", "acs.k3"], designs["sv_jkstrat"], na_rm=True),
             "svyvar(~api00+acs.k3, sv_jkstrat, na.rm=TRUE)", "replicate na_rm")
    with pytest.raises(ValueError, match="acs.k3"):
        svyvar(["api00", "acs.k3"], d)


@pytest.mark.parametrize("case,call", [
    ("dstrat_acsk3_narm", lambda ds: svyvar("acs.k3", ds["sv_dstrat"], na_rm=True)),
    ("cal_acs46_narm", lambda ds: svyvar(["acs.46", "api00"], ds["sv_cal"], na_rm=True)),
    ("dclus1_api00_acsk3_narm",
     lambda ds: svyvar(["api00", "acs.k3"], ds["sv_dclus1"], na_rm=True)),
])
def test_svyvar_na_rm_equals_R45(designs, case, call):
    """R survey 4.5 counts only the rows used in n / (n - 1) (stored 4.5 output); the 4.1
    rule gives different numbers where rows are dropped (the mutant the switch keeps)."""
    ref = REF45["svyvar"][case]
    out = call(designs)
    est = np.atleast_1d(ref["estimate"])
    assert_rel(out["estimate"], est, TOL, f"{case} estimate")
    k = est.shape[0]
    _vcov_close(ss.vcov(out).to_numpy(), np.reshape(ref["vcov"], (k, k), order="F"),
                f"{case} vcov")


def test_svyvar_versions_differ_only_with_dropped_rows(designs):
    """The 4.1 rule is a different number when rows are dropped (so the fixture test above
    can fail), and the same number without missing values."""
    d = designs["sv_dstrat"]
    new = svyvar("acs.k3", d, na_rm=True)
    old = svyvar("acs.k3", d, na_rm=True, survey_version="4.1")
    assert abs(new["estimate"][0] / old["estimate"][0] - 1) > 1e-3
    a = svyvar("api00", d)
    b = svyvar("api00", d, survey_version="4.1")
    assert a["estimate"][0] == b["estimate"][0]


def test_svyvar_errors_and_no_mutation(designs, api):
    d = designs["sv_dstrat"]
    before = d.data.copy()
    with pytest.raises(ValueError, match="not in the design"):
        svyvar(["api00", "nope"], d)
    with pytest.raises(ValueError, match="not numeric"):
        svyvar("stype", d)
    with pytest.raises(ValueError, match="survey_version"):
        svyvar("api00", d, survey_version="3.0")
    pd.testing.assert_frame_equal(d.data, before)
