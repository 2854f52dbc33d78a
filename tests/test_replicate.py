"""ReplicateDesign: exact parity with R survey on R-generated replicate weights, generators
(JK1, JKn, BRR, Fay, Rao-Wu) against R and closed forms, errors, immutability."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.replicate_design import ReplicateDesign
from surveysynth.variance.replicate_weights import rank_like_r, replicate_variance
from tests.conftest import assert_rel

TOL = 1e-10

# name -> (R data, R code building replicate design `rd` from svydesign `d`, python design args)
R_DESIGNS = {
    "strat_jkn": ("apistrat", "d <- svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, "
                  "data=apistrat); rd <- as.svrepdesign(d, type='JKn')"),
    "clus1_jk1": ("apiclus1", "d <- svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1); "
                  "rd <- as.svrepdesign(d, type='JK1')"),
    "clus2_brr": ("apiclus2", "x <- apiclus2; x$pair <- (match(x$dnum, sort(unique(x$dnum))) + 1) "
                  "%/% 2; d <- svydesign(id=~dnum, strata=~pair, weights=~pw, data=x); "
                  "rd <- as.svrepdesign(d, type='BRR')"),
    "clus2_fay": ("apiclus2", "x <- apiclus2; x$pair <- (match(x$dnum, sort(unique(x$dnum))) + 1) "
                  "%/% 2; d <- svydesign(id=~dnum, strata=~pair, weights=~pw, data=x); "
                  "rd <- as.svrepdesign(d, type='Fay', fay.rho=0.3)"),
    "clus2_mrb": ("apiclus2", "set.seed(7); d <- svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, "
                  "data=apiclus2); rd <- as.svrepdesign(d, type='mrbbootstrap', replicates=40)"),
    "strat_subboot": ("apistrat", "set.seed(8); d <- svydesign(id=~1, strata=~stype, "
                      "weights=~pw, data=apistrat); rd <- as.svrepdesign(d, "
                      "type='subbootstrap', replicates=60)"),
}


def _r(code: str) -> np.ndarray:
    """Evaluate R code (survey and data(api) loaded); a copied float vector."""
    with r_session("survey") as (ro, _):
        ro.r("if (!exists('apistrat')) { suppressMessages(library(survey)); data(api) }")
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def rdesigns(R, api):
    """Build each R replicate design once (global rd_<name>); return the pieces Python needs."""
    out = {}
    for name, (data, code) in R_DESIGNS.items():
        with r_session("survey") as (ro, _):
            ro.r(f"rd_{name} <- local({{ {code}; rd }})")
            M = np.array(ro.r(f"as.matrix(weights(rd_{name}, 'replication'))"), dtype=float)
            pw = np.array(ro.r(f"as.numeric(rd_{name}$pweights)"), dtype=float)
            scale = float(ro.r(f"rd_{name}$scale")[0])
            rscales = np.array(ro.r(f"rd_{name}$rscales"), dtype=float)
            rtype = str(ro.r(f"rd_{name}$type")[0])
            extra = {}
            if name.startswith("clus2_brr") or name.startswith("clus2_fay"):
                extra["pair"] = np.array(
                    ro.r("(match(apiclus2$dnum, sort(unique(apiclus2$dnum))) + 1) %/% 2"))
        df = api[data].copy()
        for k, v in extra.items():
            df[k] = v
        out[name] = dict(df=df, M=M, pw=pw, scale=scale, rscales=rscales, type=rtype)
    return out


def _py(rdesigns, name, mse=False, **kw):
    p = rdesigns[name]
    return ReplicateDesign(p["df"], repweights=p["M"], weights=p["pw"], type="other",
                           scale=p["scale"], rscales=p["rscales"], mse=mse,
                           combined_weights=False, **kw)


def _rstat(name: str, expr: str, mse: bool) -> tuple[np.ndarray, np.ndarray]:
    code = (f"local({{ rd <- rd_{name}; rd$mse <- {'TRUE' if mse else 'FALSE'}; s <- {expr}; "
            "c(as.numeric(coef(s)), as.numeric(SE(s))) })")
    v = _r(code)
    k = v.shape[0] // 2
    return v[:k], v[k:]


STATS = [
    ("mean", dict(variables=["api00", "api99"]), "svymean(~api00+api99, rd)"),
    ("total", dict(variables=["enroll"], na_rm=True), "svytotal(~enroll, rd, na.rm=TRUE)"),
    ("ratio", dict(numerator="api00", denominator="api99"), "svyratio(~api00, ~api99, rd)"),
    ("proportion", dict(variables="sch.wide"), "svymean(~sch.wide, rd)"),
    ("mean", dict(variables="api00", by="stype"), "svyby(~api00, ~stype, rd, svymean)"),
    ("total", dict(variables="enroll", by=["stype", "sch.wide"], na_rm=True),
     "svyby(~enroll, ~stype+sch.wide, rd, svytotal, na.rm=TRUE)"),
    ("ratio", dict(numerator="api00", denominator="api99", by="sch.wide"),
     "svyby(~api00, ~sch.wide, rd, svyratio, denominator=~api99)"),
]


@pytest.mark.parametrize("mse", [False, True])
@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_estimators_equal_R(rdesigns, name, mse):
    d = _py(rdesigns, name, mse=mse)
    for method, kwargs, expr in STATS:
        ours = getattr(d, method)(**kwargs)
        est, se = _rstat(name, expr, mse)
        assert_rel(ours.estimate, est, TOL, f"{name} {expr} estimate")
        assert_rel(ours.se, se, TOL, f"{name} {expr} se (mse={mse})")


@pytest.mark.parametrize("mse", [False, True])
@pytest.mark.parametrize("name", ["strat_jkn", "clus2_mrb", "clus2_brr"])
def test_quantiles_subset_deff_degf_equal_R(rdesigns, name, mse):
    d = _py(rdesigns, name, mse=mse)
    m = "TRUE" if mse else "FALSE"
    assert d.degf == _r(f"degf(rd_{name})")[0]
    q = d.quantile("api00", [0.25, 0.5, 0.9], survey_version="4.1")  # live R 4.1.1's rule
    ref = _r(f"local({{ rd <- rd_{name}; rd$mse <- {m}; "
             "s <- svyquantile(~api00, rd, c(.25,.5,.9)); "
             "c(coef(s), SE(s), confint(s)[,1], confint(s)[,2]) })").reshape(4, 3)
    assert_rel(q.estimate, ref[0], TOL, "quantile")
    assert_rel(q.se, ref[1], TOL, "quantile se")
    assert_rel(q.ci_low, ref[2], TOL, "quantile lower")
    assert_rel(q.ci_high, ref[3], TOL, "quantile upper")
    # quantiles by domain: each domain's own degf (R subsets the design)
    qb = d.quantile("api00", 0.5, by="stype", survey_version="4.1")
    ref = _r(f"local({{ rd <- rd_{name}; rd$mse <- {m}; "
             "s <- svyby(~api00, ~stype, rd, svyquantile, quantiles=0.5, ci=TRUE); "
             "c(coef(s), SE(s)) })").reshape(2, -1)
    assert_rel(qb.estimate, ref[0], TOL, "quantile by")
    assert_rel(qb.se, ref[1], TOL, "quantile by se")
    # subset (domain) and its degrees of freedom
    sub = d.subset(d.data["sch.wide"] == "Yes")
    ref = _r(f"local({{ rd <- subset(rd_{name}, sch.wide == 'Yes'); rd$mse <- {m}; "
             "s <- svymean(~api00, rd); c(coef(s), SE(s), degf(rd)) })")
    out = sub.mean("api00")
    assert_rel([out.estimate[0], out.se[0]], ref[:2], TOL, "subset mean")
    assert sub.degf == ref[2]
    # deff of a mean and a total (R svymean/svytotal deff=TRUE on the replicate design)
    ref = _r(f"local({{ rd <- rd_{name}; rd$mse <- {m}; "
             "c(deff(svymean(~api00, rd, deff=TRUE)), deff(svytotal(~api00, rd, deff=TRUE))) })")
    assert_rel(d.mean("api00", deff=True).deff, ref[:1], TOL, "deff mean")
    assert_rel(d.total("api00", deff=True).deff, ref[1:], TOL, "deff total")


def test_with_replicates_equals_R(rdesigns):
    for name in ["strat_jkn", "clus2_mrb"]:
        d = _py(rdesigns, name)
        out = d.with_replicates(lambda w, x: np.sum(w * x["api00"]) / np.sum(w))
        ref = _r(f"local({{ s <- withReplicates(rd_{name}, function(w, data) "
                 "sum(w*data$api00)/sum(w)); c(coef(s), SE(s)) })")
        assert_rel([out.estimate[0], out.se[0]], ref, TOL, "withReplicates")
        # agrees with the built-in mean
        assert_rel(out.se, d.mean("api00").se, 1e-12, "with_replicates vs mean")
        # vector-valued statistic keeps the Series names
        out2 = d.with_replicates(
            lambda w, x: pd.Series({"a": np.sum(w * x["api00"]), "b": np.sum(w)}))
        assert list(out2.variable) == ["a", "b"]


def test_combined_weights_and_type_defaults_equal_R(rdesigns):
    """User-supplied combined weights with svrepdesign's type rules (JKn needs rscales)."""
    p = rdesigns["strat_jkn"]
    A = p["M"] * p["pw"][:, None]
    with r_session("survey") as (ro, _):
        ro.r.assign("A_py", ro.r.matrix(ro.FloatVector(A.T.ravel()), nrow=A.shape[0]))
        ref = np.array(ro.r(
            "local({ r <- svrepdesign(data=apistrat, repweights=A_py, weights=~pw, type='JKn', "
            "rscales=rd_strat_jkn$rscales, combined.weights=TRUE); s <- svymean(~api00, r); "
            "b <- svrepdesign(data=apistrat, repweights=A_py, weights=~pw, type='BRR', "
            "combined.weights=TRUE); t <- svytotal(~enroll, b); "
            "c(coef(s), SE(s), coef(t), SE(t), degf(r)) })"), dtype=float)
    d = ReplicateDesign(p["df"], repweights=A, weights="pw", type="JKn", rscales=p["rscales"])
    out = d.mean("api00")
    assert_rel([out.estimate[0], out.se[0]], ref[:2], TOL)
    assert d.degf == ref[4]
    b = ReplicateDesign(p["df"], repweights=A, weights="pw", type="BRR")
    assert b.scale == pytest.approx(1 / A.shape[1], rel=1e-15)
    out = b.total("enroll")
    assert_rel([out.estimate[0], out.se[0]], ref[2:4], TOL)
    # column-name and regex forms give the same design as the matrix
    cols = [f"repw{j + 1}" for j in range(A.shape[1])]
    df = pd.concat([p["df"], pd.DataFrame(A, columns=cols, index=p["df"].index)], axis=1)
    for spec in (cols, "^repw[0-9]+$"):
        e = ReplicateDesign(df, repweights=spec, weights="pw", type="JKn", rscales=p["rscales"])
        assert_rel(e.mean("api00").se, d.mean("api00").se, 1e-14)


