"""The one fitting engine of the risk-weighted synthesizers (issue 38 item 1).

FBS, FBP, PBP, every Sequential step and the risk-weighted mixture / NB synthesizers fit Stan
models the same way, written here once:

* :func:`run_fit`: run a Stan program under a label; convergence warnings are re-issued with
  the fit's label (``"<label> fit: ..."``) so a user sees which fit of which step they are about;
* :func:`absmax_over_draws`, :func:`weighted_bound`, :func:`chain_maxima`: the per-record bound
  max_s |log p_i(theta_s)| (in blocks of draws, bounded memory), the weighted bound
  Delta_alpha = max_i alpha_i R_i (a record with alpha_i = 0 contributes 0 even when its log
  density is not finite) and the bound of each chain separately (its spread sets the final
  fit's margin);
* :class:`WeightedFits`: the tuner's ``evaluate(c, final)``: one alpha-weighted refit with a
  fresh seed, warm-started from the previous fit, its bound, a row of the tuning path and a
  progress line;
* :func:`check_weights`: the "design weights > 0"
  rule.

The tuner that calls ``evaluate`` is :func:`surveysynth.synth.tuning.fit_to_target`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..privacy.lipschitz import lipschitz_weights
from ..privacy.randomness import child_seed
from ._stan import ConvergenceWarning, StanDraws, run_stan

__all__ = ["WeightedFits", "absmax_over_draws", "chain_bounds", "chain_maxima", "check_weights",
           "run_fit", "weighted_bound"]

#: run(alpha, draws, warmup, init, label, seed) -> StanDraws: one fit of the caller's model
Runner = Callable[[np.ndarray, int, int, Any, str, int], StanDraws]


def check_weights(w: np.ndarray, rows: Any = None, why: str = "", k: int = 5) -> None:
    """Design weights must be positive and finite: names the first ``k`` offending rows (their
    index labels when ``rows`` is given, else positions); ``why`` ends the message."""
    bad = ~np.isfinite(w) | (w <= 0)
    if bad.any():
        pos = np.flatnonzero(bad)[:k]
        which = pos.tolist() if rows is None else rows[pos].tolist()
        raise ValueError(f"design weights must be positive and finite; rows {which} are not."
                         + (f" {why}" if why else ""))


def run_fit(program: str, data: dict[str, Any], *, label: str, chains: int, draws: int,
            warmup: int, seed: int, progress: bool, init: Any = None, warn: bool = True,
            stan_kwargs: dict | None = None) -> StanDraws:
    """One Stan fit under ``label``; its convergence warnings re-issued as
    ``"<label> fit: <message>"``; ``summary["seconds"]`` its wall time."""
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_stan(program, data, chains=int(chains), draws=int(draws), warmup=int(warmup),
                       seed=seed, progress=progress, init=init, warn=warn, label=label,
                       **dict(stan_kwargs or {}))
    for wmsg in caught:
        if issubclass(wmsg.category, ConvergenceWarning):
            warnings.warn(f"{label} fit: {wmsg.message}", ConvergenceWarning, stacklevel=3)
    res.summary["seconds"] = time.perf_counter() - t0
    return res


def absmax_over_draws(loglik: Callable[[slice], np.ndarray], S: int, size: int,
                      chunk: int) -> np.ndarray:
    """max_s |loglik(s)_i| over S draws, ``chunk`` draws at a time (memory chunk x size)."""
    out = np.zeros(size)
    for start in range(0, S, chunk):
        ll = loglik(slice(start, min(S, start + chunk)))
        out = np.maximum(out, np.abs(ll).max(axis=0))
    return out


def weighted_bound(alpha: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, float]:
    """(alpha_i R_i per record, Delta_alpha = their max); alpha_i = 0 contributes 0."""
    with np.errstate(invalid="ignore"):     # 0 x inf where alpha_i = 0: not used
        per = np.where(alpha > 0, alpha * R, 0.0)
    return per, float(per.max())


def chain_bounds(res: StanDraws,
                 bounds_of: Callable[[StanDraws], np.ndarray]) -> np.ndarray:
    """(chains, n): each chain's per-record bounds R_i (max over that chain's draws); their
    max over chains is ``bounds_of(res)`` exactly (a max over draws splits by chain)."""
    out = []
    for ch in range(res.chains):
        sl = slice(ch * res.draws_per_chain, (ch + 1) * res.draws_per_chain)
        sub = StanDraws({k: v[sl] for k, v in res.draws.items()}, 1, res.draws_per_chain,
                        res.diagnostics, res.summary, res.param_names, {})
        out.append(bounds_of(sub))
    return np.asarray(out)


def chain_maxima(res: StanDraws, alpha: np.ndarray,
                 bounds_of: Callable[[StanDraws], np.ndarray],
                 by_chain: np.ndarray | None = None) -> np.ndarray:
    """Delta_alpha of each chain separately (the spread of the bound); ``by_chain``: the
    fit's :func:`chain_bounds` when already computed."""
    Rc = chain_bounds(res, bounds_of) if by_chain is None else by_chain
    return np.asarray([weighted_bound(alpha, r)[1] for r in Rc])


