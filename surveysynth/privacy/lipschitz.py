"""Lipschitz (sensitivity) risk weights of the pseudo posterior mechanism (METHODS section 6).

Savitsky, Williams & Hu's pseudo posterior raises record i's likelihood to alpha_i in [0, 1].
From S posterior draws of the per-record log density ``log p(y_i | x_i, theta_s)``:

- record bound     Delta_i = max_s |log p(y_i | theta_s)|                 (``record_bounds``)
- risk weights     D_i = (Delta_i - min Delta) / (max Delta - min Delta),
                   alpha_i = clip(c (1 - D_i) + g, 0, 1); alpha_i = 0 if Delta_i is not finite
                                                                          (``lipschitz_weights``)
- mechanism bound  Delta_alpha = max_i max_s |alpha_i log p(y_i | theta_s)| over draws of the
                   alpha-weighted fit                                      (``lipschitz_bound``)

Each draw is then (2 Delta_alpha)-DP asymptotically, local to the database; m draws cost
epsilon = 2 Delta_alpha m. The log densities must be FULL normalised densities on the modelled
scale (no dropped constants): the bound depends on them.

Arrays are ``(n_draws, n_records)``: draws first, like ArviZ's ``log_likelihood``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["lipschitz_bound", "lipschitz_weights", "record_bounds"]


def _as_draws(loglik_draws: Any, what: str = "loglik_draws") -> np.ndarray:
    ll = np.asarray(loglik_draws, dtype=float)
    if ll.ndim == 1:
        ll = ll[None, :]
    if ll.ndim != 2 or ll.shape[0] < 1 or ll.shape[1] < 1:
        raise ValueError(
            f"{what} must be a 2-d array (n_draws, n_records), got shape {np.shape(loglik_draws)}."
        )
    if np.isnan(ll).any():
        rows = np.flatnonzero(np.isnan(ll).any(axis=0))[:5].tolist()
        raise ValueError(
            f"{what} has NaN log densities for records {rows}; NaN is not a bound. Check the "
            "model's log density for those records (infinite values are allowed: alpha = 0)."
        )
    return ll


def record_bounds(loglik_draws: Any) -> np.ndarray:
    """Delta_i = max over draws of |log p(y_i | theta_s)| (inf where some log p is infinite)."""
    return np.abs(_as_draws(loglik_draws)).max(axis=0)


def lipschitz_weights(
    loglik_draws: Any, c: float = 1.0, g: float = 0.0, bounds: Any = None
) -> np.ndarray:
    """Risk weights alpha_i = clip(c (1 - D_i) + g, 0, 1) from unweighted-fit log densities.

    ``loglik_draws``: (n_draws, n_records) log p(y_i | x_i, theta_s) from the UNWEIGHTED fit
    (alpha = 1). ``c`` scales and ``g`` shifts the weights (seed 000 Section 1.4.1's c1, c2);
    the default g = 0 keeps the record with the largest Delta_i at alpha = 0. Records with a
    non-finite Delta_i get alpha_i = 0 and are excluded from the normalisation. If all finite
    Delta_i are equal, D_i = 0 for all of them. Pass precomputed ``bounds`` (Delta_i) to skip
    the max over draws (then ``loglik_draws`` may be None).
    """
    if not np.isfinite(c) or c < 0:
        raise ValueError(f"c must be a finite number >= 0, got {c!r}.")
    if not np.isfinite(g):
        raise ValueError(f"g must be finite, got {g!r}.")
    delta = record_bounds(loglik_draws) if bounds is None else np.asarray(bounds, dtype=float)
    finite = np.isfinite(delta)
    alpha = np.zeros(delta.shape)
    if not finite.any():
        return alpha
    lo = delta[finite].min()
    hi = delta[finite].max()
    span = hi - lo
    D = np.zeros(delta.shape)
    if span > 0:
        D[finite] = (delta[finite] - lo) / span
    alpha[finite] = np.clip(c * (1.0 - D[finite]) + g, 0.0, 1.0)
    return alpha


def lipschitz_bound(loglik_draws: Any, alpha: Any, per_record: bool = False) -> Any:
    """Delta_alpha = max_i max_s |alpha_i log p(y_i | theta_s)| over the weighted fit's draws.

    Records with alpha_i = 0 contribute 0 even where log p is infinite. With
    ``per_record=True`` returns the vector Delta_alpha,i (its max is Delta_alpha).
    """
    ll = _as_draws(loglik_draws)
    a = np.asarray(alpha, dtype=float)
    if a.shape != (ll.shape[1],):
        raise ValueError(
            f"alpha has shape {a.shape} but loglik_draws has {ll.shape[1]} records."
        )
    if ((a < 0) | (a > 1) | ~np.isfinite(a)).any():
        raise ValueError(
            f"alpha must lie in [0, 1]; records {np.flatnonzero((a < 0) | (a > 1))[:5].tolist()} "
            "do not."
        )
    with np.errstate(invalid="ignore"):
        per = np.where(a > 0, a * np.abs(ll).max(axis=0), 0.0)
    return per if per_record else float(per.max())
