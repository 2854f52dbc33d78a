"""Survey-weighted smoothers: R ``svysmooth(method="locpoly")`` (survey 4.5, unchanged since 4.1)
with KernSmooth's binned local polynomials and plug-in bandwidths, ported from KernSmooth 2.23's
Fortran and R code so that the numbers are R's.

R's algorithm: the x values are binned on a grid of ``ngrid`` points over their range (each
row's weight added to the grid point at or below it); a density estimate is KernSmooth's
``locpoly`` local-linear smooth of the binned weight shares scaled to a density; a regression
estimate is the local-linear smooth of the binned weighted sums of y over the binned weights.
The kernel is Gaussian, truncated at 4 bandwidths. Default bandwidths are KernSmooth's
plug-in rules computed from the *unweighted* sample, as R does: ``dpik`` (Wand & Jones's
direct plug-in, density) and ``dpill`` (Ruppert, Sheather & Wand's plug-in, regression).

KernSmooth's truncated linear binning drops a point that rounds to beyond the last grid point,
so ``dpik`` can depend on the last bit of the standardized maximum: its mean, variance and
quartiles are computed in R's operation order (long-double sums, R's type-7 quantile), which
makes the bandwidths equal R's bit for bit in the cases tested (apistrat's enroll is one where
numpy's mean would drop a different point and move the bandwidth by 0.25%).

``method="quantreg"`` (R's ``svyrqss``): weighted quantile regression on a B-spline basis
(``splines::bs``), solved as a linear program (scipy's HiGHS) and polished to the exact vertex.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .graphics import _axes, _check_columns, _rows_and_weights, _seq_length


# ------------------------------------------------------------------------------ KernSmooth
def _linpack_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """LINPACK ``dgefa`` + ``dgesl`` (Gaussian elimination, partial pivoting) on a stack of
    small systems ``A`` (M, p, p), ``b`` (M, p), in LINPACK's operation order."""
    A = A.copy()
    b = b.copy()
    M, p, _ = A.shape
    rows = np.arange(M)
    piv = np.zeros((M, p), dtype=int)
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(p - 1):
            l_ = k + np.argmax(np.abs(A[:, k:, k]), axis=1)
            piv[:, k] = l_
            t = A[rows, l_, k].copy()
            A[rows, l_, k] = A[:, k, k]
            A[:, k, k] = t
            t = -1.0 / A[:, k, k]
            A[:, k + 1:, k] *= t[:, None]
            for j in range(k + 1, p):
                t = A[rows, l_, j].copy()
                A[rows, l_, j] = A[:, k, j]
                A[:, k, j] = t
                A[:, k + 1:, j] += t[:, None] * A[:, k + 1:, k]
        for k in range(p - 1):
            l_ = piv[:, k]
            t = b[rows, l_].copy()
            b[rows, l_] = b[:, k]
            b[:, k] = t
            b[:, k + 1:] += t[:, None] * A[:, k + 1:, k]
        for k in range(p - 1, -1, -1):
            b[:, k] = b[:, k] / A[:, k, k]
            t = -b[:, k]
            b[:, :k] += t[:, None] * A[:, :k, k]
    return b


def _moments(xcnts: np.ndarray, delta: float, h: float, L: int, nmom: int,
             square: bool = False) -> np.ndarray:
    """``ss(j, ii) = sum_k xcnts(k) K((k - j) delta / h) (delta (k - j))^(ii - 1)`` for
    |k - j| <= L (KernSmooth's Fortran loops, summed over k in increasing order); with
    ``square`` the kernel is squared (``sstdiag``'s ``uu``)."""
    M = xcnts.shape[0]
    ss = np.zeros((M, nmom))
    j = np.arange(M)
    for d in range(-L, L + 1):
        k = j + d
        ok = (k >= 0) & (k < M)
        kern = math.exp(-((delta * abs(d) / h) ** 2) / 2) if d else 1.0
        if square:
            kern = kern ** 2
        c = np.zeros(M)
        c[ok] = xcnts[k[ok]]
        fac = 1.0
        ss[:, 0] += c * kern
        for ii in range(1, nmom):
            fac = fac * delta * d
            ss[:, ii] += c * kern * fac
    return ss


