"""``SurveyDesign(ultimate_cluster=True)``: R's ``options(survey.ultimate.cluster=TRUE)`` as a
design argument. Checked live against R survey (4.1.1 through rpy2): with the option set, R's
``svyrecvar`` uses the stage-1 units only (stage-1 fpc kept) even when later-stage fpcs are
given."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from tests.conftest import assert_rel


def r_stats(R, design: str, exprs: list[str], ultimate: bool) -> np.ndarray:
    """coef and SE of each R expression (design ``d``), with the option set, then reset."""
    body = "; ".join(f"s <- {e}; out <- c(out, as.numeric(coef(s)), as.numeric(SE(s)))"
                     for e in exprs)
    return R(f"local({{ op <- options(survey.ultimate.cluster={'TRUE' if ultimate else 'FALSE'});"
             f" on.exit(options(op)); d <- {design}; out <- c(); {body}; out }})")


def ours(d: ss.SurveyDesign) -> np.ndarray:
    parts = [d.total(["enroll", "api00"], na_rm=True), d.mean(["api00", "api99"]),
             d.ratio("api.stu", "enroll", na_rm=True), d.mean("api00", by="stype"),
             d.subset(d.data["sch.wide"] == "Yes").mean("api00"), d.proportion("stype")]
    return np.concatenate([np.r_[p.estimate.to_numpy(), p.se.to_numpy()] for p in parts])


R_EXPRS = ["svytotal(~enroll+api00, d, na.rm=TRUE)", "svymean(~api00+api99, d)",
           "svyratio(~api.stu, ~enroll, d, na.rm=TRUE)", "svyby(~api00, ~stype, d, svymean)",
           "svymean(~api00, subset(d, sch.wide == 'Yes'))", "svymean(~stype, d)"]

DESIGNS = {
    # two-stage with fpc at both stages: the option drops the stage-2 term
    "apiclus2": ("svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)", "apiclus2",
                 dict(ids="~dnum+snum", fpc="~fpc1+fpc2")),
    # stratified two-stage (nest) with a stage-1 fpc and a stage-2 fpc made up
    "apistrat2": ("svydesign(id=~dnum+snum, strata=~stype, fpc=~fpc+fpc2, nest=TRUE, "
                  "data=transform(apistrat, fpc2=ave(fpc, stype, dnum, FUN=length) * 3))",
                  "apistrat", dict(ids="~dnum+snum", strata="stype", fpc="~fpc+fpc2",
                                   nest=True)),
}


def _data(api, name):
    df = api[name].copy()
    if name == "apistrat":
        df["fpc2"] = df.groupby(["stype", "dnum"])["fpc"].transform("size") * 3.0
    return df


@pytest.mark.parametrize("name", list(DESIGNS))
def test_equals_r_option(R, api, name):
    rd, data, kw = DESIGNS[name]
    df = _data(api, data)
    uc = ss.SurveyDesign(df, **kw, ultimate_cluster=True)
    full = ss.SurveyDesign(df, **kw)
    r_uc = r_stats(R, rd, R_EXPRS, True)
    assert_rel(ours(uc), r_uc, what=f"{name} ultimate cluster")
    if name == "apistrat2":
        # districts with one sampled school are lonely at stage 2: R's multistage variance
        # fails there, the ultimate-cluster one never reaches stage 2 (both sides agree)
        with pytest.raises(Exception, match="only one PSU at stage 2"):
            r_stats(R, rd, R_EXPRS[:1], False)
        with pytest.raises(ValueError, match="one PSU|lonely"):
            full.mean("api00")
        full = ss.SurveyDesign(df, **kw, lonely_psu="certainty")
        r_full = R(f"local({{ op <- options(survey.lonely.psu='certainty'); on.exit(options(op));"
                   f" d <- {rd}; out <- c(); "
                   + "; ".join(f"s <- {e}; out <- c(out, as.numeric(coef(s)), "
                               "as.numeric(SE(s)))" for e in R_EXPRS) + "; out })")
    else:
        r_full = r_stats(R, rd, R_EXPRS, False)
    assert_rel(ours(full), r_full, what=f"{name} multistage")
    # the option matters on these designs (a no-op mutant would fail the line above)
    assert np.abs(r_uc / r_full - 1).max() > 1e-3


def test_is_stage_one_design(api):
    """Definition: the ultimate-cluster variance is the one-stage design on the stage-1 units
    with the stage-1 fpc; point estimates are unchanged."""
    df = api["apiclus2"]
    uc = ss.SurveyDesign(df, ids="~dnum+snum", fpc="~fpc1+fpc2", ultimate_cluster=True)
    one = ss.SurveyDesign(df, ids="dnum", fpc="fpc1", weights=uc.weights)
    a, b = uc.mean(["api00", "api99"]), one.mean(["api00", "api99"])
    assert_rel(a.estimate, b.estimate, tol=1e-12)
    assert_rel(a.se, b.se, tol=1e-12)
    assert "ultimate_cluster=True" in repr(uc)


def test_calibrated_and_replicate(R, api):
    """The option carries through calibration (R: the calibrated design's svyrecvar) and the
    jackknife (stage-1 units either way: replicate variance ignores the option)."""
    df = api["apiclus2"]
    pop = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018}
    uc = ss.SurveyDesign(df, ids="~dnum+snum", fpc="~fpc1+fpc2", ultimate_cluster=True)
    cal = uc.calibrate("~stype", pop)
    r = r_stats(R, "calibrate(svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2), ~stype,"
                " c(`(Intercept)`=6194, stypeH=755, stypeM=1018))",
                ["svymean(~api00, d)", "svytotal(~enroll, d, na.rm=TRUE)"], True)
    m, t = cal.mean("api00"), cal.total("enroll", na_rm=True)
    assert_rel(np.r_[m.estimate, m.se, t.estimate, t.se], r, what="calibrated")
    assert cal.ultimate_cluster
    with pytest.warns(UserWarning, match="after first stage"):
        jk = uc.jackknife("JK1")
    rj = r_stats(R, "as.svrepdesign(svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2),"
                 " type='JK1')", ["svymean(~api00, d)"], True)
    m = jk.mean("api00")
    assert_rel(np.r_[m.estimate, m.se], rj, what="JK1")


def test_engine_r_sets_option(api):
    df = api["apiclus2"]
    uc = ss.SurveyDesign(df, ids="~dnum+snum", fpc="~fpc1+fpc2", ultimate_cluster=True)
    assert_rel(uc.mean("api00", engine="r").se, uc.mean("api00").se)


def test_dask_passes_option(api):
    pytest.importorskip("dask")
    df = api["apiclus2"]
    uc = ss.SurveyDesign(df, ids="~dnum+snum", fpc="~fpc1+fpc2", ultimate_cluster=True)
    a = uc.mean("api00", by="stype", engine="dask")
    b = uc.mean("api00", by="stype")
    assert_rel(a.se, b.se, tol=1e-12)


def test_mu284_no_lonely_rule_at_stage2(R):
    """mu284 (R's two-stage example): fpc at both stages."""
    with r_session("survey") as (ro, _):
        mu = r_to_pandas(ro.r("local({ data(mu284); mu284 })"))
    rd = "svydesign(id=~id1+id2, fpc=~n1+n2, data=mu284)"
    r = r_stats(R, rd, ["svytotal(~y1, d)", "svymean(~y1, d)"], True)
    d = ss.SurveyDesign(pd.DataFrame(mu), ids="~id1+id2", fpc="~n1+n2", ultimate_cluster=True)
    t, m = d.total("y1"), d.mean("y1")
    assert_rel(np.r_[t.estimate, t.se, m.estimate, m.se], r, what="mu284")


def test_bad_value(api):
    with pytest.raises(ValueError, match="ultimate_cluster"):
        ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2",
                        ultimate_cluster="yes")
