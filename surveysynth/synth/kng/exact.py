"""Exact (MCMC-free) KNG draws when only the intercept moves.

When only the intercept b moves (an intercept-only model, or fixed slopes s) the KNG density is
one-dimensional and piecewise (constant x Gaussian kernel) between the sorted residuals
r_i = y_i - x_i,slopes' s: :func:`kng_intercept_pieces` computes each piece's mass in closed form
and :func:`kng_intercept_draws` draws the intercept exactly from this density restricted to a
public grid of the feasible interval (a fixed set of doubles, the same for every database: see
docs/privacy.md, "Exact sampling on a public grid"). No chain, no convergence caveat. See
docs/kng.md, "Exact sampling when only the intercept moves".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...privacy.exact_sampling import exact_categorical, public_grid
from ...privacy.randomness import secret_rng
from .mechanism import (
    PENALTY_C,
    KNGResult,
    _check_epsilon,
    _check_tau,
    _intercept_interval,
    _kng_inputs,
)
from .truncated_gauss import log_gauss_mass

__all__ = ["InterceptPieces", "kng_intercept_pieces", "kng_intercept_draws", "kng_sample_intercept_exact",
           "GRID_BITS"]

GRID_BITS = 20  # default public grid: 2^20 equal steps over the feasible interval [b_lo, b_hi]
_BLOCK = 1024  # grid points per block of the two-level draw (data-independent partition)


def _piece_log_mass(lo, hi, g, kappa, c, s):
    """log int_lo^hi exp(-kappa g - c (b^2 + ||s||^2)) db per piece (-inf for empty pieces)."""
    log_mass = np.full(lo.size, -np.inf)
    live = hi > lo
    if c > 0:
        sd = 1.0 / math.sqrt(2.0 * c)  # exp(-c b^2) = exp(-(b / sd)^2 / 2)
        log_int = math.log(sd) + log_gauss_mass(lo[live] / sd, hi[live] / sd)
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
    breaks: np.ndarray | None = None  # sorted residuals r_(1..n): piece k is [r_(k), r_(k+1))

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
            kappa=self.kappa, c=self.c, sensitivity_value=self.sensitivity_value, breaks=self.breaks,
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
    the integral by :func:`log_gauss_mass` (relative error < 1e-12). O(n log n + n p).
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
        kappa=kappa, c=c, sensitivity_value=delta, breaks=r,
    )


def _grid_segments(pieces: InterceptPieces, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid cut by the pieces and by fixed blocks of _BLOCK points: each segment's first grid
    index, its length, and its log weight -kappa g - c (b^2 + ||s||^2) summed over its points."""
    piece = np.searchsorted(pieces.breaks, grid, side="right")  # #{r_i <= t}: G's step at t
    cut = np.zeros(grid.size, dtype=bool)
    cut[0] = True
    cut[1:] = piece[1:] != piece[:-1]
    cut[::_BLOCK] = True
    start = np.flatnonzero(cut)
    length = np.diff(np.append(start, grid.size))
    w = -pieces.c * grid * grid  # data-independent (0 when c = 0)
    top = np.maximum.reduceat(w, start)
    lse = top + np.log(np.add.reduceat(np.exp(w - np.repeat(top, length)), start))
    log_w = lse - pieces.kappa * pieces.g[piece[start]] - pieces.c * float(pieces.slopes @ pieces.slopes)
    return start, length, log_w


def kng_intercept_draws(
    pieces: InterceptPieces,
    size: int = 1,
    random_state: int | np.random.Generator | np.random.SeedSequence | None = None,
    grid_bits: int = GRID_BITS,
) -> np.ndarray:
    """``size`` independent exact draws of the intercept from the density ``pieces`` describes,
    restricted to the public grid of the feasible interval.

    The output set is the public grid b_lo + (b_hi - b_lo) k / 2^grid_bits, k = 0..2^grid_bits
    (:func:`~surveysynth.privacy.exact_sampling.public_grid`; b_lo, b_hi come from the public
    bounds and released neighbours only), and grid point t has probability proportional to
    exp(-kappa ||G(t)|| - c (t^2 + ||s||^2)): the K-norm gradient mechanism with the counting
    measure on the grid as base, eps-DP by the same argument as the density (||G|| moves by at
    most the sensitivity at every t). Drawn in two exact steps (:func:`exact_categorical`): a
    segment (the grid cut by the pieces and by fixed blocks of 1024 points) by its summed
    weight, then a grid point inside it by exp(-c t^2) (uniform integers if c = 0). Integers
    only; the released double is the grid point. If the feasible interval is a single point,
    that point is returned (the constraints leave no choice; the output is then data
    independent). The feasible interval must be finite (pass ``lb`` and ``ub``): the grid needs
    public ends.
    """
    rng = secret_rng(random_state)
    size = int(size)
    if size < 1:
        raise ValueError(f"size must be a positive integer; got {size}.")
    if pieces.b_lo == pieces.b_hi:
        return np.full(size, pieces.b_lo)
    if not (np.isfinite(pieces.b_lo) and np.isfinite(pieces.b_hi)):
        raise ValueError(
            f"the feasible interval [{pieces.b_lo}, {pieces.b_hi}] is unbounded: the exact sampler "
            "draws on a public grid between finite public ends; pass lb and ub (public bounds).")
    if pieces.breaks is None:
        raise ValueError("pieces without breakpoints: build them with kng_intercept_pieces.")
    grid = public_grid(pieces.b_lo, pieces.b_hi, grid_bits)
    start, length, log_w = _grid_segments(pieces, grid)
    out = np.empty(size)
    for d in range(size):
        k = exact_categorical(log_w, rng)
        a, n_k = int(start[k]), int(length[k])
        if pieces.c > 0 and n_k > 1:
            t = grid[a: a + n_k]
            j = exact_categorical(-pieces.c * t * t, rng)
        else:
            j = int(rng.integers(0, n_k))
        out[d] = grid[a + j]
    return out


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
    random_state: int | np.random.Generator | np.random.SeedSequence | None = None,
    grid_bits: int = GRID_BITS,
) -> KNGResult:
    """One EXACT KNG draw of the tau-quantile coefficients when only the intercept moves.

    Same mechanism, clipping, sensitivity and constraints as :func:`kng_sample` with
    ``slopes="fixed"`` (or an intercept-only X), but no MCMC: the one-dimensional density is
    piecewise (constant x Gaussian kernel), see :func:`kng_intercept_pieces`, and is sampled
    exactly on the public grid by :func:`kng_intercept_draws` (``grid_bits``). The epsilon-DP
    guarantee of KNG then holds without the caveat about chains not run to convergence, and the
    set of doubles an output can take does not depend on the data.

    Parameters as :func:`kng_sample`; ``slopes`` are the fixed slope values (p - 1 numbers; the
    released median's in the stepwise/sandwich schemes; default zeros, none for an
    intercept-only model). Returns a :class:`KNGResult` with ``sampler="exact"``, ``n_iter=0``
    and NaN acceptance rate and scale.
    """
    pieces = kng_intercept_pieces(
        X, y, tau, epsilon, C_X, slopes=slopes, sensitivity=sensitivity, lower=lower,
        upper=upper, check_X=check_X, lb=lb, ub=ub, c=c,
    )
    b = kng_intercept_draws(pieces, 1, random_state, grid_bits)[0]
    return KNGResult(
        beta=np.concatenate([[b], pieces.slopes]),
        accept_rate=float("nan"),
        n_iter=0,
        epsilon=float(epsilon),
        sensitivity_value=pieces.sensitivity_value,
        final_scale=float("nan"),
        sampler="exact",
    )