def test_generated_jackknife_and_brr_equal_R(api):
    """Our own JK1/JKn/BRR weights reproduce R's as.svrepdesign SEs (order-free)."""
    cases = [
        ("apistrat", dict(strata="stype", weights="pw", fpc="fpc"),
         "svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=apistrat)", "JKn"),
        ("apiclus1", dict(ids="dnum", weights="pw", fpc="fpc"),
         "svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1)", "JK1"),
        ("apiclus1", dict(ids="dnum", weights="pw"),
         "svydesign(id=~dnum, weights=~pw, data=apiclus1)", "JK1"),
    ]
    for data, kw, rdes, rtype in cases:
        d = ss.SurveyDesign(api[data], **kw)
        jk = d.jackknife()
        assert jk.type == rtype
        for mse in (False, True):
            jk.mse = mse
            ref = _r(f"local({{ rd <- as.svrepdesign({rdes}, type='{rtype}'); "
                     f"rd$mse <- {'TRUE' if mse else 'FALSE'}; s <- svymean(~api00+api99, rd); "
                     "t <- svyby(~api00, ~sch.wide, rd, svyratio, denominator=~api99); "
                     "c(coef(s), SE(s), coef(t), SE(t), degf(rd)) })")
            out = jk.mean(["api00", "api99"])
            assert_rel(np.r_[out.estimate, out.se], ref[:4], TOL, f"{data} {rtype}")
            out = jk.ratio("api00", "api99", by="sch.wide")
            assert_rel(np.r_[out.estimate, out.se], ref[4:8], TOL, f"{data} {rtype} ratio")
            assert jk.degf == ref[8]
    # BRR: for totals with 2 PSUs per stratum, any Hadamard matrix gives
    # sum_h (Z_h1 - Z_h2)^2 = R's BRR SE = R's linearization SE without fpc
    df = api["apiclus2"].copy()
    df["pair"] = _r("(match(apiclus2$dnum, sort(unique(apiclus2$dnum))) + 1) %/% 2")
    d = ss.SurveyDesign(df, ids="dnum", strata="pair", weights="pw")
    for rho in (0.0, 0.5):
        b = d.brr(fay_rho=rho)
        out = b.total(["api00", "enroll"], na_rm=True)
        ref = _r("local({ x <- apiclus2; x$pair <- (match(x$dnum, sort(unique(x$dnum))) + 1) %/% 2; "
                 "d <- svydesign(id=~dnum, strata=~pair, weights=~pw, data=x); "
                 f"rd <- as.svrepdesign(d, type='{'BRR' if rho == 0 else 'Fay'}', fay.rho={rho}); "
                 "c(SE(svytotal(~api00+enroll, rd, na.rm=TRUE)), "
                 "SE(svytotal(~api00+enroll, d, na.rm=TRUE)), degf(rd)) })")
        assert_rel(out.se, ref[:2], TOL, f"BRR rho={rho} vs R BRR")
        assert_rel(out.se, ref[2:4], TOL, f"BRR rho={rho} vs linearization")
        assert b.degf == ref[4]  # rank H + 1 -> H, whatever the Hadamard matrix


