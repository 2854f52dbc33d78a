"""The Dask engine (issue 23): one pass of per-(domain, stratum, PSU) sums on a distributed
LocalCluster gives the native engine's numbers to 1e-12, domains included, on three designs:
stratified clustered with fpc, multistage with fpc at both stages, replicate weights as
columns. The native engine is tested against R in test_design_r_parity.py.

Wrong versions these tests kill:
* partial sums combined per partition instead of per PSU (a PSU split across partitions):
  the data are split so that PSUs straddle partitions, and the aggregate is re-summed;
* PSUs without rows in a domain dropped from their stratum (R pads zero totals): domains that
  miss PSUs of most strata;
* later stages ignored (ultimate-cluster only): the multistage design has an fpc at stage 2;
* na_rm rows dropped from the design instead of only from the domain (PSU counts change);
* replicate scales/centre wrong (rscales of JKn, mse=True) and replicate df (rank) wrong;
* levels of a categorical in another order than R's; n counted over groups, not rows.
"""

from __future__ import annotations

import dask.dataframe as dd  # installed by `make test` (pyproject dev extras)
import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.engines.dask_engine import (
    DaskReplicateDesign,
    DaskSurveyDesign,
    UnsupportedByDask,
)
from surveysynth.variance.taylor import LonelyPSUError
from tests.conftest import assert_rel

TOL = 1e-12
CALLS = (
    ("mean", ("y",), {}),
    ("mean", (["y", "cat"],), {}),
    ("total", (["y", "cat"],), {}),
    ("ratio", (["y", "z"], "x"), {}),
    ("proportion", ("cat",), {}),
    ("mean", ("y",), {"ci": "t"}),
)


