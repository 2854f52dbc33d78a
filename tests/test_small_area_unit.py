"""Unit-level small-area estimation (``battese_harter_fuller``/``eblupBHF``, ``svysmoothUnit``).

R survey 4.5's ``svysmoothUnit`` fits the model by INLA (SUMMER), which cannot be built here.
References, stored by tests/reference/sae/bhf.R in bhf.json: (a) R sae 1.3's ``eblupBHF`` on
its own man-page examples (cornsoybean), fitted by ``lme4::lmer`` whose optimizer stops at
xtol_abs = 1e-8 on theta = sigma_v / sigma_e; (b) the model written out in R by hand (REML/ML
profile likelihood maximised in the variance ratio, the score's root polished by ``uniroot``;
GLS, EBLUP with and without fpc, Prasad-Rao-Datta MSE; You-Rao pseudo-EBLUP) on cornsoybean, a
boundary case (sigma_v^2 = 0) and svysmoothUnit's inputs on api designs (stratified, JKn,
calibrated).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.analysis.small_area_unit import battese_harter_fuller, eblupBHF, svysmoothUnit
from tests.conftest import assert_rel

TOL = 1e-8
REF = json.loads((Path(__file__).parent / "reference" / "sae" / "bhf.json").read_text())
CS = REF["cornsoybean"]
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
# lmer's optimizer (nloptwrap BOBYQA) stops at xtol_abs = 1e-8 on theta = sigma_v / sigma_e: a
# step-size criterion, so theta itself is within a few steps (measured: 2e-10 corn REML,
# 1.6e-8 soybeans ML, 2.4e-8 soybeans REML); we allow ten steps.
THETA_TOL = 1e-7


def _corn():
    sample = pd.DataFrame({k: CS[k] for k in ("County", "CornHec", "SoyBeansHec", "CornPix",
                                              "SoyBeansPix")})
    xmean = pd.DataFrame({k: CS[k] for k in ("CountyIndex", "MeanCornPixPerSeg",
                                             "MeanSoyBeansPixPerSeg")})
    popn = pd.DataFrame({k: CS[k] for k in ("CountyIndex", "PopnSegments")})
    return sample, xmean, popn


def _pop_means(xmean):
    return xmean.rename(columns={"CountyIndex": "County", "MeanCornPixPerSeg": "CornPix",
                                 "MeanSoyBeansPixPerSeg": "SoyBeansPix"})


EXAMPLES = {  # sae's man-page calls: (response, method, selectdom)
    "corn_REML": ("CornHec", "REML", None),
    "soy_ML": ("SoyBeansHec", "ML", [10, 1, 5]),
    "soy_REML": ("SoyBeansHec", "REML", None),
}


@pytest.mark.parametrize("key", list(EXAMPLES))
def test_sae_examples_eblup_at_sae_variance_components(key):
    """Given the variance components sae (lmer) reports, the EBLUPs and predicted domain effects
    are sae's to 1e-8 (observed ~1e-14)."""
    y, method, sel = EXAMPLES[key]
    s = REF["sae"][key]
    sample, xmean, popn = _corn()
    sizes = dict(zip(CS["CountyIndex"], CS["PopnSegments"], strict=True))
    fit = battese_harter_fuller(f"{y} ~ CornPix + SoyBeansPix", sample, "County",
                                _pop_means(xmean), pop_sizes=sizes,
                                method=method, sigma2=(s["refvar"], s["errorvar"]),
                                domains=sel)
    assert list(fit.estimates["domain"]) == s["domain"]
    assert list(fit.estimates["n"]) == s["sampsize"]
    assert_rel(fit.eblup, s["eblup"], TOL, "eblup at sae's sigma2")
    assert_rel(fit.random, s["random"], TOL, "v_d at sae's sigma2")
    assert_rel(fit.coef["beta"], s["fixed"], 1e-10, "beta at sae's sigma2")


