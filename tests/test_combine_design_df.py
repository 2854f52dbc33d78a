"""Issue 36, D8: the combining rules' df capped by the synthetic design's own df.

nu = (1/nu_m + 1/nu_obs)^-1, nu_obs = nu_com (nu_com + 1)/(nu_com + 3) (1 - gamma), nu_com the
synthetic design's df (R degf: PSUs - strata), gamma the between share of T (partial: (b/m)/T;
full: 0). On apiclus1-like input (15 PSUs, df 14) the combined df must be <= 14, not ~100.
Mutant kept: the uncapped df (the rule before issue 36) fails that check. Where the formulas
coincide (the partial rule with nu_com infinite and estimates shrunk so that MI's (1 + 1/m) b
equals the partial rule's b/m) the result equals R mitools::MIcombine, live through rpy2.
"""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.combine import combine
from surveysynth.privacy.record import build_record
from surveysynth.release import SyntheticRelease


@pytest.fixture(scope="module")
def apiclus1():
    from surveysynth.datasets import load_api

    return load_api("apiclus1")


def _release(frame: pd.DataFrame, kind: str, m: int = 5, sd: float = 20.0, shift: float = 0.0,
             seed: int = 1) -> SyntheticRelease:
    """m apiclus1-like synthetic designs (ids, weights and fpc as collected, api00 perturbed
    record by record with sd ``sd`` and by a set-level offset with sd ``shift``)."""
    rng = np.random.default_rng(seed)
    sets = []
    for _ in range(m):
        f = frame.copy()
        f["api00"] = f["api00"] + rng.normal(0, sd, len(f)) + rng.normal(0, shift)
        sets.append(ss.SurveyDesign(f, ids="dnum", weights="pw", fpc="fpc"))
    rec = build_record("none", "test copy", m=m, epsilon=None, seeded=True, notes=["test"])
    return SyntheticRelease(sets, kind, rec, n_original=len(frame))


def _hand(q, u, kind, nu_com):
    m = len(q)
    b, ubar = np.var(q, ddof=1), np.mean(u)
    if kind == "partial":
        T = ubar + b / m
        nu_m, gamma = (m - 1) * (1 + ubar / (b / m)) ** 2, (b / m) / T
    else:
        T = (1 + 1 / m) * b - ubar
        nu_m, gamma = (m - 1) * (1 - m * ubar / ((m + 1) * b)) ** 2, 0.0
    nu_obs = nu_com * (nu_com + 1) / (nu_com + 3) * (1 - gamma)
    return T, 1 / (1 / nu_m + 1 / nu_obs), nu_m


def _df_within_design(rel: SyntheticRelease) -> None:
    """The check the mutant must fail: every combined df <= the synthetic designs' df."""
    est = rel.mean("api00")
    assert est["df"].iloc[0] <= rel.designs[0].degf == 14, est
    dom = rel.mean("api00", by="stype")
    per_set = np.min([d.mean("api00", by="stype")["df"].to_numpy() for d in rel.designs], axis=0)
    assert (dom["df"].to_numpy() <= per_set).all(), (dom["df"], per_set)


@pytest.mark.parametrize("kind, m, shift", [("partial", 5, 0.0), ("full", 40, 100.0)])
def test_combined_df_capped_by_the_design_df(apiclus1, kind, m, shift):
    rel = _release(apiclus1, kind, m=m, shift=shift)
    _df_within_design(rel)
    q = np.array([d.mean("api00")["estimate"].iloc[0] for d in rel.designs])
    u = np.array([d.mean("api00")["se"].iloc[0] ** 2 for d in rel.designs])
    T, df, nu_m = _hand(q, u, kind, 14.0)
    assert T > 0 and nu_m > 14  # the uncapped df exceed the design's: the cap acts
    est = rel.mean("api00").iloc[0]
    assert est["variance"] == pytest.approx(T, rel=1e-12)
    assert est["df"] == pytest.approx(df, rel=1e-12)


def test_mutant_uncapped_df_fails(apiclus1, monkeypatch):
    rel = _release(apiclus1, "partial")
    cb = importlib.import_module("surveysynth.combine")  # the module (the package exports the function)
    monkeypatch.setattr(cb, "_cap_df", lambda df, df_complete, gamma, k: df)
    with pytest.raises(AssertionError):
        _df_within_design(rel)


