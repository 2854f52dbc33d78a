"""The tuning shortcut (issue 39 item 1): predict Delta_alpha(c) from the UNWEIGHTED fit's
draws by Pareto-smoothed importance sampling, so that c is proposed without a refit.

Why it works. The alpha-weighted pseudo posterior and the unweighted posterior share the prior
and differ only in the likelihood's exponents:

    p_alpha(theta | y)  ∝  p(theta | y) * prod_i f_i(theta)^(alpha_i - 1)

so the unweighted fit's draws theta_s, reweighted by

    log w_s = sum_i (alpha_i(c) - 1) l_i(theta_s)            (l_i = record i's contribution)

are draws of the weighted posterior, for every c, at the price of one matrix-vector product
(:func:`importance_log_weights`). The weights are Pareto-smoothed (ArviZ ``psislw``;
Vehtari et al. 2024, JMLR 25(72)); their Pareto shape k-hat is the trust diagnostic: above
``K_HAT_MAX`` = 0.7 the reweighted draws do not represent the weighted posterior (it is much
wider than the unweighted one: small alpha) and the caller falls back to today's path
(refits, ``surveysynth.synth.tuning.TuningPath``).

What is predicted. Delta_alpha of a fit with S' draws is max_i alpha_i R_i, R_i = the max over
its draws of |l_i| (the max over draws and over records commute). A max over draws lives in the
tail, where the unweighted draws are thinnest: the reweighted empirical distribution of M_s =
max_i alpha_i |l_i(theta_s)| cannot reach beyond the unweighted draws, and its extreme quantile
is just the plug-in max_i alpha_i Delta_i (measured on an exact conjugate posterior: 30-60%
below the real bound at mean alpha 0.1-0.5). So per record the prediction is location + tail
factor x spread: the location (the mean of |l_i|) from the importance weights, the spread the
larger of the reweighted SD and the unweighted SD inflated by the loss of information
kappa_i(c), and the tail factor the record's own (max - mean) / SD over the unweighted draws
(:func:`predict_delta_alpha`). At alpha = 1 it is the unweighted fit's own max exactly.
``n_final`` is the number of draws of the fit the prediction stands for.

The contract (privacy). A prediction only CHOOSES c. The reported bound of a release is
always the max over the final fit's fresh draws, which played no part in choosing c
(docs/pseudo_posterior.md, "Tuning, then a final fit"): a :class:`Prediction` is therefore
not a number (``float(prediction)`` raises), and nothing in this module returns a bound to
report. The shortcut changes how many fits the tuner runs, never what is reported.

Inputs. ``contrib`` is the (S, u) array of per-draw log-likelihood CONTRIBUTIONS of the
unweighted fit, signed, on the scale the likelihood is weighted on: l = log p_i (FBS, FBP,
Sequential), l = w_i log p_i (PBP, whose likelihood carries the normalised survey weight:
``_contribution_scale``). Columns may be distinct patterns of records (Sequential collapses
identical (x, y) records exactly): ``inv`` (n,) then maps each record to its column, and alpha
is per record. ``alpha_of`` maps c to the (n,) risk weights (:func:`lipschitz_map` for
``lipschitz_weights`` on the unweighted bounds; any callable for identification risks).

The tuner this serves (wired in as :func:`shortcut_predict`, the one tuner's ``predict`` step
with ``tuning="shortcut"``, Sequential's default). Since 2026-11-27 it first proposes the FINAL
fit's c directly (stage "direct", ``Proposal.direct``; ``surveysynth.synth.tuning._start``:
released only within the band, else a point of the path and a corrected proposal); when that
fails twice, or the corrected prediction misses a real fit by more than 1.5x
(:func:`ratio_check`), the loop below runs:

    prop = propose_c(contrib, alpha_of, target, tol, c_lo=floor.c, c_hi=path.c_max,
                     n_final=S, checks=[(c1, real_delta_alpha_1), ...])
    if not prop.trusted: fall back to today's path (plug-in / log-linear refits)
    else: one tuning fit at prop.c; if within the band, the final fit; else propose again with
          that fit in ``checks`` (the ratio real / predicted corrects the prediction), or the
          log-linear root through the real fits (``tuning.loglinear_root``); then the final fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..privacy.lipschitz import lipschitz_weights

__all__ = [
    "CORRECTION_BANDWIDTH",
    "K_HAT_MAX",
    "RATIO_FIRST_MAX",
    "RATIO_MAX",
    "Prediction",
    "Proposal",
    "MAX_ELEMENTS",
    "PRIOR_CORRECTION",
    "PreparedDraws",
    "importance_log_weights",
    "information_inflation",
    "lipschitz_map",
    "local_correction",
    "predict_delta_alpha",
    "prepare",
    "propose_c",
    "ratio_check",
    "reweighted_moments",
    "shortcut_predict",
    "thinned_loglik",
]

#: Above this Pareto k-hat the smoothed importance weights are not trusted (Vehtari et al.
#: 2024: the estimate's error then falls too slowly with the number of draws).
K_HAT_MAX = 0.7


@dataclass(frozen=True)
class Prediction:
    """Predicted Delta_alpha(c) of a fit with ``n_final`` draws (never a reported bound).

    ``median``: the point prediction max_i alpha_i (m_i + z_i s_i) (:func:`predict_delta_alpha`);
    ``lo`` / ``hi``: the same with the 10% / 90% quantile of the max of ``n_final`` normal draws
    in place of its median (an indication of the fit-to-fit noise, not calibrated); ``k_hat``:
    Pareto shape of the importance weights (0 when all weights are equal); ``ess``: their
    effective sample size; ``trusted``: k_hat <= the caller's k_max.
    """

    c: float | None
    median: float
    lo: float
    hi: float
    k_hat: float
    ess: float
    trusted: bool
    n_final: int

    def __float__(self) -> float:  # the contract: a prediction is never reported
        raise TypeError(
            "a predicted Delta_alpha is not a bound: only the final fit's fresh draws report "
            "(docs/pseudo_posterior.md, 'Tuning shortcut'). Use .median to choose c.")


@dataclass(frozen=True)
class Proposal:
    """A proposed c: ``c``; ``prediction`` at c (corrected by ``correction``); ``trusted``
    False means the caller must use today's path (k-hat too large at some c the search
    evaluated, or the target below the prediction at ``c_lo``: ``reason`` says which)."""

    c: float
    prediction: Prediction
    correction: float
    trusted: bool
    reason: str


def _contrib(contrib: Any) -> np.ndarray:
    L = np.asarray(contrib)
    if L.dtype not in (np.float32, np.float64):     # float32 kept (no float64 copy)
        L = L.astype(float)
    if L.ndim != 2 or L.shape[0] < 2 or L.shape[1] < 1:
        raise ValueError(f"contrib must be a 2-d array (n_draws >= 2, n_columns), got shape "
                         f"{np.shape(contrib)}.")
    if not np.isfinite(L).all():
        bad = np.flatnonzero(~np.isfinite(L).all(axis=0))[:5].tolist()
        raise ValueError(
            f"contrib has non-finite log densities in columns {bad}: importance weights need "
            "finite contributions. Drop those records from the prediction (their alpha is 0) "
            "or use today's tuning path.")
    return L


def _inv(inv: Any, u: int, n: int | None) -> np.ndarray:
    if inv is None:
        return np.arange(u)
    iv = np.asarray(inv)
    if iv.ndim != 1 or not np.issubdtype(iv.dtype, np.integer) or (n is not None and iv.size != n):
        raise ValueError(f"inv must be a 1-d integer array of the records' columns (length n = "
                         f"{n}), got shape {iv.shape}, dtype {iv.dtype}.")
    if iv.size and (iv.min() < 0 or iv.max() >= u):
        rows = np.flatnonzero((iv < 0) | (iv >= u))[:5].tolist()
        raise ValueError(f"inv maps records {rows} outside the {u} columns of contrib.")
    return iv


def _alpha(alpha: Any, n: int) -> np.ndarray:
    a = np.asarray(alpha, dtype=float)
    if a.shape != (n,):
        raise ValueError(f"alpha has shape {a.shape}; expected ({n},) (one weight per record).")
    if ((a < 0) | (a > 1) | ~np.isfinite(a)).any():
        rows = np.flatnonzero((a < 0) | (a > 1) | ~np.isfinite(a))[:5].tolist()
        raise ValueError(f"alpha must lie in [0, 1]; records {rows} do not.")
    return a


def importance_log_weights(contrib: Any, alpha: Any, inv: Any = None) -> np.ndarray:
    """log w_s = sum_i (alpha_i - 1) l_i(theta_s): the log density ratio of the alpha-weighted
    pseudo posterior to the unweighted posterior at each unweighted draw (unnormalised; the
    prior cancels). ``inv`` maps records to the columns of ``contrib``."""
    L = _contrib(contrib)
    iv = _inv(inv, L.shape[1], None if inv is None else len(np.asarray(inv)))
    a = _alpha(alpha, iv.size)
    coef = np.bincount(iv, weights=a - 1.0, minlength=L.shape[1])
    return L @ coef


def _smoothed(lw: np.ndarray, reff: float, smooth: bool) -> tuple[np.ndarray, float]:
    """Normalised weights and k-hat (PSIS; raw self-normalised IS when ``smooth`` is False)."""
    lw = lw - lw.max()
    if np.ptp(lw) < 1e-12:    # all weights equal (alpha = 1): exact, nothing to smooth
        return np.full(lw.size, 1.0 / lw.size), 0.0
    import warnings

    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        slw, k = az.psislw(lw, reff=float(reff))
    k = float(np.asarray(k))
    w = np.exp(slw if smooth else lw)
    return w / w.sum(), k


@dataclass(frozen=True)
class PreparedDraws:
    """The c-invariant part of every prediction from one unweighted fit, computed once
    (:func:`prepare`): the contributions ``L`` (S, u), the records' columns ``iv``, |L|
    centred by its column mean and its square, and per column the mean, SD and tail factor z
    of |l| over the draws (centred, the weighted SD has no cancellation: float32 keeps it to
    ~1e-4 at |l| ~ 1000 with an SD of 0.1, tests/test_tuning_shortcut.py). A tuning run
    evaluates the prediction at ~30 values of c; each then costs three matrix-vector
    products over (S, u) and one PSIS smoothing of S weights, instead of recomputing |L| and
    its moments (measured 2026-11-27: ~60 s per Sequential step at 10,000 records before,
    docs/benchmarks.md). ``dtype`` float32 halves the memory where the caller asks for it (a
    prediction only chooses c: its rounding never reaches a reported bound)."""

    L: np.ndarray
    iv: np.ndarray
    Ac: np.ndarray        # |L| - m0 (centred: no cancellation in the moments below)
    Ac2: np.ndarray       # Ac ** 2
    m0: np.ndarray
    s0: np.ndarray
    z: np.ndarray
    identity: bool

    @property
    def S(self) -> int:
        return int(self.L.shape[0])

    @property
    def u(self) -> int:
        return int(self.L.shape[1])


def prepare(contrib: Any, inv: Any = None, n: int | None = None,
            dtype: Any = np.float64) -> PreparedDraws:
    """:class:`PreparedDraws` of the contributions ``contrib`` (S, u) (validated as
    everywhere: finite, at least two draws); ``inv`` maps the ``n`` records to columns."""
    if isinstance(contrib, PreparedDraws):
        return contrib
    L = _contrib(contrib)
    iv = _inv(inv, L.shape[1], n if n is not None else
              (None if inv is None else len(np.asarray(inv))))
    L = np.ascontiguousarray(L, dtype=dtype)
    A = np.abs(L)
    m0 = A.mean(axis=0, dtype=np.float64)
    Ac = A
    Ac -= m0.astype(dtype)                      # in place: |L| is not kept
    Ac2 = Ac * Ac
    s0 = np.sqrt(Ac2.mean(axis=0, dtype=np.float64))
    z = np.where(s0 > 0, Ac.max(axis=0) / np.where(s0 > 0, s0, 1.0), 0.0)
    identity = bool(iv.size == L.shape[1] and np.array_equal(iv, np.arange(iv.size)))
    return PreparedDraws(L=L, iv=iv, Ac=Ac, Ac2=Ac2, m0=m0, s0=s0, z=z, identity=identity)


def _columns(pre: PreparedDraws, per_record: np.ndarray) -> np.ndarray:
    """Per-record values summed per column."""
    if pre.identity:
        return per_record
    return np.bincount(pre.iv, weights=per_record, minlength=pre.u)


def _moments(pre: PreparedDraws, e: np.ndarray, reff: float, smooth: bool
             ) -> tuple[np.ndarray, np.ndarray, float, float]:
    coef = _columns(pre, e).astype(pre.L.dtype)
    w, k = _smoothed(np.asarray(pre.L @ coef, dtype=np.float64), reff, smooth)
    wd = w.astype(pre.L.dtype)
    d = np.asarray(wd @ pre.Ac, dtype=np.float64)          # weighted mean minus m0
    sw = np.sqrt(np.maximum(np.asarray(wd @ pre.Ac2, dtype=np.float64) - d * d, 0.0))
    return pre.m0 + d, sw, k, float(1.0 / np.sum(w ** 2))


def reweighted_moments(contrib: Any, alpha: Any, *, inv: Any = None, reff: float = 1.0,
                       smooth: bool = True, exponent: str = "alpha-1"
                       ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(mean, SD) of |l_j| per column under the alpha-weighted posterior, estimated from the
    unweighted draws with PSIS weights w_s ∝ exp(sum_i (alpha_i - 1) l_i(theta_s)), plus the
    weights' Pareto k-hat and effective sample size. The step of the prediction that
    importance sampling does (its only use of the weights). ``exponent``: "alpha-1" (right);
    "alpha" and "none" are wrong versions kept for the tests' mutants. ``contrib`` may be a
    :class:`PreparedDraws`."""
    pre = prepare(contrib, inv)
    a = _alpha(alpha, pre.iv.size)
    e = {"alpha-1": a - 1.0, "alpha": a, "none": np.zeros(pre.iv.size)}[exponent]
    return _moments(pre, e, reff, smooth)