@pytest.mark.parametrize("key", list(EXAMPLES))
def test_sae_examples_fitted(key):
    """Fitted: the variance components equal sae's to lmer's tolerance (theta within 1e-7), the
    log-likelihood is at least lmer's (ours is the maximum), the EBLUPs are sae's to 1e-8."""
    y, method, sel = EXAMPLES[key]
    s = REF["sae"][key]
    sample, xmean, popn = _corn()
    fit = eblupBHF(f"{y} ~ CornPix + SoyBeansPix", "County", xmean, popn, method=method,
                   data=sample, selectdom=sel)
    theta = np.sqrt(fit.refvar / fit.errorvar)
    assert abs(theta - np.sqrt(s["refvar"] / s["errorvar"])) < THETA_TOL
    assert_rel(fit.refvar, s["refvar"], 1e-7, "sigma_v^2 vs lmer")
    assert_rel(fit.errorvar, s["errorvar"], 1e-7, "sigma_e^2 vs lmer")
    assert fit.loglike >= s["loglike"] - 1e-12
    assert_rel(fit.loglike, s["loglike"], 1e-12, "loglike")
    assert_rel(fit.eblup, s["eblup"], TOL, "eblup vs sae")


HAND = {  # hand-written reference: (response, method, target domains)
    "corn_REML": ("CornHec", "REML", None),
    "corn_ML": ("CornHec", "ML", None),
    "soy_REML": ("SoyBeansHec", "REML", None),
    "soy_ML": ("SoyBeansHec", "ML", [10, 1, 5]),
}


@pytest.mark.parametrize("key", list(HAND))
def test_equals_hand_reference(key):
    """Variance components, beta and SEs, log-likelihood, EBLUPs with fpc (sae's target) and of
    mu_d, and their Prasad-Rao-Datta MSEs equal the R reference written out by hand to 1e-8."""
    y, method, sel = HAND[key]
    h = REF["hand"][key]
    sample, xmean, popn = _corn()
    formula = f"{y} ~ CornPix + SoyBeansPix"
    fit = eblupBHF(formula, "County", xmean, popn, method=method, data=sample,
                   selectdom=sel if sel else CS["CountyIndex"])
    assert_rel(fit.ratio, h["lambda"], TOL, "lambda")
    assert_rel(fit.refvar, h["refvar"], TOL, "sigma_v^2")
    assert_rel(fit.errorvar, h["errorvar"], TOL, "sigma_e^2")
    assert_rel(fit.coef["beta"], h["beta"], TOL, "beta")
    assert_rel(fit.coef["std_error"], h["std_error"], TOL, "se(beta)")
    assert_rel(fit.loglike, h["loglike"], TOL, "loglike")
    assert_rel(fit.eblup, h["eblup"], TOL, "eblup (fpc)")
    assert_rel(fit.mse, h["mse"], TOL, "mse (fpc)")
    assert_rel(fit.estimates["g2"], h["g2"], TOL, "g2 (fpc)")
    mu = battese_harter_fuller(formula, sample, "County", _pop_means(xmean), method=method,
                               domains=sel)
    assert_rel(mu.eblup, h["mu"], TOL, "eblup of mu_d")
    assert_rel(mu.mse, h["mse_mu"], TOL, "mse of mu_d")
    k = [CS["CountyIndex"].index(d) for d in (sel or CS["CountyIndex"])]
    assert_rel(mu.estimates["g1"], np.asarray(h["g1"])[k], TOL, "g1")
    assert_rel(mu.estimates["g3"], np.asarray(h["g3"])[k], TOL, "g3")
    # the fpc matters here (n_d / N_d up to 1.5%): the two targets differ beyond 1e-8
    assert np.max(np.abs(np.asarray(h["eblup"]) / np.asarray(h["mu"]) - 1)) > 1e-6