def locpoly_binned(xcounts: np.ndarray, ycounts: np.ndarray, a: float, b: float,
                   bandwidth: float, drv: int = 0, degree: int | None = None) -> np.ndarray:
    """KernSmooth's ``locpoly(xcounts, ycounts, drv, degree, bandwidth, range.x=c(a, b),
    binned=TRUE)$y``: local polynomial fit (Gaussian kernel truncated at 4 h) at each grid
    point (or its ``drv``-th derivative)."""
    degree = drv + 1 if degree is None else degree
    M = xcounts.shape[0]
    delta = (b - a) / (M - 1)
    L = math.floor(4 * bandwidth / delta)
    if L == 0:
        raise ValueError("svysmooth: the bandwidth is smaller than the grid spacing; use a "
                         "larger bandwidth or ngrid.")
    pp, ppp = degree + 1, 2 * degree + 1
    ss = _moments(xcounts, delta, bandwidth, L, ppp)
    tt = _moments(ycounts, delta, bandwidth, L, pp)
    S = np.stack([ss[:, i:i + pp] for i in range(pp)], axis=1)
    est = _linpack_solve(S, tt)[:, drv]
    return math.gamma(drv + 1) * est


def _sdiag(xcounts: np.ndarray, delta: float, h: float, both: bool):
    """KernSmooth ``sdiag`` (first diagonal entry of S^-1) and ``sstdiag`` for degree 1."""
    L = math.floor(4 * h / delta)
    ss = _moments(xcounts, delta, h, L, 3)
    S = np.stack([ss[:, 0:2], ss[:, 1:3]], axis=1)
    Sinv = np.stack([_linpack_solve(S, np.tile(e, (S.shape[0], 1)))
                     for e in np.eye(2)], axis=2)
    if not both:
        return Sinv[:, 0, 0]
    uu = _moments(xcounts, delta, h, L, 3, square=True)
    U = np.stack([uu[:, 0:2], uu[:, 1:3]], axis=1)
    return np.einsum("mi,mij,mj->m", Sinv[:, 0, :], U, Sinv[:, :, 0])


