"""tabulate(stat=proportion | percent | median | quantile): every cell equals R's svyby /
svymean / svyquantile / svyciprop (live through rpy2) on two designs (apistrat: stratified
with fpc; apiclus1: one-stage clusters with fpc); on a release, every cell equals a hand
computation of the release's combining rule from the per-set estimates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import assert_rel
from scipy import stats

from r_bridge import r_session
from surveysynth import SurveyDesign
from surveysynth.privacy.record import build_record
from surveysynth.release import SyntheticRelease
from surveysynth.tables import tabulate

R_DESIGNS = {
    "strat": "svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=apistrat)",
    "clus1": "svydesign(id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1)",
}
LEVELS = {"stype": ["E", "H", "M"], "sch.wide": ["No", "Yes"], "awards": ["No", "Yes"]}


@pytest.fixture(scope="module")
def designs(api):
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(survey)); data(api)")
        for name, code in R_DESIGNS.items():
            ro.r(f"{name} <- {code}")
    return {"strat": SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc"),
            "clus1": SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")}


def r_named(code: str) -> dict[str, tuple[float, float]]:
    """{name: (estimate, se)} of the R object ``s`` made by ``code`` (svymean or svyby of
    svymean: coef and SE in the same, variable-major, order)."""
    with r_session("survey") as (ro, _):
        ro.r(f"s <- {code}")
        names = list(ro.r("names(coef(s))"))
        est = np.array(ro.r("unname(coef(s))"), float)
        se = np.array(ro.r("as.vector(as.matrix(SE(s)))"), float)
    return dict(zip(names, zip(est, se, strict=True), strict=True))


def r_shares(d: str, f: str, by: list[str]) -> dict[tuple, tuple[float, float]]:
    """Shares of the levels of factor ``f`` by the domains ``by`` (svyby(~f, ~by, svymean);
    svymean without by), keyed by (*by values in the given order, level)."""
    if by:
        got = r_named(f"svyby(~{f}, ~{'+'.join(reversed(by))}, {d}, svymean)")
        out = {}
        for name, v in got.items():
            dom, lev = name.split(":")
            out[tuple(reversed(dom.split("."))) + (lev[len(f):],)] = v
        return out
    return {(name[len(f):],): v for name, v in r_named(f"svymean(~{f}, {d})").items()}


def r_cell_shares(d: str) -> dict[tuple, tuple[float, float]]:
    """Shares of the stype x sch.wide cells in the population: svymean of their interaction."""
    got = r_named(f"svymean(~interaction(stype, sch.wide, sep='|'), {d})")
    return {tuple(k.split(")")[-1].split("|")): v for k, v in got.items()}


def _key(row: pd.Series, names: list[str]) -> tuple:
    return tuple(str(row[n]) for n in names)


def _check(t, expected: dict, what: str, scale: float = 1.0) -> float:
    """Compare every cell of t.long with ``expected`` {cell: (key, est, se)}; returns the max
    relative difference."""
    lg = t.long
    assert lg.shape[0] == len(expected), f"{what}: {lg.shape[0]} cells vs {len(expected)}"
    est = np.array([expected[i][0] for i in range(len(lg))]) * scale
    se = np.array([expected[i][1] for i in range(len(lg))]) * scale
    assert_rel(lg.estimate, est, 1e-9, f"{what} estimate")
    assert_rel(lg.se, se, 1e-9, f"{what} se", atol=1e-9 * scale)
    ref = np.r_[est, se]
    big = np.abs(ref) > 1e-8 * scale  # SEs that are 0 up to rounding: compared absolutely
    return float(np.max(np.abs(np.r_[lg.estimate, lg.se] - ref)[big] / np.abs(ref[big])))


def _expected(lg: pd.DataFrame, lookup) -> dict:
    return {i: lookup(row) for i, row in lg.iterrows()}


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_percent_of_total_row_col_equal_r(designs, name):
    d = designs[name]
    cells = r_cell_shares(name)
    st = r_shares(name, "stype", [])
    sw = r_shares(name, "sch.wide", [])
    row = r_shares(name, "sch.wide", ["stype"])  # share of sch.wide within stype
    col = r_shares(name, "stype", ["sch.wide"])  # share of stype within sch.wide
    one = (1.0, 0.0)

    def total(r):
        return {"interior": lambda: cells[(r.stype, r["sch.wide"])],
                "row margin": lambda: st[(r.stype,)], "column margin": lambda: sw[(r["sch.wide"],)],
                "grand total": lambda: one}[r.cell]()

    def of_row(r):
        return {"interior": lambda: row[(r.stype, r["sch.wide"])], "row margin": lambda: one,
                "column margin": lambda: sw[(r["sch.wide"],)], "grand total": lambda: one}[r.cell]()

    def of_col(r):
        return {"interior": lambda: col[(r["sch.wide"], r.stype)],
                "row margin": lambda: st[(r.stype,)], "column margin": lambda: one,
                "grand total": lambda: one}[r.cell]()

    for of, fn in (("total", total), ("row", of_row), ("col", of_col)):
        t = tabulate(d, "stype", "sch.wide", stat="percent", of=of)
        err = _check(t, _expected(t.long, fn), f"{name} percent of {of}", scale=100.0)
        print(f"{name} percent of {of}: max rel diff vs R {err:.2e}")
    # the config spelling
    pd.testing.assert_frame_equal(tabulate(d, "stype", "sch.wide", stat="row percent").long,
                                  tabulate(d, "stype", "sch.wide", stat="percent", of="row").long)
    w = tabulate(d, "stype", "sch.wide", stat="percent", of="row").wide()
    np.testing.assert_allclose(w.loc[["E", "H", "M"], ["No", "Yes"]].sum(axis=1), 100, rtol=1e-12)


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_proportion_equal_r(designs, name):
    d = designs[name]
    inner = r_shares(name, "awards", ["stype", "sch.wide"])
    rows = r_shares(name, "awards", ["stype"])
    cols = r_shares(name, "awards", ["sch.wide"])
    grand = r_shares(name, "awards", [])
    t = tabulate(d, "stype", "sch.wide", value="awards", stat="proportion")
    assert t.cols == ["sch.wide", "awards"]  # the levels are a column variable

    def look(r):
        return {"interior": lambda: inner[(r.stype, r["sch.wide"], r.awards)],
                "row margin": lambda: rows[(r.stype, r.awards)],
                "column margin": lambda: cols[(r["sch.wide"], r.awards)],
                "grand total": lambda: grand[(r.awards,)]}[r.cell]()

    err = _check(t, _expected(t.long, look), f"{name} proportion")
    print(f"{name} proportion: max rel diff vs R {err:.2e}")
    w = t.wide()
    assert list(w.columns) == [("No", "No"), ("No", "Yes"), ("Yes", "No"), ("Yes", "Yes"),
                               ("All", "No"), ("All", "Yes")]
    # n_unweighted: records of the level in the cell
    lg = t.long
    e_yes = lg[(lg.cell == "interior") & (lg.stype == "E") & (lg["sch.wide"] == "Yes")
               & (lg.awards == "Yes")].n_unweighted.iloc[0]
    df = d.data
    assert e_yes == ((df.stype == "E") & (df["sch.wide"] == "Yes") & (df.awards == "Yes")).sum()


def r_quantiles(d: str, by: list[str], ps: list[float]) -> dict[tuple, tuple]:
    """{(*by values, p): (estimate, se, ci_low, ci_high)} from svyby(..., svyquantile,
    ci=TRUE) (svyquantile without by): R's Woodruff limits."""
    pv = ", ".join(map(str, ps))
    out = {}
    with r_session("survey") as (ro, _):
        if not by:
            ro.r(f"q <- svyquantile(~api00, {d}, c({pv}), ci=TRUE)$api00")
            m = np.array(ro.r("q"), float)
            for i, p in enumerate(ps):
                out[(p,)] = (m[i, 0], m[i, 3], m[i, 1], m[i, 2])
            return out
        ro.r(f"s <- svyby(~api00, ~{'+'.join(by)}, {d}, svyquantile, quantiles=c({pv}), "
             "ci=TRUE, vartype=c('se', 'ci'))")
        keys = [list(map(str, ro.r(f"as.character(s${b})"))) for b in by]
        for p in ps:
            cols = [f"{k}.api00.{p:g}" for k in ("", "se", "ci_l", "ci_u")]
            vals = [np.array(ro.r(f"s[['{c.lstrip('.')}']]"), float) for c in cols]
            for j, key in enumerate(zip(*keys, strict=True)):
                out[tuple(key) + (p,)] = tuple(v[j] for v in vals)
    return out


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_median_and_quantiles_equal_r(designs, name):
    d = designs[name]
    ps = [0.25, 0.5, 0.9]
    inner = r_quantiles(name, ["stype", "sch.wide"], ps)
    rows = r_quantiles(name, ["stype"], ps)
    cols = r_quantiles(name, ["sch.wide"], ps)
    grand = r_quantiles(name, [], ps)

    def look(r, p):
        return {"interior": lambda: inner[(r.stype, r["sch.wide"], p)],
                "row margin": lambda: rows[(r.stype, p)],
                "column margin": lambda: cols[(r["sch.wide"], p)],
                "grand total": lambda: grand[(p,)]}[r.cell]()

    worst = 0.0
    for stat, kw in (("median", {}), ("quantile", {"quantiles": ps})):
        t = tabulate(d, "stype", "sch.wide", value="api00", stat=stat, survey_version="4.1",
                     **kw)  # live R 4.1.1's quantile rule
        lg = t.long
        ref = np.array([look(r, 0.5 if stat == "median" else r["quantile"])
                        for _, r in lg.iterrows()])
        ours = lg[["estimate", "se", "ci_low", "ci_high"]].to_numpy(float)
        assert_rel(ours, ref, 1e-9, f"{name} {stat}")
        fin = np.isfinite(ref) & (ref != 0)
        worst = max(worst, float(np.max(np.abs(ours[fin] - ref[fin]) / np.abs(ref[fin]))))
    print(f"{name} median/quantile: max rel diff vs R {worst:.2e}")
    # R's qrule and interval.type are passed through (grand total vs svyquantile)
    t = tabulate(d, "stype", value="api00", stat="median", qrule="hf7", interval_type="beta",
                 survey_version="4.1")
    with r_session("survey") as (ro, _):
        m = np.array(ro.r(f"svyquantile(~api00, {name}, 0.5, ci=TRUE, qrule='hf7', "
                          "interval.type='beta')$api00"), float).ravel()
    g = t.long[t.long.cell == "grand total"].iloc[0]
    assert_rel([g.estimate, g.ci_low, g.ci_high, g.se], m[[0, 1, 2, 3]], 1e-9, "hf7/beta")


