"""svysmooth (method="locpoly") and KernSmooth's dpik / dpill / binned locpoly against R, live
(R survey 4.1.1 and KernSmooth through rpy2; R/svysmooth.R is unchanged in 4.5), on ?svysmooth's
examples, a replicate design (R's JKn of apistrat), a calibrated design and a domain."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import replicate_design_from_r

import surveysynth as ss
from r_bridge import r_session
from surveysynth.analysis.smoothing import dpik, dpill, svysmooth
from tests.conftest import assert_rel

TOL = 1e-8
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages(library(survey)); data(api)
sm_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
sm_rstrat <- as.svrepdesign(sm_dstrat)
sm_cal <- calibrate(sm_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
sm_dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    rstrat = replicate_design_from_r(api["apistrat"], "sm_rstrat")
    return {"sm_dstrat": strat, "sm_rstrat": rstrat,
            "sm_cal": strat.calibrate("~stype+api99", POP_API),
            "sm_dclus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw",
                                         fpc="fpc")}


def _compare(s, call: str, cols: list[str]) -> None:
    _r(f"sm_s <- {call}; 0")
    for i, c in enumerate(cols, start=1):
        assert_rel(s.x[c], _r(f"sm_s[[{i}]]$x"), 1e-12, f"{c} grid")
        assert_rel(s.y[c], _r(f"sm_s[[{i}]]$y"), TOL, f"{c} estimate")


@pytest.mark.parametrize("design", ["sm_dstrat", "sm_rstrat", "sm_cal"])
def test_svysmooth_regression_equals_R(designs, design):
    """?svysmooth: svysmooth(api00~api99+ell, dstrat): dpill bandwidths, binned weighted local
    linear fits; on replicate and calibrated designs too."""
    s = svysmooth(["api99", "ell"], designs[design], y="api00")
    _compare(s, f"svysmooth(api00~api99+ell, {design})", ["api99", "ell"])
    assert_rel(s.bandwidth["api99"],
               _r("KernSmooth::dpill(apistrat$api99, apistrat$api00, gridsize=401)"), TOL,
               "bandwidth")


@pytest.mark.parametrize("design,bw", [("sm_dstrat", 30), ("sm_dstrat", None),
                                       ("sm_rstrat", None), ("sm_cal", 30)])
def test_svysmooth_density_equals_R(designs, design, bw):
    """?svysmooth: svysmooth(~api99, dstrat, bandwidth=30) and the dpik default."""
    s = svysmooth("api99", designs[design], bandwidth=bw)
    extra = "" if bw is None else f", bandwidth={bw}"
    _compare(s, f"svysmooth(~api99, {design}{extra})", ["api99"])


def test_svysmooth_domain_grid_and_missing(designs):
    """A domain (its rows' range and weights), a coarser grid, and rows with missing values
    dropped under na_rm (apiclus1's acs.k3) as R's na.omit; without na_rm an error."""
    d = designs["sm_dstrat"]
    s = svysmooth("api00", d.subset(d.data["stype"] == "E"), y="api99", ngrid=101)
    _compare(s, "svysmooth(api99~api00, subset(sm_dstrat, stype == 'E'), ngrid=101)",
             ["api00"])
    s = svysmooth("acs.k3", designs["sm_dclus1"], y="api00", na_rm=True, bandwidth=2)
    _compare(s, "svysmooth(api00~acs.k3, sm_dclus1, bandwidth=2)", ["acs.k3"])
    with pytest.raises(ValueError, match="na_rm"):
        svysmooth("acs.k3", designs["sm_dclus1"], y="api00")


@pytest.mark.parametrize("xv,yv", [("api99", "api00"), ("ell", "api00"), ("enroll", "api00"),
                                   ("meals", "ell")])
def test_plugin_bandwidths_equal_KernSmooth(designs, api, xv, yv):
    """dpik and dpill alone on several variables. Mutants these kill: dpill's range taken
    before trimming (R's lazily evaluated default range.x is the trimmed data's; 1.5% off on
    api99), and dpik's mean by numpy instead of R's long-double mean (on enroll the largest
    point then survives truncated binning: 0.25% off)."""
    x = api["apistrat"][xv].to_numpy(dtype=float)
    y = api["apistrat"][yv].to_numpy(dtype=float)
    assert_rel(dpik(x), _r(f"KernSmooth::dpik(apistrat${xv}, gridsize=401)"), TOL, "dpik")
    assert_rel(dpill(x, y), _r(f"KernSmooth::dpill(apistrat${xv}, apistrat${yv}, "
                               "gridsize=401)"), TOL, "dpill")


def test_svysmooth_plot(designs):
    import matplotlib

    matplotlib.use("Agg")
    s = svysmooth("api99", designs["sm_dstrat"], bandwidth=30)
    ax = s.plot()
    assert_rel(ax.lines[0].get_ydata(), s.y["api99"], 0, "drawn line")
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("design,call,r_args", [
    ("sm_dstrat", dict(x="ell", quantile=0.75, df=3), "api00~ell, quantile=0.75, df=3"),
    ("sm_rstrat", dict(x=["api99", "meals"], quantile=[0.5, 0.25], df=[4, 5]),
     "api00~api99+meals, quantile=c(0.5, 0.25), df=c(4, 5)"),
    ("sm_cal", dict(x="meals", quantile=0.9, df=6), "api00~meals, quantile=0.9, df=6"),
])
def test_svysmooth_quantreg_equals_R(designs, design, call, r_args):
    """?svysmooth: svysmooth(api00~ell, dstrat, quantile=0.75, df=3, method="quantreg") (R's
    svyrqss: quantreg's rq on splines::bs with the sampling weights), replicate and calibrated
    designs, several terms with their own quantile and df."""
    s = svysmooth(design=designs[design], y="api00", method="quantreg", **call)
    cols = [call["x"]] if isinstance(call["x"], str) else call["x"]
    _compare(s, f"svysmooth({r_args}, {design}, method='quantreg')", cols)


def test_bs_basis_equals_R(api):
    from surveysynth.analysis.smoothing import bs_basis

    for v, df in (("ell", 3), ("api99", 5), ("enroll", 8)):
        x = api["apistrat"][v].to_numpy(dtype=float)
        ref = _r(f"as.vector(unclass(splines::bs(apistrat${v}, df={df})))")
        assert_rel(bs_basis(x, df).ravel(order="F"), ref, 1e-12, f"bs {v}")


def test_svysmooth_bad_method(designs):
    with pytest.raises(ValueError, match="densities"):
        svysmooth("ell", designs["sm_dstrat"], method="quantreg")
    with pytest.raises(ValueError, match="locpoly"):
        svysmooth("ell", designs["sm_dstrat"], y="api00", method="loess")