def _linbin(x: np.ndarray, a: float, b: float, M: int,
            y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """KernSmooth ``linbin`` / ``rlbin`` with truncation: linear binning onto M grid points."""
    delta = (b - a) / (M - 1)
    lxi = ((x - a) / delta) + 1
    li = np.trunc(lxi).astype(int)
    rem = lxi - li
    if y is not None:
        at_b = x == b
        li = np.where(at_b, M - 1, li)
        rem = np.where(at_b, 1.0, rem)
    ok = (li >= 1) & (li < M)
    xc = np.zeros(M)
    np.add.at(xc, li[ok] - 1, 1 - rem[ok])
    np.add.at(xc, li[ok], rem[ok])
    if y is None:
        return xc, None
    yc = np.zeros(M)
    np.add.at(yc, li[ok] - 1, (1 - rem[ok]) * y[ok])
    np.add.at(yc, li[ok], rem[ok] * y[ok])
    return xc, yc


def _bkfe(gcounts: np.ndarray, drv: int, h: float, a: float, b: float) -> float:
    """KernSmooth ``bkfe``: binned kernel estimate of the density functional psi_drv."""
    M = gcounts.shape[0]
    n = gcounts.sum()
    delta = (b - a) / (M - 1)
    L = min(math.floor((4 + drv) * h / delta), M)
    arg = np.arange(L + 1) * delta / h
    kappam = np.exp(-arg ** 2 / 2) / math.sqrt(2 * math.pi) / h ** (drv + 1)
    hm0, hm1, hmnew = np.ones_like(arg), arg, np.ones_like(arg)
    for i in range(2, drv + 1):
        hmnew = arg * hm1 - (i - 1) * hm0
        hm0, hm1 = hm1, hmnew
    kappam = hmnew * kappam
    P = 2 ** math.ceil(math.log(M + L + 1) / math.log(2))
    kap = np.concatenate([kappam, np.zeros(P - 2 * L - 1), kappam[1:][::-1]])
    G = np.concatenate([gcounts, np.zeros(P - M)])
    conv = np.real(np.fft.ifft(np.fft.fft(kap) * np.fft.fft(G)))[:M]
    return float(np.sum(gcounts * conv) / n ** 2)


def _r_mean(x: np.ndarray) -> float:
    """R's ``mean``: long-double sum over n, plus the long-double mean of the residuals."""
    xl = x.astype(np.longdouble)
    s = xl.sum() / x.shape[0]
    s += (xl - s).sum() / x.shape[0]
    return float(s)


def _r_var(x: np.ndarray) -> float:
    """R's ``var`` of a vector: long-double two-pass sum of squares over n - 1."""
    xl = x.astype(np.longdouble)
    m = xl.sum() / x.shape[0]
    m += (xl - m).sum() / x.shape[0]
    return float(((xl - m) ** 2).sum() / (x.shape[0] - 1))


def _r_quantile7(x: np.ndarray, p: float) -> float:
    """R's ``quantile(x, p)`` (type 7), in R's operation order."""
    xs = np.sort(x)
    index = (xs.shape[0] - 1) * p
    lo = math.floor(index)
    hi = math.ceil(index)
    q = xs[lo]
    h = index - lo
    if index > lo and xs[hi] != q:
        q = (1 - h) * q + h * xs[hi]
    return float(q)


def dpik(x: np.ndarray, gridsize: int = 401) -> float:
    """KernSmooth ``dpik(x, gridsize)``: direct plug-in bandwidth for a Gaussian kernel density
    estimate (level 2, scale ``min(IQR / 1.349, SD)``)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    a, b = float(x.min()), float(x.max())
    # bit for bit as R: whether linbin keeps the largest point depends on the last bit
    iqr = _r_quantile7(x, 3 / 4) - _r_quantile7(x, 1 / 4)
    scalest = min(iqr / 1.349, math.sqrt(_r_var(x)))
    if scalest == 0:
        raise ValueError("svysmooth: the scale estimate of x is zero; give a bandwidth.")
    mean = _r_mean(x)
    sx = (x - mean) / scalest
    sa, sb = (a - mean) / scalest, (b - mean) / scalest
    gcounts = _linbin(sx, sa, sb, gridsize)[0]
    alpha = (2 * math.sqrt(2) ** 9 / (7 * n)) ** (1 / 9)
    psi6 = _bkfe(gcounts, 6, alpha, sa, sb)
    alpha = (-3 * math.sqrt(2 / math.pi) / (psi6 * n)) ** (1 / 7)
    psi4 = _bkfe(gcounts, 4, alpha, sa, sb)
    del0 = 1 / (4 * math.pi) ** (1 / 10)
    return scalest * del0 * (1 / (psi4 * n)) ** (1 / 5)


def _block_fits(x: np.ndarray, y: np.ndarray, nval: int, q: int = 4):
    """Quartic least-squares fits on ``nval`` blocks of the sorted data (KernSmooth ``cp`` and
    ``blkest``): per block the coefficients of ``1, x, ..., x^q``."""
    n = x.shape[0]
    idiv = n // nval
    out = []
    for j in range(nval):
        lo, up = j * idiv, (n if j == nval - 1 else (j + 1) * idiv)
        xj, yj = x[lo:up], y[lo:up]
        X = xj[:, None] ** np.arange(q + 1)
        Q, R = np.linalg.qr(X)
        coef = np.linalg.solve(R, Q.T @ yj)
        out.append((xj, yj, coef))
    return out


def dpill(x: np.ndarray, y: np.ndarray, gridsize: int = 401, blockmax: int = 5,
          divisor: int = 20, trim: float = 0.01, proptrun: float = 0.05) -> float:
    """KernSmooth ``dpill(x, y, gridsize)``: Ruppert, Sheather and Wand's direct plug-in
    bandwidth for local linear regression (blocked quartic fits chosen by Mallows' Cp)."""
    order = np.argsort(x, kind="stable")
    x, y = np.asarray(x, dtype=float)[order], np.asarray(y, dtype=float)[order]
    cut = math.floor(trim * x.shape[0])
    x, y = x[cut: x.shape[0] - cut], y[cut: y.shape[0] - cut]
    # R's default range.x = range(x) is evaluated lazily, after the trimming
    a, b = float(x[0]), float(x[-1])
    n, M = x.shape[0], gridsize
    xcounts, ycounts = _linbin(x, a, b, M, y)
    nmax = max(min(n // divisor, blockmax), 1)
    qq = 5
    rss = np.zeros(nmax)
    for nval in range(1, nmax + 1):
        for xj, yj, coef in _block_fits(x, y, nval):
            fit = (xj[:, None] ** np.arange(qq)) @ coef
            rss[nval - 1] += np.sum((yj - fit) ** 2)
    cpvals = (n - qq * nmax) * rss / rss[-1] + 2 * qq * np.arange(1, nmax + 1) - n
    nval = int(np.argmin(cpvals)) + 1
    RSS = th22 = th24 = 0.0
    for xj, yj, c in _block_fits(x, y, nval):
        fit = (xj[:, None] ** np.arange(qq)) @ c
        ddm = 2 * c[2] + 6 * c[3] * xj + 12 * c[4] * xj ** 2
        ddddm = 24 * c[4]
        th22 += np.sum(ddm ** 2)
        th24 += np.sum(ddm * ddddm)
        RSS += np.sum((yj - fit) ** 2)
    sigsq = RSS / (n - qq * nval)
    th24 /= n
    gam = sigsq * (b - a) / (abs(th24) * n)
    if th24 < 0:
        gam = (3 * gam / (8 * math.sqrt(math.pi))) ** (1 / 7)
    elif th24 > 0:
        gam = (15 * gam / (16 * math.sqrt(math.pi))) ** (1 / 7)
    mdd = locpoly_binned(xcounts, ycounts, a, b, gam, drv=2)
    llow, lupp = math.floor(proptrun * M), M - math.floor(proptrun * M)
    th22kn = np.sum(mdd[llow:lupp] ** 2 * xcounts[llow:lupp]) / n
    c3k = 0.5 + 2 * math.sqrt(2) - (4 / 3) * math.sqrt(3)
    c3k = (4 * c3k / math.sqrt(2 * math.pi)) ** (1 / 9)
    lam = c3k * ((sigsq ** 2) * (b - a) / ((th22kn * n) ** 2)) ** (1 / 9)
    mest = locpoly_binned(xcounts, ycounts, a, b, lam)
    delta = (b - a) / (M - 1)
    sdg = _sdiag(xcounts, delta, lam, both=False)
    sstdg = _sdiag(xcounts, delta, lam, both=True)
    sigsqn = np.sum(y ** 2) - 2 * np.sum(mest * ycounts) + np.sum(mest ** 2 * xcounts)
    sigsqd = n - 2 * np.sum(sdg * xcounts) + np.sum(sstdg * xcounts)
    return float((sigsqn / sigsqd * (b - a) / (2 * math.sqrt(math.pi) * th22kn * n)) ** 0.2)


# ------------------------------------------------------------------------------ quantreg
def bs_basis(x: np.ndarray, df: int, degree: int = 3) -> np.ndarray:
    """R ``splines::bs(x, df)`` (no intercept): cubic B-splines with ``df - degree`` interior
    knots at R's type-7 quantiles of x and boundary knots at its range."""
    from scipy.interpolate import BSpline

    ord_ = degree + 1
    nik = max(df - ord_ + 1, 0)
    probs = _seq_length(0.0, 1.0, nik + 2)[1:-1]
    inner = [_r_quantile7(x, float(q)) for q in probs]
    lo, hi = float(np.min(x)), float(np.max(x))
    knots = np.sort(np.r_[[lo] * ord_, inner, [hi] * ord_])
    nb = knots.shape[0] - ord_
    B = np.zeros((x.shape[0], nb))
    for j in range(nb):
        c = np.zeros(nb)
        c[j] = 1.0
        B[:, j] = BSpline(knots, c, degree, extrapolate=False)(x)
    at_hi = x == hi  # the last basis function is 1 at the right boundary, as splineDesign
    B[at_hi] = 0.0
    B[at_hi, -1] = 1.0
    return np.nan_to_num(B[:, 1:])


def rq_fit(X: np.ndarray, y: np.ndarray, tau: float, w: np.ndarray) -> np.ndarray:
    """Weighted linear quantile regression (quantreg ``rq(..., weights=w)``): minimize
    ``sum w_i rho_tau(y_i - x_i b)`` by linear programming (HiGHS); the vertex is then solved
    exactly on the rows it fits exactly (the solution quantreg's simplex returns when it is
    unique)."""
    from scipy.optimize import linprog

    n, p = X.shape
    Xw, yw = X * w[:, None], y * w
    c = np.r_[np.zeros(p), np.full(n, tau), np.full(n, 1 - tau)]
    A = np.hstack([Xw, np.eye(n), -np.eye(n)])
    bounds = [(None, None)] * p + [(0, None)] * (2 * n)
    res = linprog(c, A_eq=A, b_eq=yw, bounds=bounds, method="highs")
    if res.status != 0:
        raise ValueError(f"svysmooth(method='quantreg'): the linear program failed: "
                         f"{res.message}")
    beta = res.x[:p]
    basis = np.argsort(np.abs(yw - Xw @ beta), kind="stable")[:p]
    if np.linalg.matrix_rank(Xw[basis]) == p:
        beta = np.linalg.solve(Xw[basis], yw[basis])
    return beta


# ------------------------------------------------------------------------------ svysmooth
@dataclass
class Smooth:
    """Result of :func:`svysmooth`: per x variable, the grid ``x[name]`` and the estimate
    ``y[name]`` (R's ``list(x=, y=)`` per term), the ``bandwidth`` used, and ``density``
    (True for a density estimate)."""

    x: dict[str, np.ndarray]
    y: dict[str, np.ndarray]
    bandwidth: dict[str, float]
    density: bool
    ylab: str
    ax: Any = field(default=None, repr=False)

    def plot(self, which: str | None = None, ax: Any = None, **kwargs: Any) -> Any:
        """Draw the smooth of ``which`` (default the first term) as a line; returns the axes."""
        name = next(iter(self.x)) if which is None else which
        ax = _axes(ax)
        ax.plot(self.x[name], self.y[name], **kwargs)
        ax.set_xlabel(name)
        ax.set_ylabel(self.ylab)
        return ax


def svysmooth(x: str | Sequence[str], design: Any, y: str | None = None,
              bandwidth: float | Sequence[float] | None = None, ngrid: int = 401,
              xlim: Sequence[float] | None = None, na_rm: bool = False,
              method: str = "locpoly", quantile: float | Sequence[float] = 0.5,
              df: int | Sequence[int] = 4) -> Smooth:
    """Survey-weighted kernel density (``y=None``, R ``svysmooth(~x, design)``) or local-linear
    regression smooth of ``y`` (R ``svysmooth(y ~ x, design)``) on a grid of ``ngrid`` points
    for each column of ``x``.

    ``bandwidth``: one per x column (recycled); by default KernSmooth's plug-in bandwidths
    ``dpik`` (density) and ``dpill`` (regression) of the unweighted sample, as R. ``xlim``:
    the grid's range (default each column's range). Missing values are an error unless
    ``na_rm=True`` (R's ``na.omit``, dropping rows with a missing value in any variable).

    ``method="quantreg"``: R's quantile regression smoother (``svyrqss``): for each x column,
    the weighted ``quantile`` regression of ``y`` on ``splines::bs(x, df)`` (quantreg's
    ``rq`` with the sampling weights), its fitted values at the sorted sample x (``quantile``
    and ``df`` recycled over the columns). Regression only, as R.
    """
    if method not in ("locpoly", "quantreg"):
        raise ValueError(f"svysmooth: method={method!r}: 'locpoly' or 'quantreg'.")
    if method == "quantreg" and y is None:
        raise ValueError("svysmooth: method='quantreg' does not do densities (as R); give y.")
    cols = [x] if isinstance(x, str) else list(x)
    _check_columns(design, cols + ([y] if y else []), "svysmooth")
    rows, w = _rows_and_weights(design)
    X = np.column_stack([design.numeric_values(c) for c in cols])[rows]
    Y = design.numeric_values(y)[rows] if y else None
    bad = np.isnan(X).any(axis=1) | (np.isnan(Y) if Y is not None else False)
    if bad.any():
        if not na_rm:
            idx = list(design.full_data.index[rows][bad][:5])
            raise ValueError(f"svysmooth: missing values at rows {idx}. Fix: na_rm=True drops "
                             "them (R's na.omit).")
        X, w = X[~bad], w[~bad]
        Y = Y[~bad] if Y is not None else None
    if method == "quantreg":
        return _rqss(X, cols, Y, w, quantile, df, str(y))
    return _smooth(X, cols, Y, w, bandwidth, ngrid, xlim, "Density" if Y is None else str(y))


def _rqss(X: np.ndarray, cols: list[str], Y: np.ndarray, w: np.ndarray, quantile: Any,
          df: Any, ylab: str) -> Smooth:
    taus = np.resize(np.atleast_1d(np.asarray(quantile, dtype=float)), len(cols))
    dfs = np.resize(np.atleast_1d(np.asarray(df, dtype=int)), len(cols))
    out = Smooth({}, {}, {}, False, ylab)
    for i, c in enumerate(cols):
        xi = X[:, i]
        B = np.column_stack([np.ones(xi.shape[0]), bs_basis(xi, int(dfs[i]))])
        fitted = B @ rq_fit(B, Y, float(taus[i]), w)
        order = np.argsort(xi, kind="stable")
        out.x[c], out.y[c], out.bandwidth[c] = xi[order], fitted[order], float("nan")
    return out


def _smooth(X: np.ndarray, cols: list[str], Y: np.ndarray | None, w: np.ndarray,
            bandwidth: Any, ngrid: int, xlim: Sequence[float] | None, ylab: str) -> Smooth:
    """R's ``svylocpoly`` on complete arrays: X (n, p), Y (n,) or None, weights w (n,)."""
    density = Y is None
    bws = (None if bandwidth is None else
           np.resize(np.atleast_1d(np.asarray(bandwidth, dtype=float)), len(cols)))
    out = Smooth({}, {}, {}, density, ylab)
    for i, c in enumerate(cols):
        xi = X[:, i]
        lim = (float(xi.min()), float(xi.max())) if xlim is None else (float(min(xlim)),
                                                                        float(max(xlim)))
        if bws is not None:
            h = float(bws[i])
        else:
            h = dpik(xi, ngrid) if density else dpill(xi, Y, ngrid)
        gx = _seq_length(lim[0], lim[1], ngrid)
        idx = np.searchsorted(gx, xi, side="right") - 1  # R's findInterval
        keep = idx >= 0
        nx = np.bincount(idx[keep], weights=w[keep], minlength=ngrid)[:ngrid]
        if density:
            est = locpoly_binned(np.ones(ngrid), nx * ngrid / ((lim[1] - lim[0]) * w.sum()),
                                 lim[0], lim[1], h)
        else:
            ny = np.bincount(idx[keep], weights=(Y * w)[keep], minlength=ngrid)[:ngrid]
            est = locpoly_binned(nx, ny, lim[0], lim[1], h)
        out.x[c], out.y[c], out.bandwidth[c] = gx, est, h
    return out


def make_panel_svysmooth(design: Any, bandwidth: float | None = None):
    """A panel function drawing points and a survey-weighted smooth (R
    ``make.panel.svysmooth``, used by R's ``termplot(..., smooth=)``).

    Returns ``panel(x, y, ax=None, span=None, color="red")``: ``x`` and ``y`` are arrays with
    one value per row of the design (partial residuals, say); it draws the points and the
    local-linear smooth of ``y`` on ``x`` with the design's sampling weights (bandwidth: the
    one given, ``span`` as R (``range(x) * span / 3``), else ``dpill``) and returns the
    :class:`Smooth`.
    """
    rows, w = _rows_and_weights(design)

    def panel(x: Any, y: Any, ax: Any = None, span: float | None = None,
              color: str = "red", plot: bool = True) -> Smooth:
        xv = np.asarray(x, dtype=float)
        yv = np.asarray(y, dtype=float)
        if xv.shape != (w.shape[0],) or yv.shape != (w.shape[0],):
            raise ValueError(f"panel: x and y need one value per row of the design "
                             f"({w.shape[0]}); got {xv.shape} and {yv.shape}.")
        bw = bandwidth if span is None else (xv.max() - xv.min()) * span / 3
        s = _smooth(xv[:, None], ["x"], yv, w, bw, 401, None, "y")
        if plot:
            s.ax = _axes(ax)
            s.ax.scatter(xv, yv, facecolors="none", edgecolors="black")
            s.ax.plot(s.x["x"], s.y["x"], color=color)
        return s

    return panel
