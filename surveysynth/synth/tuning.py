"""Tuning the risk-weight constant c to a target Lipschitz bound: the one tuner
(:func:`fit_to_target`, :func:`tune`) that FBS, FBP, PBP and every Sequential step call, its
pluggable ``predict`` step, the log-linear root finder and the path of evaluations, the
cell-weight floor and the refusals (docs/pseudo_posterior.md, "Tuning")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..privacy.lipschitz import lipschitz_weights

__all__ = ["CellWeightFloor", "Proposal", "TargetUnreachableError", "TunerSettings", "TuningPath",
           "default_predict", "fit_to_target", "log_spread", "loglinear_root", "smallest_group_weight",
           "tune"]


def loglinear_root(logc: np.ndarray, logf: np.ndarray, target: float,
                    slope_prior: float = 0.7, prior_weight: float = 0.05) -> float:
    """Root c of the least-squares line log f = a + b log c through noisy evaluations.

    The slope is shrunk towards ``slope_prior`` with the weight of a spread of
    ``prior_weight`` in sum (log c - mean)^2 (so evaluations at nearly the same c still give a
    stable slope) and kept in [0.25, 2]; the root is then
    exp(mean log c + (log target - mean log f) / b): near the root it moves by the mean
    residual of all evaluations, which averages the noise of the max over draws.
    """
    if not (np.isfinite(logc).all() and np.isfinite(logf).all() and np.isfinite(target)
            and target > 0):
        raise ValueError(f"internal error: the log-linear root needs finite points and a "
                         f"target > 0; got log c = {list(logc)}, log Delta_alpha = "
                         f"{list(logf)}, target {target!r}.")
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
        #: a predictor's scratch space for one tuning run (e.g. the shortcut's contributions)
        self.cache: dict = {}

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
        """Add the evaluation (c, f) to the regression. Only finite c > 0 and finite f > 0
        join: an infinite bound (a record with alpha_i > 0 whose |log p| was infinite at some
        draw) has no logarithm to regress, and one such point made every later root NaN
        (inf - inf in the mean residual; the apistrat Sequential crash, docs/benchmarks.md)."""
        if (np.isfinite(c) and np.isfinite(f) and c > 0 and f > 0
                and (not self.logc or self.logc[-1] != np.log(c))):
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
        plug-in root from this fit's bounds, damped to [c/2, 2c]. After a fit whose bound was
        infinite (above any target, and not a point of the line) the step is the largest
        allowed down: c/2."""
        _check_eval(c, f)
        if not np.isfinite(f):
            return 0.5 * c
        self.add(c, f)
        if len(self.logc) >= 2:
            c_new = loglinear_root(np.array(self.logc), np.array(self.logf), goal)
        else:
            c_new = self.plug_in(R, goal)
        return float(np.clip(c_new, 0.5 * c, min(2.0 * c, self.c_max))) if c > 0 else c_new

    def root(self, c: float, f: float, goal: float) -> float:
        """c aimed at ``goal`` from the regression (slope 0.7 with one point), damped; c/2
        after an infinite bound (see :meth:`next_c`)."""
        _check_eval(c, f)
        if not np.isfinite(f):
            return 0.5 * c
        if len(self.logc) < 2:
            c_new = float(np.exp(np.log(c) + (np.log(goal) - np.log(f)) / 0.7))
        else:
            c_new = loglinear_root(np.array(self.logc), np.array(self.logf), goal)
        return float(np.clip(c_new, 0.5 * c, min(2.0 * c, self.c_max))) if c > 0 else c_new


def _check_eval(c: float, f: float) -> None:
    """A proposal needs a finite c >= 0 and a bound that is not NaN (+inf is allowed: the fit
    is above any target)."""
    if not (np.isfinite(c) and c >= 0) or np.isnan(f):
        raise ValueError(f"internal error: a new c needs the last fit's finite c >= 0 and a "
                         f"bound that is not NaN; got c = {c!r}, Delta_alpha = {f!r}.")


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


