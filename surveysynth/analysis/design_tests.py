"""Design-based hypothesis tests: R ``svychisq``, ``svyttest`` and ``svyranktest`` (survey 4.1).

Every variance comes from the core (``domain_ratios`` through
:mod:`surveysynth.analysis.covariance`), so the tests work on linearization and replicate designs
alike, subsets included.

* :func:`svychisq` -- two-way table association. ``statistic="F"`` (R's default): Pearson's X^2
  of the weighted table scaled to the sample size, divided by the mean generalized design effect
  ``tr(Delta)`` (Rao-Scott second-order correction), referred to F with ``d0 = tr(Delta)^2 /
  tr(Delta^2)`` and ``d0 * nu`` df (``nu`` = design df). ``"Chisq"``: X^2 itself, p from
  chi-square((r-1)(c-1)) at X^2 / mean eigenvalue of Delta (first-order). ``"Wald"``: Koch et al.'s
  Wald test of ``N_ij - N_i. N_.j / N`` = 0 over the (r-1)(c-1) non-reference cells, divided by
  its df, F with (r-1)(c-1) and nu df; ``"adjWald"``: Felligi's adjusted F.
* :func:`svyttest` -- ``"y ~ 1"`` (or ``~ 0``): one-sample t of the mean, df = design df - 1;
  ``"y ~ g"`` with a binary g: the svyglm coefficient of g (difference of means), df = design
  df - 1; paired: ``"I(a - b) ~ 0"`` (a one-sample test of the difference, as in R).
* :func:`svyranktest` -- R's design-based Wilcoxon (default), van der Waerden, median or
  Kruskal-Wallis test: estimated population mid-ranks, a weighted regression of the rank score on
  the group, its design-based SE; two groups give a t statistic on design df - 1, more groups R's
  ``multiranktest`` F (linearization designs).

Missing values: an error naming the column unless ``na_rm=True`` (R's ``svychisq`` drops them by
default; the other R tests drop rows silently too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import linalg, stats

from ..estimate import category_levels
from .covariance import influence_covariance, mean_covariance, total_covariance
from .formulas import formula_columns, formula_matrix, quote_dotted
from .glm import svyglm
from .htest import TestResult


def _scope(design: Any, columns: list[str], na_rm: bool, what: str) -> np.ndarray:
    """Rows of full_data in the design and without missing values in ``columns``."""
    missing = [c for c in columns if c not in design.full_data.columns]
    if missing:
        raise ValueError(f"{what}: columns {missing} are not in the design's data.")
    na = design.missing_rows(columns, na_rm, what)
    inside = np.asarray(design.in_subset, dtype=bool)
    return inside if na is None else inside & ~np.asarray(na, dtype=bool)


def _present_levels(series: pd.Series) -> list:
    """Levels in R's order that occur in ``series`` (R ``factor()`` drops unused levels)."""
    present = set(series.dropna().tolist())
    return [lev for lev in category_levels(series) if lev in present]


def _two_way_formula(formula: str) -> tuple[str, str]:
    if not isinstance(formula, str) or not formula.strip().startswith("~"):
        raise ValueError(f"svychisq: formula={formula!r}: give '~row + col' (two variables).")
    parts = [p.strip().strip("`") for p in formula.strip()[1:].split("+")]
    if len(parts) != 2 or not all(parts):
        raise ValueError(
            f"svychisq: formula={formula!r}: only two-way tables, '~row + col' (R: 'Only 2-way "
            "tables at the moment')."
        )
    return parts[0], parts[1]


def _codes(series: pd.Series, levels: list, rows: np.ndarray) -> np.ndarray:
    return np.where(rows, pd.Index(levels).get_indexer(series), -1)


