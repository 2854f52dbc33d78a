"""Survey-weighted graphics with matplotlib: R ``svyhist``, ``svyboxplot``, ``svyplot`` (bubble,
transparent, hex), ``svyqqplot``, ``svyqqmath`` and the ``svycdf`` plot (survey 4.5).

Each function computes what R computes for its picture and returns it (R returns the histogram
object; the others draw from values computed inside): bin heights, box statistics, bubble radii
and opacities, weighted hexagon counts and centroids, quantile pairs. Those values are tested
against R's; the drawing itself is matplotlib's and only approximates R's look. ``plot=False``
computes without drawing (and without importing matplotlib); ``ax=`` draws into given axes.

R's algorithms kept, so that the values are R's:

* :func:`svyhist`: breaks from R's ``hist`` (Sturges' rule and R's ``pretty``), bin shares from
  ``svymean`` of the binned variable (``(a, b]`` bins, the first closed), ``density = share /
  width`` and ``counts = share * sum(w)``;
* :func:`svyboxplot`: box statistics from ``svyquantile`` at 0, 1/4, 1/2, 3/4 and 1 (R 4.5's
  default ``"math"`` rule; ``survey_version="4.1"`` gives 4.1.1's, which differ at p = 0),
  whiskers ``max(min, q1 - 1.5 IQR)`` and ``min(max, q3 + 1.5 IQR)``, outliers as R's;
* :func:`svyplot`: bubbles of radius proportional to ``sqrt(w)``; opacity
  ``(a0 (max w - w) + a1 w) / max w``; hexbin's hexagonal cells (its Fortran ``hbin``) with
  the weights summed per cell and weighted centroids;
* :func:`svyqqplot`, :func:`svyqqmath`: R's quantile pairs (unweighted order statistics when
  both variables come from one design, as R; ``qrule`` quantiles when a second design is given;
  normal quantiles at ``cumsum(w) / sum(w) * n / (n + 1)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ..estimate import category_levels, weighted_quantile

_DBL_EPS = np.finfo(float).eps
_DBL_MIN = np.finfo(float).tiny


def _axes(ax: Any) -> Any:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    return plt.subplots()[1]


def _check_columns(design: Any, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in design.full_data.columns]
    if missing:
        raise ValueError(f"{what}: columns {missing} are not in the design's data. Fix: one of "
                         f"{list(map(str, design.full_data.columns))[:12]}...")


def _rows_and_weights(design: Any) -> tuple[np.ndarray, np.ndarray]:
    """R's rows of ``model.frame(design)`` and their ``weights(design, "sampling")``: the
    subset of a calibrated linearization design keeps its rows with weight 0 (R's
    ``[.survey.design2``), other subsets drop them."""
    w = np.asarray(design.full_weights, dtype=float)
    inside = np.asarray(design.in_subset, dtype=bool)
    if not getattr(design, "is_calibrated", False):
        return inside, w[inside]
    return np.ones(w.shape[0], dtype=bool), np.where(inside, w, 0.0)


# ------------------------------------------------------------------------------ pretty
def r_pretty(lo: float, up: float, n: int = 5, min_n: int | None = None,
             shrink_sml: float = 0.75, high_u_bias: float = 1.5,
             u5_bias: float | None = None, f_min: float = 2.0 ** -20) -> np.ndarray:
    """R's ``pretty(c(lo, up), n, min.n)`` (R 4.2's ``R_pretty`` with bounds, then
    ``seq.int``): about ``n + 1`` equally spaced round values covering [lo, up]."""
    if min_n is None:
        min_n = n // 3
    h = high_u_bias
    h5 = 0.5 + 1.5 * h if u5_bias is None else u5_bias
    dx = up - lo
    if dx == 0 and up == 0:
        cell, i_small = 1.0, True
    else:
        cell = max(abs(lo), abs(up))
        U = 1 + (1 / (1 + h) if h5 >= 1.5 * h + 0.5 else 1.5 / (1 + h5))
        U *= max(1, n) * _DBL_EPS
        i_small = dx < cell * U * 3
    if i_small:
        if cell > 10:
            cell = 9 + cell / 10
        cell *= shrink_sml
        if min_n > 1:
            cell /= min_n
    else:
        cell = dx
        if n > 1:
            cell /= n
    subsmall = f_min * _DBL_MIN or _DBL_MIN
    cell = max(cell, subsmall)
    base = 10.0 ** math.floor(math.log10(cell))
    unit = base
    if 2 * base - cell < h * (cell - unit):
        unit = 2 * base
        if 5 * base - cell < h5 * (cell - unit):
            unit = 5 * base
            if 10 * base - cell < h * (cell - unit):
                unit = 10 * base
    eps = 1e-10
    ns = math.floor(lo / unit + eps)
    nu = math.ceil(up / unit - eps)
    while ns * unit > lo + eps * unit:
        ns -= 1
    while nu * unit < up - eps * unit:
        nu += 1
    k = int(0.5 + nu - ns)
    if k < min_n:
        k = min_n - k
        if ns >= 0:
            nu += k // 2
            ns -= k // 2 + k % 2
        else:
            ns -= k // 2
            nu += k // 2 + k % 2
        ndiv = min_n
    else:
        ndiv = k
    new_lo = ns * unit if ns * unit < lo else lo
    new_up = nu * unit if nu * unit > up else up
    s = _seq_length(new_lo, new_up, ndiv + 1)
    if ndiv:
        delta = (max(new_lo, new_up) - min(new_lo, new_up)) / ndiv
        s[np.abs(s) < 1e-14 * delta] = 0.0
    return s


def _seq_length(a: float, b: float, length: int) -> np.ndarray:
    """R ``seq.int(a, b, length.out=length)``: ends exact, ``a + i * by`` between."""
    if length == 1:
        return np.array([a])
    by = (b - a) / (length - 1)
    s = a + np.arange(length) * by
    s[-1] = b
    return s


def hist_breaks(x: np.ndarray, breaks: Any = "Sturges") -> np.ndarray:
    """Breaks of R's ``hist(x, breaks)``: ``"Sturges"`` (R's default), ``"Scott"``, ``"FD"``,
    a number of cells (through ``pretty``) or the breaks themselves."""
    x = x[np.isfinite(x)]
    if isinstance(breaks, str):
        rule = breaks.lower()
        if rule == "sturges":
            k = math.ceil(math.log2(x.shape[0]) + 1)
        elif rule == "scott":
            h = 3.5 * math.sqrt(np.var(x, ddof=1)) * x.shape[0] ** (-1 / 3)
            k = max(1, math.ceil((x.max() - x.min()) / h)) if h > 0 else 1
        elif rule in ("fd", "freedman-diaconis"):
            q = weighted_quantile(x, np.ones_like(x), [0.25, 0.75], "hf7")
            h = 2 * (q[1] - q[0]) * x.shape[0] ** (-1 / 3)
            k = max(1, math.ceil((x.max() - x.min()) / h)) if h > 0 else 1
        else:
            raise ValueError(f"svyhist: breaks={breaks!r}: 'Sturges', 'Scott', 'FD', a number "
                             "or a sequence of breaks.")
        return r_pretty(float(x.min()), float(x.max()), k, min_n=1)
    if np.ndim(breaks) == 0:
        return r_pretty(float(x.min()), float(x.max()), int(breaks), min_n=1)
    b = np.sort(np.asarray(breaks, dtype=float))
    if b.shape[0] < 2 or x.min() < b[0] or x.max() > b[-1]:
        raise ValueError("svyhist: the breaks must cover the range of the values.")
    return b


# ------------------------------------------------------------------------------ svyhist
@dataclass
class Histogram:
    """R's ``histogram`` object returned by ``svyhist``: ``breaks``, ``counts`` (estimated
    population counts per bin: share x sum of weights), ``density`` (share / bin width),
    ``mids``, ``shares`` (the svymean of each bin), ``count_scale`` (R's, with
    ``probability=False``), and the axes drawn on."""

    breaks: np.ndarray
    counts: np.ndarray
    density: np.ndarray
    mids: np.ndarray
    shares: np.ndarray
    xname: str
    count_scale: float | None = None
    ax: Any = field(default=None, repr=False)


def svyhist(x: str, design: Any, breaks: Any = "Sturges", include_lowest: bool = True,
            right: bool = True, probability: bool = True, plot: bool = True, ax: Any = None,
            **kwargs: Any) -> Histogram:
    """Survey-weighted histogram (R ``svyhist``): heights are estimated population shares per
    bin divided by the bin width (``probability=True``, a density) or estimated population
    counts (``probability=False``). Rows with a missing value are left out of the shares (R's
    ``na.rm=TRUE``); ``counts`` scale the shares by the sum of all weights, as R's."""
    _check_columns(design, [x], "svyhist")
    rows, w = _rows_and_weights(design)
    v = design.numeric_values(x)[rows]
    b = hist_breaks(v, breaks)
    ok = ~np.isnan(v)
    # R's cut(): (a, b] bins (right=True), the first closed when include.lowest
    if right:
        code = np.searchsorted(b, v[ok], side="left") - 1
        if include_lowest:
            code[v[ok] == b[0]] = 0
    else:
        code = np.searchsorted(b, v[ok], side="right") - 1
        if include_lowest:
            code[v[ok] == b[-1]] = b.shape[0] - 2
    inside = (code >= 0) & (code < b.shape[0] - 1)
    wk = w[ok]
    shares = np.bincount(code[inside], weights=wk[inside], minlength=b.shape[0] - 1)
    shares = shares / wk[inside].sum()
    widths = np.diff(b)
    h = Histogram(breaks=b, counts=shares * w.sum(), density=shares / widths,
                  mids=0.5 * (b[1:] + b[:-1]), shares=shares, xname=x)
    if not probability:
        h.count_scale = float(np.mean(widths) * w.sum())
    if plot:
        h.ax = _axes(ax)
        heights = h.density if probability else h.counts
        kwargs.setdefault("edgecolor", "black")
        kwargs.setdefault("color", "lightgrey")
        h.ax.bar(b[:-1], heights, width=widths, align="edge", **kwargs)
        h.ax.set_xlabel(x)
        h.ax.set_ylabel("Density" if probability else "Frequency")
        h.ax.set_title(f"Histogram of {x}")
    return h