# --------------------------------------------------------------------------------------------
# the one tuner: FBS, FBP, PBP and every Sequential step call :func:`fit_to_target`


class TargetUnreachableError(ValueError):
    """The privacy target cannot be met by risk weighting on this sample (or the weights it
    would need leave a cell's parameters to the prior); the message says what is reachable."""


@dataclass(frozen=True)
class TunerSettings:
    """What the tuner reads of its caller: ``name`` (prefix of messages), ``tol`` (the
    one-sided band [(1 - tol) target, target]), ``g`` (alpha's floor), ``max_refits`` (weighted
    fits in all, tuning and final), and the cell-weight floor (``min_cell_weight`` records'
    worth of likelihood in every group of ``groupings``, alpha scaled by ``scale``; k = 0 or no
    groupings: no floor)."""

    name: str
    tol: float = 0.10
    g: float = 0.0
    max_refits: int = 20
    min_cell_weight: float = 0.0
    groupings: tuple = ()
    scale: Any = 1.0
    #: try final fits at the predictor's c before any tuning fit (see :func:`tune`)
    direct_final: bool = False
    direct_tries: int = 2
    #: end tuning also when a tuning fit lies within the bound's own noise of the aim (see
    #: :func:`in_tuning_band`); off: the band is tol only (the refit rule before issue 39)
    noise_band: bool = False

    def floor(self, path: TuningPath) -> CellWeightFloor:
        return CellWeightFloor(path, list(self.groupings), self.scale, self.min_cell_weight)


@dataclass
class Proposal:
    """What a ``predict`` step sees when it proposes the next c.

    ``stage``: "first" (before any weighted fit: c and f are None, R the unweighted bounds),
    "tuning" (after a tuning fit at c with bound f and per-record bounds R), "final" (the first
    final fit's c, aimed at ``goal`` below the target), "refinal" (after a final fit above the
    target). ``path`` holds every evaluation so far (this one included). ``loglik`` gives the
    UNWEIGHTED fit's per-record log-likelihood draws, ``loglik(slice_of_draws) -> (S_s, n)``,
    and ``draws`` their number (None where the caller has none); the default predictor does not
    use them (an importance-reweighting predictor does). Whatever c is proposed, it is clipped
    to the cell-weight floor and the bound released is still the final fit's own.
    ``c_min``: that floor (the cell-weight floor's c; 0 without one). ``note``: a predictor
    may describe its choice here (e.g. the tuning shortcut's k-hat and real/predicted ratio);
    the tuner writes it into the tuning path's row of the fit at the proposed c.
    """

    stage: str
    path: TuningPath
    c: float | None
    f: float | None
    goal: float
    R: np.ndarray
    loglik: Callable[[slice], np.ndarray] | None = None
    draws: int | None = None
    c_min: float = 0.0
    note: dict = field(default_factory=dict)
    #: (n,) column of each record in ``loglik``'s output when it gives one column per
    #: distinct pattern of records (Sequential); None: one column per record
    loglik_inv: np.ndarray | None = None
    #: set by a predictor whose c may be used for a FINAL fit directly, with no tuning fit
    #: before it (stage "direct"; :class:`TunerSettings` ``direct_final``)
    direct: bool = False


def default_predict(p: Proposal) -> float:
    """Today's rule: the plug-in root on the unweighted bounds first; then the log-linear
    regression through every fit (:meth:`TuningPath.next_c`, damped); the first final fit from
    the regression's root (:meth:`TuningPath.root`)."""
    if p.stage == "first":
        g = p.path.g
        return 0.0 if g > 0 and p.path.predict(0.0, p.path.R0) > p.path.target else \
            p.path.plug_in(p.path.R0, p.goal)
    if p.stage == "direct" and p.c is None:
        return default_predict(Proposal("first", p.path, None, None, p.goal, p.R))
    if p.stage in ("final", "direct"):
        return p.path.root(p.c, p.f, p.goal)
    return p.path.next_c(p.c, p.f, p.goal, p.R)