def svychisq(formula: str, design: Any, statistic: str = "F", na_rm: bool = False) -> TestResult:
    """Design-based test of association in a two-way table (R ``svychisq``).

    ``statistic``: ``"F"`` (Rao-Scott second-order, R's default), ``"Chisq"`` (Rao-Scott
    first-order), ``"Wald"`` or ``"adjWald"``. ``formula`` is ``"~row + col"``.
    """
    if statistic not in ("F", "Chisq", "Wald", "adjWald"):
        raise ValueError(f"statistic={statistic!r}: choose 'F', 'Chisq', 'Wald' or 'adjWald'.")
    rvar, cvar = _two_way_formula(formula)
    rows = _scope(design, [rvar, cvar], na_rm, "svychisq")
    full = design.full_data
    rlev, clev = _present_levels(full[rvar][rows]), _present_levels(full[cvar][rows])
    nr, nc = len(rlev), len(clev)
    if nr < 2 or nc < 2:
        raise ValueError(f"svychisq: {rvar!r} has {nr} and {cvar!r} {nc} levels; need >= 2 each.")
    ri, ci = _codes(full[rvar], rlev, rows), _codes(full[cvar], clev, rows)
    cell = np.where(rows, ri + nr * ci, -1)  # R interaction(): the row variable fastest
    mm = (cell[:, None] == np.arange(nr * nc)[None, :]).astype(float)
    codes = np.where(rows, 0, -1)
    inside = np.asarray(design.in_subset, dtype=bool)
    N = float(inside.sum())  # R: nrow(model.matrix(..., na.pass)): every row of the design
    nu = float(design.domain_df(np.where(inside, 0, -1), 1)[0])
    w = np.asarray(design.full_weights, dtype=float)
    table = np.bincount(cell[rows], weights=w[rows], minlength=nr * nc).reshape(nc, nr).T
    table = table / table.sum() * N
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / N
    pearson = float(((table - expected) ** 2 / expected).sum())
    details = {"pearson": pearson, "table": table, "N": N, "nu": nu}
    if statistic in ("Wald", "adjWald"):
        return _wald(design, mm, ri, ci, nr, nc, codes, nu, statistic, details)
    return _rao_scott(design, mm, nr, nc, codes, N, nu, pearson, statistic, details)


def _rao_scott(design, mm, nr, nc, codes, N, nu, pearson, statistic, details) -> TestResult:
    mean2, V = mean_covariance(design, mm, codes)
    grid_r = np.tile(np.arange(nr), nc)
    grid_c = np.repeat(np.arange(nc), nr)
    X1 = np.column_stack([np.ones(nr * nc)]
                         + [(grid_r == i).astype(float) for i in range(1, nr)]
                         + [(grid_c == j).astype(float) for j in range(1, nc)])
    X12 = np.column_stack([(grid_r == i) & (grid_c == j) for j in range(1, nc)
                           for i in range(1, nr)]).astype(float)
    # R: qr.resid(qr(X1), interaction columns): residuals of the projection on X1
    Cmat = X12 - X1 @ linalg.lstsq(X1, X12)[0]
    inv = np.where(mean2 == 0, 0.0, 1.0 / np.where(mean2 == 0, 1.0, mean2))
    denom = Cmat.T @ (Cmat * (inv / N)[:, None])
    numr = (Cmat * inv[:, None]).T @ V @ (Cmat * inv[:, None])
    Delta = np.linalg.solve(denom, numr)
    trace = float(np.trace(Delta))
    d0 = trace**2 / float(np.trace(Delta @ Delta))
    details.update(delta=Delta, d0=d0)
    if statistic == "F":
        f = pearson / trace
        return TestResult("Pearson's X^2: Rao & Scott adjustment (F)", f, "F",
                          {"ndf": d0, "ddf": d0 * nu},
                          float(stats.f.sf(f, d0, d0 * nu)), details=details)
    k = Delta.shape[0]
    p = float(stats.chi2.sf(pearson / (trace / k), k))
    return TestResult("Pearson's X^2: Rao & Scott adjustment", pearson, "X-squared",
                      {"df": float(k)}, p, details=details)


def _wald(design, mm, ri, ci, nr, nc, codes, nu, statistic, details) -> TestResult:
    mr = (ri[:, None] == np.arange(nr)[None, :]).astype(float)
    mc = (ci[:, None] == np.arange(nc)[None, :]).astype(float)
    Y = np.column_stack([mm, mr, mc, (codes >= 0).astype(float)])
    totals = design.domain_ratios(Y, None, codes, 1)[0][0]
    Vt = total_covariance(design, Y, codes)
    K = nr * nc
    cells, rt, ct, one = totals[:K], totals[K:K + nr], totals[K + nr:K + nr + nc], totals[-1]
    gr = np.tile(np.arange(nr), nc)
    gc = np.repeat(np.arange(nc), nr)
    J = np.zeros((K, Y.shape[1]))
    J[:, :K] = np.eye(K)
    J[np.arange(K), K + gr] = -ct[gc] / one
    J[np.arange(K), K + nr + gc] = -rt[gr] / one
    J[:, -1] = rt[gr] * ct[gc] / one**2
    dev = cells - rt[gr] * ct[gc] / one
    V = J @ Vt @ J.T
    use = np.flatnonzero((gr > 0) & (gc > 0))
    stat = float(dev[use] @ np.linalg.solve(V[np.ix_(use, use)], dev[use]))
    numdf = float((nr - 1) * (nc - 1))
    if statistic == "Wald":
        stat, ddf = stat / numdf, nu
    else:
        ddf = nu - numdf + 1
        stat = stat * ddf / (numdf * nu)
    return TestResult("Design-based Wald test of association", stat, "F",
                      {"ndf": numdf, "ddf": ddf}, float(stats.f.sf(stat, numdf, ddf)),
                      details=details)


