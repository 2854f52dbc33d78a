"""svyprcomp, svyfactanal, svycralpha and svycdf against R survey, live (4.1.1 through rpy2:
these functions are the same in 4.5, R/multivariate.R, svycralpha.R and svycdf.R unchanged
between the two), on R's man-page examples (?svyprcomp, ?svyfactanal, ?svycralpha, ?svycdf),
a replicate design (R's JKn of apistrat, its weights exported) and a calibrated design."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import replicate_design_from_r

import surveysynth as ss
from r_bridge import r_session
from surveysynth.analysis import svycdf, svycralpha, svyfactanal, svyprcomp
from surveysynth.analysis.multivariate import promax, varimax
from tests.conftest import assert_rel

TOL = 1e-8
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages(library(survey)); data(api)
mv_dclus2 <- svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)
mv_dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
mv_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
mv_rstrat <- as.svrepdesign(mv_dstrat)
mv_cal <- calibrate(mv_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
"""
PC_VARS = ["api99", "api00", "ell", "hsg", "meals", "emer"]
PC_R = "~api99+api00+ell+hsg+meals+emer"
FA_VARS = ["api99", "api00", "hsg", "meals", "ell", "emer"]
FA_R = "~api99+api00+hsg+meals+ell+emer"
ALPHA_VARS = ["ell", "mobility", "avg.ed", "emer", "meals"]


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    rstrat = replicate_design_from_r(api["apistrat"], "mv_rstrat")
    return {
        "mv_dclus2": ss.SurveyDesign(api["apiclus2"], ids=["dnum", "snum"],
                                     fpc=["fpc1", "fpc2"]),
        "mv_dclus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
        "mv_dstrat": strat,
        "mv_rstrat": rstrat,
        "mv_cal": strat.calibrate("~stype+api99", POP_API),
    }


