"""svyolr against R survey's svyolr, live through rpy2 (R 4.1.1 and 4.5 fit the same model:
olr.R changed only for rank-deficient and raked subsets): ?svyolr's example (apiclus1,
mealcat ~ avg.ed + mobility + stype) on the cluster design, a subset, a calibrated design
and its JK1 replicate design, with every link.

R's optimizer stops at its tolerance: R is run with ``control=list(reltol=1e-15)`` (passed
on to ``optim`` / ``MASS::polr``), where it locates the optimum to about 1e-8 (svyolr's own
optim) or 3e-7 (``MASS::polr``, used for replicate designs); we solve the score equations
exactly, so coefficients are compared to 1e-7 (replicates: 1e-6) and covariances to 3e-7
(replicates: 3e-5, the replicate fits' errors entering the differences).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.analysis import svyolr
from tests.conftest import assert_rel

TIGHT = "control=list(reltol=1e-15, maxit=10000)"
R_SETUP = ("dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc); "
           "dclus1 <- update(dclus1, mealcat=cut(meals, c(0, 25, 50, 75, 100))); "
           "pop <- c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069); "
           "cal <- calibrate(dclus1, ~stype+api99, pop); "
           "f <- mealcat ~ avg.ed + mobility + stype")
FORMULA = "mealcat ~ avg.ed + mobility + stype"
R_CAL0 = ("d0 <- svydesign(id=~dnum, weights=~pw, fpc=~fpc, "
          "data=subset(apiclus1, meals > 0 & !is.na(avg.ed))); "
          "d0 <- update(d0, mealcat=cut(meals, c(0, 25, 50, 75, 100))); "
          "cal0 <- calibrate(d0, ~stype+api99, pop)")
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}


@pytest.fixture(scope="module")
def dclus1(api):
    x = api["apiclus1"].copy()
    x["mealcat"] = pd.cut(x.meals, [0, 25, 50, 75, 100],
                          labels=["(0,25]", "(25,50]", "(50,75]", "(75,100]"])
    return ss.SurveyDesign(x, ids="dnum", weights="pw", fpc="fpc")


def _r(R, design: str, extra: str = "", pre: str = "") -> tuple[np.ndarray, np.ndarray, float,
                                                               float]:
    out = R(f"local({{ {R_SETUP}; {pre}; m <- svyolr(f, design={design}{extra}); "
            "c(coef(m), as.vector(vcov(m)), m$deviance, m$df.residual) })")
    k = int(round((-1 + np.sqrt(1 + 4 * (out.shape[0] - 2))) / 2))
    return out[:k], out[k:k + k * k], float(out[-2]), float(out[-1])


def _check(m, ref, what: str) -> None:
    coef, vc, dev, dfr = ref
    assert_rel(m.params, coef, 1e-7, f"{what} coefficients")
    # relative to each entry, and to the largest for entries near 0 (an off-diagonal 5e-4
    # beside variances of 15)
    assert_rel(m.vcov().to_numpy().ravel(), vc, 3e-7, f"{what} vcov",
               atol=1e-8 * np.abs(vc).max())
    assert m.deviance == pytest.approx(dev, rel=1e-10)
    assert m.df_resid == dfr


@pytest.mark.parametrize("ours,theirs", [("logistic", "logistic"), ("probit", "probit"),
                                         ("loglog", "cloglog")])
def test_man_page_example(R, dclus1, ours, theirs):
    """?svyolr: the cut points are named as R's (levels "a|b"); R's Taylor "cloglog" is
    exp(-exp(-x)), our "loglog"."""
    m = svyolr(FORMULA, dclus1, method=ours, na_rm=True)
    assert list(m.zeta.index) == ["(0,25]|(25,50]", "(25,50]|(50,75]", "(50,75]|(75,100]"]
    _check(m, _r(R, "dclus1", f", method='{theirs}', {TIGHT}"), ours)
    if ours == "logistic":  # R's default tolerance: the same optimum to about 1e-5
        coef = _r(R, "dclus1")[0]
        assert_rel(m.params, coef, 1e-4, "R default tolerance")
        assert not np.allclose(m.params, coef, rtol=1e-9, atol=0)


def test_cauchit_reaches_a_higher_likelihood_than_r(R, dclus1):
    """The Cauchy link's likelihood is flat in the tails: R's BFGS stops 0.19 log-likelihood
    units short of the optimum even with reltol=1e-15 (coefficients 1.5% away); ours is the
    optimum (score 0), so its deviance is lower."""
    m = svyolr(FORMULA, dclus1, method="cauchit", na_rm=True)
    coef, _, dev, _ = _r(R, "dclus1", f", method='cauchit', {TIGHT}")
    assert m.deviance < dev - 1e-3
    assert_rel(m.params, coef, 0.05, "cauchit near R's")


def test_exact_hessian_differs_by_the_finite_difference_error(R, dclus1):
    m = svyolr(FORMULA, dclus1, na_rm=True)
    e = svyolr(FORMULA, dclus1, na_rm=True, hessian="exact")
    assert_rel(e.params, m.params, 1e-14)
    rel = np.abs(e.vcov().to_numpy() / m.vcov().to_numpy() - 1)
    assert 1e-9 < rel.max() < 1e-2


def test_subset_and_calibrated(R, dclus1):
    # R's svyolr fails on a subset with missing values (its start glm sees NA): none here
    x = dclus1.data
    sub = dclus1.subset((x["meals"] > 0) & x["avg.ed"].notna() & (x["sch.wide"] == "Yes"))
    _check(svyolr(FORMULA, sub),
           _r(R, "s", f", {TIGHT}", "s <- subset(dclus1, meals > 0 & !is.na(avg.ed) & "
                                    "sch.wide == 'Yes')"), "subset")
    # R's svyolr fails on a calibrated design with missing values in the model (it keeps
    # those rows at weight 0 and its start glm sees their NA): calibrate the complete rows
    ok = (x["meals"] > 0) & x["avg.ed"].notna()
    cal = ss.SurveyDesign(x[ok], ids="dnum", weights="pw", fpc="fpc").calibrate(
        "~stype+api99", POP)
    _check(svyolr(FORMULA, cal), _r(R, "cal0", f", {TIGHT}", R_CAL0), "calibrated")


R_REP = ("environment(f) <- environment(); df <- model.frame(rd); "
         "pwt <- weights(rd, 'sampling'); "
         "full <- MASS::polr(f, data=df, weights=pwt, {tight}); "
         "start <- c(full$coefficients, full$zeta); rw <- weights(rd, 'analysis'); "
         "betas <- apply(rw, 2, function(w) {{ environment(f) <- environment(); "
         "m <- MASS::polr(f, data=df, weights=w, "
         "start=start, {tight}); c(m$coefficients, m$zeta) }}); "
         "c(start, as.vector(svrVar(t(betas), rd$scale, rd$rscales, mse=rd$mse, coef=start)))")


@pytest.mark.parametrize("method", ["logistic", "cloglog"])
def test_replicate_design(R, dclus1, method):
    """JK1 of the cluster design and of the calibrated design: R's svyolr.svyrep.design
    (MASS::polr per replicate from the full fit; its loop run with a tight tolerance, as
    svyolr does not pass control= to the replicate fits), and R's own call to 1e-4."""
    for name, ours, r_design in (
            ("jk1", dclus1.jackknife("JK1"), "as.svrepdesign(dclus1, type='JK1')"),
            ("jk1 calibrated", dclus1.jackknife("JK1").calibrate("~stype+api99", POP),
             "calibrate(as.svrepdesign(dclus1, type='JK1'), ~stype+api99, pop)")):
        m = svyolr(FORMULA, ours, method=method, na_rm=True)
        tight = f"method='{method}', {TIGHT}"
        out = R(f"local({{ {R_SETUP}; rd <- {r_design}; "
                f"suppressWarnings({{ {R_REP.format(tight=tight)} }}) }})")
        k = m.params.shape[0]
        # MASS::polr's BFGS locates the optimum less closely than svyolr's own (3e-7 here)
        assert_rel(m.params, out[:k], 1e-6, f"{name} coefficients")
        assert_rel(m.vcov().to_numpy().ravel(), out[k:], 3e-5, f"{name} vcov")
        if method == "logistic":
            own = R(f"local({{ {R_SETUP}; m <- suppressWarnings(svyolr(f, {r_design})); "
                    "as.vector(vcov(m)) })")
            assert_rel(m.vcov().to_numpy().ravel(), own, 1e-2, f"{name} R default")


def test_bad_input(dclus1):
    with pytest.raises(ValueError, match="missing"):
        svyolr(FORMULA, dclus1)  # meals == 0 gives a missing mealcat, as R's cut
    with pytest.raises(ValueError, match="3 or more"):
        svyolr("sch.wide ~ avg.ed", dclus1, na_rm=True)
    with pytest.raises(ValueError, match="method='logit'"):
        svyolr(FORMULA, dclus1, method="logit", na_rm=True)
    with pytest.raises(ValueError, match="not a column"):
        svyolr("nope ~ avg.ed", dclus1)
    sub = dclus1.subset(dclus1.data["meals"] < 50)
    with pytest.raises(ValueError, match="no rows in the fit"):
        svyolr(FORMULA, sub, na_rm=True)
