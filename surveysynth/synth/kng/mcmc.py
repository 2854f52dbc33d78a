"""Adaptive Metropolis sampler of the KNG density (any number of moving coefficients).

Decisions (METHODS.md section 12, docs/kng.md):

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
  convergence, so its output is not proven to be a draw from the KNG density (the release is
  labelled accordingly, :func:`surveysynth.privacy.guarantees.kng`).
* Speed. With only the intercept moving (fixed slopes, or an intercept-only model), the residuals
  r_i = y_i - x_i,slopes' beta_slopes are sorted once and cumulative sums of the rows of X in that
  order give G(b) for any intercept b by one binary search: O(log n + p) per step. Otherwise each
  step costs O(n p) (one product X beta and one product X' 1{.}). Where only the intercept moves,
  :mod:`.exact` draws exactly instead.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ...privacy.randomness import secret_rng
from .mechanism import (
    PENALTY_C,
    KNGResult,
    _check_epsilon,
    _check_tau,
    _constraint_rows,
    _intercept_interval,
    _kng_inputs,
)

__all__ = ["kng_sample"]


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
    random_state: int | np.random.Generator | np.random.SeedSequence | None = None,
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
    random_state : None (secret OS entropy), an int seed, a SeedSequence or a Generator
        (:func:`surveysynth.privacy.randomness.secret_rng`).
    """
    tau = _check_tau(tau)
    epsilon = _check_epsilon(epsilon)
    n_iter = int(n_iter)
    if n_iter < 1:
        raise ValueError(f"n_iter must be a positive integer; got {n_iter}.")
    if slopes not in ("fixed", "varying"):
        raise ValueError(f"slopes must be 'fixed' or 'varying'; got {slopes!r}.")
    lb, ub = float(lb), float(ub)
    rng = secret_rng(random_state)
    Xc, y, delta, Z, zlow, zup = _kng_inputs(X, y, tau, C_X, sensitivity, lower, upper,
                                             check_X, lb, ub)
    n, p = Xc.shape
    kappa = epsilon / (2.0 * delta)
    beta0, base = _start_and_step(init, p, lb, ub, step)
    one_dim = slopes == "fixed" or p == 1
    if one_dim:
        slope_part = beta0[1:].copy()
        logf, theta0, chol_init = _intercept_target(
            Xc, y, tau, kappa, c, slope_part, Z, zlow, zup, lb, ub, beta0[0], base)
    else:
        chol0 = _initial_proposal(base, p, C_X, proposal_rows, Z)
        logf, theta0 = _joint_target(Xc, y, tau, kappa, c, Z, zlow, zup, lb, ub,
                                     lower is not None, upper is not None, beta0, base)
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


def _start_and_step(init: Any, p: int, lb: float, ub: float, step: Any) -> tuple[np.ndarray, float]:
    """The data-independent (or caller-supplied) starting point and the base proposal scale."""
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
    return beta0, base


def _initial_proposal(base: float, p: int, C_X: float, proposal_rows: Any, Z: np.ndarray) -> np.ndarray:  # noqa: N803
    """Cholesky factor of the first proposal: step^2 (R'R/m)^-1 on public rows R, else diagonal."""
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
    return chol0


def _intercept_target(Xc, y, tau, kappa, c, slope_part, Z, zlow, zup, lb, ub, b0, base):
    """Log density of the intercept alone (fixed slopes), its feasible start and step.

    G(b) from sorted residuals: r_i <= b  <=>  y_i <= x_i'beta; O(log n + p) per evaluation.
    """
    p = Xc.shape[1]
    resid = y - Xc[:, 1:] @ slope_part
    order = np.argsort(resid, kind="stable")
    r_sorted = resid[order]
    cum = np.vstack([np.zeros((1, p)), np.cumsum(Xc[order], axis=0)])  # (n+1, p)
    tau_sum = tau * Xc.sum(axis=0)
    # feasible intercepts: an interval [b_lo, b_hi] (strict at neighbours)
    b_lo, b_hi = _intercept_interval(Z[:, 0], Z[:, 1:] @ slope_part, zlow, zup, lb, ub)
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
    return logf, np.array([b0]), np.array([[step1]])


def _joint_target(Xc, y, tau, kappa, c, Z, zlow, zup, lb, ub, low_any, up_any, beta0, base):
    """Log density of all coefficients (constraints checked on the rows Z) and a feasible start."""
    XT = np.ascontiguousarray(Xc.T)
    tau_sum = tau * Xc.sum(axis=0)
    has_z = Z.shape[0] > 0

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
    return logf, theta0


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


