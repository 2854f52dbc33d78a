"""The K-norm gradient mechanism (KNG) for one regression quantile: its density and parts.

For a quantile level tau, predictors X (n x p, first column the intercept) and response y, the
check-loss gradient is

    G(beta) = sum_i x_i (1{y_i <= x_i' beta} - tau)                    (O(n p) to evaluate)

and KNG (Reimherr & Awan; seed 004, METHODS.md section 12) samples beta from

    f(beta) ∝ exp(-epsilon ||G(beta)||_inf / (2 Delta_tau) - c ||beta||^2),   c = 1e-5,

restricted to the coefficients that satisfy the public constraints (bounds lb <= z'beta <= ub and
non-crossing with already released neighbouring quantiles, both checked on a set of *synthetic*
predictor rows z, never on the confidential ones).

This module holds what both samplers share (:mod:`.mcmc`, :mod:`.exact`): the density, the
gradient, the sensitivity, predictor clipping, input checks and the feasible intercept interval,
and the non-private quantile regression baseline.

Decisions (METHODS.md section 12):

* Sensitivity. Predictors are clipped elementwise to [-C_X, C_X] (intercept column included, so
  C_X >= 1 is required). Replacing one record changes G by at most 2 max(tau, 1 - tau) C_X in the
  sup norm, the default ``sensitivity="sound"``. ``sensitivity="paper"`` uses 2 (1 - tau) C_X as
  seed 004 (eq. 4) does, which understates the sensitivity for tau > 0.5; it exists only to
  reproduce the paper. (The paper clips only from above; for the non-negative predictors of its
  examples the two clippings agree.)
* Norm. The sup norm, as in the authors' code; the paper does not name the norm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "PENALTY_C",
    "check_loss",
    "clip_predictors",
    "kng_sensitivity",
    "quantile_gradient",
    "kng_log_density",
    "exact_quantile_regression",
    "KNGResult",
]

PENALTY_C = 1e-5


def check_loss(u: Any, tau: float) -> np.ndarray:
    """Koenker-Bassett check loss rho_tau(u) = u (tau - 1{u <= 0}), elementwise."""
    u = np.asarray(u, dtype=np.float64)
    return u * (tau - (u <= 0))


def _check_tau(tau: float) -> float:
    tau = float(tau)
    if not 0.0 < tau < 1.0:
        raise ValueError(f"tau must lie strictly between 0 and 1; got {tau}.")
    return tau


def _check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    try:
        epsilon = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number; got {epsilon!r}.") from None
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"{name} must be positive and finite; got {epsilon}. Pass e.g. {name}=1.0.")
    return epsilon


def kng_sensitivity(tau: float, C_X: float, sensitivity: str = "sound") -> float:
    """Sup-norm sensitivity Delta_tau of the quantile-regression gradient.

    ``"sound"``: 2 max(tau, 1 - tau) C_X (valid for every tau). ``"paper"``: 2 (1 - tau) C_X,
    seed 004's value, understated for tau > 0.5 (METHODS.md section 12, Decision).
    """
    tau = _check_tau(tau)
    C_X = float(C_X)
    if not (C_X > 0 and math.isfinite(C_X)):
        raise ValueError(f"C_X must be positive and finite; got {C_X}.")
    if sensitivity == "sound":
        return 2.0 * max(tau, 1.0 - tau) * C_X
    if sensitivity == "paper":
        return 2.0 * (1.0 - tau) * C_X
    raise ValueError(f"sensitivity must be 'sound' or 'paper'; got {sensitivity!r}.")


def clip_predictors(X: Any, C_X: float, intercept: bool = True) -> np.ndarray:
    """Return a clipped copy of X with every entry in [-C_X, C_X].

    The intercept column (the first, if ``intercept``) is part of the bound, so C_X must be at
    least 1 when there is an intercept; otherwise clipping would rescale the intercept.
    """
    X = np.array(X, dtype=np.float64, copy=True)
    if X.ndim == 1:
        X = X[:, None]
    C_X = float(C_X)
    if not (C_X > 0 and math.isfinite(C_X)):
        raise ValueError(f"C_X must be positive and finite; got {C_X}.")
    if intercept and C_X < 1:
        raise ValueError(
            f"C_X = {C_X} < 1 would clip the intercept column (all ones); the bound covers the "
            "intercept, so pass C_X >= 1."
        )
    np.clip(X, -C_X, C_X, out=X)
    return X


def quantile_gradient(beta: Any, X: Any, y: Any, tau: float) -> np.ndarray:
    """G(beta) = sum_i x_i (1{y_i <= x_i'beta} - tau); ``beta`` of shape (p,) or (k, p).

    Returns shape (p,) or (k, p). Vectorized: O(n p k).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    single = b.ndim == 1
    B = b[None, :] if single else b
    ind = (y[:, None] <= X @ B.T).astype(np.float64)  # n x k
    G = (X.T @ (ind - tau)).T
    return G[0] if single else G


def kng_log_density(
    beta: Any,
    X: Any,
    y: Any,
    tau: float,
    epsilon: float,
    C_X: float,
    sensitivity: str = "sound",
    c: float = PENALTY_C,
    clip: bool = True,
) -> np.ndarray | float:
    """Unnormalised KNG log density -eps ||G(beta)||_inf / (2 Delta_tau) - c ||beta||^2.

    ``X`` includes the intercept column; it is clipped to [-C_X, C_X] first unless
    ``clip=False``. ``beta`` may be (p,) or (k, p) (then k values are returned).
    """
    tau = _check_tau(tau)
    epsilon = _check_epsilon(epsilon)
    delta = kng_sensitivity(tau, C_X, sensitivity)
    Xc = clip_predictors(X, C_X) if clip else np.asarray(X, dtype=np.float64)
    G = quantile_gradient(beta, Xc, y, tau)
    b = np.asarray(beta, dtype=np.float64)
    out = -epsilon * np.max(np.abs(G), axis=-1) / (2.0 * delta) - c * np.sum(b * b, axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def exact_quantile_regression(X: Any, y: Any, tau: float) -> np.ndarray:
    """Non-private quantile regression coefficients by linear programming (HiGHS).

    Solves Koenker's dual  max y'a  s.t.  X'a = (1 - tau) X'1,  0 <= a <= 1  (p equality
    constraints, fast for large n); the coefficients are minus the equality duals. Used for the
    non-private baseline and the optional paper-style start of the median chain.
    """
    from scipy.optimize import linprog

    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    y = np.asarray(y, dtype=np.float64)
    if X.shape[1] == 1 and np.all(X[:, 0] == 1.0):
        # intercept only: the lower tau sample quantile minimises the check loss
        return np.array([np.quantile(y, tau, method="inverted_cdf")])
    res = linprog(-y, A_eq=X.T, b_eq=(1.0 - tau) * X.sum(axis=0), bounds=(0, 1), method="highs")
    if not res.success:
        raise RuntimeError(f"quantile regression LP failed at tau={tau}: {res.message}")
    return -np.asarray(res.eqlin.marginals, dtype=np.float64)


@dataclass
class KNGResult:
    """Output of :func:`kng_sample` (the last state ``beta`` and chain diagnostics) or of
    :func:`kng_sample_intercept_exact` (``sampler="exact"``: no chain, NaN diagnostics).

    Diagnostics (acceptance rate, chain) are computed from confidential data: keep them with the
    curator, never in a release.
    """

    beta: np.ndarray
    accept_rate: float
    n_iter: int
    epsilon: float
    sensitivity_value: float
    final_scale: float
    chain: np.ndarray | None = None
    log_density: np.ndarray | None = field(default=None, repr=False)
    sampler: str = "mcmc"


def _constraint_rows(check_X: Any, p: int) -> np.ndarray:
    Z = np.asarray(check_X, dtype=np.float64)
    if Z.ndim == 1:
        Z = Z[:, None]
    if Z.shape[1] != p:
        raise ValueError(
            f"check_X has {Z.shape[1]} columns but the model has {p} coefficients; pass the "
            "synthetic predictor rows with the intercept column first."
        )
    if not np.isfinite(Z).all():
        raise ValueError("check_X contains non-finite values.")
    return Z


def _kng_inputs(X, y, tau, C_X, sensitivity, lower, upper, check_X, lb, ub):
    """Checked inputs shared by :func:`kng_sample` and :func:`kng_intercept_pieces`.

    Returns the clipped predictors Xc, y as floats, the sensitivity Delta, the constraint rows Z
    (the synthetic predictor rows; one intercept row for an intercept-only model) and the
    neighbouring-quantile bounds Z lower, Z upper on them (-inf / inf where absent).
    """
    if not lb < ub:
        raise ValueError(f"need lb < ub; got lb={lb}, ub={ub}.")
    Xc = clip_predictors(X, C_X)
    n, p = Xc.shape
    y = np.asarray(y, dtype=np.float64).ravel()
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} values but X has {n} rows.")
    if not (np.isfinite(y).all() and np.isfinite(Xc).all()):
        bad = np.flatnonzero(~(np.isfinite(y) & np.isfinite(Xc).all(axis=1)))[:5].tolist()
        raise ValueError(f"X or y has missing/non-finite values in rows {bad}; remove them first.")
    delta = kng_sensitivity(tau, C_X, sensitivity)
    constrained = lower is not None or upper is not None or np.isfinite(lb) or np.isfinite(ub)
    if check_X is None:
        if p == 1:
            Z = np.ones((1, 1))
        elif constrained:
            raise ValueError(
                "check_X is required when bounds or neighbouring quantiles are given and the model "
                "has predictors: pass the synthetic (public) predictor rows to check them on."
            )
        else:
            Z = np.empty((0, p))
    else:
        Z = _constraint_rows(check_X, p)
    for name, nb in (("lower", lower), ("upper", upper)):
        if nb is not None and np.asarray(nb, float).ravel().shape[0] != p:
            raise ValueError(f"{name} must have {p} coefficients (intercept first).")
    zlow = np.full(Z.shape[0], -np.inf) if lower is None else Z @ np.asarray(lower, float).ravel()
    zup = np.full(Z.shape[0], np.inf) if upper is None else Z @ np.asarray(upper, float).ravel()
    return Xc, y, delta, Z, zlow, zup



def _intercept_interval(zint, zs, zlow, zup, lb, ub):
    """Feasible intercepts b for constraints on rows z = (zint, zs): an interval."""
    b_lo, b_hi = -np.inf, np.inf
    if zint.size:
        if not np.all(zint > 0):
            raise ValueError("check_X must have a positive intercept column (first column).")
        # bounds: lb <= zint b + zs <= ub
        if np.isfinite(lb):
            b_lo = max(b_lo, float(np.max((lb - zs) / zint)))
        if np.isfinite(ub):
            b_hi = min(b_hi, float(np.min((ub - zs) / zint)))
        if np.isfinite(zlow).any():
            v = float(np.max((zlow - zs) / zint))
            b_lo = max(b_lo, v)
        if np.isfinite(zup).any():
            v = float(np.min((zup - zs) / zint))
            b_hi = min(b_hi, v)
    # identical neighbours (lower == upper) leave one point, but (z'beta - zs) / zint can round
    # the two ends apart by a few ulps: treat a gap below 1e-9 (relative) as that single point
    if b_lo > b_hi and b_lo - b_hi <= 1e-9 * max(1.0, abs(b_lo), abs(b_hi)):
        b_lo = b_hi = 0.5 * (b_lo + b_hi)
    return b_lo, b_hi

