"""Survival analysis for complex samples: R ``svykm`` (weighted Kaplan-Meier curves with
design-based SEs, their quantiles and intervals) and ``svycoxph`` (Cox models with
design-based variance), as R survey 4.1.1 and 4.5 compute them (the two agree).

Formulas are R's: ``"Surv(time, status > 0) ~ I(bili > 6)"``, ``"Surv(time, status > 0) ~
np.log(bili) + protime + albumin"`` (Python expressions inside, formulaic's syntax on the right
of ``~``; R's ``log(bili)`` is ``np.log(bili)``). Only right-censored data (``Surv(time,
event)``), as R's svykm; :func:`svycoxph` also takes counting-process ``Surv(start, stop, event)``
(at risk on (start, stop]) and ``strata()`` terms (a baseline hazard per stratum).

:func:`svykm`:

* without ``se``: R's ``svykm_fit``, the product-limit estimator with weights, ``time``
  starting at 0 with survival 1;
* with ``se=True`` (linearization designs): R's ``km.stderr``: the survival is
  ``exp(-H)`` with ``H`` the weighted Nelson-Aalen cumulative hazard (R uses that, not the
  product limit, when it computes SEs), one step per event (tied events are separate steps), and
  ``varlog`` the delta-method variance of ``log S = -H`` from the design covariance of the
  totals of the event and at-risk indicators (R's "brute force and ignorance");
* groups on the right of ``~`` give one curve per level (R's ``svykmlist``), each over its
  domain (R ``subset(design, group == g)``, a domain for the variance);
* replicate designs: curves without SEs (R: "SE not yet available"). R computes grouped curves
  on replicate designs from the replicate-weight matrix (``weights(design)[groups == g]``,
  recycled: a bug); here they use the sampling weights, as the ungrouped curve does in R.

:func:`svycoxph`: the Cox model fitted with the sampling weights (rescaled to mean 1) by R's
``coxph`` Newton-Raphson iterations, Efron ties by default (R's default) or Breslow, and the
design-based variance: linearization designs the design covariance (R ``svyrecvar``) of the
weighted ``dfbeta`` residuals (score residuals times the inverse information, R's
``resid(fit, "dfbeta", weighted=TRUE)``); replicate designs refit with every replicate's
weights from the full-sample coefficients (R ``svycoxph.svyrep.design``) and ``svrVar``.

Why not lifelines or statsmodels' PHReg for the point estimate: lifelines is not installed here
and its Newton steps stop on a different rule; statsmodels' PHReg gives the estimate but not
the weighted Efron score residuals the design variance needs, and R's estimate itself depends on
where its iterations stop (``|1 - loglik / newlk| <= 1e-9``) and the information at that point.
The iterations (:func:`_coxfit`) and the score residuals (:func:`_score_residuals`) follow the
survival package's ``coxfit6.c`` and ``coxscore2.c`` step by step in numpy (survival 3.5),
which is what makes the coefficients and SEs equal R's to 1e-8.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import linalg, stats

from .covariance import influence_covariance, replicate_covariance
from .formulas import formula_columns, formula_matrix, quote_dotted

_SURV = re.compile(r"^\s*Surv\s*\((.*)\)\s*~(.*)$", re.S)


def _split_args(text: str) -> list[str]:
    """Split ``a, b > 0`` at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _parse(formula: str, what: str, allow_strata: bool = False
           ) -> tuple[str | None, str, str, str]:
    """``(start, stop, event, rhs)`` of ``Surv(...) ~ rhs`` (start None for right-censored
    data; ``Surv(start, stop, event)`` only where strata are allowed, i.e. svycoxph)."""
    if not isinstance(formula, str):
        raise ValueError(f"{what}: formula={formula!r}: give a string such as "
                         "'Surv(time, status > 0) ~ group'.")
    m = _SURV.match(formula)
    if m is None:
        raise ValueError(
            f"{what}: formula {formula!r}: the response must be Surv(time, event), e.g. "
            "'Surv(time, status > 0) ~ 1'.")
    args = _split_args(m.group(1))
    entry = None
    if len(args) == 3 and allow_strata:  # svycoxph: counting process (start, stop]
        entry, args = args[0], args[1:]
    elif len(args) != 2:
        raise ValueError(
            f"{what}: Surv() with {len(args)} arguments: only right-censored "
            "Surv(time, event) is supported here (svycoxph also takes Surv(start, stop, "
            "event)).")
    rhs = m.group(2).strip()
    if not allow_strata and re.search(r"\bstrata\s*\(", rhs):
        raise ValueError(f"{what}: strata() terms are not supported here (svycoxph takes "
                         "them); model the variable as a covariate or fit each stratum.")
    return entry, args[0], args[1], rhs or "1"


def _values(expr: str, data: pd.DataFrame, what: str) -> pd.Series:
    """A column, or the value of an expression of columns (NaN where a column used is NA)."""
    if expr in data.columns:
        return data[expr]
    cols = formula_columns(expr, data.columns)
    text = quote_dotted(expr, data.columns)
    inner = text[2:-1] if text.startswith("I(") and text.endswith(")") else text
    try:  # comparisons and arithmetic keep their type (a logical stays logical, as in R)
        vals = pd.Series(data.eval(inner, engine="python"), index=data.index)
    except Exception:  # function calls such as np.log(x): formulaic's evaluation
        mm = formula_matrix(f"0 + I({inner})", data, what, r_logicals=False,
                            na_action="ignore")
        if mm.shape[1] != 1:
            raise ValueError(
                f"{what}: {expr!r} must give one value per row, got {mm.shape[1]}.") from None
        vals = pd.Series(np.asarray(mm.iloc[:, 0]), index=data.index)
    if cols:
        na = data[cols].isna().any(axis=1).to_numpy()
        if na.any():
            vals = vals.astype(object).where(~na, np.nan)
    return vals


def _response(formula: str, design: Any, what: str, allow_strata: bool = False):
    """Time, status (0/1), the right-hand side, the rows in scope (in the design's subset, no
    missing value) over ``design.full_data`` and the entry times (None unless
    ``Surv(start, stop, event)``)."""
    e_expr, t_expr, s_expr, rhs = _parse(formula, what, allow_strata)
    data = design.full_data
    time = pd.to_numeric(_values(t_expr, data, what), errors="coerce").to_numpy(float)
    entry = (None if e_expr is None else
             pd.to_numeric(_values(e_expr, data, what), errors="coerce").to_numpy(float))
    raw = _values(s_expr, data, what)
    status = pd.to_numeric(raw.map(lambda v: float(v) if isinstance(v, (bool, np.bool_))
                                   else v), errors="coerce").to_numpy(float)
    ok = ~np.isnan(time) & ~np.isnan(status)
    if entry is not None:
        ok &= ~np.isnan(entry)
        bad = ok & ~(entry < time)
        if bad.any():
            raise ValueError(f"{what}: Surv(start, stop, event) needs start < stop; rows "
                             f"{data.index[bad][:5].tolist()} do not (R: 'Stop time must be "
                             "> start time').")
    bad = ok & ~np.isin(status, (0.0, 1.0))
    if bad.any():
        raise ValueError(
            f"{what}: the event indicator {s_expr!r} must be 0/1 or logical; rows "
            f"{data.index[bad][:5].tolist()} have {sorted(set(status[bad]))[:5]}. Fix: e.g. "
            f"Surv({t_expr}, {s_expr} > 0).")
    return time, status, rhs, ok & np.asarray(design.in_subset, dtype=bool), entry