Predictor = Callable[[Proposal], float]
#: an evaluation: (Delta_alpha, alpha, per-record alpha_i R_i, the fit, R) of one weighted fit
Evaluate = Callable[[Any, bool], tuple]


def fit_to_target(evaluate: Evaluate, target: float | None, delta: np.ndarray,
                  chain_maxima: Callable[[Any, np.ndarray], np.ndarray],
                  settings: TunerSettings, *, c: float = 1.0, base: np.ndarray | None = None,
                  predict: Predictor = default_predict,
                  loglik: Callable[[slice], np.ndarray] | None = None,
                  loglik_draws: int | None = None,
                  report: dict | None = None,
                  annotate: Callable[[dict], None] | None = None,
                  loglik_inv: np.ndarray | None = None) -> tuple[float | None, tuple]:
    """The released weighted fit of one model: ``(c, (Delta_alpha, alpha, per_record, res, R))``.

    ``evaluate(c, final)`` runs one alpha-weighted fit (c None: alpha = 1) with fresh draws;
    ``delta`` are the unweighted fit's per-record bounds, ``base`` what the weights normalise
    (default ``delta``; Sequential's identification-risk weights pass the risks).
    Without a target: one final fit at ``c``. With a target whose unweighted bound is below it
    by more than tol: no risk weighting (c None, alpha = 1), the bound that of a final fit with
    fresh draws, and only when noise puts that above the target is c tuned (:func:`tune`).
    Otherwise :func:`tune`. Whatever the path, a fit above the target is never returned (the
    privacy invariant, written here once for every synthesizer). ``annotate(note)``: called
    right after a fit whose c a predictor described in ``Proposal.note`` (the caller adds the
    note to that fit's row of its tuning path, e.g. :meth:`WeightedFits.annotate`)."""
    if target is None:
        return c, evaluate(c, True)
    c_best: float | None = None
    tol = float(settings.tol)
    if np.isfinite(delta).all() and float(np.max(delta)) < target * float(np.exp(-tol)):
        out = evaluate(None, True)
        if out[0] > target:
            c_best, out = tune(evaluate, target, delta if base is None else base, chain_maxima,
                               settings, predict=predict, loglik=loglik,
                               loglik_draws=loglik_draws, report=report, annotate=annotate,
                               loglik_inv=loglik_inv)
    else:
        c_best, out = tune(evaluate, target, delta if base is None else base, chain_maxima,
                           settings, predict=predict, loglik=loglik, loglik_draws=loglik_draws,
                           report=report, annotate=annotate, loglik_inv=loglik_inv)
    if not out[0] <= target:
        raise TargetUnreachableError(
            f"{settings.name}: internal error: a fit with Delta_alpha {out[0]:.4g} above the "
            f"target {target:.4g} reached release; nothing released.")
    return c_best, out


def _proposed_c(name: str, predict: Predictor, p: Proposal) -> float:
    """The predictor's c for proposal ``p``, refused unless it is a finite number >= 0 (never
    let a NaN become a c); a predictor's ValueError names the step."""
    try:
        c_new = float(predict(p))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc
    if not (np.isfinite(c_new) and c_new >= 0):
        raise ValueError(
            f"{name}: internal error: the {p.stage} proposal gave c = {c_new!r} (last fit: "
            f"c = {p.c!r}, Delta_alpha = {p.f!r}; goal {p.goal:.4g}; regression points log c = "
            f"{p.path.logc}, log Delta_alpha = {p.path.logf}); nothing released.")
    return c_new


