"""calibrate(trim=) and cluster-level calibration (aggregate_stage= / aggregate_index=) against
R survey 4.1.1 live, on R's own ?calibrate examples and on a two-stage design."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import surveysynth as ss
from tests.conftest import assert_rel

POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018}
POP3 = dict(POP, api99=3914069)
R_POP = "c(`(Intercept)`=6194, stypeH=755, stypeM=1018)"
R_POP3 = "c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)"
R_D = "dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)"


def _stats_r(R, design: str) -> np.ndarray:
    return R(f"local({{ {R_D}; rclus1 <- as.svrepdesign(dclus1); x <- {design}; "
             "m <- svymean(~api00+api99+enroll, x); t <- svytotal(~stype, x); "
             "b <- svyby(~api00, ~sch.wide, x, svymean); "
             "c(weights(x, 'sampling'), coef(m), SE(m), coef(t), SE(t), coef(b), SE(b)) })")


def _stats_py(x) -> np.ndarray:
    m = x.mean(["api00", "api99", "enroll"])
    t = x.total("stype")
    b = x.mean("api00", by="sch.wide")
    return np.r_[x.full_weights, m["estimate"], m["se"], t["estimate"], t["se"],
                 b["estimate"], b["se"]]


def _compare(got, exp, n, what):
    assert_rel(got[:n], exp[:n], 1e-12, f"{what} weights")
    # SEs of calibrated stype totals are ~1e-10 of the total (zero in exact arithmetic)
    assert_rel(got[n:], exp[n:], 1e-9, f"{what} estimates and SEs", atol=1e-6)


@pytest.fixture(scope="module")
def d(api):
    return ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")


def test_trim_man_example(R, d):
    """?calibrate: bounds=c(0.5,2), trim=c(2/3,3/2) on dclus1 and on its JK1 replicates."""
    exp = _stats_r(R, f"calibrate(dclus1, ~stype+api99, {R_POP3}, bounds=c(0.5,2), "
                      "trim=c(2/3,3/2))")
    tr = d.calibrate("~stype+api99", POP3, bounds=(0.5, 2), trim=(2 / 3, 3 / 2))
    _compare(_stats_py(tr), exp, 183, "dclus1tr")
    g = tr.full_weights / d.full_weights
    assert g.min() >= 2 / 3 - 1e-12 and np.isclose(g.min(), 2 / 3)  # some were trimmed
    untrimmed = d.calibrate("~stype+api99", POP3, bounds=(0.5, 2))
    assert not np.allclose(untrimmed.full_weights, tr.full_weights)
    exp = _stats_r(R, f"calibrate(rclus1, ~stype+api99, {R_POP3}, bounds=c(0.5,2), "
                      "trim=c(2/3,3/2))")
    rtr = d.jackknife().calibrate("~stype+api99", POP3, bounds=(0.5, 2), trim=(2 / 3, 3 / 2))
    _compare(_stats_py(rtr), exp, 183, "rclus1tr")


def test_trim_raking_and_replicate_weights(R, d):
    """Raking calibration trimmed; every replicate's weights equal R's."""
    code = (f"calibrate(rclus1, ~stype+api99, {R_POP3}, calfun='raking', "
            "trim=c(0.8, 1.25))")
    rw = R(f"local({{ {R_D}; rclus1 <- as.svrepdesign(dclus1); x <- {code}; "
           "as.vector(weights(x, 'analysis')) })")
    ours = d.jackknife().calibrate("~stype+api99", POP3, calfun="raking", trim=(0.8, 1.25))
    assert_rel(ours.replicate_weights("analysis").ravel(order="F"), rw, 1e-10)


def test_trim_ignored_for_unbounded_linear_as_r(R, d):
    exp = _stats_r(R, f"calibrate(dclus1, ~stype+api99, {R_POP3}, trim=c(0.9,1.1))")
    with pytest.warns(UserWarning, match="trim= is ignored"):
        x = d.calibrate("~stype+api99", POP3, trim=(0.9, 1.1))
    _compare(_stats_py(x), exp, 183, "linear trim ignored")
    with pytest.raises(ValueError, match="lower <= upper"):
        d.calibrate("~stype", POP, bounds=(0.5, 2), trim=(1.2, 0.8))


def test_aggregate_stage_man_example(R, d):
    """?calibrate: calibrate(dclus1, ~stype, pop.totals, aggregate=1): weights constant
    within districts; and a bounded (iterative) cluster-level calibration."""
    exp = _stats_r(R, f"calibrate(dclus1, ~stype, {R_POP}, aggregate.stage=1)")
    agg = d.calibrate("~stype", POP, aggregate_stage=1)
    _compare(_stats_py(agg), exp, 183, "dclus1agg")
    g = agg.full_weights / d.full_weights
    dn = d.data["dnum"].to_numpy()
    assert all(np.ptp(g[dn == k]) < 1e-12 for k in np.unique(dn))
    exp = _stats_r(R, f"calibrate(dclus1, ~stype, {R_POP}, aggregate.stage=1, "
                      "calfun='raking')")
    _compare(_stats_py(d.calibrate("~stype", POP, aggregate_stage=1, calfun="raking")),
             exp, 183, "aggregate raking")


def test_aggregate_stage_two_stage(R, api):
    """apiclus2 (fpc at both stages): school-district-level (stage 1) and stage-2 clusters."""
    d2 = ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2")
    pop = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018}
    for stage in (1, 2):
        exp = R("local({ d <- svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2); "
                f"x <- calibrate(d, ~stype, {R_POP}, aggregate.stage={stage}); "
                "m <- svymean(~api00, x); t <- svytotal(~enroll, x, na.rm=TRUE); "
                "c(weights(x), coef(m), SE(m), coef(t), SE(t)) })")
        # district-level g-weights go negative (-0.22) for three schools, as in R
        x = d2.calibrate("~stype", pop, aggregate_stage=stage, allow_nonpositive=True)
        m, t = x.mean("api00"), x.total("enroll", na_rm=True)
        got = np.r_[x.full_weights, m["estimate"], m["se"], t["estimate"], t["se"]]
        assert_rel(got, exp, 1e-10, f"stage {stage}")


def test_aggregate_index_replicate_man_example(R, d):
    """?calibrate: calibrate(rclus1, ~stype+api99, ..., aggregate.index=~dnum). Three schools
    of one district get g = -0.22 (R keeps them; here allow_nonpositive=True)."""
    exp = _stats_r(R, f"calibrate(rclus1, ~stype+api99, {R_POP3}, aggregate.index=~dnum)")
    x = d.jackknife().calibrate("~stype+api99", POP3, aggregate_index="dnum",
                                allow_nonpositive=True)
    _compare(_stats_py(x), exp, 183, "rclus1agg3")


def test_aggregate_errors_and_warning(api, d):
    with pytest.raises(ValueError, match="aggregate_index= is for replicate"):
        d.calibrate("~stype", POP, aggregate_index="dnum")
    with pytest.raises(ValueError, match="aggregate_stage= is for SurveyDesign"):
        d.jackknife().calibrate("~stype", POP, aggregate_stage=1)
    with pytest.raises(ValueError, match="1 to 1"):
        d.calibrate("~stype", POP, aggregate_stage=2)
    s = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw").jackknife()
    with pytest.warns(UserWarning, match="not constant within clusters"):
        s.calibrate("~stype", POP, aggregate_index="dnum", allow_nonpositive=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d.jackknife().calibrate("~stype", POP, aggregate_index="dnum")


def test_calibrate_after_nonresponse_zero_weights(api, d):
    """Nonrespondents carry weight 0 after redistribute_weights: calibration keeps them at 0
    (R: prob = Inf), does not call them non-positive, and the linearization SE is finite (the
    GREG residual of a zero-weight row is 0, not 0/0)."""
    resp = (np.arange(183) % 4 != 0)
    nr = d.redistribute_weights(~resp, resp, by="stype")
    cal = nr.calibrate("~stype+api99", POP3, calfun="raking", trim=(0.8, 1.25))
    assert (cal.full_weights[~resp] == 0).all()
    assert np.isclose(cal.full_weights.sum(), 6194, rtol=1e-3)
    se = cal.subset(resp).mean("api00")["se"].iloc[0]
    assert np.isfinite(se) and se > 0
    with pytest.raises(ss.calibration.CalibrationError, match="widen trim"):
        d.calibrate("~stype+api99", POP3, bounds=(0.5, 2), trim=(1.0, 1.0))
