"""Property tests on random designs: native equals R survey; estimates ignore row order."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import surveysynth as ss
from tests.conftest import assert_rel


@st.composite
def designs(draw):
    """A random stratified multistage sample with optional fpc, domains and a lonely rule."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    H = draw(st.integers(1, 6))
    two_stage = draw(st.booleans())
    use_fpc = draw(st.booleans())
    rows = []
    psu_id = 0
    for h in range(H):
        n_psu = draw(st.integers(1 if H > 1 else 2, 5))
        N_psu = n_psu + int(rng.integers(0, 6))
        for _ in range(n_psu):
            n_ssu = int(rng.integers(1, 4)) if two_stage else 1
            N_ssu = n_ssu + int(rng.integers(0, 4))
            for s in range(n_ssu):
                for _ in range(int(rng.integers(1, 4))):
                    rows.append((h, psu_id, s, N_psu, N_ssu))
            psu_id += 1
    df = pd.DataFrame(rows, columns=["h", "psu", "ssu", "N1", "N2"])
    n = df.shape[0]
    df["w"] = rng.uniform(1, 10, n).round(3)
    df["y"] = rng.lognormal(2, 1, n).round(4)
    df["x"] = rng.uniform(1, 5, n).round(4)
    df["g"] = rng.choice(["a", "b", "c"], n)
    lonely = draw(st.sampled_from(["remove", "certainty", "adjust", "average"]))
    spec = dict(
        ids=["psu", "ssu"] if two_stage else ["psu"],
        strata="h" if H > 1 else None,
        weights="w",
        fpc=(["N1", "N2"] if two_stage else ["N1"]) if use_fpc else None,
    )
    return df, spec, lonely


def r_design_code(spec) -> str:
    parts = [f"id=~{'+'.join(spec['ids'])}", "weights=~w", "data=df"]
    if spec["strata"]:
        parts.append("strata=~h")
    if spec["fpc"]:
        parts.append(f"fpc=~{'+'.join(spec['fpc'])}")
    return f"svydesign({', '.join(parts)})"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(designs())
def test_native_equals_r_on_random_designs(R, case):
    from r_bridge import r_session
    from r_bridge.convert import pandas_to_r

    df, spec, lonely = case
    d = ss.SurveyDesign(df, lonely_psu=lonely, survey_version="4.1", **spec)  # live R 4.1.1
    with r_session("survey") as (ro, _):
        ro.globalenv["df"] = pandas_to_r(df)
    code = (
        f"local({{ options(survey.lonely.psu='{lonely}'); d <- {r_design_code(spec)}; "
        "a <- svymean(~y, d); b <- svytotal(~y, d); c <- svyby(~y, ~g, d, svymean); "
        "r <- svyratio(~y, ~x, d); "
        "out <- c(coef(a), SE(a), coef(b), SE(b), coef(c), SE(c), coef(r), SE(r)); "
        "options(survey.lonely.psu='fail'); as.numeric(out) })"
    )
    r = R(code)
    ours = np.r_[
        d.mean("y")[["estimate", "se"]].to_numpy().ravel(),
        d.total("y")[["estimate", "se"]].to_numpy().ravel(),
    ]
    by = d.mean("y", by="g")
    ratio = d.ratio("y", "x")
    ours = np.r_[ours, by.estimate, by.se, ratio.estimate, ratio.se]
    # SEs that are exactly zero in theory come out as rounding noise (1e-16 x estimate) in both
    assert_rel(ours, r, tol=1e-9, what=f"{spec} lonely={lonely}", atol=1e-12 * np.nanmax(np.abs(r)))


@settings(max_examples=40, deadline=None)
@given(designs(), st.integers(0, 10_000))
def test_estimates_invariant_to_row_order(case, perm_seed):
    df, spec, lonely = case
    perm = np.random.default_rng(perm_seed).permutation(df.shape[0])
    a = ss.SurveyDesign(df, lonely_psu=lonely, **spec)
    b = ss.SurveyDesign(df.iloc[perm], lonely_psu=lonely, **spec)
    for f in (lambda d: d.mean("y", by="g"), lambda d: d.total(["y", "x"]),
              lambda d: d.ratio("y", "x"), lambda d: d.quantile("y", [0.3, 0.5]),
              lambda d: d.proportion("g")):
        ra, rb = f(a), f(b)
        np.testing.assert_allclose(ra.estimate, rb.estimate, rtol=1e-12)
        np.testing.assert_allclose(ra.se, rb.se, rtol=1e-9, atol=1e-12)
