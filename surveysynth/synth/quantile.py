"""Sequential quantile-regression synthesis with KNG (seed 004; METHODS.md section 12).

Variables are synthesized in order: the first from its quantiles alone (intercept-only model),
each later one by quantile regressions on the earlier variables. For every variable a grid of
quantiles is released with the K-norm gradient mechanism (:mod:`surveysynth.synth.kng`), as

* ``method="kng"``: every quantile independently, epsilon_j / m each;
* ``method="stepwise"``: the median first (share ``a`` of epsilon_j), then outward, each quantile
  constrained not to cross its released inner neighbour; the rest share (1 - a) epsilon_j equally;
* ``method="sandwich"``: anchor quantiles by the stepwise scheme (share ``s``; the median gets
  ``b`` of that), then every other quantile between its nearest released neighbours below and
  above; they share (1 - s) epsilon_j equally;
* ``method="nonprivate"``: exact quantile regressions (no privacy; the baseline of seed 004).

``slopes="fixed"`` keeps the median's slopes for every other quantile (only intercepts move;
Koenker 1984); ``slopes="varying"`` samples all coefficients. A synthetic record takes, for each
variable, the prediction at one quantile drawn uniformly from the grid (Pistner et al. 2018;
seed 004 Algorithm 3). Sequential composition: the total epsilon is the sum of the per-quantile
epsilons (the ledger); releasing m data sets from the same coefficients is post-processing.

Decisions taken here (see docs/kng.md):

* Constraints are checked on the vertices of the convex hull of every predictor row a synthetic
  record can have (finite: the previous variables take one of m predictions each). Linear
  constraints hold on a set iff they hold on its hull, so no synthetic record of any release can
  fall outside [lb, ub] or see crossing quantiles (stepwise/sandwich), and the constraint set
  depends only on already released coefficients, never on confidential rows. (The paper checks
  one synthetic data set; checking the hull also covers every further synthetic draw.)
* Sandwich anchors must bracket the grid (lowest anchor <= lowest quantile, highest >= highest);
  seed 004's anchors 0.05..0.99 do not bracket 0.01 and 0.03, so the default anchors are the grid
  points nearest 0.05, 0.25, 0.5, 0.75, 0.95 plus the grid's end points.
* The median (first) chain starts at a data-independent point by default (``init="independent"``);
  ``init="nonprivate"`` starts it at the exact estimate as the paper does (not DP for finite
  chains). Later quantiles start at their already released neighbour (stepwise) or the midpoint
  of their two neighbours (sandwich), which costs no privacy.
* ``sampler="exact"`` draws exactly (no MCMC, :func:`kng_sample_intercept_exact`) every quantile
  whose model moves only its intercept: all quantiles of the first variable (intercept-only
  model) in every method, and the non-median quantiles with ``slopes="fixed"``; the others
  (medians of later variables, varying slopes, plain KNG's later variables) still use MCMC. Which
  quantiles are exact is fixed by the configuration, not by the data, so the release may state it.
  The default stays ``"mcmc"`` so earlier results are reproduced unchanged.
* Input designs: the mechanism treats records as exchangeable and ignores survey weights (the
  sensitivity argument is for unweighted sums). The release has n records with weight N/n, N the
  sum of the input design's weights (or ``population_size``), or weight 1 for a DataFrame input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .kng import (
    _check_epsilon,
    _rng,
    clip_predictors,
    exact_quantile_regression,
    kng_sample,
    kng_sample_intercept_exact,
)

__all__ = ["QuantileSynthesizer", "paper_quantile_grid", "budget_ledger"]

_METHODS = ("kng", "stepwise", "sandwich", "nonprivate")
_BUDGET_KEYS = ("variables", "median", "anchors", "anchor_median")
_BUDGET_DEFAULTS = {"median": 0.8, "anchors": 0.8, "anchor_median": 0.8}


def paper_quantile_grid() -> np.ndarray:
    """Seed 004's 49 quantiles: 0.01, 0.03, ..., 0.47, 0.50, 0.53, ..., 0.97, 0.99."""
    low = np.round(np.arange(1, 48, 2) / 100, 2)
    return np.concatenate([low, [0.5], np.round(1 - low[::-1], 2)])


