"""Nonresponse weighting-class adjustment (svrep redistribute_weights): replicate designs
against svrep 0.9.0 (fixture, its man-page example and an SDR design), linearization designs
against R's delta method (svycontrast on the class totals, live)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.nonresponse import redistribute_weights
from tests.conftest import assert_rel

REF = json.loads((Path(__file__).parent / "reference" / "svrep" /
                  "redistribute_reference.json").read_text())


def _est(d):
    t, m = d.total("enroll"), d.mean("api00")
    b = d.mean("api00", by="stype")
    return dict(total=t["estimate"], total_se=t["se"], mean=m["estimate"], mean_se=m["se"],
                by_mean=b["estimate"], by_se=b["se"])


def _check(got, exp, what):
    for k in ("total", "mean", "by_mean"):
        assert_rel(got[k], exp[k], 1e-12, f"{what} {k}")
    for k in ("total_se", "mean_se", "by_se"):
        assert_rel(got[k], exp[k], 1e-10, f"{what} {k}")


@pytest.fixture(scope="module")
def clus1(api):
    return api["apiclus1"].assign(response_status=REF["status"])


def test_man_example_two_steps_equal_svrep(clus1):
    """svrep's ?redistribute_weights: unknown eligibility, then nonresponse, by stype, on a
    JK1 design of apiclus1; full-sample and every replicate's weights (1e-12) and the
    respondents' total, mean and svyby means with SEs (1e-10)."""
    rd = ss.SurveyDesign(clus1, ids="dnum", weights="pw", fpc="fpc").jackknife()
    st = clus1["response_status"]
    ue = redistribute_weights(rd, reduce_if=(st == "Unknown eligibility").to_numpy(),
                              increase_if=(st != "Unknown eligibility").to_numpy(), by="stype")
    assert_rel(ue.full_weights, REF["ue_pweights"], 1e-12)
    assert_rel(ue.replicate_weights("analysis"), REF["ue_repweights"], 1e-12, atol=1e-12)
    nr = ue.redistribute_weights("response_status == 'Nonrespondent'",
                                 "response_status == 'Respondent'", by=["stype"])
    assert_rel(nr.full_weights, REF["nr_pweights"], 1e-12)
    assert_rel(nr.replicate_weights("analysis"), REF["nr_repweights"], 1e-12, atol=1e-12)
    _check(_est(nr.subset(st == "Respondent")), REF["nr_est"], "JK1")
    # weight is moved, not created: each class keeps its total (ineligibles untouched)
    for d0, d1 in ((rd, ue), (ue, nr)):
        assert_rel(np.bincount(clus1["stype"].factorize()[0], d1.full_weights),
                   np.bincount(clus1["stype"].factorize()[0], d0.full_weights), 1e-12)
    ine = (st == "Ineligible").to_numpy()
    assert_rel(nr.full_weights[ine], ue.full_weights[ine], 1e-15)


def test_sdr_two_class_variables_equal_svrep(api):
    """SDR replicates (svrep as_sdr_design, sorted by snum) adjusted by stype x sch.wide."""
    a = api["apistrat"].assign(resp=REF["sdr_resp"])
    sdr = ss.SurveyDesign(a, strata="stype", weights="pw", fpc="fpc").sdr(20, "snum")
    nr = sdr.redistribute_weights("resp == 0", "resp == 1", by=["stype", "sch.wide"])
    assert_rel(nr.full_weights, REF["sdr_pweights"], 1e-12)
    _check(_est(nr.subset(a["resp"] == 1)), REF["sdr_est"], "SDR")


def _delta_r(code_setup: str, expr: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(survey)); data(api)")
        ro.r(code_setup)
        return np.array(ro.r(f"local({{ s <- svycontrast(tt, {expr}); "
                             "c(coef(s), SE(s)) })"), dtype=float)


def test_linearization_one_step_equals_delta_method(api):
    """SurveyDesign: adjusted total of enroll over respondents, sum_c (U_c + D_c)/U_c Y_c,
    classes stype x sch.wide on stratified apistrat with fpc; its linearization SE equals R's
    delta method on the class totals (svycontrast) to 1e-10. The mutant that treats the
    adjusted weights as fixed design weights (respondents only) is 0.7% off and fails."""
    a = api["apistrat"].assign(resp=REF["sdr_resp"])
    a["cls"] = a["stype"].astype(str) + a["sch.wide"].astype(str)
    a["y_r"] = a["enroll"] * a["resp"]
    d = ss.SurveyDesign(a, strata="stype", weights="pw", fpc="fpc")
    nr = d.redistribute_weights("resp == 0", "resp == 1", by="cls")
    got = nr.total("y_r")
    classes = sorted(a["cls"].unique())
    setup = ("x <- apistrat; x$resp <- c({}); x$cls <- paste0(x$stype, x$sch.wide); "
             "d <- svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=x); "
             .format(",".join(map(str, REF["sdr_resp"]))))
    terms, tot = [], []
    for k, c in enumerate(classes):
        setup += (f"x$a{k} <- 1 * (x$cls == '{c}'); x$u{k} <- x$a{k} * x$resp; "
                  f"x$y{k} <- x$u{k} * x$enroll; ")
        tot += [f"a{k}", f"u{k}", f"y{k}"]
        terms.append(f"a{k} * y{k} / u{k}")
    setup += ("d <- svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=x); "
              f"tt <- svytotal(~{'+'.join(tot)}, d)")
    est, se = _delta_r(setup, f"quote({' + '.join(terms)})")
    assert_rel(got["estimate"], est, 1e-12)
    assert_rel(got["se"], se, 1e-10)
    resp = (a["resp"] == 1).to_numpy()
    fixed = ss.SurveyDesign(a.assign(w2=nr.full_weights)[resp], strata="stype", weights="w2",
                            fpc="fpc").total("y_r")["se"].iloc[0]
    assert abs(fixed / se - 1) > 1e-3
    # the respondents' domain gives the same estimate and SE
    sub = nr.subset(a["resp"] == 1).total("enroll")
    assert_rel(sub[["estimate", "se"]].to_numpy().ravel(), [est, se], 1e-10)


