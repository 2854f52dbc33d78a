"""multiphase (two phases) against R survey 4.5's ?multiphase example, stored in
tests/reference/r_survey45/multiphase.{R,json} (survey 4.1.1 has no multiphase; the data,
survival's nwtco, are read live from R): svymean/svytotal with both phase parts, svyglm,
degf, and the example's phase-2 raking calibration (vcov of the stage totals, totals, means,
svyglm), to 1e-8 relative. Also: equal to twophase(method="full") on the same design, as R's
own tests/multiphase_simple.R checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.analysis import svyglm
from surveysynth.multiphase_design import multiphase
from surveysynth.twophase_design import twophase
from tests.conftest import assert_rel

TOL = 1e-8
REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "multiphase.json")
                 .read_text())["results"]


@pytest.fixture(scope="module")
def nwtco():
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(survival)); data(nwtco)")
        nw = r_to_pandas(ro.r("nwtco"))
    nw["sub"] = nw["in.subcohort"].astype(bool) | (nw["rel"] == 1)
    nw["stage_f"] = nw["stage"].astype(int).astype(str)
    return nw


@pytest.fixture(scope="module")
def mcchs(nwtco):
    return multiphase(nwtco, ids=["seqno", "seqno"], strata=[None, "rel"], subset=["sub"],
                      probs=["~1", None])


def _check(ours, ref, what, d=None, col=None):
    assert_rel(ours["estimate"], ref["estimate"], TOL, f"{what} estimate")
    assert_rel(ours["se"], ref["se"], TOL, f"{what} se")
    if d is not None:
        y = d.data[col].to_numpy(float)[:, None] * d.weights[:, None]
        v1, v2 = d.phase_variances(y)
        assert_rel(v1, ref["phase1"], TOL, f"{what} phase 1")
        assert_rel(v2, ref["phase2"], TOL, f"{what} phase 2")


def test_r_example(mcchs):
    _check(mcchs.mean("edrel"), REF["mean_edrel"], "mean")
    _check(mcchs.total("edrel"), REF["total_edrel"], "total", mcchs, "edrel")
    # the stratification variable has no phase-2 variance
    _check(mcchs.total("rel"), REF["total_rel"], "total rel", mcchs, "rel")
    _check(mcchs.mean(["edrel", "age"]), REF["mean_edrel_age"], "two means")
    assert mcchs.degf == REF["degf"]
    fit = svyglm("edrel ~ rel + histol + stage", mcchs)
    assert_rel(fit.params.to_numpy(), REF["glm"]["coef"], TOL, "glm coef")
    assert_rel(fit.bse.to_numpy(), REF["glm"]["se"], TOL, "glm se")
    assert fit.df_resid == REF["glm"]["df"]


def test_equals_twophase_full(mcchs, nwtco):
    """R's tests/multiphase_simple.R: the same numbers as twophase(method='full')."""
    tp = twophase(nwtco, ids=["seqno", "seqno"], strata=[None, "rel"], subset="sub")
    for v in ("edrel", "age"):
        assert_rel(mcchs.total(v)["se"], tp.total(v)["se"], 1e-10, v)


def test_raking_calibration_phase2(mcchs):
    """R: m <- calibrate(mcchs, ~factor(stage)+rel, phase=2, calfun='raking')."""
    m = mcchs.calibrate("~stage_f+rel", calfun="raking")
    st = m.total("stage_f")
    assert_rel(st["estimate"], REF["cal_total_stage"]["estimate"], TOL, "stage totals")
    from surveysynth.analysis.covariance import total_covariance

    Y = np.column_stack([(m.full_data["stage_f"] == s).to_numpy(float) for s in "1234"])
    V = total_covariance(m, Y, np.zeros(m.n, np.int64))
    Vr = np.array(REF["cal_total_stage"]["vcov"]).reshape(4, 4)
    assert_rel(np.diag(V), np.diag(Vr), TOL, "stage totals vcov")
    assert np.abs(V - np.diag(np.diag(V))).max() < 1e-6 * np.abs(V).max()
    # calibrated to the phase-1 counts: only phase 1 varies (R's own test: phase 2 ~ 0)
    _, v2 = m.phase_variances(Y * m.weights[:, None])
    assert np.abs(v2).max() < 1e-6
    _check(m.total("edrel"), REF["cal_total_edrel"], "calibrated total", m, "edrel")
    _check(m.mean("edrel"), REF["cal_mean_edrel"], "calibrated mean")
    fit = svyglm("edrel ~ rel + histol + stage", m)
    assert_rel(fit.params.to_numpy(), REF["cal_glm"]["coef"], TOL, "cal glm coef")
    assert_rel(fit.bse.to_numpy(), REF["cal_glm"]["se"], TOL, "cal glm se")


def test_errors(nwtco):
    with pytest.raises(ValueError, match="two phases"):
        multiphase(nwtco, ids=["seqno", "seqno", "seqno"], subset=["sub", "sub"])
    with pytest.raises(ValueError, match="one sampling stage"):
        multiphase(nwtco, ids=[["instit", "seqno"], "seqno"], subset=["sub"])
    d = multiphase(nwtco, ids=["seqno", "seqno"], strata=[None, "rel"], subset=["sub"])
    with pytest.raises(ValueError, match="only phase 2"):
        d.calibrate("~rel", phase=1)
