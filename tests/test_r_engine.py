"""engine="r" (R survey through rpy2) against the native engine, to 1e-9 relative.

The R side does all of its own arithmetic (svymean, svytotal, svyratio, svyquantile, svyby on
R's subset of the design); nothing is shared with the native code but the data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

# R is installed by `make test`: without it these tests must fail, not skip
import r_bridge  # noqa: E402
import surveysynth as ss

assert r_bridge.r_available(), "R and rpy2 are required (make test installs them)"

from surveysynth.datasets import load_api  # noqa: E402

SPECS = {
    "apistrat": dict(strata="stype", weights="pw", fpc="fpc"),
    "apiclus1": dict(ids="dnum", weights="pw", fpc="fpc"),
    "apiclus2": dict(ids="~dnum+snum", fpc="~fpc1+fpc2"),
}


@pytest.fixture(scope="module")
def designs():
    return {k: ss.SurveyDesign(load_api(k), **v) for k, v in SPECS.items()}


def same(native: pd.DataFrame, r: pd.DataFrame, tol: float = 1e-9) -> None:
    """Equal frames; quantile intervals are compared in test_r_engine_quantile_intervals
    (estimate.py rebuilds engine intervals from the SE, symmetric, while Woodruff's are not)."""
    assert list(native.columns) == list(r.columns)
    if "quantile" in native.columns:
        native = native.drop(columns=["ci_low", "ci_high"])
        r = r.drop(columns=["ci_low", "ci_high"])
    assert len(native) == len(r) and len(native) > 0
    for c in native.columns:
        if c in ("estimate", "se", "ci_low", "ci_high", "df"):
            a, b = native[c].to_numpy(float), r[c].to_numpy(float)
            assert np.array_equal(np.isfinite(a), np.isfinite(b)), c
            fin = np.isfinite(a)
            scale = np.where(np.abs(a[fin]) > 0, np.abs(a[fin]), 1.0)
            # zero up to rounding (SE of a stratum share in a stratified design): absolute
            atol = 1e-12 * (1.0 + np.abs(a[fin]).max(initial=0))
            err = np.maximum(np.abs(a[fin] - b[fin]) - atol, 0.0) / scale
            assert err.max(initial=0) <= tol, f"{c}: rel err {err.max():.3g}\n{native}\n{r}"
        else:
            pd.testing.assert_series_equal(native[c], r[c], obj=c)


CASES = [
    ("mean", lambda d: dict(variables=["api00", "api99"])),
    ("total", lambda d: dict(variables=["enroll", "api00"], na_rm=True)),
    ("mean", lambda d: dict(variables=["api00", "stype"], by="sch.wide")),
    ("total", lambda d: dict(variables="api00", by=["stype", "awards"])),
    ("proportion", lambda d: dict(variables=["stype", "awards"])),
    ("proportion", lambda d: dict(variables="awards", by="stype")),
    ("ratio", lambda d: dict(numerator=["api00", "api.stu"], denominator=["api99", "enroll"],
                             by="stype", na_rm=True)),
    ("quantile", lambda d: dict(variables=["api00", "api99"], quantiles=[0.1, 0.5, 0.9])),
    ("quantile", lambda d: dict(variables="api00", quantiles=[0.25, 0.75], by="sch.wide")),
    ("mean", lambda d: dict(variables="enroll", by="stype", na_rm=True)),
]


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("stat, kwargs", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_r_engine_matches_native(designs, name, stat, kwargs):
    d = designs[name]
    kw = kwargs(d)
    native = getattr(d, stat)(**kw)
    r = getattr(d, stat)(engine="r", **kw)
    same(native, r)


@pytest.mark.parametrize("name", list(SPECS))
def test_r_engine_on_subset_with_by_and_na_rm(designs, name):
    d = designs[name]
    sub = d.subset(d.data["sch.wide"] == "Yes")
    for stat, kw in [("mean", dict(variables=["api00", "enroll"], by="stype", na_rm=True)),
                     ("total", dict(variables="api00")),
                     ("ratio", dict(numerator="api00", denominator="api99", by="awards")),
                     ("quantile", dict(variables="api00", quantiles=0.5))]:
        same(getattr(sub, stat)(**kw), getattr(sub, stat)(engine="r", **kw))


def test_r_engine_deff_and_t_intervals(designs):
    d = designs["apiclus1"]
    kw = dict(variables="api00", by="stype", deff=True, ci="t")
    same(d.mean(**kw), d.mean(engine="r", **kw))


def test_r_engine_lonely_psu_options_follow_the_design():
    df = load_api("apiclus1")
    df["part"] = np.where(df["dnum"] == df["dnum"].iloc[0], "alone", "rest")
    for rule in ("adjust", "average", "remove", "certainty"):
        d = ss.SurveyDesign(df, ids="dnum", strata="part", weights="pw", lonely_psu=rule,
                            survey_version="4.1")  # the R engine is R 4.1.1
        same(d.mean("api00", by="stype"), d.mean("api00", by="stype", engine="r"))


def test_r_engine_replicate_design_matches_native():
    d = ss.SurveyDesign(load_api("apistrat"), strata="stype", weights="pw", fpc="fpc")
    rd = d.jackknife()
    for stat, kw in [("mean", dict(variables=["api00", "stype"], by="sch.wide")),
                     ("total", dict(variables="enroll")),
                     ("ratio", dict(numerator="api00", denominator="api99"))]:
        same(getattr(rd, stat)(**kw), getattr(rd, stat)(engine="r", **kw))
    sub = rd.subset(rd.data["awards"] == "Yes")
    same(sub.mean("api00", by="stype"), sub.mean("api00", by="stype", engine="r"))


def test_r_engine_leaves_data_untouched(designs):
    d = designs["apistrat"]
    before = d.data.copy(deep=True)
    d.proportion("awards", by="stype", engine="r")
    pd.testing.assert_frame_equal(d.data, before)


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("by", [None, "stype", ["sch.wide", "awards"]])
def test_r_engine_quantile_intervals(designs, name, by):
    """R's own Woodruff limits (engine.estimate(return_ci=True)) equal the native ones."""
    from r_bridge import engine

    d = designs[name].subset(designs[name].data["api00"] > 500)
    ps = [0.1, 0.5, 0.75]
    native = d.quantile(["api00", "api99"], ps, by=by, level=0.9,
                        survey_version="4.1")  # the R engine is R 4.1.1
    dom, D, by_df = d.domains(by, None)
    call = {"stat": "quantile", "variables": ["api00", "api99"], "quantiles": ps, "level": 0.9}
    est, se, lo, hi = engine.estimate(d, call, dom=dom, D=D, by=by, by_df=by_df, na_rm=False,
                                      return_ci=True)
    for col, arr in (("estimate", est), ("se", se), ("ci_low", lo), ("ci_high", hi)):
        np.testing.assert_allclose(arr.ravel(), native[col].to_numpy(float), rtol=1e-9,
                                   err_msg=col)
