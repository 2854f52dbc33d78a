"""Memory of the native engine at scale (issue 23): a design and a mean by domain hold and
allocate less than the data's own size, and never copy or mutate the caller's frame.

The bounds are multiples of the frame's in-memory size, measured with tracemalloc (numpy
and pandas allocations are traced) on 1M rows with a small (PSU, domain) pair space, so that
row-length arrays dominate. Measured (numpy 2.4, pandas 3.1): design held 0.29x, design peak
0.71x, mean of 5 columns by 50 domains peak 0.76x (design's arrays included). The bounds fail
for the copies they are there to catch: an (n, 5) copy of the variables is +0.69x, an
all-ones (n, 5) denominator +0.69x, the five weighted columns held together +0.55x, a deep
copy of the frame +1.0x, one more row-length float64 or int64 array during the mean +0.14x
(np.bincount copies read-only weights: the design's weights passed to it directly), one more
int64 code vector held by the design +0.14x.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss

N = 1_000_000
Y = [f"y{j}" for j in range(1, 6)]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(20231)
    psu = (np.arange(N) * 1000 // N).astype(np.int32)  # 100 strata x 10 PSUs, PSU order
    cols = {"stratum": psu // 10, "psu": psu,
            "domain": rng.integers(0, 50, N).astype(np.int16), "w": 10.0 + rng.random(N)}
    for j, c in enumerate(Y):
        cols[c] = rng.standard_normal(N) + j
    return pd.DataFrame(cols)


def _traced(fn):
    """(result, bytes held after, peak bytes during) of fn() under tracemalloc."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, held, peak


def test_design_and_mean_by_domain_stay_below_the_data_size(frame):
    data = float(frame.memory_usage(deep=True).sum())
    before = {c: frame[c].to_numpy().copy() for c in frame.columns}
    design, held, peak = _traced(
        lambda: ss.SurveyDesign(frame, ids="psu", strata="stratum", weights="w"))
    assert held / data < 0.36, f"design holds {held / data:.2f}x the data"
    assert peak / data < 0.9, f"design construction peaks at {peak / data:.2f}x the data"

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        res = design.mean(Y, by="domain")
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    # the design's held arrays were allocated before tracing: add them to the peak, as the
    # process holds them at the same time
    assert (peak + held) / data < 0.88, f"mean by domain peaks at {(peak + held) / data:.2f}x"

    # the numbers: per-domain weighted means computed independently with pandas
    w = frame["w"]
    g = frame.assign(**{c: frame[c] * w for c in Y}).groupby("domain")[Y + ["w"]].sum()
    expect = (g[Y].to_numpy() / g[["w"]].to_numpy()).ravel()
    np.testing.assert_allclose(res["estimate"].to_numpy(), expect, rtol=1e-12)
    assert np.isfinite(res["se"]).all() and (res["se"] > 0).all()
    # the caller's frame is neither copied nor mutated
    assert np.shares_memory(design.full_data["y1"].to_numpy(), frame["y1"].to_numpy())
    for c in frame.columns:
        np.testing.assert_array_equal(frame[c].to_numpy(), before[c])


def test_variables_are_a_read_only_view_of_the_frame(frame):
    """The (n, V) matrix of float64 variables shares the frame's block and cannot be
    written: a wrong in-place edit (zero-filling NaN, scaling by w) would write into the
    caller's data. Non-float64 columns are converted (a copy), with equal numbers."""
    small = frame.iloc[:2000].copy()
    design = ss.SurveyDesign(small, ids="psu", strata="stratum", weights="w")
    Ymat, _, _ = design._variables(Y, allow_categorical=True)  # noqa: SLF001
    assert np.shares_memory(Ymat, small["y1"].to_numpy())
    assert not Ymat.flags.writeable
    with pytest.raises(ValueError):
        Ymat[0, 0] = 1.0
    as_int = small.assign(y1=np.round(small["y1"] * 100).astype(np.int64))
    d2 = ss.SurveyDesign(as_int, ids="psu", strata="stratum", weights="w")
    Y2, _, _ = d2._variables(Y, allow_categorical=True)  # noqa: SLF001
    assert not np.shares_memory(Y2, as_int["y2"].to_numpy())
    np.testing.assert_array_equal(Y2[:, 0], as_int["y1"].to_numpy(float))
    np.testing.assert_array_equal(Y2[:, 1:], small[Y[1:]].to_numpy())


def test_nesting_check_names_every_psu_in_two_strata():
    """The gather-and-compare nesting check finds the same PSUs as counting distinct
    strata per PSU with pandas."""
    rng = np.random.default_rng(5)
    n = 3000
    psu = rng.integers(0, 300, n)
    stratum = psu // 10
    moved = rng.choice(n, 7, replace=False)
    stratum[moved] = (stratum[moved] + 1) % 30
    df = pd.DataFrame({"psu": psu, "stratum": stratum, "w": np.ones(n)})
    bad = int((df.groupby("psu")["stratum"].nunique() > 1).sum())
    assert bad > 0
    with pytest.raises(ValueError, match=f"nested in strata at top level: {bad} PSU"):
        ss.SurveyDesign(df, ids="psu", strata="stratum", weights="w")
    ok = df.assign(stratum=psu // 10)
    d = ss.SurveyDesign(ok, ids="psu", strata="stratum", weights="w")
    expect = ok.groupby("stratum", sort=False)["psu"].nunique().to_numpy()  # code order
    np.testing.assert_array_equal(d.stages[0].n_psu, expect)


def test_many_psus_by_many_domains_one_column_at_a_time():
    """6,000 PSUs x 200 domains: the (PSU, domain) pair space (1.2M cells) exceeds the 1M
    rows, so pair-sized arrays dominate. Measured 1.66x the data for a mean of 5 columns
    (design included); holding the 5 columns' pair totals and influence totals at once, as
    before, peaked at 2.52x."""
    rng = np.random.default_rng(7)
    psu = (np.arange(N) * 6000 // N).astype(np.int32)
    cols = {"stratum": psu // 10, "psu": psu,
            "domain": rng.integers(0, 200, N).astype(np.int16), "w": 20.0 + rng.random(N)}
    for j, c in enumerate(Y):
        cols[c] = rng.standard_normal(N) + j
    df = pd.DataFrame(cols)
    data = float(df.memory_usage(deep=True).sum())
    res, held, peak = _traced(
        lambda: ss.SurveyDesign(df, ids="psu", strata="stratum", weights="w").mean(
            Y, by="domain"))
    assert peak / data < 1.9, f"design + mean peak at {peak / data:.2f}x the data"
    w = df["w"]
    g = df.assign(**{c: df[c] * w for c in Y}).groupby("domain")[Y + ["w"]].sum()
    np.testing.assert_allclose(res["estimate"].to_numpy(),
                               (g[Y].to_numpy() / g[["w"]].to_numpy()).ravel(), rtol=1e-12)