# ------------------------------------------------------------------------------ svyboxplot
@dataclass
class BoxStats:
    """What R's ``svyboxplot`` hands to ``bxp``: ``stats`` (5 x groups: lower whisker, lower
    quartile, median, upper quartile, upper whisker), ``n`` (estimated population size per
    group), ``out`` and ``group`` (outliers and their group number, 1-based as R's),
    ``names``, and the axes drawn on."""

    stats: np.ndarray
    n: np.ndarray
    out: np.ndarray
    group: np.ndarray
    names: list[str]
    ax: Any = field(default=None, repr=False)
    artists: dict | None = field(default=None, repr=False)


def svyboxplot(y: str, design: Any, by: str | None = None, all_outliers: bool = False,
               survey_version: str = "4.5", plot: bool = True, ax: Any = None,
               **kwargs: Any) -> BoxStats:
    """Survey-weighted boxplots of ``y`` (by the levels of ``by``): R ``svyboxplot(y ~ by)``.

    The box is the estimated population quartiles and median (``svyquantile``, R 4.5's
    default rule; ``survey_version="4.1"`` for 4.1.1's rule, which takes the second smallest
    value at p = 0; 4.1.1's grouped boxplots, which give every group the last group's
    quantiles, are a bug not reproduced); whiskers reach the most extreme quantile (0 or 1) within 1.5 IQR of the box.
    Outliers: the minimum and maximum when beyond the whiskers (R's default), or with
    ``all_outliers=True`` every sample value beyond the whiskers (by group) or beyond
    ``q1 - 1.5 IQR`` and ``q3 + 1.5 IQR`` (one box), as R. Missing values of ``y`` are left
    out.
    """
    if survey_version not in ("4.5", "4.1"):
        raise ValueError(f"svyboxplot: survey_version={survey_version!r}: '4.5' or '4.1'.")
    _check_columns(design, [y] + ([by] if by else []), "svyboxplot")
    inside, w_all = _rows_and_weights(design)
    v_all = design.numeric_values(y)[inside]
    if by is None:
        groups, names = np.zeros(v_all.shape[0], dtype=int), [""]
    else:
        g = design.full_data[by][inside]
        if g.isna().any():
            raise ValueError(f"svyboxplot: by={by!r} has missing values; fill or drop them.")
        levels = category_levels(g)
        names = [str(lv) for lv in levels]
        groups = pd.Categorical(g, categories=levels).codes.astype(int)
    G = len(names)
    stat = np.empty((5, G))
    n = np.empty(G)
    out: list[float] = []
    grp: list[int] = []
    for i in range(G):
        sel = groups == i
        ok = sel & ~np.isnan(v_all)
        # the one survey_version switch (estimate.qrule_math): 4.1.1 reads p = 0 as the
        # second smallest value, 4.5 as the minimum
        qs = weighted_quantile(v_all[ok], w_all[ok], [0, 0.25, 0.5, 0.75, 1], "math",
                               survey_version)
        iqr = qs[3] - qs[1]
        lo, hi = max(qs[0], qs[1] - 1.5 * iqr), min(qs[4], qs[3] + 1.5 * iqr)
        stat[:, i] = [lo, qs[1], qs[2], qs[3], hi]
        n[i] = w_all[sel].sum()
        if all_outliers:  # R: beyond the whiskers by group, beyond the fences without
            vals = v_all[ok]
            flo, fhi = (lo, hi) if by is not None else (qs[1] - 1.5 * iqr, qs[3] + 1.5 * iqr)
            o = list(dict.fromkeys([*np.sort(vals[vals < flo]), *np.sort(vals[vals > fhi])]))
        else:
            o = ([qs[4]] if qs[4] != hi else []) + ([qs[0]] if qs[0] != lo else [])
        out += list(map(float, o))
        grp += [i + 1] * len(o)
    res = BoxStats(stats=stat, n=n, out=np.array(out), group=np.array(grp, dtype=int),
                   names=names)
    if plot:
        res.ax = _axes(ax)
        boxes = [{"whislo": s[0], "q1": s[1], "med": s[2], "q3": s[3], "whishi": s[4],
                  "fliers": res.out[res.group == i + 1], "label": names[i]}
                 for i, s in enumerate(stat.T)]
        res.artists = res.ax.bxp(boxes, **kwargs)
        res.ax.set_ylabel(y)
        if by:
            res.ax.set_xlabel(by)
    return res