def _default_anchors(grid: np.ndarray) -> np.ndarray:
    targets = [0.05, 0.25, 0.5, 0.75, 0.95]
    pick = {float(grid[np.argmin(np.abs(grid - t))]) for t in targets}
    pick |= {float(grid[0]), float(grid[-1])}
    return np.array(sorted(pick))


def _fraction(value: float, name: str, upper_closed: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"budget[{name!r}] must be a number in (0, 1); got {value!r}.") from None
    ok = 0 < v <= 1 if upper_closed else 0 < v < 1
    if not ok:
        rng = "(0, 1]" if upper_closed else "(0, 1)"
        raise ValueError(
            f"budget[{name!r}] = {v} is outside {rng}: it is the fraction of a privacy budget "
            f"spent on one part; pass a value strictly inside {rng}."
        )
    return v


def _per_variable(value: Any, variables: list[str], name: str) -> list[Any]:
    if isinstance(value, Mapping):
        missing = [v for v in variables if v not in value]
        if missing:
            raise ValueError(f"budget[{name!r}] has no entry for variables {missing}.")
        return [value[v] for v in variables]
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != len(variables):
            raise ValueError(
                f"budget[{name!r}] has {len(value)} entries for {len(variables)} variables; "
                "give one per variable or a single number."
            )
        return list(value)
    return [value] * len(variables)


def budget_ledger(
    quantiles: Sequence[float],
    epsilon: float,
    method: str,
    median: float = 0.8,
    anchors: Sequence[float] | None = None,
    anchor_share: float = 0.8,
    anchor_median: float = 0.8,
) -> pd.DataFrame:
    """Per-quantile epsilons of one variable (columns ``tau, epsilon, role``), summing to epsilon.

    KNG: epsilon/m each. Stepwise: the median ``median * epsilon``, the others share the rest.
    Sandwich: the median ``anchor_median * anchor_share * epsilon``, the other anchors share
    ``(1 - anchor_median) * anchor_share * epsilon``, the rest share ``(1 - anchor_share) epsilon``.
    """
    grid = np.asarray(quantiles, dtype=float)
    m = grid.size
    eps = np.empty(m)
    role = np.empty(m, dtype=object)
    if method == "kng":
        eps[:] = epsilon / m
        role[:] = "independent"
    elif method == "stepwise":
        med = np.isclose(grid, 0.5)
        if m == 1:
            eps[:] = epsilon
        else:
            eps[med] = median * epsilon
            eps[~med] = (1 - median) * epsilon / (m - 1)
        role[:] = "stepwise"
        role[med] = "median"
    elif method == "sandwich":
        anc = np.isin(np.round(grid, 10), np.round(np.asarray(anchors, float), 10))
        med = np.isclose(grid, 0.5)
        n_anc, n_rest = int(anc.sum()), int((~anc).sum())
        share = anchor_share if n_rest > 0 else 1.0
        if n_anc == 1:
            eps[med] = share * epsilon
        else:
            eps[med] = anchor_median * share * epsilon
            eps[anc & ~med] = (1 - anchor_median) * share * epsilon / (n_anc - 1)
        if n_rest:
            eps[~anc] = (1 - share) * epsilon / n_rest
        role[:] = "sandwiched"
        role[anc] = "anchor"
        role[med] = "median"
    else:
        raise ValueError(f"method {method!r} has no privacy budget.")
    return pd.DataFrame({"tau": grid, "epsilon": eps, "role": role})


def _hull_rows(points: np.ndarray) -> np.ndarray:
    """Rows of ``points`` that are vertices of their convex hull (all unique rows if degenerate)."""
    pts = np.unique(points, axis=0)
    d = pts.shape[1]
    if d == 0 or pts.shape[0] <= d + 1:
        return pts
    if d == 1:
        return np.array([[pts[:, 0].min()], [pts[:, 0].max()]])
    from scipy.spatial import ConvexHull, QhullError

    try:
        return pts[np.sort(ConvexHull(pts).vertices)]
    except (QhullError, ValueError):
        return pts