def test_linearization_two_steps_equals_delta_method(clus1):
    """Two adjustments (unknown eligibility, then nonresponse, by stype; ineligibles keep
    their weights) on the one-stage cluster design: the respondents' total equals
    sum_c T_c / E_c * (N_c + R_c) / R_c * Y_c (T all, E eligibility known, N nonrespondents,
    R respondents), SE equal to R's delta method to 1e-10. Applying the two adjustments'
    linearizations first-made-first (R's order for its calibrations) is 0.25% off: the chain
    rule needs the last step first (surveysynth.design._variance_order)."""
    st = clus1["response_status"]
    d = ss.SurveyDesign(clus1.assign(y_r=clus1["enroll"] * (st == "Respondent")), ids="dnum",
                        weights="pw", fpc="fpc")
    ue = d.redistribute_weights((st == "Unknown eligibility").to_numpy(),
                                (st != "Unknown eligibility").to_numpy(), by="stype")
    nr = ue.redistribute_weights((st == "Nonrespondent").to_numpy(),
                                 (st == "Respondent").to_numpy(), by="stype")
    got = nr.total("y_r")
    setup = ("x <- apiclus1; x$st <- c({}); ".format(
        ",".join(f"'{s}'" for s in REF["status"])))
    tot, terms = [], []
    for k, c in enumerate(["E", "H", "M"]):
        setup += (f"x$t{k} <- 1 * (x$stype == '{c}'); "
                  f"x$e{k} <- x$t{k} * (x$st != 'Unknown eligibility'); "
                  f"x$n{k} <- x$t{k} * (x$st == 'Nonrespondent'); "
                  f"x$r{k} <- x$t{k} * (x$st == 'Respondent'); x$y{k} <- x$r{k} * x$enroll; ")
        tot += [f"t{k}", f"e{k}", f"n{k}", f"r{k}", f"y{k}"]
        terms.append(f"t{k} / e{k} * (n{k} + r{k}) / r{k} * y{k}")
    setup += ("d <- svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=x); "
              f"tt <- svytotal(~{'+'.join(tot)}, d)")
    est, se = _delta_r(setup, f"quote({' + '.join(terms)})")
    assert_rel(got["estimate"], est, 1e-12)
    assert_rel(got["se"], se, 1e-10)


def test_errors_and_lost_weight(api, clus1):
    d = ss.SurveyDesign(clus1, ids="dnum", weights="pw", fpc="fpc")
    st = clus1["response_status"]
    with pytest.raises(ValueError, match="conflict"):
        d.redistribute_weights(np.ones(183, bool), (st == "Respondent").to_numpy())
    with pytest.raises(ValueError, match="logical"):
        d.redistribute_weights("api00", "api99")
    with pytest.raises(ValueError, match="missing from the data"):
        d.redistribute_weights("response_status == 'Nonrespondent'",
                               "response_status == 'Respondent'", by="nonesuch")
    with pytest.raises(ValueError, match="not a column and not an expression"):
        d.redistribute_weights("response_status === 1", "response_status == 'Respondent'")
    with pytest.raises(ValueError, match="subset"):
        d.subset(st == "Respondent").redistribute_weights(
            "response_status == 'Nonrespondent'", "response_status == 'Respondent'")
    # a class with nonrespondents and no respondent loses its weight (svrep), with a warning
    resp = (st == "Respondent") & (clus1["stype"] != "H")
    with pytest.warns(UserWarning, match=r"\['H'\].*dropped"):
        nr = d.redistribute_weights((st == "Nonrespondent").to_numpy(), resp.to_numpy(),
                                    by="stype")
    h = (clus1["stype"] == "H") & (st == "Nonrespondent")
    assert (nr.full_weights[h.to_numpy()] == 0).all()
    before = clus1["pw"].copy()
    d.redistribute_weights("response_status == 'Nonrespondent'",
                           "response_status == 'Respondent'")
    assert clus1["pw"].equals(before)  # the caller's data untouched