@pytest.mark.parametrize("method", ["logit", "beta", "likelihood"])
def test_ci_method_equals_svyciprop(designs, method):
    d = designs["strat"]
    t = tabulate(d, "stype", "sch.wide", stat="percent", of="row", ci_method=method)
    lg = t.long
    tol = 2e-3 if method == "likelihood" else 1e-9  # R interpolates its profile (ciprop.py)
    with r_session("survey") as (ro, _):
        for lev in ("No", "Yes"):
            ro.r(f"s <- svyby(~I(sch.wide == '{lev}'), ~stype, strat, svyciprop, "
                 f"vartype='ci', method='{method}')")
            lo, hi = np.array(ro.r("s$ci_l"), float), np.array(ro.r("s$ci_u"), float)
            ours = lg[(lg.cell == "interior") & (lg["sch.wide"] == lev)].sort_values("stype")
            assert_rel(ours.ci_low, 100 * lo, tol, f"{method} {lev} low")
            assert_rel(ours.ci_high, 100 * hi, tol, f"{method} {lev} high")
            ro.r(f"g <- svyciprop(~I(sch.wide == '{lev}'), strat, method='{method}')")
            ci = np.array(ro.r("attr(g, 'ci')"), float)
            cm = lg[(lg.cell == "column margin") & (lg["sch.wide"] == lev)]
            assert_rel(cm[["ci_low", "ci_high"]].to_numpy().ravel(), 100 * ci, tol,
                       f"{method} {lev} column margin")