def test_prasad_rao_terms_and_mutants():
    """REML: mse = g1 + g2 + 2 g3 exactly (mutant g3 counted once is off by > 1e-3 relative);
    ML: Datta-Lahiri's bias term is subtracted (mutant without it is off beyond 1e-8); a fit
    that stops short as lmer does (sae's theta) leaves a score far from 0."""
    sample, xmean, _ = _corn()
    pm = _pop_means(xmean)
    reml = battese_harter_fuller("CornHec ~ CornPix + SoyBeansPix", sample, "County", pm)
    e = reml.estimates
    assert_rel(e["mse"], e["g1"] + e["g2"] + 2 * e["g3"], 1e-14, "g1+g2+2g3")
    mutant = e["g1"] + e["g2"] + e["g3"]
    assert np.min(np.abs(mutant / np.asarray(REF["hand"]["corn_REML"]["mse_mu"]) - 1)) > 1e-3
    ml = battese_harter_fuller("CornHec ~ CornPix + SoyBeansPix", sample, "County", pm,
                               method="ML")
    m = ml.estimates
    no_bias = m["g1"] + m["g2"] + 2 * m["g3"]
    assert np.min(np.abs(no_bias / np.asarray(REF["hand"]["corn_ML"]["mse_mu"]) - 1)) > 1e-6
    assert ml.refvar < reml.refvar  # ML's downward bias, a sanity check
    # the polished optimum: R's optimize(tol=1e-12) alone was 1.2e-7 off in lambda
    h = REF["hand"]["corn_REML"]
    assert abs(h["opt_lambda"] / h["lambda"] - 1) > 1e-8
    assert_rel(reml.ratio, h["lambda"], 1e-12, "lambda at the score's root")


def test_boundary_sigma_v_zero_and_unsampled_domain():
    """No domain effect: REML's maximum is on the boundary, sigma_v^2 = 0 exactly (R: the
    score at 0 is negative); every EBLUP is then x'beta (GLS = OLS), and domain 'e' without
    sample gets the synthetic estimate with MSE sigma_v^2 + x'Var(beta)x."""
    b = REF["boundary"]
    assert b["refvar"] == 0 and b["score0"] < 0
    data = pd.DataFrame({"x": b["x"], "d": b["dom"], "y": b["y"]})
    pm = pd.DataFrame({"d": ["a", "b", "c", "e"], "x": [2.0, 3.0, 4.0, 3.5]})
    fit = battese_harter_fuller("y ~ x", data, "d", pm)
    assert fit.refvar == 0.0 and fit.ratio == 0.0
    assert_rel(fit.errorvar, b["errorvar"], TOL, "sigma_e^2")
    assert_rel(fit.coef["beta"], b["beta"], TOL, "beta")
    assert_rel(fit.eblup, b["estimate"], TOL, "estimates")
    assert_rel(fit.mse, b["mse"], TOL, "mse")
    assert list(fit.estimates["n"]) == [3, 3, 3, 0]
    assert np.isnan(fit.estimates["gamma"].iloc[3])
    x = np.array([1.0, 3.5])
    assert_rel(fit.mse[3], fit.refvar + x @ fit.vcov_beta @ x, 1e-14, "synthetic mse")


@pytest.fixture(scope="module")
def designs(api):
    from surveysynth.datasets import load_api

    pop = load_api("apipop")
    d = ss.SurveyDesign(api["apistrat"], ids="~1", strata="stype", weights="pw", fpc="fpc")
    return {"dstrat": d, "rstrat": d.jackknife(),
            "cal": d.calibrate("~stype+api99", POP_API)}, pop


@pytest.mark.filterwarnings("ignore:1 replicate")
@pytest.mark.parametrize("name,formula,ref", [
    ("dstrat", "api00 ~ meals", "dstrat"), ("rstrat", "api00 ~ meals", "rstrat"),
    ("cal", "api00 ~ meals", "cal"), ("dstrat", "api00 ~ meals + ell", "dstrat_ell")])
def test_svysmoothUnit_designs_equal_R(designs, name, formula, ref):
    """SUMMER's inputs on a stratified, a JKn and a calibrated design: direct estimates (R
    svyby), the BHF EBLUP of mu_d with Xbar_d from apipop and its MSE for all 57 counties (17
    unsampled: synthetic), and the You-Rao pseudo-EBLUP with the design's weights, all = R."""
    ds, pop = designs
    r = REF["api"][ref]
    before = pop.copy()
    out = svysmoothUnit(formula, "cname", ds[name], pop)
    pd.testing.assert_frame_equal(pop, before)
    assert list(out["cname"]) == r["domain"]
    assert list(out["n"] > 0) == r["sampled"]
    dv = np.array([np.nan if v is None else v for v in r["direct_var"]], dtype=float)
    dd = np.array([np.nan if v is None else v for v in r["direct"]], dtype=float)
    assert_rel(out["direct"], dd, TOL, "direct")
    assert_rel(out["direct_var"], dv, TOL, "direct var", atol=1e-20)
    assert_rel(out["estimate"], r["estimate"], TOL, "estimate")
    assert_rel(out["mse"], r["mse"], TOL, "mse")
    fit = out.attrs["fit"]
    assert_rel(fit.refvar, r["refvar"], TOL, "sigma_v^2")
    assert_rel(fit.errorvar, r["errorvar"], TOL, "sigma_e^2")
    assert_rel(fit.coef["beta"], r["beta"], TOL, "beta")
    ps = svysmoothUnit(formula, "cname", ds[name], pop, pseudo=True)
    assert_rel(ps["estimate"], r["pseudo"], TOL, "pseudo-EBLUP")
    assert_rel(ps.attrs["fit"].coef["beta"], r["pseudo_beta"], TOL, "pseudo beta")
    assert ps["mse"].isna().all()


