"""svyglm against R survey::svyglm (live R through rpy2): coefficients, SEs, df, vcov, CIs,
p values and predictions to 1e-8, on linearization designs (apistrat: stratified with fpc;
apiclus2: two-stage clusters with fpc) and replicate designs (R's JK1 of apiclus2 and R's
bootstrap of apistrat, their replicate weights exported), for gaussian, binomial and poisson
(with offset); subsets, missing values, errors; and SyntheticRelease.glm against a hand
computation of the release's combining rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.analysis import svyglm
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8

R_SETUP = """
suppressMessages(library(survey)); data(api)
gl_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=apistrat)
gl_dclus2 <- svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)
gl_rclus2 <- as.svrepdesign(gl_dclus2, type='JK1')
set.seed(20); gl_rstrat <- as.svrepdesign(gl_dstrat, type='subbootstrap', replicates=40)
"""


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _rep_from_r(name: str, data: pd.DataFrame) -> ReplicateDesign:
    M = _r(f"as.matrix(weights({name}, 'analysis'))")
    pw = _r(f"as.numeric({name}$pweights)")
    scale = float(_r(f"{name}$scale")[0])
    rscales = _r(f"{name}$rscales")
    mse = bool(_r(f"as.numeric({name}$mse)")[0])
    return ReplicateDesign(data, repweights=M, weights=pw, type="other", scale=scale,
                           rscales=rscales, mse=mse, combined_weights=True)


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat, clus2 = api["apistrat"], api["apiclus2"]
    return {
        "gl_dstrat": ss.SurveyDesign(strat, strata="stype", weights="pw", fpc="fpc"),
        "gl_dclus2": ss.SurveyDesign(clus2, ids=["dnum", "snum"], fpc=["fpc1", "fpc2"]),
        "gl_rclus2": _rep_from_r("gl_rclus2", clus2),
        "gl_rstrat": _rep_from_r("gl_rstrat", strat),
    }


# (python formula, R formula, family)
MODELS = {
    "gaussian": ("api00 ~ ell + meals + mobility + stype", "api00 ~ ell + meals + mobility + stype",
                 "gaussian"),
    "binomial": ("sch.wide ~ ell + meals + np.log(api.stu)", "sch.wide ~ ell + meals + log(api.stu)",
                 "binomial"),
    "poisson": ("api.stu ~ ell + meals + offset(np.log(api99))",
                "api.stu ~ ell + meals + offset(log(api99))", "poisson"),
}


def _r_fit(design: str, formula: str, family: str, extra: str = "") -> dict[str, np.ndarray]:
    with r_session("survey") as (ro, _):
        ro.r(f"gl_m <- suppressWarnings(svyglm({formula}, {design}, family={family}(){extra}))")
        out = {k: np.array(ro.r(code), dtype=float) for k, code in {
            "coef": "coef(gl_m)", "se": "SE(gl_m)", "df": "gl_m$df.residual",
            "vcov": "as.vector(vcov(gl_m))", "p": "summary(gl_m)$coefficients[, 4]",
            "t": "summary(gl_m)$coefficients[, 3]", "ci": "as.vector(confint(gl_m))",
        }.items()}
    return out


def _compare(res, ref, what: str) -> float:
    p = res.params.shape[0]
    assert_rel(res.params, ref["coef"], TOL, f"{what} coef")
    assert_rel(res.bse, ref["se"], TOL, f"{what} se")
    assert res.df_resid == ref["df"][0], f"{what}: df {res.df_resid} vs R {ref['df'][0]}"
    assert_rel(res.tvalues, ref["t"], TOL, f"{what} t")
    assert_rel(res.pvalues, ref["p"], TOL, f"{what} p")
    ci = res.conf_int()
    assert_rel(np.concatenate([ci["lower"], ci["upper"]]), ref["ci"], TOL, f"{what} ci")
    V = res.vcov().to_numpy()
    Vr = ref["vcov"].reshape(p, p, order="F")
    scale = np.sqrt(np.outer(np.diag(Vr), np.diag(Vr)))
    err = float(np.max(np.abs(V - Vr) / scale))
    assert err <= TOL, f"{what} vcov max err {err:.3g}"
    worst = max(float(np.max(np.abs(res.params - ref["coef"]) / np.abs(ref["coef"]))),
               float(np.max(np.abs(res.bse - ref["se"]) / ref["se"])), err)
    print(f"{what}: max rel diff vs R {worst:.2e}")
    return worst


@pytest.mark.parametrize("design", ["gl_dstrat", "gl_dclus2", "gl_rclus2", "gl_rstrat"])
@pytest.mark.parametrize("model", list(MODELS))
def test_svyglm_equals_R(designs, design, model):
    py_f, r_f, fam = MODELS[model]
    res = svyglm(py_f, designs[design], family=fam)
    ref = _r_fit(design, r_f, fam)
    _compare(res, ref, f"{design} {model}")


@pytest.mark.parametrize("fam", ["quasibinomial", "quasipoisson"])
def test_quasi_families_equal_R(designs, fam):
    py_f, r_f, _ = MODELS["binomial" if fam == "quasibinomial" else "poisson"]
    for design in ("gl_dclus2", "gl_rstrat"):
        _compare(svyglm(py_f, designs[design], family=fam), _r_fit(design, r_f, fam),
                 f"{design} {fam}")


def test_offset_argument_equals_offset_term(designs):
    """offset= (a column expression or an array) gives the same fit as an offset() term, and
    the offset matters (a fit without it differs)."""
    d = designs["gl_dstrat"]
    a = svyglm("api.stu ~ ell + meals + offset(np.log(enroll))", d, family="poisson")
    b = svyglm("api.stu ~ ell + meals", d, family="poisson", offset="np.log(enroll)")
    c = svyglm("api.stu ~ ell + meals", d, family="poisson",
               offset=np.log(d.data["enroll"].to_numpy(dtype=float)))
    none = svyglm("api.stu ~ ell + meals", d, family="poisson")
    assert_rel(b.params, a.params, 1e-12, "offset=expr")
    assert_rel(c.bse, a.bse, 1e-12, "offset=array")
    assert np.max(np.abs(none.params - a.params)) > 0.1


def test_subset_and_probit_equal_R(designs):
    """A domain (subset keeps the full design for the variance) and a non-canonical link."""
    d = designs["gl_dclus2"]
    sub = d.subset(d.data["stype"] != "H")
    res = svyglm("api00 ~ ell + meals", sub)
    _compare(res, _r_fit("subset(gl_dclus2, stype != 'H')", "api00 ~ ell + meals",
                         "gaussian"), "subset")
    rs = designs["gl_rclus2"]
    res = svyglm("api00 ~ ell + meals", rs.subset(rs.data["stype"] != "H"))
    _compare(res, _r_fit("subset(gl_rclus2, stype != 'H')", "api00 ~ ell + meals",
                         "gaussian"), "replicate subset")
    res = svyglm("sch.wide ~ ell + meals", designs["gl_dstrat"], family="binomial",
                 link="probit")
    ref = _r_fit("gl_dstrat", "sch.wide ~ ell + meals", "binomial", extra="")
    with r_session("survey") as (ro, _):
        ro.r("gl_m <- suppressWarnings(svyglm(sch.wide ~ ell + meals, gl_dstrat, "
             "family=binomial(link='probit')))")
        ref = {k: np.array(ro.r(c), dtype=float) for k, c in {
            "coef": "coef(gl_m)", "se": "SE(gl_m)", "df": "gl_m$df.residual",
            "vcov": "as.vector(vcov(gl_m))", "p": "summary(gl_m)$coefficients[, 4]",
            "t": "summary(gl_m)$coefficients[, 3]", "ci": "as.vector(confint(gl_m))"}.items()}
    _compare(res, ref, "probit")


def test_missing_values_na_rm_equals_R(designs):
    """apiclus2's acs.k3 has missing values: an error naming the column without na_rm; with
    na_rm the rows leave the fit but not the design, as R's na.omit in svyglm."""
    d = designs["gl_dclus2"]
    assert d.data["acs.k3"].isna().any()
    with pytest.raises(ValueError, match=r"acs\.k3.*na_rm=True"):
        svyglm("api00 ~ acs.k3 + meals", d)
    res = svyglm("api00 ~ acs.k3 + meals", d, na_rm=True)
    _compare(res, _r_fit("gl_dclus2", "api00 ~ acs.k3 + meals", "gaussian"), "na_rm taylor")
    res = svyglm("api00 ~ acs.k3 + meals", designs["gl_rclus2"], na_rm=True)
    _compare(res, _r_fit("gl_rclus2", "api00 ~ acs.k3 + meals", "gaussian"), "na_rm rep")