# ------------------------------------------------------------------------------ svyplot
_SQRT3_F32 = float(np.float32(math.sqrt(3.0)))  # hbin.f's sqrt(3.) is single precision
_THIRD_F32 = float(np.float32(1.0) / np.float32(3.0))  # con2 = 1.0/3.0, single precision


def hexbin_cells(x: np.ndarray, y: np.ndarray, xbins: int = 30, shape: float = 1.0,
                 xbnds: tuple[float, float] | None = None,
                 ybnds: tuple[float, float] | None = None) -> tuple[np.ndarray, tuple[int, int]]:
    """Cell number of each point (hexbin's ``hbin``, 1-based as R's ``cID``) and the grid
    dimensions ``(imax, jmax)``."""
    xb = (float(np.min(x)), float(np.max(x))) if xbnds is None else xbnds
    yb = (float(np.min(y)), float(np.max(y))) if ybnds is None else ybnds
    jmax = math.floor(xbins + 1.5001)
    c1n = 2 * math.floor((xbins * shape) / math.sqrt(3) + 1.5001)
    imax = math.trunc((jmax * c1n - 1) / jmax + 1)
    c1 = xbins / (xb[1] - xb[0])
    c2 = xbins * shape / ((yb[1] - yb[0]) * _SQRT3_F32)
    iinc, lat = 2 * jmax, jmax + 1
    sx = c1 * (np.asarray(x, dtype=float) - xb[0])
    sy = c2 * (np.asarray(y, dtype=float) - yb[0])
    j1 = np.trunc(sx + 0.5)
    i1 = np.trunc(sy + 0.5)
    dist1 = (sx - j1) ** 2 + 3.0 * (sy - i1) ** 2
    j2, i2 = np.trunc(sx), np.trunc(sy)
    dist2 = (sx - j2 - 0.5) ** 2 + 3.0 * (sy - i2 - 0.5) ** 2
    first = i1 * iinc + j1 + 1
    second = i2 * iinc + j2 + lat
    L = np.where(dist1 < 0.25, first,
                 np.where(dist1 > _THIRD_F32, second, np.where(dist1 <= dist2, first, second)))
    return L.astype(int), (imax, jmax)