@pytest.mark.parametrize("lonely", ["adjust", "average", "remove"])
def test_jackknife_lonely_psu_equals_R(api, lonely):
    df = api["apistrat"].copy()
    df["s2"] = df["stype"].astype(str)
    df.loc[df.index[0], "s2"] = "X"
    d = ss.SurveyDesign(df, strata="s2", weights="pw", lonely_psu=lonely)
    out = d.jackknife().mean(["api00", "enroll"])
    ref = _r(f"local({{ options(survey.lonely.psu='{lonely}'); x <- apistrat; "
             "x$s2 <- as.character(x$stype); x$s2[1] <- 'X'; "
             "d <- svydesign(id=~1, strata=~s2, weights=~pw, data=x); "
             "r <- as.svrepdesign(d, type='JKn'); s <- svymean(~api00+enroll, r); "
             "options(survey.lonely.psu='fail'); c(SE(s), degf(r)) })")
    assert_rel(out.se, ref[:2], TOL, f"JKn lonely={lonely}")
    assert out.df[0] == ref[2]


def test_rao_wu_distribution_and_variance(api):
    """Rao-Wu factors: mean 1 and variance 1 per PSU; bootstrap variance of a total close to
    the with-replacement linearization variance (tolerance from the Monte Carlo error)."""
    d = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw")
    R = 4000
    rw = d.bootstrap(R, method="rao-wu", seed=3, progress=False)
    F = rw.replicate_weights("replication")
    # each row: n_h - 1 draws among n_h: factor k n/(n-1), E = 1, Var = 1
    mean_se = 1 / np.sqrt(R)
    assert np.abs(F.mean(axis=1) - 1).max() < 5 * mean_se
    # per stratum, the draws total n_h - 1 each replicate (factors sum to n_h)
    for s in ("E", "H", "M"):
        rows = (d.data["stype"] == s).to_numpy()
        assert np.allclose(F[rows].sum(axis=0), rows.sum())
    out = rw.total("enroll")
    lin = d.total("enroll")
    # MC error of the variance estimate from the replicates themselves
    th = (F * d.weights[:, None] * d.data["enroll"].to_numpy()[:, None]).sum(axis=0)
    dev2 = (th - th.mean()) ** 2
    rel_mcse = dev2.std() / np.sqrt(R) / dev2.mean()
    ratio = (out.se[0] / lin.se[0]) ** 2
    assert abs(ratio - 1) < 4 * rel_mcse, (ratio, rel_mcse)