def test_predict_equals_R(designs, api):
    new = api["apiclus2"].iloc[:6]
    for design in ("gl_dstrat", "gl_rclus2"):
        res = svyglm("sch.wide ~ ell + meals", designs[design], family="binomial")
        for typ in ("link", "response"):
            p = res.predict(new, type=typ)
            with r_session("survey") as (ro, _):
                ro.r(f"gl_m <- suppressWarnings(svyglm(sch.wide ~ ell + meals, {design}, "
                     f"family=binomial())); gl_p <- predict(gl_m, newdata=apiclus2[1:6, ], "
                     f"type='{typ}')")
                fit = np.array(ro.r("as.vector(coef(gl_p))"), dtype=float)
                se = np.sqrt(np.array(ro.r("as.vector(attr(gl_p, 'var'))"), dtype=float))
            assert_rel(p["fit"], fit, TOL, f"{design} predict {typ}")
            assert_rel(p["se"], se, TOL, f"{design} predict se {typ}")


def test_summary_text_and_html(designs):
    res = svyglm("api00 ~ ell + meals", designs["gl_dstrat"])
    s = res.summary()
    assert "design df = 197" in s.text and "residual df = 195" in s.text
    assert "meals" in s.text and "<table" in s.html and s._repr_html_() == s.html
    assert list(s.table.columns) == ["estimate", "se", "t", "p", "lower", "upper"]