def information_inflation(a: np.ndarray, v: np.ndarray, design: Any, iv: np.ndarray,
                          u: int) -> np.ndarray:
    """kappa per column (see :func:`predict_delta_alpha`; ``a`` the (n,) risk weights, ``v``
    the likelihood's own per-record multipliers, ``design`` (n, p) or None, ``iv`` records ->
    columns, ``u`` columns): the SD ratio of the weighted to the unweighted posterior of each
    record's linear predictor (inf where the weighted fit keeps
    no information on it: alpha = 0 on all its cell)."""
    if design is None:
        va = float(v @ a)
        return np.full(u, np.sqrt(v.sum() / va) if va > 0 else np.inf)
    X = np.asarray(design, dtype=float)
    if X.ndim != 2 or X.shape[0] != iv.size or not np.isfinite(X).all():
        raise ValueError(f"design must be a finite ({iv.size}, p) array of the records' "
                         f"predictors, got shape {X.shape}.")

    def h(wt: np.ndarray) -> np.ndarray:
        P = np.linalg.pinv((X * wt[:, None]).T @ X, hermitian=True)
        return np.einsum("ij,jk,ik->i", X, P, X)

    h1, ha = h(v), h(v * a)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(h1 > 0, np.sqrt(np.maximum(ha, 0) / h1), 1.0)
    # a record whose predictor direction lost all weight: the weighted posterior there is
    # the prior's (no finite inflation from the unweighted draws)
    k = np.where(ha > h1 * 1e8, np.inf, np.maximum(k, 1.0))
    out = np.ones(u)
    np.maximum.at(out, iv, k)
    return out