@dataclass
class ScatterValues:
    """What R's ``svyplot`` draws: ``x``, ``y``; ``style``; ``radius`` (bubble: ``sqrt(w)``,
    R's ``circles``), ``alpha`` (transparent: each point's opacity), hexagons (``cell``,
    ``count`` = summed weights, ``xcm``/``ycm`` = weighted centroids, ``xcenter``/``ycenter``
    = the cells' centres, ``cid`` = each point's cell), ``"subsample"``'s drawn rows
    (``index``) and jitter half-widths (``jitter_amount``), and the axes drawn on."""

    x: np.ndarray
    y: np.ndarray
    style: str
    radius: np.ndarray | None = None
    alpha: np.ndarray | None = None
    cell: np.ndarray | None = None
    count: np.ndarray | None = None
    xcm: np.ndarray | None = None
    ycm: np.ndarray | None = None
    xcenter: np.ndarray | None = None
    ycenter: np.ndarray | None = None
    cid: np.ndarray | None = None
    index: np.ndarray | None = None
    jitter_amount: tuple[float, float] | None = None
    ax: Any = field(default=None, repr=False)


def svyplot(y: str, x: str, design: Any, style: str = "bubble", inches: float = 0.05,
            alpha: tuple[float, float] = (0.0, 0.8), xbins: int = 30, basecol: str = "black",
            sample_size: int = 500, amount: tuple[float | None, float | None] = (None, None),
            seed: Any = None, plot: bool = True, ax: Any = None,
            **kwargs: Any) -> ScatterValues:
    """Scatterplot of ``y`` against ``x`` showing the sampling weights (R ``svyplot``).

    ``style="bubble"``: circles of radius proportional to ``sqrt(w)``, the largest ``inches``
    in radius (R's ``symbols``); ``"transparent"``: opacity
    ``(alpha[0] (max w - w) + alpha[1] w) / max w``; ``"hex"``: hexagonal bins (R's hexbin
    with ``xbins``) holding the summed weights, drawn at their weighted centroids with area
    proportional to the weight (R's ``style="centroids"``). Rows with a missing value are not
    drawn (R: ``NA`` points are skipped); in ``"hex"`` they are an error, as in hexbin.
    ``"grayhex"``: the same cells drawn in grey levels at their centres (R's ``gplot.hexbin``
    colour scale; ``xcm``/``ycm`` unweighted, as hexbin's). ``"subsample"``: ``sample_size``
    rows drawn with replacement with probability proportional to the weight, jittered as R's
    ``jitter(factor=3, amount=)`` (random: numpy's generator with ``seed``, so equal to R's
    in distribution only; ``amount`` per axis, R's ``amount=list(x=, y=)``).
    The weights are the sampling weights on every design kind (R's ``"transparent"`` reads
    ``weights(design)``, the replicate-weight matrix on a replicate design).
    """
    if style not in ("bubble", "transparent", "hex", "grayhex", "subsample"):
        raise ValueError(f"svyplot: style={style!r}: choose 'bubble', 'transparent', 'hex', "
                         "'grayhex' or 'subsample'.")
    _check_columns(design, [y, x], "svyplot")
    rows, W = _rows_and_weights(design)
    X = design.numeric_values(x)[rows]
    Y = design.numeric_values(y)[rows]
    res = ScatterValues(x=X, y=Y, style=style)
    if style == "bubble":
        res.radius = np.sqrt(W)
    elif style == "transparent":
        maxw = W.max()
        res.alpha = (alpha[0] * (maxw - W) + alpha[1] * W) / maxw
    elif style == "subsample":
        rng = np.random.default_rng(seed)
        index = rng.choice(X.shape[0], size=sample_size, replace=True, p=W / W.sum())
        res.index = index
        res.jitter_amount = (jitter_amount(X[index], 3, amount[0]),
                             jitter_amount(Y[index], 3, amount[1]))
        res.x = X[index] + rng.uniform(-1, 1, sample_size) * res.jitter_amount[0]
        res.y = Y[index] + rng.uniform(-1, 1, sample_size) * res.jitter_amount[1]
    else:
        bad = np.isnan(X) | np.isnan(Y)
        if bad.any():
            raise ValueError(f"svyplot: missing values of {x!r}/{y!r} in rows "
                             f"{list(design.full_data.index[rows][bad][:5])}; drop them with "
                             "subset().")
        cid, (_, jmax) = hexbin_cells(X, Y, xbins)
        cells, inv = np.unique(cid, return_inverse=True)
        res.cid, res.cell = cid, cells
        res.count = np.bincount(inv, weights=W)
        if style == "hex":
            res.xcm = np.bincount(inv, weights=W * X) / res.count
            res.ycm = np.bincount(inv, weights=W * Y) / res.count
        else:  # grayhex keeps hexbin's unweighted centroids
            k = np.bincount(inv)
            res.xcm, res.ycm = np.bincount(inv, weights=X) / k, np.bincount(inv, weights=Y) / k
        c = cells - 1
        i, j = c // jmax, c % jmax
        res.xcenter = (X.max() - X.min()) / xbins * np.where(i % 2 == 0, j, j + 0.5) + X.min()
        res.ycenter = ((Y.max() - Y.min()) * math.sqrt(3)) / (2 * xbins) * i + Y.min()
    if plot:
        res.ax = _draw_scatter(res, _axes(ax), inches, xbins, basecol, **kwargs)
        res.ax.set_xlabel(x)
        res.ax.set_ylabel(y)
    return res


