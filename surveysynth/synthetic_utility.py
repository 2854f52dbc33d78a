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


# --------------------------------------------------------------------------------------------
# pMSE (propensity score mean squared error)
# --------------------------------------------------------------------------------------------


def _logistic_fit(D: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, bool]:
    """Fitted probabilities of a maximum-likelihood logistic regression (statsmodels ``Logit``,
    Newton's method) and whether it converged.

    ``D`` includes the intercept column. Under (quasi-)separation the MLE does not exist: the
    fit stops with probabilities near 0/1 and ``converged`` False, as before, not an error.
    """
    import warnings

    import statsmodels.api as sm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # separation and convergence warnings: reported below
        try:
            res = sm.Logit(t, D).fit(method="newton", disp=0, maxiter=100, tol=1e-10)
        except np.linalg.LinAlgError:
            res = sm.Logit(t, D).fit(method="bfgs", disp=0, maxiter=1000, gtol=1e-10)
    return np.asarray(res.predict(D), dtype=float), bool(res.mle_retvals.get("converged", False))


def _design_matrix(Y: np.ndarray, interactions: bool) -> np.ndarray:
    """Standardized main effects (+ pairwise products of them) with an intercept.

    Standardizing does not change the fitted probabilities (the column space is the same) but
    keeps the Newton iterations well conditioned.
    """
    sd = Y.std(axis=0)
    sd[sd == 0] = 1.0
    S = (Y - Y.mean(axis=0)) / sd
    cols = [np.ones(S.shape[0]), *S.T]
    if interactions:
        cols += [S[:, a] * S[:, b] for a, b in combinations(range(S.shape[1]), 2)]
    D = np.column_stack(cols)
    keep = np.ones(D.shape[1], dtype=bool)
    keep[1:] = D[:, 1:].std(axis=0) > 0  # drop constant columns (they duplicate the intercept)
    return D[:, keep]


def pmse(original: Any, synthetic: Any, interactions: bool = False) -> dict[str, Any]:
    """Propensity-score mean squared error (Woo et al. 2009; Snoke et al. 2018).

    Stack original (label 0) and synthetic (label 1) records, fit a logistic regression of the
    label on the variables (main effects, plus all pairwise products if ``interactions``), and
    return pMSE = mean_i (p_hat_i - c)^2 with c = n_syn / (n_orig + n_syn). 0 is best; 0.25 the
    worst. Averaged over synthetic sets (``pMSE``), with per-set values in ``pMSE_each``.
    Seed 004 reports both versions ("WOI" and "WI").
    """
    orig = _as_2d(original, "original")
    out = []
    conv = []
    for k, s in enumerate(_synthetic_list(synthetic)):
        syn = _as_2d(s, f"synthetic[{k}]")
        if syn.shape[1] != orig.shape[1]:
            raise ValueError(f"synthetic[{k}] has {syn.shape[1]} columns, original {orig.shape[1]}.")
        Y = np.vstack([orig, syn])
        t = np.r_[np.zeros(orig.shape[0]), np.ones(syn.shape[0])]
        p, ok = _logistic_fit(_design_matrix(Y, interactions), t)
        c = syn.shape[0] / Y.shape[0]
        out.append(float(np.mean((p - c) ** 2)))
        conv.append(ok)
    return {"pMSE": float(np.mean(out)), "pMSE_each": out, "converged": all(conv)}


# --------------------------------------------------------------------------------------------
# k-marginal score (Task et al. 2021, as used in seed 004)
# --------------------------------------------------------------------------------------------


def k_marginal_score(original: Any, synthetic: Any, k: int | None = None) -> dict[str, Any]:
    """NIST CRC k-marginal score: 1000 (2 - TD) / 2, averaged over variable subsets and sets.

    Each variable is cut at the original's min, Q1, median, Q3, max (numpy's default linear
    quantiles, R type 7) into 6 left-open bins: (-inf, min], (min, Q1], ..., (Q3, max], (max, inf)
    (R ``findInterval(left.open=TRUE)`` as in the authors' code). For every k-subset of variables
    TD = sum over the 6^k cells of |share_syn - share_orig| (shares = counts / own sample size;
    with equal sizes this is the paper's count difference / n_orig). k defaults to all variables;
    smaller k averages over all subsets. 1000 = identical cell shares, 0 = disjoint.
    """
    orig = _as_2d(original, "original")
    d = orig.shape[1]
    k = d if k is None else int(k)
    if not 1 <= k <= d:
        raise ValueError(f"k must be between 1 and the number of variables ({d}); got {k}.")
    breaks = np.quantile(orig, [0, 0.25, 0.5, 0.75, 1.0], axis=0)  # 5 x d

    def codes(a):
        return np.column_stack([np.searchsorted(breaks[:, j], a[:, j], side="left") for j in range(d)])

    co = codes(orig)
    scores = []
    for s_idx, s in enumerate(_synthetic_list(synthetic)):
        syn = _as_2d(s, f"synthetic[{s_idx}]")
        if syn.shape[1] != d:
            raise ValueError(f"synthetic[{s_idx}] has {syn.shape[1]} columns, original {d}.")
        cs = codes(syn)
        per = []
        for sub in combinations(range(d), k):
            mult = 6 ** np.arange(k)
            ko = co[:, sub] @ mult
            ks = cs[:, sub] @ mult
            fo = np.bincount(ko, minlength=6**k) / orig.shape[0]
            fs = np.bincount(ks, minlength=6**k) / syn.shape[0]
            per.append(1000.0 * (2.0 - np.abs(fo - fs).sum()) / 2.0)
        scores.append(float(np.mean(per)))
    return {"score": float(np.mean(scores)), "score_each": scores}