def predict_delta_alpha(contrib: Any, alpha: Any, *, inv: Any = None,
                        n_final: int | None = None, info_weight: Any = None,
                        design: Any = None, reff: float = 1.0, k_max: float = K_HAT_MAX, c: float | None = None,
                        smooth: bool = True, exponent: str = "alpha-1") -> Prediction:
    """Predict Delta_alpha of a fit at risk weights ``alpha`` with ``n_final`` draws, from the
    unweighted fit's per-draw contributions ``contrib`` (S, u) (module docstring).

    Delta_alpha = max_i alpha_i R_i with R_i = max over the fit's draws of |l_i| (the max over
    draws and records commute). Per record, R_i(c) = m_i(c) + z_i s_i(c):

    * m_i(c): the PSIS-weighted mean of |l_i| over the unweighted draws (the weighted
      posterior's mean; k-hat says whether to trust it);
    * s_i(c) = max(PSIS-weighted SD of |l_i|, kappa_i(c) x its unweighted SD): the weighted
      posterior's spread grows like 1 / sqrt(information), and reweighting alone cannot show
      draws wider than the unweighted ones (measured on exact conjugate posteriors: without
      kappa the prediction falls behind the real fit as c falls). Without ``design``,
      kappa(c) = sqrt(sum_i v_i / sum_i v_i alpha_i) for every record (v = ``info_weight``,
      default 1: the likelihood's own per-record multiplier, PBP's normalised survey weight).
      With ``design`` X (n, p) (FBS/FBP: the one-hot predictor cells; Sequential: intercept and
      predictors), kappa_i(c) = sqrt(h_i(alpha v) / h_i(v)), h_i(u) = x_i' (X' diag(u) X)^+ x_i,
      the variance ratio of record i's linear predictor: with cells, sqrt(n_g / sum_g alpha)
      for record i's cell g, so a down-weighted small cell widens more than the file;
    * z_i = (max_s |l_i| - mean) / SD over the unweighted draws: record i's own tail factor for
      a max over S draws, rescaled to ``n_final`` draws by the normal-tail factor
      Phi^-1(0.5^(1/n_final)) / Phi^-1(0.5^(1/S)).

    At alpha = 1 (all weights equal, kappa = 1) and n_final = S this returns the unweighted
    fit's own max exactly. ``lo`` / ``hi`` use the 10% / 90% quantiles of the max of
    ``n_final`` normal draws instead of the median (an indication of the fit-to-fit noise,
    not calibrated). ``smooth=False`` (raw self-normalised IS) and ``exponent`` other than
    "alpha-1" are the wrong versions kept for the tests and the study only.
    """
    from scipy.stats import norm

    pre = prepare(contrib, inv)
    S, u, iv = pre.S, pre.u, pre.iv
    a = _alpha(alpha, iv.size)
    n = iv.size
    nf = S if n_final is None else int(n_final)
    if nf < 1:
        raise ValueError(f"n_final must be >= 1, got {n_final!r}.")
    v = np.ones(n) if info_weight is None else np.asarray(info_weight, dtype=float)
    if v.shape != (n,) or not (np.isfinite(v).all() and (v >= 0).all() and v.sum() > 0):
        raise ValueError(f"info_weight must be ({n},) finite and >= 0 with a positive sum.")
    if pre.identity:
        amax = a
    else:
        amax = np.zeros(u)
        np.maximum.at(amax, iv, a)             # the largest alpha among a column's records
    s0, z = pre.s0, pre.z
    e = {"alpha-1": a - 1.0, "alpha": a, "none": np.zeros(n)}[exponent]
    mw, sw, k, ess = _moments(pre, e, reff, smooth)
    kappa = information_inflation(a, v, design, iv, u)
    sd = np.maximum(sw, np.where((s0 > 0) & np.isfinite(kappa), kappa * s0, 0.0))
    z_S = norm.ppf(0.5 ** (1.0 / S))

    def at(p: float) -> float:
        f = norm.ppf(p ** (1.0 / nf)) / z_S if z_S > 0 else 1.0
        if p == 0.5 and nf == S:
            f = 1.0                               # exact at alpha = 1
        return float(np.max(amax * (mw + f * z * sd)))

    return Prediction(c=c, median=at(0.5), lo=at(0.1), hi=at(0.9), k_hat=k, ess=ess,
                      trusted=bool(k <= k_max), n_final=nf)