def test_printed_rule_df_and_assumptions(apiclus1):
    est = _release(apiclus1, "partial").mean("api00")
    text = repr(est)
    note = est.rule_note()
    assert note in text and note.count("\n") == 1
    assert note.startswith("Rule: partial synthesis (Reiter 2003): T = ubar + b/m; df ")
    assert f"df {est['df'].iloc[0]:.3g}, capped by the synthetic design's df 14" in note
    assert "Barnard & Rubin 1999" in note and note.splitlines()[1].startswith("Assumes: ")
    full = _release(apiclus1, "full", shift=100.0).mean("api00").rule_note()
    assert full.startswith("Rule: full synthesis (Raghunathan, Reiter & Rubin 2003)")


def test_large_sample_limit_and_no_cap():
    rng = np.random.default_rng(5)
    # between-set spread well above ubar: the full rule's T_f (not its floor, df inf) applies
    q, u = 3 * rng.normal(size=(4, 3)), rng.uniform(0.5, 1.0, size=(4, 3))
    for kind in ("partial", "full"):
        plain = combine(q, u, kind=kind, n=100, n_syn=100)
        inf = combine(q, u, kind=kind, n=100, n_syn=100, df_complete=np.inf)
        pd.testing.assert_frame_equal(plain, inf)
        big = combine(q, u, kind=kind, n=100, n_syn=100, df_complete=1e12)
        np.testing.assert_allclose(big["df"], plain["df"], rtol=1e-6)
        small = combine(q, u, kind=kind, n=100, n_syn=100, df_complete=[3.0, 10.0, np.nan])
        assert (small["df"].to_numpy()[:2] < [3.0, 10.0]).all()
        assert small["df"].iloc[2] == plain["df"].iloc[2]  # NaN: no design df, no cap
        assert (plain["note"] == "").all()
    with pytest.raises(ValueError, match="non-positive design df"):
        combine(q, u, kind="partial", df_complete=0)


def test_partial_rule_equals_mitools_where_the_formulas_coincide():
    """With nu_com infinite, the partial rule (T = ubar + b/m, df = (m-1)(1 + ubar/(b/m))^2) is
    MIcombine's rule (T = ubar + (1+1/m) b', df = (m-1)(1 + ubar/((1+1/m) b'))^2) on estimates
    shrunk towards their mean by 1/sqrt(m+1) (b' = b/(m+1), so (1+1/m) b' = b/m)."""
    import rpy2  # noqa: F401  (installed by make test: must import)

    from r_bridge import r_session

    rng = np.random.default_rng(36)
    m, k = 5, 3
    q = rng.normal(size=(m, k))
    u = rng.uniform(0.1, 1.0, size=(m, k))
    shrunk = q.mean(axis=0) + (q - q.mean(axis=0)) / np.sqrt(m + 1)
    with r_session("mitools") as (ro, pk):
        res = ro.ListVector({f"r{i}": ro.FloatVector(shrunk[i]) for i in range(m)})
        var = ro.ListVector(
            {f"v{i}": ro.r["diag"](ro.FloatVector(u[i]), nrow=k) for i in range(m)})
        fit = pk["mitools"].MIcombine(ro.r["unname"](res), ro.r["unname"](var))
        coef = np.asarray(fit.rx2("coefficients"))
        V = np.array(ro.r["diag"](fit.rx2("variance")))
        df = np.asarray(fit.rx2("df"))
    for nu in (None, np.inf):
        out = combine(q, u, kind="partial", df_complete=nu)
        np.testing.assert_allclose(out.estimate, coef, rtol=1e-12)
        np.testing.assert_allclose(out.variance, V, rtol=1e-12)
        np.testing.assert_allclose(out.df, df, rtol=1e-10)
    # and the cap leaves MIcombine's df only below it
    capped = combine(q, u, kind="partial", df_complete=14.0)
    assert (capped.df.to_numpy() < np.minimum(df, 14.0)).all()


def test_glm_df_capped_by_the_residual_df(apiclus1):
    rel = _release(apiclus1, "partial")
    fit = rel.glm("api00 ~ ell")
    assert (fit["df"].to_numpy() <= 14 + 1 - 2).all()
    assert "capped by the synthetic design's df 13" in fit.rule_note()