def test_seed_reproducible_and_no_mutation(api):
    df = api["apiclus2"]
    before = df.copy(deep=True)
    d = ss.SurveyDesign(df, ids="~dnum+snum", fpc="~fpc1+fpc2")
    a = d.bootstrap(30, seed=11, progress=False)
    b = d.bootstrap(30, seed=11, progress=False)
    c = d.bootstrap(30, seed=12, progress=False)
    g = d.bootstrap(30, seed=np.random.default_rng(11), progress=False)
    assert np.array_equal(a.replicate_weights(), b.replicate_weights())
    assert np.array_equal(a.replicate_weights(), g.replicate_weights())
    assert not np.array_equal(a.replicate_weights(), c.replicate_weights())
    r1 = d.bootstrap(30, method="rao-wu", seed=5, progress=False)
    r2 = d.bootstrap(30, method="rao-wu", seed=5, progress=False)
    assert np.array_equal(r1.replicate_weights(), r2.replicate_weights())
    a.mean("api00", by="stype")
    a.subset(a.data["stype"] == "E").total("enroll", na_rm=True)
    ReplicateDesign(df, repweights=a.replicate_weights(), weights=d.weights, type="bootstrap",
                    combined_weights=True).mean("api00")
    pd.testing.assert_frame_equal(df, before)


