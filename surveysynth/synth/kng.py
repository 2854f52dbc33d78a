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
    """Output of :func:`kng_sample`: the last state ``beta`` and chain diagnostics.

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
    if not lb < ub:
        raise ValueError(f"need lb < ub; got lb={lb}, ub={ub}.")
    rng = _rng(seed)
    Xc = clip_predictors(X, C_X)
    n, p = Xc.shape
    y = np.asarray(y, dtype=np.float64).ravel()
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} values but X has {n} rows.")
    if not (np.isfinite(y).all() and np.isfinite(Xc).all()):
        bad = np.flatnonzero(~(np.isfinite(y) & np.isfinite(Xc).all(axis=1)))[:5].tolist()
        raise ValueError(f"X or y has missing/non-finite values in rows {bad}; remove them first.")
    delta = kng_sensitivity(tau, C_X, sensitivity)
    kappa = epsilon / (2.0 * delta)
    sumX = Xc.sum(axis=0)

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
    zlow = np.full(Z.shape[0], -np.inf) if lower is None else Z @ np.asarray(lower, float).ravel()
    zup = np.full(Z.shape[0], np.inf) if upper is None else Z @ np.asarray(upper, float).ravel()

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