class WeightedFits:
    """The tuner's ``evaluate(c, final)`` for one model: an alpha-weighted refit at c
    (alpha = clip(c (1 - D_i) + g, 0, 1) from the normalised ``base``; c None: alpha = 1) with
    its own fresh seed from ``rng``, warm-started from the previous fit (``init``, the
    parameters ``init_names``), returning ``(Delta_alpha, alpha, per_record, res, R)``.

    ``run`` fits the caller's model; ``bounds_of`` gives the per-record bounds R_i of a fit.
    Final fits use ``draws`` / ``warmup``, tuning fits ``tune_draws`` / ``tune_warmup``.
    ``rows`` is the tuning path (one dict per fit; ``row`` adds fixed keys such as the step),
    ``alpha_one_role`` the role written for an alpha = 1 final fit."""

    def __init__(self, run: Runner, bounds_of: Callable[[StanDraws], np.ndarray], *,
                 name: str, base: np.ndarray, g: float, rng: np.random.Generator,
                 draws: int, warmup: int, tune_draws: int, tune_warmup: int, init: Any,
                 init_names: list[str] | None = None, progress: bool = False,
                 target: float | None = None, row: dict | None = None,
                 alpha_one_role: str = "final") -> None:
        self.run, self.bounds_of, self.name = run, bounds_of, name
        self.base, self.g, self.rng = base, float(g), rng
        self.draws, self.warmup = int(draws), int(warmup)
        self.tune_draws, self.tune_warmup = int(tune_draws), int(tune_warmup)
        self.init, self.init_names = init, init_names
        self.progress, self.target = progress, target
        self.row, self.alpha_one_role = dict(row or {}), alpha_one_role
        self.rows: list[dict] = []
        self._by_chain: tuple[StanDraws, np.ndarray] | None = None

    def alpha(self, c: float | None) -> np.ndarray:
        n = len(self.base)
        return np.ones(n) if c is None else lipschitz_weights(None, c=c, g=self.g,
                                                                bounds=self.base)

    def chain_maxima(self, res: StanDraws, alpha: np.ndarray) -> np.ndarray:
        cached = self._by_chain
        by_chain = cached[1] if cached is not None and cached[0] is res else None
        return chain_maxima(res, alpha, self.bounds_of, by_chain)

    def evaluate(self, c: float | None, final: bool) -> tuple:
        """One weighted refit at c (the tuner's callback)."""
        alpha = self.alpha(c)
        draws, wu = (self.draws, self.warmup) if final else (self.tune_draws, self.tune_warmup)
        t1 = time.perf_counter()
        label = "final (alpha = 1)" if c is None else f"weighted (c={c:.4g})"
        res = self.run(alpha, draws, wu, self.init, label, child_seed(self.rng))
        self.init = res.last_inits(self.init_names)
        # the bounds chain by chain, in one pass: R is their max, and the tuner's spread of the
        # bound (chain_maxima) reuses them instead of a second pass over the draws
        Rc = chain_bounds(res, self.bounds_of)
        self._by_chain = (res, Rc)
        R = Rc.max(axis=0)
        per, da = weighted_bound(alpha, R)
        role = (self.alpha_one_role if c is None else "final") if final else "tuning"
        self.rows.append({**self.row, "c": c, "g": self.g, "delta_alpha": da, "draws": draws,
                          "warmup": wu, "role": role, "seconds": time.perf_counter() - t1})
        if self.progress:
            from tqdm.auto import tqdm

            tqdm.write(f"{self.name} {'final' if final else 'tuning'} fit {len(self.rows)}: "
                       + ("alpha = 1" if c is None else f"c = {c:.4g}")
                       + f", Delta_alpha = {da:.4f}"
                       + (f" (target {self.target:.4g})" if self.target else ""))
        return da, alpha, per, res, R

    def annotate(self, note: dict) -> None:
        """Add a predictor's note (how the c of the last fit was chosen) to that fit's row."""
        if self.rows:
            self.rows[-1].update(note)