def tune(evaluate: Evaluate, target: float, delta: np.ndarray,
         chain_maxima: Callable[[Any, np.ndarray], np.ndarray], settings: TunerSettings, *,
         predict: Predictor = default_predict,
         loglik: Callable[[slice], np.ndarray] | None = None, loglik_draws: int | None = None,
         report: dict | None = None,
         annotate: Callable[[dict], None] | None = None,
         loglik_inv: np.ndarray | None = None) -> tuple[float, tuple]:
    """Choose c on tuning fits, then a final fit whose bound is reported (never > target).

    Direct final fits first when ``settings.direct_final`` and the predictor sets
    ``Proposal.direct`` (the tuning shortcut): :func:`_start` says what is released then; the
    rest of this docstring is the path when they are not used or not released.

    Tuning. Delta_alpha(c) = max_i alpha_i(c) R_i(c), with R_i(c) = max_s |log p_i| over
    the draws of the fit at c, increases with c. The next c comes from ``predict`` (default
    :func:`default_predict`: first the plug-in equation max_i alpha_i(c') R_i = aim solved by
    bisection on the unweighted bounds; from the second refit on the root of a least-squares
    line through ALL evaluations so far, log Delta_alpha = a + b log c, :func:`loglinear_root`;
    R_i grows as c falls, so measured slopes b are ~0.5-0.9, and the regression pools the noise
    of all refits; steps damped to [c/2, 2c]). Tuning aims at the middle of the band,
    aim = (1 - tol/2) target, and stops at the first tuning fit within tol x aim of it (tuning
    fits are never reported, so this stopping rule selects nothing that is published; it only
    has to place c well).

    Final fit. The relative spread s of the bound is measured from the per-chain maxima
    of the last tuning fit (SD of their logs: conservative, since the reported max over
    all chains varies less than one chain's). The final fit aims at
    target * exp(-max(tol/2, 1.645 s)) through the same log-linear line; its bound is
    reported as it is when <= target. Above the target it is not released: the rejected fit
    joins the regression, the margin widens to 1.645 x the residual SD of the regression
    (the fit-to-fit noise, which per-chain maxima can understate: measured 2% across
    chains vs ~5% across fits at n = 1,000), c is lowered to the new aim and a new final
    fit with fresh draws is run, up to ``max_refits`` fits in all (then
    TargetUnreachableError).

    Reachability: with g = 0, c -> 0 gives alpha -> 0 and any target > 0 is reachable;
    with g > 0 the floor is the bound at c = 0 (alpha = g): a target below it raises
    TargetUnreachableError saying what is reachable. Above
    c_max = (1 - g) / (1 - D_(2)) every record but the riskiest has alpha = 1 and the bound
    stops growing. A tuning fit at c_max whose bound is below the band (f < (1 - tol)
    target) is not an error: tuning stops there and the final fit (fresh draws, as every
    final fit) is run at c = c_max; its bound is reported as it is when <= target, and above
    the target it is rejected and c lowered like any final fit. c never goes below the
    cell-weight floor (:class:`CellWeightFloor`). ``report`` (a dict) receives
    "cell_weight_floor" and "bound_spread" as they become known (also when a refusal follows).
    """
    report = {} if report is None else report
    name, tol, g = settings.name, float(settings.tol), float(settings.g)
    max_refits = int(settings.max_refits)
    finite = np.isfinite(delta)
    if not finite.any():
        raise TargetUnreachableError(
            f"{name}: no record has a finite log density in the unweighted fit, so no risk "
            "weight can be formed; nothing to fit. Fix: check this variable's model and "
            "bounds against its data.")
    path = TuningPath(delta, g, target)
    floor = settings.floor(path)
    report["cell_weight_floor"] = {"k": floor.k, "c_min": floor.c, "binding": floor.binding}
    c_lo = floor.c
    if not np.isfinite(c_lo):
        raise TargetUnreachableError(
            f"{name}: {floor.binding} cannot keep {floor.k:g} records' worth of "
            "likelihood at any c (with g = 0 the riskiest record has alpha = 0), so risk "
            "weighting would leave its parameters to the prior and its synthetic values "
            "far from the data. Fix: fewer cells (effects='main') or collapsed levels, a "
            "target above the unweighted bound (no weighting), or min_cell_weight=0 "
            "(not recommended: prior-driven synthetic values).")

    pending: dict = {}
    last_direct = [False]

    def propose(stage: str, c: float | None, f: float | None, goal: float, R: np.ndarray) -> float:
        p = Proposal(stage, path, c, f, goal, R, loglik, loglik_draws, c_min=c_lo,
                     loglik_inv=loglik_inv)
        c_new = max(_proposed_c(name, predict, p), c_lo)
        last_direct[0] = bool(p.direct)
        pending.clear()
        pending.update({"stage": stage, **p.note, "c_used": c_new} if p.note else {})
        return c_new

    def fit(c_fit: float, final: bool) -> tuple:
        out = evaluate(c_fit, final)
        check_not_nan(name, c_fit, out)
        if pending and annotate is not None:
            annotate(dict(pending))
        pending.clear()
        return out

    aim = (1.0 - tol / 2.0) * target
    # --- direct final fits (settings.direct_final), then tuning fits (never reported)
    released, c, last, fits, tuning, ceiling = _start(
        settings, target, aim, path, floor, propose, fit, last_direct, chain_maxima,
        annotate, report)
    if released is not None:
        return released
    while tuning and fits < max_refits - 1:
        out = fit(c, False)
        fits += 1
        check_reach(name, path, c, out[0], target)
        check_cell_floor(name, floor, c, out[0], target)
        check_floor(name, path, c, out[0], target)
        last = (c, out)
        if in_tuning_band(settings, out, aim, chain_maxima):
            break
        if at_ceiling(path, c, out[0], target, tol):
            ceiling = True   # below the band at c_max: the final fit goes to c_max
            break
        path.add(c, out[0])
        c = propose("tuning", c, out[0], aim, out[4])
    if last is None:
        raise TargetUnreachableError(f"{name}: max_refits={max_refits} leaves no "
                                     "room for a final fit; use max_refits >= 2.")
    c, out = last
    path.add(c, out[0])
    # --- margin from the spread of the bound across chains
    s_rel = _chain_spread(chain_maxima, out, tol)
    margin = max(tol / 2.0, 1.645 * s_rel)
    goal = target * float(np.exp(-margin))
    spread = {"relative_sd_chain_max": s_rel, "margin": margin, "aim": goal, "ceiling": ceiling}
    report["bound_spread"] = spread
    if ceiling:
        pending.clear()
    c_final = c if ceiling else propose("final", c, out[0], goal, out[4])
    # --- final fits: reported as they are when <= target
    while fits < max_refits:
        out = fit(c_final, True)
        fits += 1
        if out[0] <= target:
            return c_final, out
        # at the cell floor a lower c is not allowed, and refitting at the same c until a
        # draw set happens to fall below the target would select the reported bound
        check_cell_floor(name, floor, c_final, out[0], target)
        # rejected: the fit-to-fit noise was larger than the chains suggested; widen the
        # margin to the residual spread of the regression through every fit so far
        path.add(c_final, out[0])
        margin = max(margin, 1.645 * path.residual_sd())
        goal = target * float(np.exp(-margin))
        spread.update(margin=margin, aim=goal)
        c_final = propose("refinal", c_final, out[0], goal, out[4])
    if not np.isfinite(out[0]):
        raise TargetUnreachableError(
            f"{name}: after {max_refits} fits no final fit had Delta_alpha <= target "
            f"{target:.4g}: the last fit's bound was infinite (records "
            f"{_inf_records(out)} have alpha > 0 and an infinite |log p| at some draw). "
            "At small c the weighted posterior drifts towards the prior, where such draws "
            "occur. Fix: a larger target (target_epsilon), fewer predictors for this "
            "variable, or check those records against its model and bounds.")
    raise TargetUnreachableError(
        f"{name}: after {max_refits} fits no final fit had Delta_alpha <= target "
        f"{target:.4g} (last {out[0]:.4g}). The bound is noisy at this sample size: raise "
        "max_refits or draws, or a larger tol (a lower aim).")


