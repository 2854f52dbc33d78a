"""SurveyDesign estimates and SEs equal R survey's, computed live through rpy2, to 1e-9."""

from __future__ import annotations

import numpy as np
import pytest

import surveysynth as ss
from tests.conftest import assert_rel

# name -> (R data, R svydesign arguments, Python keyword arguments)
DESIGNS = {
    "strat": ("apistrat", "id=~1, strata=~stype, weights=~pw, fpc=~fpc",
              dict(strata="stype", weights="pw", fpc="fpc")),
    "clus1": ("apiclus1", "id=~dnum, weights=~pw, fpc=~fpc",
              dict(ids="dnum", weights="pw", fpc="fpc")),
    "clus2_fpc": ("apiclus2", "id=~dnum+snum, fpc=~fpc1+fpc2",
                  dict(ids="~dnum+snum", fpc="~fpc1+fpc2")),
    "clus2_nofpc": ("apiclus2", "id=~dnum+snum, weights=~pw",
                    dict(ids=["dnum", "snum"], weights="pw")),
    "strat_nest": ("apistrat", "id=~dnum, strata=~stype, weights=~pw, nest=TRUE",
                   dict(ids="dnum", strata="stype", weights="pw", nest=True)),
}


def r_design(name: str) -> str:
    data, args, _ = DESIGNS[name]
    return f"svydesign({args}, data={data})"


def py_design(api, name: str, **extra) -> ss.SurveyDesign:
    data, _, kwargs = DESIGNS[name]
    return ss.SurveyDesign(api[data], **kwargs, **extra)


def r_stat(R, expr: str, design: str, lonely: str = "fail", domain_lonely: bool = False):
    """coef and SE of an R statistic ``expr`` evaluated with design ``d``."""
    code = (
        f"local({{ options(survey.lonely.psu='{lonely}', "
        f"survey.adjust.domain.lonely={'TRUE' if domain_lonely else 'FALSE'}); "
        f"d <- {design}; s <- {expr}; "
        "r <- c(as.numeric(unlist(coef(s))), as.numeric(unlist(SE(s)))); "
        "options(survey.lonely.psu='fail', survey.adjust.domain.lonely=FALSE); r })"
    )
    out = R(code)
    k = out.shape[0] // 2
    return out[:k], out[k:]


@pytest.mark.parametrize("name", list(DESIGNS))
def test_total_mean_ratio(R, api, name):
    d = py_design(api, name)
    rd = r_design(name)
    for stat, vars_, rexpr in [
        ("total", ["enroll", "api00"], "svytotal(~enroll+api00, d, na.rm=TRUE)"),
        ("mean", ["api00", "api99"], "svymean(~api00+api99, d)"),
    ]:
        ours = getattr(d, stat)(vars_, na_rm=True)
        est, se = r_stat(R, rexpr, rd)
        assert_rel(ours.estimate, est, what=f"{name} {stat} estimate")
        assert_rel(ours.se, se, what=f"{name} {stat} se")
    ours = d.ratio("api.stu", "enroll", na_rm=True)
    est, se = r_stat(R, "svyratio(~api.stu, ~enroll, d, na.rm=TRUE)", rd)
    assert_rel(ours.estimate, est, what=f"{name} ratio")
    assert_rel(ours.se, se, what=f"{name} ratio se")


@pytest.mark.parametrize("name", list(DESIGNS))
def test_proportion_and_deff(R, api, name):
    d = py_design(api, name)
    rd = r_design(name)
    ours = d.proportion("sch.wide")
    est, se = r_stat(R, "svymean(~sch.wide, d)", rd)
    assert list(ours["level"]) == ["No", "Yes"]
    assert_rel(ours.estimate, est, what="proportion")
    assert_rel(ours.se, se, what="proportion se")
    # categorical totals are level counts, as svytotal on a factor
    ours = d.total("stype")
    est, se = r_stat(R, "svytotal(~stype, d)", rd)
    assert_rel(ours.estimate, est)
    assert_rel(ours.se, se)
    for deff, rarg in [(True, "TRUE"), ("replace", "'replace'")]:
        ours = d.mean("api00", deff=deff)
        r = R(f"local({{d <- {rd}; as.vector(deff(svymean(~api00, d, deff={rarg})))}})")
        assert_rel(ours.deff, r, what=f"mean deff={deff}")
        ours = d.total("enroll", deff=deff, na_rm=True)
        r = R(f"local({{d <- {rd}; as.vector(deff(svytotal(~enroll, d, deff={rarg}, na.rm=TRUE)))}})")
        assert_rel(ours.deff, r, what=f"total deff={deff}")
    ours = d.ratio("api.stu", "enroll", deff=True, na_rm=True)
    r = R(f"local({{d <- {rd}; as.vector(attr(svyratio(~api.stu, ~enroll, d, deff=TRUE, na.rm=TRUE), 'deff'))}})")
    assert_rel(ours.deff, r, what="ratio deff")


