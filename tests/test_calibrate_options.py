"""calibrate's remaining options against R survey 4.1.1 (live through rpy2), on R's own
?calibrate examples and on replicate designs: ``variance=`` (heteroscedastic GREG; the ratio
estimator), ``bounds_const=`` (bounds on the weights), per-row bounds, a list of margins
(population tables, classical raking through ``calfun="raking"``), interaction formulas and
``stage=`` (calibration within clusters)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.calibration import CalibrationError, model_matrix
from tests.conftest import assert_rel

POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018}
POP3 = dict(POP, api99=3914069)
R_POP3 = "c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)"
DCLUS1 = "svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)"
DSTRAT = "svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)"


def r_run(R, design: str, cal: str, stats: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """R's calibrated weights, then coef and SE of each statistic on ``g <- cal``."""
    body = "; ".join(f"s <- {e}; out <- c(out, as.numeric(coef(s)), as.numeric(SE(s)))"
                     for e in stats)
    out = R(f"local({{ d <- {design}; g <- {cal}; w <- if (inherits(g, 'svyrep.design')) "
            f"weights(g, 'sampling') else weights(g); out <- c(); {body}; c(w, out) }})")
    return out, out.shape[0]


def check(R, ours_design, design: str, cal: str, stats: list[tuple[str, str, dict]],
          tol: float = 1e-9):
    exprs = [e for _, e, _ in stats]
    out, _ = r_run(R, design, cal, exprs)
    w = np.asarray(ours_design.full_weights if hasattr(ours_design, "full_weights")
                   else ours_design.weights, float)
    assert_rel(w, out[:w.shape[0]], tol=tol, what="weights")
    vals = []
    for method, _, kw in stats:
        fn, arg = method.split(":")
        res = getattr(ours_design, fn)(arg.split("+") if "+" in arg else arg, **kw)
        vals.append(np.r_[res.estimate.to_numpy(), res.se.to_numpy()])
    assert_rel(np.concatenate(vals), out[w.shape[0]:], tol=tol, what="estimates and SEs")


STATS = [("mean:api00", "svymean(~api00, g)", {}),
         ("total:enroll", "svytotal(~enroll, g)", {}),
         ("total:api.stu", "svytotal(~api.stu, g)", {})]


# ------------------------------------------------------------------------------- variance=
def test_ratio_estimator_examples(R, api):
    """?calibrate: variance=1 on ~enroll-1 is the common ratio estimator; variance=enroll."""
    d = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    g1 = d.calibrate("~enroll-1", {"enroll": 3811472}, variance=1)
    check(R, g1, DSTRAT, "calibrate(d, ~enroll-1, 3811472, variance=1)",
          [("total:api.stu", "svytotal(~api.stu, g)", {})])
    # equal to the ratio estimator's prediction (R's own comment)
    pr = R(f"local({{ d <- {DSTRAT}; p <- predict(svyratio(~api.stu, ~enroll, d, "
           "separate=FALSE), total=3811472); c(p$total, p$se) })")
    t = g1.total("api.stu")
    assert_rel(np.r_[t.estimate, t.se], pr, what="ratio estimator")
    gh = d.calibrate("~enroll-1", {"enroll": 3811472}, variance="enroll")
    check(R, gh, DSTRAT, "calibrate(d, ~enroll-1, 3811472, variance=apistrat$enroll)",
          [("total:api.stu", "svytotal(~api.stu, g)", {})])
    gh2 = d.calibrate("~enroll-1", {"enroll": 3811472},
                      variance=api["apistrat"]["enroll"].to_numpy())
    assert_rel(gh2.total("api.stu").se, gh.total("api.stu").se, tol=1e-14)


def test_variance_changes_the_answer(R, api):
    """A per-row working variance with several columns, linear (closed form) and raking
    (iterative): the variance enters g and (closed form only) the residuals, as in R."""
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    v = api["apiclus1"]["enroll"].to_numpy() / 100
    g = d.calibrate("~stype+api99", POP3, variance=v, allow_nonpositive=True)
    check(R, g, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, variance=apiclus1$enroll/100)",
          STATS + [("mean:awards", "svymean(~awards, g)", {})])
    plain = d.calibrate("~stype+api99", POP3)
    assert abs(plain.mean("api00").se[0] / g.mean("api00").se[0] - 1) > 1e-3
    gr = d.calibrate("~stype+api99", POP3, calfun="raking", variance=v)
    check(R, gr, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, calfun='raking', "
          "variance=apiclus1$enroll/100)", STATS)
    # one coefficient per column: sigma2 = X b
    b = [1.0, 0.5, 2.0, 0.001]
    gb = d.calibrate("~stype+api99", POP3, calfun="linear", bounds=(0.3, 3), variance=b)
    check(R, gb, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, bounds=c(0.3, 3), "
          "variance=c(1, 0.5, 2, 0.001))", STATS)


