"""Separate and combined ratio estimators (R svyratio(separate=TRUE), predict(total=)) against
R survey 4.1.1 live: R's ?svyratio example, a calibrated design, a replicate design."""

from __future__ import annotations

import numpy as np
import pytest

import surveysynth as ss
from surveysynth.ratio_estimators import predict_ratio, svyratio_separate
from tests.conftest import assert_rel

TOTALS = {"E": 1877350, "H": 1013824, "M": 920298}
R_D = "dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)"


@pytest.fixture(scope="module")
def d(api):
    return ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")


def test_man_example(R, d):
    """?svyratio: sep <- svyratio(~api.stu, ~enroll, dstrat, separate=TRUE); com <- ...;
    predict(sep, total=stratum.totals); predict(com, total=sum(...))."""
    exp = R(f"local({{ {R_D}; sep <- svyratio(~api.stu, ~enroll, dstrat, separate=TRUE); "
            "com <- svyratio(~api.stu, ~enroll, dstrat); "
            "st <- list(E=1877350, H=1013824, M=920298); ps <- predict(sep, total=st); "
            "pc <- predict(com, total=sum(unlist(st))); "
            "c(sapply(sep$ratios, coef), sapply(sep$ratios, SE), ps$total, ps$se, "
            "pc$total, pc$se) })")
    sep = svyratio_separate(d, "api.stu", "enroll")
    assert list(sep["stype"]) == ["E", "H", "M"]
    ps = predict_ratio(d, "api.stu", "enroll", TOTALS, separate=True)
    pc = predict_ratio(d, "api.stu", "enroll", sum(TOTALS.values()))
    got = np.r_[sep["estimate"], sep["se"], ps["estimate"], ps["se"], pc["estimate"],
                pc["se"]]
    assert_rel(got, exp, 1e-10)
    # totals in the sorted strata order, and reordered names, give the same
    ps2 = predict_ratio(d, "api.stu", "enroll", [1877350, 1013824, 920298], separate=True)
    ps3 = predict_ratio(d, "api.stu", "enroll", {"M": 920298, "E": 1877350, "H": 1013824},
                        separate=True)
    assert_rel(np.r_[ps2["estimate"], ps3["estimate"]], [exp[6], exp[6]], 1e-12)


def test_several_variables_and_calibrated(R, d):
    """Two numerators, and a calibrated (raked on sch.wide) design: its separate ratios use
    the calibrated design's domains, as R's subset of a calibrated design."""
    exp = R(f"local({{ {R_D}; x <- rake(dstrat, list(~sch.wide), "
            "list(data.frame(sch.wide=c('No','Yes'), Freq=c(1072,5122)))); "
            "sep <- svyratio(~api.stu+api00, ~enroll, x, separate=TRUE); "
            "st <- list(E=1877350, H=1013824, M=920298); ps <- predict(sep, total=st); "
            "c(as.vector(ps$total), as.vector(ps$se)) })")
    import pandas as pd

    x = d.rake(["sch.wide"], [pd.DataFrame({"sch.wide": ["No", "Yes"], "Freq": [1072, 5122]})])
    ps = predict_ratio(x, ["api.stu", "api00"], "enroll", TOTALS, separate=True)
    assert_rel(np.r_[ps["estimate"], ps["se"]], exp, 1e-9)


def test_replicate_combined(R, d):
    exp = R(f"local({{ {R_D}; r <- as.svrepdesign(dstrat); "
            "pc <- predict(svyratio(~api.stu, ~enroll, r), total=3811472); c(pc$total, pc$se) })")
    pc = predict_ratio(d.jackknife(), "api.stu", "enroll", 3811472)
    assert_rel(np.r_[pc["estimate"], pc["se"]], exp, 1e-10)
    with pytest.raises(ValueError, match="stratified SurveyDesign"):
        predict_ratio(d.jackknife(), "api.stu", "enroll", TOTALS, separate=True)


def test_errors(d):
    with pytest.raises(ValueError, match="2 stratum totals for 3"):
        predict_ratio(d, "api.stu", "enroll", [1, 2], separate=True)
    with pytest.raises(ValueError, match="differ from the strata"):
        predict_ratio(d, "api.stu", "enroll", {"E": 1, "H": 2, "X": 3}, separate=True)
    with pytest.raises(ValueError, match="one number"):
        predict_ratio(d, "api.stu", "enroll", [1, 2])


def test_results_are_estimates(R, d):
    """Both return the package's Estimate (issue 38): the predicted totals' normal intervals at
    ``level`` (R: total -+ qnorm * se) and, at another level, ``conf_int(level=)``; the
    separate ratios' intervals are R's confint of each stratum's ratio. Mutants killed: the
    level ignored (always 0.95), the separate interval summed from the strata's limits
    (sum R_h X_h -+ z sum SE_h X_h, wider than -+ z sqrt(sum SE_h^2 X_h^2))."""
    exp = R(f"local({{ {R_D}; sep <- svyratio(~api.stu, ~enroll, dstrat, separate=TRUE); "
            "st <- list(E=1877350, H=1013824, M=920298); ps <- predict(sep, total=st); "
            "c(ps$total + c(-1, 1) * qnorm(0.95) * ps$se, "
            "ps$total + c(-1, 1) * qnorm(0.975) * ps$se, "
            "sapply(sep$ratios, function(r) confint(r, level=0.8))) })")
    ps = predict_ratio(d, "api.stu", "enroll", TOTALS, separate=True, level=0.9)
    assert isinstance(ps, ss.Estimate) and ps.conf_level == 0.9
    assert_rel(np.r_[ps["ci_low"], ps["ci_high"]], exp[0:2], 1e-10)
    assert_rel(ps.conf_int(level=0.95).to_numpy().ravel(), exp[2:4], 1e-10)
    pc = predict_ratio(d, "api.stu", "enroll", 3811472)
    assert isinstance(pc, ss.Estimate) and pc.conf_level == 0.95
    assert_rel(np.r_[pc["ci_low"], pc["ci_high"]],
               pc["estimate"].to_numpy() + np.r_[-1, 1] * 1.959963984540054 * pc["se"].to_numpy(),
               1e-12)
    sep = svyratio_separate(d, "api.stu", "enroll")
    assert isinstance(sep, ss.Estimate)
    assert sep.names == ["E:api.stu/enroll", "H:api.stu/enroll", "M:api.stu/enroll"]
    # R: confint(ratio, level=0.8) is (lower, upper) per stratum
    assert_rel(sep.conf_int(level=0.8).to_numpy().ravel(), exp[4:10], 1e-9)