# --------------------------------------------------------------------------------------------
# Wasserstein randomization ratio (Arnold & Neunhoeffer 2020)
# --------------------------------------------------------------------------------------------


def _w1_from_labels(values_sorted: np.ndarray, labels: np.ndarray, n_a: int, n_b: int) -> np.ndarray:
    """W1 between the two groups defined by boolean ``labels`` (R x N, True = group a) of the
    sorted pooled values: integral of |F_a - F_b| over the gaps between pooled points.

    Kept beside scipy's ``wasserstein_distance`` because the randomization null needs W1 for
    hundreds of re-partitions of one pooled sample: sorted once, all partitions in one matrix
    product (scipy sorts and integrates one pair per call).
    """
    gaps = np.diff(values_sorted)
    Fa = np.cumsum(labels[:, :-1], axis=1) / n_a
    Fb = np.cumsum(~labels[:, :-1], axis=1) / n_b
    return np.abs(Fa - Fb) @ gaps


def wasserstein_distance_1d(a: Any, b: Any) -> float:
    """Exact 1-D Wasserstein-1 distance between two samples (``scipy.stats.wasserstein_distance``)."""
    from scipy.stats import wasserstein_distance

    return float(wasserstein_distance(_as_2d(a, "a")[:, 0], _as_2d(b, "b")[:, 0]))


def wasserstein_ratio(
    original: Any,
    synthetic: Any,
    n_perm: int = 1000,
    seed: int | np.random.Generator | None = None,
    chunk: int = 50,
) -> dict[str, Any]:
    """Wasserstein randomization ratio: W(orig, syn) / median W over random re-partitions.

    The pooled records are randomly re-split into groups of the original sizes ``n_perm`` times;
    the null distance is the median of those W's (Arnold & Neunhoeffer 2020; seed 004 Section
    4.2). 0 = identical; ~1 = indistinguishable from a random split. Decision: W is the exact
    1-D Wasserstein-1 distance per variable and a multivariate input reports the mean of the
    per-variable ratios (``ratio``) with the ratios by variable (``ratio_by_variable``); exact
    multivariate optimal transport for thousands of records x 1000 permutations is out of reach.
    Averaged over synthetic sets.
    """
    orig = _as_2d(original, "original")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n_perm = int(n_perm)
    if n_perm < 1:
        raise ValueError(f"n_perm must be positive; got {n_perm}.")
    per_set = []
    for s_idx, s in enumerate(_synthetic_list(synthetic)):
        syn = _as_2d(s, f"synthetic[{s_idx}]")
        if syn.shape[1] != orig.shape[1]:
            raise ValueError(f"synthetic[{s_idx}] has {syn.shape[1]} columns, original {orig.shape[1]}.")
        na, nb = orig.shape[0], syn.shape[0]
        N = na + nb
        base = np.r_[np.ones(na, bool), np.zeros(nb, bool)]
        ratios = []
        for j in range(orig.shape[1]):
            pooled = np.concatenate([orig[:, j], syn[:, j]])
            order = np.argsort(pooled, kind="stable")
            vs = pooled[order]
            w_obs = _w1_from_labels(vs, base[order][None, :], na, nb)[0]
            null = []
            for start in range(0, n_perm, chunk):
                r = min(chunk, n_perm - start)
                keys = rng.random((r, N))
                lab = np.argsort(keys, axis=1) < na  # a uniformly random size-na subset per row
                null.append(_w1_from_labels(vs, lab, na, nb))
            med = float(np.median(np.concatenate(null)))
            ratios.append(w_obs / med if med > 0 else (0.0 if w_obs == 0 else np.inf))
        per_set.append(ratios)
    arr = np.asarray(per_set)
    return {
        "ratio": float(arr.mean()),
        "ratio_by_variable": arr.mean(axis=0).tolist(),
        "ratio_each": arr.mean(axis=1).tolist(),
    }


