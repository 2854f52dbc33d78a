"""twophase (method="full" and "approx") against R survey 4.1.1 live through rpy2, on R's
?twophase examples: the nwtco case-cohort design (phase 2 stratified on relapse), the nwtco
two-phase case-control design (strata interaction(rel, instit), R's random phase-2 indicator
exported) with svyglm and a phase-2 calibration to the phase-1 totals, pbc (two-phase SRS) and
mu284 (cluster phase 1 with fpc, phase 2 stratified within clusters). Estimates, SEs, the two
variance phases, svyglm coefficients and SEs to 1e-8 relative."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.analysis import svyglm
from surveysynth.twophase_design import twophase
from tests.conftest import assert_rel

TOL = 1e-8

R_SETUP = """
suppressMessages({library(survey); library(survival)})
data(nwtco)
nwtco$sub <- with(nwtco, in.subcohort | rel==1)
set.seed(1)
nwtco$incc2 <- as.logical(with(nwtco, ifelse(rel | instit==2, 1, rbinom(nrow(nwtco), 1, .1))))
nwtco$ri <- interaction(nwtco$rel, nwtco$instit)
nwtco$rsi <- interaction(nwtco$rel, nwtco$stage, nwtco$instit)
tp_cch <- twophase(id=list(~seqno,~seqno), strata=list(NULL,~rel), subset=~sub, data=nwtco)
tp_ccha <- twophase(id=list(~seqno,~seqno), strata=list(NULL,~rel), subset=~sub, data=nwtco,
                    method="approx")
tp_ccs2 <- twophase(id=list(~seqno,~seqno), strata=list(NULL,~ri), data=nwtco, subset=~incc2)
tp_ccs8 <- twophase(id=list(~seqno,~seqno), strata=list(NULL,~rsi), data=nwtco, subset=~incc2)
tp_gccs8 <- calibrate(tp_ccs2, phase=2, formula=~rsi)
data(pbc, package="survival")
pbc$randomized <- with(pbc, !is.na(trt) & trt>0)
pbc$id <- 1:nrow(pbc)
tp_pbc <- twophase(id=list(~id,~id), data=pbc, subset=~randomized)
tp_pbca <- twophase(id=list(~id,~id), data=pbc, subset=~randomized, method="approx")
data(mu284)
ii <- with(mu284, c(1:15, rep(1:5,n2[1:5]-3)))
mu284.1 <- mu284[ii,]
mu284.1$id <- 1:nrow(mu284.1)
mu284.1$sub <- rep(c(TRUE,FALSE), c(15,34-15))
tp_mu <- twophase(id=list(~id1,~id), strata=list(NULL,~id1), fpc=list(~n1,NULL),
                  data=mu284.1, subset=~sub)
tp_mua <- twophase(id=list(~id1,~id), strata=list(NULL,~id1), fpc=list(~n1,NULL),
                   data=mu284.1, subset=~sub, method="approx")
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _stat(expr: str) -> tuple[np.ndarray, np.ndarray]:
    with r_session("survey") as (ro, _):
        ro.r(f"tp_s <- {expr}")
        return (np.array(ro.r("as.numeric(coef(tp_s))"), dtype=float),
                np.array(ro.r("as.numeric(SE(tp_s))"), dtype=float))


@pytest.fixture(scope="module")
def data():
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
        nw = r_to_pandas(ro.r("nwtco"))
        pbc = r_to_pandas(ro.r("pbc"))
        mu = r_to_pandas(ro.r("mu284.1"))
    nw["ri"] = nw["ri"].astype(str)
    nw["rsi"] = nw["rsi"].astype(str)
    nw["stage_f"] = nw["stage"].astype(int).astype(str)
    nw["histol_f"] = nw["histol"].astype(int).astype(str)
    return {"nwtco": nw, "pbc": pbc, "mu": mu}


@pytest.fixture(scope="module")
def designs(data):
    nw, pbc, mu = data["nwtco"], data["pbc"], data["mu"]
    out = {}
    for m, sfx in (("full", ""), ("approx", "a")):
        out["cch" + sfx] = twophase(nw, ids=["seqno", "seqno"], strata=[None, "rel"],
                                    subset="sub", method=m)
        out["pbc" + sfx] = twophase(pbc, ids=["id", "id"], subset="randomized", method=m)
        out["mu" + sfx] = twophase(mu, ids=["id1", "id"], strata=[None, "id1"],
                                   fpc=["n1", None], subset="sub", method=m)
    out["ccs2"] = twophase(nw, ids=["seqno", "seqno"], strata=[None, "ri"], subset="incc2")
    out["ccs8"] = twophase(nw, ids=["seqno", "seqno"], strata=[None, "rsi"], subset="incc2")
    return out


def _check(ours: pd.DataFrame, r_expr: str, what: str) -> None:
    est, se = _stat(r_expr)
    assert_rel(ours["estimate"], est, TOL, f"{what} estimate")
    assert_rel(ours["se"], se, TOL, f"{what} se")


@pytest.mark.parametrize("sfx", ["", "a"])
def test_case_cohort(designs, sfx):
    d = designs["cch" + sfx]
    _check(d.total("edrel"), f"svytotal(~edrel, tp_cch{sfx})", "total")
    _check(d.mean("edrel"), f"svymean(~edrel, tp_cch{sfx})", "mean")
    _check(d.mean("stage_f"), f"svymean(~factor(stage), tp_cch{sfx})", "factor mean")
    _check(d.ratio("edrel", "age"), f"svyratio(~edrel, ~age, tp_cch{sfx})", "ratio")


