"""``xdesign`` (crossed designs, new in R survey 4.5) against stored R 4.5 output
(tests/reference/r_survey45/xdesign.R, which stores R's ``salamander`` data, absent from
survey 4.1.1): ?xdesign's examples, means, totals, their covariance, df, a third crossed
clustering, a user adjacency matrix and svyglm (gaussian and logistic)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surveysynth.xdesign import xdesign
from tests.conftest import assert_rel

REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "xdesign.json")
                 .read_text())
TOL = 1e-9


def _check(est, ref, what):
    assert_rel(np.r_[est.estimate, est.se], np.r_[ref["estimate"], ref["se"]], TOL, what)
    assert_rel(est.vcov().to_numpy().ravel(order="F"), np.ravel(ref["vcov"]), TOL,
               what + " vcov")


@pytest.fixture(scope="module")
def sal():
    return pd.DataFrame(REF["salamander"])


def test_one_clustering_man_example(api):
    assert REF["survey_version"] == "4.5"
    with pytest.warns(UserWarning, match="only one clustering"):
        x = xdesign(api["apiclus1"], ids=["dnum"], weights="pw")
    assert x.degf == pytest.approx(REF["xclus1_degf"], rel=TOL)
    _check(x.mean(["enroll", "api00"]), REF["xclus1_mean"], "mean")
    _check(x.total(["enroll", "api00"]), REF["xclus1_total"], "total")


def test_crossed_salamanders(sal):
    with pytest.warns(UserWarning, match="equal probability"):
        x = xdesign(sal, ids=["Male", "Female"])
    assert x.degf == pytest.approx(REF["sal_degf"], rel=TOL)
    _check(x.mean("Mate"), REF["sal_mean"], "sal mean")
    _check(x.total("Mate"), REF["sal_total"], "sal total")
    with pytest.warns(UserWarning):
        x3 = xdesign(sal, ids=["Male", "Female", "Cross"])
    assert x3.degf == pytest.approx(REF["sal3_degf"], rel=TOL)
    _check(x3.mean("Mate"), REF["sal3_mean"], "three clusterings")
    # the adjacency given directly (dense) equals the one made from the clusterings
    A = x.adjacency.toarray()
    with pytest.warns(UserWarning):
        xa = xdesign(sal, adjacency=A)
    assert xa.degf == pytest.approx(REF["adj_degf"], rel=TOL)
    _check(xa.mean("Mate"), REF["adj_mean"], "adjacency")


def test_svyglm_on_crossed_designs(sal, api):
    with pytest.warns(UserWarning):
        x = xdesign(sal, ids=["Male", "Female"])
        xc = xdesign(api["apiclus1"], ids=["dnum"], weights="pw")
    for fit, ref, what in ((x.glm("Mate ~ Cross", family="quasibinomial"), REF["sal_glm"],
                            "salamander logistic"),
                           (xc.glm("api00 ~ ell + meals"), REF["clus_glm"], "apiclus1")):
        # atol: R's CrossW/W coefficient is 1e-15 (zero up to rounding)
        assert_rel(fit.estimate, ref["estimate"], TOL, what, atol=1e-12)
        assert_rel(np.r_[fit.se, fit.vcov().to_numpy().ravel(order="F")],
                   np.r_[ref["se"], ref["vcov"]], 1e-8, what + " se/vcov")
        assert fit["df"].iloc[0] == pytest.approx(ref["df"], rel=TOL)


def test_refusals(sal):
    with pytest.raises(ValueError, match="non-binary"), pytest.warns(UserWarning):
        xdesign(sal, ids=["Male", "Female"], overlap="positive")
    with pytest.raises(ValueError, match="0 or 1"), pytest.warns(UserWarning):
        xdesign(sal, adjacency=2 * np.eye(sal.shape[0]))
    with pytest.raises(ValueError, match="ids"), pytest.warns(UserWarning):
        xdesign(sal)