def _draw_scatter(res: ScatterValues, ax: Any, inches: float, xbins: int, basecol: str,
                  **kwargs: Any) -> Any:
    if res.style == "bubble":
        r = res.radius / np.nanmax(res.radius) * inches * 72  # radius in points
        ax.scatter(res.x, res.y, s=(2 * r) ** 2, facecolors="none", edgecolors=basecol,
                   **kwargs)
    elif res.style == "subsample":
        ax.scatter(res.x, res.y, facecolors="none", edgecolors=basecol, **kwargs)
    elif res.style == "grayhex":
        from matplotlib.collections import PolyCollection

        dx = (np.nanmax(res.x) - np.nanmin(res.x)) / xbins / 2
        dy = (np.nanmax(res.y) - np.nanmin(res.y)) * math.sqrt(3) / (2 * xbins) / 3
        hx = np.array([dx, dx, 0, -dx, -dx, 0])
        hy = np.array([dy, -dy, -2 * dy, -dy, dy, 2 * dy])
        verts = [np.column_stack([cx + hx, cy + hy])
                 for cx, cy in zip(res.xcenter, res.ycenter, strict=True)]
        ax.add_collection(PolyCollection(
            verts, facecolors=[_grey(v) for v in res.count / res.count.max()],
            edgecolors="none"))
        ax.set_xlim(np.nanmin(res.x) - 2 * dx, np.nanmax(res.x) + 2 * dx)
        ax.set_ylim(np.nanmin(res.y) - 3 * dy, np.nanmax(res.y) + 3 * dy)
    elif res.style == "transparent":
        from matplotlib.colors import to_rgba

        rgba = np.tile(to_rgba(basecol), (res.x.shape[0], 1))
        rgba[:, 3] = res.alpha
        ax.scatter(res.x, res.y, c=rgba, **kwargs)
    else:
        from matplotlib.collections import PolyCollection

        # hexbin's pointy-top hexagons: half-width c3 / 2, row spacing c4 = 3 dy
        xr = np.nanmax(res.x) - np.nanmin(res.x)
        yr = np.nanmax(res.y) - np.nanmin(res.y)
        dx = xr / xbins / 2
        dy = yr * math.sqrt(3) / (2 * xbins) / 3
        hx = np.array([dx, dx, 0, -dx, -dx, 0])
        hy = np.array([dy, -dy, -2 * dy, -dy, dy, 2 * dy])
        share = res.count / res.count.max()
        scale = np.sqrt(share)  # area proportional to the weight (R's "centroids" style)
        verts = [np.column_stack([cx + s * hx, cy + s * hy])
                 for cx, cy, s in zip(res.xcm, res.ycm, scale, strict=True)]
        ax.add_collection(PolyCollection(verts, facecolors=[_grey(v) for v in share],
                                         edgecolors="none"))
        ax.set_xlim(np.nanmin(res.x) - 2 * dx, np.nanmax(res.x) + 2 * dx)
        ax.set_ylim(np.nanmin(res.y) - 3 * dy, np.nanmax(res.y) + 3 * dy)
    return ax