def in_tuning_band(settings: TunerSettings, out: tuple, aim: float,
                   chain_maxima: Callable) -> bool:
    """Whether a tuning fit ends tuning: its bound f within tol of the aim, |f - aim| <= tol
    aim; with ``settings.noise_band`` also when |log(f / aim)| <= 1.645 s, s the relative
    spread of this fit's per-chain maxima (:func:`log_spread`, the final fit's margin
    statistic).

    Why: where the bound's fit-to-fit noise is larger than the band (small files: 20-30% at
    200 records), a fit at the right c lands within tol of the aim only by chance (about one
    time in three at 25% noise), and further tuning fits chase that noise; the final fit's c
    comes from the log-linear line through every fit and its aim sits 1.645 s below the
    target, so a tuning fit within 1.645 s of the aim is as good a last point as the band can
    give. Measured on the stand-in of tests/test_tuning_noise_band.py (40 seeds, fit-to-fit
    noise 25%, target 3): 3.75 fits per release instead of 5.15 with the shortcut (released
    bound mean 2.104 vs 2.105), 4.72 instead of 6.58 with a shortcut 4x off (at most 10 fits
    instead of 20), 3.42 instead of 4.83 with the refit rule (mean 1.98 vs 2.06); with 8% noise
    the shortcut's fits are the same call for call, the refit rule's 3.15 vs 3.20. Where the
    bound is quiet (1.645 s < tol) nothing changes. Only which fit ends tuning depends on
    this; what is released is decided as before (the final fit's own bound, <= target).
    Sequential uses it with ``tuning="shortcut"`` (its default); FBS, FBP and PBP do not
    (their seeded releases and reproduced tables stay as they are)."""
    f = float(out[0])
    if abs(f - aim) <= float(settings.tol) * aim:
        return True
    if not settings.noise_band or not (np.isfinite(f) and f > 0):
        return False
    s = _chain_spread(chain_maxima, out, None)
    return s is not None and abs(float(np.log(f / aim))) <= 1.645 * s