# --------------------------------------------------------------------------------------------
# specific utility
# --------------------------------------------------------------------------------------------


def _frame_xy(data: Any, y: str, x: Sequence[str], name: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(data, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame with columns {[y, *x]}.")
    missing = [c for c in [y, *x] if c not in data.columns]
    if missing:
        raise ValueError(f"{name} lacks columns {missing}.")
    Y = _as_2d(data[y], f"{name}[{y!r}]")[:, 0]
    X = _as_2d(data[list(x)], f"{name}[{list(x)}]") if x else np.empty((len(Y), 0))
    return Y, np.column_stack([np.ones(len(Y)), X])


def _ols(Y: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients and classical standard errors of an OLS fit (statsmodels ``OLS``)."""
    import statsmodels.api as sm

    n, p = X.shape
    if n <= p:
        raise ValueError(f"need more records ({n}) than coefficients ({p}) for least squares.")
    res = sm.OLS(Y, X).fit()
    return np.asarray(res.params, dtype=float), np.asarray(res.bse, dtype=float)


def coef_difference(original: Any, synthetic: Any, y: str, x: Sequence[str]) -> pd.DataFrame:
    """Standardized coefficient differences |b_orig - b_syn| / SE(b_orig) of an OLS of y on x.

    SE is the classical OLS standard error on the original data (seed 004 Section 4.3; Snoke et
    al. 2018). Returns one row per term (``(Intercept)`` first) with b_orig, se_orig, b_syn (mean
    over synthetic sets) and std_diff (mean over sets of each set's standardized difference).
    """
    x = [x] if isinstance(x, str) else list(x)
    Yo, Xo = _frame_xy(original, y, x, "original")
    bo, se = _ols(Yo, Xo)
    bs, dif = [], []
    for k, s in enumerate(_synthetic_list(synthetic)):
        Ys, Xs = _frame_xy(s, y, x, f"synthetic[{k}]")
        b, _ = _ols(Ys, Xs)
        bs.append(b)
        dif.append(np.abs(bo - b) / se)
    return pd.DataFrame(
        {
            "term": ["(Intercept)", *x],
            "b_orig": bo,
            "se_orig": se,
            "b_syn": np.mean(bs, axis=0),
            "std_diff": np.mean(dif, axis=0),
        }
    )


def nrmse(synthetic: Any, test: Any, y: str, x: Sequence[str]) -> dict[str, Any]:
    """Out-of-sample prediction error of an OLS of y on x fitted to synthetic data.

    RMSE of the fitted model's predictions on held-out ``test`` data divided by the standard
    deviation (n - 1 denominator, R's ``sd``) of the test response (seed 004 Section 4.3).
    Averaged over synthetic sets.
    """
    x = [x] if isinstance(x, str) else list(x)
    Yt, Xt = _frame_xy(test, y, x, "test")
    sd = float(np.std(Yt, ddof=1))
    if not sd > 0:
        raise ValueError(f"test[{y!r}] is constant; NRMSE is undefined.")
    vals = []
    for k, s in enumerate(_synthetic_list(synthetic)):
        Ys, Xs = _frame_xy(s, y, x, f"synthetic[{k}]")
        b, _ = _ols(Ys, Xs)
        vals.append(float(np.sqrt(np.mean((Yt - Xt @ b) ** 2)) / sd))
    return {"NRMSE": float(np.mean(vals)), "NRMSE_each": vals}


def ci_overlap(lower_orig: Any, upper_orig: Any, lower_syn: Any, upper_syn: Any) -> np.ndarray:
    """Confidence-interval overlap of Karr et al. (2006), elementwise.

    J = 0.5 [(min(u_o, u_s) - max(l_o, l_s)) / (u_o - l_o) + (same) / (u_s - l_s)]; 1 for
    identical intervals, <= 0 when they are disjoint (negative values measure the gap).
    """
    lo, uo, ls, us = (np.asarray(a, dtype=np.float64) for a in (lower_orig, upper_orig, lower_syn, upper_syn))
    if np.any(uo <= lo) or np.any(us <= ls):
        raise ValueError("each interval needs upper > lower.")
    inter = np.minimum(uo, us) - np.maximum(lo, ls)
    return 0.5 * (inter / (uo - lo) + inter / (us - ls))
