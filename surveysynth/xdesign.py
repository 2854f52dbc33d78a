"""Crossed (sparse correlated) designs: R survey 4.5's ``xdesign`` (R/xdesign.R).

Observations are correlated when they share a level of any of several crossed clusterings
(a male and a female salamander; a rater and an item; a school and a district) or when a
user adjacency matrix says so. Estimates are the weighted ones of the first clustering's
design; their variance is R's ``svyxvar``: with the influence values ``h`` (R's
``svymean``/``svytotal`` ``influence=TRUE``), ``h' A h / (1 - mean(A))``, ``A`` the binary
adjacency (1 where two rows share a cluster of any clustering; the diagonal 1); degrees of
freedom ``tr(A)^2 / sum(A)`` (R's ``degf``). The adjacency is held sparse.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse, stats

from .results import Covariance, Estimate

__all__ = ["XDesign", "xdesign"]


def _one_adjacency(codes: np.ndarray) -> sparse.csr_matrix:
    n = codes.shape[0]
    Z = sparse.csr_matrix((np.ones(n), (np.arange(n), codes)), shape=(n, codes.max() + 1))
    return (Z @ Z.T).tocsr()


@dataclass(frozen=True)
class XDesign:
    """A crossed design (R ``xdesign``): ``data``, ``weights`` (1 without ``weights=``, as
    R's ``svydesign`` then), the binary ``adjacency`` (sparse, rows x rows) and ``ids``."""

    data: pd.DataFrame
    weights: np.ndarray
    adjacency: sparse.csr_matrix
    ids: tuple[str, ...] | None

    @property
    def degf(self) -> float:
        """R ``degf.xdesign``: ``tr(A)^2 / sum(A)``."""
        return float(self.adjacency.diagonal().sum() ** 2 / self.adjacency.sum())

    def _variance(self, infl: np.ndarray) -> np.ndarray:
        A = self.adjacency
        n = A.shape[0]
        mean_a = float(A.sum()) / (n * n)
        return (infl.T @ (A @ infl)) / (1 - mean_a)

    def _values(self, x: str | Sequence[str]) -> tuple[list[str], np.ndarray]:
        cols = [x] if isinstance(x, str) else list(x)
        missing = [c for c in cols if c not in self.data.columns]
        if missing:
            raise ValueError(f"xdesign: no column {missing}. Fix: check the names.")
        X = self.data[cols].to_numpy(dtype=float)
        if np.isnan(X).any():
            rows = list(self.data.index[np.isnan(X).any(axis=1)][:5])
            raise ValueError(f"xdesign: missing values in {cols} at rows {rows}. Fix: drop the "
                             "rows before building the design (R: NA).")
        return cols, X

    def _estimate(self, cols: list[str], est: np.ndarray, infl: np.ndarray,
                  level: float) -> Estimate:
        V = self._variance(infl)
        se = np.sqrt(np.diag(V))
        crit = stats.norm.ppf((1 + level) / 2)
        frame = pd.DataFrame({"variable": cols, "estimate": est, "se": se,
                              "ci_low": est - crit * se, "ci_high": est + crit * se})
        return Estimate.wrap(frame, level, "normal", Covariance(tuple(cols), est, V))

    def mean(self, x: str | Sequence[str], level: float = 0.95) -> Estimate:
        """Weighted means with the crossed variance (R ``svymean.xdesign``; influence
        ``(x - mean) w / sum(w)``); covariance via ``.vcov()``."""
        cols, X = self._values(x)
        w = self.weights
        est = (w @ X) / w.sum()
        return self._estimate(cols, est, (X - est) * (w / w.sum())[:, None], level)

    def total(self, x: str | Sequence[str], level: float = 0.95) -> Estimate:
        """Weighted totals with the crossed variance (R ``svytotal.xdesign``; influence
        ``x w``, not centred, as R's)."""
        cols, X = self._values(x)
        w = self.weights
        return self._estimate(cols, w @ X, X * w[:, None], level)

    def glm(self, formula: str, family: str = "gaussian", level: float = 0.95) -> Estimate:
        """A survey-weighted GLM with the crossed variance (R ``svyglm.xdesign``): the
        coefficients of :func:`~surveysynth.analysis.svyglm` on the first clustering's design,
        the covariance ``h' A h / (1 - mean(A))`` of its influence values
        (``estfun %*% naive.cov``), t tests on ``degf + 1 - p`` df (R's ``df.residual``).
        Returns an :class:`~surveysynth.results.Estimate` (``term``, ``estimate``, ``se``,
        ``t``, ``p``, ``df``, normal ``ci_low``/``ci_high``) with the covariance."""
        from .analysis import svyglm
        from .design import SurveyDesign

        ids = None if self.ids is None else self.ids[0]
        fit = svyglm(formula, SurveyDesign(self.data, ids=ids, weights=self.weights),
                     family=family)
        score = fit.working_residuals * fit.working_weights  # R: resid(g, "working") * g$weights
        infl = np.zeros((self.data.shape[0], fit.params.shape[0]))
        infl[fit.fit_rows] = (fit.model_matrix * score[:, None]) @ fit.naive_cov.to_numpy()
        V = self._variance(infl)
        est = fit.params.to_numpy()
        se = np.sqrt(np.diag(V))
        df = self.degf + 1 - est.shape[0]
        t = est / se
        crit = stats.norm.ppf((1 + level) / 2)
        names = list(fit.params.index)
        frame = pd.DataFrame({"term": names, "estimate": est, "se": se, "t": t,
                              "p": 2 * stats.t.sf(np.abs(t), df), "df": df,
                              "ci_low": est - crit * se, "ci_high": est + crit * se})
        return Estimate.wrap(frame, level, "normal", Covariance(tuple(names), est, V))

    def __repr__(self) -> str:
        if self.ids is None:
            return f"Sparse correlated design with {self.degf:.6g} df"
        return f"Crossed design with {self.degf:.6g} df, clusterings {list(self.ids)}"


def xdesign(data: pd.DataFrame, ids: Sequence[str] | None = None, weights: Any = None,
            adjacency: Any = None, overlap: str = "unbiased",
            allow_non_binary: bool = False) -> XDesign:
    """A crossed design (R ``xdesign(id=list(~a, ~b), weights, data, adjacency, overlap)``).

    ``ids``: the clustering columns (R's list of one-sided formulas); rows sharing a level
    of any of them are correlated. Or ``adjacency``: an n x n 0/1 matrix (dense or scipy
    sparse) saying which rows are correlated (then ``ids`` may be None). ``weights``: a
    column or an array (default 1 for every row, with R's warning). ``overlap="positive"``
    counts a pair sharing two clusterings twice: R then refuses the non-binary adjacency for
    more than one clustering, so do we. ``fpc``/``strata`` are not implemented in R either.
    """
    if overlap not in ("unbiased", "positive"):
        raise ValueError(f"xdesign: overlap={overlap!r}: choose 'unbiased' or 'positive'.")
    n = data.shape[0]
    if ids is None and overlap == "positive":
        raise ValueError("xdesign: overlap='positive' is not available for an adjacency "
                         "matrix (R's message).")
    if weights is None:
        warnings.warn("xdesign: no weights or probabilities supplied, assuming equal "
                      "probability (R's svydesign warning).", UserWarning, stacklevel=2)
        w = np.ones(n)
    elif isinstance(weights, str):
        w = data[weights].to_numpy(dtype=float)
    else:
        w = np.asarray(weights, dtype=float).reshape(-1)
    if w.shape[0] != n or not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("xdesign: weights must be finite, non-negative, one per row.")
    if adjacency is None:
        if ids is None:
            raise ValueError("xdesign: give ids (clustering columns) or an adjacency matrix.")
        ids = [ids] if isinstance(ids, str) else list(ids)
        if len(ids) == 1:
            warnings.warn("xdesign: only one clustering dimension? (R's warning)",
                          UserWarning, stacklevel=2)
        mats = []
        for c in ids:
            col = data[c]
            if col.isna().any():
                raise ValueError(f"xdesign: clustering {c!r} has missing values (R: na.fail).")
            mats.append(_one_adjacency(pd.factorize(col)[0]))
        A = sum(mats[1:], mats[0])
        if overlap == "unbiased":
            A = (A > 0).astype(float)
        elif len(ids) > 1:
            raise ValueError("xdesign: overlap='positive' makes a non-binary adjacency, which "
                             "R refuses ('adjacency' values must be 0 or 1). Fix: "
                             "overlap='unbiased'.")
    else:
        A = sparse.csr_matrix(adjacency, dtype=float)
        if A.shape != (n, n):
            raise ValueError(f"xdesign: adjacency is {A.shape}, the data have {n} rows.")
        if not np.isin(A.data, (0.0, 1.0)).all():
            raise ValueError("xdesign: 'adjacency' values must be 0 or 1 (R's message)." + (
                "" if allow_non_binary else " R's allow.non.binary=TRUE is refused later "
                "by R too."))
    return XDesign(data, w, sparse.csr_matrix(A), None if ids is None else tuple(ids))