def test_svysmoothUnit_X_pop_weights_are_the_means(designs):
    """X_pop_weights = 1 / N_d per unit gives the same targets as the plain means; weights
    that favour some units move the estimates of their domains only through Xbar_d."""
    ds, pop = designs
    n_d = pop["cname"].map(pop["cname"].value_counts())
    a = svysmoothUnit("api00 ~ meals", "cname", ds["dstrat"], pop)
    b = svysmoothUnit("api00 ~ meals", "cname", ds["dstrat"], pop, X_pop_weights=1 / n_d)
    assert_rel(b["estimate"], a["estimate"], 1e-12, "weights 1/N_d")
    w = np.where(pop["meals"] > 50, 2.0, 1.0)
    cname = pop["cname"].to_numpy()
    w = w / pd.Series(w).groupby(cname).transform("sum").to_numpy()
    c = svysmoothUnit("api00 ~ meals", "cname", ds["dstrat"], pop, X_pop_weights=w)
    xbar = pd.Series(w * pop["meals"].to_numpy()).groupby(cname).sum()
    fit = c.attrs["fit"]
    assert_rel(fit.estimates["g1"], a.attrs["fit"].estimates["g1"], 1e-14, "g1 unchanged")
    beta = fit.coef["beta"].to_numpy()
    syn = ~(c["n"] > 0).to_numpy()
    assert_rel(c["estimate"][syn], beta[0] + beta[1] * xbar.to_numpy()[syn], 1e-12, "synth")


def test_errors_name_the_column(designs):
    sample, xmean, popn = _corn()
    pm = _pop_means(xmean)
    f = "CornHec ~ CornPix + SoyBeansPix"
    with pytest.raises(ValueError, match="method"):
        battese_harter_fuller(f, sample, "County", pm, method="EB")
    with pytest.raises(ValueError, match="no column 'Corn'"):
        battese_harter_fuller("Corn ~ CornPix", sample, "County", pm)
    with pytest.raises(ValueError, match="no column 'county'"):
        battese_harter_fuller(f, sample, "county", pm)
    bad = sample.copy()
    bad.loc[[3, 7], "SoyBeansPix"] = np.nan
    with pytest.raises(ValueError, match=r"'SoyBeansPix' has missing values at rows \[3, 7\]"):
        battese_harter_fuller(f, bad, "County", pm)
    bad = sample.copy()
    bad.loc[2, "CornHec"] = np.nan
    with pytest.raises(ValueError, match=r"'CornHec' has missing .* rows \[2\]"):
        battese_harter_fuller(f, bad, "County", pm)
    with pytest.raises(ValueError, match=r"pop_means has no column\(s\) \['SoyBeansPix'\]"):
        battese_harter_fuller(f, sample, "County", pm.drop(columns="SoyBeansPix"))
    with pytest.raises(ValueError, match="pop_means has no row for domains \\[13\\]"):
        battese_harter_fuller(f, sample, "County", pm, domains=[1, 13])
    with pytest.raises(ValueError, match="below the sample size for domains \\[12\\]"):
        battese_harter_fuller(f, sample, "County", pm,
                              pop_sizes={d: (3 if d == 12 else 500) for d in range(1, 13)})
    bad = sample.assign(w=1.0)
    bad.loc[5, "w"] = 0.0
    with pytest.raises(ValueError, match=r"weights column 'w' .* rows \[5\]"):
        battese_harter_fuller(f, bad, "County", pm, weights="w")
    ds, pop = designs
    with pytest.raises(ValueError, match=r"X_pop has no column\(s\) \['ell'\]"):
        svysmoothUnit("api00 ~ meals + ell", "cname", ds["dstrat"], pop.drop(columns="ell"))
    with pytest.raises(ValueError, match="X_pop has no column 'cname'"):
        svysmoothUnit("api00 ~ meals", "cname", ds["dstrat"], pop.rename(
            columns={"cname": "county"}))
    # nothing above changed the caller's frames
    pd.testing.assert_frame_equal(sample, _corn()[0])