def lipschitz_map(bounds: Any, g: float = 0.0) -> Callable[[float], np.ndarray]:
    """c -> alpha(c) = lipschitz_weights(bounds=Delta_i, c, g): the pseudo posterior
    synthesizers' and Sequential's risk-weight map on the unweighted bounds Delta_i."""
    b = np.asarray(bounds, dtype=float)
    return lambda c: lipschitz_weights(None, c=float(c), g=float(g), bounds=b)


#: bandwidth of :func:`local_correction` on log c: checks a factor of 2 away weigh exp(-1/2)
CORRECTION_BANDWIDTH = float(np.log(2.0))


def local_correction(at: Sequence[float], ratios: Sequence[float], c: float,
                     prior: float = 1.0, h: float = CORRECTION_BANDWIDTH) -> float:
    """The correction of the prediction at c: the geometric mean of the real / predicted
    ``ratios`` of the checks at ``at``, weighted by exp(-((log c - log c_j) / h)^2 / 2);
    ``prior`` without checks. Why local: where the reweighted draws degenerate (small files,
    extreme weights) real / predicted drifts with c (measured on a stand-in whose prediction
    is too sharp: 0.12 at the first c, 0.2 near the answer), and a plain mean over every
    check then drags the correction towards the first, distant check and the search creeps
    (ten fits instead of four); checks at nearby c (within a factor of ~2) are still averaged,
    which damps the bound's own fit-to-fit noise. Far from every check the nearest one
    dominates (the weights are normalised in logs, no underflow); c = 0 counts as the
    smallest c checked."""
    if len(ratios) == 0:
        return float(prior)
    lc = np.log(np.asarray(at, dtype=float))
    lr = np.log(np.asarray(ratios, dtype=float))
    x = float(np.log(c)) if c > 0 else float(lc.min())
    z = -0.5 * ((x - lc) / h) ** 2
    w = np.exp(z - z.max())
    return float(np.exp(np.dot(w, lr) / w.sum()))


