"""Loglinear models for survey tables and their Rao-Scott tests: R ``survey::svyloglin``.

``svyloglin("~ stype + comp.imp", design)`` fits a loglinear model to the design-based
estimate of the table of cell shares, as R does:

* the cell shares p_hat are ``svymean`` of the indicators of the cells (all combinations of
  the variables' sorted values, the first variable varying fastest, as R's ``interaction``
  and ``expand.grid``), with their design covariance V (rows with a missing value left out
  of the mean, as ``na.rm=TRUE``);
* the model is a Poisson GLM of ``n p_hat`` (n the design's rows) on the model matrix of the
  grid, factors coded by sum-to-zero contrasts (R's ``contr.sum``: ``stype1``, ``stype2``),
  fitted by R's ``glm.fit`` steps (:mod:`surveysynth.analysis.irls`), so the coefficients
  are R's to rounding;
* ``vcov()``: ``A B A / n^2`` with ``A = (X' P X)^{-1}``, ``B = X' V X``, ``X`` the centred
  model matrix without intercept and ``P = (diag(pi) - pi pi') / n`` at the fitted shares;
* :func:`anova` of two nested models: the deviance and Pearson (score) statistics, with
  the Rao-Scott p-values R reports (``"F"``: F with ``tr(D)^2/tr(D^2)`` and ``df.null`` times
  that; ``"chisq"``: first-order; ``"saddlepoint"``: the saddlepoint approximation to the
  weighted sum of chi-squares with weights the eigenvalues of the design effect matrix D).

Formulas name the table's variables (R style names with dots allowed), joined with ``+``,
``*``, ``:`` and ``(a + b)^2``; an expression term such as ``I(stype * comp.imp)`` reads
each variable as its level number (R's ``as.numeric(factor)``: R's linear-by-linear
association ``as.numeric(stype):as.numeric(comp.imp)``). Models are hierarchical (a factor
appears in an interaction only with its main effect): R codes non-hierarchical terms
differently and we refuse them. Coefficient names are R's (``stype1:comp.imp1``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from formulaic import Formula, model_matrix
from scipy import stats

from .chisqsum import pchisqsum
from .covariance import mean_covariance
from .families import get_family
from .formulas import formula_columns, quote_dotted
from .irls import irls


def _parse(formula: str, data_cols: pd.Index) -> tuple[list[str], list[list[str]]]:
    """The variables of the table and the model's terms (lists of factor expressions),
    without the intercept."""
    if not isinstance(formula, str) or not formula.strip().startswith("~"):
        raise ValueError(f"svyloglin: formula={formula!r}: give a one-sided formula such as "
                         "'~ stype + comp.imp' (R: 'needs a one-sided formula').")
    rhs = formula.strip()[1:]
    variables = formula_columns(rhs, data_cols)
    if not variables:
        raise ValueError(f"svyloglin: formula {formula!r} names no column of the design's data.")
    quoted = quote_dotted(rhs, data_cols)
    terms = [[str(f).strip("`") for f in t.factors] for t in Formula(quoted)]
    terms = [t for t in terms if t != ["1"]]
    return variables, terms


def _contr_sum(codes: np.ndarray, k: int) -> np.ndarray:
    """R's ``contr.sum`` columns for level codes 0..k-1."""
    M = np.zeros((codes.shape[0], k - 1))
    for j in range(k - 1):
        M[:, j] = (codes == j).astype(float) - (codes == k - 1)
    return M


def _design_matrix(terms: list[list[str]], grid: pd.DataFrame, levels: dict[str, list]
                   ) -> tuple[np.ndarray, list[str]]:
    """The model matrix on the grid: intercept, then each term's columns (products of the
    factors' contrast columns, the first factor varying fastest, as R)."""
    codes = {v: pd.Index(levels[v]).get_indexer(grid[v]) for v in levels}
    numeric = pd.DataFrame({v: codes[v] + 1.0 for v in levels})
    cols, names = [np.ones((grid.shape[0], 1))], ["(Intercept)"]
    seen: set[str] = set()
    for term in terms:
        mats, labels = [], []
        for f in term:
            if f in levels:
                k = len(levels[f])
                if len(term) > 1 and f not in seen:
                    raise ValueError(f"svyloglin: the term {':'.join(term)} has {f!r} without "
                                     f"its main effect; give hierarchical models (add {f}).")
                mats.append(_contr_sum(codes[f], k))
                labels.append([f"{f}{j + 1}" for j in range(k - 1)])
            else:
                quoted = quote_dotted(f, numeric.columns)
                mm = model_matrix(f"0 + {quoted}", numeric)
                mats.append(np.asarray(mm, dtype=float))
                labels.append([f])
        M, lab = mats[0], labels[0]
        for A, la in zip(mats[1:], labels[1:], strict=True):
            M = np.hstack([M * A[:, [j]] for j in range(A.shape[1])])
            lab = [f"{x}:{y}" for y in la for x in lab]
        cols.append(M)
        names += lab
        if len(term) == 1:
            seen.add(term[0])
    return np.hstack(cols), names


