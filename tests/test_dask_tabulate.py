"""tabulate() on a Dask design (issue 23): the same Table as tables.tabulate on the native
design, cell by cell to 1e-12 (estimate, se, cv, CI, df, n, flags, labels, layout), on three
designs -- stratified clustered with fpc, two-stage with fpc at both stages, replicate weights
as columns -- for counts, totals, means (na_rm), proportions and percentages of the total, row
and column. The native tables are tested against R in test_tables.py / test_tables_stats.py.

Wrong versions these tests kill:
* margins computed from the interior cells (summed estimates, or SEs added in quadrature):
  margin SEs differ because the cells of a PSU are correlated;
* one pass keyed by the table variables only (design columns dropped): every SE changes;
* empty cells dropped or filled with NaN counts (native: count 0, SE 0, flag "empty");
* n counted over aggregated groups instead of records; df of a share taken from the
  numerator cell instead of the denominator domain (percent of row: df of the row);
* na_rm rows removed from the design instead of only from the domain;
* replicate df from the interior cells' Gram matrices instead of the block's domains (the
  margins have their own rank);
* levels of a categorical in another order, unobserved categories left out of the grid;
* the Dask design's own progress/cluster options changing any number (from_parquet on a
  LocalCluster of worker processes with a memory limit).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.engines.dask_engine import (
    DaskReplicateDesign,
    DaskSurveyDesign,
    UnsupportedByDask,
)
from surveysynth.tables import Table, tabulate
from tests.conftest import assert_rel

TOL = 1e-12
NUMERIC = ("estimate", "se", "cv", "ci_low", "ci_high", "df", "n_unweighted")

# (stat, value, of, na_rm, ci): every cell kind of tables.tabulate that sums can give
SPECS = (
    ("total", None, "total", False, "normal"),
    ("total", "y", "total", False, "normal"),
    ("mean", "yna", "total", True, "t"),
    ("proportion", "cat", "total", False, "normal"),
    ("percent", None, "total", False, "normal"),
    ("percent", None, "row", False, "t"),
    ("percent", None, "col", False, "normal"),
    ("percent", "y", "row", False, "normal"),
)


def make_data(n: int = 5000, seed: int = 11) -> pd.DataFrame:
    """Rows of 24 strata x 4-7 PSUs x 5 SSUs; table rows ``region`` (4 levels), columns ``g``
    (0/1/2, integer) with an empty cell (region "d" never has g = 2) and a rare cell (region
    "d" lives in 2 strata: few PSUs, df 1), categorical ``cat`` with an unobserved category,
    ``yna`` with missing values; shuffled so that PSUs straddle partitions."""
    rng = np.random.default_rng(seed)
    H = 24
    per = 4 + np.arange(H) % 4
    first = np.concatenate([[0], np.cumsum(per)])
    K = int(first[-1])
    psu = rng.integers(0, K, n)
    psu[:K] = np.arange(K)
    st = np.searchsorted(first, psu, side="right") - 1
    region = rng.choice(np.array(["a", "b", "c"]), n)
    rare = (st < 2) & (rng.random(n) < 0.3)
    region[rare] = "d"
    g = rng.integers(0, 3, n)
    g[rare] = rng.integers(0, 2, int(rare.sum()))
    y = rng.lognormal(2, 0.6, n) + st + 3 * g
    yna = y.copy()
    yna[rng.random(n) < 0.04] = np.nan
    frame = pd.DataFrame({
        "st": st, "psu": psu, "ssu": psu * 10 + rng.integers(0, 5, n),
        "N1": 30.0 + (st % 4), "N2": 20.0, "w": rng.uniform(5, 60, n),
        "region": region, "g": g, "y": y, "yna": yna,
        "cat": pd.Categorical(rng.choice(["lo", "mid", "hi"], n, p=[0.5, 0.3, 0.2]),
                              categories=["lo", "mid", "hi", "never"]),
    })
    return frame.sample(frac=1.0, random_state=2).reset_index(drop=True)


def designs(kind: str, data: pd.DataFrame):
    """(native design, Dask design) of one of the three test designs."""
    if kind == "stratified clustered fpc":
        kw = dict(ids="psu", strata="st", weights="w", fpc="N1")
        return ss.SurveyDesign(data, **kw), DaskSurveyDesign(data, npartitions=5, **kw)
    if kind == "multistage fpc":
        kw = dict(ids=["psu", "ssu"], strata="st", weights="w", fpc=["N1", "N2"])
        return ss.SurveyDesign(data, **kw), DaskSurveyDesign(data, npartitions=7, **kw)
    rep = ss.SurveyDesign(data, ids="psu", strata="st", weights="w").jackknife()
    A = rep.replicate_weights("analysis")
    names = [f"rw{i}" for i in range(A.shape[1])]
    wide = pd.concat([data, pd.DataFrame(A, columns=names)], axis=1)
    kw = dict(repweights=names, weights="w", type="JKn", rscales=rep.rscales, scale=rep.scale)
    return ss.ReplicateDesign(wide, **kw), DaskReplicateDesign(wide, npartitions=4, **kw)


def same_table(nat: Table, dk: Table, what: str) -> None:
    assert (dk.rows, dk.cols, dk.stat, dk.value, dk.margin_label) == (
        nat.rows, nat.cols, nat.stat, nat.value, nat.margin_label), what
    assert {k: v for k, v in dk.meta.items() if k != "source"} == {
        k: v for k, v in nat.meta.items() if k != "source"}, what
    assert list(dk.long.columns) == list(nat.long.columns), what
    for c in nat.long.columns:
        if c in NUMERIC:
            assert_rel(dk.long[c], nat.long[c], TOL, f"{what} {c}")
        else:
            assert dk.long[c].astype(str).tolist() == nat.long[c].astype(str).tolist(), \
                f"{what} {c}"


KINDS = ("stratified clustered fpc", "multistage fpc", "replicate weights")


@pytest.mark.parametrize("kind", KINDS)
def test_tables_equal_native(client, kind):
    data = make_data()
    native, dk = designs(kind, data)
    for stat, value, of, na_rm, ci in SPECS:
        kw = dict(value=value, stat=stat, of=of, na_rm=na_rm, ci=ci)
        nat = tabulate(native, "region", "g", **kw)
        got = tabulate(dk, "region", "g", **kw)
        same_table(nat, got, f"{kind} {stat} {value} of={of}")
        # the method is the same table
        if stat == "total" and value is None:
            same_table(nat, dk.tabulate("region", "g", **kw), f"{kind} method")
            long = nat.long
            empty = long[(long.region == "d") & (long.g.astype(str) == "2")]
            assert len(empty) == 1 and empty.flag_reason.iloc[0].find("empty") >= 0
            assert empty.estimate.iloc[0] == 0.0
            # margins are not functions of the interior cells alone
            interior = long[long.cell == "interior"]
            rowm = long[(long.cell == "row margin") & (long.region == "a")]
            se_sum = np.sqrt((interior[interior.region == "a"].se ** 2).sum())
            assert abs(rowm.se.iloc[0] - se_sum) > 1e-6 * se_sum
    # one-way table (no cols) and two row variables
    for rows, cols in (("region", None), (["region", "g"], None), ("g", "cat")):
        same_table(tabulate(native, rows, cols, value="y", stat="mean"),
                   tabulate(dk, rows, cols, value="y", stat="mean"), f"{kind} {rows} {cols}")


def test_table_has_the_cells_that_make_the_comparison_bite(client):
    """The comparison above covers unobserved categories, a rare row (two strata: a small
    df of its own) and flagged and unflagged cells."""
    data = make_data()
    native, dk = designs("stratified clustered fpc", data)
    tab = tabulate(dk, "region", "cat", stat="percent", of="row")
    assert "never" in tab.long["cat"].astype(str).tolist()  # unobserved category in the grid
    rare = tab.long[(tab.long.region == "d") & (tab.long.cell == "interior")]
    in_d = data[data.region == "d"]
    assert (rare.df == in_d.psu.nunique() - in_d.st.nunique()).all()  # the row's df: 2 strata
    assert tab.long.flag.any() and (~tab.long.flag).any()
    pr = tabulate(dk, "region", value="cat", stat="proportion")
    assert_rel(pr.long.groupby("region").estimate.sum().drop("All"), np.ones(4), 1e-12)


def test_from_parquet_on_a_process_cluster_with_progress(tmp_path, capsys):
    """from_parquet starts a LocalCluster of worker processes held to a memory limit, shows
    a progress bar, and gives the native table; close() stops the cluster."""
    data = make_data(3000)
    data.to_parquet(tmp_path / "part.0.parquet", row_group_size=500)
    data.iloc[::-1].reset_index(drop=True).to_parquet(tmp_path / "part.1.parquet")
    both = pd.concat([data, data.iloc[::-1]], ignore_index=True)
    kw = dict(ids="psu", strata="st", weights="w", fpc="N1")
    native = ss.SurveyDesign(both.assign(N1=both.N1), **kw)
    with DaskSurveyDesign.from_parquet(tmp_path, n_workers=2, memory_limit="1GiB",
                                       progress=True, **kw) as dk:
        # the dashboard on a free loopback port (dashboard_address=None would take :8787 on
        # every interface: dask/distributed#8136)
        assert dk._cluster.dashboard_link.startswith("http://127.0.0.1:")  # noqa: SLF001
        assert not dk._cluster.dashboard_link.startswith("http://127.0.0.1:8787")  # noqa: SLF001
        info = dk._client.scheduler_info()  # noqa: SLF001
        limits = [w["memory_limit"] for w in info["workers"].values()]
        assert limits == [2**30, 2**30]
        assert os.getpid() not in dk._client.run(os.getpid).values()  # noqa: SLF001
        got = tabulate(dk, "region", "g", value="y", stat="mean")
        cluster = dk._cluster  # noqa: SLF001
    assert "Completed" in capsys.readouterr().out
    assert cluster.status.name == "closed"
    # progress defaults to whether stdout is a terminal (pytest's capture is not): no bar
    with DaskSurveyDesign.from_parquet(tmp_path, n_workers=1, memory_limit="1GiB", **kw) as dk:
        tabulate(dk, "region", value="y", stat="mean")
    assert "Completed" not in capsys.readouterr().out
    same_table(tabulate(native, "region", "g", value="y", stat="mean"), got, "parquet")


def test_errors_and_unsupported(client):
    data = make_data(1500)
    _, dk = designs("stratified clustered fpc", data)
    before = data.copy()
    with pytest.raises(UnsupportedByDask, match="quantiles"):
        tabulate(dk, "region", value="y", stat="median")
    with pytest.raises(UnsupportedByDask, match="Wald"):
        tabulate(dk, "region", "g", stat="percent", of="row", ci_method="logit")
    with pytest.raises(ValueError, match="'cat'.*not numeric"):
        tabulate(dk, "region", value="cat", stat="mean")
    with pytest.raises(ValueError, match=r"tabulate: column 'yna' has \d+ missing.*na_rm=True"):
        tabulate(dk, "region", value="yna", stat="mean")
    with pytest.raises(ValueError, match=r"tabulate: column\(s\) \['nope'\]"):
        tabulate(dk, "nope")
    with pytest.raises(ValueError, match="needs value="):
        tabulate(dk, "region", stat="mean")
    with pytest.raises(ValueError, match="a variable may appear only once"):
        tabulate(dk, "region", "region")
    pd.testing.assert_frame_equal(data, before)
