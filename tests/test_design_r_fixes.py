"""The four cases of issue 19 where we differed from R survey, now R's behaviour, checked live
through rpy2: df 0 domains (NaN t intervals, flagged in tables), BRR Hadamard rows in sorted
stratum order and R's reading of a user Hadamard matrix, scalar weights, and df=."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from tests.conftest import assert_rel

TOL = 1e-9


def r_data(name: str) -> pd.DataFrame:
    with r_session("survey") as (ro, _):
        return r_to_pandas(ro.r(f"local({{ data({name}); {name} }})"))


@pytest.fixture(scope="module")
def nhanes2():
    """nhanes without the third PSU of stratum 86, so every stratum has two PSUs (BRR)."""
    x = r_data("nhanes")
    return x[x.SDMVPSU < 3].reset_index(drop=True)


R_NHANES_BRR = ("local({ data(nhanes); x <- subset(nhanes, SDMVPSU < 3); "
                "d <- svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, nest=TRUE, "
                "data=x); b <- as.svrepdesign(d, type='BRR'); ")


def test_brr_rows_in_sorted_stratum_order_as_R(R, nhanes2):
    # nhanes strata appear out of order in the file (83, 84, 86, 75, ...): R gives Hadamard
    # rows to strata in sorted label order; first-appearance order gave SE 0.005538
    assert list(pd.unique(nhanes2.SDMVSTRA))[:3] != sorted(pd.unique(nhanes2.SDMVSTRA))[:3]
    d = ss.SurveyDesign(nhanes2, ids="SDMVPSU", strata="SDMVSTRA", weights="WTMEC2YR", nest=True)
    b = d.brr()
    ours = b.mean("HI_CHOL", na_rm=True)
    ref = R(R_NHANES_BRR + "s <- svymean(~HI_CHOL, b, na.rm=TRUE); c(coef(s), SE(s), "
            "ncol(b$repweights$weights)) })")
    assert b.replicates == ref[2]
    assert_rel([ours.estimate[0], ours.se[0]], ref[:2], TOL, "nhanes BRR mean")
    assert round(ref[1], 6) == 0.005711  # the value quoted in issue 19
    # Fay as well, and by domain (nonlinear statistics see the half-sample assignment)
    ours = d.brr(fay_rho=0.3).mean("HI_CHOL", by="race", na_rm=True)
    ref = R("local({ data(nhanes); x <- subset(nhanes, SDMVPSU < 3); "
            "d <- svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, nest=TRUE, "
            "data=x); b <- as.svrepdesign(d, type='Fay', fay.rho=0.3); "
            "s <- svyby(~HI_CHOL, ~race, b, svymean, na.rm=TRUE); c(coef(s), SE(s)) })")
    assert_rel(np.r_[ours.estimate, ours.se], ref, TOL, "nhanes Fay by race")


def test_brr_user_hadamard_read_as_R(R):
    scd = r_data("scd")
    paley = R("as.vector(paley(11))").reshape(12, 12, order="F")
    d = ss.SurveyDesign(scd, ids="ambulance", strata="ESA", nest=True, weights=1)
    ours = d.brr(hadamard=paley).ratio("alive", "arrests")
    ref = R("local({ data(scd); s <- svydesign(data=scd, prob=~1, id=~ambulance, strata=~ESA, "
            "nest=TRUE); b <- as.svrepdesign(s, type='BRR', hadamard.matrix=paley(11)); "
            "r <- svyratio(~alive, ~arrests, b); c(coef(r), SE(r)) })")
    assert_rel([ours.estimate[0], ours.se[0]], ref, TOL, "scd paley(11) ratio")
    assert round(ref[1], 6) == 0.010015  # issue 19's value; the old reading gave 0.009721
    # the same matrix with its two values swapped is read the other way round, as R does
    flipped = d.brr(hadamard=1 - paley).ratio("alive", "arrests")
    ref2 = R("local({ data(scd); s <- svydesign(data=scd, prob=~1, id=~ambulance, "
             "strata=~ESA, nest=TRUE); b <- as.svrepdesign(s, type='BRR', "
             "hadamard.matrix=1 - paley(11)); SE(svyratio(~alive, ~arrests, b)) })")
    assert_rel(flipped.se[0], ref2[0], TOL, "scd flipped paley")


def test_default_hadamard_is_R_for_1_to_7_and_12_to_15_strata(R):
    from surveysynth.variance.replicate_weights import sylvester_hadamard

    for h in (*range(1, 8), *range(12, 16)):
        r = R(f"as.vector(hadamard({h}))")
        k = int(round(np.sqrt(r.shape[0])))
        ours = sylvester_hadamard(max(h + 1, 4)) > 0
        assert ours.shape == (k, k) and (ours == (r.reshape(k, k, order="F") == 1)).all(), h


def test_scalar_weights(R):
    scd = r_data("scd")
    d = ss.SurveyDesign(scd, ids="ambulance", strata="ESA", nest=True, weights=1)
    ours = d.total(["alive", "arrests"])
    ref = R("local({ data(scd); s <- svydesign(data=scd, prob=~1, id=~ambulance, strata=~ESA, "
            "nest=TRUE); t <- svytotal(~alive+arrests, s); c(coef(t), SE(t)) })")
    assert_rel(np.r_[ours.estimate, ours.se], ref, TOL, "scd weights=1")
    assert (d.weights == 1).all()
    p = ss.SurveyDesign(scd, ids="ambulance", strata="ESA", nest=True, probs=0.5)
    assert (p.weights == 2).all()
    with pytest.raises(ValueError, match="weights: got 3 values for 6 rows"):
        ss.SurveyDesign(scd, ids="ambulance", strata="ESA", nest=True, weights=np.array([1.0, 2, 3]))
    with pytest.raises(ValueError, match="positive and finite"):
        ss.SurveyDesign(scd, ids="ambulance", strata="ESA", nest=True, weights=0)
    rep = ss.ReplicateDesign(scd, repweights=np.ones((6, 2)) * [[0.5, 1.5]], weights=1,
                             type="JK2")
    assert (rep.weights == 1).all()


def test_df_zero_domain_gives_nan_as_R(R, api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    rd = "svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1)"
    # one PSU per domain: df 0, R's qt(., 0) is NaN: no quantile interval or SE
    q = d.quantile("api00", 0.5, by="dnum")
    ref = R(f"local({{ d <- {rd}; s <- suppressWarnings(svyby(~api00, ~dnum, d, svyquantile, "
            "quantiles=0.5, ci=TRUE)); c(coef(s), SE(s)) })")
    assert (q.df == 0).all()
    assert_rel(q.estimate, ref[:15], TOL, "quantile by dnum")
    assert np.isnan(ref[15:]).all() and q.se.isna().all()
    assert q.ci_low.isna().all() and q.ci_high.isna().all()
    # a mean over one PSU: SE 0 (R too), t interval NaN (R's confint(df=0))
    sub = d.subset(d.data.dnum == 413)
    m = sub.mean("api00", ci="t")
    ref = R(f"local({{ d <- subset({rd}, dnum == 413); m <- svymean(~api00, d); "
            "c(coef(m), SE(m), suppressWarnings(confint(m, df=degf(d)))) })")
    assert_rel([m.estimate[0], m.se[0]], ref[:2], TOL)
    assert np.isnan(ref[2:]).all() and np.isnan([m.ci_low[0], m.ci_high[0]]).all()
    # tabulate flags such a cell although its CV (0) passes
    t = ss.tabulate(sub, rows="stype", value="api00", stat="mean", cv_max=0.3, n_min=None)
    cell = t.long[(t.long.cell == "interior") & (t.long.n_unweighted > 0)]
    assert len(cell) >= 1 and (cell.df == 0).all() and cell.flag.all()
    assert cell.flag_reason.str.contains("df=0").all()
    assert (cell.cv.fillna(0) <= 0.3).all()


def test_df_option_full_design_df_as_R_examples(R, api):
    d = ss.SurveyDesign(api["apistrat"], ids="dnum", strata="stype", weights="pw", nest=True)
    rd = "svydesign(id=~dnum, strata=~stype, weights=~pw, nest=TRUE, data=apistrat)"
    ours = d.mean("api00", by="awards", ci="t", df="design")
    ref = R(f"local({{ d <- {rd}; s <- svyby(~api00, ~awards, d, svymean); "
            "as.vector(confint(s, df=degf(d))) })")
    assert_rel(np.r_[ours.ci_low, ours.ci_high], ref, TOL, "confint df=degf(design)")
    assert (ours.df == d.degf).all()
    own = d.mean("api00", by="awards", ci="t")
    assert (own.df < d.degf).all() and (own.ci_high - own.ci_low > ours.ci_high - ours.ci_low).all()
    q = d.quantile("api00", [0.25, 0.5], by="awards", df="design")
    ref = R(f"local({{ d <- {rd}; s <- svyby(~api00, ~awards, d, svyquantile, "
            "quantiles=c(0.25, 0.5), ci=TRUE, df=degf(d)); c(coef(s), as.vector(t(SE(s)))) })")
    # R's coef is quantile-major, SE domain-major
    est = q.estimate.to_numpy().reshape(2, 2).T.ravel()
    assert_rel(np.r_[est, q.se], ref, TOL, "quantile df=degf(design)")
    fixed = d.mean("api00", ci="t", df=12)
    ref = R(f"local({{ d <- {rd}; as.vector(confint(svymean(~api00, d), df=12)) }})")
    assert_rel([fixed.ci_low[0], fixed.ci_high[0]], ref, TOL)
    for bad in ("full", -1, "x"):
        with pytest.raises(ValueError, match="df="):
            d.mean("api00", df=bad)


def test_cv_and_n_columns(R, api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    out = d.mean(["api00", "enroll"], by="stype")
    assert list(out.columns) == ["stype", "variable", "estimate", "se", "ci_low", "ci_high",
                                 "df", "cv", "n"]
    ref = R("local({ d <- svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1); "
            "s <- svyby(~api00+enroll, ~stype, d, svymean); c(t(cv(s))) })")
    assert_rel(out.cv, ref, TOL, "cv")
    counts = api["apiclus1"].stype.value_counts().sort_index()
    assert (out.n.to_numpy() == np.repeat(counts.to_numpy(), 2)).all()
    out = d.mean("enroll", na_rm=True)
    assert out.n[0] == api["apiclus1"].enroll.notna().sum()