@pytest.mark.parametrize("name", list(DESIGNS))
def test_quantiles(R, api, name):
    d = py_design(api, name)
    rd = r_design(name)
    ps = [0.1, 0.25, 0.5, 0.75, 0.9]
    ours = d.quantile(["api00", "api99"], ps)
    r = R(f"local({{d <- {rd}; q <- svyquantile(~api00+api99, d, c({','.join(map(str, ps))})); "
          "c(q$api00[,1], q$api99[,1], q$api00[,4], q$api99[,4], q$api00[,2], q$api99[,2], "
          "q$api00[,3], q$api99[,3])})")
    k = 2 * len(ps)
    assert_rel(ours.estimate, r[:k], what="quantile")
    assert_rel(ours.se, r[k:2 * k], what="quantile se")
    assert_rel(ours.ci_low, r[2 * k:3 * k], what="quantile ci_low")
    assert_rel(ours.ci_high, r[3 * k:], what="quantile ci_high")
    assert (ours.df == R(f"degf({rd})")[0]).all()


@pytest.mark.parametrize("name", list(DESIGNS))
def test_domains_by(R, api, name):
    d = py_design(api, name)
    rd = r_design(name)
    for stat, rfun in [("mean", "svymean"), ("total", "svytotal")]:
        ours = getattr(d, stat)("api00", by="stype")
        est, se = r_stat(R, f"svyby(~api00, ~stype, d, {rfun})", rd)
        assert list(ours["stype"]) == ["E", "H", "M"]
        assert_rel(ours.estimate, est, what=f"by {stat}")
        assert_rel(ours.se, se, what=f"by {stat} se")
    ours = d.mean("api00", by=["stype", "sch.wide"])
    est, se = r_stat(R, "svyby(~api00, ~stype+sch.wide, d, svymean)", rd)
    assert_rel(ours.estimate, est, what="two-way by")
    assert_rel(ours.se, se, what="two-way by se")
    ours = d.ratio("api.stu", "enroll", by="stype", na_rm=True)
    est, se = r_stat(R, "svyby(~api.stu, ~stype, d, svyratio, denominator=~enroll, na.rm=TRUE)", rd)
    assert_rel(ours.estimate, est)
    assert_rel(ours.se, se)
    ours = d.quantile("api00", 0.5, by="stype", survey_version="4.1")  # live R 4.1.1's rule
    r = R(f"local({{d <- {rd}; b <- svyby(~api00, ~stype, d, svyquantile, quantiles=0.5, "
          "keep.var=TRUE); c(coef(b), SE(b))})")
    assert_rel(ours.estimate, r[:3], what="by quantile")
    assert_rel(ours.se, r[3:], what="by quantile se")
    ours = d.proportion("sch.wide", by="stype")
    est, se = r_stat(R, "svyby(~sch.wide, ~stype, d, svymean)", rd)
    # R orders svyby columns variable-major: (No for E,H,M), then (Yes for E,H,M)
    order = np.argsort(np.tile([0, 1], 3), kind="stable")
    assert_rel(ours.estimate.to_numpy()[order], est)
    assert_rel(ours.se.to_numpy()[order], se)


@pytest.mark.parametrize("name", list(DESIGNS))
def test_subset_keeps_full_design(R, api, name):
    d = py_design(api, name)
    rd = r_design(name)
    sub = d.subset(d.data["sch.wide"] == "Yes")
    assert sub.n == int((d.data["sch.wide"] == "Yes").sum())
    for stat, rfun in [("mean", "svymean"), ("total", "svytotal")]:
        ours = getattr(sub, stat)("api00")
        est, se = r_stat(R, f"{rfun}(~api00, subset(d, sch.wide == 'Yes'))", rd)
        assert_rel(ours.estimate, est)
        assert_rel(ours.se, se)
    assert sub.degf == R(f"degf(subset({rd}, sch.wide == 'Yes'))")[0]
    # nested subset + by
    sub2 = sub.subset(sub.data["stype"] != "H")
    ours = sub2.mean("api00", by="stype")
    est, se = r_stat(R, "svyby(~api00, ~stype, subset(d, sch.wide == 'Yes' & stype != 'H'), svymean)", rd)
    assert_rel(ours.estimate, est)
    assert_rel(ours.se, se)


def test_degf(R, api):
    for name in DESIGNS:
        assert py_design(api, name).degf == R(f"degf({r_design(name)})")[0]


# --- lonely PSUs: apiclus1 stratified by district, schools as PSUs ------------------------
LONELY_R = "svydesign(id=~1, strata=~dnum, weights=~pw, data=apiclus1)"
LONELY_R_FPC = "svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)"