def test_g1_g2_exact_and_information_dense():
    """Independent of the closed forms: at fixed variance components the EBLUP is linear in y,
    mu_hat_d = a_d'y (a_d read off by fitting unit vectors), so its exact MSE for mu_d is
    sigma_v^2 |Z'a_d - 1_d|^2 + sigma_e^2 |a_d|^2, which must equal g1 + g2; and the Fisher
    information behind g3 equals 0.5 tr(V^-1 V_a V^-1 V_b) computed with dense n x n matrices."""
    sample, xmean, _ = _corn()
    pm = _pop_means(xmean)
    fit = battese_harter_fuller("CornHec ~ CornPix + SoyBeansPix", sample, "County", pm)
    sv2, se2 = fit.refvar, fit.errorvar
    n = len(sample)
    A = np.empty((12, n))
    for i in range(n):
        yi = sample.assign(CornHec=np.eye(n)[i])
        A[:, i] = battese_harter_fuller("CornHec ~ CornPix + SoyBeansPix", yi, "County", pm,
                                        sigma2=(sv2, se2)).eblup
    Z = (sample["County"].to_numpy()[:, None] == np.arange(1, 13)[None, :]).astype(float)
    exact = sv2 * np.sum((A @ Z - np.eye(12)) ** 2, axis=1) + se2 * np.sum(A**2, axis=1)
    e = fit.estimates
    assert_rel(e["g1"] + e["g2"], exact, 1e-10, "g1 + g2 vs the exact MSE of the BLUP")
    V = sv2 * Z @ Z.T + se2 * np.eye(n)
    Vi = np.linalg.inv(V)
    dV = [Z @ Z.T, np.eye(n)]
    info = np.array([[0.5 * np.trace(Vi @ a @ Vi @ b) for b in dV] for a in dV])
    assert_rel(np.linalg.inv(fit.vcov_sigma), info, 1e-10, "Fisher information")


def test_ml_bias_term_dense():
    """ML's MSE subtracts b'grad g1, b = I^-1 col_j tr((X'V^-1X)^-1 X' dV^-1/d delta_j X) / 2
    the ML bias of (sigma_v^2, sigma_e^2) (Datta-Lahiri); here b from dense n x n matrices."""
    sample, xmean, _ = _corn()
    fit = battese_harter_fuller("CornHec ~ CornPix + SoyBeansPix", sample, "County",
                                _pop_means(xmean), method="ML")
    sv2, se2 = fit.refvar, fit.errorvar
    n = len(sample)
    X = np.column_stack([np.ones(n), sample["CornPix"], sample["SoyBeansPix"]])
    Z = (sample["County"].to_numpy()[:, None] == np.arange(1, 13)[None, :]).astype(float)
    Vi = np.linalg.inv(sv2 * Z @ Z.T + se2 * np.eye(n))
    Minv = np.linalg.inv(X.T @ Vi @ X)
    col = [np.trace(Minv @ X.T @ (-Vi @ dv @ Vi) @ X) for dv in (Z @ Z.T, np.eye(n))]
    b = 0.5 * fit.vcov_sigma @ np.array(col)
    assert b[0] < 0 and b[1] < 0  # ML underestimates both
    e = fit.estimates
    nd = e["n"].to_numpy(float)
    al = se2 + nd * sv2
    dg1 = np.column_stack([se2**2 / al**2, nd * sv2**2 / al**2])
    assert_rel(e["mse"], e["g1"] + e["g2"] + 2 * e["g3"] - dg1 @ b, 1e-10, "ML mse")