def test_variance_replicate_and_aggregate(R, api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    rd = d.jackknife("JK1")
    v = api["apiclus1"]["enroll"].to_numpy() / 100
    RREP = f"as.svrepdesign({DCLUS1}, type='JK1')"
    g = rd.calibrate("~stype+api99", POP3, variance=v, allow_nonpositive=True)
    check(R, g, RREP, f"calibrate(d, ~stype+api99, {R_POP3}, variance=apiclus1$enroll/100)",
          STATS)
    gl = rd.calibrate("~stype+api99", POP3, calfun="logit", bounds=(0.5, 2.5), variance=v)
    check(R, gl, RREP, f"calibrate(d, ~stype+api99, {R_POP3}, calfun='logit', "
          "bounds=c(0.5, 2.5), variance=apiclus1$enroll/100)", STATS)
    ga = d.calibrate("~stype", POP, variance=v, aggregate_stage=1, allow_nonpositive=True)
    check(R, ga, DCLUS1, "calibrate(d, ~stype, c(`(Intercept)`=6194, stypeH=755, "
          "stypeM=1018), variance=apiclus1$enroll/100, aggregate.stage=1)", STATS)


def test_variance_errors(api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    with pytest.raises(ValueError, match="one per row"):
        d.calibrate("~stype+api99", POP3, variance=[1, 2])
    with pytest.raises(ValueError, match="positive"):
        d.calibrate("~stype+api99", POP3, variance=np.zeros(d.n))
    with pytest.raises(ValueError, match="one value for 4"):
        d.calibrate("~stype+api99", POP3, variance=1)


# --------------------------------------------------------------------------- bounds_const=
def test_bounds_const_example(R, api):
    """?calibrate: 'the first weight will be bounded at 40, the rest free to move'."""
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    n = d.n
    lower = np.full(n, -np.inf)
    upper = np.r_[40.0, np.full(n - 1, np.inf)]
    g = d.calibrate("~stype+api99", POP3, bounds=(lower, upper), bounds_const=True)
    check(R, g, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, bounds=list(lower=rep(-Inf, "
          "nrow(apiclus1)), upper=c(40, rep(Inf, nrow(apiclus1)-1))), bounds.const=TRUE)",
          STATS)
    assert g.weights[0] == pytest.approx(40.0, rel=1e-9)
    free = d.calibrate("~stype+api99", POP3)
    assert free.weights[0] > 40.5  # the bound binds: a mutant ignoring it fails
    # scalar bounds on the weights: every weight within [20, 45]
    gs = d.calibrate("~stype+api99", POP3, bounds=(20, 60), bounds_const=True)
    check(R, gs, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, bounds=c(20, 60), "
          "bounds.const=TRUE)", STATS)
    assert gs.weights.max() <= 60 + 1e-6 and gs.weights.min() >= 20 - 1e-6
    # per-row bounds on the g-weights without bounds_const
    gp = d.calibrate("~stype+api99", POP3, bounds=(np.full(n, 0.6), np.r_[1.05, np.full(n - 1,
                                                                               1.8)]))
    check(R, gp, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, bounds=list(lower=rep(0.6, "
          "nrow(apiclus1)), upper=c(1.05, rep(1.8, nrow(apiclus1)-1))))", STATS)


def test_bounds_const_replicate_ignored_as_in_r(R, api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    rd = d.jackknife("JK1")
    with pytest.warns(UserWarning, match="ignored for replicate"):
        g = rd.calibrate("~stype+api99", POP3, bounds=(0.5, 2), bounds_const=True,
                         force=True)
    check(R, g, f"as.svrepdesign({DCLUS1}, type='JK1')",
          f"calibrate(d, ~stype+api99, {R_POP3}, bounds=c(0.5, 2), bounds.const=TRUE, force=TRUE)",
          STATS)
    with pytest.raises(ValueError, match="needs bounds"):
        d.calibrate("~stype+api99", POP3, bounds_const=True)


# ------------------------------------------------------------------------ list of margins
def _pop_tables(api):
    pop = api_pop()
    t1 = pop.groupby(["stype", "sch.wide"]).size().rename("Freq").reset_index()
    t2 = pop.groupby(["stype", "comp.imp"]).size()  # a Series with a MultiIndex
    return t1, t2


_APIPOP: list = []


def api_pop() -> pd.DataFrame:
    if not _APIPOP:
        from surveysynth.datasets import load_api
        _APIPOP.append(load_api("apipop"))
    return _APIPOP[0]


def test_list_of_margins_example(R, api):
    """?calibrate: 'Input in the same format as rake() for classical raking'."""
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    t1, t2 = _pop_tables(api)
    g = d.calibrate(["~stype+sch.wide", "~stype+comp.imp"], [t1, t2], calfun="raking")
    check(R, g, DCLUS1, "calibrate(d, formula=list(~stype+sch.wide, ~stype+comp.imp), "
          "population=list(xtabs(~stype+sch.wide, apipop), xtabs(~stype+comp.imp, apipop)), "
          "calfun='raking')", STATS + [("mean:awards", "svymean(~awards, g)", {})])
    # the same totals written out by hand give the same design
    pop = api_pop()
    by_hand = {"(Intercept)": len(pop)}
    for a in ("H", "M"):
        by_hand[f"stype{a}"] = int((pop.stype == a).sum())
    by_hand["sch.wideYes"] = int((pop["sch.wide"] == "Yes").sum())
    by_hand["comp.impYes"] = int((pop["comp.imp"] == "Yes").sum())
    for a in ("H", "M"):
        by_hand[f"stype{a}:sch.wideYes"] = int(((pop.stype == a) & (pop["sch.wide"] == "Yes"))
                                               .sum())
        by_hand[f"stype{a}:comp.impYes"] = int(((pop.stype == a) & (pop["comp.imp"] == "Yes"))
                                               .sum())
    h = d.calibrate("~stype*sch.wide+stype*comp.imp", by_hand, calfun="raking")
    assert_rel(h.weights, g.weights, tol=1e-12)
    # linear calibration to margins, one-variable margins as dicts, on a replicate design
    rd = d.jackknife("JK1")
    m1 = pop.stype.value_counts().to_dict()
    m2 = pop["sch.wide"].value_counts().to_dict()
    gr = rd.calibrate(["~stype", "~sch.wide"], [m1, m2])
    check(R, gr, f"as.svrepdesign({DCLUS1}, type='JK1')",
          "calibrate(d, list(~stype, ~sch.wide), list(xtabs(~stype, apipop), "
          "xtabs(~sch.wide, apipop)))", STATS)


def test_interaction_model_matrix(R, api):
    df = api["apiclus1"]
    mm, names = model_matrix(df, "~stype*sch.wide+api99*stype")
    r_names = list(ss_r_names(R, "~stype*sch.wide+api99*stype"))
    assert names == r_names
    rmm = R("as.vector(model.matrix(~stype*sch.wide+api99*stype, apiclus1))")
    assert_rel(mm.ravel(order="F"), rmm, tol=0)
    with pytest.raises(ValueError, match="lower-order"):
        model_matrix(df, "~stype:sch.wide")


def ss_r_names(R, f):
    from r_bridge import r_session
    with r_session("survey") as (ro, _):
        return [str(x) for x in ro.r(f"colnames(model.matrix({f}, apiclus1))")]


def test_margin_table_errors(api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    with pytest.raises(ValueError, match="one table per formula"):
        d.calibrate(["~stype", "~sch.wide"], [{"E": 1, "H": 2, "M": 3}])
    with pytest.raises(ValueError, match="not in the sample"):
        d.calibrate(["~stype"], [{"E": 4421, "H": 755, "M": 1018, "X": 3}])
    with pytest.raises(CalibrationError):
        d.calibrate("~stype+api99", POP3, bounds=(np.full(d.n, 2.0), np.full(d.n, 1.0)))


# ----------------------------------------------------------------- stage= (within clusters)
R_CLUS2 = "svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)"
R_STAGE_POP = ("lapply(unique(d$cluster[, 1]), function(k) c(api99=sum(apipop$api99["
               "apipop$dnum == k])))")


def test_stage_within_clusters(R, api):
    """R's regcalibrate(stage=1): per-district totals of api99 (from apipop), on apiclus2 with
    an fpc at both stages (the variance of stage 2 uses the within-district residuals)."""
    df = api["apiclus2"]
    d = ss.SurveyDesign(df, ids="~dnum+snum", fpc="~fpc1+fpc2")
    pop = api_pop()
    tot = pop.groupby("dnum")["api99"].sum()
    by_id = {k: {"api99": float(tot[k])} for k in df["dnum"].unique()}
    g = d.calibrate("~0+api99", by_id, stage=1)
    stats = [("mean:api00", "svymean(~api00, g)", {}), ("total:api00", "svytotal(~api00, g)", {}),
             ("mean:api99", "svymean(~api99, g)", {}),
             ("total:api.stu", "svytotal(~api.stu, g, na.rm=TRUE)", {"na_rm": True})]
    check(R, g, R_CLUS2, f"calibrate(d, ~0+api99, {R_STAGE_POP}, stage=1)", stats)
    # a list in order of first appearance gives the same design
    g2 = d.calibrate("~0+api99", [[float(tot[k])] for k in df["dnum"].unique()], stage=1)
    assert_rel(g2.mean("api00").se, g.mean("api00").se, tol=1e-14)
    # the residualization matters (a mutant without it gives the uncalibrated stage 2)
    by = g.mean("api00", by="stype")
    out = R(f"local({{ d <- {R_CLUS2}; g <- calibrate(d, ~0+api99, {R_STAGE_POP}, stage=1); "
            "s <- svyby(~api00, ~stype, g, svymean); c(coef(s), SE(s)) })")
    assert_rel(np.r_[by.estimate, by.se], out, what="by stype")
    # with weights= (R's allprob one column) stage 1 uses stage weights = the weights
    dw = ss.SurveyDesign(df, ids="~dnum+snum", fpc="~fpc1+fpc2", weights="pw")
    gw = dw.calibrate("~0+api99", by_id, stage=1)
    check(R, gw, "svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, weights=~pw, data=apiclus2)",
          f"calibrate(d, ~0+api99, {R_STAGE_POP}, stage=1)", stats[:2])
    with pytest.raises(ValueError, match="allprob"):
        dw.calibrate("~0+api99", by_id, stage=2)
    with pytest.raises(ValueError, match="calfun='linear'"):
        d.calibrate("~0+api99", by_id, stage=1, calfun="raking")
    with pytest.raises(ValueError, match="no population totals"):
        d.calibrate("~0+api99", dict(list(by_id.items())[:3]), stage=1)


# ------------------------------------------------------ calfun objects with these options
def test_calfun_objects_with_row_bounds_and_variance(R, api):
    """The calfun objects (``cal_sinh``, ``make_calfun``) combined with per-row bounds,
    ``bounds_const=`` and ``variance=``: the objects get R's per-row ``bounds`` list (a sinh
    that tested its bounds as scalars fails here) and the working variance divides x'eta."""
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    n = d.n
    g = d.calibrate("~stype+api99", POP3, calfun=ss.cal_sinh, bounds=(20, 60),
                    bounds_const=True)
    check(R, g, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, calfun=cal.sinh, "
          "bounds=c(20, 60), bounds.const=TRUE)", STATS)
    assert g.weights.max() <= 60 + 1e-6 and g.weights.min() >= 20 - 1e-6
    lo, up = np.full(n, 0.6), np.r_[1.05, np.full(n - 1, 1.8)]
    gp = d.calibrate("~stype+api99", POP3, calfun=ss.cal_sinh, bounds=(lo, up))
    check(R, gp, DCLUS1, f"calibrate(d, ~stype+api99, {R_POP3}, calfun=cal.sinh, "
          "bounds=list(lower=rep(0.6, nrow(apiclus1)), upper=c(1.05, rep(1.8, "
          "nrow(apiclus1)-1))))", STATS)
    hell = ss.make_calfun(lambda u, bounds: (1 - u / 2) ** -2 - 1,
                          lambda u, bounds: (1 - u / 2) ** -3, "hellinger distance")
    gv = d.calibrate("~stype+api99", POP3, calfun=hell, variance="api99")
    check(R, gv, DCLUS1, "calibrate(d, ~stype+api99, " + R_POP3 + ", calfun=make.calfun("
          "function(u, bounds) (1 - u/2)^-2 - 1, function(u, bounds) (1 - u/2)^-3, "
          "'hellinger distance'), variance=apiclus1$api99)", STATS)
    plain = d.calibrate("~stype+api99", POP3, calfun=hell)
    assert not np.allclose(plain.full_weights, gv.full_weights, rtol=1e-6)