def _goal(target: float, tol: float, c_lo: float, c_hi: float, aim: float | None) -> float:
    """:func:`propose_c`'s arguments checked; its aim (default the band's middle)."""
    if not (np.isfinite(target) and target > 0):
        raise ValueError(f"target must be a positive number, got {target!r}.")
    if not 0 < tol < 1:
        raise ValueError(f"tol must lie in (0, 1), got {tol!r}.")
    if not (0 <= c_lo < c_hi and np.isfinite(c_hi)):
        raise ValueError(f"need 0 <= c_lo < c_hi < inf, got c_lo={c_lo!r}, c_hi={c_hi!r}.")
    goal = (1.0 - tol / 2.0) * target if aim is None else float(aim)
    if not 0 < goal <= target:
        raise ValueError(f"aim must lie in (0, target], got {aim!r}.")
    return goal


def propose_c(contrib: Any, alpha_of: Callable[[float], np.ndarray], target: float,
              tol: float = 0.10, *, c_lo: float = 0.0, c_hi: float = 1.0,
              aim: float | None = None, inv: Any = None, n_final: int | None = None,
              info_weight: Any = None, design: Any = None, reff: float = 1.0, k_max: float = K_HAT_MAX,
              checks: Sequence[tuple[float, float]] = (), iters: int = 40,
              prior_correction: float = 1.0) -> Proposal:
    """The c whose (corrected) predicted Delta_alpha is at ``aim`` (default the middle of the
    band, (1 - tol/2) target), searched on [c_lo, c_hi] (the cell-weight floor and c_max).

    ``checks``: real fits so far, (c, Delta_alpha of that fit); the prediction at c is multiplied by
    the geometric mean of real / predicted over them weighted by their nearness to c
    (:func:`local_correction`; ``prior_correction`` without checks), which carries what the
    reweighted draws miss (mostly the wider tails of the weighted posterior) from the checked c
    to nearby c. The search is a bisection on log c that keeps the lower end's corrected
    prediction below the aim, and returns that end: the returned c's corrected prediction is <=
    aim <= target, never above the band (when even c_lo is predicted above the target, c_lo is
    returned with ``trusted`` False: the target looks unreachable by weighting, and the caller's
    real fit and refusal rules decide). ``trusted`` is False as soon as k-hat exceeds ``k_max``
    at the returned c or at a check, in which case the caller uses today's
    path. Pure: no fit, no randomness.
    """
    goal = _goal(target, tol, c_lo, c_hi, aim)
    L = prepare(contrib, inv)       # the c-invariant part, once for the whole search

    def pred(c: float) -> Prediction:
        return predict_delta_alpha(L, alpha_of(c), n_final=n_final,
                                   info_weight=info_weight, design=design, reff=reff,
                                   k_max=k_max, c=c)

    trusted, reason = True, ""
    at, ratios = [], []
    for c_chk, f_chk in checks:
        p = pred(float(c_chk))
        if not p.trusted:
            trusted, reason = False, f"k-hat {p.k_hat:.2f} > {k_max} at checked c = {c_chk:.4g}"
        if p.median > 0 and f_chk > 0:
            at.append(float(c_chk))
            ratios.append(float(f_chk) / p.median)

    def corr(c: float) -> float:
        return local_correction(at, ratios, c, prior_correction)

    def value(c: float) -> tuple[float, Prediction]:
        p = pred(c)
        return corr(c) * p.median, p

    v_hi, p_hi = value(c_hi)
    if v_hi <= goal:
        c, p = c_hi, p_hi
    else:
        v_lo, p_lo = value(c_lo)
        if v_lo > goal:
            return Proposal(c=float(c_lo), prediction=p_lo, correction=corr(c_lo), trusted=False,
                            reason=(f"predicted {v_lo:.4g} > aim {goal:.4g} already at c_lo = "
                                    f"{c_lo:.4g}"))
        lo, hi = c_lo, c_hi
        p = p_lo
        for _ in range(int(iters)):
            mid = np.sqrt(lo * hi) if lo > 0 else 0.5 * (lo + hi)
            v_mid, p_mid = value(mid)
            if v_mid <= goal:
                lo, p = mid, p_mid
            else:
                hi = mid
        c = lo
    if not p.trusted and trusted:
        trusted, reason = False, f"k-hat {p.k_hat:.2f} > {k_max} at proposed c = {c:.4g}"
    return Proposal(c=float(c), prediction=p, correction=corr(c), trusted=trusted, reason=reason)