def _split(formula: str, what: str) -> tuple[str, str]:
    if not isinstance(formula, str) or formula.count("~") != 1 or not formula.split("~")[0].strip():
        raise ValueError(f"{what}: formula={formula!r}: give 'y ~ group' (or 'y ~ 1').")
    lhs, rhs = (p.strip() for p in formula.split("~"))
    return lhs, rhs


def svyttest(formula: str, design: Any, na_rm: bool = False, level: float = 0.95) -> TestResult:
    """Design-based t-test (R ``svyttest``).

    ``"y ~ 1"``: one-sample test of mean 0 (``"I(y - 100) ~ 1"`` for another value);
    ``"y ~ g"`` with a two-level g: difference of domain means; paired:
    ``"I(after - before) ~ 0"``.
    """
    lhs, rhs = _split(formula, "svyttest")
    if rhs in ("0", "1"):
        return _one_sample(lhs, design, na_rm, level, formula)
    res = svyglm(f"{lhs} ~ {rhs}", design, family="gaussian", na_rm=na_rm)
    names = list(res.params.index)
    col = _binary_column(res, names)
    est, se, df = float(res.params.iloc[1]), float(res.bse.iloc[1]), float(res.df_resid)
    t = est / se
    crit = stats.t.ppf((1 + level) / 2, df)
    return TestResult("Design-based t-test", t, "t", {"df": df},
                      float(2 * stats.t.sf(abs(t), df)), estimate=est,
                      conf_int=(est - crit * se, est + crit * se),
                      details={"term": col, "se": se})


def _binary_column(res, names: list[str]) -> str:
    values = res.model_column(1)
    binary = np.isin(values, (0.0, 1.0)).all() or np.isin(values, (1.0, 2.0)).all()
    if len(names) != 2 or not binary:
        raise ValueError(
            f"svyttest: the group must be binary (two levels, or coded 0/1 or 1/2); the model "
            f"has terms {names}. Fix: subset() the design to two groups."
        )
    return names[1]