def log_spread(maxima: Any, default: float | None = None) -> float | None:
    """The relative spread of a bound: the SD of the logs of its per-chain maxima, over the
    finite positive ones (an infinite chain max has no log); ``default`` with fewer than two."""
    m = np.asarray(maxima, dtype=float)
    m = m[np.isfinite(m) & (m > 0)]
    return float(np.std(np.log(m), ddof=1)) if m.size > 1 else default


def _chain_spread(chain_maxima: Callable, out: tuple, default: float | None) -> float | None:
    """:func:`log_spread` of a fit's per-chain maxima of its weighted bound."""
    return log_spread(chain_maxima(out[3], out[1]), default)


def _start(settings: TunerSettings, target: float, aim: float, path: TuningPath,
           floor: CellWeightFloor, propose: Callable, fit: Callable, last_direct: list,
           chain_maxima: Callable, annotate: Callable | None, report: dict) -> tuple:
    """The start of :func:`tune`: ``(released, c, last, fits, tuning, ceiling)``.

    With ``settings.direct_final`` a predictor that can place c without a tuning fit (the
    tuning shortcut, which sets ``Proposal.direct``) proposes the FINAL fit's c straight away,
    aimed at target x exp(-tol/2). Such a fit's fresh draws played no part in choosing its c
    (only the unweighted fit and earlier unreleased fits did), so it is released as any final
    fit is, when its bound lies in the band [(1 - tol) target, target] (or at or below the
    target at c_max): ``released`` = (c, out). Outside the band it is not released and becomes
    a point of the path, as a tuning fit would be (above the target: the margin widens as for a
    rejected final fit; below the band: refused rather than released with a warning, so that a
    prediction that is too cautious costs a fit, not utility). The predictor proposes again
    (corrected by real / predicted over the fits so far), up to ``settings.direct_tries``
    times; then tuning continues from those fits (``last``: the last of them; within the
    tuning band it serves as the last tuning fit and no further tuning fit is run).
    Otherwise (or when the predictor does not set ``direct``): the first tuning c."""
    name, tol, max_refits = settings.name, float(settings.tol), int(settings.max_refits)
    last, fits = None, 0
    if settings.direct_final:
        margin = tol / 2.0
        goal = target * float(np.exp(-margin))
        c = propose("direct", None, None, goal, path.R0)
        while last_direct[0] and fits < int(settings.direct_tries) and fits < max_refits - 1:
            out = fit(c, True)
            fits += 1
            f = out[0]
            top = c >= path.c_max / 1.0001 - 1e-12
            if f <= target and (f >= (1.0 - tol) * target or top):
                report["bound_spread"] = {
                    "relative_sd_chain_max": _chain_spread(chain_maxima, out, None),
                    "margin": margin, "aim": goal, "ceiling": bool(top), "direct": True}
                return (c, out), c, None, fits, False, False
            if annotate is not None:
                annotate({"role": "direct final, not released (" + (
                    "above the target)" if f > target else "below the band)")})
            # (check_floor's flat-map test is left to the tuning fits: direct fits jump, and two
            # of them far apart at large c can look flat where the map is only saturated)
            check_reach(name, path, c, f, target)
            check_cell_floor(name, floor, c, f, target)
            last = (c, out)
            path.add(c, f)
            if f > target:
                margin = max(margin, 1.645 * path.residual_sd())
                goal = target * float(np.exp(-margin))
            c = propose("direct", c, f, goal, out[4])
    if last is None:
        return None, propose("first", None, None, aim, path.R0), None, fits, True, False
    c0, out0 = last
    ceiling = at_ceiling(path, c0, out0[0], target, tol)
    tuning = not in_tuning_band(settings, out0, aim, chain_maxima) and not ceiling
    # the first tuning c as without direct fits ("first": no damping from a direct fit that
    # may have been far off; the shortcut corrects it by the direct fits' real / predicted)
    c = propose("first", None, None, aim, path.R0) if tuning else c0
    return None, c, last, fits, tuning, ceiling