# --------------------------------------------------------------------------------------------
# the tuner's predict step (tuning="shortcut" on FBS, FBP, PBP and Sequential)

#: The trust rule of :func:`shortcut_predict` (:func:`ratio_check`): the shortcut's proposal is
#: used while each real fit's real / predicted Delta_alpha lies within [1 / RATIO_MAX,
#: RATIO_MAX] x the correction in force when that fit was proposed (:func:`local_correction`
#: of the ratios before it). Measured on the study (docs/benchmarks.md, "Tuning shortcut"; 29
#: real fits): geometric mean 1.066, SD of the log 0.094, so 1.5 is more than four SDs out; k-hat
#: exceeded 0.7 at every one of those fits while the prediction was the best available, so
#: k-hat is recorded, not keyed on.
RATIO_MAX = 1.5
#: The first real fit of a model recalibrates the prediction instead of testing it when its
#: ratio lies within [1 / RATIO_FIRST_MAX, RATIO_FIRST_MAX]: on small files the reweighted
#: draws degenerate (k-hat 1.3-1.9) and the prediction is biased by a factor that is stable
#: along the path (apistrat, 200 records: real / predicted 1.5-2.1 in the binary steps, 1.8-2.8
#: for meals, 3.3-5.6 for ell, over every fit of each step; docs/benchmarks.md "Small files"),
#: so the corrected prediction still places c where the refit rule needs 4-7 fits. A first
#: ratio beyond 10 says the prediction carries no usable shape: the refit rule decides.
RATIO_FIRST_MAX = 10.0
#: after a real fit at c, the shortcut's next c lies in [c / STEP_MAX, STEP_MAX c]
STEP_MAX = 8.0
#: the correction the first proposal uses, before any real fit of this model is known: the
#: geometric mean of real / predicted Delta_alpha over the 29 real fits of the study
#: (docs/benchmarks.md, "Tuning shortcut"). Later proposals use their own checks instead.
PRIOR_CORRECTION = 1.066
#: at most this many (draws x columns) entries in the prediction's matrices (three of them,
#: float32: about 240 MB); beyond it the unweighted draws are thinned evenly for the prediction
MAX_ELEMENTS = 2e7


