"""Tuning the risk-weight constant c to a target Lipschitz bound: the log-linear root finder
and the path of evaluations (see ``surveysynth.synth.pseudo_posterior`` ``_tune``)."""

from __future__ import annotations

import numpy as np

from ..privacy.lipschitz import lipschitz_weights

__all__ = ["CellWeightFloor", "TuningPath", "loglinear_root", "smallest_group_weight"]


def loglinear_root(logc: np.ndarray, logf: np.ndarray, target: float,
                    slope_prior: float = 0.7, prior_weight: float = 0.05) -> float:
    """Root c of the least-squares line log f = a + b log c through noisy evaluations.

    The slope is shrunk towards ``slope_prior`` with the weight of a spread of
    ``prior_weight`` in sum (log c - mean)^2 (so evaluations at nearly the same c still give a
    stable slope) and kept in [0.25, 2]; the root is then
    exp(mean log c + (log target - mean log f) / b): near the root it moves by the mean
    residual of all evaluations, which averages the noise of the max over draws.
    """
    xb, yb = float(np.mean(logc)), float(np.mean(logf))
    sxx = float(np.sum((logc - xb) ** 2))
    sxy = float(np.sum((logc - xb) * (logf - yb)))
    b = float(np.clip((sxy + prior_weight * slope_prior) / (sxx + prior_weight), 0.25, 2.0))
    return float(np.exp(xb + (np.log(target) - yb) / b))


class TuningPath:
    """The map c -> Delta_alpha as seen so far: the plug-in solver on one fit's per-record
    bounds, and the log-linear regression through every evaluation (see ``_tune``)."""

    def __init__(self, delta: np.ndarray, g: float, target: float) -> None:
        finite = np.isfinite(delta)
        self.delta, self.g, self.target = delta, g, target
        lo_d, self.hi_d = delta[finite].min(), delta[finite].max()
        D = np.zeros_like(delta)
        if self.hi_d > lo_d:
            D[finite] = (delta[finite] - lo_d) / (self.hi_d - lo_d)
        below = D[finite & (D < 1)]
        c_max = (1.0 - g) / (1.0 - below.max()) if below.size else 1.0
        self.c_max = max(c_max, 1e-6) * 1.0001
        self.R0 = np.where(finite, delta, 0.0)
        self.logc: list[float] = []
        self.logf: list[float] = []

    def predict(self, c: float, R: np.ndarray) -> float:
        return float(np.max(lipschitz_weights(None, c=c, g=self.g, bounds=self.delta) * R))

    def plug_in(self, R: np.ndarray, goal: float) -> float:
        """Solve predict(c, R) = goal on [0, c_max] by bisection (numpy only, no refit)."""
        lo, hi = 0.0, self.c_max
        if self.predict(hi, R) < goal:
            return hi
        if self.predict(lo, R) > goal:
            return lo
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self.predict(mid, R) < goal else (lo, mid)
        return 0.5 * (lo + hi)

    def add(self, c: float, f: float) -> None:
        if c > 0 and f > 0 and (not self.logc or self.logc[-1] != np.log(c)):
            self.logc.append(float(np.log(c)))
            self.logf.append(float(np.log(f)))

    def residual_sd(self) -> float:
        """SD of the residuals of log Delta_alpha about the least-squares line in log c (the
        fit-to-fit noise of the bound); 0 with fewer than three fits."""
        if len(self.logc) < 3:
            return 0.0
        x, y = np.array(self.logc), np.array(self.logf)
        b, a = np.polyfit(x, y, 1)
        return float(np.sqrt(np.sum((y - (a + b * x)) ** 2) / (len(x) - 2)))

    def next_c(self, c: float, f: float, goal: float, R: np.ndarray) -> float:
        """The next c: the root of the regression line (two or more evaluations) or the
        plug-in root from this fit's bounds, damped to [c/2, 2c]."""
        self.add(c, f)
        if len(self.logc) >= 2:
            c_new = loglinear_root(np.array(self.logc), np.array(self.logf), goal)
        else:
            c_new = self.plug_in(R, goal)
        return float(np.clip(c_new, 0.5 * c, min(2.0 * c, self.c_max))) if c > 0 else c_new

    def root(self, c: float, f: float, goal: float) -> float:
        """c aimed at ``goal`` from the regression (slope 0.7 with one point), damped."""
        if len(self.logc) < 2:
            c_new = float(np.exp(np.log(c) + (np.log(goal) - np.log(f)) / 0.7))
        else:
            c_new = loglinear_root(np.array(self.logc), np.array(self.logf), goal)
        return float(np.clip(c_new, 0.5 * c, min(2.0 * c, self.c_max))) if c > 0 else c_new


class CellWeightFloor:
    """The smallest c at which every parameter group keeps ``k`` records' worth of likelihood.

    Why: the map c -> Delta_alpha has a prior branch. As c falls every alpha_i shrinks; once a
    small cell's summed weight sum_i alpha_i is far below one record, its parameters are set by
    the prior, its records' |log p| grow only logarithmically, and the bound falls again towards
    0 - so a tuner can meet any target there while releasing synthetic values drawn from the
    prior (measured on the SDR Monte Carlo: 7 of 200 fits at c < 0.06, synthetic cell means up
    to 3e22 x the largest true mean; docs/pseudo_posterior.md). Bounding c below by the value at
    which every group keeps weight >= k cuts that branch off: a target that needs a smaller c
    is refused instead (TargetUnreachableError), naming the binding group.

    ``groupings``: list of (labels, codes), codes (n,) the group of each record (a cell of the
    predictors' cross-classification with ``effects="cells"``; each level of each predictor
    with ``effects="main"``). ``scale``: the per-record multiplier of alpha_i in the likelihood
    (PBP: the normalised survey weight; 1 otherwise). Only c is chosen here; the bound is still
    measured on the final fit, so the guarantee is untouched.
    """

    def __init__(self, path: TuningPath, groupings: list[tuple[list[str], np.ndarray]],
                 scale: np.ndarray | float, k: float) -> None:
        self.path, self.groupings, self.k = path, groupings, float(k)
        n = path.delta.shape[0]
        self.scale = np.broadcast_to(np.asarray(scale, dtype=float), (n,))
        self.c = 0.0
        self.binding = ""
        if self.k <= 0 or not groupings:
            return
        lo, hi = 0.0, path.c_max
        if self.smallest(hi)[0] < self.k:
            self.c = float("inf")
            self.binding = self.smallest(hi)[1]
            return
        if self.smallest(lo)[0] >= self.k:
            return
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self.smallest(mid)[0] < self.k else (lo, mid)
        self.c = hi
        self.binding = self.smallest(0.999 * hi)[1]

    def smallest(self, c: float) -> tuple[float, str]:
        """(smallest group weight at c, its label)."""
        a = lipschitz_weights(None, c=c, g=self.path.g, bounds=self.path.delta) * self.scale
        return smallest_group_weight(self.groupings, a)


def smallest_group_weight(groupings: list[tuple[list[str], np.ndarray]],
                          a: np.ndarray) -> tuple[float, str]:
    """(smallest summed weight sum_{i in group} a_i over every group, that group's label);
    (sum of a, "all records") without groups."""
    best, label = np.inf, ""
    for labels, codes in groupings:
        wts = np.bincount(codes, weights=a, minlength=len(labels))
        j = int(np.argmin(wts))
        if wts[j] < best:
            best, label = float(wts[j]), str(labels[j])
    return (best, label) if groupings else (float(np.sum(a)), "all records")