@pytest.fixture(scope="module")
def release(api):
    """A small partial-synthesis release: three perturbed copies of apistrat (sch.wide and
    awards reshuffled, weights jittered), records dropped so that some cells differ."""
    rng = np.random.default_rng(7)
    df = api["apistrat"]
    sets = []
    for _ in range(3):
        f = df.assign(**{"sch.wide": rng.permutation(df["sch.wide"].to_numpy()),
                         "awards": rng.permutation(df["awards"].to_numpy()),
                         "api00": df["api00"] + rng.integers(-30, 31, len(df)),
                         "pw": df["pw"] * rng.uniform(0.8, 1.2, len(df))})
        sets.append(SurveyDesign(f.iloc[rng.permutation(len(f))[:180]], strata="stype",
                                 weights="pw"))
    priv = build_record("none", "test", m=3, epsilon=None, seeded=True)
    return SyntheticRelease(sets, "partial", priv), sets


def _hand_rule(q: np.ndarray, u: np.ndarray, kind: str, n_syn: float, n: float,
               nu_com: np.ndarray | None = None):
    """Partial (Reiter 2003) or full (Raghunathan-Reiter-Rubin 2003, floored at T_s) by hand;
    the df capped by the design df nu_com (issue 36, D8: (1/df + 1/nu_obs)^-1, nu_obs =
    nu_com (nu_com+1)/(nu_com+3) (1 - gamma), gamma = (b/m)/T partial, 0 full)."""
    m = q.shape[0]
    qbar, ubar, b = q.mean(0), u.mean(0), q.var(0, ddof=1)
    if kind == "partial":
        T = ubar + b / m
        with np.errstate(divide="ignore", invalid="ignore"):
            df = np.where(b > 0, (m - 1) * (1 + ubar / (b / m)) ** 2, np.inf)
            gamma = np.nan_to_num((b / m) / T)
    else:
        T = (1 + 1 / m) * b - ubar
        with np.errstate(divide="ignore", invalid="ignore"):
            df = (m - 1) * (1 - m * ubar / ((m + 1) * b)) ** 2
        Ts = ubar * (n_syn / n + (1 + n_syn / n) / m)  # the floor (Raab et al. 2016)
        fall = (T < Ts) | (T <= 0)
        T = np.where(fall, Ts, T)
        df = np.where(fall, np.inf, df)
        gamma = np.zeros_like(T)
    if nu_com is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            nu_obs = nu_com * (nu_com + 1) / (nu_com + 3) * (1 - gamma)
            df = np.where(nu_com > 0, 1 / (1 / df + 1 / nu_obs), df)
    return qbar, np.sqrt(T), df


