"""tabulate(): cell-by-cell parity with R svyby/svytotal/svymean, additivity, flags, exports."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import assert_rel

from r_bridge import r_session
from surveysynth import SurveyDesign
from surveysynth.privacy.record import build_record
from surveysynth.release import SyntheticRelease
from surveysynth.replicate_design import ReplicateDesign
from surveysynth.tables import Table, tabulate

R_DESIGN = (
    "suppressMessages(library(survey)); data(api); "
    "des <- update(svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=apistrat), one=1)"
)


def _r_cells(design: str, stat: str) -> dict:
    """{(stype, sch.wide): (estimate, se)} from R, 'All' on margins, for design object name."""
    var, fun = ("~one", "svytotal") if stat == "count" else ("~api00", "svymean")
    calls = {
        "interior": f"svyby({var}, ~stype+sch.wide, {design}, {fun})",
        "rows": f"svyby({var}, ~stype, {design}, {fun})",
        "cols": f"svyby({var}, ~sch.wide, {design}, {fun})",
        "total": f"{fun}({var}, {design})",
    }
    out = {}
    with r_session("survey") as (ro, _):
        for kind, call in calls.items():
            ro.r(f"tmp <- {call}")
            est = np.array(ro.r("unname(coef(tmp))"), float)
            se = np.array(ro.r("unname(SE(tmp))"), float).ravel()
            if kind == "total":
                keys = [("All", "All")]
            else:
                st = list(ro.r("if (is.null(tmp$stype)) rep('All', nrow(tmp)) else "
                               "as.character(tmp$stype)"))
                sw = list(ro.r("if (is.null(tmp$sch.wide)) rep('All', nrow(tmp)) else "
                               "as.character(tmp$sch.wide)"))
                keys = list(zip(st, sw, strict=True))
            for k, e, s in zip(keys, est, se, strict=True):
                out[k] = (e, s)
    return out


def _compare(table: Table, ref: dict) -> None:
    lg = table.long
    keys = list(zip(lg["stype"].astype(str), lg["sch.wide"].astype(str), strict=True))
    assert sorted(keys) == sorted(ref), "cells differ from R's"
    est = np.array([ref[k][0] for k in keys])
    se = np.array([ref[k][1] for k in keys])
    assert_rel(lg.estimate, est, 1e-9, "estimate")
    # stratum counts are known exactly under fpc: R's SE is 0 up to rounding there
    assert_rel(lg.se, se, 1e-9, "se", atol=1e-7)


@pytest.fixture(scope="module")
def strat(api):
    with r_session("survey") as (ro, _):
        ro.r(R_DESIGN)
    return SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")


@pytest.mark.parametrize("stat", ["count", "mean"])
def test_design_matches_r(strat, stat):
    kw = {} if stat == "count" else {"value": "api00", "stat": "mean"}
    t = tabulate(strat, "stype", "sch.wide", **kw)
    assert t.long.shape[0] == 3 * 2 + 3 + 2 + 1
    _compare(t, _r_cells("des", stat))


@pytest.mark.parametrize("stat", ["count", "mean"])
def test_replicate_design_matches_r(api, stat):
    with r_session("survey") as (ro, _):
        ro.r(R_DESIGN)
        ro.r("set.seed(42); rdes <- as.svrepdesign(des, type='bootstrap', replicates=40)")
        rep = np.array(ro.r("weights(rdes, 'analysis')"), float)
        scale = float(ro.r("rdes$scale")[0])
        rscales = np.array(ro.r("rdes$rscales"), float)
    rd = ReplicateDesign(api["apistrat"], repweights=rep, weights="pw", type="other",
                         scale=scale, rscales=rscales, combined_weights=True)
    kw = {} if stat == "count" else {"value": "api00", "stat": "mean"}
    t = tabulate(rd, "stype", "sch.wide", **kw)
    _compare(t, _r_cells("rdes", stat))


def test_counts_add_up_for_design_and_release(strat, api):
    rng = np.random.default_rng(1)
    df = api["apistrat"]
    # synthetic-like sets: reshuffle sch.wide, jitter weights (unequal across sets)
    sets = []
    for _ in range(3):
        f = df.assign(**{"sch.wide": rng.permutation(df["sch.wide"].to_numpy()),
                         "pw": df["pw"] * rng.uniform(0.8, 1.2, len(df))})
        sets.append(SurveyDesign(f, strata="stype", weights="pw"))
    priv = build_record("none", "test", m=3, epsilon=None, seeded=True)
    rel = SyntheticRelease(sets, "partial", priv)
    for src in (strat, rel):
        lg = tabulate(src, "stype", "sch.wide").long
        inner = lg[lg.cell == "interior"]
        rows = lg[lg.cell == "row margin"].set_index("stype").estimate
        cols = lg[lg.cell == "column margin"].set_index("sch.wide").estimate
        total = lg[lg.cell == "grand total"].estimate.iloc[0]
        by_row = inner.groupby("stype").estimate.sum()
        by_col = inner.groupby("sch.wide").estimate.sum()
        np.testing.assert_allclose(by_row[rows.index], rows, rtol=1e-12)
        np.testing.assert_allclose(by_col[cols.index], cols, rtol=1e-12)
        assert inner.estimate.sum() == pytest.approx(total, rel=1e-12)
        assert rows.sum() == pytest.approx(total, rel=1e-12)
    # release cells are the partial-rule combination of the per-set cells
    lg = tabulate(rel, "stype", "sch.wide").long
    per = [tabulate(d, "stype", "sch.wide").long for d in sets]
    q = np.array([p.estimate for p in per])
    u = np.array([p.se for p in per]) ** 2
    tp = u.mean(0) + q.var(0, ddof=1) / 3
    np.testing.assert_allclose(lg.se, np.sqrt(tp), rtol=1e-12)
    assert {"between", "within", "note"} <= set(lg.columns)


def test_flags_thresholds_and_empty_cells(api):
    df = api["apistrat"].assign(region=lambda f: np.where(f["stype"] == "H", "north", "south"))
    d = SurveyDesign(df, strata="stype", weights="pw")
    t = tabulate(d, "stype", "region", cv_max=0.05, n_min=60)
    lg = t.long
    empty = lg[(lg.stype == "H") & (lg.region == "south")].iloc[0]
    assert empty.estimate == 0 and empty.se == 0 and empty.n_unweighted == 0
    assert empty.flag and "empty" in empty.flag_reason
    n_small = lg.n_unweighted < 60
    assert (lg.flag_reason.str.contains("n<60") == n_small).all()
    cv = lg.se / lg.estimate.abs()
    assert (lg.flag_reason.str.contains("cv>0.05") == (cv > 0.05)).all()
    assert (lg.flag == (lg.flag_reason != "")).all()
    t2 = tabulate(d, "stype", "region", value="api00", stat="mean", cv_max=None, n_min=None)
    e2 = t2.long[(t2.long.stype == "H") & (t2.long.region == "south")].iloc[0]
    assert np.isnan(e2.estimate) and e2.flag_reason == "empty; no estimate"
    assert not t2.long.flag_reason.str.contains("cv|n<").any()
    # n_unweighted is the number of records
    inner = lg[lg.cell == "interior"]
    for (st, rg), n in df.groupby(["stype", "region"], observed=True).size().items():
        assert inner[(inner.stype == st) & (inner.region == rg)].n_unweighted.iloc[0] == n


def test_views_and_exports(strat, tmp_path):
    before = strat.data.copy()
    t = tabulate(strat, "stype", "sch.wide", value="api00", stat="mean")
    w = t.wide("estimate")
    assert list(w.index) == ["E", "H", "M", "All"] and list(w.columns) == ["No", "Yes", "All"]
    lg = t.long
    assert w.loc["H", "Yes"] == lg[(lg.stype == "H") & (lg["sch.wide"] == "Yes")].estimate.iloc[0]
    assert w.loc["All", "All"] == lg[lg.cell == "grand total"].estimate.iloc[0]
    assert "*" in t.display().loc["E", "No"]
    d = int(np.clip(1 - np.floor(np.log10(np.median(lg.se))), 0, 6))  # 2 significant SE digits
    back = pd.read_csv(t.to_csv(tmp_path / "t.csv"), comment="#")
    np.testing.assert_allclose(back.estimate, lg.estimate.round(d), rtol=0, atol=1e-9)
    np.testing.assert_allclose(back.se, lg.se.round(d), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(back.df, np.floor(lg.df).astype(int))  # written as integers
    assert back.df.iloc[-1] == 200 - 3 and back.df.dtype == np.int64  # apistrat: n - H
    t.to_excel(tmp_path / "t.xlsx")
    xl = pd.read_excel(tmp_path / "t.xlsx", sheet_name=None)
    assert set(xl) == {"table", "text", "estimate", "se", "long", "notes"}
    np.testing.assert_allclose(xl["long"].se, lg.se.round(d), rtol=0, atol=1e-9)
    tex = t.to_latex(tmp_path / "t.tex")
    assert "\\begin{tabular}" in tex and "sch.wide" in tex and (tmp_path / "t.tex").exists()
    html = t.to_html()
    assert "<table" in html and "unreliable" in html
    assert "mean of api00" in repr(t)
    one = tabulate(strat, "stype", value="api00", stat="mean")
    assert list(one.wide().index) == ["E", "H", "M", "All"]
    pd.testing.assert_frame_equal(strat.data, before)


def test_export_digits_labels_df_and_xlsx_cells(strat, tmp_path):
    """Exports fit to publish: decimals follow the SE (a 0/1 mean is not "0.1 (0.0)"), digits
    are configurable per statistic, value labels replace codes, the wide CSV names the column
    variable, df is an integer or "inf", n_unweighted an integer, XLSX cells are numbers."""
    import openpyxl

    before = strat.data.copy()
    d01 = SurveyDesign(strat.data.assign(yes=(strat.data["sch.wide"] == "Yes").astype(float)),
                       strata="stype", weights="pw", fpc="fpc")
    t = tabulate(d01, "stype", "awards", value="yes", stat="mean")
    lg = t.long
    e, s = lg.estimate.iloc[0], lg.se.iloc[0]
    d = int(np.clip(1 - np.floor(np.log10(np.median(lg.se[lg.se > 0]))), 0, 6))
    assert d >= 2  # SEs of a 0/1 mean are below 0.1
    key = (lg.stype.iloc[0], lg.awards.iloc[0])
    assert t.display().loc[key[0], key[1]].rstrip("*") == f"{e:,.{d}f} ({s:,.{d}f})"
    assert t.display({"estimate": 4, "se": 1}).loc[key[0], key[1]].rstrip("*") == \
        f"{e:,.4f} ({s:,.1f})"
    with pytest.raises(ValueError, match="digits"):
        t.display({"est": 2})
    # value labels (TOML gives string keys), margins untouched
    labels = {"stype": {"E": "Elementary", "H": "High"}}
    wide = t.to_csv(tmp_path / "w.csv", wide=True, labels=labels, title="Share of sch.wide")
    text = wide.read_text()
    assert text.startswith("# Share of sch.wide\n")
    w = pd.read_csv(wide, comment="#", index_col=0)
    assert list(w.columns) == ["awards: No", "awards: Yes", "awards: All"]
    assert list(w.index) == ["Elementary", "High", "M", "All"]
    # df and n as published: integers or "inf"; blank when there is none
    odd = Table(lg.assign(df=[3.004e53, 12.7, np.nan, np.inf] + [197.0] * (len(lg) - 4),
                          n_unweighted=lg.n_unweighted + 1 / 3), t.rows, t.cols, t.stat,
                t.value, t.margin_label, t.meta)
    ex = odd.export_frame()
    assert ex.df.iloc[:2].tolist() == ["inf", "12"] and pd.isna(ex.df.iloc[2])
    assert ex.df.iloc[3] == "inf" and ex.df.iloc[4] == "197"
    assert ex.n_unweighted.dtype == np.int64
    np.testing.assert_array_equal(ex.n_unweighted, lg.n_unweighted.astype(int))
    csv = odd.to_csv(tmp_path / "odd.csv").read_text()
    assert "e+53" not in csv and ".333" not in csv
    # XLSX: numeric cells with number formats, labels, title, flagged cells shaded
    t.to_excel(tmp_path / "t.xlsx", title="Share of sch.wide", digits={"estimate": 3, "se": 3},
               labels=labels)
    wb = openpyxl.load_workbook(tmp_path / "t.xlsx")
    ws = wb["table"]
    assert ws["A1"].value == "Share of sch.wide"
    assert [ws.cell(3, c).value for c in (2, 4, 6)] == ["awards: No", "awards: Yes", "awards: All"]
    assert ws.cell(5, 1).value == "Elementary"
    first = ws.cell(5, 2)
    assert isinstance(first.value, float) and first.number_format == "#,##0.000"
    grid = t.wide("estimate")
    assert first.value == pytest.approx(grid.iloc[0, 0], rel=1e-12)  # full value, formatted
    assert ws.cell(5, 3).value == pytest.approx(t.wide("se").iloc[0, 0], rel=1e-12)
    flags = t.wide("flag").to_numpy(bool)
    assert flags.any() and not flags.all()
    fills = np.array([[ws.cell(5 + i, 2 + 2 * j).fill.start_color.rgb == "00FFF2CC"
                       for j in range(flags.shape[1])] for i in range(flags.shape[0])])
    np.testing.assert_array_equal(fills, flags)
    assert wb["text"].cell(1, 2).value == "awards: No"
    pd.testing.assert_frame_equal(strat.data, before)


def test_errors(strat, api):
    with pytest.raises(ValueError, match="stat"):
        tabulate(strat, "stype", stat="median")
    with pytest.raises(ValueError, match="needs value"):
        tabulate(strat, "stype", stat="mean")
    with pytest.raises(ValueError, match="column"):
        tabulate(strat, "nope")
    with pytest.raises(ValueError, match="only once"):
        tabulate(strat, "stype", "stype")
    with pytest.raises(ValueError, match="SurveyDesign, ReplicateDesign"):
        tabulate(api["apistrat"], "stype")
    df = api["apistrat"].copy()
    df.loc[df.index[3], "api00"] = np.nan
    d = SurveyDesign(df, strata="stype", weights="pw")
    with pytest.raises(ValueError, match="api00"):
        tabulate(d, "stype", value="api00", stat="mean")
    ok = tabulate(d, "stype", value="api00", stat="mean", na_rm=True)
    assert np.isfinite(ok.long.estimate).all()