def thinned_loglik(loglik: Callable[[slice], np.ndarray], draws: int, step: int,
                    u: int, block: float = 4e6) -> np.ndarray:
    """Every ``step``-th draw of ``loglik`` as one float32 (S', u) array, computed
    ``block`` entries at a time (a model's log density makes several temporaries of its
    input's size: in one piece they set the release's peak memory)."""
    idx = np.arange(0, draws, step)
    out = np.empty((idx.size, u), dtype=np.float32)
    rows = max(1, int(block // max(u, 1)))
    for i in range(0, idx.size, rows):
        j = min(idx.size, i + rows)
        out[i:j] = loglik(slice(int(idx[i]), int(idx[j - 1]) + 1, step))
    return out


def ratio_check(ratios: Sequence[float], at: Sequence[float] | None = None) -> str:
    """The trust rule of :func:`shortcut_predict` on the real / predicted ratios of the real fits
    so far, in path order: "" while trusted, else the reason.

    A predictive check: each ratio after the first must lie within [1 / RATIO_MAX, RATIO_MAX] x the
    correction the shortcut applied when it proposed that fit (:func:`local_correction` of the
    ratios before it, at that fit's c in ``at``; their plain geometric mean without ``at``),
    i.e. the corrected prediction must have predicted that fit to within RATIO_MAX. The first
    ratio (its proposal used the study's PRIOR_CORRECTION, not this model's) recalibrates the
    prediction when it lies within [1 / RATIO_FIRST_MAX, RATIO_FIRST_MAX]. A non-finite or
    non-positive ratio fails. Once a ratio fails the rule
    stays failed (the ratios are re-checked in full at every proposal)."""
    logs: list[float] = []
    for j, r in enumerate(ratios):
        r = float(r)
        if not (np.isfinite(r) and r > 0):
            return f"real / predicted {r:.3g} at fit {j + 1} is not a positive number"
        if not logs:
            if not 1.0 / RATIO_FIRST_MAX <= r <= RATIO_FIRST_MAX:
                return (f"real / predicted {r:.3g} at the first fit is outside "
                        f"[1/{RATIO_FIRST_MAX:g}, {RATIO_FIRST_MAX:g}]")
        else:
            ref = float(np.exp(np.mean(logs))) if at is None else \
                local_correction(at[:j], np.exp(logs), at[j])
            if not ref / RATIO_MAX <= r <= ref * RATIO_MAX:
                return (f"real / predicted {r:.3g} at fit {j + 1} is outside [1/{RATIO_MAX:g}, "
                        f"{RATIO_MAX:g}] x {ref:.3g}, the correction it was proposed with")
        logs.append(float(np.log(r)))
    return ""


def _shortcut_state(p: Any) -> dict:
    """The unweighted fit's contributions and the risk-weight map, computed once per tuning
    run (kept in the TuningPath's ``cache``); ``error`` when they cannot be used."""
    cache = p.path.cache
    if "shortcut" not in cache:
        st: dict = {}
        try:
            n = p.path.delta.shape[0]
            inv = getattr(p, "loglik_inv", None)
            u = n if inv is None else int(np.max(inv)) + 1
            # thinned evenly when the (draws x columns) matrices would exceed MAX_ELEMENTS
            # (the tail factor is rescaled to the final fit's draws: n_final)
            step = max(1, int(np.ceil(int(p.draws) * u / MAX_ELEMENTS)))
            L = prepare(thinned_loglik(p.loglik, int(p.draws), step, u), inv, n,
                        dtype=np.float32)
            if L.iv.size != n:
                raise ValueError(f"loglik has {L.iv.size} records for {n} records")
            st.update(L=L, alpha_of=lipschitz_map(p.path.delta, p.path.g), preds={},
                      thinned=step)
        except ValueError as exc:
            st["error"] = str(exc)
        cache["shortcut"] = st
    return cache["shortcut"]


def shortcut_predict(p: Any) -> float:
    """The tuner's ``predict`` step with the tuning shortcut (``tuning="shortcut"``).

    ``p`` is a :class:`surveysynth.synth.tuning.Proposal`. When the caller passed the
    unweighted fit's contributions (``p.loglik``, ``p.draws``) and they are finite, c is
    :func:`propose_c`'s: the c whose prediction (corrected by real / predicted over every real
    fit so far, ``checks``) is at ``p.goal`` (the band's middle for tuning fits, the tuner's
    own margin below the target for final fits), searched on [the cell-weight floor, c_max].
    Trust rule (:func:`ratio_check`): each real fit's real / predicted ratio within [1 / RATIO_MAX,
    RATIO_MAX] x the correction it was proposed with (the first fit recalibrates; none yet: the
    first proposal is trusted) and the target reachable by the prediction at the floor;
    otherwise :func:`surveysynth.synth.tuning.default_predict` (today's path). Each proposal
    writes ``proposed_by`` ("shortcut" / "default"), ``k_hat``, ``ratio`` (the last check fit's
    real / predicted), ``correction``, ``predicted`` and ``reason`` into ``p.note``, which the
    tuner copies into the tuning path's row of the fit at that c.

    Only c is chosen here: the reported bound is the final fit's fresh draws and the tuner
    refuses to release any fit above the target, whatever this returns.
    """
    from .tuning import default_predict

    if p.loglik is None or not p.draws:
        p.note.update(proposed_by="default", reason="no unweighted log-likelihood draws")
        return default_predict(p)
    st = _shortcut_state(p)
    if "error" in st:
        p.note.update(proposed_by="default", reason=f"shortcut unusable: {st['error']}")
        return default_predict(p)
    path = p.path
    c_hi = float(path.c_max)
    c_lo = float(min(max(p.c_min, 0.0), 0.5 * c_hi))
    checks = [(float(np.exp(x)), float(np.exp(y))) for x, y in zip(path.logc, path.logf,
                                                                    strict=True)]
    ratios = []
    for c_chk, f_chk in checks:
        if c_chk not in st["preds"]:
            st["preds"][c_chk] = predict_delta_alpha(st["L"], st["alpha_of"](c_chk),
                                                     n_final=int(p.draws), c=c_chk).median
        ratios.append(f_chk / st["preds"][c_chk] if st["preds"][c_chk] > 0 else np.inf)
    prop = propose_c(st["L"], st["alpha_of"], float(path.target), aim=float(p.goal),
                     c_lo=c_lo, c_hi=c_hi, n_final=int(p.draws), checks=checks, iters=30,
                     prior_correction=PRIOR_CORRECTION)
    bad = ratio_check(ratios, [c_chk for c_chk, _ in checks])
    note = {"k_hat": prop.prediction.k_hat, "ratio": ratios[-1] if ratios else np.nan,
            "correction": prop.correction, "predicted": prop.correction * prop.prediction.median,
            "shortcut_c": prop.c}
    if bad:
        reason = bad
    elif not prop.trusted and not prop.reason.startswith("k-hat"):
        reason = prop.reason        # the target looks unreachable: today's path and refusals
    else:
        c = float(prop.c)
        if p.c is not None and p.c > 0 and ratios:
            # one step moves c at most STEP_MAX-fold from the fit just run
            c = float(np.clip(c, p.c / STEP_MAX, p.c * STEP_MAX))
        p.note.update(proposed_by="shortcut", reason=prop.reason, **note)
        # stage "direct": the tuner may run this c as a final fit with no tuning fit before it
        # (its fresh draws report, and it is released only within the band)
        p.direct = p.stage == "direct"
        return c
    p.note.update(proposed_by="default", reason=reason, **note)
    return default_predict(p)
