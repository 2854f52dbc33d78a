"""K-norm gradient mechanism (KNG) for one regression quantile (METHODS.md section 12, seed 004).

For a quantile level tau, predictors X (n x p, first column the intercept) and response y, the
check-loss gradient is

    G(beta) = sum_i x_i (1{y_i <= x_i' beta} - tau)                    (O(n p) to evaluate)

and KNG samples beta from

    f(beta) ∝ exp(-epsilon ||G(beta)||_inf / (2 Delta_tau) - c ||beta||^2),   c = 1e-5,

restricted to the coefficients that satisfy the public constraints (bounds lb <= z'beta <= ub and
non-crossing with already released neighbouring quantiles, both checked on a set of *synthetic*
predictor rows z, never on the confidential ones).

Decisions (METHODS.md section 12):

* Sensitivity. Predictors are clipped elementwise to [-C_X, C_X] (intercept column included, so
  C_X >= 1 is required). Replacing one record changes G by at most 2 max(tau, 1 - tau) C_X in the
  sup norm, the default ``sensitivity="sound"``. ``sensitivity="paper"`` uses 2 (1 - tau) C_X as
  seed 004 (eq. 4) does, which understates the sensitivity for tau > 0.5; it exists only to
  reproduce the paper. (The paper clips only from above; for the non-negative predictors of its
  examples the two clippings agree.)
* Norm. The sup norm, as in the authors' code; the paper does not name the norm.
* Initial state. Data-independent by default: intercept clip(0, lb, ub) and zero slopes (or a
  caller-supplied, already private, state such as a neighbouring released quantile). The paper
  starts the median at the non-private estimate, which leaks information through a finite chain;
  pass that estimate as ``init`` only to reproduce it.
* Sampler. Random-walk Metropolis on all moving coefficients jointly (only the intercept when
  slopes are fixed), Gaussian proposals whose covariance is adapted from the second half of the
  chain so far (every 25 iterations) times a scale tuned by Robbins-Monro towards an acceptance
  rate of 0.44 (one moving coefficient) or 0.3; adaptation diminishes (step size t^-0.6), so the
  chain stays ergodic (Roberts & Rosenthal 2007). Proposals violating a constraint are rejected
  inside the step; an infeasible starting point has density zero, so the first feasible proposal
  is accepted. The last state is returned (as in seed 004); the chain is never run to verified
  convergence, so the pure epsilon-DP guarantee holds only to the extent the chain has mixed.
* Speed. With only the intercept moving (fixed slopes, or an intercept-only model), the residuals
  r_i = y_i - x_i,slopes' beta_slopes are sorted once and cumulative sums of the rows of X in that
  order give G(b) for any intercept b by one binary search: O(log n + p) per step. Otherwise each
  step costs O(n p) (one product X beta and one product X' 1{.}).
* Exact sampling. When only the intercept moves the density is one-dimensional and piecewise
  (constant x Gaussian kernel) between the sorted residuals, so :func:`kng_sample_intercept_exact`
  draws from it exactly (piece by its mass, then a truncated normal inside the piece; no MCMC, no
  convergence caveat). The pieces (:func:`kng_intercept_pieces`) also give exact probabilities,
  e.g. of the mass above max(y). See docs/kng.md, "Exact sampling when only the intercept moves".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

__all__ = [
    "check_loss",
    "clip_predictors",
    "kng_sensitivity",
    "quantile_gradient",
    "kng_log_density",
    "kng_sample",
    "KNGResult",
    "exact_quantile_regression",
    "kng_sample_intercept_exact",
    "kng_intercept_pieces",
    "kng_intercept_draws",
    "InterceptPieces",
]

PENALTY_C = 1e-5


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


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


def kng_sample(
    X: Any,
    y: Any,
    tau: float,
    epsilon: float,
    C_X: float,
    *,
    sensitivity: str = "sound",
    n_iter: int = 1000,
    init: Any = None,
    slopes: str = "varying",
    lower: Any = None,
    upper: Any = None,
    check_X: Any = None,
    lb: float = -np.inf,
    ub: float = np.inf,
    step: Any = None,
    proposal_rows: Any = None,
    adapt: bool = True,
    c: float = PENALTY_C,
    seed: int | np.random.Generator | None = None,
    return_chain: bool = False,
    progress: bool = False,
) -> KNGResult:
    """Draw one KNG release of the tau-quantile regression coefficients by adaptive MCMC.

    Parameters
    ----------
    X : (n, p) predictors with the intercept column first (confidential; clipped to C_X here).
    y : (n,) response (confidential).
    tau, epsilon : quantile level and the epsilon spent on this quantile.
    C_X : public bound on |x_ij| (clipping and sensitivity).
    sensitivity : "sound" (default) or "paper", see :func:`kng_sensitivity`.
    n_iter : Metropolis iterations (seed 004 uses 1,000 per quantile).
    init : starting coefficients (must be data independent or already private); default
        intercept clip(0, lb, ub) and zero slopes.
    slopes : "varying" (all coefficients move) or "fixed" (only the intercept moves; the slopes
        stay at ``init``'s values).
    lower, upper : coefficients of already released neighbouring quantiles; the sample must give
        predictions >= (<=) theirs on every row of ``check_X`` (non-crossing; ties are allowed,
        so a quantile may coincide with its neighbour where the bounds leave no room).
    check_X : (m, p) public/synthetic predictor rows (intercept first) on which the constraints
        lb <= z'beta <= ub and non-crossing are enforced. Required whenever a constraint is
        given and p > 1 (for p = 1 the single row [1] is used). Never pass confidential rows:
        the constraint set must not depend on the data for the DP guarantee.
    lb, ub : bounds on the predictions.
    step : initial proposal scale in units of the response: a scalar; default (ub - lb)/100 if
        both bounds are finite else 1. Data independent.
    proposal_rows : public (synthetic) predictor rows, intercept first, used to shape the initial
        proposal: covariance step^2 (Z'Z/m)^-1, i.e. proposals move the predictions by about
        ``step`` whatever the scale of the predictors. Default ``check_X`` when it has full column
        rank, else a diagonal step^2 / C_X^2 for slopes. The chain then adapts its own covariance.
    adapt : adapt the proposal (default). ``adapt=False`` keeps the initial proposal fixed, as
        the authors' code effectively does (its acceptance window 0..1 never triggers); with a
        small ``step`` this reproduces their slowly moving chains (paper reproduction only).
    seed : int or numpy Generator.
    """
    tau = _check_tau(tau)
    epsilon = _check_epsilon(epsilon)
    n_iter = int(n_iter)
    if n_iter < 1:
        raise ValueError(f"n_iter must be a positive integer; got {n_iter}.")
    if slopes not in ("fixed", "varying"):
        raise ValueError(f"slopes must be 'fixed' or 'varying'; got {slopes!r}.")
    lb, ub = float(lb), float(ub)
    rng = _rng(seed)
    Xc, y, delta, Z, zlow, zup = _kng_inputs(X, y, tau, C_X, sensitivity, lower, upper,
                                             check_X, lb, ub)
    n, p = Xc.shape
    kappa = epsilon / (2.0 * delta)
    sumX = Xc.sum(axis=0)

    if init is None:
        beta0 = np.zeros(p)
        beta0[0] = min(max(0.0, lb), ub)
    else:
        beta0 = np.asarray(init, dtype=np.float64).ravel().copy()
        if beta0.shape[0] != p:
            raise ValueError(f"init has {beta0.shape[0]} values; the model has {p} coefficients.")

    base = (ub - lb) / 100.0 if np.isfinite(lb) and np.isfinite(ub) else 1.0
    if step is not None:
        base = float(step)
        if not (base > 0 and math.isfinite(base)):
            raise ValueError(f"step must be a positive number; got {step!r}.")
    chol0 = np.diag(np.r_[base, np.full(p - 1, base / float(C_X))])
    rows = proposal_rows if proposal_rows is not None else (Z if Z.shape[0] >= p else None)
    if rows is not None and p > 1:
        R = _constraint_rows(rows, p)
        gram = R.T @ R / R.shape[0]
        try:
            if np.linalg.matrix_rank(gram) == p:
                chol0 = np.linalg.cholesky(np.linalg.inv(gram)) * base
        except np.linalg.LinAlgError:
            pass

    one_dim = slopes == "fixed" or p == 1
    if one_dim:
        slope_part = beta0[1:].copy()
        # G(b) from sorted residuals: r_i <= b  <=>  y_i <= x_i'beta
        resid = y - Xc[:, 1:] @ slope_part
        order = np.argsort(resid, kind="stable")
        r_sorted = resid[order]
        cum = np.vstack([np.zeros((1, p)), np.cumsum(Xc[order], axis=0)])  # (n+1, p)
        tau_sum = tau * sumX
        zs = Z[:, 1:] @ slope_part
        zint = Z[:, 0]
        # feasible intercepts: an interval [b_lo, b_hi] (strict at neighbours)
        b_lo, b_hi = _intercept_interval(zint, zs, zlow, zup, lb, ub)
        pen_slopes = float(slope_part @ slope_part)

        def logf(theta: np.ndarray) -> float:
            b = theta[0]
            if b < b_lo or b > b_hi:
                return -np.inf
            k = np.searchsorted(r_sorted, b, side="right")
            g = cum[k] - tau_sum
            return -kappa * np.max(np.abs(g)) - c * (b * b + pen_slopes)

        if b_lo > b_hi:
            raise ValueError(
                f"tau={tau}: no intercept satisfies the bounds [{lb}, {ub}] and the neighbouring "
                "quantiles on the synthetic predictor rows; widen the bounds."
            )
        b0 = beta0[0]
        step1 = base
        if np.isfinite(b_lo) and np.isfinite(b_hi) and b_hi > b_lo:
            step1 = min(base, (b_hi - b_lo) / 2)
        if not (b_lo <= b0 <= b_hi):  # start inside the feasible interval (public info)
            if np.isfinite(b_lo) and np.isfinite(b_hi):
                b0 = 0.5 * (b_lo + b_hi)
            elif b0 <= b_lo:
                b0 = b_lo + step1
            else:
                b0 = b_hi - step1
        theta0 = np.array([b0])
        chol_init = np.array([[step1]])
    else:
        XT = np.ascontiguousarray(Xc.T)
        tau_sum = tau * sumX
        has_z = Z.shape[0] > 0
        low_any = lower is not None
        up_any = upper is not None

        def logf(theta: np.ndarray) -> float:
            if has_z:
                zb = Z @ theta
                if (zb < lb).any() or (zb > ub).any():
                    return -np.inf
                if low_any and (zb < zlow).any():
                    return -np.inf
                if up_any and (zb > zup).any():
                    return -np.inf
            ind = y <= Xc @ theta
            g = XT @ ind - tau_sum
            return -kappa * np.max(np.abs(g)) - c * float(theta @ theta)

        theta0 = beta0.copy()
        if has_z:
            zb0 = Z @ theta0
            if (zb0 < lb).any() or (zb0 > ub).any() or (zb0 < zlow).any() or (zb0 > zup).any():
                theta0 = _feasible_point(Z, np.maximum(lb, zlow), np.minimum(ub, zup), base, tau)
        chol_init = chol0

    chain, accept_rate, scale, logd = _adaptive_metropolis(
        logf, theta0, chol_init, n_iter, rng, adapt=adapt, progress=progress, desc=f"KNG tau={tau:.2f}"
    )
    last = chain[-1]
    if logd[-1] == -np.inf:
        raise RuntimeError(
            f"tau={tau}: the chain never reached a state satisfying the constraints in {n_iter} "
            "iterations; increase n_iter or step."
        )
    if one_dim:
        beta = np.concatenate([last[:1], slope_part])
        full_chain = np.column_stack([chain, np.tile(slope_part, (chain.shape[0], 1))])
    else:
        beta = last.copy()
        full_chain = chain
    return KNGResult(
        beta=beta,
        accept_rate=accept_rate,
        n_iter=n_iter,
        epsilon=epsilon,
        sensitivity_value=delta,
        final_scale=scale,
        chain=full_chain if return_chain else None,
        log_density=logd if return_chain else None,
    )


def _feasible_point(Z, L, U, cap, tau):
    """A data-independent start satisfying L <= Z beta <= U with the largest margin (<= cap).

    Linear program in (beta, t): maximise t s.t. Z beta - t >= L, Z beta + t <= U, t <= cap.
    Uses only public constraint rows and released neighbours, so it costs no privacy.
    """
    from scipy.optimize import linprog

    m, p = Z.shape
    rows, rhs = [], []
    fin_l, fin_u = np.isfinite(L), np.isfinite(U)
    if fin_l.any():
        rows.append(np.column_stack([-Z[fin_l], np.ones(fin_l.sum())]))
        rhs.append(-L[fin_l])
    if fin_u.any():
        rows.append(np.column_stack([Z[fin_u], np.ones(fin_u.sum())]))
        rhs.append(U[fin_u])
    res = linprog(
        np.r_[np.zeros(p), -1.0],
        A_ub=np.vstack(rows),
        b_ub=np.concatenate(rhs),
        bounds=[(None, None)] * p + [(None, cap)],
        method="highs",
    )
    if not res.success or res.x[-1] <= 0:
        raise ValueError(
            f"tau={tau}: no coefficients satisfy the bounds and non-crossing constraints on the "
            "synthetic predictor rows (the feasible set is empty); widen the bounds."
        )
    return res.x[:p]


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


def _adaptive_metropolis(logf, theta0, chol_init, n_iter, rng, adapt=True, progress=False, desc="KNG"):
    """Random-walk Metropolis with adapted covariance and Robbins-Monro scale; see module doc."""
    d = theta0.shape[0]
    target = 0.44 if d == 1 else 0.3
    chain = np.empty((n_iter + 1, d))
    logd = np.empty(n_iter + 1)
    chain[0] = theta0
    cur = theta0.copy()
    cur_lp = logf(cur)
    logd[0] = cur_lp
    log_scale = 0.0
    chol = np.array(chol_init, dtype=np.float64)
    jitter = np.diag(chol @ chol.T)
    z = rng.standard_normal((n_iter, d))
    logu = np.log(rng.random(n_iter))
    accepted = 0
    recompute_every = 25
    opt_factor = 2.38 / math.sqrt(d)
    it = range(1, n_iter + 1)
    bar = tqdm(it, desc=desc, disable=not progress, leave=False)
    for t in bar:
        prop = cur + math.exp(log_scale) * (chol @ z[t - 1])
        lp = logf(prop)
        if lp == -np.inf:
            alpha = 0.0
        elif cur_lp == -np.inf:
            alpha = 1.0
        else:
            alpha = 1.0 if lp >= cur_lp else math.exp(lp - cur_lp)
        if alpha > 0.0 and (alpha >= 1.0 or logu[t - 1] < lp - cur_lp):
            cur, cur_lp = prop, lp
            accepted += 1
        chain[t] = cur
        logd[t] = cur_lp
        if not adapt:
            continue
        log_scale += min(1.0, 3.0 * t**-0.6) * (alpha - target)
        if t % recompute_every == 0 and t >= 50:
            window = chain[t // 2 : t + 1]
            if d == 1:
                v = float(np.var(window))
                if v > 0:
                    chol = np.array([[opt_factor * math.sqrt(v)]])
                    log_scale = 0.0 if t == 50 else log_scale
            else:
                cov = np.cov(window, rowvar=False)
                cov = cov + np.diag(0.01 * np.diag(cov) + 1e-8 * jitter)
                try:
                    new = np.linalg.cholesky(cov) * opt_factor
                except np.linalg.LinAlgError:
                    new = None
                if new is not None and np.all(np.isfinite(new)) and np.trace(cov) > 0:
                    chol = new
                    log_scale = 0.0 if t == 50 else log_scale
    return chain, accepted / n_iter, math.exp(log_scale), logd


# ---------------------------------------------------------------------------------------------
# Exact sampling when only the intercept moves
# ---------------------------------------------------------------------------------------------
_SQRT2 = math.sqrt(2.0)
_NARROW = 0.01  # series regime: half-width h (standardized) with h * max(1, |midpoint|) < 0.01


def _series_rel(m: np.ndarray, h: np.ndarray) -> np.ndarray:
    """S(m, h) with  int_{m-h}^{m+h} exp(-z^2/2) dz = 2h exp(-m^2/2) (1 + S(m, h)).

    From exp(-m u - u^2/2) = sum_n He_n(-m) u^n / n! (probabilists' Hermite polynomials),
    integrated over [-h, h]: S = He_2 h^2/6 + He_4 h^4/120 + He_6 h^6/5040 + R. With
    M = max(1, |m|) and h M < 0.01, |He_n(m)| <= t_n M^n (t_n = number of involutions, t_8 = 764),
    so |R| <= 764 (h M)^8 / (9 8!) + ... < 3e-19: the truncation is far below double precision.
    """
    m2 = m * m
    h2 = h * h
    he2 = m2 - 1.0
    he4 = (m2 - 6.0) * m2 + 3.0
    he6 = ((m2 - 15.0) * m2 + 45.0) * m2 - 15.0
    return h2 * (he2 / 6.0 + h2 * (he4 / 120.0 + h2 * he6 / 5040.0))


def _log_gauss_mass(a: Any, b: Any) -> np.ndarray:
    """log of int_a^b exp(-z^2/2) dz for a <= b (may be infinite), stable in every regime.

    The interval is mirrored so that its midpoint m is >= 0 (the integrand is symmetric). Then

    * narrow (h = (b - a)/2 with h max(1, m) < 0.01): the Hermite series of :func:`_series_rel`
      (no cancellation; truncation error < 1e-18 relative);
    * a >= 0: upper tails through erfcx,  sqrt(pi/2) exp(-a^2/2) [erfcx(a/sqrt2) -
      erfcx(b/sqrt2) exp(-(b - a)(b + a)/2)]; outside the narrow regime the second term is at
      most ~0.99 of the first, so the difference loses < 2 digits (relative error ~1e-14);
    * a < 0 < b: sqrt(2 pi) (1 - Phi(-b) - Phi(a)), a value >= 0.008 outside the narrow regime.

    Returns -inf for empty intervals (a == b).
    """
    from scipy.special import erfcx, ndtr

    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    a = a.astype(np.float64, copy=True)
    b = b.astype(np.float64, copy=True)
    with np.errstate(invalid="ignore"):
        flip = (a + b) < 0  # midpoint negative (nan for (-inf, inf): no flip, straddle branch)
    a[flip], b[flip] = -b[flip], -a[flip]
    out = np.full(a.shape, -np.inf)
    pos = b > a
    with np.errstate(invalid="ignore", over="ignore"):
        h = 0.5 * (b - a)
        m = 0.5 * a + 0.5 * b
        narrow = pos & np.isfinite(h) & (h * np.maximum(1.0, np.abs(m)) < _NARROW)
        right = pos & ~narrow & (a >= 0)
        mid = pos & ~narrow & (a < 0)
    if narrow.any():
        hn, mn = h[narrow], m[narrow]
        out[narrow] = np.log(2.0 * hn) - 0.5 * mn * mn + np.log1p(_series_rel(mn, hn))
    if right.any():
        ar, br = a[right], b[right]
        with np.errstate(invalid="ignore", over="ignore"):
            tail = np.where(np.isfinite(br), erfcx(br / _SQRT2) * np.exp(-(br - ar) * (br + ar) / 2.0), 0.0)
        out[right] = 0.5 * math.log(math.pi / 2.0) - 0.5 * ar * ar + np.log(erfcx(ar / _SQRT2) - tail)
    if mid.any():
        out[mid] = 0.5 * math.log(2.0 * math.pi) + np.log1p(-(ndtr(-b[mid]) + ndtr(a[mid])))
    return out


def _truncnorm_ppf(a: Any, b: Any, u: Any) -> np.ndarray:
    """Inverse CDF of the standard normal truncated to [a, b] (a < b) at u in [0, 1).

    Same regimes as :func:`_log_gauss_mass`: narrow intervals by Newton's method on the series
    form (the CDF is within 1% of linear there; 6 steps reach machine precision), upper tails
    through log survival functions and ``ndtri_exp`` (no underflow far in the tail), intervals
    around 0 through Phi / ndtri from whichever side keeps the probability below 1/2.
    """
    from scipy.special import erfcx, ndtr, ndtri, ndtri_exp

    a, b, u = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, u)))
    a, b, u = a.copy(), b.copy(), u.copy()
    with np.errstate(invalid="ignore"):
        flip = (a + b) < 0
    a[flip], b[flip] = -b[flip], -a[flip]
    u[flip] = 1.0 - u[flip]
    z = np.empty(a.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        h = 0.5 * (b - a)
        m = 0.5 * a + 0.5 * b
        narrow = np.isfinite(h) & (h * np.maximum(1.0, np.abs(m)) < _NARROW)
        right = ~narrow & (a >= 0)
        mid = ~narrow & (a < 0)
    if narrow.any():
        an, hn, mn, un = a[narrow], h[narrow], m[narrow], u[narrow]
        log_full = np.log(2.0 * hn) + np.log1p(_series_rel(mn, hn))  # without exp(-m^2/2)
        t = 2.0 * hn * un
        for _ in range(6):
            mt = an + 0.5 * t  # midpoint of [a, a + t]
            with np.errstate(divide="ignore"):
                log_part = np.log(t) + np.log1p(_series_rel(mt, 0.5 * t))
            # F(t) = int_a^{a+t} / int_a^b, the exp(-m^2/2) factors cancel as (m - mt)(m + mt)/2
            F = np.exp(log_part - log_full + 0.5 * (mn - mt) * (mn + mt))
            dens = np.exp(-0.5 * (an + t - mn) * (an + t + mn) - log_full)
            t = np.clip(t - (F - un) / dens, 0.0, 2.0 * hn)
        z[narrow] = an + t
    if right.any():
        ar, br, ur = a[right], b[right], u[right]
        with np.errstate(invalid="ignore", over="ignore"):
            rho = np.where(
                np.isfinite(br), erfcx(br / _SQRT2) / erfcx(ar / _SQRT2) * np.exp(-(br - ar) * (br + ar) / 2.0), 0.0
            )
        log_qa = math.log(0.5) + np.log(erfcx(ar / _SQRT2)) - 0.5 * ar * ar
        z[right] = -ndtri_exp(log_qa + np.log1p(-ur * (1.0 - rho)))
    if mid.any():
        am, bm, um = a[mid], b[mid], u[mid]
        mass = 1.0 - (ndtr(-bm) + ndtr(am))
        p_low = ndtr(am) + um * mass
        p_up = ndtr(-bm) + (1.0 - um) * mass
        z[mid] = np.where(p_low <= 0.5, ndtri(np.minimum(p_low, 0.5)), -ndtri(np.minimum(p_up, 0.5)))
    z = np.clip(z, a, b)
    z[flip] = -z[flip]
    return z


def _piece_log_mass(lo, hi, g, kappa, c, s):
    """log int_lo^hi exp(-kappa g - c (b^2 + ||s||^2)) db per piece (-inf for empty pieces)."""
    log_mass = np.full(lo.size, -np.inf)
    live = hi > lo
    if c > 0:
        sd = 1.0 / math.sqrt(2.0 * c)  # exp(-c b^2) = exp(-(b / sd)^2 / 2)
        log_int = math.log(sd) + _log_gauss_mass(lo[live] / sd, hi[live] / sd)
    else:
        log_int = np.log(hi[live] - lo[live])
    log_mass[live] = -kappa * g[live] - c * float(s @ s) + log_int
    return log_mass


@dataclass
class InterceptPieces:
    """The one-dimensional KNG density of the intercept as a piecewise (constant x Gaussian) function.

    Piece k is [lo[k], hi[k]) (the last one closed at b_hi), on which ||G(b)||_inf = g[k] and the
    unnormalised KNG density exp(-kappa g[k] - c (b^2 + ||s||^2)) has integral exp(log_mass[k])
    (-inf for pieces of zero width, e.g. between tied residuals). Computed from confidential data:
    curator only.
    """

    lo: np.ndarray
    hi: np.ndarray
    g: np.ndarray
    log_mass: np.ndarray
    b_lo: float
    b_hi: float
    slopes: np.ndarray
    kappa: float
    c: float
    sensitivity_value: float

    @property
    def log_total(self) -> float:
        """log of the normalising constant (the integral of the unnormalised density)."""
        from scipy.special import logsumexp

        if self.b_lo == self.b_hi:
            return -np.inf
        return float(logsumexp(self.log_mass))

    def restrict(self, b_lo: float, b_hi: float) -> InterceptPieces:
        """The same density restricted to [b_lo, b_hi] ∩ [self.b_lo, self.b_hi] (exact; O(n)).

        Lets sequential schemes reuse one sort per quantile when only a neighbour bound changes
        (a neighbour constraint on an intercept-only model is an interval for the intercept).
        """
        lo_new, hi_new = max(float(b_lo), self.b_lo), min(float(b_hi), self.b_hi)
        if lo_new > hi_new:
            raise ValueError(f"[{b_lo}, {b_hi}] does not meet the feasible interval [{self.b_lo}, {self.b_hi}].")
        # clipping composes (the new interval lies inside the old): same as clipping the raw pieces
        lo = np.clip(self.lo, lo_new, hi_new)
        hi = np.clip(self.hi, lo_new, hi_new)
        log_mass = _piece_log_mass(lo, hi, self.g, self.kappa, self.c, self.slopes)
        return InterceptPieces(
            lo=lo, hi=hi, g=self.g, log_mass=log_mass, b_lo=lo_new, b_hi=hi_new, slopes=self.slopes,
            kappa=self.kappa, c=self.c, sensitivity_value=self.sensitivity_value,
        )

    def probabilities(self) -> np.ndarray:
        """Probability of each piece under the KNG density (sums to 1)."""
        if self.b_lo == self.b_hi:
            return np.zeros(self.lo.size)
        w = np.exp(self.log_mass - np.max(self.log_mass))
        return w / w.sum()


def kng_intercept_pieces(
    X: Any,
    y: Any,
    tau: float,
    epsilon: float,
    C_X: float,
    *,
    slopes: Any = None,
    sensitivity: str = "sound",
    lower: Any = None,
    upper: Any = None,
    check_X: Any = None,
    lb: float = -np.inf,
    ub: float = np.inf,
    c: float = PENALTY_C,
) -> InterceptPieces:
    """Exact piecewise form of the KNG density when only the intercept moves.

    With fixed slopes s (``slopes``; none for an intercept-only model) the density of the
    intercept b is  f(b) ∝ exp(-kappa ||G(b)||_inf - c (b^2 + ||s||^2)),  kappa = eps / (2 Delta),
    G(b) = sum_i x_i (1{r_i <= b} - tau),  r_i = y_i - x_i,slopes' s  (x_i clipped at C_X, the
    intercept column included), on the feasible interval [b_lo, b_hi] of the bounds and
    non-crossing constraints (the same constraint handling as :func:`kng_sample`). G is a step
    function, right-continuous, with breakpoints at the sorted r_(k): on [r_(k), r_(k+1)) it
    counts the first k records (ties give pieces of zero width). Each of the n + 1 pieces,
    intersected with [b_lo, b_hi], has log mass -kappa g_k - c ||s||^2 + log int exp(-c b^2) db,
    the integral by :func:`_log_gauss_mass` (relative error < 1e-12). O(n log n + n p).
    """
    tau = _check_tau(tau)
    epsilon = _check_epsilon(epsilon)
    c = float(c)
    if not (c >= 0 and math.isfinite(c)):
        raise ValueError(f"c must be a non-negative number; got {c}.")
    lb, ub = float(lb), float(ub)
    Xc, y, delta, Z, zlow, zup = _kng_inputs(X, y, tau, C_X, sensitivity, lower, upper,
                                             check_X, lb, ub)
    n, p = Xc.shape
    s = np.zeros(p - 1) if slopes is None else np.asarray(slopes, dtype=np.float64).ravel()
    if s.shape[0] != p - 1:
        raise ValueError(
            f"slopes has {s.shape[0]} values but X has {p - 1} predictors besides the intercept; "
            "pass the fixed slope coefficients (e.g. the released median's)."
        )
    if not np.isfinite(s).all():
        raise ValueError("slopes must be finite.")
    kappa = epsilon / (2.0 * delta)
    b_lo, b_hi = _intercept_interval(Z[:, 0], Z[:, 1:] @ s, zlow, zup, lb, ub)
    if b_lo > b_hi:
        raise ValueError(
            f"tau={tau}: no intercept satisfies the bounds [{lb}, {ub}] and the neighbouring "
            "quantiles on the synthetic predictor rows; widen the bounds."
        )
    if c == 0 and not (np.isfinite(b_lo) and np.isfinite(b_hi)):
        raise ValueError("c = 0 with an unbounded feasible interval gives an improper density; pass lb and ub.")

    resid = y - Xc[:, 1:] @ s
    order = np.argsort(resid, kind="stable")
    r = resid[order]
    cum = np.vstack([np.zeros((1, p)), np.cumsum(Xc[order], axis=0)])  # cum[k]: first k records
    g = np.max(np.abs(cum - tau * Xc.sum(axis=0)), axis=1)  # ||G|| on piece k, (n + 1,)
    edges = np.concatenate([[-np.inf], r, [np.inf]])
    lo = np.clip(edges[:-1], b_lo, b_hi)
    hi = np.clip(edges[1:], b_lo, b_hi)
    log_mass = _piece_log_mass(lo, hi, g, kappa, c, s)
    return InterceptPieces(
        lo=lo, hi=hi, g=g, log_mass=log_mass, b_lo=float(b_lo), b_hi=float(b_hi), slopes=s,
        kappa=kappa, c=c, sensitivity_value=delta,
    )


def kng_intercept_draws(
    pieces: InterceptPieces, size: int = 1, seed: int | np.random.Generator | None = None
) -> np.ndarray:
    """``size`` independent exact draws of the intercept from the density ``pieces`` describes.

    A piece is chosen by inverse CDF on its probability (normalised in log space), then the
    intercept within it from the density ∝ exp(-c b^2) on that piece (a normal with sd
    1/sqrt(2c) truncated to the piece; uniform if c = 0) by :func:`_truncnorm_ppf`. Two uniforms
    per draw. If the feasible interval is a single point, that point is returned (the constraints
    leave no choice; the output is then data independent).
    """
    rng = _rng(seed)
    size = int(size)
    if size < 1:
        raise ValueError(f"size must be a positive integer; got {size}.")
    u = rng.random((2, size))
    if pieces.b_lo == pieces.b_hi:
        return np.full(size, pieces.b_lo)
    w = np.exp(pieces.log_mass - np.max(pieces.log_mass))
    cdf = np.cumsum(w)
    last = int(np.flatnonzero(w > 0)[-1])
    k = np.minimum(np.searchsorted(cdf, u[0] * cdf[-1], side="right"), last)
    lo, hi = pieces.lo[k], pieces.hi[k]
    if pieces.c > 0:
        sd = 1.0 / math.sqrt(2.0 * pieces.c)
        b = sd * _truncnorm_ppf(lo / sd, hi / sd, u[1])
    else:
        b = lo + u[1] * (hi - lo)
    # pieces are half-open [lo, hi) except the last feasible one: stay inside
    top = np.where(hi < pieces.b_hi, np.nextafter(hi, -np.inf), hi)
    return np.clip(b, lo, top)


def kng_sample_intercept_exact(
    X: Any,
    y: Any,
    tau: float,
    epsilon: float,
    C_X: float,
    *,
    slopes: Any = None,
    sensitivity: str = "sound",
    lower: Any = None,
    upper: Any = None,
    check_X: Any = None,
    lb: float = -np.inf,
    ub: float = np.inf,
    c: float = PENALTY_C,
    seed: int | np.random.Generator | None = None,
) -> KNGResult:
    """One EXACT KNG draw of the tau-quantile coefficients when only the intercept moves.

    Same mechanism, clipping, sensitivity and constraints as :func:`kng_sample` with
    ``slopes="fixed"`` (or an intercept-only X), but no MCMC: the one-dimensional density is
    piecewise (constant x Gaussian kernel), see :func:`kng_intercept_pieces`, and is sampled
    exactly by :func:`kng_intercept_draws`. The epsilon-DP guarantee of KNG then holds without
    the caveat about chains not run to convergence.

    Parameters as :func:`kng_sample`; ``slopes`` are the fixed slope values (p - 1 numbers; the
    released median's in the stepwise/sandwich schemes; default zeros, none for an
    intercept-only model). Returns a :class:`KNGResult` with ``sampler="exact"``, ``n_iter=0``
    and NaN acceptance rate and scale.
    """
    pieces = kng_intercept_pieces(
        X, y, tau, epsilon, C_X, slopes=slopes, sensitivity=sensitivity, lower=lower,
        upper=upper, check_X=check_X, lb=lb, ub=ub, c=c,
    )
    b = kng_intercept_draws(pieces, 1, seed)[0]
    return KNGResult(
        beta=np.concatenate([[b], pieces.slopes]),
        accept_rate=float("nan"),
        n_iter=0,
        epsilon=float(epsilon),
        sensitivity_value=pieces.sensitivity_value,
        final_scale=float("nan"),
        sampler="exact",
    )
