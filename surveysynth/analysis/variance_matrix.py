"""Population variance and covariance matrix of variables: R ``svyvar`` (survey 4.1 and 4.5).

``svyvar(["x", "y"], design)`` estimates the finite-population (co)variances
``S_jk = sum w (x_j - xbar_j)(x_k - xbar_k) / sum w * n / (n - 1)`` (Kish's ``n - 1``
divisor) and their design-based standard errors, exactly as R computes them:

* linearization designs (R ``svyvar.survey.design``): the weighted means ``xbar`` are
  estimated, then the products ``(x_j - xbar_j)(x_k - xbar_k) n / (n - 1)`` are averaged by
  ``svymean`` with ``xbar`` held fixed, so the SE is ``svymean``'s linearized SE of those
  products (strata, clusters, fpc, calibration through the core's Taylor engine). ``n`` is the
  number of rows of the design (or subset) with a non-zero sampling weight and no missing
  value (R survey 4.5). R survey 4.1 counted the rows that ``na_rm`` drops too:
  ``survey_version="4.1"`` gives its numbers;
* replicate designs (R ``svyvar.svyrep.design``): the whole statistic, means included, is
  recomputed with every replicate's weights and the replicates' covariance is ``svrVar``
  (scale, rscales, mse); ``n`` is the number of rows used (after ``na_rm``).

The result has one row per entry of the p x p matrix in R's (column-major) order, with
``variable`` and ``variable2`` naming the entry; the diagonal rows are what R prints by default,
all rows what ``print(v, covariance=TRUE)`` prints. ``surveysynth.vcov(result)`` gives the
(p^2 x p^2) covariance of the entries (R ``vcov(svyvar(...))``) and ``result.attrs["matrix"]``
the p x p matrix (R ``as.matrix(svyvar(...))``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..estimate import attach_vcov, estimate_frame
from .covariance import mean_covariance, replicate_covariance


def _weighted_cov(X: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """R's ``v(w)`` of ``svrepvar``: weighted covariance matrix (p*p, column-major) with the
    ``n / (n - 1)`` factor."""
    tot = w.sum()
    xbar = (w[:, None] * X).sum(axis=0) / tot
    dev = X - xbar
    p = X.shape[1]
    a = np.tile(dev, (1, p))  # column j*p + i holds dev_i (R: matrix(rep(xdev, p)))
    b = np.repeat(dev, p, axis=1)  # column j*p + i holds dev_j
    return (n / (n - 1)) * (a * b * w[:, None]).sum(axis=0) / tot


def svyvar(x: str | Sequence[str], design: Any, na_rm: bool = False, level: float = 0.95,
           ci: str = "normal", survey_version: str = "4.5") -> pd.DataFrame:
    """Estimated population variance (one variable) or covariance matrix (several) of
    numeric columns, with design-based SEs (R ``svyvar``).

    Parameters
    ----------
    x : a column name or a list of them (R: ``~x`` or ``~x + y``).
    design : a :class:`~surveysynth.SurveyDesign` (possibly calibrated or a ``subset()``) or a
        :class:`~surveysynth.ReplicateDesign`.
    na_rm : drop rows with a missing value in any of ``x`` (R ``na.rm=TRUE``); without it a
        missing value is an error naming the rows.
    level, ci : interval level and kind (``"normal"``: R's ``confint``; ``"t"``: design df).
    survey_version : ``"4.5"`` (default, current R) or ``"4.1"``: on a linearization design
        with ``na_rm=True`` and missing values, R 4.1 also counted the dropped rows in the
        ``n / (n - 1)`` factor. No other difference.

    Returns
    -------
    A DataFrame, one row per matrix entry (``variable``, ``variable2``) in R's column-major
    order: ``estimate``, ``se``, ``ci_low``, ``ci_high``, ``df``, ``cv``; ``attrs["matrix"]``
    the p x p estimate; :func:`surveysynth.vcov` its covariance (R ``vcov``).

    Why the two design kinds differ in how the mean is treated: that is R's choice (the
    linearized SE treats ``xbar`` as known, the replicate SE re-estimates it), kept so that the
    numbers are R's.
    """
    if survey_version not in ("4.5", "4.1"):
        raise ValueError(f"svyvar: survey_version={survey_version!r}: choose '4.5' or '4.1'.")
    cols = [x] if isinstance(x, str) else list(x)
    if not cols or not all(isinstance(c, str) for c in cols):
        raise ValueError(f"svyvar: x={x!r}: give a column name or a list of column names.")
    missing = [c for c in cols if c not in design.full_data.columns]
    if missing:
        raise ValueError(
            f"svyvar: columns {missing} are not in the design's data. Fix: one of "
            f"{list(map(str, design.full_data.columns))[:12]}..."
        )
    vals = np.column_stack([design.numeric_values(c) for c in cols])
    est, cov = _svyvar_values(vals, design, na_rm, survey_version, cols)
    p = len(cols)
    inside = np.asarray(design.in_subset, dtype=bool)
    df = float(design.domain_df(np.where(inside, 0, -1), 1)[0])
    labels = [(cols[i], None) for j in range(p) for i in range(p)]
    out = estimate_frame(None, 1, labels, est, np.sqrt(np.diag(cov)), [df], level, ci)
    out.insert(1, "variable2", [cols[j] for j in range(p) for i in range(p)])
    names = [f"{cols[i]}:{cols[j]}" for j in range(p) for i in range(p)]
    attach_vcov(out, names, cov)
    out.attrs["matrix"] = pd.DataFrame(est.reshape(p, p, order="F"), index=cols, columns=cols)
    return out


def _svyvar_values(vals: np.ndarray, design: Any, na_rm: bool, survey_version: str,
                   cols: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The p*p estimates (column-major) and their covariance for ``vals`` (n_full, p) over
    ``design.full_data`` (NaN: missing)."""
    inside = np.asarray(design.in_subset, dtype=bool)
    bad = np.isnan(vals).any(axis=1) & inside
    if bad.any() and not na_rm:
        if cols is not None:
            design.missing_rows(cols, na_rm, "svyvar")  # raises naming the column
        raise ValueError("svyvar: missing values; Fix: na_rm=True.")
    scope = inside & ~bad
    p = vals.shape[1]
    w_full = np.asarray(design.full_weights, dtype=float)
    if getattr(design, "design_kind", "taylor") == "replicate":
        keep = scope[inside]
        X = vals[scope]
        n = int(X.shape[0])
        if n < 2:
            raise ValueError(f"svyvar: {n} row(s) in scope; a variance needs at least 2.")
        est = _weighted_cov(X, w_full[scope], n)
        rep = np.asarray(design.replicate_weights("analysis"), dtype=float)[keep]
        thetas = np.vstack([_weighted_cov(X, rep[:, r], n) for r in range(rep.shape[1])])
        return est, replicate_covariance(design, thetas, est)
    counted = inside if survey_version == "4.1" else scope
    n = int(np.sum(w_full[counted] != 0))
    if n < 2:
        raise ValueError(f"svyvar: {n} row(s) in scope; a variance needs at least 2.")
    codes = np.where(scope, 0, -1)
    X = np.where(scope[:, None], vals, 0.0)
    xbar = (w_full[scope, None] * X[scope]).sum(axis=0) / w_full[scope].sum()
    dev = np.where(scope[:, None], X - xbar, 0.0)
    Y = np.tile(dev, (1, p)) * np.repeat(dev, p, axis=1) * (n / (n - 1))
    est, cov = mean_covariance(design, Y, codes)
    return np.asarray(est, dtype=float).reshape(-1), cov