def jitter_amount(x: np.ndarray, factor: float = 1.0, amount: float | None = None) -> float:
    """Half-width of R's ``jitter(x, factor, amount)``'s uniform noise."""
    fin = x[np.isfinite(x)]
    z = float(fin.max() - fin.min())
    if z == 0:
        z = abs(float(fin.min()))
    if z == 0:
        z = 1.0
    if amount is None:
        xx = np.unique(np.round(x, int(3 - math.floor(math.log10(z)))))
        d = np.diff(xx)
        if d.shape[0]:
            dd = float(d.min())
        else:
            dd = float(xx[0]) / 10 if xx[0] != 0 else z / 10
        return factor / 5 * abs(dd)
    if amount == 0:
        return factor * (z / 50)
    return float(amount)


def _grey(level: float) -> tuple[float, float, float]:
    g = 0.85 * (1 - level)
    return (g, g, g)


# ------------------------------------------------------------------------------ qq plots
@dataclass
class QQValues:
    """The points of a Q-Q plot: ``x`` (horizontal) and ``y`` (vertical), in R's order."""

    x: np.ndarray
    y: np.ndarray
    ax: Any = field(default=None, repr=False)


def svyqqplot(y: str, x: str, design: Any, designx: Any = None, qrule: str = "hf8",
              plot: bool = True, ax: Any = None, **kwargs: Any) -> QQValues:
    """Quantile-quantile plot of ``y`` against ``x`` (R ``svyqqplot(y ~ x, design)``).

    As R: with one design, the sorted values of each variable over the complete rows (R
    compares the sample order statistics; the weights are not used); with ``designx``, ``y``
    from ``design`` against ``x`` from ``designx``, the longer of the two replaced by its
    estimated population quantiles (``qrule``, R's default ``"hf8"``) at ``i / n`` of the
    shorter's length ``n``.
    """
    _check_columns(design, [y] + ([] if designx is not None else [x]), "svyqqplot")
    inside = np.asarray(design.in_subset, dtype=bool)
    if designx is None:
        rows = _rows_and_weights(design)[0]
        Y = design.numeric_values(y)[rows]
        X = design.numeric_values(x)[rows]
        ok = ~(np.isnan(X) | np.isnan(Y))
        X, Y = X[ok], Y[ok]
    else:
        _check_columns(designx, [x], "svyqqplot (designx)")
        Y = design.numeric_values(y)[inside]
        wy = np.asarray(design.full_weights, dtype=float)[inside]
        inx = np.asarray(designx.in_subset, dtype=bool)
        X = designx.numeric_values(x)[inx]
        wx = np.asarray(designx.full_weights, dtype=float)[inx]
        if np.isnan(X).any() or np.isnan(Y).any():
            raise ValueError("svyqqplot: missing values with designx (R fails too); subset "
                             "them away first.")
        n, m = Y.shape[0], X.shape[0]
        if n < m:
            X = weighted_quantile(X, wx, np.arange(1, n + 1) / n, qrule)
        elif n > m:
            Y = weighted_quantile(Y, wy, np.arange(1, m + 1) / m, qrule)
    res = QQValues(x=np.sort(X), y=np.sort(Y))
    if plot:
        res.ax = _axes(ax)
        res.ax.scatter(res.x, res.y, facecolors="none", edgecolors="black", **kwargs)
        res.ax.set_xlabel(x)
        res.ax.set_ylabel(y)
    return res


