"""``svyscoretest`` (new in R survey 4.5) against stored R 4.5 output
(tests/reference/r_survey45/svyscoretest.R, which also stores R's ``myco`` data, absent from
survey 4.1.1): ?svyscoretest's examples, and logistic models on apiclus1 by linearization, a
JK1 replicate design and a calibrated design, each method, F and chi-square references."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.analysis import svyscoretest
from tests.conftest import assert_rel

REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "svyscoretest.json")
                 .read_text())
TOL = 1e-8


def _num(v):
    return [math.inf if x == "Inf" else x for x in v]


def _working(t):
    return [t.statistic, t.parameter["ddf"], t.p_value]


def _pseudo(t):
    return [t.statistic, t.parameter["df"], t.parameter["ddf"], t.p_value]


@pytest.fixture(scope="module")
def myco():
    m = pd.DataFrame(REF["myco_data"])
    m["st"] = m["Age"].astype(str) + "." + m["leprosy"].astype(str)
    d = ss.SurveyDesign(m, strata="st", weights="wt")
    return ss.svyglm("leprosy ~ I((Age+7.5)**-2) + Scar", d, family="quasibinomial")


@pytest.fixture(scope="module")
def api_models(api):
    a = api["apiclus1"].assign(yes=(api["apiclus1"]["sch.wide"] == "Yes").astype(float))
    d = ss.SurveyDesign(a, ids="dnum", weights="pw", fpc="fpc")
    f = "yes ~ ell + meals + stype"
    return {"clus": ss.svyglm(f, d, family="quasibinomial"),
            "rep": ss.svyglm(f, d.jackknife(), family="quasibinomial"),
            "cal": ss.svyglm(f, d.calibrate("~api99", [6194, 3914069]),
                             family="quasibinomial")}


def test_man_examples(myco):
    assert REF["survey_version"] == "4.5"
    assert_rel(_working(svyscoretest(myco, "~Scar")), REF["myco_drop_scar"], TOL, "drop")
    assert_rel(_working(svyscoretest(myco, add_terms="~I((Age+7.5)**-2):Scar")),
               REF["myco_add_interaction"], TOL, "add interaction")
    with pytest.warns(UserWarning, match="1 linear dependency removed"):
        t = svyscoretest(myco, add_terms="~C(Age)", method="pseudo")
    assert_rel(_pseudo(t), REF["myco_add_age_pseudo"], TOL, "pseudo")
    ind = svyscoretest(myco, add_terms="~C(Age)", method="individual", fullrank=False)
    ref = REF["myco_add_age_individual_notfull"]
    assert_rel(np.r_[ind.estimate, ind.se], ref["estimate"] + ref["se"], TOL, "individual")
    assert_rel(ind.vcov().to_numpy().ravel(order="F"), ref["vcov"], TOL, "individual vcov")
    with pytest.warns(UserWarning, match="linear dependency"):
        ind = svyscoretest(myco, add_terms="~C(Age)", method="individual")
    ref = REF["myco_add_age_individual"]
    assert_rel(np.r_[ind.estimate, ind.se], ref["estimate"] + ref["se"], TOL, "fullrank")


def test_linearization_each_method_and_reference(api_models):
    m = api_models["clus"]
    assert_rel(_working(svyscoretest(m, "~stype")), REF["clus_drop_stype_working"], TOL, "w")
    assert_rel(_pseudo(svyscoretest(m, "~stype", method="pseudoscore")),
               REF["clus_drop_stype_pseudo"], TOL, "p")
    for got, ref in ((_working(svyscoretest(m, "~stype", ddf=math.inf)),
                      _num(REF["clus_drop_stype_working_inf"])),
                     (_pseudo(svyscoretest(m, "~stype", method="pseudoscore", ddf=math.inf)),
                      _num(REF["clus_drop_stype_pseudo_inf"]))):
        assert got[-2] == ref[-2] == math.inf  # chi-square reference
        assert_rel(got[:-2] + got[-1:], ref[:-2] + ref[-1:], TOL, "ddf=Inf")
    ind = svyscoretest(m, "~ell", method="individual")
    ref = REF["clus_drop_ell_individual"]
    assert_rel([ind.estimate[0], ind.se[0]], [ref["estimate"], ref["se"]], TOL, "individual")
    assert_rel(_working(svyscoretest(m, add_terms="~mobility + api99")),
               REF["clus_add_mobility_working"], TOL, "add")


@pytest.mark.parametrize("kind", ["rep", "cal"])
def test_replicate_and_calibrated(api_models, kind):
    m = api_models[kind]
    assert_rel(_working(svyscoretest(m, "~stype")), REF[f"{kind}_drop_stype_working"], TOL,
               kind)
    assert_rel(_pseudo(svyscoretest(m, "~stype", method="pseudoscore")),
               REF[f"{kind}_drop_stype_pseudo"], TOL, kind)


def test_refusals(api_models):
    m = api_models["clus"]
    with pytest.raises(ValueError, match="one of drop_terms and add_terms"):
        svyscoretest(m)
    with pytest.raises(ValueError, match="one of drop_terms and add_terms"):
        svyscoretest(m, "~ell", add_terms="~api99")
    with pytest.raises(ValueError, match="method="):
        svyscoretest(m, "~ell", method="wald")
    with pytest.warns(UserWarning, match="ddf set to 1"):
        svyscoretest(m, "~ell", ddf=0)
