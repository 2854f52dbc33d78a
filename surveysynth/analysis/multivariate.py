"""Multivariate summaries of a survey: R ``svyprcomp``, ``svyfactanal``, ``svycralpha`` and the
weighted CDF ``svycdf`` (survey 4.5; these functions are unchanged since 4.1).

* :func:`svyprcomp`: principal components as R computes them: each row is multiplied by
  ``sqrt(w / mean(w))``, the columns centred (and scaled) by their plain means (and SDs), and the
  singular value decomposition of that matrix gives the standard deviations ``sdev`` (divided by
  ``sqrt(n - 1)``) and the loadings; scores are divided back by ``sqrt(w / mean(w))``.
* :func:`svyfactanal`: maximum-likelihood factor analysis (R ``factanal``) of the correlation
  matrix of :func:`~surveysynth.analysis.svyvar`'s covariance estimate, with R's choices of the
  sample size for the test (``n=``) and R's varimax / promax rotations.
* :func:`svycralpha`: Cronbach's alpha ``K / (K - 1) (1 - sum var(item) / var(sum of items))``
  with population variances from ``svyvar``.
* :func:`svycdf`: the weighted empirical CDF of each variable (R's step functions).

Rows: as R, the ``subset()`` of a calibrated linearization design keeps every row with weight 0
outside the subset (R's ``[.survey.design2`` sets ``prob`` to ``Inf`` there), other subsets drop
the rows; this matters only to :func:`svyprcomp`, whose centring and ``n - 1`` count those rows
as R's does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from .variance_matrix import _svyvar_values, svyvar


def _columns(x: str | Sequence[str], design: Any, what: str, least: int = 1) -> list[str]:
    cols = [x] if isinstance(x, str) else list(x)
    if len(cols) < least or not all(isinstance(c, str) for c in cols):
        raise ValueError(f"{what}: x={x!r}: give a list of at least {least} column name(s).")
    missing = [c for c in cols if c not in design.full_data.columns]
    if missing:
        raise ValueError(f"{what}: columns {missing} are not in the design's data. Fix: one of "
                         f"{list(map(str, design.full_data.columns))[:12]}...")
    return cols


def _rows_and_weights(design: Any) -> tuple[np.ndarray, np.ndarray]:
    """R's rows of ``model.frame(design)`` (mask over full_data) and ``weights(design,
    "sampling")`` on them: a calibrated linearization subset keeps its rows with weight 0."""
    w = np.asarray(design.full_weights, dtype=float)
    inside = np.asarray(design.in_subset, dtype=bool)
    if not getattr(design, "is_calibrated", False):
        return inside, w[inside]
    rows = np.ones(w.shape[0], dtype=bool)
    return rows, np.where(inside, w, 0.0)


def _values(design: Any, cols: list[str], rows: np.ndarray, na_rm: bool, what: str):
    X = np.column_stack([design.numeric_values(c) for c in cols])[rows]
    bad = np.isnan(X).any(axis=1)
    if bad.any() and not na_rm:
        idx = list(design.full_data.index[rows][bad][:5])
        raise ValueError(f"{what}: missing values in {cols} at rows {idx}. Fix: na_rm=True "
                         "drops those rows (R's na.omit).")
    return X, bad


# ------------------------------------------------------------------------------ svyprcomp
@dataclass
class PrcompResult:
    """Result of :func:`svyprcomp` (R class ``svyprcomp``/``prcomp``).

    ``sdev``: standard deviations of the components; ``rotation``: loadings (variables x PCs);
    ``center``/``scale``: what was subtracted / divided (None when not done); ``x``: scores
    (rows x PCs) when asked; ``weights``: ``w / mean(w)`` of the rows used; ``index``: those
    rows' labels.
    """

    sdev: np.ndarray
    rotation: pd.DataFrame
    center: pd.Series | None
    scale: pd.Series | None
    weights: np.ndarray
    index: pd.Index
    x: pd.DataFrame | None = None

    def summary(self) -> pd.DataFrame:
        """R ``summary(prcomp)``'s importance table: SD, proportion and cumulative proportion
        of variance per component."""
        var = self.sdev ** 2
        prop = var / var.sum()
        return pd.DataFrame({"sd": self.sdev, "proportion": prop,
                             "cumulative": np.cumsum(prop)}, index=self.rotation.columns)


def svyprcomp(x: str | Sequence[str], design: Any, center: bool = True, scale: bool = False,
              tol: float | None = None, scores: bool = False,
              na_rm: bool = False) -> PrcompResult:
    """Weighted principal components of numeric columns (R ``svyprcomp``; ``scale`` is R's
    ``scale.``).

    R's algorithm, kept so that the numbers are R's: rows are multiplied by
    ``sqrt(w / mean(w))`` (``w`` the sampling weights), then centred (and scaled) by plain
    column means (and SDs) and decomposed by SVD; ``sdev`` is the singular values over
    ``sqrt(n - 1)``; ``tol`` drops components with ``sdev <= tol * sdev[0]``; ``scores=True``
    adds the scores ``(x V) / sqrt(w / mean(w))``. A missing value is an error unless
    ``na_rm=True`` (then the rows are dropped, as R's ``na.omit``).
    """
    cols = _columns(x, design, "svyprcomp", least=1)
    rows, w = _rows_and_weights(design)
    X, bad = _values(design, cols, rows, na_rm, "svyprcomp")
    keep = ~bad
    X, w = X[keep], w[keep]
    index = design.full_data.index[rows][keep]
    X = X * np.sqrt(w / w.mean())[:, None]
    cen = X.mean(axis=0) if center else None
    if cen is not None:
        X = X - cen
    sc = None
    if scale:
        sc = np.sqrt((X ** 2).sum(axis=0) / max(1, X.shape[0] - 1))
        if np.any(sc == 0):
            bad_cols = [c for c, s in zip(cols, sc, strict=True) if s == 0]
            raise ValueError(f"svyprcomp: cannot rescale the constant/zero column(s) {bad_cols} "
                             "to unit variance. Fix: scale=False or drop them.")
        X = X / sc
    _, d, vt = np.linalg.svd(X, full_matrices=False)
    d = d / np.sqrt(max(1, X.shape[0] - 1))
    v = vt.T
    if tol is not None:
        rank = int(np.sum(d > d[0] * tol))
        if rank < X.shape[1]:
            v, d = v[:, :rank], d[:rank]
    v = v * _lapack_sign(v)
    pcs = [f"PC{i + 1}" for i in range(v.shape[1])]
    weights = w / w.mean()
    res = PrcompResult(
        sdev=d, rotation=pd.DataFrame(v, index=cols, columns=pcs),
        center=None if cen is None else pd.Series(cen, index=cols),
        scale=None if sc is None else pd.Series(sc, index=cols), weights=weights, index=index)
    if scores:
        res.x = pd.DataFrame((X @ v) / np.sqrt(weights)[:, None], index=index, columns=pcs)
    return res


def _lapack_sign(v: np.ndarray) -> np.ndarray:
    """Signs of singular vectors are arbitrary; R (LAPACK dgesdd) and numpy (the same LAPACK
    routine) agree in practice, and this keeps numpy's. Returned as a row of ones so that a
    change of convention is made in one place."""
    return np.ones((1, v.shape[1]))


# ------------------------------------------------------------------------------ svycralpha
def svycralpha(x: Sequence[str], design: Any, na_rm: bool = False) -> float:
    """Cronbach's alpha of the items ``x`` (R ``svycralpha``):
    ``K / (K - 1) * (1 - sum(var(item)) / var(sum of items))`` with the population variances of
    :func:`~surveysynth.analysis.svyvar` (so R 4.5's ``n`` with ``na_rm``). No SE (R gives none).
    """
    cols = _columns(x, design, "svycralpha", least=2)
    vals = np.column_stack([design.numeric_values(c) for c in cols])
    total = vals.sum(axis=1, keepdims=True)  # NaN when any item is missing, as R's
    p = len(cols)
    vitems = _svyvar_values(vals, design, na_rm, "4.5", cols)[0].reshape(p, p, order="F")
    vtotal = _svyvar_values(total, design, na_rm, "4.5", None)[0][0]
    return float(p / (p - 1) * (1 - np.trace(vitems) / vtotal))


# ------------------------------------------------------------------------------ svycdf
@dataclass
class StepCDF:
    """A weighted empirical CDF (R ``stepfun`` of ``svycdf``): ``cdf(v)`` is the weight share
    of rows with value ``<= v``; ``x`` the distinct values (sorted), ``y`` the CDF at them."""

    name: str
    x: np.ndarray
    y: np.ndarray

    def __call__(self, v: Any) -> np.ndarray | float:
        v_arr = np.asarray(v, dtype=float)
        i = np.searchsorted(self.x, v_arr, side="right")
        out = np.where(i == 0, 0.0, self.y[np.maximum(i - 1, 0)])
        return float(out) if out.ndim == 0 else out

    def plot(self, ax: Any = None, **kwargs: Any) -> Any:
        """Draw the step function (matplotlib), as R ``plot.svycdf``; returns the axes."""
        from .graphics import plot_cdf
        return plot_cdf(self, ax=ax, **kwargs)


def svycdf(x: str | Sequence[str], design: Any, na_rm: bool = True) -> dict[str, StepCDF]:
    """Weighted CDF estimates of each column (R ``svycdf``): ``{name: StepCDF}``.

    As R (``na.rm=TRUE`` by default), rows with a missing value in any of ``x`` are dropped;
    ``na_rm=False`` with missing values is an error naming the rows (R fails there too).
    The CDF at ``v`` is ``sum(w[x <= v]) / sum(w)`` over the rows in scope (R's
    ``approxfun(..., method="constant", ties="max")``).
    """
    cols = _columns(x, design, "svycdf")
    inside = np.asarray(design.in_subset, dtype=bool)
    w_all = np.asarray(design.full_weights, dtype=float)
    X = np.column_stack([design.numeric_values(c) for c in cols])[inside]
    bad = np.isnan(X).any(axis=1)
    if bad.any() and not na_rm:
        idx = list(design.full_data.index[inside][bad][:5])
        raise ValueError(f"svycdf: missing values in {cols} at rows {idx}. Fix: na_rm=True.")
    X, w = X[~bad], w_all[inside][~bad]
    out = {}
    for j, c in enumerate(cols):
        order = np.argsort(X[:, j], kind="stable")
        xs = X[order, j]
        cum = np.cumsum(w[order].astype(np.longdouble)).astype(float) / w.sum()
        last = np.r_[xs[1:] != xs[:-1], True]  # ties: the largest cumulative share
        out[c] = StepCDF(c, xs[last], cum[last])
    return out


# ------------------------------------------------------------------------------ svyfactanal
@dataclass
class FactanalResult:
    """Result of :func:`svyfactanal` (R class ``factanal``).

    ``loadings`` (variables x factors, rotated and sorted as R), ``uniquenesses``,
    ``correlation`` (the matrix analysed), ``objective`` (the ML criterion), ``dof``,
    ``statistic`` and ``p_value`` (the test that ``factors`` suffice; None when ``n="none"``),
    ``n_obs``, ``rotmat`` (the rotation matrix), ``converged``.
    """

    loadings: pd.DataFrame
    uniquenesses: pd.Series
    correlation: pd.DataFrame
    objective: float
    factors: int
    dof: float
    n_obs: float | None
    statistic: float | None
    p_value: float | None
    converged: bool
    rotmat: np.ndarray | None = field(default=None, repr=False)


def _fa_parts(psi: np.ndarray, S: np.ndarray, q: int):
    sc = 1 / np.sqrt(psi)
    e, vec = np.linalg.eigh(S * sc[:, None] * sc[None, :])
    e, vec = e[::-1], vec[:, ::-1]
    return e, vec


def _fa_objective(psi: np.ndarray, S: np.ndarray, q: int) -> float:
    e = _fa_parts(psi, S, q)[0][q:]
    return float(-(np.sum(np.log(e) - e) - q + S.shape[0]))


def _fa_loadings(psi: np.ndarray, S: np.ndarray, q: int) -> np.ndarray:
    e, vec = _fa_parts(psi, S, q)
    load = vec[:, :q] * np.sqrt(np.maximum(e[:q] - 1, 0))
    return np.sqrt(psi)[:, None] * load


def _fa_gradient(psi: np.ndarray, S: np.ndarray, q: int) -> np.ndarray:
    load = _fa_loadings(psi, S, q)
    g = load @ load.T + np.diag(psi) - S
    return np.diag(g) / psi ** 2


def varimax(x: np.ndarray, normalize: bool = True, eps: float = 1e-5) -> tuple[np.ndarray,
                                                                                np.ndarray]:
    """R ``stats::varimax`` (same iterations and stopping rule): (rotated loadings, rotmat)."""
    p, nc = x.shape
    if nc < 2:
        return x, np.eye(nc)
    sc = np.sqrt((x ** 2).sum(axis=1)) if normalize else np.ones(p)
    xx = x / sc[:, None]
    TT = np.eye(nc)
    d = 0.0
    for _ in range(1000):
        z = xx @ TT
        B = xx.T @ (z ** 3 - z @ np.diag((z ** 2).sum(axis=0)) / p)
        u, s, vt = np.linalg.svd(B)
        TT = u @ vt
        dpast, d = d, s.sum()
        if d < dpast * (1 + eps):
            break
    return (xx @ TT) * sc[:, None], TT


def promax(x: np.ndarray, m: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """R ``stats::promax``: varimax, then the oblique power target (rotated loadings, rotmat)."""
    if x.shape[1] < 2:
        return x, np.eye(x.shape[1])
    load, rot = varimax(x)
    Q = load * np.abs(load) ** (m - 1)
    U = np.linalg.lstsq(load, Q, rcond=None)[0]
    d = np.diag(np.linalg.inv(U.T @ U))
    U = U @ np.diag(np.sqrt(d))
    return load @ U, rot @ U


def _factanal(cv: np.ndarray, factors: int, lower: float = 0.005):
    """ML factor analysis of correlation matrix ``cv`` (R ``factanal.fit.mle``), optimized to
    convergence: R's L-BFGS-B start, bounds [lower, 1] and parameter scale 0.01, with tight
    tolerances (R stops at ``factr = 1e7``: its uniquenesses are accurate to about 1e-4)."""
    p = cv.shape[0]
    start = (1 - 0.5 * factors / p) / np.diag(np.linalg.inv(cv))
    res = optimize.minimize(
        lambda u: _fa_objective(u * 0.01, cv, factors), start / 0.01,
        jac=lambda u: _fa_gradient(u * 0.01, cv, factors) * 0.01, method="L-BFGS-B",
        bounds=[(lower / 0.01, 1 / 0.01)] * p,
        options={"ftol": 1e-15, "gtol": 1e-13, "maxiter": 10000, "maxcor": 5})
    psi = res.x * 0.01
    return psi, _fa_loadings(psi, cv, factors), _fa_objective(psi, cv, factors), bool(res.success)


def _sort_loadings(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-(L ** 2).sum(axis=0), kind="stable")
    L = L[:, order]
    neg = L.sum(axis=0) < 0
    L[:, neg] = -L[:, neg]
    return L, order


def svyfactanal(x: Sequence[str], design: Any, factors: int, n: str = "none",
                rotation: str = "varimax", lower: float = 0.005) -> FactanalResult:
    """Maximum-likelihood factor analysis of the design-based covariance matrix (R
    ``svyfactanal``: ``factanal(covmat=svyvar(x, design), factors, n.obs=...)``).

    ``n`` is the sample size R plugs into the chi-squared test: ``"none"`` (no test, R's
    default), ``"sample"`` (rows), ``"degf"`` (design df + 1), ``"effective"`` (1 + the harmonic
    mean of the variances' effective sizes ``2 (s^2 / SE(s^2))^2``), ``"min.effective"`` (1 +
    their minimum). ``rotation``: ``"varimax"`` (R's default), ``"promax"`` or ``"none"``.

    Precision: R's ``factanal`` stops its optimizer at L-BFGS-B's default tolerance, so its
    uniquenesses and loadings are accurate to about 1e-4; ours are optimized to convergence
    (they equal R's run with a tight ``control=list(opt=list(factr=1, pgtol=0))`` to ~1e-8).
    """
    if n not in ("none", "sample", "degf", "effective", "min.effective"):
        raise ValueError(f"svyfactanal: n={n!r}: choose 'none', 'sample', 'degf', 'effective' "
                         "or 'min.effective'.")
    if rotation not in ("varimax", "promax", "none"):
        raise ValueError(f"svyfactanal: rotation={rotation!r}: choose 'varimax', 'promax' or "
                         "'none'.")
    cols = _columns(x, design, "svyfactanal", least=3)
    p = len(cols)
    dof = 0.5 * ((p - factors) ** 2 - p - factors)
    if dof < 0:
        raise ValueError(f"svyfactanal: {factors} factors are too many for {p} variables.")
    v = svyvar(cols, design)
    S = v.attrs["matrix"].to_numpy()
    s2 = np.diag(S)
    ses2 = v["se"].to_numpy().reshape(p, p, order="F").diagonal()
    neff = 2 * (s2 / ses2) ** 2
    n_obs = {"none": None, "sample": design.n - 1, "degf": float(design.degf),
             "effective": 1 / np.mean(1 / neff), "min.effective": float(np.min(neff))}[n]
    n_obs = None if n_obs is None else float(n_obs) + 1
    sds = np.sqrt(s2)
    cv = S / np.outer(sds, sds)
    psi, load, objective, ok = _factanal(cv, factors, lower)
    rotmat = None
    if rotation != "none" and factors > 1:
        load, rotmat = (varimax if rotation == "varimax" else promax)(load)
    load, _ = _sort_loadings(load)
    names = [f"Factor{i + 1}" for i in range(factors)]
    stat = pval = None
    if n_obs is not None and dof > 0:
        stat = (n_obs - 1 - (2 * p + 5) / 6 - (2 * factors) / 3) * objective
        pval = float(stats.chi2.sf(stat, dof))
    return FactanalResult(
        loadings=pd.DataFrame(load, index=cols, columns=names),
        uniquenesses=pd.Series(psi, index=cols), correlation=pd.DataFrame(cv, cols, cols),
        objective=objective, factors=factors, dof=dof, n_obs=n_obs, statistic=stat,
        p_value=pval, converged=ok, rotmat=rotmat)
