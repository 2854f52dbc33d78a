"""Propensity-score nonresponse adjustment and balance (issue 42): the response model against
R svyglm live, the adjusted weights against the same computation written out in R (svyglm,
fitted propensities, cut at quantiles, ratio adjustment per class; inverse propensities with
svyglm's replicate coefficients), the inverse-propensity linearization against numerical
derivatives of the whole chain, and the balance table on MAR nonresponse of apistrat."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.propensity import balance_table, propensity_adjust
from tests.conftest import assert_rel

RHS = "~ stype + meals + api99"


@pytest.fixture(scope="module")
def strat(api):
    """apistrat with missing-at-random response: P(respond) falls with meals and is lower in
    high schools (fixed draw, so R sees the same flags)."""
    a = api["apistrat"].copy()
    rng = np.random.default_rng(20261127)
    eta = 1.2 - 0.035 * (a["meals"] - 50) - 0.8 * (a["stype"] == "H") + 0.004 * (a["api99"] - 630)
    a["resp"] = (rng.random(a.shape[0]) < 1 / (1 + np.exp(-eta))).astype(int)
    return a


def _design(a):
    return ss.SurveyDesign(a, strata="stype", weights="pw", fpc="fpc")


def _r(a, code: str, cal: bool = False) -> np.ndarray:
    setup = ("suppressMessages(library(survey)); data(api); x <- apistrat; "
             f"x$resp <- c({','.join(map(str, a['resp']))}); "
             "d <- svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=x); "
             + ("d <- calibrate(d, ~api99, c(6194, 3914069)); " if cal else "") +
             f"m <- svyglm(resp {RHS}, d, family=quasibinomial()); p <- as.vector(fitted(m)); ")
    with r_session("survey") as (ro, _):
        return np.array(ro.r(f"local({{ {setup} {code} }})"), dtype=float)


def test_propensity_model_equals_r_svyglm(strat):
    d = propensity_adjust(_design(strat), "resp == 1", RHS)
    fit = d.propensity_model_
    ref = _r(strat, "c(coef(m), SE(m), p)")
    k = fit.params.size
    assert_rel(fit.params.to_numpy(), ref[:k], 1e-8)
    assert_rel(fit.bse.to_numpy(), ref[k:2 * k], 1e-8)
    assert_rel(d.full_data["ps_propensity"].to_numpy(), ref[2 * k:], 1e-8)
    assert not (strat.columns == "ps_propensity").any()  # caller's data untouched


R_CLASSES = ("cl <- cut(p, quantile(p, seq(0, 1, length = 6)), include.lowest = TRUE); "
             "adj <- function(w) ifelse(x$resp == 1, w * ave(w, cl, FUN = sum) / "
             "ave(w * x$resp, cl, FUN = sum), 0); ")


def test_class_weights_equal_r_by_hand(strat):
    """Five propensity quintile classes, ratio adjustment per class: full-sample weights and
    the JKn replicate weights (each replicate adjusted in the same fixed classes) 1e-10."""
    d = _design(strat)
    adj = propensity_adjust(d, "resp == 1", RHS)
    ref = _r(strat, R_CLASSES + "c(adj(weights(d)), as.integer(cl))")
    n = strat.shape[0]
    assert_rel(adj.full_weights, ref[:n], 1e-10)
    assert (adj.full_data["ps_class"].to_numpy() == ref[n:]).all()
    rd = d.jackknife()
    radj = propensity_adjust(rd, "resp == 1", RHS)
    rref = _r(strat, R_CLASSES + "rd <- as.svrepdesign(d, type = 'JKn'); "
              "W <- weights(rd, 'analysis'); c(W, apply(W, 2, adj))")
    m = rref.size // 2
    assert_rel(rd.replicate_weights("analysis").ravel(order="F"), rref[:m], 1e-12)
    assert_rel(radj.replicate_weights("analysis").ravel(order="F"), rref[m:], 1e-10,
               atol=1e-10)
    assert_rel(radj.full_weights, ref[:n], 1e-10)
    # weight moves within classes: each class keeps its base total
    cl = adj.full_data["ps_class"].to_numpy()
    assert_rel(np.bincount(cl, adj.full_weights), np.bincount(cl, d.full_weights), 1e-12)


def test_inverse_propensity_weights_equal_r_by_hand(strat):
    """classes=None: w / p for respondents; on JKn each replicate divides by the propensities
    of the model refitted with its weights (R svyglm return.replicates=TRUE)."""
    d = _design(strat)
    ipw = propensity_adjust(d, "resp == 1", RHS, classes=None)
    ref = _r(strat, "ifelse(x$resp == 1, weights(d) / p, 0)")
    assert_rel(ipw.full_weights, ref, 1e-10)
    rd = propensity_adjust(d.jackknife(), "resp == 1", RHS, classes=None)
    rref = _r(strat, "rd <- as.svrepdesign(d, type = 'JKn'); "
              f"mr <- svyglm(resp {RHS}, rd, family = quasibinomial(), "
              "return.replicates = TRUE); X <- model.matrix(mr); "
              "P <- plogis(X %*% t(mr$replicates)); W <- weights(rd, 'analysis'); "
              "as.vector(W / P * (x$resp == 1))")
    assert_rel(rd.replicate_weights("analysis").ravel(order="F"), rref, 1e-10, atol=1e-10)
    assert_rel(rd.full_weights, ref, 1e-10)
    # the mutant dividing every replicate by the full-sample propensities is far off
    fixed_p = d.jackknife().replicate_weights("analysis") / ipw.full_data[
        "ps_propensity"].to_numpy()[:, None] * (strat["resp"].to_numpy() == 1)[:, None]
    assert np.abs(fixed_p.ravel(order="F") - rref).max() > 1e-3


def test_replicate_se_equals_r_svrepdesign_on_adjusted_weights(strat):
    """The adjusted JKn designs carry the scale and rscales (fpc) of the base: the SE of the
    total of enroll equals R svrepdesign on the weights written out in R (1e-10)."""
    rd = _design(strat).jackknife()
    R_SE = ("rd <- as.svrepdesign(d, type = 'JKn'); W <- weights(rd, 'analysis'); "
            "se <- function(w, Wr) SE(svytotal(~enroll, svrepdesign(data = x, weights = w, "
            "repweights = Wr, type = 'JKn', scale = rd$scale, rscales = rd$rscales, "
            "combined.weights = TRUE))); ")
    ref = _r(strat, R_CLASSES + R_SE + "mr <- svyglm(resp " + RHS + ", rd, family = "
             "quasibinomial(), return.replicates = TRUE); "
             "P <- plogis(model.matrix(mr) %*% t(mr$replicates)); "
             "c(se(adj(weights(d)), apply(W, 2, adj)), "
             "se(ifelse(x$resp == 1, weights(d) / p, 0), W / P * (x$resp == 1)))")
    got = [propensity_adjust(rd, "resp == 1", RHS, classes=c).total("enroll")["se"].iloc[0]
           for c in (5, None)]
    assert_rel(got, ref, 1e-10)


def test_calibrated_design_weights_equal_r_by_hand(strat):
    """A design calibrated to the api99 total (R calibrate, linear) as the base: the response
    model uses its weights, classes and inverse propensities as above, 1e-10."""
    d = _design(strat).calibrate("~api99", {"(Intercept)": 6194, "api99": 3914069})
    n = strat.shape[0]
    ref = _r(strat, R_CLASSES + "c(weights(d), adj(weights(d)), "
             "ifelse(x$resp == 1, weights(d) / p, 0))", cal=True)
    assert_rel(d.full_weights, ref[:n], 1e-10)
    assert_rel(propensity_adjust(d, "resp == 1", RHS).full_weights, ref[n:2 * n], 1e-10)
    assert_rel(propensity_adjust(d, "resp == 1", RHS, classes=None).full_weights,
               ref[2 * n:], 1e-10)


def _logit_fit(X, y, w):
    b = np.zeros(X.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-X @ b))
        step = np.linalg.solve(X.T @ ((w * p * (1 - p))[:, None] * X), X.T @ (w * (y - p)))
        b = b + step
        if np.abs(step).max() < 1e-14:
            break
    return 1 / (1 + np.exp(-X @ b))


def test_inverse_propensity_linearization_equals_numerical_derivative(strat):
    """The linearized SE of the IPW-adjusted total of enroll equals the design SE of the
    numerical influence values w_i dT/dw_i of the whole chain (weighted logistic fit, then
    sum w r y / p), central differences: 1e-6. The mutant that treats the adjusted weights as
    fixed (no PropensityAdjustment) is more than 1% off."""
    d = _design(strat)
    ipw = propensity_adjust(d, "resp == 1", RHS, classes=None)
    got = ipw.total("enroll")["se"].iloc[0]
    X = ipw.propensity_model_.model_matrix
    r = strat["resp"].to_numpy()
    y = strat["enroll"].to_numpy(float)
    w = strat["pw"].to_numpy(float)

    def T(wv):
        return np.sum(wv * r * y / _logit_fit(X, r, wv))

    u = np.empty(w.size)
    for i in range(w.size):
        h = 1e-5 * w[i]
        wp, wm = w.copy(), w.copy()
        wp[i] += h
        wm[i] -= h
        u[i] = w[i] * (T(wp) - T(wm)) / (2 * h)
    want = _design(strat.assign(u=u / w)).total("u")["se"].iloc[0]
    assert_rel(got, want, 1e-6)
    fixed = _design(strat.assign(pw=ipw.full_weights)[r == 1]).total("enroll")["se"].iloc[0]
    assert abs(fixed / got - 1) > 1e-2


def test_balance_improves_under_mar_and_equals_r(strat):
    """Meta balance's ASMD (std_type='target'): full-sample means and SDs (R cov.wt,
    unbiased = reliability weights) 1e-10; respondents' means after adjustment equal the
    adjusted design's mean over respondents; MAR nonresponse makes respondents unbalanced
    and both adjustments bring the two unbalanced covariates' ASMD from above 0.1 to
    below 0.05 and halve the mean ASMD."""
    d = _design(strat)
    covs = ["meals", "api99", "stype"]
    for classes in (5, None):
        adj = propensity_adjust(d, "resp == 1", RHS, classes=classes)
        tab = balance_table(d, adj, covs)
        assert list(tab["level"]) == ["", "", "E", "H", "M"]
        assert tab["asmd_before"].max() > 0.1
        big = tab["asmd_before"] > 0.1                   # meals, api99: the MAR drivers
        assert big.sum() == 2 and (tab["asmd_after"][big] < 0.05).all(), tab
        assert tab["asmd_after"].max() < 0.5 * tab["asmd_before"].max()
        assert tab["asmd_after"].mean() < 0.5 * tab["asmd_before"].mean()
        resp = adj.subset(strat["resp"] == 1)
        assert_rel(tab["mean_after"].iloc[:2].to_numpy(),
                   resp.mean(["meals", "api99"])["estimate"].to_numpy(), 1e-12)
    ref = _r(strat, "M <- cbind(x$meals, x$api99, x$stype == 'E', x$stype == 'H', "
             "x$stype == 'M'); cw <- cov.wt(M, weights(d), method = 'unbiased'); "
             "r <- x$resp == 1; c(cw$center, sqrt(diag(cw$cov)), "
             "colSums(M[r, ] * weights(d)[r]) / sum(weights(d)[r]))")
    assert_rel(tab["mean_sample"].to_numpy(), ref[:5], 1e-10)
    assert_rel(tab["sd_sample"].to_numpy(), ref[5:10], 1e-10)
    assert_rel(tab["mean_before"].to_numpy(), ref[10:], 1e-10)


def test_balance_table_equals_meta_balance(strat):
    """ASMDs equal Meta balance 0.23.0's ``asmd(std_type="target")`` (fixture written by
    tests/reference/balance/make_asmd_reference.py) before and after both adjustments,
    1e-12; a balance_table on R's stype levels gives one row per level, as balance's
    one-hot columns."""
    ref = json.loads((Path(__file__).parent / "reference" / "balance" /
                      "asmd_apistrat.json").read_text())
    assert ref["resp"] == strat["resp"].tolist()
    d = _design(strat)
    keys = ["meals", "api99", "stype[E]", "stype[H]", "stype[M]"]
    for classes in (5, None):
        tab = balance_table(d, propensity_adjust(d, "resp == 1", RHS, classes=classes),
                            ["meals", "api99", "stype"])
        assert_rel(tab["asmd_before"].to_numpy(), [ref["before"][k] for k in keys], 1e-12)
        assert_rel(tab["asmd_after"].to_numpy(), [ref[f"after_{classes}"][k] for k in keys],
                   1e-12)


def test_bad_input(strat):
    d = _design(strat)
    with pytest.raises(ValueError, match="respond"):
        propensity_adjust(d, "nonexistent_col > 0", RHS)
    with pytest.raises(ValueError, match="all True"):
        propensity_adjust(d, np.ones(strat.shape[0], bool), RHS)
    with pytest.raises(ValueError, match="method"):
        propensity_adjust(d, "resp == 1", RHS, method="probit")
    with pytest.raises(ValueError, match="classes"):
        propensity_adjust(d, "resp == 1", RHS, classes=0)
    with pytest.raises(ValueError, match="not distinct"):
        propensity_adjust(d, "resp == 1", "~ sch.wide", classes=5)
    with pytest.raises(ValueError, match="covariate 'nope'"):
        balance_table(d, d, ["nope"])
    assert isinstance(balance_table(d, d, "meals"), pd.DataFrame)
