"""The native engine's fast path (issue 23) against the row-level path and against R.

``SurveyDesign._linearize`` computes domain ratios, totals, means and proportions from
(cluster, domain) totals of ``w y`` and ``w x`` (one bincount per column and stage; the
row-level influence values are never formed) and the variance from those pair totals, in
a dense (cluster x domain) layout with clusters in stratum order when the pair space is
small, with sorted present pairs otherwise. The references:

* the row-level path ``_ratio_core_general`` (influence value of every row, then their
  totals) with ``design_df`` and the domain row counts computed separately: kills a wrong
  pair-level combination ``(ty - R tx) / X``, a df or count taken from the wrong rows
  (zero weights, rows outside the subset, rows removed by ``na_rm``);
* the dense and the sparse layouts against each other on the same influence values: kills
  a dense kernel that forgets the zero totals of clusters without domain rows, mixes up the
  stratum order of unsorted cluster codes, or applies a lonely-PSU rule to cells the domain
  does not reach;
* R ``survey`` (live, rpy2) on designs with lonely PSUs, several stages with fpc, missing
  values in a domain, a level absent from a domain, subsets, and both layouts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.variance import taylor
from surveysynth.variance.taylor import DomainPairs, design_df
from tests.conftest import assert_rel

LONELY = ["remove", "certainty", "adjust", "average"]


def synthetic(n: int = 3000, seed: int = 3, shuffle: bool = True, nan: bool = True) -> pd.DataFrame:
    """Stratified two-stage sample: 12 strata, 2-6 PSUs each (two strata with ONE PSU),
    2-4 SSUs per PSU, fpc at both stages; y with missing values, x > 0 (a few missing), a
    3-level factor whose level "c" is absent from domain 2, a domain that misses a stratum."""
    rng = np.random.default_rng(seed)
    n_psu = np.array([1, 3, 2, 6, 4, 1, 5, 2, 3, 4, 2, 3])
    H = n_psu.shape[0]
    psu_stratum = np.repeat(np.arange(H), n_psu)
    K = psu_stratum.shape[0]
    ssu_per_psu = rng.integers(2, 5, K)
    ssu_psu = np.repeat(np.arange(K), ssu_per_psu)
    row_ssu = np.sort(np.r_[np.arange(ssu_psu.shape[0]),
                            rng.integers(0, ssu_psu.shape[0], n - ssu_psu.shape[0])])
    psu = ssu_psu[row_ssu]
    st = psu_stratum[psu]
    dom = rng.integers(0, 5, n)
    dom[(st == 4) & (dom == 3)] = 1  # domain 3 misses stratum 4
    y = rng.gamma(2.0, 10.0, n) + st
    if nan:
        y[rng.choice(n, 40, replace=False)] = np.nan
    g = np.array(["a", "b", "c"])[rng.integers(0, 3, n)]
    g[(dom == 2) & (g == "c")] = "a"
    df = pd.DataFrame({
        "st": st, "psu": psu, "ssu": row_ssu, "dom": dom, "y": y,
        "x": y * rng.uniform(0.2, 0.8, n) + rng.uniform(1, 3, n) if not nan else
        np.where(np.isnan(y), 1.0, y) * rng.uniform(0.2, 0.8, n) + rng.uniform(1, 3, n),
        "g": pd.Categorical(g, categories=["a", "b", "c"]), "w": rng.uniform(1, 9, n),
        "N1": (n_psu * 3)[st].astype(float), "N2": (ssu_per_psu * 2)[psu].astype(float),
    })
    df["x"] = df["x"].where(rng.random(n) > 0.01)  # a few missing denominators
    if shuffle:  # cluster codes (order of first appearance) are then not in stratum order
        df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    return df


def one_stage(df, lonely="remove", domain_lonely=False, survey_version="4.5"):
    return ss.SurveyDesign(df, ids="psu", strata="st", weights="w", fpc="N1", lonely_psu=lonely,
                           adjust_domain_lonely=domain_lonely, survey_version=survey_version)


def two_stage(df, lonely="remove", domain_lonely=False, survey_version="4.5"):
    return ss.SurveyDesign(df, ids="~psu+ssu", strata="st", weights="w", fpc="~N1+N2",
                           lonely_psu=lonely, adjust_domain_lonely=domain_lonely,
                           survey_version=survey_version)


def inputs(d: ss.SurveyDesign, stat: str, by="dom"):
    """(Y, X, dom, D, x_is_one, levels) as the estimators pass them to the core."""
    cols = {"total": ["y"], "mean": ["y"], "ratio": ["y", "x"], "proportion": ["g"]}[stat]
    na = d.missing_rows(cols, True, stat)
    dom, D, _ = d.domains(by, na)
    if stat == "proportion":
        Y, levels = d.level_indicators("g")
        codes = np.where(np.isnan(Y[:, 0]), -1, Y.argmax(axis=1))
        Y = np.nan_to_num(Y)
        return Y, np.ones_like(Y), dom, D, True, (codes, len(levels))
    y = np.nan_to_num(d.numeric_values("y"))[:, None]
    if stat == "total":
        return y, None, dom, D, False, None
    x = np.ones_like(y) if stat == "mean" else np.nan_to_num(d.numeric_values("x"))[:, None]
    return y, x, dom, D, stat == "mean", None


def check_against_row_level(d, stat, by="dom"):
    Y, X, dom, D, x_is_one, levels = inputs(d, stat, by)
    # the row-level reference path (private: the fast path replaced it in the public hooks)
    ref_est, ref_var, ref_z = d._ratio_core_general(Y, X, dom, D)  # noqa: SLF001
    ref_df = design_df(d.stages[0], dom, D, d.full_weights > 0)
    ref_n = np.bincount(dom[dom >= 0], minlength=D)
    est, var, z = d.domain_ratios(Y, X, dom, D)  # the public hook, fast path, X read
    assert_rel(est, ref_est, 1e-12, f"{stat} estimate")
    assert_rel(var, ref_var, 1e-10, f"{stat} variance")
    assert_rel(z, ref_z, 1e-10, f"{stat} influence values", atol=1e-12)
    for lev in (None, levels) if levels is not None else (None,):
        args = (None, None) if lev is not None else (Y, X)
        # the estimators' internal call: X = 1 not read, level codes, df and counts
        est, var, z, dfs, n = d._linearize(  # noqa: SLF001
            *args, dom, D, want_z=True, want_df=True, x_is_one=x_is_one, levels=lev)
        assert_rel(est, ref_est, 1e-12, f"{stat} estimate")
        assert_rel(var, ref_var, 1e-10, f"{stat} variance")
        assert_rel(z, ref_z, 1e-10, f"{stat} influence values", atol=1e-12)
        assert np.array_equal(dfs, ref_df), (stat, dfs, ref_df)
        assert np.array_equal(n, ref_n), (stat, n, ref_n)


@pytest.mark.parametrize("stat", ["total", "mean", "ratio", "proportion"])
@pytest.mark.parametrize("build", [one_stage, two_stage])
@pytest.mark.parametrize("lonely", LONELY)
def test_fast_path_equals_row_level_path(stat, build, lonely):
    df = synthetic()
    for domain_lonely in (False, True):
        d = build(df, lonely, domain_lonely)
        check_against_row_level(d, stat)
        check_against_row_level(d, stat, by=None)
        # a subset: rows outside every domain, df and counts from the rows inside only
        check_against_row_level(d.subset(d.data["st"] != 3), stat)


def test_fast_path_zero_weight_rows_and_sparse_layout():
    """Zero weights (a calibrated design's; here set directly on an uncalibrated copy so the
    fast path runs) leave the variance alone but not the df; one-row PSUs crossed with many
    domains take the sorted-pairs layout."""
    df = synthetic(nan=False)
    d = one_stage(df)
    w = np.array(d.full_weights)
    w[np.flatnonzero(df["dom"].to_numpy() == 1)[::3]] = 0.0
    w[df["psu"].to_numpy() == 7] = 0.0  # a whole PSU with weight 0: it leaves the df
    z = object.__new__(type(d))
    z.__dict__.update(d.__dict__)
    z._w = w  # noqa: SLF001 - no public way to zero a weight without calibrating
    assert not (z.full_weights > 0).all()
    for stat in ("total", "mean", "ratio", "proportion"):
        check_against_row_level(z, stat)
    rng = np.random.default_rng(5)
    big = pd.DataFrame({"st": np.repeat(np.arange(40), 100), "y": rng.normal(5, 2, 4000),
                        "x": rng.uniform(1, 2, 4000), "w": rng.uniform(1, 3, 4000),
                        "g": rng.choice(["u", "v"], 4000), "dom": rng.integers(0, 300, 4000)})
    e = ss.SurveyDesign(big, strata="st", weights="w")  # 4000 PSUs x 300 domains: sparse
    pairs = DomainPairs(e.stages[0], e.stages[0].cluster, big["dom"].to_numpy(), 300)
    assert not pairs.dense
    for stat in ("total", "mean", "ratio", "proportion"):
        check_against_row_level(e, stat)


@pytest.mark.parametrize("build", [one_stage, two_stage])
@pytest.mark.parametrize("lonely", LONELY + ["fail"])
def test_dense_and_sparse_layouts_agree(build, lonely):
    df = synthetic()
    if lonely == "fail":  # no lonely stratum at all: drop the one-PSU strata
        df = df[~df["st"].isin([0, 5])].reset_index(drop=True)
    for domain_lonely in (False, True):
        d = build(df, lonely, domain_lonely)
        assert d.stages[0].stratum_layout[0] is not None, "cluster codes should be unsorted"
        dom = d.domains("dom", d.missing_rows(["y"], True, "mean"))[0]
        keep = dom >= 0
        D = int(dom.max()) + 1
        rng = np.random.default_rng(1)
        z = rng.normal(size=(int(keep.sum()), 3))
        for number, stage in enumerate(d.stages if d.has_fpc else d.stages[:1], start=1):
            clu = stage.cluster[keep]
            out = []
            for dense in (True, False):
                pairs = DomainPairs(stage, clu, dom[keep], D, dense=dense)
                assert pairs.dense == dense
                T = [pairs.totals(z[:, v]) for v in range(3)]
                out.append((pairs.variance(T, lonely, domain_lonely, number), pairs.df(),
                            pairs.row_counts()))
            assert_rel(out[0][0], out[1][0], 1e-12, f"stage {number} variance")
            assert np.array_equal(out[0][1], out[1][1])
            assert np.array_equal(out[0][2], out[1][2])


def test_lonely_fail_error_is_the_same_in_both_layouts(monkeypatch):
    d = one_stage(synthetic(), lonely="fail")
    with pytest.raises(taylor.LonelyPSUError, match=r"has only one PSU at stage 1") as dense:
        d.mean("y", by="dom", na_rm=True)
    monkeypatch.setattr(taylor, "DENSE_PAIRS_PER_ROW", -10**9)  # force the sorted pairs
    with pytest.raises(taylor.LonelyPSUError) as sparse:
        d.mean("y", by="dom", na_rm=True)
    assert str(dense.value) == str(sparse.value)
    # a domain that reaches no lonely stratum has a variance in both layouts
    ok = d.subset(~d.data["st"].isin([0, 5])).mean("y", by="dom", na_rm=True)
    assert np.isfinite(ok.se).all()


def test_estimates_do_not_depend_on_row_order_or_layout(monkeypatch):
    df = synthetic(shuffle=False)
    shuffled = df.sample(frac=1.0, random_state=9)
    a = two_stage(df).ratio("y", "x", by="dom", na_rm=True)
    b = two_stage(shuffled).ratio("y", "x", by="dom", na_rm=True)
    monkeypatch.setattr(taylor, "DENSE_PAIRS_PER_ROW", -10**9)
    c = two_stage(shuffled).ratio("y", "x", by="dom", na_rm=True)
    for other in (b, c):
        assert_rel(other.estimate, a.estimate, 1e-12)
        assert_rel(other.se, a.se, 1e-11)
        assert np.array_equal(other.df, a.df) and np.array_equal(other.n, a.n)


# ----------------------------------------------------------------------------- against R
def _r_frame(R_session_df: pd.DataFrame):
    from r_bridge import r_session
    from r_bridge.convert import pandas_to_r

    with r_session("survey") as (ro, _):
        ro.globalenv["fp"] = pandas_to_r(R_session_df)


R_DESIGNS = {
    "one_stage": (one_stage, "svydesign(id=~psu, strata=~st, weights=~w, fpc=~N1, data=fp)"),
    "two_stage": (two_stage,
                  "svydesign(id=~psu+ssu, strata=~st, weights=~w, fpc=~N1+N2, data=fp)"),
}


def r_by(R, expr: str, design: str, lonely: str, domain_lonely: bool):
    out = R(
        f"local({{ options(survey.lonely.psu='{lonely}', "
        f"survey.adjust.domain.lonely={'TRUE' if domain_lonely else 'FALSE'}); d <- {design}; "
        f"b <- {expr}; r <- c(as.numeric(coef(b)), as.numeric(as.matrix(SE(b)))); "
        "options(survey.lonely.psu='fail', survey.adjust.domain.lonely=FALSE); r })")
    k = out.shape[0] // 2
    return out[:k], out[k:]


@pytest.mark.parametrize("name", list(R_DESIGNS))
@pytest.mark.parametrize("lonely,domain_lonely", [("remove", False), ("certainty", False),
                                                   ("adjust", True), ("average", False),
                                                   ("average", True)])
@pytest.mark.parametrize("dense", [True, False])
def test_fast_path_matches_r(R, monkeypatch, name, lonely, domain_lonely, dense):
    df = synthetic()
    _r_frame(df)
    if not dense:
        monkeypatch.setattr(taylor, "DENSE_PAIRS_PER_ROW", -10**9)
    build, rd = R_DESIGNS[name]
    d = build(df, lonely, domain_lonely, survey_version="4.1")  # live R 4.1.1's "adjust"
    sub = d.subset(d.data["st"] != 3)
    rsub = f"subset({rd}, st != 3)"
    cases = [
        (d.total("y", by="dom", na_rm=True), "svyby(~y, ~dom, d, svytotal, na.rm=TRUE)", rd),
        (d.mean("y", by="dom", na_rm=True), "svyby(~y, ~dom, d, svymean, na.rm=TRUE)", rd),
        (d.ratio("y", "x", by="dom", na_rm=True),
         "svyby(~y, ~dom, d, svyratio, denominator=~x, na.rm=TRUE)", rd),
        (sub.mean("y", by="dom", na_rm=True), "svyby(~y, ~dom, d, svymean, na.rm=TRUE)", rsub),
    ]
    for ours, expr, design in cases:
        est, se = r_by(R, expr, design, lonely, domain_lonely)
        assert_rel(ours.estimate, est, what=f"{expr} estimate")
        assert_rel(ours.se, se, what=f"{expr} se", atol=1e-12)
    # proportions of a factor, one level absent from domain 2: R's svyby columns are
    # level-major, ours domain-major
    ours = d.proportion("g", by="dom")
    est, se = r_by(R, "svyby(~g, ~dom, d, svymean)", rd, lonely, domain_lonely)
    order = np.argsort(np.tile(np.arange(3), 5), kind="stable")
    assert_rel(ours.estimate.to_numpy()[order], est, what="proportion")
    assert_rel(ours.se.to_numpy()[order], se, what="proportion se", atol=1e-12)
    # each domain's df is R's degf of the domain subset (y present)
    r_df = R(f"local({{ d <- {rd}; sapply(0:4, function(k) degf(subset(d, dom == k & "
             "!is.na(y)))) })")
    assert np.array_equal(d.mean("y", by="dom", na_rm=True).df.to_numpy(), r_df)