# ----------------------------------------------------------------------------- svykm
class KMCurve:
    """A weighted survival curve (R ``svykm``): ``time``, ``surv`` and, with SEs, ``varlog``
    (variance of log survival). ``frame`` gives them as a DataFrame with ``se_log``;
    :meth:`quantile` and :meth:`confint` are R's ``quantile.svykm`` and ``confint.svykm``."""

    def __init__(self, time: np.ndarray, surv: np.ndarray,
                 varlog: np.ndarray | None = None) -> None:
        self.time = np.asarray(time, dtype=float)
        self.surv = np.asarray(surv, dtype=float)
        self.varlog = None if varlog is None else np.asarray(varlog, dtype=float)

    @property
    def frame(self) -> pd.DataFrame:
        out = pd.DataFrame({"time": self.time, "surv": self.surv})
        if self.varlog is not None:
            out["varlog"] = self.varlog
            out["se_log"] = np.sqrt(self.varlog)
        return out

    @staticmethod
    def _first_below(curve: np.ndarray, time: np.ndarray, p: float) -> float:
        idx = np.flatnonzero(curve <= p)
        return float(time[idx[0]]) if idx.size else float("inf")

    def quantile(self, probs: Sequence[float] = (0.75, 0.5, 0.25), ci: bool = False,
                 level: float = 0.95) -> pd.DataFrame:
        """Survival quantiles: the first time the curve is at or below each ``p`` (inf if
        never), R ``quantile.svykm``; ``ci=True`` adds R's interval, the times where the
        pointwise limits ``exp(log S +- z se)`` cross ``p`` (needs ``se=True``)."""
        probs = [float(p) for p in np.atleast_1d(probs)]
        out = pd.DataFrame({"p": probs,
                            "time": [self._first_below(self.surv, self.time, p)
                                     for p in probs]})
        if ci:
            if self.varlog is None:
                raise ValueError("quantile(ci=True): the curve has no SEs; fit svykm with "
                                 "se=True.")
            z = stats.norm.isf((1 - level) / 2)
            with np.errstate(divide="ignore"):
                su = np.exp(np.log(self.surv) + z * np.sqrt(self.varlog))
                sl = np.exp(np.log(self.surv) - z * np.sqrt(self.varlog))
            out["ci_low"] = [self._first_below(sl, self.time, p) for p in probs]
            out["ci_high"] = [self._first_below(su, self.time, p) for p in probs]
        return out

    def confint(self, parm: Sequence[float], level: float = 0.95) -> pd.DataFrame:
        """Pointwise intervals of the survival at times ``parm`` (R ``confint.svykm``):
        ``exp(log S +- z se)`` at the last step at or before each time, upper limit capped at
        1."""
        if self.varlog is None:
            raise ValueError("confint: the curve has no SEs; fit svykm with se=True.")
        parm = np.atleast_1d(np.asarray(parm, dtype=float))
        idx = []
        for t in parm:
            k = np.flatnonzero(self.time <= t)
            if not k.size:
                raise ValueError(f"confint: time {t:g} is before the first step of the curve "
                                 f"({self.time[0]:g}).")
            idx.append(int(k[-1]))
        z = stats.norm.isf((1 - level) / 2)
        ls = np.log(self.surv[idx])
        se = np.sqrt(self.varlog[idx])
        return pd.DataFrame({"time": parm, "ci_low": np.exp(ls - z * se),
                             "ci_high": np.minimum(np.exp(ls + z * se), 1.0)})

    def __repr__(self) -> str:
        q = self.quantile().set_index("p")["time"]
        return (f"Weighted survival curve: Q1 = {q[0.75]:.6g}, median = {q[0.5]:.6g}, "
                f"Q3 = {q[0.25]:.6g} ({self.time.shape[0]} steps"
                f"{', with SEs' if self.varlog is not None else ''})")


class KMCurves(dict):
    """Survival curves by group (R ``svykmlist``): a dict ``{level: KMCurve}`` in R's level
    order."""

    def __repr__(self) -> str:
        return "Weighted survival curves:\n" + "\n".join(f"{k}: {v!r}" for k, v in self.items())


def _km_fit(time: np.ndarray, status: np.ndarray, w: np.ndarray) -> KMCurve:
    """R's ``svykm_fit``: weighted product-limit curve from time 0."""
    tt, inv = np.unique(time, return_inverse=True)
    dead = np.bincount(inv, weights=status * w, minlength=tt.shape[0])
    tot = np.bincount(inv, weights=w, minlength=tt.shape[0])
    total = w.sum()
    N = np.concatenate([[total, total], total - np.cumsum(tot[:-1])])
    d = np.concatenate([[0.0], dead])
    with np.errstate(divide="ignore", invalid="ignore"):
        surv = np.maximum(0.0, np.cumprod(1 - d / N))
    return KMCurve(np.concatenate([[0.0], tt]), surv)


