"""``oldsvyquantile`` (R survey's pre-4.0 quantiles) against R live (survey 4.1.1 and 4.5 share
R/svyquantile.R's code for it): apiclus1 by linearization (Wald and betaWald, linear and
constant rules, discrete and rounded ties, df), a calibrated design, and JK1 replicates
(probability and quantile intervals)."""

from __future__ import annotations

import numpy as np
import pytest

import surveysynth as ss
from surveysynth.oldquantile import oldsvyquantile
from tests.conftest import assert_rel

TOL = 1e-9
SETUP = """dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
rclus1 <- as.svrepdesign(dclus1)
dcal <- calibrate(dclus1, ~api99, c(6194, 3914069)); 1"""


@pytest.fixture(scope="module")
def designs(R, api):
    R(SETUP)
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    return {"dclus1": d, "rclus1": d.jackknife(),
            "dcal": d.calibrate("~api99", [6194, 3914069])}


def _taylor(est):
    return np.r_[est["estimate"], est["ci_low"], est["ci_high"], est["se"]]


def _r_taylor(R, design: str, args: str) -> np.ndarray:
    q = R(f"q <- oldsvyquantile(~api00, {design}, c(.1, .25, .5, .9), ci=TRUE{args}); "
          "c(q$quantiles, q$CIs[1, , 1], q$CIs[2, , 1], SE(q))")
    return q


@pytest.mark.parametrize("py,args", [
    ({}, ""),
    ({"interval_type": "betaWald"}, ", interval.type='betaWald'"),
    ({"method": "constant", "f": 0.5, "ties": "rounded"},
     ", method='constant', f=0.5, ties='rounded'"),
    ({"method": "constant", "f": 0.0}, ", method='constant', f=0"),
    ({"df": np.inf, "alpha": 0.1}, ", df=Inf, alpha=0.1"),
])
def test_linearization(designs, R, py, args):
    got = oldsvyquantile("api00", designs["dclus1"], [0.1, 0.25, 0.5, 0.9], **py)
    assert_rel(_taylor(got), _r_taylor(R, "dclus1", args), TOL, args)


def test_man_style_two_variables_and_calibrated(designs, R):
    got = oldsvyquantile(["api00", "ell"], designs["dclus1"], [0.25, 0.5])
    r = R("q <- oldsvyquantile(~api00+ell, dclus1, c(.25, .5), ci=TRUE); "
          "c(t(q$quantiles), q$CIs[1, , 1], q$CIs[2, , 1], q$CIs[1, , 2], q$CIs[2, , 2])")
    ours = np.r_[got["estimate"], got["ci_low"][:2], got["ci_high"][:2], got["ci_low"][2:],
                 got["ci_high"][2:]]
    assert_rel(ours, r, TOL, "two variables")
    cal = oldsvyquantile("api00", designs["dcal"], [0.1, 0.25, 0.5, 0.9])
    assert_rel(_taylor(cal), _r_taylor(R, "dcal", ""), TOL, "calibrated")


@pytest.mark.parametrize("kind,args", [("probability", ""),
                                       ("quantile", ", interval.type='quantile'")])
def test_replicate(designs, R, kind, args):
    got = oldsvyquantile("api00", designs["rclus1"], [0.1, 0.5, 0.75], interval_type=kind)
    r = R(f"q <- suppressWarnings(oldsvyquantile(~api00, rclus1, c(.1, .5, .75){args})); "
          "c(coef(q), SE(q))")
    assert_rel(np.r_[got["estimate"], got["se"]], r, TOL, kind)


def test_refusals(designs):
    with pytest.raises(ValueError, match="score"):
        oldsvyquantile("api00", designs["dclus1"], [0.5], interval_type="score")
    with pytest.raises(ValueError, match="probability"):
        oldsvyquantile("api00", designs["rclus1"], [0.5], interval_type="Wald")
    with pytest.raises(ValueError, match="method="):
        oldsvyquantile("api00", designs["dclus1"], [0.5], method="spline")