def test_full_and_approx_differ_and_phases(designs):
    """method= matters (the two variances differ by 16% here), and each phase part is R's."""
    full, appr = designs["cch"], designs["ccha"]
    assert abs(full.total("edrel")["se"].iloc[0] / appr.total("edrel")["se"].iloc[0] - 1) > 0.1
    y = full.data["edrel"].to_numpy(float) * full.weights
    for d, name in ((full, "tp_cch"), (appr, "tp_ccha")):
        _, v1, v2 = d.twophase_variance(y[:, None])
        r1 = _r(f"attr(attr(svytotal(~edrel, {name}), 'var'), 'phases')$phase1")
        r2 = _r(f"attr(attr(svytotal(~edrel, {name}), 'var'), 'phases')$phase2")
        assert_rel(v1, r1, TOL, f"{name} phase 1")
        assert_rel(v2, r2, TOL, f"{name} phase 2")


@pytest.mark.parametrize("sfx", ["", "a"])
def test_pbc_and_mu284(designs, sfx):
    _check(designs["pbc" + sfx].mean("bili"), f"svymean(~bili, tp_pbc{sfx})", "pbc")
    # phase 1: clusters with an fpc (D1 not the identity); phase 2 stratified within them
    _check(designs["mu" + sfx].total("y1"), f"svytotal(~y1, tp_mu{sfx})", "mu284 total")
    _check(designs["mu" + sfx].mean("y1"), f"svymean(~y1, tp_mu{sfx})", "mu284 mean")


def test_domains(designs):
    d = designs["cch"]
    ours = d.mean("edrel", by="instit")
    _check(ours, "svyby(~edrel, ~instit, tp_cch, svymean)", "by instit")
    sub = d.subset(d.data["stage"] > 2)
    _check(sub.total("edrel"), "svytotal(~edrel, subset(tp_cch, stage > 2))", "subset")


@pytest.mark.parametrize("name", ["ccs2", "ccs8"])
def test_svyglm_case_control(designs, name):
    """R's example: svyglm(rel ~ factor(stage)*factor(histol), quasibinomial) on dccs2, dccs8."""
    fit = svyglm("rel ~ stage_f*histol_f", designs[name], family="quasibinomial")
    ref = _r(f"summary(svyglm(rel~factor(stage)*factor(histol), design=tp_{name}, "
             "family=quasibinomial()))$coef[, 1:2]").reshape(-1, 2)
    assert_rel(fit.params.to_numpy(), ref[:, 0], TOL, f"{name} coef")
    assert_rel(fit.bse.to_numpy(), ref[:, 1], TOL, f"{name} se")


def test_calibrated_phase2(designs):
    """R: calibrate(dccs2, phase=2, formula=~interaction(rel,stage,instit)) (to the phase-1
    totals), then svytotal and the example's svyglm."""
    g = designs["ccs2"].calibrate("~rsi")
    _check(g.total("edrel"), "svytotal(~edrel, tp_gccs8)", "calibrated total")
    fit = svyglm("rel ~ stage_f*histol_f", g, family="quasibinomial")
    ref = _r("summary(svyglm(rel~factor(stage)*factor(histol), design=tp_gccs8, "
             "family=quasibinomial()))$coef[, 1:2]").reshape(-1, 2)
    assert_rel(fit.params.to_numpy(), ref[:, 0], TOL, "calibrated coef")
    assert_rel(fit.bse.to_numpy(), ref[:, 1], TOL, "calibrated se")
    # the calibrated phase-2 weights reproduce the phase-1 counts of each cell
    nw = designs["ccs2"].phase1_data
    cells = g.total("rsi")
    counts = nw["rsi"].value_counts()
    assert_rel(cells["estimate"], counts.reindex(cells["level"]).to_numpy(), 1e-9, "cells")


def test_errors(data):
    nw = data["nwtco"]
    with pytest.raises(ValueError, match="weights are not accepted"):
        twophase(nw, ids=["seqno", "seqno"], subset="sub", weights=[None, "rel"])
    with pytest.raises(ValueError, match="one sampling stage"):
        twophase(nw, ids=[["instit", "seqno"], "seqno"], subset="sub")
    with pytest.raises(ValueError, match="method="):
        twophase(nw, ids=["seqno", "seqno"], subset="sub", method="simple")
    bad = nw["sub"].astype(object).copy()
    bad.iloc[3] = None
    with pytest.raises(ValueError, match="missing values in subset"):
        twophase(nw, ids=["seqno", "seqno"], subset=bad.to_numpy())
    with pytest.raises(ValueError, match="approx"):
        twophase(nw, ids=["seqno", "seqno"], strata=[None, "rel"], subset="sub",
                 method="approx").calibrate("~rel")


def test_public_names_are_the_functions():
    """``ss.twophase`` etc. are the constructors even after their modules are imported (a
    module named like its function would shadow it on the package)."""
    import surveysynth as ss
    import surveysynth.multiframe_design  # noqa: F401
    import surveysynth.multiphase_design  # noqa: F401
    import surveysynth.twophase_design  # noqa: F401

    for name in ("twophase", "multiphase", "multiframe", "withPV", "MIcombine"):
        assert callable(getattr(ss, name)), name


@pytest.mark.parametrize("call", [lambda d: d.jackknife(), lambda d: d.bootstrap(10, seed=1),
                                  lambda d: d.post_stratify("rel", {0: 1, 1: 2}),
                                  lambda d: d.rake(["rel"], [{0: 1, 1: 2}]),
                                  lambda d: d.trim_weights(upper=10),
                                  lambda d: d.mean("edrel", engine="r")])
def test_one_phase_tools_refused(designs, call):
    """Replicates, one-phase weighting steps and other engines would ignore the phases."""
    with pytest.raises(ValueError, match="TwoPhaseDesign"):
        call(designs["cch"])
