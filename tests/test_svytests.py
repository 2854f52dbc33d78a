"""svychisq, svyttest and svyranktest against R survey 4.1 (live R through rpy2): statistics,
df and p values to 1e-8 on apistrat (stratified, fpc), apiclus2 (two-stage clusters, fpc) and
R's JK1 replicate design of apiclus2 (replicate weights exported)."""

from __future__ import annotations

import numpy as np
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.analysis import svychisq, svyranktest, svyttest
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8

R_SETUP = """
suppressMessages(library(survey)); data(api)
st_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=apistrat)
st_dclus2 <- svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)
st_rclus2 <- as.svrepdesign(st_dclus2, type='JK1')
"""
DESIGNS = ["st_dstrat", "st_dclus2", "st_rclus2"]


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat, clus2 = api["apistrat"], api["apiclus2"]
    return {
        "st_dstrat": ss.SurveyDesign(strat, strata="stype", weights="pw", fpc="fpc"),
        "st_dclus2": ss.SurveyDesign(clus2, ids=["dnum", "snum"], fpc=["fpc1", "fpc2"]),
        "st_rclus2": ReplicateDesign(
            clus2, repweights=_r("as.matrix(weights(st_rclus2, 'analysis'))"),
            weights=_r("as.numeric(st_rclus2$pweights)"), type="other",
            scale=float(_r("st_rclus2$scale")[0]), rscales=_r("st_rclus2$rscales"),
            combined_weights=True),
    }


def _check(res, ref: np.ndarray, what: str) -> float:
    """ref = c(statistic, parameter..., p.value)."""
    ours = np.array([res.statistic, *res.parameter.values(), res.p_value])
    assert_rel(ours, ref, TOL, what)
    err = float(np.max(np.abs(ours - ref) / np.abs(ref)))
    print(f"{what}: max rel diff vs R {err:.2e}")
    return err


TABLES = ["~sch.wide + stype", "~stype + awards"]


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("statistic", ["F", "Chisq", "Wald", "adjWald"])
@pytest.mark.parametrize("table", TABLES)
def test_svychisq_equals_R(designs, design, statistic, table):
    res = svychisq(table, designs[design], statistic=statistic)
    ref = _r(f"local({{ t <- svychisq({table}, {design}, statistic='{statistic}'); "
             "c(t$statistic, t$parameter, t$p.value) })")
    _check(res, ref, f"svychisq {design} {statistic} {table}")


def test_svychisq_statistics_differ_and_subset(designs):
    """The four statistics are different numbers (a wrong dispatch would not be caught by
    equal values), and a subset design matches R's svychisq on subset()."""
    d = designs["st_dclus2"]
    vals = {s: svychisq("~sch.wide + stype", d, statistic=s) for s in ("F", "Chisq", "Wald")}
    assert len({round(v.statistic, 8) for v in vals.values()}) == 3
    sub = d.subset(d.data["api00"] > 600)
    res = svychisq("~stype + awards", sub)
    ref = _r("local({ t <- svychisq(~stype + awards, subset(st_dclus2, api00 > 600)); "
             "c(t$statistic, t$parameter, t$p.value) })")
    _check(res, ref, "svychisq subset")


TTESTS = {
    "one-sample": ("I(api00 - 650) ~ 0", "I(api00 - 650) ~ 0"),
    "one-sample ~1": ("I(api00 - 650) ~ 1", "I(api00 - 650) ~ 1"),
    "two-group": ("api00 ~ sch.wide", "api00 ~ sch.wide"),
    "paired": ("I(api00 - api99) ~ 0", "I(api00 - api99) ~ 0"),
}


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("kind", list(TTESTS))
def test_svyttest_equals_R(designs, design, kind):
    py_f, r_f = TTESTS[kind]
    res = svyttest(py_f, designs[design])
    ref = _r(f"local({{ t <- svyttest({r_f}, {design}); c(t$statistic, t$parameter, "
             "t$p.value, t$estimate, t$conf.int) })")
    _check(res, ref[:3], f"svyttest {design} {kind}")
    assert_rel([res.estimate, *res.conf_int], ref[3:], TOL, f"{kind} estimate/ci")


RANKS = {
    "wilcoxon": ("ell ~ comp.imp", "wilcoxon"),
    "wilcoxon ties": ("api00 ~ sch.wide", "wilcoxon"),
    "vanderWaerden": ("ell ~ comp.imp", "vanderWaerden"),
    "median": ("meals ~ awards", "median"),
}


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("kind", list(RANKS))
def test_svyranktest_equals_R(designs, design, kind):
    f, test = RANKS[kind]
    res = svyranktest(f, designs[design], test=test)
    ref = _r(f"local({{ t <- svyranktest({f}, {design}, test='{test}'); c(t$statistic, "
             "t$parameter, t$p.value, t$estimate) })")
    _check(res, ref[:3], f"svyranktest {design} {kind}")
    assert_rel(res.estimate, ref[3:], TOL, f"{kind} estimate")


@pytest.mark.parametrize("design", ["st_dstrat", "st_dclus2"])
def test_multigroup_ranktest_equals_R(designs, design):
    res = svyranktest("ell ~ stype", designs[design])
    # R's multiranktest returns the chi-square as 'parameter' and ndf as 'statistic'
    ref = _r(f"local({{ t <- svyranktest(ell ~ stype, {design}); c(t$parameter / t$statistic, "
             "t$statistic, t$ddf, t$p.value) })")
    _check(res, ref, f"multirank {design}")


def test_errors(designs, api):
    d = designs["st_dclus2"]
    with pytest.raises(ValueError, match="two-way"):
        svychisq("~stype + awards + sch.wide", d)
    with pytest.raises(ValueError, match="statistic='lincom'"):
        svychisq("~stype + awards", d, statistic="lincom")
    with pytest.raises(ValueError, match="binary"):
        svyttest("api00 ~ stype", d)
    with pytest.raises(ValueError, match=r"'enroll'.*na_rm=True"):
        svyttest("enroll ~ 1", d)
    with pytest.raises(ValueError, match="replicate"):
        svyranktest("ell ~ stype", designs["st_rclus2"])
    with pytest.raises(ValueError, match="test='sign'"):
        svyranktest("ell ~ awards", d, test="sign")
