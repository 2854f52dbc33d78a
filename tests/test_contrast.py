"""vcov (covmat=True) and contrast equal R's vcov / svyby(covmat=TRUE) / svycontrast, live
through rpy2, to 1e-9: a stratified two-stage design with fpc, a one-stage cluster design, and
jackknife and BRR replicate designs; with and without domains, linear and nonlinear."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.contrasts import contrast, vcov
from tests.conftest import assert_rel

TOL = 1e-9

# a stratified two-stage design with an fpc at both stages, built the same way in R and here
# (districts with one sampled school are certainty selections at stage 2)
R_STRAT2 = (
    "local({ x <- apistrat; "
    "x$fpc1 <- ave(x$dnum, x$stype, FUN=function(v) 3 * length(unique(v))); "
    "x$fpc2 <- ave(x$snum, x$stype, x$dnum, FUN=function(v) "
    "if (length(v) == 1) 1 else 4 * length(v)); "
    "svydesign(id=~dnum+snum, strata=~stype, fpc=~fpc1+fpc2, nest=TRUE, data=x) })"
)
R_DESIGNS = {
    "strat2": R_STRAT2,
    "clus1": "svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1)",
    "strat_jkn": "as.svrepdesign(svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat), "
                 "type='JKn')",
    "clus1_jk1": "as.svrepdesign(svydesign(id=~dnum, weights=~pw, data=apiclus1), type='JK1')",
}


def strat2(api) -> ss.SurveyDesign:
    x = api["apistrat"].copy()
    x["fpc1"] = x.groupby("stype").dnum.transform(lambda v: 3 * v.nunique()).astype(float)
    x["fpc2"] = x.groupby(["stype", "dnum"]).snum.transform(
        lambda v: 1 if len(v) == 1 else 4 * len(v)).astype(float)
    return ss.SurveyDesign(x, ids=["dnum", "snum"], strata="stype", fpc=["fpc1", "fpc2"],
                           nest=True)


@pytest.fixture(scope="module")
def designs(api):
    jk1 = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw").jackknife()
    return {
        "strat2": strat2(api),
        "clus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
        "strat_jkn": ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw").jackknife(),
        "clus1_jk1": jk1,
    }


def assert_cov(ours, ref, tol: float = TOL, what: str = "") -> None:
    """Covariance matrices equal entrywise relative to sqrt(V_ii V_jj): an entry that is 0 in
    theory (the variance of a stratum count in a stratified design) is rounding noise on both
    sides and is compared on the scale of the matrix (variances floored at 1e-12 max V_ii)."""
    a = np.asarray(ours, float)
    e = np.asarray(ref, float).reshape(a.shape, order="F")
    d = np.diag(e)
    d = np.maximum(d, 1e-12 * d.max())
    err = np.abs(a - e) / np.sqrt(np.outer(d, d))
    assert np.isfinite(a).all() and err.max() <= tol, f"{what}: max err {err.max():.3g}"


def r_vec(R, name: str, expr: str) -> np.ndarray:
    return R(f"local({{ d <- {R_DESIGNS[name]}; as.vector({expr}) }})")


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_vcov_of_several_means_and_totals(R, designs, name):
    d = designs[name]
    out = d.mean(["api00", "api99", "enroll"], covmat=True)
    V = vcov(out)
    assert list(V.index) == ["api00", "api99", "enroll"]
    assert_rel(V.to_numpy(), r_vec(R, name, "vcov(svymean(~api00+api99+enroll, d))"), TOL,
               f"{name} vcov mean")
    # the diagonal is the SE the estimator reports without covmat
    assert_rel(np.sqrt(np.diag(V)), d.mean(["api00", "api99", "enroll"]).se, 1e-12)
    out = d.total(["api00", "stype"], covmat=True)
    assert_cov(vcov(out).to_numpy(), r_vec(R, name, "vcov(svytotal(~api00+stype, d))"), TOL,
               f"{name} vcov total with a factor")
    out = d.ratio(["api00", "api99"], "enroll", covmat=True)
    assert_rel(vcov(out).to_numpy(),
               r_vec(R, name, "vcov(svyratio(~api00+api99, ~enroll, d, covmat=TRUE))"), TOL,
               f"{name} vcov ratio")


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_vcov_by_domain(R, designs, name):
    d = designs[name]
    out = d.mean(["api00", "api99"], by="sch.wide", covmat=True)
    V = vcov(out)
    assert list(V.index) == ["No:api00", "No:api99", "Yes:api00", "Yes:api99"]
    ref = r_vec(R, name, "vcov(svyby(~api00+api99, ~sch.wide, d, svymean, covmat=TRUE))")
    # R orders svyby's coefficients variable-major (all domains of api00, then api99)
    perm = np.array([0, 2, 1, 3])
    ref = ref.reshape(4, 4, order="F")[np.ix_(perm, perm)]
    assert_rel(V.to_numpy(), ref, TOL, f"{name} vcov svyby")
    assert_rel(np.sqrt(np.diag(V)), out.se, 1e-12)
    out = d.total("enroll", by=["stype", "awards"], covmat=True)
    ref = r_vec(R, name, "vcov(svyby(~enroll, ~stype+awards, d, svytotal, covmat=TRUE))")
    assert_cov(vcov(out).to_numpy(), ref, TOL, f"{name} vcov svyby two factors")


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_contrasts(R, designs, name):
    d = designs[name]
    out = d.mean("api00", by="stype", covmat=True)
    names = list(vcov(out).index)
    assert names == ["E:api00", "H:api00", "M:api00"]
    c = contrast(out, {"E:api00": 1, "H:api00": -1})
    ref = r_vec(R, name, "local({ s <- svyby(~api00, ~stype, d, svymean, covmat=TRUE); "
                "x <- svycontrast(s, c(E=1, H=-1)); c(coef(x), SE(x)) })")
    assert_rel([c.estimate[0], c.se[0]], ref, TOL, f"{name} linear contrast")
    # several contrasts at once, by position, with their joint covariance
    c = contrast(out, {"EminusM": [1, 0, -1], "avg": [1 / 3, 1 / 3, 1 / 3]})
    ref = r_vec(R, name, "local({ s <- svyby(~api00, ~stype, d, svymean, covmat=TRUE); "
                "x <- svycontrast(s, list(EminusM=c(1,0,-1), avg=c(1/3,1/3,1/3))); "
                "c(coef(x), vcov(x)) })")
    assert_rel(c.estimate, ref[:2], TOL, f"{name} two contrasts")
    assert_rel(vcov(c).to_numpy().ravel(), ref[2:], TOL, f"{name} two contrasts vcov")
    # nonlinear: log ratio of two domain means, delta method
    c = contrast(out, lambda t: np.log(t["E:api00"] / t["H:api00"]))
    ref = r_vec(R, name, "local({ s <- svyby(~api00, ~stype, d, svymean, covmat=TRUE); "
                "x <- svycontrast(s, quote(log(E/H))); c(coef(x), SE(x)) })")
    assert_rel([c.estimate[0], c.se[0]], ref, TOL, f"{name} nonlinear contrast")
    # nonlinear in two variables without domains: api00 / api99 - 1 and exp of a difference
    out = d.mean(["api00", "api99"], covmat=True)
    c = contrast(out, {"rel": lambda t: t["api00"] / t["api99"] - 1,
                       "expdiff": lambda t: np.exp((t["api00"] - t["api99"]) / 100)})
    ref = r_vec(R, name, "local({ s <- svymean(~api00+api99, d); "
                "x <- svycontrast(s, list(rel=quote(api00/api99 - 1), "
                "expdiff=quote(exp((api00-api99)/100)))); c(coef(x), vcov(x)) })")
    assert_rel(c.estimate, ref[:2], TOL, f"{name} nonlinear pair")
    assert_rel(vcov(c).to_numpy().ravel(), ref[2:], TOL, f"{name} nonlinear pair vcov")


def test_vcov_and_contrast_errors(designs):
    d = designs["clus1"]
    plain = d.mean("api00", by="stype")
    with pytest.raises(ValueError, match="covmat=True"):
        vcov(plain)
    out = d.mean("api00", by="stype", covmat=True)
    with pytest.raises(ValueError, match="not those its covariance"):
        vcov(out[out.stype != "E"])
    with pytest.raises(ValueError, match=r"name\(s\) \['X:api00'\]"):
        contrast(out, {"X:api00": 1})
    with pytest.raises(ValueError, match="2 weights for 3 estimates"):
        contrast(out, [1, -1])
    with pytest.raises(ValueError, match="complex"):
        contrast(out, lambda t: float(t["E:api00"]) ** 2)
    with pytest.raises(ValueError, match="engine='native'"):
        d.mean("api00", covmat=True, engine="samplics")
    # the caller's gradient is used as given
    c = contrast(out, lambda t: float(np.real(t["E:api00"])) ** 2,
                 gradient=lambda t: [2 * t["E:api00"], 0, 0])
    v = vcov(out).to_numpy()
    e = out.estimate[0]
    assert c.se[0] == pytest.approx(2 * e * np.sqrt(v[0, 0]), rel=1e-12)
    assert isinstance(c, pd.DataFrame)


@pytest.mark.parametrize("lonely", ["adjust", "average", "remove", "certainty"])
def test_vcov_with_a_lonely_psu(R, api, lonely):
    """A stratum with one PSU: each lonely-PSU rule enters the covariance as R's svyrecvar."""
    x = api["apistrat"]
    h_districts = x[x.stype == "H"].dnum.unique()
    keep = (x.stype != "H") | (x.dnum == h_districts[0])
    sub = x[keep].reset_index(drop=True)
    d = ss.SurveyDesign(sub, ids="dnum", strata="stype", weights="pw", nest=True,
                        lonely_psu=lonely, survey_version="4.1")  # live R 4.1.1's "adjust"
    out = d.mean(["api00", "api99"], by="awards", covmat=True)
    V = vcov(out).to_numpy()
    with r_session_assign(sub):
        ref = R(f"local({{ options(survey.lonely.psu='{lonely}'); "
                "d <- svydesign(id=~dnum, strata=~stype, weights=~pw, nest=TRUE, data=py_sub); "
                "s <- svyby(~api00+api99, ~awards, d, svymean, covmat=TRUE); v <- vcov(s); "
                "m <- vcov(svymean(~api00+api99, d)); options(survey.lonely.psu='fail'); "
                "c(v, m) })")
    perm = np.array([0, 2, 1, 3])
    assert_cov(V, ref[:16].reshape(4, 4, order="F")[np.ix_(perm, perm)], TOL,
               f"lonely={lonely} svyby")
    assert_cov(vcov(d.mean(["api00", "api99"], covmat=True)).to_numpy(), ref[16:], TOL,
               f"lonely={lonely} svymean")


class r_session_assign:
    """Put a pandas frame into R's global environment as ``py_sub`` for the block."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame

    def __enter__(self):
        from r_bridge import r_session
        from r_bridge.convert import pandas_to_r

        with r_session("survey") as (ro, _):
            ro.globalenv["py_sub"] = pandas_to_r(self.frame)
        return self

    def __exit__(self, *exc):
        from r_bridge import r_session

        with r_session("survey") as (ro, _):
            ro.r("rm(py_sub)")
        return False