def make_data(n: int = 6000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    H = 30
    per = 4 + np.arange(H) % 4  # 4 to 7 PSUs per stratum
    first = np.concatenate([[0], np.cumsum(per)])
    K = int(first[-1])
    psu = rng.integers(0, K, n)
    psu[:K] = np.arange(K)
    ssu = psu * 10 + rng.integers(0, 5, n)
    st = np.searchsorted(first, psu, side="right") - 1
    # domains: "rare" reaches only a few PSUs of a few strata (zero-padded PSUs matter)
    dom = rng.choice(["a", "b", "c"], n)
    dom[(st < 4) & (rng.random(n) < 0.05)] = "rare"
    y = rng.lognormal(3, 0.7, n) + st
    frame = pd.DataFrame({
        "st": st, "psu": psu, "ssu": ssu,
        "N1": 40.0 + (st % 3), "N2": 25.0,
        "w": rng.uniform(5, 50, n), "y": y, "z": rng.normal(10, 3, n),
        "x": rng.uniform(1, 2, n), "dom": dom, "g": rng.integers(0, 2, n),
        "cat": pd.Categorical(rng.choice(["lo", "mid", "hi"], n),
                              categories=["lo", "mid", "hi"]),
    })
    # shuffle so that every PSU's rows are spread over partitions
    return frame.sample(frac=1.0, random_state=1).reset_index(drop=True)


def check_same(nat, dk, what):
    assert list(nat.columns) == list(dk.columns), what
    for c in nat.columns:
        if c in ("estimate", "se", "ci_low", "ci_high", "cv", "df", "n"):
            assert_rel(dk[c], nat[c], TOL, f"{what} {c}")
        else:
            assert nat[c].astype(str).tolist() == dk[c].astype(str).tolist(), f"{what} {c}"


def run_calls(native, dask_design, by):
    for stat, args, kw in CALLS:
        nat = getattr(native, stat)(*args, by=by, **kw)
        dk = getattr(dask_design, stat)(*args, by=by, **kw)
        check_same(nat, dk, f"{stat}{args} by={by}")


@pytest.mark.parametrize("by", [None, "dom", ["dom", "g"]])
def test_stratified_clustered_fpc_matches_native(client, by):
    data = make_data()
    kw = dict(ids="psu", strata="st", weights="w", fpc="N1")
    run_calls(ss.SurveyDesign(data, **kw), DaskSurveyDesign(data, npartitions=5, **kw), by)


@pytest.mark.parametrize("by", [None, "dom"])
def test_multistage_with_fpc_at_both_stages_matches_native(client, by):
    data = make_data()
    kw = dict(ids=["psu", "ssu"], strata="st", weights="w", fpc=["N1", "N2"])
    native = ss.SurveyDesign(data, **kw)
    # the stage-2 variance is really there (else this design would not test later stages)
    one_stage = ss.SurveyDesign(data, ids="psu", strata="st", weights="w", fpc="N1")
    assert (native.mean("y", by=by)["se"] > one_stage.mean("y", by=by)["se"] * (1 + 1e-6)).all()
    run_calls(native, DaskSurveyDesign(data, npartitions=7, **kw), by)


@pytest.mark.parametrize("mse", [False, True])
def test_replicate_weights_as_columns_match_native(client, mse):
    data = make_data(3000)
    rep = ss.SurveyDesign(data, ids="psu", strata="st", weights="w").jackknife()
    A = rep.replicate_weights("analysis")
    names = [f"rw{i}" for i in range(A.shape[1])]
    wide = pd.concat([data, pd.DataFrame(A, columns=names)], axis=1)
    kw = dict(repweights=names, weights="w", type="JKn", rscales=rep.rscales, scale=rep.scale,
              mse=mse)
    native = ss.ReplicateDesign(wide, **kw)
    assert not np.allclose(native.rscales, native.rscales[0])  # rscales really vary
    dk = DaskReplicateDesign(wide, npartitions=4, **kw)
    for by in (None, "dom"):
        run_calls(native, dk, by)


def test_replicate_factors_not_combined(client):
    data = make_data(2000)
    boot = ss.SurveyDesign(data, ids="psu", strata="st", weights="w").bootstrap(20, seed=4)
    F = boot.replicate_weights("replication")
    names = [f"f{i}" for i in range(F.shape[1])]
    wide = pd.concat([data, pd.DataFrame(F, columns=names)], axis=1)
    kw = dict(repweights=names, weights="w", type="bootstrap", combined_weights=False)
    run_calls(ss.ReplicateDesign(wide, **kw), DaskReplicateDesign(wide, npartitions=3, **kw),
              "dom")


def test_parquet_dataset_and_na_rm(client, tmp_path):
    data = make_data()
    data.loc[data.index[::37], "y"] = np.nan  # rows stay in the design for variance
    ddf = dd.from_pandas(data, npartitions=4)
    ddf.to_parquet(tmp_path / "pq")
    kw = dict(ids="psu", strata="st", weights="w", fpc="N1")
    native = ss.SurveyDesign(data, **kw)
    dk = DaskSurveyDesign(tmp_path / "pq", **kw)
    assert dk._ddf.npartitions == 4  # noqa: SLF001 - the path really was read as 4 partitions
    check_same(native.mean("y", by="dom", na_rm=True), dk.mean("y", by="dom", na_rm=True),
               "parquet na_rm")
    check_same(native.ratio("y", "x", by="cat", na_rm=True),
               dk.ratio("y", "x", by="cat", na_rm=True), "parquet ratio na_rm")
    with pytest.raises(ValueError, match=r"column 'y' has 163 missing value\(s\).*na_rm=True"):
        dk.mean("y", by="dom")


@pytest.mark.parametrize("rule", ["remove", "certainty", "adjust", "average"])
def test_lonely_psu_rules_match_native(client, rule):
    data = make_data(2000)
    lone = data["st"] == 0
    data.loc[lone, "psu"] = data.loc[lone, "psu"].min()
    data.loc[lone, "ssu"] = data.loc[lone, "psu"] * 10
    kw = dict(ids="psu", strata="st", weights="w", lonely_psu=rule)
    for adl in (False, True):
        native = ss.SurveyDesign(data, adjust_domain_lonely=adl, **kw)
        dk = DaskSurveyDesign(data, npartitions=3, adjust_domain_lonely=adl, **kw)
        check_same(native.mean("y", by="dom"), dk.mean("y", by="dom"), f"{rule} {adl}")
    with pytest.raises(LonelyPSUError, match="only one PSU"):
        DaskSurveyDesign(data, ids="psu", strata="st", weights="w").mean("y")


def test_engine_dask_on_in_memory_designs(client, api):
    d = ss.SurveyDesign(api["apiclus2"], ids=["dnum", "snum"], weights="pw",
                        fpc=["fpc1", "fpc2"])
    sub = d.subset(d.data["stype"] != "H")
    for des in (d, sub, d.jackknife()):
        for stat, args in (("mean", ("api00",)), ("total", ("enroll",)),
                           ("ratio", ("api00", "api99")), ("proportion", ("stype",))):
            nat = getattr(des, stat)(*args, by="sch.wide", na_rm=True)
            dk = getattr(des, stat)(*args, by="sch.wide", na_rm=True, engine="dask")
            check_same(nat, dk, f"engine dask {stat}")


def test_bad_input_and_unsupported(client):
    data = make_data(1000)
    bad = data.copy()
    bad.loc[[5, 9], "w"] = [0.0, -1.0]
    with pytest.raises(ValueError, match=r"weights: column 'w' has 2 row\(s\).*\[5, 9\]"):
        DaskSurveyDesign(bad, ids="psu", strata="st", weights="w", npartitions=1).mean("y")
    with pytest.raises(UnsupportedByDask, match="ids="):
        DaskSurveyDesign(data, strata="st", weights="w")
    with pytest.raises(ValueError, match="weights="):
        DaskSurveyDesign(data, ids="psu")
    dk = DaskSurveyDesign(data, ids="psu", strata="st", weights="w")
    with pytest.raises(UnsupportedByDask, match="quantile"):
        dk.quantile("y", 0.5)
    with pytest.raises(UnsupportedByDask, match="deff"):
        dk.mean("y", deff=True)
    with pytest.raises(ValueError, match=r"by: column\(s\) \['nope'\]"):
        dk.mean("y", by="nope")
    reps = data.assign(r1=data["w"], r2=data["w"] * 1.1)
    reps.loc[7, "r2"] = np.nan
    with pytest.raises(ValueError, match=r"repweights: column 'r2' has 1 missing.*\[7\]"):
        DaskReplicateDesign(reps, repweights=["r1", "r2"], weights="w", type="BRR",
                            npartitions=1).mean("y")
    before = data.copy()
    dk.mean("y", by="dom")
    pd.testing.assert_frame_equal(data, before)  # the caller's data is not mutated