def svyqqmath(x: str, design: Any, null: Any = None, plot: bool = True, ax: Any = None,
              **kwargs: Any) -> QQValues:
    """Q-Q plot of ``x`` against a reference distribution (R ``svyqqmath``, default normal):
    the sorted values against ``null(cumsum(w) / sum(w) * n / (n + 1))``, ``null`` a quantile
    function (default ``scipy.stats.norm.ppf``). Rows with a missing value are left out; ``n``
    counts them as R's does on a calibrated design (R keeps them with weight 0 there)."""
    _check_columns(design, [x], "svyqqmath")
    q = stats.norm.ppf if null is None else null
    rows, w = _rows_and_weights(design)
    v = design.numeric_values(x)[rows]
    nas = np.isnan(v)
    cal = bool(getattr(design, "is_calibrated", False))
    n = v.shape[0] if cal else int((~nas).sum())
    v, w = v[~nas], w[~nas]
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order].astype(np.longdouble)).astype(float) / w.sum() * (n / (n + 1))
    res = QQValues(x=np.asarray(q(cum), dtype=float), y=v[order])
    if plot:
        res.ax = _axes(ax)
        res.ax.scatter(res.x, res.y, facecolors="none", edgecolors="black", **kwargs)
        res.ax.set_xlabel("Expected")
        res.ax.set_ylabel("Observed")
    return res


# ------------------------------------------------------------------------------ svycdf plot
def plot_cdf(cdf: Any, ax: Any = None, **kwargs: Any) -> Any:
    """Draw a :class:`~surveysynth.analysis.StepCDF` as R's ``plot.stepfun`` does: horizontal
    steps, a point at each jump's upper value; returns the axes."""
    ax = _axes(ax)
    xs, ys = cdf.x, cdf.y
    pad = 0.04 * (xs[-1] - xs[0] if xs.shape[0] > 1 else 1.0)
    ax.step(np.r_[xs[0] - pad, xs, xs[-1] + pad], np.r_[0.0, ys, 1.0], where="post",
            color=kwargs.pop("color", "black"), **kwargs)
    ax.scatter(xs, ys, s=8, color="black")
    ax.set_xlabel(cdf.name)
    ax.set_ylabel("Fn(x)")
    return ax


