"""svyglm with R's two-column binomial response ``cbind(successes, failures)`` against R's
svyglm, live through rpy2: the share of enrolled students tested (``api.stu`` of
``enroll``) in apiclus1 (cluster design), a calibrated design and a JK1 replicate design.

Replicate designs: R's ``svyglm.svyrep.design`` refits each replicate with the response as
proportions and weights that leave out the trials (``glm.fit(XX, YY, weights=wi/sum(wi))``),
so its replicates fit a differently weighted model; ours weight them by the trials, and are
checked against R's svyglm on the equivalent 0/1 data (one row of successes, one of failures,
frequencies in the weights), which is what R's Taylor fit equals too.
"""

from __future__ import annotations

import numpy as np
import pytest

import surveysynth as ss
from tests.conftest import assert_rel

FORMULA = "cbind(api.stu, notest) ~ ell + meals + stype"
R_DATA = "x <- transform(apiclus1, notest=pmax(enroll - api.stu, 0))"
R_FORMULA = "cbind(api.stu, notest) ~ ell + meals + stype"
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_POP = "c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)"


@pytest.fixture(scope="module")
def dclus1(api):
    x = api["apiclus1"].assign(notest=np.maximum(api["apiclus1"].enroll
                                                 - api["apiclus1"]["api.stu"], 0))
    return ss.SurveyDesign(x, ids="dnum", weights="pw", fpc="fpc")


def _r(R, design: str, formula: str = R_FORMULA) -> np.ndarray:
    return R(f"local({{ {R_DATA}; d <- svydesign(id=~dnum, weights=~pw, data=x, fpc=~fpc); "
             f"d <- {design}; m <- svyglm({formula}, design=d, family=quasibinomial()); "
             "c(coef(m), as.vector(vcov(m)), m$df.residual) })")


@pytest.mark.parametrize("case", ["cluster", "calibrated", "subset"])
def test_taylor_equals_r(R, dclus1, case):
    d, rd = {
        "cluster": (dclus1, "d"),
        "calibrated": (dclus1.calibrate("~stype+api99", POP),
                       f"calibrate(d, ~stype+api99, {R_POP})"),
        "subset": (dclus1.subset(dclus1.data["sch.wide"] == "Yes"),
                   "subset(d, sch.wide == 'Yes')"),
    }[case]
    m = ss.svyglm(FORMULA, d, family="quasibinomial")
    ref = _r(R, rd)
    k = m.params.shape[0]
    assert_rel(m.params, ref[:k], 1e-9, f"{case} coef")
    assert_rel(m.vcov().to_numpy().ravel(), ref[k:k + k * k], 1e-9, f"{case} vcov")
    assert m.df_resid == ref[-1]
    # binomial and quasibinomial give the same numbers (the design variance has no dispersion)
    b = ss.svyglm(FORMULA, d, family="binomial")
    assert_rel(b.params, m.params, 1e-12)


def test_replicate_design(R, dclus1):
    m = ss.svyglm(FORMULA, dclus1.jackknife("JK1"), family="quasibinomial")
    expanded = R(
        f"local({{ {R_DATA}; d <- svydesign(id=~dnum, weights=~pw, data=x, fpc=~fpc); "
        "rd <- as.svrepdesign(d, type='JK1'); rw <- weights(rd, 'analysis'); "
        "x2 <- rbind(transform(x, y=1), transform(x, y=0)); "
        "f <- c(x$api.stu, x$notest); "
        "e <- svrepdesign(data=x2, repweights=rbind(rw, rw) * f, weights=c(x$pw, x$pw) * f, "
        "type='JK1', scale=rd$scale, rscales=rd$rscales, combined.weights=TRUE, mse=rd$mse); "
        "m <- svyglm(y ~ ell + meals + stype, design=e, family=quasibinomial()); "
        "c(coef(m), as.vector(vcov(m))) })")
    k = m.params.shape[0]
    # glm.fit stops at its deviance tolerance from different starting values: 1e-7
    assert_rel(m.params, expanded[:k], 1e-7, "coef vs expanded data")
    assert_rel(m.vcov().to_numpy().ravel(), expanded[k:], 1e-5, "vcov vs expanded data")
    own = R(f"local({{ {R_DATA}; d <- svydesign(id=~dnum, weights=~pw, data=x, fpc=~fpc); "
            f"m <- svyglm({R_FORMULA}, design=as.svrepdesign(d, type='JK1'), "
            "family=quasibinomial()); c(coef(m), as.vector(vcov(m))) })")
    assert_rel(m.params, own[:k], 1e-9, "coef vs R's own")
    # R's replicates ignore the trials: its SEs differ
    rel = np.abs(np.sqrt(np.diag(m.vcov())) / np.sqrt(own[k:].reshape(k, k).diagonal()) - 1)
    assert rel.max() > 0.05


def test_bad_cbind(dclus1):
    with pytest.raises(ValueError, match="needs family='binomial'"):
        ss.svyglm(FORMULA, dclus1)
    with pytest.raises(ValueError, match="two arguments"):
        ss.svyglm("cbind(api.stu) ~ ell", dclus1, family="binomial")
    with pytest.raises(ValueError, match="non-negative"):
        ss.svyglm("cbind(api.stu, enroll - api.stu - 1000) ~ ell", dclus1, family="binomial")