def test_errors_and_no_mutation(api):
    data = api["apistrat"].copy()
    before = data.copy()
    d = ss.SurveyDesign(data, strata="stype", weights="pw", fpc="fpc")
    with pytest.raises(ValueError, match="family='logistic'"):
        svyglm("api00 ~ ell", d, family="logistic")
    with pytest.raises(ValueError, match=r"rank deficient.*aliased terms \['ell2'\]"):
        data2 = data.assign(ell2=2 * data["ell"])
        svyglm("api00 ~ ell + ell2", ss.SurveyDesign(data2, strata="stype", weights="pw"))
    with pytest.raises(ValueError, match="nosuch"):
        svyglm("api00 ~ nosuch", d)
    with pytest.raises(ValueError, match="outside \\[0, 1\\]"):
        svyglm("api00 ~ ell", d, family="binomial")
    with pytest.raises(ValueError, match="not finite"):
        svyglm("api00 ~ np.log(ell)", d)  # ell has zeros
    with pytest.raises(ValueError, match="formula"):
        svyglm("api00", d)
    svyglm("api00 ~ ell", d)
    pd.testing.assert_frame_equal(data, before)


# ------------------------------------------------------------------ SyntheticRelease.glm
def _release(frames, kind, n_original=None):
    from surveysynth.privacy.record import build_record
    from surveysynth.release import SyntheticRelease

    designs = [ss.SurveyDesign(f, strata="stype", weights="pw", fpc="fpc") for f in frames]
    rec = build_record("none", "test copy", m=len(frames), epsilon=None, seeded=True,
                       notes=["test"])
    return SyntheticRelease(designs, kind, rec, n_original=n_original), designs


def _hand_rule(q, u, kind, n, n_syn, nu_com=np.inf):
    """The combining rules written out (METHODS section 4), independent of combine.py; the df
    capped by the residual df nu_com (issue 36, D8: (1/df + 1/nu_obs)^-1, nu_obs = nu_com
    (nu_com+1)/(nu_com+3) (1 - gamma), gamma = (b/m)/T partial, 0 full)."""
    m = q.shape[0]
    qbar = q.sum(axis=0) / m
    b = ((q - qbar) ** 2).sum(axis=0) / (m - 1)
    ubar = u.sum(axis=0) / m
    if kind == "partial":
        T = ubar + b / m
        df, gamma = (m - 1) * (1 + ubar / (b / m)) ** 2, (b / m) / T
    else:
        T = (1 + 1 / m) * b - ubar
        df = (m - 1) * (1 - m * ubar / ((m + 1) * b)) ** 2
        Ts = ubar * (n_syn / n + (1 + n_syn / n) / m)  # the floor (Raab et al. 2016)
        T, df, gamma = np.where(T >= Ts, T, Ts), np.where(T >= Ts, df, np.inf), 0.0
    nu_com = np.asarray(nu_com, dtype=float)
    with np.errstate(divide="ignore"):
        capped = 1 / (1 / df + 1 / (nu_com * (nu_com + 1) / (nu_com + 3) * (1 - gamma)))
    df = np.where(np.isfinite(nu_com), capped, df)
    return qbar, T, df


