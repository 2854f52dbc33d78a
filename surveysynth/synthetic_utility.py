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

from .encoding import NA_LEVEL, Factor

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


# ----------------------------------------------------------------------------- joint utility
# The joint measures of the confidential report ("Utility: joint", issue 22): every synthesized
# variable coded once from the confidential data (_Coder), then pMSE with all pairwise
# interactions, k-marginal scores, CI overlap of estimates and of regression coefficients.
# (Moved from report.py, which presents them: issue 38.)
#: sequential variable types coded as categories (one-hot / one bin per level) in the joint
#: utility; every other type is numeric
CATEGORICAL_TYPES = ("binary", "categorical", "ordinal")
_MISSING = "(missing)"


def _level_strings(col: pd.Series) -> np.ndarray:
    """Values as level labels (object array, None for missing): whole numbers print without a
    decimal point, so a level 1 of the confidential data and 1.0 of a synthetic set agree."""
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        v = col.to_numpy(dtype=float)
        whole = np.isfinite(v) & (v == np.round(v)) & (np.abs(v) < 1e15)
        out = np.where(whole, np.where(whole, v, 0).astype(np.int64).astype(str), v.astype(str))
        return np.where(np.isnan(v), None, out).astype(object)
    na = col.isna().to_numpy()
    return np.where(na, None, col.astype(str).to_numpy(dtype=object)).astype(object)


def _is_categorical(col: pd.Series, declared: str | None) -> bool:
    if declared is not None:
        return declared in CATEGORICAL_TYPES
    return bool(pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col))


class _Coder:
    """How one variable enters the joint measures, fixed from the confidential data (and the
    levels the synthetic sets add): a numeric variable is one column (plus a missing indicator
    when a value is missing anywhere; missing values then sit at 0 in the value column) and is
    cut for the k-marginal at the confidential min, Q1, median, Q3, max (as
    :func:`surveysynth.synthetic_utility.k_marginal_score`); a categorical one is one-hot with
    the first confidential level as reference (K - 1 columns) and one bin per level."""

    def __init__(self, name: str, conf: pd.Series, syns: list[pd.Series], categorical: bool):
        self.name = name
        self.categorical = categorical
        if categorical:
            # R's levels of the confidential data (surveysynth.encoding), as label strings
            # (a level 1 of the confidential data and 1.0 of a synthetic set agree), then the
            # levels only synthetic sets have (sorted), then the missing-value level (NA_LEVEL)
            lab_c = _level_strings(conf)
            codes = Factor.learn(conf, name=name, used_only=True, na="skip").codes(conf)
            ks, first_row = np.unique(codes, return_index=True)  # a row of each level
            first = list(dict.fromkeys(lab_c[first_row[ks >= 0]]))
            extra = {x for s in syns for x in _level_strings(s) if x is not None}
            fac = Factor(name, tuple(first), na="level").with_levels(extra)
            if any(x is None for x in lab_c) or any(s.isna().any() for s in syns):
                fac = Factor(name, (*fac.levels, NA_LEVEL), na="level")
            self.factor = fac
            self.levels = list(fac.levels)
            self.n_bins = len(self.levels)
            self.columns = fac.names()
        else:
            v = pd.to_numeric(conf, errors="coerce").to_numpy(dtype=float)
            self.has_missing = bool(np.isnan(v).any() or any(
                pd.to_numeric(s, errors="coerce").isna().any() for s in syns))
            fin = v[np.isfinite(v)]
            self.breaks = np.quantile(fin, [0, 0.25, 0.5, 0.75, 1.0]) if fin.size else np.zeros(5)
            self.n_bins = 6 + int(self.has_missing)
            self.columns = [name] + ([f"{name} missing"] if self.has_missing else [])

    def _codes_cat(self, col: pd.Series) -> np.ndarray:
        return self.factor.codes(pd.Series(_level_strings(col), index=col.index))

    def matrix(self, col: pd.Series) -> np.ndarray:
        """The variable's columns of the propensity model (records x len(columns))."""
        if self.categorical:
            return self.factor.indicators(self._codes_cat(col))
        v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
        if not self.has_missing:
            return v[:, None]
        miss = np.isnan(v)
        return np.column_stack([np.where(miss, 0.0, v), miss.astype(float)])

    def bins(self, col: pd.Series) -> np.ndarray:
        """The variable's k-marginal bin of every record (0 .. n_bins - 1)."""
        if self.categorical:
            return self._codes_cat(col)
        v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
        b = np.searchsorted(self.breaks, np.where(np.isnan(v), 0.0, v), side="left")
        return np.where(np.isnan(v), 6, b) if self.has_missing else b

    def coding(self) -> str:
        if self.categorical:
            miss = f"; missing values are the level {_MISSING}" if NA_LEVEL in self.levels else ""
            return (f"one-hot, {self.n_bins - 1} indicator(s), reference level "
                    f"{self.levels[0]!r}; {self.n_bins} k-marginal bins (one per level){miss}")
        miss = "; a missing indicator (values 0 where missing)" if self.has_missing else ""
        return "standardised value; 6 k-marginal bins at the confidential quartiles" + miss


