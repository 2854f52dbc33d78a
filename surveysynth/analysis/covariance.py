"""Design covariance matrices from the core's variance hooks, by polarization.

The core returns variances per column (``Estimators.domain_ratios``: Taylor linearization for
:class:`~surveysynth.SurveyDesign`, replicate weights for
:class:`~surveysynth.ReplicateDesign`; ``replicate_variance`` for replicate estimates). Every
one of those variances is a quadratic form in its column, so covariances follow exactly from
variances of sums (polarization): ``cov(a, b) = (var(a + b) - var(a) - var(b)) / 2``. This keeps
one variance engine for the package: nothing here re-derives a linearization or replicate rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..variance.replicate_weights import replicate_variance


def _pairs(k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(k, 1)


def polarized_covariance(variances: Callable[[np.ndarray], np.ndarray],
                         columns: np.ndarray) -> np.ndarray:
    """(k, k) covariance of the k columns of ``columns`` from a function giving variances.

    ``variances(M)`` returns the variance of each column of ``M`` (a quadratic form per column);
    it is called once, on the k columns and the k (k - 1) / 2 pairwise sums.
    """
    k = columns.shape[1]
    i, j = _pairs(k)
    stacked = np.concatenate([columns, columns[:, i] + columns[:, j]], axis=1)
    v = np.asarray(variances(stacked), dtype=float).reshape(-1)
    diag = v[:k]
    cov = np.diag(diag)
    off = (v[k:] - diag[i] - diag[j]) / 2
    cov[i, j] = off
    cov[j, i] = off
    return cov


def total_covariance(design: Any, Y: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Covariance of the weighted totals ``sum w Y`` over domain 0 of ``codes`` (R ``svytotal``).

    ``Y`` is (n_full, k) over ``design.full_data`` (no NaN), ``codes`` from ``design.domains``
    (0 in scope, -1 outside).
    """
    def var(M: np.ndarray) -> np.ndarray:
        return design.domain_ratios(M, None, codes, 1)[1][0]

    return polarized_covariance(var, np.asarray(Y, dtype=float))


def mean_covariance(design: Any, Y: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means ``sum w Y / sum w`` over domain 0 of ``codes`` and their covariance (R ``svymean``)."""
    Y = np.asarray(Y, dtype=float)
    est = design.domain_ratios(Y, np.ones_like(Y), codes, 1)[0][0]

    def var(M: np.ndarray) -> np.ndarray:
        return design.domain_ratios(M, np.ones_like(M), codes, 1)[1][0]

    return est, polarized_covariance(var, Y)


def influence_covariance(design: Any, infl: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Covariance of ``sum infl`` over a linearization design's rows (R ``svyrecvar``).

    ``infl`` (n_full, k) holds already weighted influence values (zero outside the scope); the
    core's Taylor engine receives them as totals of ``infl / w``.
    """
    w = np.asarray(design.full_weights, dtype=float)
    safe = np.where(w > 0, w, 1.0)
    Y = np.where((codes >= 0)[:, None], infl / safe[:, None], 0.0)
    return total_covariance(design, Y, codes)


def replicate_covariance(design: Any, thetas: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Covariance of replicate estimates ``thetas`` (R, k): R ``svrVar`` with the design's
    ``scale``, ``rscales`` and ``mse`` (centre: replicate mean, or ``full`` when mse)."""
    full = np.asarray(full, dtype=float).reshape(-1)
    k = full.shape[0]
    i, j = _pairs(k)
    full2 = np.concatenate([full, full[i] + full[j]])

    def var(M: np.ndarray) -> np.ndarray:
        return replicate_variance(M, full2, design.scale, design.rscales, design.mse)[0]

    return polarized_covariance(var, np.asarray(thetas, dtype=float))