def test_float32_storage_matches_float64(api):
    d = ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2")
    a = d.bootstrap(200, seed=1, progress=False)
    b = d.bootstrap(200, seed=1, progress=False, dtype=np.float32)
    assert b.nbytes < 0.6 * a.nbytes
    assert_rel(b.mean("api00").se, a.mean("api00").se, 1e-5)


def test_replicate_variance_and_rank_helpers():
    rng = np.random.default_rng(0)
    th = rng.normal(size=(30, 3))
    rs = rng.uniform(0.5, 1.5, 30)
    rs[3] = 0.0
    v, dropped = replicate_variance(th, np.zeros(3), 0.7, rs, mse=False)
    centre = th[rs > 0].mean(axis=0)
    brute = [0.7 * sum(rs[r] * (th[r, j] - centre[j]) ** 2 for r in range(30)) for j in range(3)]
    assert_rel(v, brute, 1e-13)
    v, _ = replicate_variance(th, np.ones(3), 0.7, rs, mse=True)
    assert_rel(v, 0.7 * (rs[:, None] * (th - 1) ** 2).sum(axis=0), 1e-13)
    th[2, 1] = np.nan
    with pytest.warns(UserWarning, match="discarded"):
        from surveysynth.variance.replicate_weights import warn_dropped

        v2, dropped = replicate_variance(th, np.zeros(3), 1.0, np.ones(30), mse=False)
        warn_dropped(dropped)
    keep = np.r_[0:2, 3:30]
    assert_rel(v2[1], ((th[keep, 1] - th[keep, 1].mean()) ** 2).sum(), 1e-13)
    # rank with R's rule: exact dependencies found, independent columns kept
    A = rng.normal(size=(50, 6))
    A[:, 4] = A[:, 0] + 2 * A[:, 1]
    A[:, 5] = 0
    assert rank_like_r(A.T @ A) == 4 == np.linalg.matrix_rank(A)


def test_errors(api):
    df = api["apistrat"]
    n = df.shape[0]
    M = np.ones((n, 5))
    with pytest.raises(ValueError, match=r"shape \(10, 5\).*\(200, R\)"):
        ReplicateDesign(df, repweights=np.ones((10, 5)), weights="pw", type="other", scale=1,
                        rscales=1)
    bad = M.copy()
    bad[[3, 7], 2] = np.nan
    with pytest.raises(ValueError, match="'replicate 3'.*rows '4', '8'"):
        ReplicateDesign(df, repweights=bad, weights="pw", type="bootstrap",
                        combined_weights=False)
    with pytest.raises(ValueError, match="rscales has length 3, should be 5"):
        ReplicateDesign(df, repweights=M, weights="pw", type="other", scale=1,
                        rscales=[1, 1, 1], combined_weights=False)
    with pytest.raises(ValueError, match="JKn.*rscales"):
        ReplicateDesign(df, repweights=M * 40, weights="pw", type="JKn")
    with pytest.raises(ValueError, match="rho"):
        ReplicateDesign(df, repweights=M, weights="pw", type="Fay", combined_weights=False)
    with pytest.raises(ValueError, match="no column name matches"):
        ReplicateDesign(df, repweights="^nothing_here", weights="pw", type="BRR")
    # Preston without any stratum that has two PSUs
    tiny = pd.DataFrame({"s": [1, 2, 3], "y": [1.0, 2.0, 3.0], "w": [1.0, 1.0, 1.0]})
    d = ss.SurveyDesign(tiny, strata="s", weights="w", lonely_psu="certainty")
    with pytest.raises(ValueError, match="no stage-1 stratum has two or more PSUs"):
        d.bootstrap(10, seed=1, progress=False)
    with pytest.raises(ValueError, match="single PSU"):
        d.bootstrap(10, method="rao-wu", seed=1, progress=False)
    with pytest.raises(ValueError, match="method="):
        ss.SurveyDesign(df, strata="stype", weights="pw").bootstrap(10, method="efron")
    with pytest.raises(ValueError, match="engine='samplics'"):
        ss.SurveyDesign(df, strata="stype", weights="pw").jackknife().mean("api00", engine="samplics")
    with pytest.raises(ValueError, match="exactly 2 PSUs"):
        ss.SurveyDesign(df, strata="stype", weights="pw").brr()