def _totals_cov(design: Any, Y: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Totals of the columns of Y over domain 0 and their full design covariance (the core's
    covariance of a matrix of totals, as ``covmat=True`` computes it)."""
    est, cov, _ = design._ratio_cov(Y, None, codes, 1)  # noqa: SLF001 - the engine's covariance
    return np.asarray(est, dtype=float).reshape(-1), np.asarray(cov, dtype=float)


def _km_stderr(time: np.ndarray, status: np.ndarray, scope: np.ndarray, design: Any) -> KMCurve:
    """R's ``km.stderr`` over the rows ``scope`` of ``design.full_data``."""
    w = np.asarray(design.full_weights, dtype=float)
    keep = np.flatnonzero(scope & (status == 1) & (w != 0))
    keep = keep[np.argsort(time[keep], kind="stable")]
    k = keep.shape[0]
    if k == 0:
        return KMCurve(np.zeros(0), np.zeros(0), np.zeros(0))
    n = time.shape[0]
    tk = time[keep]
    Y = np.zeros((n, 2 * k))
    Y[keep, np.arange(k)] = 1.0
    at_risk = (time[:, None] >= tk[None, :]) & scope[:, None]
    Y[:, k:] = at_risk
    codes = np.where(scope, 0, -1)
    tot, V = _totals_cov(design, Y, codes)
    dN, y = tot[:k], tot[k:]
    h = np.cumsum(dN / y)
    Vnn, Vyy, Vny = V[:k, :k], V[k:, k:], V[:k, k:]
    a = dN / y**2
    dV = Vnn / np.outer(y, y) + Vyy * np.outer(a, a) - Vny * np.outer(1 / y, a)
    dV = dV - (Vny * np.outer(1 / y, a)).T
    varlog = np.diag(np.cumsum(np.cumsum(dV, axis=0), axis=1)).copy()
    return KMCurve(tk, np.exp(-h), varlog)


def _group_labels(rhs: str, data: pd.DataFrame, what: str) -> tuple[pd.Series, np.ndarray]:
    """The groups of the right-hand side (R ``as.factor`` / ``interaction``): labels per row
    and a missing-value mask."""
    terms = [t.strip() for t in re.split(r"\+(?![^(]*\))", rhs) if t.strip()]
    labels, orders, na = [], [], np.zeros(data.shape[0], dtype=bool)
    for t in terms:
        v = _values(t, data, what)
        na |= v.isna().to_numpy()
        if isinstance(v.dtype, pd.CategoricalDtype):
            levels = [str(c) for c in v.cat.categories]
            lab = v.astype(object).map(lambda x: str(x) if not pd.isna(x) else None)
        else:
            present = pd.unique(v.dropna())
            if all(isinstance(x, (bool, np.bool_)) for x in present) or v.dtype == bool:
                def lab_of(x):
                    return None if pd.isna(x) else ("TRUE" if bool(x) else "FALSE")
                levels = ["FALSE", "TRUE"]
            elif pd.api.types.is_numeric_dtype(v):
                def lab_of(x):
                    return None if pd.isna(x) else f"{float(x):.15g}"
                levels = [f"{float(x):.15g}" for x in sorted(present)]
            else:
                def lab_of(x):
                    return None if pd.isna(x) else str(x)
                levels = sorted(str(x) for x in present)
            lab = v.map(lab_of)
        labels.append(lab)
        orders.append(levels)
    if len(labels) == 1:
        return pd.Series(pd.Categorical(labels[0], categories=orders[0]), index=data.index), na
    # R's interaction(): labels joined with ".", the first factor varying fastest
    combos = [""]
    for levels in orders:
        combos = [f"{c}.{lv}" if c else lv for lv in levels for c in combos]
    joined = pd.Series([".".join(parts) if None not in parts else None
                        for parts in zip(*labels, strict=True)], index=data.index)
    return pd.Series(pd.Categorical(joined, categories=combos), index=data.index), na


def svykm(formula: str, design: Any, se: bool = False) -> KMCurve | KMCurves:
    """Weighted Kaplan-Meier survival curve(s) of a complex sample (R ``svykm``).

    Parameters
    ----------
    formula : ``"Surv(time, event) ~ 1"`` for one curve, ``"Surv(time, event) ~ g"`` (or
        ``~ a + b``: their combinations, R's ``interaction``) for one per group; ``event`` an
        expression such as ``status > 0``.
    design : a :class:`~surveysynth.SurveyDesign` (possibly calibrated or a ``subset()``) or,
        without ``se``, a :class:`~surveysynth.ReplicateDesign`.
    se : compute R's design-based SEs of log survival (Nelson-Aalen form, see the module).

    Returns
    -------
    A :class:`KMCurve`, or with groups a :class:`KMCurves` dict by level label (R's labels:
    ``"FALSE"``/``"TRUE"`` for a logical, numbers as R prints them).
    """
    time, status, rhs, scope, _ = _response(formula, design, "svykm")
    data = design.full_data
    replicate = getattr(design, "design_kind", "taylor") == "replicate"
    if se and replicate:
        raise ValueError("svykm: se=True is not available on replicate designs (R: 'SE not "
                         "yet available'). Fix: use the linearization design.")
    w = np.asarray(design.full_weights, dtype=float)
    if rhs.strip() in ("1", "0 + 1"):
        if se:
            return _km_stderr(time, status, scope, design)
        return _km_fit(time[scope], status[scope], w[scope])
    groups, na = _group_labels(rhs, data, "svykm")
    scope = scope & ~na
    out = KMCurves()
    out.call = {"formula": formula, "design": design, "se": se, "rhs": rhs, "scope": scope}
    for level in groups.cat.categories:
        inside = scope & (groups == level).to_numpy()
        if not inside.any():
            continue
        out[level] = (_km_stderr(time, status, inside, design) if se
                      else _km_fit(time[inside], status[inside], w[inside]))
    return out


# ----------------------------------------------------------------------------- svycoxph
class _Steps:
    """The hazard steps of a Cox fit at one beta: one per death (Efron's tie steps) or one per
    death time (Breslow, single deaths), with the death-time index ``m`` of each step."""

    def __init__(self, dtimes, m, down, hazard, xbar, nd):
        self.dtimes, self.m, self.down, self.hazard, self.xbar, self.nd = (
            dtimes, m, down, hazard, xbar, nd)


def _cox_pieces(beta: np.ndarray, time: np.ndarray, status: np.ndarray, X: np.ndarray,
                w: np.ndarray, offset: np.ndarray, efron: bool,
                entry: np.ndarray | None = None):
    """Log partial likelihood, score, information and the hazard steps (R's ``coxfit6``:
    Efron's approximation for tied deaths, weighted), vectorized over death times."""
    eta = X @ beta + offset
    risk = np.exp(eta)
    wr = w * risk
    dead = status == 1
    dtimes, m_of_dead = np.unique(time[dead], return_inverse=True)
    T = dtimes.shape[0]
    loglik = float(np.sum((w * eta)[dead]))
    u = (w[:, None] * X)[dead].sum(axis=0)
    # risk-set sums S0, S1, S2 at each death time: cumulative sums from the latest time
    order = np.argsort(-time, kind="stable")
    ts = time[order]
    c0 = np.cumsum(wr[order])
    c1 = np.cumsum(wr[order, None] * X[order], axis=0)
    c2 = np.cumsum(wr[order, None, None] * X[order, :, None] * X[order, None, :], axis=0)
    last = np.searchsorted(-ts, -dtimes, side="right") - 1  # last row with time >= t
    S0, S1, S2 = c0[last], c1[last], c2[last]
    if entry is not None:  # counting process: at risk at t when entry < t <= time
        eo = np.argsort(-entry, kind="stable")
        es = entry[eo]
        e0 = np.concatenate([[0.0], np.cumsum(wr[eo])])
        e1 = np.vstack([np.zeros(X.shape[1]), np.cumsum(wr[eo, None] * X[eo], axis=0)])
        e2 = np.concatenate([np.zeros((1, X.shape[1], X.shape[1])), np.cumsum(
            wr[eo, None, None] * X[eo, :, None] * X[eo, None, :], axis=0)])
        late = np.searchsorted(-es, -dtimes, side="right")  # rows with entry >= t
        S0, S1, S2 = S0 - e0[late], S1 - e1[late], S2 - e2[late]
    nd = np.bincount(m_of_dead, minlength=T)
    wd = np.bincount(m_of_dead, weights=w[dead], minlength=T)
    e0 = np.bincount(m_of_dead, weights=wr[dead], minlength=T)
    Xd = X[dead]
    e1 = np.zeros((T, X.shape[1]))
    np.add.at(e1, m_of_dead, wr[dead, None] * Xd)
    e2 = np.zeros((T, X.shape[1], X.shape[1]))
    np.add.at(e2, m_of_dead, wr[dead, None, None] * Xd[:, :, None] * Xd[:, None, :])
    split = nd if efron else np.ones(T, dtype=int)
    m = np.repeat(np.arange(T), split)
    k = np.arange(m.shape[0]) - np.repeat(np.cumsum(split) - split, split)
    down = k / split[m]
    meanwt = wd[m] / split[m]
    d0 = S0[m] - down * e0[m]
    xbar = (S1[m] - down[:, None] * e1[m]) / d0[:, None]
    loglik -= float(np.sum(meanwt * np.log(d0)))
    u = u - (meanwt[:, None] * xbar).sum(axis=0)
    sec = (S2[m] - down[:, None, None] * e2[m]) / d0[:, None, None]
    imat = np.einsum("s,sij->ij", meanwt, sec - xbar[:, :, None] * xbar[:, None, :])
    steps = _Steps(dtimes, m, down, meanwt / d0, xbar, split[m])
    return loglik, u, imat, steps, risk


def _pieces(beta, time, status, X, w, offset, efron, strata, entry=None):
    """:func:`_cox_pieces` summed over the strata of a stratified model (R's ``strata()``:
    one risk set and baseline hazard per stratum); ``strata=None``: one stratum."""
    if strata is None:
        return _cox_pieces(beta, time, status, X, w, offset, efron, entry)
    loglik, u, imat = 0.0, 0.0, 0.0
    for k in np.unique(strata):
        rows = strata == k
        if not np.any(status[rows] == 1):  # no death: no term in the partial likelihood
            continue
        lk, uk, ik, _, _ = _cox_pieces(beta, time[rows], status[rows], X[rows], w[rows],
                                       offset[rows], efron,
                                       None if entry is None else entry[rows])
        loglik, u, imat = loglik + lk, u + uk, imat + ik
    return loglik, u, imat, None, None


def _coxfit(time, status, X, w, offset, efron, init=None, eps=1e-9, iter_max=20,
            strata=None, entry=None):
    """R ``coxph.fit`` / ``coxfit6``: Newton-Raphson from ``init`` (0) with step halving,
    stopping when ``|1 - loglik / newlk| <= eps``. Returns the coefficients, the inverse
    information at them, the log partial likelihood, the iterations and whether it
    converged. ``iter_max=0`` returns ``init`` and the information there; running out of
    iterations returns the last accepted step, as R."""
    p = X.shape[1]
    beta = np.zeros(p) if init is None else np.asarray(init, dtype=float).copy()
    loglik, u, imat, _, _ = _pieces(beta, time, status, X, w, offset, efron, strata, entry)
    if iter_max == 0 or not np.isfinite(loglik):
        return beta, linalg.inv(imat), loglik, 0, True
    newbeta = beta + linalg.solve(imat, u, assume_a="pos")
    halving = 0
    for it in range(1, iter_max + 1):
        newlk, u, imat, _, _ = _pieces(newbeta, time, status, X, w, offset, efron, strata, entry)
        finite = np.isfinite(newlk) and np.isfinite(u).all() and np.isfinite(imat).all()
        if finite and abs(1 - loglik / newlk) <= eps:
            return newbeta, linalg.inv(imat), newlk, it, True
        if not finite or newlk < loglik:
            halving += 1
            newbeta = (newbeta + halving * beta) / (halving + 1.0)
        else:
            halving = 0
            loglik = newlk
            step = linalg.solve(imat, u, assume_a="pos")
            beta = newbeta
            newbeta = newbeta + step
    if iter_max > 1:
        loglik, u, imat, _, _ = _pieces(beta, time, status, X, w, offset, efron, strata, entry)
    return beta, linalg.inv(imat), loglik, iter_max, False


def _score_residuals(beta, time, status, X, w, offset, efron, strata=None,
                     entry=None) -> np.ndarray:
    """Unweighted score residuals (R ``coxscore2.c``; Efron's pre-charging of tied deaths):
    ``dN_i (x_i - xbar) - risk_i sum_t Y_i(t) dLambda(t) (x_i - xbar(t))``, a death sharing
    only ``1 - k/d`` of the k-th of its time's d tie steps; within each stratum."""
    if strata is not None:
        resid = np.zeros_like(X)
        for k in np.unique(strata):
            rows = strata == k
            if np.any(status[rows] == 1):
                resid[rows] = _score_residuals(beta, time[rows], status[rows], X[rows],
                                               w[rows], offset[rows], efron, None,
                                               None if entry is None else entry[rows])
        return resid
    _, _, _, st, risk = _cox_pieces(beta, time, status, X, w, offset, efron, entry)
    T = st.dtimes.shape[0]
    H = np.cumsum(np.bincount(st.m, weights=st.hazard, minlength=T))
    XH = np.zeros((T, X.shape[1]))
    np.add.at(XH, st.m, st.hazard[:, None] * st.xbar)
    XH = np.cumsum(XH, axis=0)
    # index of the last death time <= each subject's time (-1: none)
    j = np.searchsorted(st.dtimes, time, side="right") - 1
    has = j >= 0
    Hj, XHj = np.zeros(time.shape[0]), np.zeros_like(X)
    Hj[has], XHj[has] = H[j[has]], XH[j[has]]
    if entry is not None:  # hazard over (entry, time]: minus what accrued up to entry
        je = np.searchsorted(st.dtimes, entry, side="right") - 1
        he = je >= 0
        Hj[he] -= H[je[he]]
        XHj[he] -= XH[je[he]]
    resid = -risk[:, None] * (X * Hj[:, None] - XHj)
    dead = status == 1
    A = np.bincount(st.m, weights=st.down * st.hazard, minlength=T)
    B = np.zeros((T, X.shape[1]))
    np.add.at(B, st.m, (st.down * st.hazard)[:, None] * st.xbar)
    C = np.zeros((T, X.shape[1]))
    np.add.at(C, st.m, st.xbar / st.nd[:, None])
    md = j[dead]
    resid[dead] += risk[dead, None] * (X[dead] * A[md, None] - B[md])
    resid[dead] += X[dead] - C[md]
    return resid


class CoxResults:
    """A survey-weighted Cox model (R ``svycoxph``): ``params``, ``bse``, ``zvalues``,
    ``pvalues`` (normal, as R's summary), ``vcov()``, ``conf_int()``, ``exp_params`` (hazard
    ratios), ``inv_info`` (model-based variance), ``loglik``, ``ties``, ``nobs``,
    ``replicates`` (replicate designs)."""

    def __init__(self, formula, names, beta, vcov, inv_info, loglik, ties, nobs, design_kind,
                 replicates=None, iterations=0, converged=True):
        self.formula = formula
        self.params = pd.Series(beta, index=names, name="estimate")
        self._vcov = pd.DataFrame(vcov, index=names, columns=names)
        self.bse = pd.Series(np.sqrt(np.diag(vcov)), index=names, name="se")
        self.zvalues = pd.Series(self.params / self.bse, name="z")
        self.pvalues = pd.Series(2 * stats.norm.sf(np.abs(self.zvalues)), index=names,
                                 name="p")
        self.exp_params = np.exp(self.params).rename("exp(estimate)")
        self.inv_info = pd.DataFrame(inv_info, index=names, columns=names)
        self.loglik = loglik
        self.ties = ties
        self.nobs = nobs
        self.design_kind = design_kind
        self.replicates = None if replicates is None else pd.DataFrame(replicates,
                                                                        columns=names)
        self.iterations = iterations
        self.converged = converged

    def vcov(self) -> pd.DataFrame:
        """Design-based covariance of the coefficients (R ``vcov(svycoxph)``)."""
        return self._vcov.copy()

    def predict_curve(self, newdata: pd.DataFrame, se: bool = False) -> KMCurves:
        """Survival curves for the covariates of each row of ``newdata`` (R
        ``predict(svycoxph, newdata, type="curve", se=)``); see :func:`predict_svycoxph`."""
        return predict_svycoxph(self, newdata, se=se)

    def conf_int(self, alpha: float = 0.05) -> pd.DataFrame:
        """Wald intervals on the normal (R ``confint``)."""
        z = stats.norm.isf(alpha / 2)
        return pd.DataFrame({"lower": self.params - z * self.bse,
                             "upper": self.params + z * self.bse})

    def coef_table(self, alpha: float = 0.05) -> pd.DataFrame:
        ci = self.conf_int(alpha)
        return pd.DataFrame({"estimate": self.params, "exp(estimate)": self.exp_params,
                             "se": self.bse, "z": self.zvalues, "p": self.pvalues,
                             "lower": ci["lower"], "upper": ci["upper"]})

    def __repr__(self) -> str:
        return (f"Survey-weighted Cox model ({self.ties} ties), {self.design_kind} design, "
                f"n = {self.nobs}\n{self.formula}\n\n"
                + self.coef_table().to_string(float_format=lambda v: f"{v:.6g}"))


def _split_strata(rhs: str) -> tuple[str, list[str]]:
    """Remove ``strata(...)`` terms from a right-hand side; return it and their contents."""
    exprs: list[str] = []
    while True:
        m = re.search(r"\bstrata\s*\(", rhs)
        if m is None:
            break
        depth, k = 1, m.end()
        while k < len(rhs) and depth:
            depth += {"(": 1, ")": -1}.get(rhs[k], 0)
            k += 1
        exprs.extend(_split_args(rhs[m.end(): k - 1]))
        before, after = rhs[: m.start()].rstrip(), rhs[k:].lstrip()
        if before.endswith("+"):
            before = before[:-1].rstrip()
        elif after.startswith("+"):
            after = after[1:].lstrip()
        rhs = f"{before} {after}".strip()
    return rhs, exprs


def _cox_data(formula: str, design: Any, what: str, allow_strata: bool = False):
    """Time, status, the covariate matrix (R's ``coxph`` coding: treatment contrasts, no
    intercept), its names, the rows in scope (subset, no missing value, weight > 0), the
    model spec and the stratum codes of ``strata()`` terms over the scope rows (or None)."""
    time, status, rhs, scope, entry = _response(formula, design, what, allow_strata)
    rhs, sexprs = _split_strata(rhs)
    data = design.full_data
    strata_full = None
    if sexprs:
        vals = [_values(e, data, what) for e in sexprs]
        na = np.zeros(data.shape[0], dtype=bool)
        for v in vals:
            na |= v.isna().to_numpy()
        scope = scope & ~na
        keys = pd.Series(list(zip(*[v.astype(object) for v in vals], strict=True)),
                         index=data.index)
        strata_full = pd.factorize(keys)[0]
    if not rhs:
        raise ValueError(f"{what}: the model has no covariates besides strata().")
    cols = formula_columns(rhs, data.columns)
    if cols:
        scope = scope & ~data[cols].isna().any(axis=1).to_numpy()
    w_full = np.asarray(design.full_weights, dtype=float)
    if np.any(w_full < 0):
        raise ValueError(f"{what}: weights must be non-negative.")
    scope = scope & (w_full > 0)
    sub = data.loc[scope]
    mm = formula_matrix(quote_dotted(rhs, data.columns), sub, what, na_action="raise")
    names = [str(c) for c in mm.columns]
    X = np.asarray(mm, dtype=float)
    if "Intercept" in names:
        k = names.index("Intercept")
        X = np.delete(X, k, axis=1)
        names.pop(k)
    if not names:
        raise ValueError(f"{what}: the model has no covariates.")
    strata = None if strata_full is None else strata_full[scope]
    return time, status, X, names, scope, mm.model_spec, strata, (
        None if entry is None else entry[scope])


def svycoxph(formula: str, design: Any, ties: str = "efron", rescale: bool = True,
             eps: float = 1e-9, iter_max: int = 20) -> CoxResults:
    """Cox proportional-hazards model with design-based standard errors (R ``svycoxph``).

    Parameters
    ----------
    formula : ``"Surv(time, event) ~ x1 + x2"`` (formulaic terms; factors coded with
        treatment contrasts as R's ``coxph``, no intercept).
    design : a :class:`~surveysynth.SurveyDesign` (stratified, clustered, calibrated, a
        ``subset()``) or a :class:`~surveysynth.ReplicateDesign`.
    ties : ``"efron"`` (R's default) or ``"breslow"``.
    rescale : weights rescaled to mean 1 for the fit (R's default; the estimate does not
        depend on it).
    eps, iter_max : R's ``coxph.control``.

    Returns
    -------
    :class:`CoxResults`. Rows with a missing value in a model variable are left out of the
    fit (R's ``na.omit``) and stay in the design for the variance.

    The point estimate maximizes the weighted partial likelihood by R's own iterations
    (``coxfit6``), not by lifelines or statsmodels: see the module docstring for why.
    """
    if ties not in ("efron", "breslow"):
        raise ValueError(f"svycoxph: ties={ties!r}: choose 'efron' (R's default) or 'breslow'.")
    time, status, X, names, scope, spec, strata, entry = _cox_data(
        formula, design, "svycoxph", allow_strata=True)
    data = design.full_data
    w_full = np.asarray(design.full_weights, dtype=float)
    t, s = time[scope], status[scope]
    efron = ties == "efron"
    w = w_full[scope] / (w_full[scope].mean() if rescale else 1.0)
    off = np.zeros(t.shape[0])
    ent = entry
    beta, inv_info, loglik, it, conv = _coxfit(t, s, X, w, off, efron, eps=eps,
                                               iter_max=iter_max, strata=strata, entry=ent)
    kind = getattr(design, "design_kind", "taylor")
    replicates = None
    if kind == "replicate":
        rep = np.asarray(design.replicate_weights("analysis"), dtype=float)
        inside = np.asarray(design.in_subset, dtype=bool)
        rep_full = np.zeros((data.shape[0], rep.shape[1]))
        rep_full[inside] = rep
        scale0 = rep_full[:, 0].mean()
        betas = np.empty((rep.shape[1], len(names)))
        for r in range(rep.shape[1]):
            wr = rep_full[scope, r] / scale0 + 1e-10  # R: coxph does not allow zero weights
            betas[r] = _coxfit(t, s, X, wr, off, efron, init=beta, eps=eps,
                               iter_max=iter_max, strata=strata, entry=ent)[0]
        vcov = replicate_covariance(design, betas, beta)
        replicates = betas
    else:
        resid = _score_residuals(beta, t, s, X, w, off, efron, strata, ent)
        dfbeta = (resid @ inv_info) * w[:, None]
        infl = np.zeros((data.shape[0], len(names)))
        infl[scope] = dfbeta
        vcov = influence_covariance(design, infl, np.where(scope, 0, -1))
    out = CoxResults(formula, names, beta, vcov, inv_info, loglik, ties, int(scope.sum()),
                     kind, replicates, it, conv)
    # R coxph's means: weighted column means, 0 for columns of -1/0/1 values (nocenter)
    zero_one = np.all(np.isin(X, (-1.0, 0.0, 1.0)), axis=0)
    means = np.where(zero_one, 0.0, (w[:, None] * X).sum(axis=0) / w.sum())
    out.fit_data = {"design": design, "time": time, "status": status, "X": X, "scope": scope,
                "w": w, "efron": efron, "means": means, "spec": spec,
                "rescale": rescale, "strata": strata, "entry": ent}
    return out


def predict_svycoxph(model: CoxResults, newdata: pd.DataFrame, se: bool = False) -> KMCurves:
    """Predicted survival curves of a :func:`svycoxph` fit at the covariates of each row of
    ``newdata`` (R ``predict.svycoxph(type="curve")``).

    The Breslow baseline cumulative hazard (one step per event, the risk set of each tied
    event excluding the events sorted before it, as R) times ``exp(beta'(z - means))``;
    with ``se=True`` (linearization designs, as R) ``varlog`` adds to the design variance of
    the baseline hazard (R's ``km.stderr`` totals weighted by the risk scores) the
    coefficients' part ``h^2 z' V z`` and R's cross term. Returns :class:`KMCurves` keyed by
    ``newdata``'s index labels.
    """
    fit = getattr(model, "fit_data", None)
    if fit is None:
        raise ValueError("predict_svycoxph: needs a CoxResults from svycoxph.")
    design, scope = fit["design"], fit["scope"]
    if fit.get("strata") is not None:
        raise ValueError("predict_svycoxph: stratified models are not supported (R: "
                         "'Stratified models are not supported yet').")
    if fit.get("entry") is not None:
        raise ValueError("predict_svycoxph: curves of counting-process (start, stop] models "
                         "are not provided.")
    if se and getattr(design, "design_kind", "taylor") == "replicate":
        raise ValueError("predict_svycoxph: se=True is not available on replicate designs "
                         "(R: 'replicate-weight designs not supported yet').")
    mm = fit["spec"].get_model_matrix(newdata, na_action="raise")
    cols = [str(c) for c in mm.columns]
    Z = np.asarray(mm, dtype=float)
    if "Intercept" in cols:
        Z = np.delete(Z, cols.index("Intercept"), axis=1)
    beta = model.params.to_numpy()
    means = fit["means"]
    X, t, st = fit["X"], fit["time"][scope], fit["status"][scope]
    risk = np.exp(X @ beta - np.sum(beta * means))
    w_raw = np.asarray(design.full_weights, dtype=float)[scope]
    out = KMCurves()
    labels = [str(i) for i in newdata.index]
    if not se:
        order = np.lexsort((-st, t))  # R order(time, -status), stable
        Y = np.cumsum((risk * w_raw)[order][::-1])[::-1]
        ev = st[order] > 0
        h0 = np.cumsum((w_raw[order] / Y)[ev])
        times = t[order][ev]
        for lab, z in zip(labels, Z, strict=True):
            out[lab] = KMCurve(times, np.exp(-h0 * np.exp(np.sum(beta * (z - means)))))
        return out
    n_full = design.full_data.shape[0]
    idx = np.flatnonzero(scope)
    keep = idx[(fit["status"][idx] == 1) & (np.asarray(design.full_weights)[idx] != 0)]
    keep = keep[np.argsort(fit["time"][keep], kind="stable")]
    k = keep.shape[0]
    tk = fit["time"][keep]
    risk_full = np.zeros(n_full)
    risk_full[scope] = risk
    Yt = np.zeros((n_full, 2 * k))
    Yt[keep, np.arange(k)] = 1.0
    Yt[:, k:] = (fit["time"][:, None] >= tk[None, :]) * (risk_full * scope)[:, None]
    tot, Vt = _totals_cov(design, Yt, np.where(scope, 0, -1))
    dN, y = tot[:k], tot[k:]
    h = np.cumsum(dN / y)
    a = dN / y**2
    Vny = Vt[:k, k:] * np.outer(1 / y, a)
    dV = Vt[:k, :k] / np.outer(y, y) + Vt[k:, k:] * np.outer(a, a) - Vny - Vny.T
    Vh = np.diag(np.cumsum(np.cumsum(dV, axis=0), axis=1))
    # coxph.detail's means at each event time (Efron: averaged over the tie steps)
    _, _, _, steps, _ = _cox_pieces(beta, t, st, X, fit["w"], np.zeros(t.shape[0]),
                                    fit["efron"])
    E = np.zeros((steps.dtimes.shape[0], X.shape[1]))
    np.add.at(E, steps.m, steps.xbar / steps.nd[:, None])
    nevent = np.bincount(np.searchsorted(steps.dtimes, t[st == 1]),
                         minlength=steps.dtimes.shape[0])
    ze = np.repeat(E, nevent, axis=0) - means
    varbeta = model.vcov().to_numpy()
    hze = (dN / y)[:, None] * ze
    Vb = np.cumsum(np.einsum("ij,jk,ik->i", hze, varbeta, hze))
    dCV = -(hze @ varbeta)  # R: dCV[i, ] <- -varbeta %*% h.ze[i, ]
    V0 = Vh + Vb
    for lab, z in zip(labels, Z, strict=True):
        zi = z - means
        riski = float(np.exp(np.sum(zi * beta)))
        Vz = float(zi @ varbeta @ zi) * riski**2 * h**2
        CVz = (dCV @ zi) * riski**2 * h
        out[lab] = KMCurve(tk, np.exp(-h * riski), V0 * riski**2 + Vz + 2 * CVz)
    return out


# ----------------------------------------------------------------------------- svylogrank
def svylogrank(formula: str, design: Any, rho: float = 0.0, gamma: float = 0.0,
               method: str = "small"):
    """Design-based logrank and G-rho,gamma tests (R ``svylogrank``, its default
    ``method="small"``; ``"large"`` computes the same statistic in R with loops, so it is
    accepted and gives the same numbers).

    The score of each subject for the Cox model at ``beta = 0`` (R's ``coxph.detail``:
    Efron's averaging over tied deaths), weighted in time by ``S(t-)^rho (1 - S(t-))^gamma``
    with ``S`` the pooled weighted Kaplan-Meier curve, is totalled over the design
    (R ``svytotal``): one z statistic per coefficient and the Wald chi-squared of all.
    Linearization (possibly calibrated) and replicate designs alike, as R.

    Parameters
    ----------
    formula : ``"Surv(time, event) ~ group"`` (a numeric two-valued group, or a factor: one
        score per contrast).
    rho, gamma : Fleming-Harrington weights (0, 0: the logrank test; 1, 0: Peto-Prentice).
    method : ``"small"`` (R's default), ``"large"`` (the same statistic) or ``"score"``: R's
        Wald test of the one-step Cox estimate from 0 with the design variance at 0 (one
        grouping variable; replicate designs: one-step estimates per replicate,
        ``withReplicates``), for ``rho = gamma = 0`` only (R's weighted version expands the
        data by ``survSplit``; not provided).

    Returns
    -------
    A :class:`~surveysynth.analysis.TestResult`: the chi-squared, its df and p value;
    ``details["table"]`` the scores with ``se``, ``z`` and ``p`` per coefficient.
    """
    from .htest import TestResult

    if method not in ("small", "large", "score"):
        raise ValueError(f"svylogrank: method={method!r}: choose 'small' (R's default), "
                         "'large' or 'score'.")
    if method == "score":
        return _score_logrank(formula, design, rho, gamma)
    time, status, X, names, scope, _, _, _ = _cox_data(formula, design, "svylogrank")
    t, s = time[scope], status[scope]
    w = np.asarray(design.full_weights, dtype=float)[scope]
    km = _km_fit(t, s, w)
    ut = np.unique(km.time)
    eps = np.min(np.diff(ut)) / 10 if ut.shape[0] > 1 else 1.0
    knots = km.time + eps
    vals = km.surv**rho * (1 - km.surv) ** gamma

    def weight(x: np.ndarray) -> np.ndarray:  # R approxfun(method="constant", rule=2)
        k = np.searchsorted(knots, x, side="right") - 1
        return vals[np.clip(k, 0, vals.shape[0] - 1)]

    _, _, _, st, _ = _cox_pieces(np.zeros(X.shape[1]), t, s, X, w, np.zeros(t.shape[0]),
                                 efron=True)
    dtimes = st.dtimes
    hazard = np.bincount(st.m, weights=st.hazard, minlength=dtimes.shape[0])
    E = np.zeros((dtimes.shape[0], X.shape[1]))
    np.add.at(E, st.m, st.xbar / st.nd[:, None])  # R's coxph.detail: mean over tie steps
    wt = weight(dtimes)
    Y = t[:, None] >= dtimes[None, :]
    U = np.zeros_like(X)
    dead = s == 1
    idx = np.searchsorted(dtimes, t[dead])
    U[dead] = (X[dead] - E[idx]) * weight(t[dead])[:, None]
    for p in range(X.shape[1]):
        U[:, p] -= ((X[:, [p]] - E[None, :, p]) * (wt * hazard)[None, :] * Y).sum(axis=1)
    data = design.full_data
    Ufull = np.zeros((data.shape[0], X.shape[1]))
    Ufull[scope] = U
    inside = np.asarray(design.in_subset, dtype=bool)
    est, V = _totals_cov(design, Ufull, np.where(inside, 0, -1))
    se = np.sqrt(np.diag(V))
    z = est / se
    chisq = float(est @ linalg.solve(V, est))
    table = pd.DataFrame({"score": est, "se": se, "z": z, "p": 2 * stats.norm.sf(np.abs(z))},
                         index=names)
    return TestResult(method="Design-based logrank/G-rho,gamma test", statistic=chisq,
                      statistic_name="Chisq", parameter={"df": float(X.shape[1])},
                      p_value=float(stats.chi2.sf(chisq, X.shape[1])),
                      details={"table": table, "rho": rho, "gamma": gamma})


# ----------------------------------------------------------------------------- svysurvreg
def _dist_derivs(dist: str, z: np.ndarray, event: np.ndarray):
    """log-density (events) or log-survival (censored) of the standard distribution at z,
    with its first and second derivatives in z."""
    if dist == "extreme":  # Weibull on log time: minimum extreme value
        ez = np.exp(z)
        ll = np.where(event, z - ez, -ez)
        return ll, np.where(event, 1 - ez, -ez), -ez
    if dist == "logistic":
        p = special_expit(z)
        ll = np.where(event, z - 2 * np.logaddexp(0, z), -np.logaddexp(0, z))
        return ll, np.where(event, 1 - 2 * p, -p), np.where(event, -2, -1) * p * (1 - p)
    # gaussian
    lam = np.exp(stats.norm.logpdf(z) - stats.norm.logsf(z))
    ll = np.where(event, -0.5 * z**2 - 0.5 * np.log(2 * np.pi), stats.norm.logsf(z))
    return ll, np.where(event, -z, -lam), np.where(event, -1.0, -lam * (lam - z))


def special_expit(z: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return expit(z)


_SURVREG_DISTS = {"weibull": ("extreme", True), "exponential": ("extreme", True),
                  "lognormal": ("gaussian", True), "loglogistic": ("logistic", True),
                  "gaussian": ("gaussian", False), "logistic": ("logistic", False)}


def _survreg_pieces(theta, y, event, X, w, dist, fixed_scale):
    p = X.shape[1]
    beta = theta[:p]
    logs = 0.0 if fixed_scale else theta[p]
    sigma = np.exp(logs)
    z = (y - X @ beta) / sigma
    ll, a, b = _dist_derivs(dist, z, event)
    loglik = float(np.sum(w * (ll - event.astype(float) * logs)))
    g_eta = -a / sigma
    scores = X * g_eta[:, None]
    h_ee = b / sigma**2
    H = (X * (w * h_ee)[:, None]).T @ X
    if not fixed_scale:
        g_s = -event.astype(float) - a * z
        scores = np.column_stack([scores, g_s])
        h_es = (b * z + a) / sigma
        h_ss = b * z**2 + a * z
        Hes = (X * (w * h_es)[:, None]).sum(axis=0)
        H = np.block([[H, Hes[:, None]], [Hes[None, :], np.array([[np.sum(w * h_ss)]])]])
    return loglik, scores, H


def _survreg_newton(theta, y, event, X, w, dist, fixed_scale, tol, iter_max):
    ll, sc, H = _survreg_pieces(theta, y, event, X, w, dist, fixed_scale)
    for _ in range(iter_max):
        grad = (w[:, None] * sc).sum(axis=0)
        try:
            step = linalg.solve(-H, grad, assume_a="pos")
        except linalg.LinAlgError:
            step = grad / max(1.0, float(np.abs(np.diag(H)).max()))
        for _half in range(60):
            new = theta + step
            nll, nsc, nH = _survreg_pieces(new, y, event, X, w, dist, fixed_scale)
            if np.isfinite(nll) and nll >= ll - 1e-12 * abs(ll):
                break
            step = step / 2
        done = abs(nll - ll) <= tol * abs(nll) and np.max(np.abs(step)) < 1e-9
        theta, ll, sc, H = new, nll, nsc, nH
        if done:
            return theta, ll, sc, H, True
    return theta, ll, sc, H, False


def _survreg_fit(y, event, X, w, dist, fixed_scale, tol=1e-14, iter_max=100):
    """Weighted maximum likelihood of the location-scale model by Newton-Raphson with step
    halving, run to full convergence (R's survreg stops at a relative loglik change of 1e-9;
    its coefficients are then within about 1e-10 of the optimum): least squares, then the
    coefficients at scale 1 (a concave problem), then all parameters."""
    beta0 = np.linalg.lstsq(X * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)[0]
    beta = _survreg_newton(beta0, y, event, X, w, dist, True, tol, iter_max)[0]
    if fixed_scale:
        return _survreg_newton(beta, y, event, X, w, dist, True, tol, iter_max)
    return _survreg_newton(np.append(beta, 0.0), y, event, X, w, dist, False, tol, iter_max)


class SurvregResults(CoxResults):
    """A survey-weighted parametric survival (accelerated failure time) model (R
    ``svysurvreg``): ``params`` (coefficients and ``Log(scale)``), ``bse``, ``zvalues``,
    ``pvalues``, ``vcov()``, ``scale``, ``dist``, ``df_resid`` (design df + 1 - p)."""

    def __repr__(self) -> str:
        return (f"Survey-weighted parametric survival model ({self.dist}), "
                f"{self.design_kind} design, n = {self.nobs}, scale = {self.scale:.6g}\n"
                f"{self.formula}\n\n"
                + self.coef_table().drop(columns="exp(estimate)").to_string(
                    float_format=lambda v: f"{v:.6g}"))


def svysurvreg(formula: str, design: Any, dist: str = "weibull") -> SurvregResults:
    """Parametric survival regression (accelerated failure time) with design-based SEs (R
    ``svysurvreg``, which R provides for linearization designs only).

    The model ``g(T) = x'beta + sigma W`` (``g = log`` for ``"weibull"``, ``"exponential"``
    (sigma = 1), ``"lognormal"``, ``"loglogistic"``; identity for ``"gaussian"``,
    ``"logistic"``) is fitted by weighted maximum likelihood (weights rescaled to mean 1, as
    R), and its variance is the design covariance (R ``svyrecvar``) of the weighted dfbeta
    residuals, the score contributions times the inverse observed information, as R's
    ``resid(fit, "dfbeta", weighted=TRUE)``. Right-censored ``Surv(time, event)`` only.

    The fit runs Newton-Raphson to full convergence rather than R's stopping rule
    (``survreg.control(rel.tolerance=1e-9)``): R's estimates stop within that tolerance of
    the optimum, so the agreement with R is limited by it: 1e-11 (coefficients) and 1e-10
    (variances) for R's Weibull example, about 1e-9 and 1e-8 for the log-logistic.
    """
    if dist not in _SURVREG_DISTS:
        raise ValueError(f"svysurvreg: dist={dist!r}: choose one of {tuple(_SURVREG_DISTS)}.")
    if getattr(design, "design_kind", "taylor") == "replicate":
        raise ValueError("svysurvreg: replicate designs are not supported (R has no "
                         "svysurvreg method for them). Fix: use the linearization design.")
    base, logt = _SURVREG_DISTS[dist]
    fixed = dist == "exponential"
    time, status, rhs, scope, _ = _response(formula, design, "svysurvreg")
    data = design.full_data
    cols = formula_columns(rhs, data.columns)
    if cols:
        scope = scope & ~data[cols].isna().any(axis=1).to_numpy()
    w_full = np.asarray(design.full_weights, dtype=float)
    if np.any(w_full < 0):
        raise ValueError("svysurvreg: weights must be non-negative.")
    scope = scope & (w_full > 0)
    mm = formula_matrix(quote_dotted(rhs, data.columns), data.loc[scope], "svysurvreg",
                        na_action="raise")
    names = [str(c) if str(c) != "Intercept" else "(Intercept)" for c in mm.columns]
    X = np.asarray(mm, dtype=float)
    t, ev = time[scope], status[scope].astype(bool)
    if logt and np.any(t <= 0):
        raise ValueError(f"svysurvreg: dist={dist!r} needs positive times.")
    y = np.log(t) if logt else t
    w = w_full[scope] / w_full[scope].mean()
    theta, ll, sc, H, conv = _survreg_fit(y, ev, X, w, base, fixed)
    inv_info = linalg.inv(-H)
    dfbeta = (sc @ inv_info) * w[:, None]
    infl = np.zeros((data.shape[0], theta.shape[0]))
    infl[scope] = dfbeta
    vcov = influence_covariance(design, infl, np.where(scope, 0, -1))
    allnames = names + ([] if fixed else ["Log(scale)"])
    out = SurvregResults(formula, allnames, theta, vcov, inv_info, ll, "", int(scope.sum()),
                         "taylor", None, 0, conv)
    out.dist = dist
    out.scale = 1.0 if fixed else float(np.exp(theta[-1]))
    inside = np.asarray(design.in_subset, dtype=bool)
    out.df_resid = float(design.domain_df(np.where(inside, 0, -1), 1)[0]) - len(names) + 1
    return out


def _score_logrank(formula: str, design: Any, rho: float, gamma: float):
    """R's ``svylogrank(method="score")`` for rho = gamma = 0."""
    from .htest import TestResult

    if rho != 0 or gamma != 0:
        raise ValueError("svylogrank: method='score' with rho or gamma is not available (R "
                         "expands the data with survSplit); use method='small'.")
    _, _, _, rhs = _parse(formula, "svylogrank")
    terms = [t for t in re.split(r"\+(?![^(]*\))", rhs) if t.strip()]
    if len(terms) != 1:
        raise ValueError("svylogrank: only one grouping variable allowed (R).")
    time, status, X, names, scope, _, _, _ = _cox_data(formula, design, "svylogrank")
    data = design.full_data
    term = terms[0].strip()
    raw = data[term] if term in data.columns else None
    if raw is not None and not isinstance(raw.dtype, pd.CategoricalDtype) and \
            raw.dtype != object and raw[scope].nunique() > 2:
        raise ValueError("svylogrank: grouping variable with more than 2 levels must be a "
                         "factor (R); use C(g).")
    t, s = time[scope], status[scope]
    w_full = np.asarray(design.full_weights, dtype=float)
    off = np.zeros(t.shape[0])
    if getattr(design, "design_kind", "taylor") == "replicate":
        rep = np.asarray(design.replicate_weights("analysis"), dtype=float)
        inside = np.asarray(design.in_subset, dtype=bool)
        rep_full = np.zeros((data.shape[0], rep.shape[1]))
        rep_full[inside] = rep
        b = _coxfit(t, s, X, w_full[scope] + 1e-8, off, True, iter_max=1)[0]
        thetas = np.vstack([_coxfit(t, s, X, rep_full[scope, r] + 1e-8, off, True,
                                    iter_max=1)[0] for r in range(rep.shape[1])])
        V = replicate_covariance(design, thetas, b)
    else:
        w = w_full[scope] / w_full[scope].mean()
        b = _coxfit(t, s, X, w, off, True, iter_max=1)[0]
        beta0, inv_info, _, _, _ = _coxfit(t, s, X, w, off, True, iter_max=0)
        resid = _score_residuals(beta0, t, s, X, w, off, True)
        infl = np.zeros((data.shape[0], X.shape[1]))
        infl[scope] = (resid @ inv_info) * w[:, None]
        V = influence_covariance(design, infl, np.where(scope, 0, -1))
    z = b / np.sqrt(np.diag(V))
    chisq = float(b @ linalg.solve(V, b))
    table = pd.DataFrame({"z": z}, index=names)
    return TestResult(method="Design-based logrank test (score method)", statistic=chisq,
                      statistic_name="Chisq", parameter={"df": float(b.shape[0])},
                      p_value=float(stats.chi2.sf(chisq, b.shape[0])),
                      details={"table": table, "coef": b, "vcov": V})