def _lhs_values(lhs: str, design: Any, na_rm: bool, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Values of a left-hand-side expression over full_data (0 outside), and the scope rows."""
    full = design.full_data
    cols = formula_columns(lhs, full.columns)
    rows = _scope(design, cols, na_rm, what)
    mm = formula_matrix(f"{quote_dotted(lhs, full.columns)} ~ 1", full.loc[rows], what,
                        na_action="raise", r_logicals=False)
    if mm.lhs.shape[1] != 1:
        raise ValueError(f"{what}: {lhs!r} must be numeric (one column).")
    y = np.zeros(rows.shape[0])
    y[rows] = np.asarray(mm.lhs, dtype=float)[:, 0]
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{what}: {lhs!r} has non-finite values.")
    return y, rows


def _one_sample(lhs, design, na_rm, level, formula) -> TestResult:
    y, rows = _lhs_values(lhs, design, na_rm, "svyttest")
    codes = np.where(rows, 0, -1)
    est, var, _ = design.domain_ratios(y[:, None], np.ones((y.shape[0], 1)), codes, 1)
    est, se = float(est[0, 0]), float(np.sqrt(var[0, 0]))
    inside = np.asarray(design.in_subset, dtype=bool)
    df = float(design.domain_df(np.where(inside, 0, -1), 1)[0]) - 1
    t = est / se
    crit = stats.t.ppf((1 + level) / 2, df)
    return TestResult("Design-based one-sample t-test", t, "t", {"df": df},
                      float(2 * stats.t.sf(abs(t), df)), estimate=est,
                      conf_int=(est - crit * se, est + crit * se), details={"se": se})


_SCORES = {
    "wilcoxon": lambda r, N: r / N,
    "KruskalWallis": lambda r, N: r / N,
    "vanderWaerden": lambda r, N: stats.norm.ppf(r / N),
    "median": lambda r, N: (r > N / 2).astype(float),
}


def _rank_scores(y: np.ndarray, w: np.ndarray, test: str) -> np.ndarray:
    """R: rankhat[ii] <- ave(cumsum(w[ii]) - w[ii]/2, factor(y[ii])); score(rankhat, N)."""
    order = np.argsort(y, kind="stable")
    ys, ws = y[order], w[order]
    mid = np.cumsum(ws) - ws / 2
    _, tie, counts = np.unique(ys, return_inverse=True, return_counts=True)
    tie = tie.reshape(-1)
    avg = np.bincount(tie, weights=mid) / counts
    rankhat = np.empty_like(y)
    rankhat[order] = avg[tie]
    return _SCORES[test](rankhat, float(w.sum()))


def svyranktest(formula: str, design: Any, test: str = "wilcoxon",
                na_rm: bool = False) -> TestResult:
    """Design-based rank test (R ``svyranktest``), ``formula`` ``"y ~ group"``.

    ``test``: ``"wilcoxon"`` (R's default), ``"vanderWaerden"``, ``"median"`` or
    ``"KruskalWallis"``. Two groups: t = difference in mean rank score over its design SE, df =
    design df - 1. More groups: R's ``multiranktest`` (F on k - 1 and design df - (k - 1) df).
    """
    if test not in _SCORES:
        raise ValueError(f"test={test!r}: choose one of {tuple(_SCORES)}.")
    lhs, rhs = _split(formula, "svyranktest")
    yname, gname = lhs.strip("`"), rhs.strip("`")
    rows = _scope(design, [yname, gname], na_rm, "svyranktest")
    full = design.full_data
    y = design.numeric_values(yname)[rows]
    g = full[gname][rows]
    w = np.asarray(design.full_weights, dtype=float)[rows]
    score = _rank_scores(y, w, test)
    levels = _present_levels(g)
    codes = np.where(rows, 0, -1)
    df_design = float(design.domain_df(codes, 1)[0])
    name = "KruskalWallis" if test == "wilcoxon" else test
    if len(levels) != 2:
        return _multirank(design, score, g, levels, w, rows, codes, df_design, name)
    if pd.api.types.is_numeric_dtype(g) and not pd.api.types.is_bool_dtype(g):
        x = g.to_numpy(dtype=float)
    else:
        x = (pd.Index(levels).get_indexer(g) == 1).astype(float)
    X = np.column_stack([np.ones_like(x), x])
    XtW = X.T * w
    A = np.linalg.inv(XtW @ X)
    beta = A @ (XtW @ score)
    infn = np.zeros((rows.shape[0], 2))
    infn[rows] = (X * (score - X @ beta)[:, None]) @ A
    var = design.domain_ratios(infn[:, 1:], None, codes, 1)[1][0, 0]
    t = float(beta[1] / np.sqrt(var))
    df = df_design - 1
    return TestResult(f"Design-based {name} test", t, "t", {"df": df},
                      float(2 * stats.t.sf(abs(t), df)), estimate=float(beta[1]),
                      details={"se": float(np.sqrt(var))})


def _multirank(design, score, g, levels, w, rows, codes, df_design, name) -> TestResult:
    if getattr(design, "design_kind", "taylor") != "taylor":
        raise ValueError(
            "svyranktest: more than two groups (R's multiranktest) is defined for linearization "
            "designs only; subset() a replicate design to two groups."
        )
    if len(levels) < 2:
        raise ValueError("svyranktest: the group variable has fewer than two levels.")
    k = len(levels)
    gi = pd.Index(levels).get_indexer(g)
    X = np.column_stack([np.ones(gi.shape[0])] + [(gi == j).astype(float) for j in range(1, k)])
    XtW = X.T * w
    A = np.linalg.inv(XtW @ X)
    beta = A @ (XtW @ score)
    infl = np.zeros((rows.shape[0], k))
    infl[rows] = (X * ((score - X @ beta) * w)[:, None]) @ A
    V = influence_covariance(design, infl, codes)[1:, 1:]
    b = beta[1:]
    chisq = float(b @ np.linalg.solve(V, b))
    ndf = float(k - 1)
    ddf = df_design - ndf
    return TestResult(f"Design-based {name} test", chisq / ndf, "F", {"ndf": ndf, "ddf": ddf},
                      float(stats.f.sf(chisq / ndf, ndf, ddf)), details={"chisq": chisq})