class LoglinResults:
    """A fitted survey loglinear model (R ``svyloglin``): ``params`` (without the intercept,
    R ``coef``), ``vcov()``, ``bse``, ``deviance``, ``fitted`` (cell counts ``n pi``),
    ``cells`` (the grid), ``df`` (R ``degf``: cells - coefficients - 1) and ``update``."""

    def __init__(self, formula: str, design: Any, table: dict[str, Any]) -> None:
        self.formula = formula
        self._design = design
        self.table = table  # the estimated table: n, grid, levels, p, V, df_null
        n, grid, levels = table["n"], table["grid"], table["levels"]
        _, terms = _parse(formula, design.full_data.columns)
        X, names = _design_matrix(terms, grid, levels)
        y = table["p"] * n
        fam = get_family("quasipoisson")
        fit = irls(X, y, np.ones_like(y), np.zeros_like(y), fam)
        self.model_matrix, self._fit = X, fit
        self.fitted = fit.mu
        self.deviance = fit.deviance
        pi = fit.mu / n
        P = (np.diag(pi) - np.outer(pi, pi)) / n
        XX = X[:, 1:] - X[:, 1:].mean(axis=0)
        A = np.linalg.inv(XX.T @ P @ XX)
        B = XX.T @ table["V"] @ XX
        V = A @ B @ A / (n * n)
        self.params = pd.Series(fit.coef[1:], index=names[1:], name="estimate")
        self._vcov = pd.DataFrame(V, index=names[1:], columns=names[1:])
        with np.errstate(invalid="ignore"):  # a calibrated margin: variance 0 - rounding
            self.bse = pd.Series(np.sqrt(np.diag(V)), index=names[1:], name="se")
        self.cells = grid
        self.df = len(y) - len(names[1:]) - 1
        self.n = n

    def vcov(self) -> pd.DataFrame:
        """Design-based covariance of the coefficients (R ``vcov(svyloglin)``)."""
        return self._vcov.copy()

    def update(self, formula: str) -> LoglinResults:
        """Another model for the same table (R ``update(a, ~.^2)``; write the formula out)."""
        return LoglinResults(formula, self._design, self.table)

    def anova(self, other: LoglinResults, survey_version: str = "4.5") -> dict[str, Any]:
        """R ``anova(a, b)``: see :func:`anova`."""
        return anova(self, other, survey_version)

    def summary(self) -> pd.DataFrame:
        """R ``summary(svyloglin)``: coefficient, SE and normal p-value."""
        z = self.params / self.bse
        return pd.DataFrame({"coef": self.params, "se": self.bse,
                             "p": 2 * stats.norm.sf(np.abs(z))})


def svyloglin(formula: str, design: Any) -> LoglinResults:
    """Fit a loglinear model to a survey table (R ``svyloglin``); see the module docstring.

    ``design``: a :class:`~surveysynth.SurveyDesign` or :class:`~surveysynth.ReplicateDesign`
    (the cell shares' covariance from either).
    """
    full = design.full_data
    variables, _ = _parse(formula, full.columns)
    inside = np.asarray(design.in_subset, dtype=bool)
    sub = full.loc[inside, variables]
    levels = {v: sorted(sub[v].dropna().unique().tolist()) for v in variables}
    grid = pd.MultiIndex.from_product([levels[v] for v in reversed(variables)],
                                      names=list(reversed(variables))).to_frame(index=False)
    grid = grid[variables]  # the first variable varies fastest (R's expand.grid)
    ok = inside & full[variables].notna().all(axis=1).to_numpy()
    cell = np.zeros(full.shape[0], dtype=np.int64)
    mult = 1
    for v in variables:
        cell += mult * np.maximum(pd.Index(levels[v]).get_indexer(full[v]), 0)
        mult *= len(levels[v])
    Y = np.zeros((full.shape[0], grid.shape[0]))
    Y[np.flatnonzero(ok), cell[ok]] = 1.0
    codes = np.where(ok, 0, -1)
    p, V = mean_covariance(design, Y, codes)
    table = {"n": float(inside.sum()), "grid": grid, "levels": levels, "p": p, "V": V,
             "df_null": float(design.domain_df(np.where(inside, 0, -1), 1)[0])}
    return LoglinResults(formula, design, table)


def _tr2(m: np.ndarray) -> float:
    return float(np.sum(m * m))