def _independent_columns(X: np.ndarray) -> np.ndarray:
    """Indices of a maximal set of linearly independent columns of ``X`` beside an intercept
    (pivoted QR of the standardised columns): an indicator product that is constant, or equal
    to another column, would make the propensity model singular."""
    from scipy.linalg import qr

    sd = X.std(axis=0)
    ok = np.flatnonzero(sd > 0)
    if ok.size == 0:
        return ok
    S = np.column_stack([np.ones(X.shape[0]), (X[:, ok] - X[:, ok].mean(axis=0)) / sd[ok]])
    _, R, piv = qr(S, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int((diag > diag.max() * max(S.shape) * np.finfo(float).eps * 10).sum())
    chosen = np.sort(piv[:rank])
    chosen = chosen[chosen > 0] - 1  # drop the intercept
    return ok[chosen]


def joint_design_matrix(coders: list[_Coder], frame: pd.DataFrame,
                        interactions: bool = True) -> tuple[np.ndarray, list[str]]:
    """Main-effect columns of every variable and (``interactions``) the products of every
    pair of columns of DIFFERENT variables, with their names. Products are of the raw
    columns: :func:`surveysynth.synthetic_utility.pmse` standardises each column of the
    pooled data, which spans the same space as products of standardised columns."""
    blocks = [c.matrix(frame[c.name]) for c in coders]
    names = [n for c in coders for n in c.columns]
    owner = np.concatenate([np.full(b.shape[1], i) for i, b in enumerate(blocks)])
    X = np.column_stack(blocks)
    if not interactions:
        return X, names
    a, b = np.triu_indices(X.shape[1], k=1)
    cross = owner[a] != owner[b]
    a, b = a[cross], b[cross]
    return (np.column_stack([X, X[:, a] * X[:, b]]),
            names + [f"{names[i]} x {names[j]}" for i, j in zip(a, b, strict=True)])


def _pmse_null(X_o: np.ndarray, X_s: np.ndarray) -> dict[str, float]:
    """pMSE of one synthetic set (logistic propensity model on the independent columns of
    the pooled matrix) with its null expectation (k - 1)(1 - c)^2 c / N (Snoke et al. 2018,
    k parameters including the intercept, N pooled records, c = n_syn / N)."""
    keep = _independent_columns(np.vstack([X_o, X_s]))
    N = X_o.shape[0] + X_s.shape[0]
    c = X_s.shape[0] / N
    k = keep.size + 1
    null = (k - 1) * (1 - c) ** 2 * c / N
    if keep.size == 0:  # nothing varies: the propensity is c for every record
        return {"pMSE": 0.0, "k": 1.0, "null": 0.0, "ratio": float("nan"), "converged": True}
    res = pmse(X_o[:, keep], X_s[:, keep], interactions=False)
    return {"pMSE": res["pMSE"], "k": float(k), "null": null, "ratio": res["pMSE"] / null,
            "converged": res["converged"]}


def k_marginal_codes(codes_o: np.ndarray, codes_s: np.ndarray, n_bins: np.ndarray,
                     k: int) -> float:
    """k-marginal score (Task et al. 2021) of pre-binned records: 1000 (2 - TD) / 2 averaged
    over the k-subsets of variables, TD the total absolute difference of the cell shares. On
    numeric columns cut as :func:`~surveysynth.synthetic_utility.k_marginal_score` cuts them
    it is that function's score; here categorical variables get one bin per level."""
    from itertools import combinations

    per = []
    for sub in combinations(range(codes_o.shape[1]), k):
        sub = list(sub)
        radix = np.concatenate([[1], np.cumprod(n_bins[sub][:-1])]).astype(np.int64)
        size = int(np.prod(n_bins[sub]))
        fo = np.bincount(codes_o[:, sub] @ radix, minlength=size) / codes_o.shape[0]
        fs = np.bincount(codes_s[:, sub] @ radix, minlength=size) / codes_s.shape[0]
        per.append(1000.0 * (2.0 - np.abs(fo - fs).sum()) / 2.0)
    return float(np.mean(per))


def _overlap(lo_c, hi_c, lo_s, hi_s) -> np.ndarray:
    """Karr et al. CI overlap (:func:`surveysynth.synthetic_utility.ci_overlap`: negative =
    the gap of disjoint intervals); NaN where an interval has no width or is missing."""
    arrs = [np.asarray(a, dtype=float) for a in (lo_c, hi_c, lo_s, hi_s)]
    ok = np.all([np.isfinite(a) for a in arrs], axis=0) & (arrs[1] > arrs[0]) & (
        arrs[3] > arrs[2])
    out = np.full(arrs[0].shape, np.nan)
    if ok.any():
        out[ok] = ci_overlap(*(a[ok] for a in arrs))
    return out


def estimate_overlap(design: Any, release: Any, coders: list[_Coder],
                     level: float = 0.95) -> pd.DataFrame:
    """Per synthesized variable: the confidential design's mean (numeric) or level
    proportions (categorical) against the release's combined estimate (its own rule), with
    both CIs and their overlap. Missing values are left out of both (``na_rm``)."""
    rows = []
    for c in coders:
        stat = "proportion" if c.categorical else "mean"
        conf = getattr(design, stat)(c.name, na_rm=True)
        syn = getattr(release, stat)(c.name, na_rm=True, level=level)
        for f in (conf, syn):
            f["_key"] = _level_strings(f["level"]) if c.categorical else ""
        mg = conf.merge(syn, on="_key", how="outer", suffixes=("_c", "_s"))
        mg = mg.sort_values("_key", key=lambda s: s.map(
            {lv: i for i, lv in enumerate(getattr(c, "levels", [""]))}).fillna(1e9))
        rows.append(pd.DataFrame({
            "variable": c.name, "statistic": stat,
            "level": mg["_key"].to_numpy(object),
            "confidential": mg["estimate_c"].to_numpy(float),
            "conf_se": mg["se_c"].to_numpy(float),
            "conf_ci_low": mg["ci_low_c"].to_numpy(float),
            "conf_ci_high": mg["ci_high_c"].to_numpy(float),
            "release": mg["estimate_s"].to_numpy(float),
            "rel_se": mg["se_s"].to_numpy(float),
            "rel_ci_low": mg["ci_low_s"].to_numpy(float),
            "rel_ci_high": mg["ci_high_s"].to_numpy(float),
        }))
    out = pd.concat(rows, ignore_index=True)
    out["overlap"] = _overlap(out["conf_ci_low"], out["conf_ci_high"], out["rel_ci_low"],
                              out["rel_ci_high"])
    return out


def regression_overlap(design: Any, release: Any, formula: str,
                       family: str = "gaussian") -> pd.DataFrame:
    """One user-listed regression: the confidential svyglm
    (:func:`surveysynth.analysis.svyglm`, t intervals on its residual df) against the
    release's combined coefficients (:meth:`SyntheticRelease.glm`, the release's rule), per
    term with the standardised difference (release - confidential) / SE_confidential and the
    CI overlap."""
    from .analysis import svyglm

    conf = svyglm(formula, design, family=family).coef_table()
    syn = release.glm(formula, family=family).set_index("term")
    terms = list(conf.index)
    extra = [t for t in syn.index if t not in terms]
    if extra:
        raise ValueError(f"the release gives terms {extra[:5]} that the confidential fit "
                         "does not (a level absent from the confidential data).")
    s = syn.reindex(terms)
    out = pd.DataFrame({
        "term": terms, "confidential": conf["estimate"].to_numpy(float),
        "conf_se": conf["se"].to_numpy(float),
        "conf_ci_low": conf["lower"].to_numpy(float), "conf_ci_high": conf["upper"].to_numpy(float),
        "release": s["estimate"].to_numpy(float), "rel_se": s["se"].to_numpy(float),
        "rel_ci_low": s["ci_low"].to_numpy(float), "rel_ci_high": s["ci_high"].to_numpy(float),
    })
    out["std_diff"] = (out["release"] - out["confidential"]) / out["conf_se"]
    out["overlap"] = _overlap(out["conf_ci_low"], out["conf_ci_high"], out["rel_ci_low"],
                              out["rel_ci_high"])
    return out


def joint_utility(design: Any, release: Any, synthesized: list[str],
                  types: dict[str, str] | None = None, context: list[str] | None = None,
                  regressions: list[dict] | None = None) -> dict[str, Any]:
    """The numbers of :func:`joint_utility_section` (confidential): a dict of DataFrames.

    ``synthesized``: the variables the synthesizer modelled; ``context``: variables released
    as collected that enter the joint measures with them (a partial synthesis's predictors);
    ``types``: declared types (sequential: ``binary``/``categorical``/``ordinal`` are coded
    as categories, other types as numbers; undeclared: non-numeric columns are categories);
    ``regressions``: ``{"name", "formula", "family"}`` dicts.

    Keys: ``pmse`` (per synthetic set: pMSE with all pairwise interactions, parameters k,
    null expectation, ratio, converged), ``kmarginal`` (k, score, per set), ``estimates``
    (:func:`estimate_overlap`), ``variables`` (per synthesized variable: coding, pMSE with
    its main effects alone, 1-marginal score, mean and min CI overlap), ``regressions``
    (name -> :func:`regression_overlap` frame, or the error text), ``coders``."""
    types = dict(types or {})
    context = [c for c in (context or []) if c not in synthesized]
    names = list(dict.fromkeys([*synthesized, *context]))
    cols = set(release.columns)
    absent = [v for v in names if v not in cols or v not in design.data.columns]
    if absent:
        raise ValueError(f"joint utility: variables {absent} are not in both the confidential "
                         "data and the release. Fix: list released variables only.")
    conf = design.data
    frames = [d.data for d in release.designs]
    coders = [_Coder(v, conf[v], [f[v] for f in frames], _is_categorical(conf[v], types.get(v)))
              for v in names]
    X_o, _ = joint_design_matrix(coders, conf, interactions=len(coders) > 1)
    per_set = []
    for i, f in enumerate(frames):
        X_s, _ = joint_design_matrix(coders, f, interactions=len(coders) > 1)
        per_set.append({"set": i + 1, "n_synthetic": X_s.shape[0], **_pmse_null(X_o, X_s)})
    pm = pd.DataFrame(per_set)
    pm["k"] = pm["k"].astype(int)
    n_bins = np.array([c.n_bins for c in coders])
    B_o = np.column_stack([c.bins(conf[c.name]) for c in coders])
    B_s = [np.column_stack([c.bins(f[c.name]) for c in coders]) for f in frames]
    km = []
    for k in range(2, min(3, len(coders)) + 1):
        each = [k_marginal_codes(B_o, b, n_bins, k) for b in B_s]
        km.append({"k": k, "subsets": int(round(_comb(len(coders), k))),
                   "score": float(np.mean(each)), "min_over_sets": float(np.min(each)),
                   "max_over_sets": float(np.max(each))})
    kmarg = pd.DataFrame(km, columns=["k", "subsets", "score", "min_over_sets", "max_over_sets"])
    syn_coders = [c for c in coders if c.name in synthesized]
    est = estimate_overlap(design, release, syn_coders)
    var_rows = []
    for j, c in enumerate(coders):
        if c.name not in synthesized:
            continue
        X1 = c.matrix(conf[c.name])
        p1 = [_pmse_null(X1, c.matrix(f[c.name])) for f in frames]
        k1 = [k_marginal_codes(B_o[:, [j]], b[:, [j]], n_bins[[j]], 1) for b in B_s]
        ov = est.loc[est["variable"] == c.name, "overlap"].to_numpy(float)
        var_rows.append({"variable": c.name,
                         "type": types.get(c.name, "categorical" if c.categorical else "numeric"),
                         "coding": c.coding(),
                         "pMSE_main": float(np.mean([p["pMSE"] for p in p1])),
                         "pMSE_ratio": float(np.mean([p["ratio"] for p in p1])),
                         "one_marginal": float(np.mean(k1)),
                         "mean_overlap": float(np.nanmean(ov)) if np.isfinite(ov).any() else np.nan,
                         "min_overlap": float(np.nanmin(ov)) if np.isfinite(ov).any() else np.nan})
    regs: dict[str, Any] = {}
    for i, r in enumerate(regressions or []):
        name = str(r.get("name") or f"regression_{i + 1}")
        try:
            regs[name] = regression_overlap(design, release, r["formula"],
                                            r.get("family", "gaussian"))
        except ValueError as exc:  # reported in the section, never a failed release
            regs[name] = f"{r['formula']}: could not be compared: {exc}"
    return {"pmse": pm, "kmarginal": kmarg, "estimates": est, "variables": pd.DataFrame(var_rows),
            "regressions": regs, "coders": coders, "context": context,
            "synthesized": list(synthesized)}


def _comb(n: int, k: int) -> float:
    from math import comb

    return float(comb(n, k))


#: a regression coefficient of the release more than this many confidential standard errors
#: from the confidential one is flagged and listed among the report's warnings. Under a
#: synthesis that preserves the model the standardised difference is roughly standard normal
#: (wider with the between-set variance), so 3 is seldom passed by chance over a few terms,
#: while a coefficient the synthesis has lost (issue 37: -37.8) is far beyond it
STD_DIFF_FLAG = 3.0
