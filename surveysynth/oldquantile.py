"""R survey's pre-4.0 quantile estimator, kept in R as ``oldsvyquantile`` (R/svyquantile.R).

R replaced ``svyquantile`` in survey 4.0 (the twelve ``qrule``s, :meth:`SurveyDesign.quantile`)
and kept the old one under this name for code and results that depend on it. It reads the
quantile off R's ``approxfun`` of the weighted empirical CDF (``method="linear"``: linear
interpolation between the cumulative weight shares; ``"constant"`` with ``f``: R's step
rule; ties of cumulative shares take the smallest value; ``ties="rounded"`` first pools
equal values), and for linearization designs gives Woodruff intervals from the design SE of
the estimated share below the quantile (``interval_type="Wald"``, or ``"betaWald"``: a beta
interval on an effective sample size; R's ``"score"``, a ``uniroot`` over a step function, is
not provided). On replicate designs: ``interval_type="probability"`` (R's default) maps the
share's interval through the CDF, ``"quantile"`` takes the replicate quantiles' variance.
Every step is R's (numbers equal R's, tests/test_oldsvyquantile.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from .results import Estimate
from .variance.replicate_weights import replicate_variance

__all__ = ["oldsvyquantile"]


def _approx(x: np.ndarray, y: np.ndarray, v: np.ndarray, method: str, f: float,
            yleft: float, yright: float) -> np.ndarray:
    """R ``approx(x, y, xout=v, method, f, yleft, yright, ties=min)`` for sorted ``x``."""
    ux, start = np.unique(x, return_index=True)
    uy = np.minimum.reduceat(y, start)  # ties=min over equal x (x sorted)
    v = np.atleast_1d(np.asarray(v, dtype=float))
    out = np.empty(v.shape)
    for k, t in enumerate(v):
        if np.isnan(t):
            out[k] = np.nan
        elif t < ux[0]:
            out[k] = yleft
        elif t > ux[-1]:
            out[k] = yright
        else:
            j = int(np.searchsorted(ux, t, side="left"))
            if ux[j] == t:
                out[k] = uy[j]
                continue
            i = j - 1
            if method == "linear":
                out[k] = uy[i] + (uy[j] - uy[i]) * ((t - ux[i]) / (ux[j] - ux[i]))
            else:
                out[k] = (uy[i] * (1 - f) if f != 1 else 0.0) + (uy[j] * f if f != 0 else 0.0)
    return out


def _cdf_points(xx: np.ndarray, w: np.ndarray, ties: str) -> tuple[np.ndarray, np.ndarray]:
    if ties == "rounded":
        ux, inv = np.unique(xx, return_inverse=True)
        ww = np.bincount(inv, weights=w)
        return np.cumsum(ww) / ww.sum(), ux
    oo = np.argsort(xx, kind="stable")
    return np.cumsum(w[oo]) / w.sum(), xx[oo]


def oldsvyquantile(x: str | Sequence[str], design: Any, quantiles: Sequence[float],
                   alpha: float = 0.05, method: str = "linear", f: float = 1.0,
                   interval_type: str | None = None, ties: str = "discrete",
                   df: float | None = None) -> Estimate:
    """Quantiles by R survey's pre-4.0 rule (R ``oldsvyquantile``), with R's intervals.

    ``method``: ``"linear"`` (default) or ``"constant"`` (with ``f``, R's ``approxfun``);
    ``ties``: ``"discrete"`` or ``"rounded"``. Linearization designs: ``interval_type``
    ``"Wald"`` (default) or ``"betaWald"``; replicate designs: ``"probability"`` (default) or
    ``"quantile"``. ``df``: None (the design's df), ``inf`` (normal) or a number. Returns an
    :class:`~surveysynth.results.Estimate` (``variable``, ``quantile``, ``estimate``, ``se``,
    ``ci_low``, ``ci_high``): on linearization designs R's Woodruff interval and its SE
    (interval width over ``2 t``, R's ``attr(, "SE")``); on replicate designs R's variance,
    with the normal interval ``estimate -+ z * se`` (R's ``confint`` of this result is empty).
    Missing values are an error naming the rows (R: NA for the variable).
    """
    cols = [x] if isinstance(x, str) else list(x)
    p = np.atleast_1d(np.asarray(quantiles, dtype=float))
    if method not in ("linear", "constant"):
        raise ValueError(f"oldsvyquantile: method={method!r}: choose 'linear' or 'constant'.")
    if ties not in ("discrete", "rounded"):
        raise ValueError(f"oldsvyquantile: ties={ties!r}: choose 'discrete' or 'rounded'.")
    replicate = getattr(design, "design_kind", "taylor") == "replicate"
    allowed = ("probability", "quantile") if replicate else ("Wald", "betaWald")
    interval_type = allowed[0] if interval_type is None else interval_type
    if interval_type not in allowed:
        extra = (" (R's 'score' interval, a uniroot over a step function, is not provided)"
                 if interval_type == "score" else "")
        raise ValueError(f"oldsvyquantile: interval_type={interval_type!r}: choose one of "
                         f"{allowed} for this design{extra}.")
    inside = np.asarray(design.in_subset, dtype=bool)
    frame = design.full_data
    w = np.where(inside, np.asarray(design.full_weights, float), 0.0)
    dfv = float(design.degf) if df is None else float(df)

    def qcrit(prob: float) -> float:
        return float(stats.norm.ppf(prob) if np.isinf(dfv) else stats.t.ppf(prob, dfv))

    rows = []
    for c in cols:
        xx = frame[c].to_numpy(dtype=float)
        if np.isnan(xx[inside]).any():
            bad = list(frame.index[inside & np.isnan(xx)][:5])
            raise ValueError(f"oldsvyquantile: {c!r} has missing values at rows {bad}. Fix: "
                             "drop the rows (subset) first.")
        xx = np.where(inside, xx, np.nan_to_num(xx))
        lo_y, hi_y = float(np.min(xx)), float(np.max(xx))
        cum, ys = _cdf_points(xx, w, ties)
        q = _approx(cum, ys, p, method, f, lo_y, hi_y)
        if replicate:
            est, se = _replicate(design, xx, q, p, cum, ys, method, f, lo_y, hi_y, ties,
                                 interval_type, alpha, qcrit)
            crit = float(stats.norm.ppf(1 - alpha / 2))  # R's confint(<svrepstat>) is empty
            lo, hi = est - crit * se, est + crit * se
        else:
            lo, hi = np.empty(p.shape), np.empty(p.shape)
            for k, pk in enumerate(p):
                U = (xx > q[k]).astype(float) - (1 - pk)
                se_p = _mean_se(design, U)
                if interval_type == "Wald":
                    pl, pu = pk + qcrit(alpha / 2) * se_p, pk + qcrit(1 - alpha / 2) * se_p
                else:
                    n_eff = pk * (1 - pk) / se_p**2
                    n_eff *= (stats.t.ppf(alpha / 2, design.n - 1)
                              / stats.t.ppf(alpha / 2, float(design.degf))) ** 2
                    pu = stats.beta.ppf(1 - alpha / 2, n_eff * pk + 1, n_eff * (1 - pk))
                    pl = stats.beta.ppf(alpha / 2, n_eff * pk, n_eff * (1 - pk) + 1)
                lo[k], hi[k] = _approx(cum, ys, np.array([pl, pu]), method, f, lo_y, hi_y)
            est = q
            se = (hi - lo) / (2 * qcrit(1 - alpha / 2))
        for k, pk in enumerate(p):
            rows.append({"variable": c, "quantile": pk, "estimate": est[k], "se": se[k],
                         "ci_low": lo[k], "ci_high": hi[k]})
    return Estimate.wrap(pd.DataFrame(rows), 1 - alpha,
                         "woodruff" if not replicate else "normal")


def _mean_se(design: Any, U: np.ndarray) -> float:
    from .analysis.covariance import mean_covariance

    codes = np.where(np.asarray(design.in_subset, dtype=bool), 0, -1)
    return float(np.sqrt(mean_covariance(design, U[:, None], codes)[1][0, 0]))


def _replicate(design, xx, q, p, cum, ys, method, f, lo_y, hi_y, ties, interval_type, alpha,
               qcrit):
    inside = np.asarray(design.in_subset, dtype=bool)
    if interval_type == "quantile":
        R = design.replicate_weights("analysis")
        rep = np.zeros((xx.shape[0], R.shape[1]))
        rep[inside] = R
        qq = np.empty((R.shape[1], p.shape[0]))
        for r in range(R.shape[1]):
            c_r, y_r = _cdf_points(xx, rep[:, r], ties)
            qq[r] = _approx(c_r, y_r, p, method, f, lo_y, hi_y)
        var = np.array([replicate_variance(qq[:, [k]], q[[k]], design.scale, design.rscales,
                                           design.mse)[0][0] for k in range(p.shape[0])])
        return q, np.sqrt(var)
    codes = np.where(inside, 0, -1)
    from .analysis.covariance import mean_covariance

    est_fun = (xx[:, None] < q[None, :]).astype(float)
    share, V = mean_covariance(design, est_fun, codes)
    se_p = np.sqrt(np.diag(V))
    z = abs(qcrit(min(alpha, 1 - alpha) / 2))
    up = _approx(cum, ys, share + z * se_p, method, f, lo_y, hi_y)
    down = _approx(cum, ys, share - z * se_p, method, f, lo_y, hi_y)
    return q, np.abs(up - down) / 2 / z