def _same_sign(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Singular vectors are defined up to sign: flip our columns to R's (the check that they
    are equal up to sign is the point; LAPACK gives the same signs in practice)."""
    return ours * np.sign(np.sum(ours * ref, axis=0))


# ------------------------------------------------------------------------------ svyprcomp
@pytest.mark.parametrize("design,scale", [("mv_dclus2", True), ("mv_dclus2", False),
                                          ("mv_rstrat", True), ("mv_cal", True)])
def test_svyprcomp_equals_R(designs, design, scale):
    """?svyprcomp: svyprcomp(~api99+api00+ell+hsg+meals+emer, dclus2, scale=TRUE,
    scores=TRUE); also unscaled, on a JKn replicate design and a calibrated design."""
    pc = svyprcomp(PC_VARS, designs[design], scale=scale, scores=True)
    _r(f"mv_pc <- svyprcomp({PC_R}, design={design}, scale.={str(scale).upper()}, "
       "scores=TRUE); 0")
    assert_rel(pc.sdev, _r("mv_pc$sdev"), TOL, "sdev")
    rot = _r("as.vector(mv_pc$rotation)").reshape(6, 6, order="F")
    assert_rel(_same_sign(pc.rotation.to_numpy(), rot), rot, TOL, "rotation")
    x = _r("as.vector(mv_pc$x)").reshape(-1, 6, order="F")
    ours = _same_sign(pc.x.to_numpy(), x)
    assert np.max(np.abs(ours - x)) <= TOL * np.max(np.abs(x)), "scores"
    assert_rel(pc.center, _r("mv_pc$center"), TOL, "center")
    if scale:
        assert_rel(pc.scale, _r("mv_pc$scale"), TOL, "scale")
    assert_rel(pc.weights, _r("mv_pc$weights"), TOL, "weights")


def test_svyprcomp_subset_tol_and_missing(designs):
    """A subset drops its rows, a calibrated design's subset keeps them with weight 0 (R's
    ``[.survey.design2``); tol drops components as R's; a missing value is an error naming
    the rows unless na_rm (R's na.omit)."""
    d = designs["mv_dstrat"]
    sub = d.subset(d.data["sch.wide"] == "Yes")
    pc = svyprcomp(["api00", "api99", "ell"], sub, tol=0.2)
    ref = _r("svyprcomp(~api00+api99+ell, subset(mv_dstrat, sch.wide=='Yes'), tol=0.2)$sdev")
    assert len(pc.sdev) == len(ref) < 3
    assert_rel(pc.sdev, ref, TOL, "subset sdev")
    cal = designs["mv_cal"]
    pc = svyprcomp(["api00", "api99", "ell"], cal.subset(cal.data["sch.wide"] == "Yes"))
    ref = _r("svyprcomp(~api00+api99+ell, subset(mv_cal, sch.wide=='Yes'))$sdev")
    assert_rel(pc.sdev, ref, TOL, "calibrated subset sdev")
    with pytest.raises(ValueError, match="acs.k3"):
        svyprcomp(["api00", "acs.k3"], d)
    pc = svyprcomp(["api00", "acs.k3"], d, na_rm=True)
    assert_rel(pc.sdev, _r("svyprcomp(~api00+acs.k3, mv_dstrat)$sdev"), TOL, "na.omit")


# ------------------------------------------------------------------------------ svycralpha
@pytest.mark.parametrize("design", ["mv_dstrat", "mv_rstrat", "mv_cal", "mv_dclus1"])
def test_svycralpha_equals_R(designs, design):
    """?svycralpha: svycralpha(~ell+mobility+avg.ed+emer+meals, dstrat); replicate,
    calibrated, clustered (apiclus1's avg.ed has missing values: na_rm; svyvar's n / (n - 1)
    cancels in the ratio, so R 4.1.1 and 4.5 agree)."""
    na = design == "mv_dclus1"
    ours = svycralpha(ALPHA_VARS, designs[design], na_rm=na)
    ref = _r(f"svycralpha(~ell+mobility+avg.ed+emer+meals, {design}, na.rm={str(na).upper()})")
    assert_rel(ours, ref[0], TOL, design)
    if na:
        with pytest.raises(ValueError, match="avg.ed"):
            svycralpha(ALPHA_VARS, designs[design])


# ------------------------------------------------------------------------------ svycdf
@pytest.mark.parametrize("design", ["mv_dstrat", "mv_rstrat", "mv_cal"])
def test_svycdf_equals_R(designs, design, api):
    """?svycdf: svycdf(~enroll+api00+api99, dstrat) evaluated at 800 and at every sample
    value (the step heights, ties included) and between them."""
    cdf = svycdf(["enroll", "api00", "api99"], designs[design])
    _r(f"mv_cdf <- svycdf(~enroll+api00+api99, {design}); 0")
    for i, v in enumerate(["enroll", "api00", "api99"], start=1):
        pts = np.unique(api["apistrat"][v].to_numpy(dtype=float))
        pts = np.concatenate([pts, pts + 0.5, [pts[0] - 1, 800.0]])
        vec = "c(" + ",".join(repr(float(p)) for p in pts) + ")"
        assert_rel(cdf[v](pts), _r(f"mv_cdf[[{i}]]({vec})"), 1e-12, f"{design} {v}")


def test_svycdf_subset_and_missing(designs):
    """A domain's CDF (R: the subset design), and rows with a missing value dropped as R's
    default na.rm=TRUE."""
    d = designs["mv_dstrat"]
    sub = d.subset(d.data["stype"] == "H")
    cdf = svycdf(["api00", "acs.46"], sub)
    pts = np.array([400.0, 600.0, 650.5, 700.0, 25.0, 30.0])
    ref = _r("mv_c <- svycdf(~api00+acs.46, subset(mv_dstrat, stype=='H')); "
             "c(mv_c[[1]](c(400,600,650.5,700,25,30)), mv_c[[2]](c(400,600,650.5,700,25,30)))")
    assert_rel(np.concatenate([cdf["api00"](pts), cdf["acs.46"](pts)]), ref, 1e-12, "subset")
    with pytest.raises(ValueError, match="na_rm"):
        svycdf(["acs.46"], d, na_rm=False)


# ------------------------------------------------------------------------------ svyfactanal
@pytest.mark.parametrize("n", ["none", "effective", "sample", "degf", "min.effective"])
def test_svyfactanal_man_page_equals_R(designs, n):
    """?svyfactanal on dclus1 (factors=2), every n= rule. R's optimizer stops at L-BFGS-B's
    default factr (uniquenesses ~1e-4 from the optimum): compared with R run to convergence
    (factr=1, pgtol=0): objective and test statistic 1e-9, loadings 1e-7, uniquenesses 1e-6
    (the criterion is flat along them); and with R's default run to 1e-3."""
    f = svyfactanal(FA_VARS, designs["mv_dclus1"], factors=2, n=n)
    call = f"svyfactanal({FA_R}, design=mv_dclus1, factors=2, n='{n}'"
    _r(f"mv_f <- {call}); mv_ft <- {call}, control=list(opt=list(factr=1, pgtol=0))); 0")
    assert_rel(f.objective, _r("mv_ft$criteria[1]"), 1e-9, "objective")
    assert_rel(f.uniquenesses, _r("mv_ft$uniquenesses"), 1e-6, "uniquenesses (tight R)")
    assert_rel(f.uniquenesses, _r("mv_f$uniquenesses"), 1e-3, "uniquenesses (R default)")
    L = _r("as.vector(unclass(mv_ft$loadings))").reshape(6, 2, order="F")
    assert np.max(np.abs(f.loadings.to_numpy() - L)) < 1e-7, "loadings"
    assert f.dof == _r("mv_ft$dof")[0]
    if n == "none":
        assert f.statistic is None and f.n_obs is None
    else:
        assert_rel(f.n_obs, _r("mv_ft$n.obs"), TOL, "n.obs")
        assert_rel(f.statistic, _r("mv_ft$STATISTIC"), 1e-9, "STATISTIC")
        assert_rel(f.p_value, _r("mv_ft$PVAL"), 1e-8, "PVAL")


@pytest.mark.parametrize("design,rotation", [("mv_rstrat", "varimax"), ("mv_cal", "varimax"),
                                             ("mv_dclus1", "promax"), ("mv_dclus1", "none")])
def test_svyfactanal_other_designs_and_rotations(designs, design, rotation):
    """Replicate and calibrated designs (svyvar's covariance of each), promax and no
    rotation; R run to convergence."""
    f = svyfactanal(FA_VARS, designs[design], factors=2, n="degf", rotation=rotation)
    _r(f"mv_ft <- svyfactanal({FA_R}, design={design}, factors=2, n='degf', "
       f"rotation='{rotation}', control=list(opt=list(factr=1, pgtol=0))); 0")
    assert_rel(f.objective, _r("mv_ft$criteria[1]"), 1e-9, "objective")
    assert_rel(f.uniquenesses, _r("mv_ft$uniquenesses"), 1e-6, "uniquenesses")
    L = _r("as.vector(unclass(mv_ft$loadings))").reshape(6, 2, order="F")
    assert np.max(np.abs(f.loadings.to_numpy() - L)) < 1e-7, "loadings"
    assert_rel(f.statistic, _r("mv_ft$STATISTIC"), 1e-9, "STATISTIC")


def test_rotations_equal_R_on_a_fixed_matrix():
    """varimax and promax alone, on R's loadings of the example (no optimizer involved)."""
    L = _r("mv_l <- unclass(factanal(covmat=cov(apistrat[,c('api99','api00','hsg','meals',"
           "'ell','emer')]), factors=3, rotation='none')$loadings); as.vector(mv_l)")
    L = L.reshape(6, 3, order="F")
    vm, vr = varimax(L)
    assert_rel(vm, _r("as.vector(varimax(mv_l)$loadings)").reshape(6, 3, order="F"), 1e-10)
    assert_rel(vr, _r("as.vector(varimax(mv_l)$rotmat)").reshape(3, 3, order="F"), 1e-10)
    pm, pr = promax(L)
    assert_rel(pm, _r("as.vector(promax(mv_l)$loadings)").reshape(6, 3, order="F"), 1e-10)
    assert_rel(pr, _r("as.vector(promax(mv_l)$rotmat)").reshape(3, 3, order="F"), 1e-10)


def test_svyfactanal_bad_input(designs):
    d = designs["mv_dclus1"]
    with pytest.raises(ValueError, match="too many"):
        svyfactanal(FA_VARS, d, factors=4)
    with pytest.raises(ValueError, match="n="):
        svyfactanal(FA_VARS, d, factors=2, n="rows")
    with pytest.raises(ValueError, match="not in the design"):
        svyfactanal(["api99", "api00", "nope"], d, factors=1)
    before = d.data.copy()
    svyfactanal(FA_VARS, d, factors=1)
    pd.testing.assert_frame_equal(d.data, before)