@pytest.mark.parametrize("lonely", ["remove", "certainty", "adjust", "average"])
@pytest.mark.parametrize("domain_lonely", [False, True])
def test_lonely_psu_options(R, api, lonely, domain_lonely):
    counts = api["apiclus1"].groupby("dnum").size()
    assert (counts == 1).any(), "the fixture needs a stratum with a single PSU"
    d = ss.SurveyDesign(api["apiclus1"], strata="dnum", weights="pw", lonely_psu=lonely,
                        adjust_domain_lonely=domain_lonely, survey_version="4.1")  # live R 4.1.1
    for expr, ours in [
        ("svymean(~api00, d)", d.mean("api00")),
        ("svytotal(~enroll, d)", d.total("enroll")),
        ("svyby(~api00, ~stype, d, svymean)", d.mean("api00", by="stype")),
        ("svyby(~enroll, ~sch.wide, d, svytotal)", d.total("enroll", by="sch.wide")),
        ("svymean(~api00, subset(d, stype == 'M'))", d.subset(d.data["stype"] == "M").mean("api00")),
    ]:
        est, se = r_stat(R, expr, LONELY_R, lonely, domain_lonely)
        assert_rel(ours.estimate, est, what=f"{lonely} {expr}")
        assert_rel(ours.se, se, what=f"{lonely} {expr} se")


def test_lonely_psu_fail_matches_r(R, api):
    d = ss.SurveyDesign(api["apiclus1"], strata="dnum", weights="pw")  # lonely_psu="fail"
    with pytest.raises(ValueError, match="has only one PSU at stage 1"):
        d.mean("api00")
    with pytest.raises(Exception, match="has only one PSU"):
        R(f"local({{d <- {LONELY_R}; svymean(~api00, d)}})")
    # a domain that never reaches the lonely strata is fine, in R as here
    counts = api["apiclus1"].groupby("dnum").size()
    big = api["apiclus1"]["dnum"].isin(counts[counts > 1].index)
    ours = d.subset(big.to_numpy()).mean("api00")
    big_ids = ",".join(map(str, counts[counts > 1].index))
    est, se = r_stat(R, f"svymean(~api00, subset(d, dnum %in% c({big_ids})))", LONELY_R)
    assert_rel(ours.estimate, est)
    assert_rel(ours.se, se)


@pytest.mark.parametrize("lonely", ["fail", "remove", "adjust", "average"])
def test_multistage_certainty_and_lonely_second_stage(R, api, lonely):
    """apiclus2 with fpc: districts with fpc2 = 1 school are certainty units at stage 2."""
    d = ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2", lonely_psu=lonely,
                        survey_version="4.1")  # live R 4.1.1's "adjust"
    for expr, ours in [
        ("svymean(~api00, d)", d.mean("api00")),
        ("svyby(~api00, ~stype, d, svymean)", d.mean("api00", by="stype")),
        ("svytotal(~enroll, d, na.rm=TRUE)", d.total("enroll", na_rm=True)),
    ]:
        est, se = r_stat(R, expr, LONELY_R_FPC, lonely)
        assert_rel(ours.estimate, est, what=expr)
        assert_rel(ours.se, se, what=expr)


def test_three_stage_with_fpc(R):
    """A three-stage design with fpc at every stage, built in R and shipped to Python."""
    from r_bridge import r_session
    from r_bridge.convert import r_to_pandas

    code = """local({ set.seed(11)
      st <- rep(1:4, each = 60); psu <- rep(1:24, each = 10); ssu <- rep(1:60, each = 4)
      data.frame(st = st, psu = psu, ssu = ssu, y = rnorm(240, 50, 10) + st,
                 N1 = 10, N2 = 4, N3 = 9, w = runif(240, 1, 3)) })"""
    with r_session("survey") as (ro, _):
        df = r_to_pandas(ro.r(code))
        ro.globalenv["df3"] = ro.r(code)
    d = ss.SurveyDesign(df.assign(row=np.arange(df.shape[0])), ids="~psu+ssu+row", strata="st",
                        fpc="~N1+N2+N3", weights="w")
    ours = d.mean("y", by="st")
    est, se = r_stat(
        R, "svyby(~y, ~st, d, svymean)",
        "svydesign(id=~psu+ssu+row, strata=~st, fpc=~N1+N2+N3, weights=~w, "
        "data=transform(df3, row=seq_len(nrow(df3))))",
    )
    assert_rel(ours.estimate, est)
    assert_rel(ours.se, se)


def test_t_intervals_use_design_df(api):
    d = py_design(api, "clus1")
    from scipy import stats

    out = d.mean("api00", ci="t")
    crit = stats.t.ppf(0.975, d.degf)
    assert np.isclose(out.ci_high[0] - out.estimate[0], crit * out.se[0], rtol=1e-12)
    out = d.mean("api00")
    assert np.isclose(out.ci_high[0] - out.estimate[0], stats.norm.ppf(0.975) * out.se[0], rtol=1e-12)
