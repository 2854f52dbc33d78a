"""Utility measures for synthetic data (METHODS.md section 13).

Global measures compare the joint distribution of original and synthetic data:

* :func:`ecdf_utility` — empirical-CDF distances U_m / U_a (Woo, Reiter, Oganian & Karr 2009);
* :func:`pmse` — propensity-score mean squared error (Woo et al. 2009; Snoke et al. 2018);
* :func:`k_marginal_score` — NIST CRC k-marginal score as used in seed 004 (Task et al. 2021);
* :func:`wasserstein_ratio` — 1-D Wasserstein distance divided by its median under random
  re-partitions of the pooled sample (seed 004, Section 4).

Analysis-specific measures:

* :func:`coef_difference` — standardized coefficient differences |b_orig - b_syn| / SE(b_orig);
* :func:`nrmse` — normalised root mean squared prediction error on held-out data;
* :func:`ci_overlap` — confidence-interval overlap (Karr et al. 2006).

All functions accept array-likes or DataFrames and never modify their inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "ecdf_utility",
    "pmse",
    "k_marginal_score",
    "wasserstein_distance_1d",
    "wasserstein_ratio",
    "coef_difference",
    "nrmse",
    "ci_overlap",
]


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _as_2d(x: Any, name: str) -> np.ndarray:
    """Numeric float array of shape (n, d); 1-D input becomes one column. Rejects NaN/inf."""
    if isinstance(x, pd.Series):
        arr = x.to_numpy()
    elif isinstance(x, pd.DataFrame):
        arr = x.to_numpy()
    else:
        arr = np.asarray(x)
    try:
        arr = arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric; could not convert to float ({exc}).") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 1-D or 2-D (records x variables); got shape {arr.shape}.")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty; pass at least one record.")
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise ValueError(
            f"{name} has missing or non-finite values in rows {rows} (first shown); "
            "drop or impute them before computing utility."
        )
    return arr


def _synthetic_list(synthetic: Any, name: str = "synthetic") -> list[Any]:
    """A single synthetic data set or a list/tuple of them -> list."""
    if isinstance(synthetic, (list, tuple)) and len(synthetic) > 0:
        first = synthetic[0]
        if isinstance(first, (np.ndarray, pd.DataFrame, pd.Series, list, tuple)):
            # list of data sets; a plain list of numbers is a single 1-D data set
            if not (isinstance(first, (list, tuple)) and np.ndim(first) == 0):
                return list(synthetic)
    if isinstance(synthetic, (list, tuple)) and len(synthetic) == 0:
        raise ValueError(f"{name} is an empty list; pass at least one synthetic data set.")
    return [synthetic]


# --------------------------------------------------------------------------------------------
# ECDF utility (Woo et al. 2009)
# --------------------------------------------------------------------------------------------


def _ecdf_at(sample: np.ndarray, points: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """Right-continuous (multivariate) ECDF of ``sample`` evaluated at ``points``.

    F(z) = #{i: x_i <= z componentwise} / n. 1-D uses sorting (O(N log N)); d > 1 compares in
    chunks (O(N n d) time, bounded memory).
    """
    n, d = sample.shape
    if d == 1:
        s = np.sort(sample[:, 0])
        return np.searchsorted(s, points[:, 0], side="right") / n
    out = np.empty(points.shape[0])
    for start in range(0, points.shape[0], chunk):
        p = points[start : start + chunk]
        le = (sample[None, :, :] <= p[:, None, :]).all(axis=2)
        out[start : start + chunk] = le.mean(axis=1)
    return out


def ecdf_utility(original: Any, synthetic: Any) -> dict[str, float]:
    """Empirical-CDF utility of Woo et al. (2009), averaged over synthetic data sets.

    For each synthetic set, pool the original and synthetic records; at every pooled record z
    evaluate the right-continuous ECDFs F_o(z) and F_s(z) (a record counts when every coordinate
    is <= z, so ties count and 1-D input gives the usual ECDF). Then

        U_m = max_z |F_o(z) - F_s(z)|,   U_a = mean_z (F_o(z) - F_s(z))^2,

    the mean running over all n_o + n_s pooled records. Both are 0 for identical data; smaller
    is better. The returned values are averages over the synthetic sets (METHODS.md section 13).

    Parameters
    ----------
    original : array-like, shape (n,) or (n, d)
    synthetic : array-like of the same number of columns, or a list of such arrays.

    Returns
    -------
    dict with ``U_m`` and ``U_a`` (averages) and ``U_m_each`` / ``U_a_each`` (per synthetic set).
    """
    orig = _as_2d(original, "original")
    syns = [_as_2d(s, f"synthetic[{k}]") for k, s in enumerate(_synthetic_list(synthetic))]
    um, ua = [], []
    for k, syn in enumerate(syns):
        if syn.shape[1] != orig.shape[1]:
            raise ValueError(
                f"synthetic[{k}] has {syn.shape[1]} columns but original has {orig.shape[1]}; "
                "pass the same variables in the same order."
            )
        pooled = np.vstack([orig, syn])
        diff = _ecdf_at(orig, pooled) - _ecdf_at(syn, pooled)
        um.append(float(np.max(np.abs(diff))))
        ua.append(float(np.mean(diff**2)))
    return {
        "U_m": float(np.mean(um)),
        "U_a": float(np.mean(ua)),
        "U_m_each": um,
        "U_a_each": ua,
    }