def _inf_records(out: tuple, k: int = 5) -> list[int]:
    """The first ``k`` records (positions) with alpha_i > 0 and a non-finite R_i."""
    alpha, R = np.asarray(out[1]), np.asarray(out[4])
    return np.flatnonzero((alpha > 0) & ~np.isfinite(R))[:k].tolist()


def check_not_nan(name: str, c: float | None, out: tuple) -> None:
    """Refuse a weighted fit whose bound is NaN: some record with alpha_i > 0 has a NaN log
    density at some draw (an overflow in the model's log density). NaN is not a bound, and
    fed to the tuner it would become a NaN c. A fit with a non-NaN bound passes."""
    if not np.isnan(out[0]):
        return
    alpha, R = np.asarray(out[1]), np.asarray(out[4])
    rows = np.flatnonzero((alpha > 0) & np.isnan(R))[:5].tolist()
    raise TargetUnreachableError(
        f"{name}: the weighted fit at c = {c!r} has Delta_alpha = NaN: records {rows} have a "
        "NaN log density at some draw (an overflow in the model's log density at extreme "
        "parameter values); NaN is not a bound, nothing released. At small c every alpha is "
        "small and the weighted posterior drifts towards the prior, where such draws "
        "occur: the target "
        "is then below what weighting reaches for this variable. Fix: a larger target "
        "(target_epsilon), fewer predictors for this variable, or check those records "
        "against its model and bounds.")