@pytest.mark.parametrize("kind", ["partial", "full"])
def test_release_glm_equals_hand_combining_rule(api, kind):
    rng = np.random.default_rng(20)
    base = api["apistrat"]
    m = 4
    # large noise on api00 makes the between-set variance exceed the within for some terms
    # (the full rule's T_f >= T_s branch), small effects on others (its floor T_s)
    frames = [base.assign(api00=base["api00"] + rng.normal(0, 300, len(base)),
                          ell=base["ell"] + rng.normal(0, 1, len(base))) for _ in range(m)]
    rel, designs = _release(frames, kind, n_original=180)
    got = rel.glm("api00 ~ ell + meals", family="gaussian")
    fits = [svyglm("api00 ~ ell + meals", d) for d in designs]
    q = np.vstack([f.params for f in fits])
    u = np.vstack([f.bse**2 for f in fits])
    qbar, T, df = _hand_rule(q, u, kind, 180, 200, min(f.df_resid for f in fits))
    assert list(got["term"]) == ["Intercept", "ell", "meals"]
    assert_rel(got["estimate"], qbar, 1e-12, "qbar")
    assert_rel(got["variance"], T, 1e-12, "T")
    assert_rel(got["df"], df, 1e-12, "df")
    from scipy import stats as st
    crit = np.where(np.isfinite(df), st.t.ppf(0.975, np.where(np.isfinite(df), df, 1)),
                    st.norm.ppf(0.975))
    assert_rel(got["ci_low"], qbar - crit * np.sqrt(T), 1e-12, "ci")
    tt = qbar / np.sqrt(T)
    p = np.where(np.isfinite(df), 2 * st.t.sf(abs(tt), np.where(np.isfinite(df), df, 1)),
                 2 * st.norm.sf(abs(tt)))
    assert_rel(got["p"], p, 1e-12, "p")
    if kind == "full":
        Tf = (1 + 1 / m) * q.var(axis=0, ddof=1) - u.mean(axis=0)
        Ts = u.mean(axis=0) * (200 / 180 + (1 + 200 / 180) / m)
        assert (Tf > Ts).any() and (Tf < Ts).any(), "test data must reach both branches"


def test_release_glm_binomial_copies_and_level_mismatch(api):
    base = api["apistrat"]
    rel, designs = _release([base] * 3, "partial")
    got = rel.glm("sch.wide ~ ell + meals", family="binomial")
    one = svyglm("sch.wide ~ ell + meals", designs[0], family="binomial")
    assert_rel(got["estimate"], one.params, 1e-13, "copies estimate")
    assert_rel(got["se"], one.bse, 1e-13, "copies se")
    assert (got["between"] < 1e-20).all()
    plain = base.assign(stype=base["stype"].astype(str))
    odd = plain[plain["stype"] != "M"]  # a synthetic set without middle schools
    rel2, _ = _release([plain, odd], "partial")
    with pytest.raises(ValueError, match="synthetic sets \\[1\\]"):
        rel2.glm("api00 ~ stype")


def test_release_quantile_equals_hand_combining_rule(api):
    rng = np.random.default_rng(21)
    base = api["apistrat"]
    frames = [base.assign(api00=base["api00"] + rng.normal(0, 20, len(base))) for _ in range(3)]
    rel, designs = _release(frames, "partial")
    got = rel.quantile("api00", [0.25, 0.5], by="stype")
    per = [d.quantile("api00", [0.25, 0.5], by="stype") for d in designs]
    q = np.vstack([p["estimate"].to_numpy() for p in per])
    u = np.vstack([p["se"].to_numpy() ** 2 for p in per])
    nu = np.vstack([p["df"].to_numpy(float) for p in per]).min(axis=0)  # design df (D8)
    qbar, T, df = _hand_rule(q, u, "partial", 200, 200, nu)
    assert list(got["quantile"]) == list(per[0]["quantile"])
    assert_rel(got["estimate"], qbar, 1e-12, "quantile qbar")
    assert_rel(got["variance"], T, 1e-12, "quantile T")
    assert_rel(got["df"], df, 1e-12, "quantile df")