@pytest.mark.parametrize("kind", ["partial", "full"])
def test_release_cells_follow_the_rule(release, kind):
    rel0, sets = release
    rel = SyntheticRelease(sets, kind, rel0.privacy, n_original=200)
    cases = [dict(stat="percent", of="row"), dict(stat="percent"),
             dict(stat="proportion", value="awards"), dict(stat="median", value="api00"),
             dict(stat="quantile", value="api00", quantiles=[0.25, 0.75])]
    for kw in cases:
        t = tabulate(rel, "stype", "sch.wide", **kw)
        per = [tabulate(d, "stype", "sch.wide", **kw).long for d in sets]
        for p in per:  # the cells line up with the release's
            assert p[t.rows + t.cols + ["cell"]].astype(str).equals(
                t.long[t.rows + t.cols + ["cell"]].astype(str))
        q = np.array([p.estimate for p in per])
        u = np.array([p.se for p in per]) ** 2
        nu = np.array([p.df for p in per], dtype=float).min(axis=0)
        qbar, se, df = _hand_rule(q, u, kind, rel.n_syn, 200, nu)
        lg = t.long
        np.testing.assert_allclose(lg.estimate, qbar, rtol=1e-12, err_msg=str(kw))
        np.testing.assert_allclose(lg.se, se, rtol=1e-12, atol=1e-12, err_msg=str(kw))
        np.testing.assert_allclose(lg.df, df, rtol=1e-12, err_msg=str(kw))
        with np.errstate(invalid="ignore"):
            crit = np.where(np.isinf(df), stats.norm.ppf(0.975), stats.t.ppf(0.975, df))
        np.testing.assert_allclose(lg.ci_low, qbar - crit * se, rtol=1e-10, atol=1e-10)
        # a set without a Woodruff SE (limit beyond the data) leaves the cell without one
        assert (np.isnan(lg.se) == np.isnan(u).any(axis=0)).all()
    # percents are 100 x the combined proportions (the rule is linear in q, quadratic in se)
    a = tabulate(rel, "stype", "sch.wide", value="awards", stat="proportion").long
    pr = rel.proportion("awards", by=["stype", "sch.wide"])
    inner = a[a.cell == "interior"].set_index(["stype", "sch.wide", "awards"]).estimate
    pr = pr.set_index(["stype", "sch.wide", "level"]).estimate
    np.testing.assert_allclose(inner.loc[pr.index].to_numpy(), pr.to_numpy(), rtol=1e-12)
    # median cells equal SyntheticRelease.quantile's combination
    med = tabulate(rel, "stype", value="api00", stat="median").long
    rq = rel.quantile("api00", 0.5, by="stype")
    np.testing.assert_allclose(med[med.cell == "interior"].se, rq.se, rtol=1e-12)


def test_errors_and_no_mutation(designs, release):
    d = designs["strat"]
    before = d.data.copy()
    with pytest.raises(ValueError, match="stat='median' needs value"):
        tabulate(d, "stype", stat="median")
    with pytest.raises(ValueError, match="of='row' needs cols"):
        tabulate(d, "stype", stat="percent", of="row")
    with pytest.raises(ValueError, match="of="):
        tabulate(d, "stype", "sch.wide", stat="percent", of="rows")
    with pytest.raises(ValueError, match="quantiles="):
        tabulate(d, "stype", value="api00", stat="quantile")
    with pytest.raises(ValueError, match="quantiles="):
        tabulate(d, "stype", value="api00", stat="quantile", quantiles=[1.5])
    with pytest.raises(ValueError, match="not numeric"):
        tabulate(d, "stype", value="awards", stat="median")
    with pytest.raises(ValueError, match="ci_method"):
        tabulate(d, "stype", value="api00", stat="mean", ci_method="logit")
    with pytest.raises(ValueError, match="combining rule"):
        tabulate(release[0], "stype", value="awards", stat="proportion", ci_method="logit")
    with pytest.raises(ValueError, match="qrule"):
        tabulate(d, "stype", value="api00", stat="median", qrule="hf10")
    pd.testing.assert_frame_equal(d.data, before)