def check_cell_floor(name: str, floor: CellWeightFloor, c: float, f: float,
                     target: float) -> None:
    """Refuse when the fit at the smallest allowed c is still above the target."""
    if f > target and floor.c > 0 and c <= floor.c * (1 + 1e-9):
        raise TargetUnreachableError(
            f"{name}: target Delta_alpha {target:.4g} needs smaller risk weights than "
            f"min_cell_weight = {floor.k:g} allows: at c = {c:.3g}, the smallest c at "
            f"which every cell keeps {floor.k:g} records' worth of likelihood (binding: "
            f"{floor.binding}), the bound is {f:.4g}. A smaller c would leave that cell's "
            "parameters to the prior and its synthetic values far from the data (the "
            "bound can then meet any target while the release is noise). Fix: a target "
            f"of at least ~{1.1 * f:.3g}, fewer cells (effects='main') or collapsed "
            "levels, or min_cell_weight=0 (not recommended).")


def check_floor(name: str, path: TuningPath, c: float, f: float, target: float) -> None:
    """Refuse a target below the floor of a non-monotone map c -> Delta_alpha.

    The bound should fall as c falls; but when every alpha is small the weighted posterior
    widens towards the prior (a small cell's mean is then barely identified), the records'
    |log p| grow about as fast as their alpha shrink, and the bound stops falling (measured
    on an SDR sample at n = 1,000: c 1.09 / 0.63 / 0.31 / 0.16 gave 5.6 / 4.8 / 4.6 / 5.3
    for a target of 3.4; the search then ran to c = 0.012, mean alpha 0.01, and released
    near-prior synthetic salaries with means of 1e16). Once the tuning fits span a factor
    of 4 in c with the bound still above the target and the least-squares slope of log
    Delta_alpha on log c at most 0.1, the target is below what weighting can reach on
    this sample: TargetUnreachableError, saying the smallest bound seen."""
    xs = np.array([*path.logc, np.log(c)]) if c > 0 else np.array(path.logc)
    ys = np.array([*path.logf, np.log(f)]) if c > 0 else np.array(path.logf)
    if f <= target or xs.size < 3 or xs.max() - xs.min() < np.log(4.0):
        return
    slope = float(np.polyfit(xs, ys, 1)[0])
    if slope <= 0.1:
        k = int(np.argmin(ys))
        raise TargetUnreachableError(
            f"{name}: target Delta_alpha {target:.4g} is below the floor of the bound "
            f"on this sample: as c fell from {np.exp(xs.max()):.3g} to "
            f"{np.exp(xs.min()):.3g} the bound stayed at {np.exp(ys.min()):.4g}-"
            f"{np.exp(ys.max()):.4g} (smallest {np.exp(ys[k]):.4g} at c = "
            f"{np.exp(xs[k]):.3g}; log-log slope {slope:.2f}): down-weighting every "
            "record widens the posterior as fast as it shrinks the weights. Fix: a target "
            f"of at least ~{1.1 * np.exp(ys.min()):.3g}, fewer cells (effects='main'), or "
            "more records per cell.")


def at_ceiling(path: TuningPath, c: float, f: float, target: float, tol: float) -> bool:
    """True when a tuning fit at c >= c_max (every record but the riskiest at alpha = 1)
    has a bound below the band, f < (1 - tol) target: larger c cannot raise the bound, and
    a bound below the target is a stronger guarantee than asked, not a refusal."""
    return bool(f < (1 - tol) * target and c >= path.c_max / 1.0001 - 1e-12)


def check_reach(name: str, path: TuningPath, c: float, f: float, target: float) -> None:
    """Refuse a target below the floor with g > 0: at c -> 0 every alpha is g and the
    bound cannot fall further (with g = 0, c -> 0 reaches any target)."""
    g = path.g
    if f > target and c <= 1e-12 and g > 0:
        raise TargetUnreachableError(
            f"{name}: target Delta_alpha {target:.4g} is below the bound {f:.4g} "
            f"reached at c -> 0 with g = {g}. Reachable: [{f:.4g}, ~{path.hi_d:.4g}]. "
            "Lower g (g = 0 reaches any target down to 0) or raise the target.")