class QuantileSynthesizer:
    """Differentially private sequential synthesis by KNG quantile regressions (seed 004).

    Parameters
    ----------
    variables : names of the numeric columns to synthesize, in synthesis order.
    quantiles : quantile grid (default: seed 004's 49 quantiles, :func:`paper_quantile_grid`).
    method : "kng", "stepwise", "sandwich" or "nonprivate".
    slopes : "fixed" or "varying" (stepwise and sandwich; plain KNG always varies all slopes).
    epsilon : total privacy budget (sum over all variables and quantiles).
    budget : dict of fractions, each a number, a list (one per variable) or a dict by variable:
        ``variables`` (shares of epsilon per variable, summing to 1; default equal),
        ``median`` (stepwise median share a, default 0.8), ``anchors`` (sandwich anchor share s,
        default 0.8), ``anchor_median`` (sandwich median share b of the anchors, default 0.8).
    C_X : public bound on the predictors of each variable's model (dict by variable or list);
        required for every variable after the first (the first is intercept-only: C_X = 1).
    bounds : dict variable -> (lb, ub), public bounds on synthetic values (default unbounded).
    anchors : sandwich anchor quantiles (must contain 0.5 and bracket the grid).
    sensitivity : "sound" (default) or "paper" (seed 004's understated 2 (1 - tau) C_X).
    n_iter : Metropolis iterations per quantile (seed 004: 1,000).
    init : "independent" (default) or "nonprivate" (paper: the median chain of stepwise/sandwich
        starts at the exact fit; plain KNG chains start data-independently either way).
    step : initial proposal scale (response units), a number or dict by variable; default
        (ub - lb)/100 with finite bounds, else 1.
    adapt : adaptive proposals (default True); False with a small ``step`` mimics the authors'
        slowly moving chains (paper reproduction only).
    sampler : "mcmc" (default: adaptive Metropolis for every quantile) or "exact": exact draws
        wherever only the intercept moves (see the module notes), MCMC elsewhere. The ledger
        and epsilon are the same; the release notes say which quantiles were exact.
    seed : int or numpy Generator.
    progress : tqdm progress bar over quantiles.
    """

    def __init__(
        self,
        variables: Sequence[str],
        quantiles: Sequence[float] | None = None,
        method: str = "stepwise",
        slopes: str = "varying",
        epsilon: float | None = 1.0,
        budget: Mapping[str, Any] | None = None,
        C_X: Mapping[str, float] | Sequence[float] | float | None = None,
        bounds: Mapping[str, tuple[float, float]] | None = None,
        anchors: Sequence[float] | None = None,
        sensitivity: str = "sound",
        n_iter: int = 1000,
        init: str = "independent",
        step: Mapping[str, float] | float | None = None,
        adapt: bool = True,
        sampler: str = "mcmc",
        seed: int | np.random.Generator | None = None,
        progress: bool = True,
    ) -> None:
        if isinstance(variables, str):
            variables = [variables]
        self.variables = list(variables)
        if not self.variables or len(set(self.variables)) != len(self.variables):
            raise ValueError(f"variables must be a non-empty list of distinct names; got {variables!r}.")
        if method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}; got {method!r}.")
        if slopes not in ("fixed", "varying"):
            raise ValueError(f"slopes must be 'fixed' or 'varying'; got {slopes!r}.")
        if sensitivity not in ("sound", "paper"):
            raise ValueError(f"sensitivity must be 'sound' or 'paper'; got {sensitivity!r}.")
        if init not in ("independent", "nonprivate"):
            raise ValueError(f"init must be 'independent' or 'nonprivate'; got {init!r}.")
        if sampler not in ("mcmc", "exact"):
            raise ValueError(f"sampler must be 'mcmc' or 'exact'; got {sampler!r}.")
        self.method, self.slopes, self.sensitivity, self.init = method, slopes, sensitivity, init
        self.sampler = sampler
        self.adapt = bool(adapt)
        self.step = step
        self.n_iter = int(n_iter)
        if self.n_iter < 1:
            raise ValueError(f"n_iter must be a positive integer; got {n_iter}.")
        grid = paper_quantile_grid() if quantiles is None else np.asarray(quantiles, dtype=float)
        grid = np.atleast_1d(grid)
        if grid.size == 0 or not np.all((grid > 0) & (grid < 1)):
            raise ValueError(f"quantiles must lie strictly between 0 and 1; got {grid.tolist()}.")
        grid = np.sort(grid)
        if np.any(np.diff(grid) <= 0):
            raise ValueError("quantiles must be distinct.")
        self.quantiles = grid
        has_median = bool(np.isclose(grid, 0.5).any())
        if method in ("stepwise", "sandwich") and not has_median:
            raise ValueError(
                f"method={method!r} starts from the median, but the quantile grid has no 0.5: "
                "add 0.5 to quantiles."
            )
        if method == "sandwich":
            anc = _default_anchors(grid) if anchors is None else np.sort(np.asarray(anchors, float))
            missing = [a for a in anc if not np.isclose(grid, a).any()]
            if missing:
                raise ValueError(f"anchors {missing} are not in the quantile grid; add them to quantiles.")
            if not np.isclose(anc, 0.5).any():
                raise ValueError("sandwich anchors must include the median 0.5.")
            if anc[0] > grid[0] + 1e-12 or anc[-1] < grid[-1] - 1e-12:
                out = grid[(grid < anc[0] - 1e-12) | (grid > anc[-1] + 1e-12)]
                raise ValueError(
                    f"sandwich anchors {anc.tolist()} do not bracket every quantile: "
                    f"{out.tolist()} lie outside [{anc[0]}, {anc[-1]}]. Add the grid's lowest and "
                    "highest quantiles to anchors."
                )
            self.anchors = grid[np.isclose(grid[:, None], anc[None, :]).any(axis=1)]
        else:
            self.anchors = None

        if method == "nonprivate":
            self.epsilon = None
        else:
            self.epsilon = _check_epsilon(epsilon, "epsilon")
        budget = dict(budget or {})
        unknown = set(budget) - set(_BUDGET_KEYS)
        if unknown:
            raise ValueError(f"unknown budget keys {sorted(unknown)}; use {list(_BUDGET_KEYS)}.")
        k = len(self.variables)
        shares = _per_variable(budget.get("variables", 1.0 / k), self.variables, "variables")
        shares = [_fraction(s, "variables", upper_closed=True) for s in shares]
        if not math.isclose(math.fsum(shares), 1.0, rel_tol=0, abs_tol=1e-9):
            raise ValueError(
                f"budget['variables'] shares sum to {math.fsum(shares)}, not 1: they split the total "
                "epsilon between variables."
            )
        self.budget = {"variables": shares}
        for key in ("median", "anchors", "anchor_median"):
            vals = _per_variable(budget.get(key, _BUDGET_DEFAULTS[key]), self.variables, key)
            self.budget[key] = [_fraction(v, key) for v in vals]

        self.C_X = self._parse_cx(C_X)
        self.bounds = {}
        for v in self.variables:
            lb, ub = (bounds or {}).get(v, (-np.inf, np.inf))
            lb = -np.inf if lb is None else float(lb)
            ub = np.inf if ub is None else float(ub)
            if not lb < ub:
                raise ValueError(f"bounds[{v!r}] = ({lb}, {ub}): need lower < upper.")
            self.bounds[v] = (lb, ub)
        extra = set(bounds or {}) - set(self.variables)
        if extra:
            raise ValueError(f"bounds given for unknown variables {sorted(extra)}.")
        self.seed = seed
        self._rng = _rng(seed)
        self.progress = bool(progress)
        self.coefficients_: dict[str, pd.DataFrame] | None = None

    # ------------------------------------------------------------------ configuration
    def _parse_cx(self, C_X: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        if isinstance(C_X, Mapping):
            extra = set(C_X) - set(self.variables)
            if extra:
                raise ValueError(f"C_X given for unknown variables {sorted(extra)}.")
            vals = [C_X.get(v) for v in self.variables]
        elif C_X is None:
            vals = [None] * len(self.variables)
        elif isinstance(C_X, (list, tuple, np.ndarray)):
            vals = list(C_X)
            if len(vals) != len(self.variables):
                raise ValueError(f"C_X has {len(vals)} values for {len(self.variables)} variables.")
        else:
            vals = [float(C_X)] * len(self.variables)
        for j, (v, c) in enumerate(zip(self.variables, vals, strict=True)):
            if c is None:
                if j == 0:
                    c = 1.0
                elif self.method != "nonprivate":
                    raise ValueError(
                        f"C_X is missing for {v!r}: KNG needs a public bound on its predictors "
                        f"{self.variables[:j]} (values above it are top-coded). Set it from public "
                        "knowledge, e.g. C_X={'" + v + "': 100}; a bound computed from the "
                        "confidential data would not be differentially private."
                    )
                else:
                    c = np.inf
            c = float(c)
            if not c >= 1:
                raise ValueError(f"C_X[{v!r}] = {c}: the bound covers the intercept, so it must be >= 1.")
            out[v] = c
        return out

    # ------------------------------------------------------------------ sampler plan
    def exact_plan(self) -> pd.DataFrame:
        """Which quantiles are drawn exactly (columns variable, tau, sampler = "exact"/"mcmc").

        Determined by the configuration only (never by the data): with ``sampler="exact"`` a
        quantile is exact when its model moves only the intercept, i.e. every quantile of the
        first (intercept-only) variable, and with ``slopes="fixed"`` (stepwise / sandwich) every
        non-median quantile of the later variables.
        """
        if self.method == "nonprivate":
            raise ValueError("method='nonprivate' samples nothing.")
        grid = self.quantiles
        med = int(np.argmin(np.abs(grid - 0.5)))
        parts = []
        for j, v in enumerate(self.variables):
            exact = np.zeros(grid.size, dtype=bool)
            if self.sampler == "exact":
                if j == 0:
                    exact[:] = True
                elif self.method in ("stepwise", "sandwich") and self.slopes == "fixed":
                    exact[:] = True
                    exact[med] = False
            parts.append(pd.DataFrame({"variable": v, "tau": grid, "sampler": np.where(exact, "exact", "mcmc")}))
        return pd.concat(parts, ignore_index=True)

    # ------------------------------------------------------------------ ledger
    def ledger(self) -> pd.DataFrame:
        """Every quantile's epsilon (columns variable, tau, epsilon, role); sums to ``epsilon``."""
        if self.method == "nonprivate":
            raise ValueError("method='nonprivate' spends no privacy budget and has no ledger.")
        parts = []
        for j, v in enumerate(self.variables):
            led = budget_ledger(
                self.quantiles,
                self.epsilon * self.budget["variables"][j],
                self.method,
                median=self.budget["median"][j],
                anchors=self.anchors,
                anchor_share=self.budget["anchors"][j],
                anchor_median=self.budget["anchor_median"][j],
            )
            led.insert(0, "variable", v)
            parts.append(led)
        return pd.concat(parts, ignore_index=True)

    @property
    def epsilon_total(self) -> float | None:
        """Sequential composition of the ledger (math.fsum of every quantile's epsilon)."""
        if self.method == "nonprivate":
            return None
        return math.fsum(self.ledger()["epsilon"].tolist())

    # ------------------------------------------------------------------ fitting
    def _frame(self, data: Any) -> tuple[pd.DataFrame, float | None]:
        total_weight = None
        if isinstance(data, pd.DataFrame):
            frame = data
        elif hasattr(data, "data") and hasattr(data, "weights"):
            frame = data.data
            total_weight = float(np.sum(data.weights))
        else:
            raise ValueError("fit() expects a pandas DataFrame or a SurveyDesign.")
        missing = [v for v in self.variables if v not in frame.columns]
        if missing:
            raise ValueError(f"variables {missing} are not columns of the data; have {list(frame.columns)[:10]}.")
        out = {}
        for v in self.variables:
            col = pd.to_numeric(frame[v], errors="coerce").to_numpy(dtype=np.float64)
            bad = ~np.isfinite(col)
            if bad.any():
                rows = frame.index[np.flatnonzero(bad)[:5]].tolist()
                raise ValueError(
                    f"column {v!r} has missing or non-numeric values in rows {rows} "
                    f"({int(bad.sum())} in all); impute or drop them before synthesis."
                )
            out[v] = col
        if frame.shape[0] < 2:
            raise ValueError("need at least two records to synthesize.")
        return pd.DataFrame(out), total_weight

    def fit(self, data: Any) -> QuantileSynthesizer:
        """Release the DP quantile-regression coefficients of every variable, in order.

        ``data``: a DataFrame or a SurveyDesign (weights are not used by the mechanism; their sum
        sets the synthetic weights). The input is never modified.
        """
        frame, total_weight = self._frame(data)
        self.n_ = frame.shape[0]
        self.total_weight_ = total_weight
        ledger = self.ledger() if self.method != "nonprivate" else None
        rng = self._rng
        grid = self.quantiles
        m = grid.size
        coefs: dict[str, pd.DataFrame] = {}
        diags = []
        hull = np.empty((1, 0))  # achievable predictor rows (without intercept)
        working = np.empty((self.n_, 0))  # one synthetic draw of the predictors (public)
        total = len(self.variables) * m
        bar = tqdm(total=total, desc=f"KNG {self.method}", disable=not self.progress)
        for j, v in enumerate(self.variables):
            preds = self.variables[:j]
            y = frame[v].to_numpy()
            X = np.column_stack([np.ones(self.n_), frame[preds].to_numpy()]) if preds else np.ones((self.n_, 1))
            Z = np.column_stack([np.ones(hull.shape[0]), hull])
            P = np.column_stack([np.ones(self.n_), working])
            lb, ub = self.bounds[v]
            eps = None if ledger is None else ledger.loc[ledger["variable"] == v, "epsilon"].to_numpy()
            B, diag = self._fit_variable(X, y, v, j, Z, P, lb, ub, eps, rng, bar)
            coefs[v] = pd.DataFrame(B, index=pd.Index(grid, name="tau"), columns=["(Intercept)", *preds])
            diags.append(diag)
            # achievable rows for the next variable and one working synthetic draw
            new_pts = np.column_stack(
                [np.repeat(hull, m, axis=0), (np.repeat(Z, m, axis=0) * np.tile(B, (Z.shape[0], 1))).sum(1)]
            )
            hull = _hull_rows(new_pts)
            k = rng.integers(0, m, self.n_)
            working = np.column_stack([working, (P * B[k]).sum(1)])
        bar.close()
        self.coefficients_ = coefs
        self.diagnostics_ = pd.concat(diags, ignore_index=True)
        self.hull_ = hull
        return self

    def _fit_variable(self, X, y, v, j, Z, P, lb, ub, eps, rng, bar):
        grid = self.quantiles
        m, p = grid.size, X.shape[1]
        cx = self.C_X[v]
        B = np.full((m, p), np.nan)
        rows = []
        if self.method == "nonprivate":
            # no clipping: the non-private baseline of seed 004 fits the raw data
            for i, tau in enumerate(grid):
                B[i] = exact_quantile_regression(X, y, tau)
                bar.update(1)
            return B, pd.DataFrame({"variable": v, "tau": grid, "accept_rate": np.nan, "sampler": "exact qr"})

        kw = dict(
            C_X=cx, sensitivity=self.sensitivity, n_iter=self.n_iter, check_X=Z,
            proposal_rows=P, lb=lb, ub=ub, adapt=self.adapt,
            step=self.step.get(v) if isinstance(self.step, Mapping) else self.step,
        )
        accept = np.full(m, np.nan)
        plan = self.exact_plan()
        exact = plan.loc[plan["variable"] == v, "sampler"].to_numpy() == "exact"

        def draw(i, **extra):
            child = np.random.default_rng(rng.integers(0, 2**63))
            if exact[i]:
                # only the intercept moves: fixed slopes are those of the starting point (the
                # released neighbour(s), which all carry the median's slopes); none if p == 1
                init = extra.get("init")
                slope_vals = None if p == 1 else np.asarray(init, dtype=float)[1:]
                res = kng_sample_intercept_exact(
                    X, y, grid[i], eps[i], cx, slopes=slope_vals, sensitivity=self.sensitivity,
                    lower=extra.get("lower"), upper=extra.get("upper"), check_X=Z, lb=lb, ub=ub,
                    seed=child,
                )
            else:
                res = kng_sample(X, y, grid[i], eps[i], seed=child, **kw, **extra)
            B[i] = res.beta
            accept[i] = res.accept_rate
            bar.update(1)

        def start(i):
            if self.init == "nonprivate":
                return exact_quantile_regression(clip_predictors(X, cx), y, grid[i])
            return None

        med = int(np.argmin(np.abs(grid - 0.5)))
        if self.method == "kng":
            for i in range(m):  # the paper's plain KNG starts every chain at 0
                draw(i, init=None, slopes="varying")
        else:
            main = np.arange(m) if self.method == "stepwise" else np.flatnonzero(
                np.isclose(grid[:, None], self.anchors[None, :]).any(axis=1)
            )
            draw(med, init=start(med), slopes="varying")
            fixed = "fixed" if self.slopes == "fixed" else "varying"
            lower_main = [i for i in main[::-1] if i < med]
            upper_main = [i for i in main if i > med]
            prev = med
            for i in lower_main:
                draw(i, init=B[prev], upper=B[prev], slopes=fixed)
                prev = i
            prev = med
            for i in upper_main:
                draw(i, init=B[prev], lower=B[prev], slopes=fixed)
                prev = i
            if self.method == "sandwich":
                done = np.zeros(m, dtype=bool)
                done[main] = True
                order = [i for i in range(med - 1, -1, -1) if not done[i]] + [
                    i for i in range(med + 1, m) if not done[i]
                ]
                for i in order:
                    lo = max(k for k in range(i) if done[k])
                    hi = min(k for k in range(i + 1, m) if done[k])
                    draw(i, init=0.5 * (B[lo] + B[hi]), lower=B[lo], upper=B[hi], slopes=fixed)
                    done[i] = True
        rows = pd.DataFrame(
            {"variable": v, "tau": grid, "accept_rate": accept, "sampler": np.where(exact, "exact", "mcmc")}
        )
        return B, rows

    def _median_mcmc(self) -> bool:
        """Does some stepwise/sandwich median chain run by MCMC (where init='nonprivate' acts)?"""
        if self.method not in ("stepwise", "sandwich"):
            return False
        plan = self.exact_plan()
        med = plan["tau"].to_numpy() == self.quantiles[int(np.argmin(np.abs(self.quantiles - 0.5)))]
        return bool((plan.loc[med, "sampler"] == "mcmc").any())

    def _sampler_notes(self) -> list[str]:
        """Release notes on how the quantiles were sampled (exact draws vs finite MCMC chains)."""
        caveat = (
            f"MCMC was run for a fixed {self.n_iter} iterations per quantile and not to verified "
            "convergence; the epsilon-DP guarantee holds only to the extent the chains converged."
        )
        if self.sampler == "mcmc":
            return [caveat]
        plan = self.exact_plan()
        is_exact = plan["sampler"] == "exact"
        if is_exact.all():
            return [
                "every quantile was drawn exactly from its KNG density (only intercepts move; no "
                "MCMC), so the epsilon-DP guarantee holds without a convergence caveat."
            ]
        m = self.quantiles.size
        med_tau = float(self.quantiles[int(np.argmin(np.abs(self.quantiles - 0.5)))])

        def describe(mask: pd.Series) -> str:
            parts = []
            for v in self.variables:
                sel = mask & (plan["variable"] == v)
                k = int(sel.sum())
                if k == 0:
                    continue
                taus = plan.loc[sel, "tau"].to_numpy()
                if k == m:
                    what = f"all {m} quantiles"
                elif k == 1 and np.isclose(taus[0], med_tau):
                    what = "the median"
                elif k == m - 1 and not np.isclose(taus, med_tau).any():
                    what = f"all {m} quantiles but the median"
                else:
                    what = "tau = " + ", ".join(f"{t:g}" for t in taus)
                parts.append(f"{v}: {what}")
            return "; ".join(parts)

        notes = []
        if is_exact.any():
            notes.append(
                "drawn exactly from the KNG density (only the intercept moves; no MCMC, so the "
                f"epsilon-DP guarantee holds without a convergence caveat): {describe(is_exact)}."
            )
        notes.append(
            f"drawn by MCMC ({describe(~is_exact)}): the chains ran a fixed {self.n_iter} iterations "
            "per quantile and not to verified convergence; for these quantiles the epsilon-DP "
            "guarantee holds only to the extent the chains converged."
        )
        return notes

    # ------------------------------------------------------------------ synthesis
    def _check_fitted(self) -> None:
        if self.coefficients_ is None:
            raise ValueError("call fit(data) before synthesizing.")

    def synthesize(self, m: int = 1, n: int | None = None) -> list[pd.DataFrame]:
        """``m`` synthetic data sets of ``n`` records (default the input's size).

        Each record takes, for each variable, the prediction at a quantile drawn uniformly from
        the grid, given its synthetic predictors. Post-processing of the released coefficients.
        """
        self._check_fitted()
        m = int(m)
        if m < 1:
            raise ValueError(f"m must be a positive integer; got {m}.")
        n = self.n_ if n is None else int(n)
        if n < 1:
            raise ValueError(f"n must be positive; got {n}.")
        out = []
        q = self.quantiles.size
        for _ in range(m):
            Zs = np.ones((n, 1))
            for v in self.variables:
                B = self.coefficients_[v].to_numpy()
                k = self._rng.integers(0, q, n)
                Zs = np.column_stack([Zs, (Zs * B[k]).sum(1)])
            out.append(pd.DataFrame(Zs[:, 1:], columns=self.variables))
        return out

    def release(self, m: int = 1, population_size: float | None = None):
        """A :class:`surveysynth.release.SyntheticRelease` of ``m`` fully synthetic data sets.

        Each set is a SurveyDesign with n equally weighted records: weight N/n with N =
        ``population_size`` or the sum of the input design's weights, or weight 1 for a DataFrame
        input. The privacy record carries the per-quantile ledger (epsilons only; MCMC
        diagnostics stay with the synthesizer because they are computed from confidential data).
        """
        from ..design import SurveyDesign
        from ..release import SyntheticRelease

        sets = self.synthesize(m)
        N = population_size if population_size is not None else self.total_weight_
        w = 1.0 if N is None else float(N) / self.n_
        designs = [SurveyDesign(df, weights=np.full(df.shape[0], w)) for df in sets]
        return SyntheticRelease(designs, kind="full", privacy=self.privacy_record(m))

    def privacy_record(self, m: int = 1) -> dict[str, Any]:
        """The ``privacy`` dict of the release (see SyntheticRelease)."""
        self._check_fitted()
        notes: list[str] = []
        seed = self.seed if isinstance(self.seed, (int, np.integer)) or self.seed is None else "Generator"
        if self.method == "nonprivate":
            return {
                "mechanism": "quantile-regression (non-private)",
                "guarantee": "none",
                "epsilon": None,
                "delta_alpha": None,
                "m": int(m),
                "seed": seed,
                "notes": ["exact quantile regressions: no privacy protection."],
                "ledger": [],
            }
        led = self.ledger()
        notes.append(
            f"sequential composition over {len(self.variables)} variables x {self.quantiles.size} "
            f"quantiles: total epsilon = {self.epsilon_total:.6g}; the {int(m)} synthetic data "
            "sets are post-processing of one set of released coefficients."
        )
        notes.extend(self._sampler_notes())
        if self.sensitivity == "paper":
            notes.append(
                "sensitivity='paper' (2(1-tau)C_X) understates the gradient sensitivity for "
                "tau > 0.5: the stated epsilon is NOT guaranteed for those quantiles."
            )
        if self.init == "nonprivate" and self._median_mcmc():
            notes.append(
                "first chains started at the non-private estimates (paper reproduction): finite "
                "chains then leak information beyond the stated epsilon."
            )
        if self.method == "kng":
            notes.append("plain KNG: quantiles are released independently and may cross.")
        notes.append(
            "predictors top-coded at C_X = "
            + ", ".join(f"{v}: {self.C_X[v]:g}" for v in self.variables[1:])
            + "; survey weights are not used by the mechanism."
            if len(self.variables) > 1
            else "survey weights are not used by the mechanism."
        )
        return {
            "mechanism": f"kng-{self.method}" + ("" if self.method == "kng" else f"-{self.slopes}"),
            "guarantee": "kng",
            "epsilon": self.epsilon_total,
            "delta_alpha": None,
            "m": int(m),
            "seed": seed,
            "notes": notes,
            "ledger": led.to_dict("records"),
        }