# ------------------------------------------------------------------------------ dotchart
def dotchart(result: pd.DataFrame, ax: Any = None, plot: bool = True, **kwargs: Any):
    """Dot chart of an estimate table (R ``dotchart`` of a ``svystat`` or ``svyby``: the
    coefficients, one dot per row). Returns the values drawn as a Series labelled by the
    domain, variable and level columns; ``.attrs["ax"]`` the axes when drawn."""
    if "estimate" not in getattr(result, "columns", []):
        raise ValueError("dotchart: give an estimate table (a DataFrame with an 'estimate' "
                         "column, as d.mean() returns).")
    label_cols = [c for c in result.columns if c not in (
        "estimate", "se", "ci_low", "ci_high", "df", "cv", "n", "deff")]
    labels = [":".join(str(v) for v in row) for row in result[label_cols].itertuples(
        index=False)]
    values = pd.Series(result["estimate"].to_numpy(dtype=float), index=labels, name="estimate")
    if plot:
        ax = _axes(ax)
        pos = np.arange(values.shape[0])
        ax.plot(values.to_numpy(), pos, "o", color=kwargs.pop("color", "black"), **kwargs)
        ax.set_yticks(pos, labels)
        ax.grid(axis="y", linestyle=":")
        values.attrs["ax"] = ax
    return values


# ------------------------------------------------------------------------------ svycoplot
@dataclass
class CoplotValues:
    """What :func:`svycoplot` draws per panel (one per level of ``by``, R's lattice order):
    ``panels[level]`` holds ``x``, ``y`` and, for ``style="transparent"``, ``alpha`` (opacity
    from the weights of the whole design, as R); for ``"hexbin"``, the panel's hexagons
    (``cell``, ``count``, ``xcm``, ``ycm``)."""

    style: str
    panels: dict[Any, dict[str, np.ndarray]]
    fig: Any = field(default=None, repr=False)


def svycoplot(y: str, x: str, by: str, design: Any, style: str = "transparent",
              alpha: tuple[float, float] = (0.0, 0.8), basecol: str = "black",
              xbins: int = 15, plot: bool = True, **kwargs: Any) -> CoplotValues:
    """Conditioning plot: ``y`` against ``x`` in one panel per level of ``by`` (R
    ``svycoplot(y ~ x | by, design)``).

    ``style="transparent"``: R's opacities ``(alpha[0] (max w - w) + alpha[1] w) / max w``,
    ``max w`` over the whole design (tested equal to R's). ``style="hexbin"``: weighted hexagons
    per panel on the panel's data range (``xbins``); R bins on lattice's padded panel scale with
    the panel's aspect ratio (device-dependent), so the hexagons differ from R's in position,
    not in what they show.
    """
    if style not in ("transparent", "hexbin"):
        raise ValueError(f"svycoplot: style={style!r}: 'transparent' or 'hexbin'.")
    _check_columns(design, [y, x, by], "svycoplot")
    rows, W = _rows_and_weights(design)
    X = design.numeric_values(x)[rows]
    Y = design.numeric_values(y)[rows]
    g = design.full_data[by][rows]
    levels = category_levels(g)
    alphas = (alpha[0] * (W.max() - W) + alpha[1] * W) / W.max()
    panels: dict[Any, dict[str, np.ndarray]] = {}
    for lev in levels:
        sel = (g == lev).to_numpy()
        p = {"x": X[sel], "y": Y[sel]}
        if style == "transparent":
            p["alpha"] = alphas[sel]
        else:
            ok = ~(np.isnan(p["x"]) | np.isnan(p["y"]))
            cid, _ = hexbin_cells(p["x"][ok], p["y"][ok], xbins)
            cells, inv = np.unique(cid, return_inverse=True)
            w = W[sel][ok]
            p["cell"], p["count"] = cells, np.bincount(inv, weights=w)
            p["xcm"] = np.bincount(inv, weights=w * p["x"][ok]) / p["count"]
            p["ycm"] = np.bincount(inv, weights=w * p["y"][ok]) / p["count"]
        panels[lev] = p
    res = CoplotValues(style, panels)
    if plot:
        import matplotlib.pyplot as plt
        from matplotlib.colors import to_rgba

        fig, axes = plt.subplots(1, len(levels), sharex=True, sharey=True,
                                 figsize=(3 * len(levels), 3), squeeze=False)
        for ax, lev in zip(axes[0], levels, strict=True):
            p = panels[lev]
            if style == "transparent":
                rgba = np.tile(to_rgba(basecol), (p["x"].shape[0], 1))
                rgba[:, 3] = p["alpha"]
                ax.scatter(p["x"], p["y"], c=rgba, **kwargs)
            else:
                s = 200 * p["count"] / max(q["count"].max() for q in panels.values())
                ax.scatter(p["xcm"], p["ycm"], s=s, marker="h", color=basecol, **kwargs)
            ax.set_title(f"{by} = {lev}")
            ax.set_xlabel(x)
        axes[0][0].set_ylabel(y)
        res.fig = fig
    return res