def anova(model0: LoglinResults, model1: LoglinResults,
          survey_version: str = "4.5") -> dict[str, Any]:
    """Rao-Scott tests of the smaller of two nested loglinear models against the larger (R
    ``anova.svyloglin``): ``{"deviance", "deviance_p", "score", "score_p", "df", "a"}``, the
    p-values a dict over ``"F"`` (R's default print), ``"chisq"`` and ``"saddlepoint"``
    (R's ``"lincom"``, by integration, is not available); ``a`` the eigenvalues of the design
    effect matrix D as R reports them.

    As R: the deviance's saddlepoint uses the eigenvalues of D, the score's (and ``a``)
    those R's ``eigen(D, symmetric=TRUE)`` gives, i.e. of D's lower triangle mirrored (D is
    not symmetric; R's choice). ``survey_version``: the score statistic's F test has
    ``k tr(D)^2/tr2(D)`` numerator df under R survey 4.5 (default; fixed in 4.3) and
    ``tr(D)^2/tr2(D)`` under 4.1.1 (``"4.1"``), k the df of the test, with tr2(D) =
    sum(D * D) (loglin.R's definition). Different from R 4.5: its survey namespace has a
    second ``tr2`` (xdesign.R, new in 4.5, ``sum(mat)``) that replaces loglin.R's, so R 4.5's
    F p-values use sum(D); we keep sum(D * D) (tests/test_svyloglin.py reproduces R 4.5's
    numbers from ``D`` with sum(D) to show that is the only difference). ``D`` and
    ``df_null`` (the design df) are returned.
    """
    if survey_version not in ("4.5", "4.1"):
        raise ValueError(f"svyloglin anova: survey_version={survey_version!r}: choose '4.5' "
                         "or '4.1'.")
    if model1.params.shape[0] < model0.params.shape[0]:
        model0, model1 = model1, model0
    if model0.table is not model1.table:
        raise ValueError("svyloglin anova: the models must be fitted to the same table (make "
                         "one from the other with .update()).")
    t = model0.table
    n = t["n"]
    pi0, pi1 = model0.fitted / n, model1.fitted / n
    X1 = model0.model_matrix[:, 1:] - model0.model_matrix[:, 1:].mean(axis=0)
    X2 = model1.model_matrix[:, 1:] - model1.model_matrix[:, 1:].mean(axis=0)
    P1 = (np.diag(pi1) - np.outer(pi1, pi1)) / n
    Psat = (np.diag(t["p"]) - np.outer(t["p"], t["p"])) / n
    wX2 = X2 - X1 @ np.linalg.solve(X1.T @ P1 @ X1, X1.T @ P1 @ X2)
    # R: qr(round(wX2sing, 11)) and keep the pivoted columns of its rank
    rank_cols = _independent_columns(np.round(wX2, 11))
    wX2 = wX2[:, rank_cols]
    D = np.linalg.solve(wX2.T @ Psat @ wX2, wX2.T @ t["V"] @ wX2)
    k = wX2.shape[1]
    trD, tr2D = float(np.trace(D)), _tr2(D)
    a_gen = np.sort(np.linalg.eigvals(D).real)[::-1]
    a = np.linalg.eigvalsh(D, UPLO="L")[::-1]  # R eigen(symmetric=TRUE): lower triangle
    dev = model0.deviance - model1.deviance
    pearson = n * float(np.sum((pi1 - pi0) ** 2 / pi0))
    dfnull = t["df_null"]

    def pvals(stat: float, f_df1: float, f_df2: float, eig: np.ndarray) -> dict[str, float]:
        return {"F": float(stats.f.sf(stat / trD, f_df1, f_df2)),
                "chisq": float(stats.chi2.sf(stat * k / trD, k)),
                "saddlepoint": float(pchisqsum(stat, np.ones(k), eig, lower_tail=False,
                                               method="saddlepoint"))}

    nu = trD**2 / tr2D
    m = k if survey_version == "4.5" else 1
    return {"deviance": dev, "deviance_p": pvals(dev, nu, dfnull * nu, a_gen),
            "score": pearson, "score_p": pvals(pearson, m * nu, m * dfnull * nu, a),
            "df": k, "a": a, "D": D, "df_null": dfnull}


def _independent_columns(M: np.ndarray) -> list[int]:
    """Columns R's ``qr()`` (LINPACK dqrdc2, tolerance 1e-7) keeps, in its pivot order."""
    keep: list[int] = []
    Q = np.zeros((M.shape[0], 0))
    for j in range(M.shape[1]):
        v = M[:, j] - Q @ (Q.T @ M[:, j])
        nv = np.linalg.norm(v)
        if nv > 1e-7 * max(np.linalg.norm(M[:, j]), 1e-300):
            keep.append(j)
            Q = np.column_stack([Q, v / nv])
    return keep


__all__ = ["LoglinResults", "anova", "svyloglin"]
