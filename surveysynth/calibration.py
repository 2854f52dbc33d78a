"""Calibration of design weights: post-stratification, raking and calibration (GREG, raking
ratio, logit with bounds), as R ``survey`` 4.1's ``postStratify``, ``rake`` and ``calibrate``.

Each function returns a new design of the same kind with calibrated weights:

* a :class:`~surveysynth.SurveyDesign` keeps its sampling stages and records how the
  calibration changes the linearization variance, as R keeps ``design$postStrata`` for
  ``svyrecvar``: before the multistage formula, the influence values are replaced by

  - calibration (``calibrate``): ``g w e`` with ``e`` the residuals of the regression of the
    influence values over ``g w`` on the calibration variables, weighted by the original
    weights ``w`` (R: ``qr.resid(qr(X sqrt(w)), x / (g sqrt(w))) * g sqrt(w)``);
  - post-stratification: the influence values minus the new weight times the
    post-stratum's mean (with the old weights) of the influence per new weight;
  - raking: ten sweeps of the post-stratification centring over the margins, with the
    weights of the last raking sweep, as R.

  Domains of a calibrated design (``by=``, ``subset``) are estimated as R's calibrated designs
  are: every row stays in the design, rows outside the domain have influence 0 before the
  adjustment, so they get the (non-zero) residual of the regression.
* a :class:`~surveysynth.ReplicateDesign` gets its full-sample weights calibrated and each
  replicate's weights recalibrated to the same totals (R ``calibrate.svyrep.design``,
  ``postStratify.svyrep.design``, ``rake`` on replicate designs); the replicate variance
  formula is unchanged.

Iterations and stopping rules are R's (``grake``: Newton steps with ``MASS::ginv``, stop when
every ``|population - total| / (1 + |population|) < epsilon``; ``rake``: post-stratify on each
margin in turn until the joint table moves by less than ``epsilon``), so iterative results match
R to its tolerance. Differences from R, on purpose: calibration that does not converge is an
error saying how far it got (R warns or stops with "Calibration failed"; ``force=True`` keeps
the weights with a warning); non-positive calibrated weights are an error naming the rows
(``allow_nonpositive=True`` keeps them); bounds that cannot be met are refused before
iterating; population totals whose names match no column (a level absent from the sample, a
misspelt term) are errors, not R's warning.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from ._validate import first_rows, parse_vars, require_columns
from .encoding import Factor, is_factor, r_label, r_levels

CALFUNS = ("linear", "raking", "logit")
_EPS = np.finfo(float).eps


class CalibrationError(ValueError):
    """Calibration failed: no convergence, infeasible bounds or unusable weights."""


# ----------------------------------------------------------------------------- adjustments
class GregAdjustment:
    """Variance adjustment of ``calibrate``: influence values -> calibrated regression
    residuals (R's ``greg_calibration`` entry of ``postStrata``)."""

    def __init__(self, basis: np.ndarray, w: np.ndarray) -> None:
        self.basis = basis  # orthonormal basis of the columns of X sqrt(w_old)
        self.w = w  # g * sqrt(w_old)

    def residualize(self, Z: np.ndarray) -> np.ndarray:
        # rows of weight zero (e.g. nonrespondents after redistribute_weights) have z = 0 and
        # no row in the regression: their residual stays 0
        w = self.w[:, None]
        U = np.divide(Z, w, out=np.zeros(Z.shape), where=w != 0)
        U = U - self.basis @ (self.basis.T @ U)
        return U * self.w[:, None]


class WithinClusterGregAdjustment:
    """Variance adjustment of ``calibrate(stage=k)`` (R's ``greg_calibration`` with
    ``stage = k``): within each stage-k cluster the values are replaced by the residuals of
    that cluster's calibration regression, for the variance terms of the stages below k only
    (``SurveyDesign._staged``; R's ``multistage`` recursion)."""

    def __init__(self, stage: int, blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]]):
        self.stage = int(stage)
        self.blocks = blocks  # (rows, orthonormal basis of X_c cw / sqrt(s2), w_c)

    def residualize(self, Z: np.ndarray) -> np.ndarray:
        Z = np.array(Z, dtype=float, copy=True)
        for rows, basis, w in self.blocks:
            U = Z[rows] / w[:, None]
            U -= basis @ (basis.T @ U)
            Z[rows] = U * w[:, None]
        return Z


class PostStratAdjustment:
    """Variance adjustment of ``post_stratify`` (R's ``svyrecvar`` post-strata branch)."""

    def __init__(self, codes: np.ndarray, new_w: np.ndarray, old_w: np.ndarray) -> None:
        psw = np.asarray(new_w, float).copy()
        psw[(psw == 0) & (old_w == 0)] = 1.0
        self.codes, self.psw, self.oldw = codes, psw, np.asarray(old_w, float)
        self.K = int(codes.max()) + 1
        self.oldsum = np.bincount(codes, weights=self.oldw, minlength=self.K)

    def residualize(self, Z: np.ndarray) -> np.ndarray:
        ratio = self.oldw / self.psw
        means = np.column_stack([
            np.bincount(self.codes, weights=Z[:, j] * ratio, minlength=self.K) / self.oldsum
            for j in range(Z.shape[1])
        ]) if Z.shape[1] else np.zeros((self.K, 0))
        return Z - means[self.codes] * self.psw[:, None]


class RakeAdjustment:
    """Variance adjustment of ``rake``: ten sweeps of centring within each margin (R)."""

    def __init__(self, margins: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.margins = margins  # (codes, weights after that margin's step)

    def residualize(self, Z: np.ndarray) -> np.ndarray:
        Z = Z.copy()
        for _ in range(10):
            for codes, psw in self.margins:
                K = int(codes.max()) + 1
                cnt = np.bincount(codes, minlength=K)
                for j in range(Z.shape[1]):
                    mean = np.bincount(codes, weights=Z[:, j] / psw, minlength=K) / cnt
                    Z[:, j] -= psw * mean[codes]
        return Z


# ----------------------------------------------------------------------------- model matrix
def _terms(formula_or_columns: Any) -> tuple[list[tuple[str, ...]], bool]:
    """Terms of a formula (``"~stype+api99"``, ``"~0+stype"``, ``"~stype*sch.wide"``,
    ``"~stype+stype:comp.imp"``) or a list of columns, as tuples of column names, in R's
    order (main effects, then two-way interactions, ..., each in order of appearance);
    and whether there is an intercept."""
    if isinstance(formula_or_columns, str):
        text = formula_or_columns.strip()
        if not text.startswith("~"):
            return [(text,)], True
        parts = [p.strip() for p in text[1:].replace("-", "+-").split("+") if p.strip()]
        intercept = not any(p in ("0", "-1") for p in parts)
        terms: list[tuple[str, ...]] = []
        for p in parts:
            if p in ("0", "1", "-1", "-0"):
                continue
            if any(ch in p for ch in "()^-") or p.startswith(("*", ":")) or p.endswith(("*", ":")):
                raise ValueError(
                    f"formula {formula_or_columns!r}: term {p!r} is not supported (main "
                    "effects and interactions a:b, a*b of columns). Fix: add the transformed "
                    "variable as a column and name it in the formula.")
            if "*" in p:  # a*b*c: every sub-interaction
                vs = [v.strip() for v in p.split("*")]
                for k in range(1, len(vs) + 1):
                    for combo in combinations(vs, k):
                        terms.append(combo)
            else:
                terms.append(tuple(v.strip() for v in p.split(":")))
        # R: variables within a term in order of first appearance; terms by their order
        first = {v: i for i, v in reversed(list(enumerate(v for t in terms for v in t)))}
        terms = list(dict.fromkeys(tuple(sorted(t, key=first.__getitem__)) for t in terms))
        terms.sort(key=len)  # stable
        return terms, intercept
    return [(c,) for c in parse_vars(formula_or_columns, "formula_or_columns") or []], True


def _main_columns(frame: pd.DataFrame, c: str, full: bool) -> tuple[list[np.ndarray], list[str]]:
    """One variable's columns: numeric as is, categorical as treatment contrasts (``full``:
    every level, R's coding of the first factor of a model without intercept)."""
    s = frame[c]
    na = s.isna().to_numpy()
    if na.any():
        raise ValueError(f"calibration variable {c!r} has missing values in "
                         f"{first_rows(frame.index, na)}. Fix: impute them or drop the rows "
                         "before building the design.")
    if not is_factor(s):
        return [s.to_numpy(dtype=float)], [c]
    fac = Factor.learn(s, name=c)  # R's levels, contrasts and names (surveysynth.encoding)
    mat = np.asarray(fac.matrix(s, full=full), dtype=float)
    return [mat[:, k] for k in range(mat.shape[1])], list(fac.names(full=full))


def model_matrix(frame: pd.DataFrame, formula_or_columns: Any) -> tuple[np.ndarray, list[str]]:
    """R ``model.matrix`` of a formula of main effects and interactions: an ``(Intercept)``
    column unless ``~0+``, numeric columns as they are, categorical columns as treatment
    contrasts (first level dropped; all levels for the first factor of a formula without
    intercept), named as R names them (``stypeH``); an interaction is the product of its
    variables' columns (first variable varying fastest, ``stypeH:sch.wideYes``) and needs its
    lower-order terms in the model (R's contrasts are then the same). Missing values are an
    error naming the rows."""
    terms, intercept = _terms(formula_or_columns)
    cols = list(dict.fromkeys(v for t in terms for v in t))
    require_columns(frame, cols, "formula_or_columns")
    mats, names = [], []
    if intercept:
        mats.append(np.ones(frame.shape[0]))
        names.append("(Intercept)")
    full_coded = intercept
    main: dict[str, tuple[list[np.ndarray], list[str]]] = {}
    for t in terms:
        if len(t) == 1:
            c = t[0]
            main[c] = _main_columns(frame, c, not full_coded and is_factor(frame[c]))
            full_coded = full_coded or is_factor(frame[c])
            mats += main[c][0]
            names += main[c][1]
            continue
        missing = [sub for k in range(1, len(t)) for sub in combinations(t, k)
                   if sub not in terms]
        if missing or not intercept:
            raise ValueError(
                f"formula {formula_or_columns!r}: interaction {':'.join(t)} needs an intercept "
                f"and its lower-order terms {[':'.join(m) for m in missing]} in the model "
                "(R's coding otherwise changes the contrasts). Fix: write it as "
                f"{'*'.join(t)}.")
        pm, pn = [np.ones(frame.shape[0])], [""]
        for c in t:  # first variable varies fastest (R)
            cm, cn = main[c]
            pm = [a * b for b in cm for a in pm]
            pn = [f"{a}:{b}" if a else b for b in cn for a in pn]
        mats += pm
        names += pn
    if not mats:
        raise ValueError(f"formula {formula_or_columns!r} has no term: nothing to calibrate.")
    return np.column_stack(mats), names


def _margins_to_totals(formulas: Sequence[str], tables: Sequence[Any],
                       frame: pd.DataFrame) -> tuple[str, dict[str, float]]:
    """R's ``margins2totals``: calibration to a list of population tables (``rake``'s input).
    Each formula's variables are crossed (``~stype+sch.wide`` -> ``stype*sch.wide``) and the
    table's model-matrix totals become the population totals; returns the formula and the
    totals by R's names."""
    if len(formulas) != len(tables):
        raise ValueError(f"calibrate: {len(formulas)} margin formulas but {len(tables)} "
                         "population tables; give one table per formula.")
    totals: dict[str, float] = {}
    crossed = []
    for f, tab in zip(formulas, tables, strict=True):
        vs = list(dict.fromkeys(v for t in _terms(f)[0] for v in t))
        crossed.append("*".join(vs))
        df = _margin_table(tab, vs, f)
        for v in vs:  # the sample's levels, so that names and dropped first levels agree
            require_columns(frame, [v], "formula_or_columns")
            if is_factor(frame[v]):
                levels = r_levels(frame[v])
                bad = ~df[v].isin(levels).to_numpy()
                if bad.any():
                    raise ValueError(
                        f"population table for {f!r}: levels {sorted(map(str, df[v][bad].unique()))} "
                        f"of {v!r} are not in the sample (levels {levels}). Fix: collapse them "
                        "into a sampled level.")
                df[v] = pd.Categorical(df[v], categories=levels)
        mm, names = model_matrix(df, "~" + "*".join(vs))
        tot = df["Freq"].to_numpy(float) @ mm
        for n, t in zip(names, tot, strict=True):
            totals.setdefault(n, float(t))
    return "~" + "+".join(crossed), totals


def _margin_table(tab: Any, vs: list[str], f: str) -> pd.DataFrame:
    """A population margin as a DataFrame of the variables and ``Freq``: a DataFrame (the
    variables and one count column), a Series (index: the levels, a MultiIndex for several
    variables, e.g. ``df.value_counts([...])`` or a crosstab's ``stack()``), or a dict
    ``{level: count}`` (tuples of levels for several variables)."""
    if isinstance(tab, Mapping):
        tab = pd.Series(dict(tab))
        if len(vs) > 1:
            tab.index = pd.MultiIndex.from_tuples(tab.index)
    if isinstance(tab, pd.Series):
        df = tab.rename("Freq").reset_index()
        df.columns = list(vs) + ["Freq"] if df.shape[1] == len(vs) + 1 else df.columns
    elif isinstance(tab, pd.DataFrame):
        df = tab.copy()
        counts = [c for c in df.columns if c not in vs]
        if len(counts) != 1 or any(v not in df.columns for v in vs):
            raise ValueError(f"population table for {f!r}: give the columns {vs} and one count "
                             f"column, got {list(df.columns)}.")
        df = df.rename(columns={counts[0]: "Freq"})
    else:
        raise ValueError(f"population table for {f!r}: give a DataFrame, a Series or a dict of "
                         f"counts, got {type(tab).__name__}.")
    if df.shape[1] != len(vs) + 1:
        raise ValueError(f"population table for {f!r}: {df.shape[1] - 1} level columns for "
                         f"the variables {vs}.")
    if df["Freq"].isna().any():
        raise ValueError(f"population table for {f!r}: missing counts in rows "
                         f"{df.index[df['Freq'].isna()].tolist()[:5]}.")
    return df


def _population_vector(population: Any, names: list[str], mm: np.ndarray,
                       sample_total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Population totals in the order of ``names`` and a mask of the columns kept (R drops
    columns that are zero in the sample and in the population)."""
    if isinstance(population, pd.DataFrame):
        if population.shape[0] == 1:
            population = population.iloc[0]
        elif population.shape[1] == 2:
            population = pd.Series(population.iloc[:, 1].to_numpy(),
                                   index=population.iloc[:, 0].astype(str))
        else:
            raise ValueError("population: a DataFrame must have one row (a column per term) "
                             "or two columns (term name, total).")
    if isinstance(population, (Mapping, pd.Series)):
        pop = {str(k): float(v) for k, v in dict(population).items()}
        extra = [k for k in pop if k not in names]
        if extra:
            raise ValueError(
                f"population: totals {extra} match no column of the calibration model, whose "
                f"columns are {names}. A level with no sample row has no column (R drops it): "
                "collapse it with a neighbouring level, or remove its total; otherwise check "
                "the spelling (R's names: '(Intercept)', variable name + level).")
        missing = [k for k in names if k not in pop]
        if missing:
            raise ValueError(f"population: no total for {missing}. Give one total per column "
                             f"of the model: {names}.")
        vec = np.array([pop[k] for k in names])
    else:
        vec = np.asarray(population, dtype=float).reshape(-1)
        if vec.shape[0] != len(names):
            raise ValueError(f"population: {vec.shape[0]} totals for {len(names)} model "
                             f"columns {names}. Fix: give them by name (a dict).")
    if not np.isfinite(vec).all():
        raise ValueError(f"population: totals must be finite, got {dict(zip(names, vec, strict=True))}.")
    allzero = ~(mm != 0).any(axis=0)
    keep = ~(allzero & (vec == 0))
    absent = allzero & (vec != 0)
    if absent.any():
        bad = [n for n, a in zip(names, absent, strict=True) if a]
        raise ValueError(
            f"population: totals given for {bad}, but no sample row has them (a level absent "
            "from the sample): the weights cannot reach a non-zero total. Fix: collapse the "
            "level with a neighbouring one, or drop the level from the variable's categories.")
    return vec, keep


# ----------------------------------------------------------------------------- calfuns
class CalFun:
    """A calibration distance as R's ``calfun`` objects (``make.calfun``): ``Fm1(u, bounds)``
    is F - 1 (the g-weight minus 1 as a function of the linear predictor ``u``), ``dF(u,
    bounds)`` its derivative; ``bounds`` is ``{"lower": L, "upper": U}`` (R's
    ``list(lower=, upper=)``). ``calibrate(calfun=CalFun)`` runs R's iterative ``grake`` with
    it (even for ``cal_linear``, as R does with an object instead of the string)."""

    def __init__(self, Fm1: Callable[..., Any], dF: Callable[..., Any], name: str) -> None:  # noqa: N803
        self.Fm1 = Fm1
        self.dF = dF
        self.name = str(name)

    def __repr__(self) -> str:
        return f"calibration metric: {self.name}"


def make_calfun(Fm1: Callable[..., Any], dF: Callable[..., Any], name: str) -> CalFun:  # noqa: N803
    """A user calibration distance for ``calibrate(calfun=)`` (R ``make.calfun``). ``Fm1`` and
    ``dF`` must take exactly the arguments ``(u, bounds)`` (R checks the names too) and return
    arrays like ``u``."""
    for label, f in (("Fm1", Fm1), ("dF", dF)):
        if not callable(f):
            raise TypeError(f"make_calfun: {label} must be a function of (u, bounds).")
        params = list(inspect.signature(f).parameters)
        if params != ["u", "bounds"]:
            raise ValueError(f"make_calfun: wrong argument names for {label}: {params} (R: "
                             "'wrong argument names for Fm1'). Fix: def f(u, bounds): ...")
    return CalFun(Fm1, dF, name)


def _sinh_fm1(u: np.ndarray, bounds: Mapping[str, float]) -> np.ndarray:
    if not (np.all(np.isfinite(bounds["lower"])) and np.all(np.isfinite(bounds["upper"]))):
        raise CalibrationError("cal_sinh needs finite bounds (R: 'Sinh calibration requires "
                               "finite bounds'). Fix: bounds=(0.5, 2), say.")
    p = np.arcsinh(2 * u)
    m = (p + np.sqrt(p**2 + 4)) / 2
    return np.minimum(np.maximum(m, bounds["lower"]), bounds["upper"]) - 1


def _sinh_df(u: np.ndarray, bounds: Mapping[str, float]) -> np.ndarray:
    p = np.arcsinh(2 * u)
    m = 1 / np.sqrt(1 + (2 * u) ** 2) * (1 + p / np.sqrt(p**2 + 4))
    return np.where((u < bounds["upper"] - 1) & (u > bounds["lower"] - 1), m, 0.0)


def _string_calfun(name: str, label: str) -> CalFun:
    return CalFun(lambda u, bounds: _fm1(name, u, bounds["lower"], bounds["upper"]),
                  lambda u, bounds: _dF(name, u, bounds["lower"], bounds["upper"]), label)


def _fm1(calfun: Any, u: np.ndarray, lo: float, up: float) -> np.ndarray:
    if isinstance(calfun, CalFun):
        return np.asarray(calfun.Fm1(u, {"lower": lo, "upper": up}), dtype=float)
    if calfun == "linear":
        return np.minimum(np.maximum(u + 1, lo), up) - 1
    if calfun == "raking":
        with np.errstate(over="ignore"):
            return np.minimum(np.maximum(np.exp(u), lo), up) - 1
    A = (up - lo) / ((up - 1) * (1 - lo))
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(A * u)
        return (lo * (up - 1) + up * (1 - lo) * e) / (up - 1 + (1 - lo) * e) - 1


def _dF(calfun: Any, u: np.ndarray, lo: float, up: float) -> np.ndarray:
    if isinstance(calfun, CalFun):
        return np.asarray(calfun.dF(u, {"lower": lo, "upper": up}), dtype=float)
    if calfun == "linear":
        return ((u < up - 1) & (u > lo - 1)).astype(float)
    if calfun == "raking":
        with np.errstate(over="ignore"):
            return np.where((u < up - 1) & (u > lo - 1), np.exp(u), 0.0)
    A = (up - lo) / ((up - 1) * (1 - lo))
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(A * u)
        den = up - 1 + (1 - lo) * e
        return up * (1 - lo) * e * A / den - (lo * (up - 1) + up * (1 - lo) * e) * (
            (1 - lo) * e * A) / den**2


cal_linear = _string_calfun("linear", "linear calibration")
cal_raking = _string_calfun("raking", "raking")
cal_logit = _string_calfun("logit", "logit calibration")
cal_sinh = CalFun(_sinh_fm1, _sinh_df, "sinh calibration")
"""R's calibration-function objects (``cal.linear``, ``cal.raking``, ``cal.logit``,
``cal.sinh``: the hyperbolic-sine distance of CALMAR2, which needs finite bounds)."""


def cal_names(formula_or_columns: str | Sequence[str], design: Any) -> list[str]:
    """The names ``calibrate`` expects population totals for (R ``cal_names``): the columns of
    R's ``model.matrix`` of the formula on the design's data, e.g. ``["(Intercept)",
    "stypeH", "stypeM", "api99"]``. Missing values do not matter (only names are made)."""
    terms, _ = _terms(formula_or_columns)
    cols = list(dict.fromkeys(v for t in terms for v in t))
    frame = design.full_data
    require_columns(frame, cols, "formula_or_columns")
    sub = frame[cols].copy()
    for c in cols:  # names only: fill gaps with a value the column has (levels unchanged)
        if sub[c].isna().any():
            present = sub[c].dropna()
            if present.empty:
                raise ValueError(f"cal_names: column {c!r} has no non-missing value.")
            sub[c] = sub[c].fillna(present.iloc[0])
    return model_matrix(sub, formula_or_columns)[1]


def _ginv(M: np.ndarray) -> np.ndarray:
    """MASS::ginv with tol 256 eps (singular values below tol * max are dropped)."""
    U, s, Vt = np.linalg.svd(M)
    keep = s > max(256 * _EPS * s[0], 0) if s.shape[0] else s > 0
    return (Vt[keep].T / s[keep]) @ U[:, keep].T


def _unbounded(calfun: str, lo: Any, up: Any) -> bool:
    """R's test for its closed-form ``regcalibrate``: linear with every bound infinite."""
    return calfun == "linear" and bool(np.all(np.isneginf(lo)) and np.all(np.isposinf(up)))


def grake(mm: np.ndarray, ww: np.ndarray, population: np.ndarray, calfun: str,
          bounds: tuple[Any, Any], epsilon: float, maxit: int,
          sigma2: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """g-weights by R's ``grake`` (Newton iterations; unbounded linear in closed form as R's
    ``regcalibrate``). ``bounds``: scalars or one (lower, upper) per row. ``sigma2``: R's
    ``variance`` per row (the working variance of the GREG, ``g = 1 + F(x'eta / sigma2)``).
    Returns ``(g, info)``; ``info`` has ``iterations`` and ``misfit`` (the largest
    ``|population - total| / (1 + |population|)`` reached) and ``converged``."""
    lo, up = bounds
    s2 = np.ones(mm.shape[0]) if sigma2 is None else sigma2
    sample_total = mm.T @ ww
    if _unbounded(calfun, lo, up):
        T = (mm * (ww / s2)[:, None]).T @ mm
        try:
            lam = np.linalg.solve(T, population - sample_total)
        except np.linalg.LinAlgError as exc:
            raise CalibrationError(
                "calibrate: the calibration variables are collinear in the sample (singular "
                "X'WX). Fix: drop a redundant variable or collapse levels.") from exc
        return 1.0 + (mm @ lam) / s2, {"iterations": 1, "misfit": 0.0, "converged": True}
    eta = np.zeros(mm.shape[1])
    xeta = mm @ eta / s2
    scales = population / sample_total
    scale = None
    with np.errstate(invalid="ignore"):
        big = np.nanmin(scales) > 20
    if big:
        scale = float(np.mean(scales))
        ww = ww * scale
        sample_total = sample_total * scale
    it = 1
    while True:
        deriv = _dF(calfun, xeta, lo, up)
        T = (mm * (ww * deriv / s2)[:, None]).T @ mm
        misfit = population - sample_total - mm.T @ (ww * _fm1(calfun, xeta, lo, up))
        deta = _ginv(T) @ misfit
        eta = eta + deta
        xeta = mm @ eta / s2
        g = 1 + _fm1(calfun, xeta, lo, up)
        deriv = _dF(calfun, xeta, lo, up)
        while it < maxit and not (np.isfinite(g).all() and np.isfinite(deriv).all()):
            it += 1
            deta = deta / 2
            eta = eta - deta
            xeta = mm @ eta / s2
            g = 1 + _fm1(calfun, xeta, lo, up)
            deriv = _dF(calfun, xeta, lo, up)
        misfit = population - sample_total - mm.T @ (ww * _fm1(calfun, xeta, lo, up))
        rel = np.abs(misfit) / (1 + np.abs(population))
        if (rel < epsilon).all():
            converged = True
            break
        it += 1
        if it > maxit:
            converged = False
            break
    if scale is not None:
        g = g * scale
    achieved = float(np.nanmax(rel)) if np.isfinite(rel).any() else float("inf")
    return g, {"iterations": it, "misfit": achieved, "converged": converged}


def _check_bounds(calfun: str, bounds: Any, mm: np.ndarray, ww: np.ndarray,
                  population: np.ndarray, names: list[str],
                  row_bounds: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Any, Any]:
    """Check the g-weight bounds (scalars, or ``row_bounds``: one lower and upper per row, from
    ``bounds_const`` or per-row bounds) before iterating; returns (lower, upper)."""
    if not isinstance(calfun, CalFun) and calfun not in CALFUNS:
        raise ValueError(f"calfun={calfun!r}: choose one of {CALFUNS} or a CalFun "
                         "(make_calfun, cal_sinh; R's calfun).")
    if row_bounds is not None:
        lo, up = row_bounds
        if not np.all(lo < up):
            k = np.flatnonzero(~(lo < up))[:5]
            raise CalibrationError(f"bounds: lower must be below upper, not so in rows "
                                   f"{k.tolist()} (positions).")
        if calfun == "logit" and not (np.isfinite(lo).all() and np.isfinite(up).all()):
            raise CalibrationError("calfun='logit' needs finite bounds for every row (R: "
                                   "'Logit calibration requires finite bounds').")
    else:
        lo, up = (-np.inf, np.inf) if bounds is None else (float(bounds[0]), float(bounds[1]))
        if not lo < up:
            raise CalibrationError(f"bounds={bounds}: lower must be below upper.")
        if not lo <= 1 <= up:
            raise CalibrationError(
                f"bounds={bounds}: the g-weights (calibrated / design weight) start at 1, so "
                "the bounds must include 1 (for example (0.5, 2)).")
        if calfun == "logit" and not (np.isfinite(lo) and np.isfinite(up) and lo < 1 < up):
            raise CalibrationError(
                f"calfun='logit' needs finite bounds with lower < 1 < upper, got {bounds} "
                "(R: 'Logit calibration requires finite bounds'). Fix: bounds=(0.5, 2), say.")
        if calfun == "raking" and lo < 0:
            lo = 0.0 if np.isfinite(lo) else lo
    # a column that is never negative can reach at most sum(upper * w * x), at least lower*...
    nonneg = (mm >= 0).all(axis=0)
    lo_eff = np.maximum(lo, 0.0) if calfun in ("raking", "logit") else lo
    wx = mm * ww[:, None]
    with np.errstate(invalid="ignore"):
        reach_lo = np.where(wx == 0, 0.0, wx * np.broadcast_to(
            np.asarray(lo_eff, float), ww.shape)[:, None]).sum(axis=0)
        reach_up = np.where(wx == 0, 0.0, wx * np.broadcast_to(
            np.asarray(up, float), ww.shape)[:, None]).sum(axis=0)
        bad = nonneg & ((population < reach_lo - 1e-9 * np.abs(population))
                        | (population > reach_up + 1e-9 * np.abs(population)))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise CalibrationError(
            f"bounds={bounds if row_bounds is None else 'per row'} cannot be met: the "
            f"population total of {names[j]!r} is {population[j]:g}, but weights within the "
            f"bounds give totals between {reach_lo[j]:g} and {reach_up[j]:g}. Fix: widen the "
            "bounds, or check the total.")
    return lo, up


def _failure(what: str, info: dict, calfun: str, bounds: Any, maxit: int,
             epsilon: float) -> CalibrationError:
    hint = ("widen the bounds (the totals may be out of their reach), " if bounds is not None
            else "")
    return CalibrationError(
        f"{what}: calfun={calfun!r} did not converge in maxit={maxit} iterations; the largest "
        f"relative misfit |population - total| / (1 + |population|) reached {info['misfit']:.3g} "
        f"(target epsilon={epsilon:g}). Fix: {hint}raise maxit, use calfun='linear', or check "
        "that the totals are consistent with each other; force=True keeps the last weights.")


def _check_weights(g: np.ndarray, w_new: np.ndarray, index: pd.Index, allow: bool,
                   what: str) -> None:
    bad = ~(w_new > 0)
    if bad.any() and not allow:
        k = np.flatnonzero(bad)[:5]
        raise CalibrationError(
            f"{what}: calibrated weights are zero or negative in {first_rows(index, bad)} "
            f"(g-weights {np.round(g[k], 4).tolist()}). Fix: bounds=(L, U) with L > 0 "
            "(linear calibration), calfun='raking' or 'logit', or fewer calibration "
            "variables; allow_nonpositive=True keeps them.")


def _orthobasis(A: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the columns of A (rank-revealing, as R's qr.resid uses the rank)."""
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    r = int((s > s[0] * 1e-7).sum()) if s.shape[0] else 0
    return U[:, :r]


# ----------------------------------------------------------------------------- API
def _kind(design: Any) -> str:
    kind = getattr(design, "design_kind", None)
    if kind not in ("taylor", "replicate"):
        raise TypeError(f"design must be a SurveyDesign or ReplicateDesign, got "
                        f"{type(design).__name__}.")
    if design.is_subset:
        raise ValueError(
            "calibration of a subset design: calibrate the full design (the weights of every "
            "row change), then subset() it for domain estimates; to calibrate only some rows "
            "(respondents), build the design on those rows.")
    return kind


def _replicate_analysis(design: Any) -> np.ndarray:
    return design.replicate_weights("analysis")


def _new_replicate(design: Any, pw: np.ndarray, rep: np.ndarray, what: str):
    # the replicate design's own class builds the new one: calibration imports no design
    # module (the designs' calibrate/rake/... methods import calibration)
    return type(design).from_factors(
        design.full_data, pw, rep, None, design.type, design.scale, design.rscales,
        design.rho, design.mse, design.in_subset, source=f"{what}; {design!r}".split("\n")[0],
        combined=True)


def calibrate(design: Any, formula_or_columns: str | Sequence[str], population: Any,
              calfun: str = "linear", bounds: Any = None,
              maxit: int = 50, epsilon: float = 1e-7, force: bool = False,
              allow_nonpositive: bool = False, trim: tuple[float, float] | None = None,
              aggregate_stage: int | None = None, aggregate_index: Any = None,
              variance: Any = None, bounds_const: bool = False, stage: int = 0):
    """Calibrate the weights to population totals (R ``calibrate``).

    ``formula_or_columns``: a formula of main effects and interactions (``"~stype+api99"``,
    ``"~stype*sch.wide"``) or a list of columns; the intercept's total is the population
    size. ``population``: totals by R's column names (``{"(Intercept)": 6194, "stypeH": 755,
    "stypeM": 1018}``), a Series, a one-row DataFrame, or a DataFrame of (name, total).
    ``calfun``: ``"linear"`` (GREG), ``"raking"`` (exponential) or ``"logit"`` (needs finite
    ``bounds``); ``bounds=(L, U)`` on the g-weights (calibrated / design weight), or one
    (lower, upper) per row (two arrays, R's ``list(lower=, upper=)``). Returns a design of the
    same kind: a SurveyDesign whose linearization variance uses the calibration residuals, or a
    ReplicateDesign with every replicate recalibrated.

    List of margins (R's input in ``rake``'s format): ``formula_or_columns`` a list of
    formulas (``["~stype+sch.wide", "~stype+comp.imp"]``) and ``population`` a list of
    population tables, one per formula (DataFrames of the variables and a count column,
    Series indexed by the levels, or dicts). Each formula's variables are crossed
    (``stype*sch.wide``) and the totals are the tables' model-matrix totals (R's
    ``margins2totals``); with ``calfun="raking"`` this is classical raking.

    ``variance`` (R's ``variance``): the working variance of the GREG model,
    heteroscedastic calibration: ``g = 1 + F(x'eta / sigma2)``. ``sigma2`` is the array
    (or column name) given, one value per row, or ``X @ variance`` for one coefficient per
    column of the calibration model (R: ``calibrate(d, ~enroll-1, pop, variance=1)`` is the
    ratio estimator). The closed-form linear path also uses it in the variance (R's
    ``regcalibrate``: residuals of the regression weighted by ``w / sigma2``); the iterative
    path (bounds, raking, logit) only in the g-weights, as R's ``grake``.

    ``bounds_const=True`` (R's ``bounds.const``): the bounds are on the calibrated weights,
    not on the g-weights (R divides them by the design weights). R ignores it for replicate
    designs; so does this function, with a warning.

    ``stage=k`` (R's ``stage``, SurveyDesign, linear calibration without bounds as in R):
    calibration within each stage-k cluster to that cluster's population totals.
    ``population`` is then one set of totals per stage-k cluster: a dict keyed by the
    cluster's id (the value of the stage-k ids column), or a list in the order the clusters
    first appear in the data (R's ``unique(design$cluster[, stage])``); each a dict by R's
    column names or a sequence in the model's column order. The sampling weights of stages
    1..k (R's ``allprob``: from the fpc when the design was given no weights, else the
    ``weights``/``probs`` columns) must be constant within the clusters. Variance: the
    cluster's regression residuals replace the values in the variance terms of the stages
    below k (R's ``multistage`` recursion), so it matters only with an fpc at those stages.

    ``trim=(L, U)`` (R's ``trim``): g-weights outside [L, U] are set to L or U and the
    trimmed amount is shared by the other units in proportion to their design weights (R:
    ``g[!outside] + sum((g - gnew) w) / sum(w[!outside])``), in the full sample and in every
    replicate; the totals are then no longer met exactly and a failed convergence is
    accepted, as in R. R applies ``trim`` only on its iterative path: with
    ``calfun="linear"`` and no finite ``bounds`` it is ignored (with a warning here).
    ``aggregate_stage=s`` (SurveyDesign, R ``aggregate.stage``) or ``aggregate_index=column``
    (ReplicateDesign, R ``aggregate.index``): the calibration variables and weights are
    averaged within the stage-s clusters (the column's groups), so the g-weights are constant
    within clusters (cluster-level calibration); R warns when the sampling weights vary
    within the groups of ``aggregate_index``.
    """
    kind = _kind(design)
    frame = design.full_data
    if stage:
        return _calibrate_within(design, kind, formula_or_columns, population, int(stage),
                                 calfun, bounds, variance, aggregate_stage, aggregate_index,
                                 allow_nonpositive)
    if _is_margin_list(formula_or_columns, population):
        formula_or_columns, population = _margins_to_totals(
            list(formula_or_columns), list(population), frame)
    mm, names = model_matrix(frame, formula_or_columns)
    ww_orig = np.asarray(design.full_weights, float)
    ww = ww_orig
    sigma2 = _sigma2(variance, mm, frame)
    row_bounds = _row_bounds(bounds, bounds_const, ww_orig, kind)
    agg = _aggregate_groups(design, kind, aggregate_stage, aggregate_index)
    closed = _unbounded(calfun, *(row_bounds if row_bounds is not None else
                                  (bounds if bounds is not None else (-np.inf, np.inf))))
    if agg is not None:
        mm, ww = _ave(mm, agg), _ave(ww_orig[:, None], agg)[:, 0]
        if sigma2 is not None and (closed or np.ndim(variance) == 0
                                   or np.size(variance) != frame.shape[0]):
            # R: regcalibrate averages sigma2; grake takes the row values given, or X %*% b
            # of the averaged X (the same as averaging X %*% b)
            sigma2 = _ave(sigma2[:, None], agg)[:, 0]
    pop, keep = _population_vector(population, names, mm, mm.T @ ww)
    mm, pop = mm[:, keep], pop[keep]
    names = [n for n, k in zip(names, keep, strict=True) if k]
    lo, up = _check_bounds(calfun, bounds, mm, ww, pop, names, row_bounds)
    trim = _check_trim(trim, calfun, lo, up)
    g, info = grake(mm, ww, pop, calfun, (lo, up), epsilon, maxit, sigma2)
    if trim is not None:
        g, trimmed = _trim_g(g, ww, trim)
        if trimmed:
            info = dict(info, converged=True)  # R drops attr(g, "failed") after trimming
    if not info["converged"]:
        if not force:
            raise _failure("calibrate", info, calfun, bounds, maxit, epsilon)
        warnings.warn(str(_failure("calibrate", info, calfun, bounds, maxit, epsilon)),
                      UserWarning, stacklevel=2)
    with np.errstate(divide="ignore"):
        w_new = 1.0 / ((1.0 / ww_orig) / g)  # rows of weight 0 stay 0 (R: prob = Inf)
    _check_weights(g, np.where(ww_orig > 0, w_new, 1.0), frame.index, allow_nonpositive,
                   "calibrate")
    if kind == "taylor":
        whalf = np.sqrt(ww)
        if closed and sigma2 is not None:  # R regcalibrate: qr(X sqrt(w / sigma2))
            adj = GregAdjustment(_orthobasis(mm * (whalf / np.sqrt(sigma2))[:, None]),
                                 g * whalf * np.sqrt(sigma2))
        else:
            adj = GregAdjustment(_orthobasis(mm * whalf[:, None]), g * whalf)
        return design.with_calibration(w_new, adj)
    rep = _replicate_analysis(design)
    rep_cal = rep if agg is None else _ave(rep, agg)
    out = np.empty_like(rep)
    for r in range(rep.shape[1]):
        gr, inf_r = grake(mm, rep_cal[:, r], pop, calfun, (lo, up), epsilon, maxit, sigma2)
        if trim is not None:
            gr, trimmed = _trim_g(gr, rep_cal[:, r], trim)
            if trimmed:
                inf_r = dict(inf_r, converged=True)
        if not inf_r["converged"] and not force:
            raise _failure(f"calibrate, replicate {r + 1}", inf_r, calfun, bounds, maxit,
                           epsilon)
        out[:, r] = rep[:, r] * gr
    return _new_replicate(design, w_new, out, f"calibrated ({calfun})")


def _calibrate_within(design: Any, kind: str, formula: Any, population: Any, stage: int,
                      calfun: str, bounds: Any, variance: Any, aggregate_stage: Any,
                      aggregate_index: Any, allow_nonpositive: bool):
    """R's ``regcalibrate(stage > 0)``: GREG within each stage-``stage`` cluster."""
    if kind != "taylor":
        raise ValueError("calibrate(stage=): calibration within clusters is for a SurveyDesign "
                         "(R's regcalibrate.survey.design2); a replicate design has no stages.")
    if calfun != "linear" or (bounds is not None and not _unbounded("linear", *bounds)):
        raise ValueError("calibrate(stage=): R calibrates within clusters only with "
                         "calfun='linear' and no bounds (its other paths ignore stage=).")
    if aggregate_stage is not None or aggregate_index is not None:
        raise ValueError("calibrate(stage=) with aggregate_stage=: R: 'aggregate= not "
                         "implemented for calibration within clusters'.")
    stages = design.stages
    if not 1 <= stage <= len(stages):
        raise ValueError(f"stage={stage}: this design has {len(stages)} stage(s) (R: 'This "
                         f"design does not have stage {stage}').")
    frame = design.full_data
    mm, names = model_matrix(frame, formula)
    sigma2 = _sigma2(variance, mm, frame)
    s2 = np.ones(mm.shape[0]) if sigma2 is None else sigma2
    allprob = design.__dict__.get("_allprob")  # kept by the design only with several columns
    allprob = (1.0 / np.asarray(design.full_weights, dtype=float)[:, None] if allprob is None
               else np.asarray(allprob))
    if allprob.shape[1] < stage:
        raise ValueError(
            f"calibrate(stage={stage}): the design's sampling probabilities have "
            f"{allprob.shape[1]} stage(s) (R's allprob: weights= or probs= give one column "
            "per column given). Fix: build the design from fpc= without weights=, or give "
            f"probs= as {stage} columns, one per stage.")
    stageweights = 1.0 / np.prod(allprob[:, :stage], axis=1)
    clusters = np.asarray(stages[stage - 1].cluster)
    K = int(clusters.max()) + 1
    first = np.full(K, -1)
    first[clusters[::-1]] = np.arange(clusters.shape[0])[::-1]
    order = np.argsort(first)  # clusters in order of first appearance (R's unique())
    sw_first = stageweights[first]
    if np.any(np.abs(stageweights - sw_first[clusters]) > 1e-12 * np.abs(sw_first[clusters])):
        raise ValueError(f"calibrate(stage={stage}): weights at stage {stage} vary within "
                         "sampling units (R: 'Weights at stage ... vary within sampling "
                         "units').")
    w = np.asarray(design.full_weights, float)
    cw2 = w / stageweights
    pops = _cluster_totals(population, design, stage, order, first, names)
    g = np.ones_like(w)
    blocks = []
    for j, c in enumerate(order):
        rows = np.flatnonzero(clusters == c)
        X = mm[rows]
        pop = pops[j]
        st = X.T @ cw2[rows]
        keep = ~((pop == 0) & ~(X != 0).any(axis=0))
        X, pop, st = X[:, keep], pop[keep], st[keep]
        A = X * (np.sqrt(cw2[rows]) / np.sqrt(s2[rows]))[:, None]
        try:
            lam = np.linalg.solve(A.T @ A, pop - st)
        except np.linalg.LinAlgError as exc:
            raise CalibrationError(
                f"calibrate(stage={stage}): cluster {_cluster_label(design, stage, first[c])} "
                "has collinear calibration variables (or a non-zero total for a column it "
                "lacks). Fix: fewer variables, or collapse levels.") from exc
        g[rows] = 1.0 + (X @ lam) / s2[rows]
        blocks.append((rows, _orthobasis(A), g[rows] * stageweights[rows] * np.sqrt(s2[rows])
                       * cw2[rows]))
    with np.errstate(divide="ignore"):
        w_new = 1.0 / ((1.0 / w) / g)
    _check_weights(g, np.where(w > 0, w_new, 1.0), frame.index, allow_nonpositive,
                   f"calibrate(stage={stage})")
    return design.with_calibration(w_new, WithinClusterGregAdjustment(stage, blocks))


def _cluster_label(design: Any, stage: int, row: int) -> Any:
    ids = design.ids_vars
    if not ids:
        return row
    vals = tuple(design.full_data[c].iloc[row] for c in ids[:stage])
    return vals[0] if stage == 1 else vals


def _cluster_totals(population: Any, design: Any, stage: int, order: np.ndarray,
                    first: np.ndarray, names: list[str]) -> list[np.ndarray]:
    """One totals vector per stage-``stage`` cluster, in the order of ``order``."""
    labels = [_cluster_label(design, stage, int(first[c])) for c in order]

    def vec(t: Any, lab: Any) -> np.ndarray:
        if isinstance(t, (Mapping, pd.Series)):
            t = {str(k): float(v) for k, v in dict(t).items()}
            missing = [n for n in names if n not in t]
            extra = [k for k in t if k not in names]
            if missing or extra:
                raise ValueError(f"population for cluster {lab!r}: totals for {names} "
                                 f"needed; missing {missing}, unknown {extra}.")
            return np.array([t[n] for n in names])
        v = np.asarray(t, dtype=float).reshape(-1)
        if v.shape[0] != len(names):
            raise ValueError(f"population for cluster {lab!r}: {v.shape[0]} totals for the "
                             f"model columns {names} (R: 'Population and sample totals are "
                             "not the same length').")
        return v

    if isinstance(population, Mapping):
        missing = [lab for lab in labels if lab not in population]
        if missing:
            raise ValueError(f"calibrate(stage={stage}): no population totals for clusters "
                             f"{missing[:5]}{' ...' if len(missing) > 5 else ''}; give one per "
                             f"stage-{stage} cluster, keyed by its id.")
        return [vec(population[lab], lab) for lab in labels]
    pops = list(population)
    if len(pops) != len(labels):
        raise ValueError(f"calibrate(stage={stage}): {len(pops)} sets of totals for "
                         f"{len(labels)} stage-{stage} clusters (in order of first appearance).")
    return [vec(t, lab) for t, lab in zip(pops, labels, strict=True)]


def _is_margin_list(formula: Any, population: Any) -> bool:
    """R: ``is.list(formula) && is.list(population)``: formulas, one population table each."""
    return (isinstance(formula, (list, tuple)) and len(formula) > 0
            and all(isinstance(f, str) and f.strip().startswith("~") for f in formula)
            and isinstance(population, (list, tuple)))


def _sigma2(variance: Any, mm: np.ndarray, frame: pd.DataFrame) -> np.ndarray | None:
    """R's ``sigma2``: the variance per row (an array, or a column name), or ``mm %*% variance``
    for one coefficient per model column (a scalar for a one-column model)."""
    if variance is None:
        return None
    if isinstance(variance, str):
        require_columns(frame, [variance], "variance")
        v = frame[variance].to_numpy(dtype=float)
    else:
        v = np.asarray(variance, dtype=float).reshape(-1)
    n, p = mm.shape
    if v.shape[0] == n:
        s2 = v
    elif v.shape[0] == p or v.shape[0] == 1:
        s2 = mm @ np.broadcast_to(v, (p,))
        if v.shape[0] == 1 and p > 1:
            raise ValueError(f"variance: one value for {p} model columns. Give one value per "
                             f"row ({n}), or one coefficient per column of the model ({p}).")
    else:
        raise ValueError(f"variance: {v.shape[0]} values; give one per row ({n}) or one "
                         f"coefficient per column of the calibration model ({p}).")
    bad = ~(np.isfinite(s2) & (s2 > 0))
    if bad.any():
        raise ValueError(f"variance: the working variances must be positive and finite; not "
                         f"in {first_rows(frame.index, bad)}. Fix: a positive size variable "
                         "(R divides by them).")
    return s2


def _row_bounds(bounds: Any, bounds_const: bool, ww: np.ndarray,
                kind: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-row g-weight bounds (R's ``bounds`` as a list of vectors, or ``bounds.const``:
    bounds on the weights, divided by the design weights); None for scalar bounds."""
    if bounds_const and kind == "replicate":
        warnings.warn("bounds_const=True is ignored for replicate designs, as in R's "
                      "calibrate.svyrep.design (the bounds are on the g-weights).",
                      UserWarning, stacklevel=3)
        bounds_const = False
    if bounds is None:
        if bounds_const:
            raise ValueError("bounds_const=True needs bounds= (the bounds on the weights).")
        return None
    lo, up = bounds
    per_row = np.ndim(lo) > 0 or np.ndim(up) > 0
    if not per_row and not bounds_const:
        return None
    n = ww.shape[0]
    lo = np.broadcast_to(np.asarray(lo, float), (n,)).copy()
    up = np.broadcast_to(np.asarray(up, float), (n,)).copy()
    if bounds_const:  # R: ifelse(ww > 0, x / ww, x)
        pos = ww > 0
        lo[pos] = lo[pos] / ww[pos]
        up[pos] = up[pos] / ww[pos]
    return lo, up


def _aggregate_groups(design: Any, kind: str, stage: int | None, index: Any) -> np.ndarray | None:
    """Group codes for cluster-level calibration (R ``aggregate.stage``/``aggregate.index``)."""
    if stage is None and index is None:
        return None
    if kind == "taylor":
        if index is not None:
            raise ValueError("aggregate_index= is for replicate designs (R aggregate.index); "
                             "for a SurveyDesign give aggregate_stage= (a sampling stage).")
        stages = design.stages
        if not isinstance(stage, (int, np.integer)) or not 1 <= stage <= len(stages):
            raise ValueError(f"aggregate_stage={stage!r}: give a sampling stage, 1 to "
                             f"{len(stages)} for this design.")
        return np.asarray(stages[int(stage) - 1].cluster, dtype=np.int64)
    if stage is not None:
        raise ValueError("aggregate_stage= is for SurveyDesign (R aggregate.stage); a "
                         "replicate design has no stages: give aggregate_index= (a column of "
                         "cluster ids, R aggregate.index).")
    frame = design.full_data
    if isinstance(index, str):
        require_columns(frame, [index], "aggregate_index")
        vals = frame[index]
    else:
        vals = pd.Series(np.asarray(index))
        if vals.shape[0] != frame.shape[0]:
            raise ValueError(f"aggregate_index: {vals.shape[0]} values for "
                             f"{frame.shape[0]} rows.")
    if vals.isna().any():
        raise ValueError(f"aggregate_index has missing values in "
                         f"{first_rows(frame.index, vals.isna().to_numpy())}.")
    codes = pd.factorize(vals, sort=False)[0].astype(np.int64)
    ww = np.asarray(design.full_weights, float)
    K = int(codes.max()) + 1
    n = np.bincount(codes, minlength=K)
    mean = np.bincount(codes, ww, K) / n
    ss_ = np.bincount(codes, (ww - mean[codes]) ** 2, K)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(n > 1, ss_ / (n - 1), np.nan)
    if np.any(np.isfinite(var)) and np.sqrt(np.nanmax(var)) > 0.01 * ww.mean():
        warnings.warn("Sampling weights are not constant within clusters defined by "
                      "aggregate.index", UserWarning, stacklevel=3)
    return codes


def _ave(M: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """R's ``ave``: each column replaced by its mean within the groups of ``codes``."""
    K = int(codes.max()) + 1
    n = np.bincount(codes, minlength=K).astype(float)
    sums = np.column_stack([np.bincount(codes, M[:, j], K) for j in range(M.shape[1])])
    return (sums / n[:, None])[codes]


def _check_trim(trim: Any, calfun: str, lo: float, up: float) -> tuple[float, float] | None:
    if trim is None:
        return None
    try:
        t = tuple(float(x) for x in trim)
    except (TypeError, ValueError):
        t = ()
    if len(t) != 2 or not t[0] <= t[1]:
        raise ValueError(f"trim={trim!r}: give (lower, upper) g-weight bounds with lower <= "
                         "upper (R calibrate's trim).")
    if _unbounded(calfun, lo, up):
        warnings.warn("trim= is ignored with calfun='linear' and no finite bounds, as in R "
                      "(its closed-form regcalibrate has no trim step). Fix: give bounds "
                      "wider than trim, e.g. bounds=(0.5, 2), trim=(2/3, 3/2) (R's example).",
                      UserWarning, stacklevel=3)
        return None
    return t


def _trim_g(g: np.ndarray, w: np.ndarray, trim: tuple[float, float]) -> tuple[np.ndarray, bool]:
    """R calibrate's trim step: clip g to ``trim`` and share the trimmed weight
    ``sum((g - gnew) w)`` equally per unit of design weight among the units inside."""
    gnew = np.maximum(trim[0], np.minimum(g, trim[1]))
    outside = (g < trim[0]) | (g > trim[1])
    if not outside.any():
        return g, False
    inside = ~outside
    if not float(w[inside].sum()) > 0:
        raise CalibrationError(
            f"calibrate: every g-weight of a unit with positive weight is outside trim={trim} "
            f"(range {g[w > 0].min():.4g} to {g[w > 0].max():.4g}): nothing can take the "
            "trimmed weight (R would give NaN weights). Fix: widen trim.")
    gnew[inside] = gnew[inside] + float(((g - gnew) * w).sum()) / float(w[inside].sum())
    return gnew, True


def _combine_codes(codes: list[np.ndarray]) -> np.ndarray:
    """One code per distinct combination of several code vectors (first-appearance order),
    combined pairwise so the mixed-radix key never overflows."""
    key = codes[0]
    for c in codes[1:]:
        key = pd.factorize(key * (int(c.max()) + 1) + c, sort=False)[0]
    return pd.factorize(key, sort=False)[0] if len(codes) == 1 else key


def _strata_labels(frame: pd.DataFrame, strata: Any) -> tuple[list[str], np.ndarray, list[tuple]]:
    """Columns, row codes and the R level labels (a tuple per code) of the cells formed by
    ``strata``. Vectorized: each column is factorized once, only its distinct values are
    turned into R's labels (two values with one label, 1 and "1", are one level)."""
    cols = parse_vars(strata, "strata") or []
    require_columns(frame, cols, "strata")
    per_col, labs = [], []
    for c in cols:
        na = frame[c].isna().to_numpy()
        if na.any():
            raise ValueError(f"strata: column {c!r} has missing values in "
                             f"{first_rows(frame.index, na)}; recode them as a level.")
        codes, uniques = pd.factorize(frame[c], sort=False)
        lab = [r_label(u) for u in uniques]
        remap, lab_u = pd.factorize(pd.Index(lab, dtype=object), sort=False)
        per_col.append(np.asarray(remap, dtype=np.int64)[codes])
        labs.append(list(lab_u))
    codes = _combine_codes(per_col)
    K = int(codes.max()) + 1
    first = np.full(K, codes.shape[0], dtype=np.int64)
    np.minimum.at(first, codes, np.arange(codes.shape[0]))
    labels = [tuple(labs[j][per_col[j][i]] for j in range(len(cols))) for i in first]
    return cols, codes.astype(np.int64), labels


def _population_table(population: Any, cols: list[str]) -> dict[tuple, float]:
    """Post-stratum counts keyed by the tuple of level labels."""
    if isinstance(population, pd.DataFrame):
        missing = [c for c in cols if c not in population.columns]
        other = [c for c in population.columns if c not in cols]
        if missing or len(other) != 1:
            raise ValueError(
                f"population: a DataFrame needs the strata columns {cols} and one count column "
                f"(R's Freq); got columns {list(population.columns)}.")
        keys = zip(*[population[c].map(r_label) for c in cols], strict=True)
        return {k: float(v) for k, v in zip(keys, population[other[0]], strict=True)}
    if isinstance(population, (Mapping, pd.Series)):
        out = {}
        for k, v in dict(population).items():
            kt = tuple(k) if isinstance(k, tuple) else (k,)
            if len(kt) != len(cols):
                raise ValueError(f"population: key {k!r} has {len(kt)} level(s) for the "
                                 f"{len(cols)} strata columns {cols}.")
            out[tuple(r_label(x) for x in kt)] = float(v)
        return out
    raise ValueError("population: give a DataFrame (strata columns + counts) or a dict "
                     "{level: count} (tuples of levels for several strata columns).")


def _post_codes(frame, strata, population, w, partial):
    """Row codes of the post-strata, the population counts per code and labels."""
    cols, codes, labels = _strata_labels(frame, strata)
    pop = _population_table(population, cols)
    samp = np.bincount(codes, weights=w, minlength=len(labels))
    absent_pop = [lab for lab, s in zip(labels, samp, strict=True)
                  if pop.get(lab, 0.0) == 0 and s != 0]
    if absent_pop:
        raise ValueError(
            f"post_stratify: post-strata {absent_pop[:5]} of {cols} are in the sample but have "
            "no (or a zero) population count. Fix: add their counts to population.")
    present = set(labels)
    absent_samp = [k for k, v in pop.items() if v != 0 and k not in present]
    if absent_samp and not partial:
        raise ValueError(
            f"post_stratify: population counts for {absent_samp[:5]} of {cols}, a level absent "
            "from the sample: no row can carry its weight. Fix: collapse it with a "
            "neighbouring post-stratum, or partial=True to ignore it (R).")
    if absent_samp:
        warnings.warn("Some strata absent from sample: ignored", UserWarning, stacklevel=3)
    counts = np.array([pop[lab] for lab in labels])
    return codes.astype(np.int64), counts, samp


def post_stratify(design: Any, strata: str | Sequence[str], population: Any,
                  partial: bool = False):
    """Post-stratify the weights so that each post-stratum's weights sum to its population
    count (R ``postStratify``). ``strata``: column(s); ``population``: a DataFrame of the
    strata columns and one count column (R's ``Freq``), or a dict ``{level: count}``
    (tuples of levels for several columns). ``partial=True`` ignores population cells absent
    from the sample (R). Returns a design of the same kind."""
    kind = _kind(design)
    frame = design.full_data
    w = np.asarray(design.full_weights, float)
    codes, counts, samp = _post_codes(frame, strata, population, w, partial)
    reweight = counts / samp
    w_new = 1.0 / ((1.0 / w) / reweight[codes])
    if kind == "taylor":
        return design.with_calibration(w_new, PostStratAdjustment(codes, w_new, w))
    rep = _replicate_analysis(design)
    out = _poststrat_matrix(rep, codes, counts)
    return _new_replicate(design, w_new, out, "post-stratified")


def _poststrat_matrix(W: np.ndarray, codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each column of W rescaled so its post-stratum sums equal counts."""
    K = counts.shape[0]
    if W.shape[1] <= 4:  # the full-sample weights (a linearization design): bincounts
        sums = np.column_stack([np.bincount(codes, weights=W[:, j], minlength=K)
                                for j in range(W.shape[1])])
        with np.errstate(divide="ignore", invalid="ignore"):
            fac = counts[:, None] / sums
        return W * fac[codes]
    from scipy import sparse

    S = sparse.csr_matrix((np.ones(codes.shape[0]), (codes, np.arange(codes.shape[0]))),
                          shape=(K, codes.shape[0]))
    sums = np.asarray(S @ W)
    with np.errstate(divide="ignore", invalid="ignore"):
        fac = counts[:, None] / sums
    return W * fac[codes]


def _margin_spec(frame, margins, population_margins):
    margins = [margins] if isinstance(margins, str) else list(margins)
    pops = population_margins
    if isinstance(pops, Mapping) and not isinstance(pops, pd.DataFrame):
        keys = list(pops.keys())
        if len(keys) == len(margins) and all(isinstance(k, str) for k in keys) and \
                set(keys) == {m if isinstance(m, str) else "+".join(m) for m in margins}:
            pops = [pops[m if isinstance(m, str) else "+".join(m)] for m in margins]
        else:
            pops = list(pops.values())
    pops = list(pops)
    if len(pops) != len(margins):
        raise ValueError(f"rake: {len(margins)} margins but {len(pops)} population margins "
                         "(R: 'sample.margins and population.margins do not match').")
    return margins, pops


def rake(design: Any, margins: Sequence[str | Sequence[str]], population_margins: Any,
         maxit: int = 10, epsilon: float = 1.0, force: bool = False):
    """Rake the weights to population margins by iterative post-stratification (R ``rake``).

    ``margins``: one column (or list of columns) per margin; ``population_margins``: one
    population table per margin, each as :func:`post_stratify` takes it (a list in the same
    order, or a dict keyed by the margin's column). Each sweep post-stratifies on every margin
    in turn; raking stops when the joint weighted table of all margin variables changes by less
    than ``epsilon`` (R's default 1 unit; ``epsilon < 1`` means that share of the total weight)
    within ``maxit`` sweeps (R's 10). Not converging is an error saying how far it got
    (``force=True``: R's warning, weights kept). Replicate designs rake every replicate along.
    """
    kind = _kind(design)
    frame = design.full_data
    margins, pops = _margin_spec(frame, margins, population_margins)
    w0 = np.asarray(design.full_weights, float)
    W = w0[:, None] if kind == "taylor" else np.column_stack([w0, _replicate_analysis(design)])
    specs = [_post_codes(frame, m, p, w0, False)[:2] for m, p in zip(margins, pops, strict=True)]
    allcols = [c for m in margins for c in (parse_vars(m, "margins") or [])]
    joint = _combine_codes([pd.factorize(frame[c], sort=False)[0] for c in allcols])
    eps = epsilon * w0.sum() if epsilon < 1 else epsilon
    old = np.bincount(joint, weights=W[:, 0])
    it, converged, steps, delta = 0, False, [], np.inf
    while it < maxit:
        steps = []
        for codes, counts in specs:
            W = _poststrat_matrix(W, codes, counts)
            steps.append((codes, W[:, 0].copy()))
        new = np.bincount(joint, weights=W[:, 0])
        delta = float(np.max(np.abs(old - new)))
        if delta < eps:
            converged = True
            break
        old = new
        it += 1
    if not converged:
        msg = (f"rake did not converge in maxit={maxit} sweeps: the joint table of {allcols} "
               f"still moved by {delta:.4g} in the last sweep (target epsilon={eps:g}). Fix: "
               "raise maxit, or check that the margins' totals agree with each other (every "
               "margin must sum to the same population size).")
        if not force:
            raise CalibrationError(msg)
        warnings.warn(msg, UserWarning, stacklevel=2)
    w_new = W[:, 0]
    if kind == "taylor":
        return design.with_calibration(w_new, RakeAdjustment(steps))
    return _new_replicate(design, w_new, W[:, 1:], "raked")


postStratify = post_stratify  # R's spelling


# ----------------------------------------------------------------------------- trimming
def _trim_bound(value: Any, name: str, default: float) -> float:
    if value is None:
        return default
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"trim_weights: {name}={value!r} is not a number. Fix: give a weight "
                         f"bound such as {name}=50 (or leave it out).") from None
    if np.isnan(out):
        raise ValueError(f"trim_weights: {name} is NaN. Fix: give a number or leave it out.")
    return out


def _trim_matrix(W: np.ndarray, lower: float, upper: float, strict: bool, member: np.ndarray,
                 labels: list[str], index: pd.Index, maxit: int,
                 survey_version: str = "4.5") -> np.ndarray:
    """R's trimming of each column of ``W`` (``trimWeights.survey.design2``, column by
    column): weights outside ``[lower, upper]`` are set to the bound and the trimmed amount
    is shared equally by the weights that were inside, so each column keeps its sum;
    ``strict``: repeat until no weight is outside. R survey 4.5 (``do_trimWeights``) shares
    each later round only among weights never trimmed; 4.1.1 (``survey_version="4.1"``)
    re-shared to weights trimmed in earlier rounds too (its recursion). Rows where
    ``member`` is False (a replicate's dropped rows) are left as they are, take no share."""
    W = W.copy()
    trimmed = np.zeros(W.shape, dtype=bool)  # R 4.5's has_trimmed
    n_in = member.sum(axis=0)
    mean = np.where(n_in > 0, (W * member).sum(axis=0) / np.maximum(n_in, 1), 0.0)
    for what, bad in (("above upper", mean > upper), ("below lower", mean < lower)):
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            bound = upper if what == "above upper" else lower
            raise CalibrationError(
                f"trim_weights: bounds (lower={lower:g}, upper={upper:g}) are infeasible for "
                f"the {labels[j]}: their mean {mean[j]:.6g} is {what}={bound:g}, and trimming "
                "keeps the sum of the weights, so no redistribution can put every weight "
                f"within the bounds ({int(bad.sum())} weight column(s) affected). Fix: "
                "choose upper >= the mean weight >= lower (bounds are on the weights "
                "themselves, not on ratios to the mean).")
    it = 0
    while True:
        outside = ((W < lower) | (W > upper)) & member
        hit = outside.any(axis=0)
        if not hit.any():
            break
        it += 1
        if it > maxit:
            j = int(np.flatnonzero(hit)[0])
            raise CalibrationError(
                f"trim_weights(strict=True) did not settle in {maxit} rounds: the {labels[j]} "
                f"still have {int(outside[:, j].sum())} weight(s) outside the bounds, at "
                f"{first_rows(index, outside[:, j])} (the bounds are too close to the mean "
                "weight for the trimmings to find room). Fix: widen the bounds.")
        receivers = member & ~outside
        if survey_version == "4.5":
            receivers &= ~trimmed
        n_recv = receivers.sum(axis=0)
        if (hit & (n_recv == 0)).any():
            j = int(np.flatnonzero(hit & (n_recv == 0))[0])
            if it > 1 and survey_version == "4.5":
                raise CalibrationError(
                    f"trim_weights(strict=True): in round {it} the {labels[j]} still have "
                    f"{int(outside[:, j].sum())} weight(s) outside (lower={lower:g}, "
                    f"upper={upper:g}), at {first_rows(index, outside[:, j])}, and every "
                    "other weight was trimmed in an earlier round, so the trimmed amount has "
                    "nowhere to go (R survey 4.5 warns 'trimming failed' and returns weights "
                    "that no longer keep their total). Fix: widen the bounds, or "
                    "survey_version='4.1' (R 4.1.1 also re-shared to trimmed weights).")
            raise CalibrationError(
                f"trim_weights: every weight of the {labels[j]} is outside (lower={lower:g}, "
                f"upper={upper:g}), so the trimmed amount has nowhere to go. Fix: widen the "
                "bounds.")
        trimmed |= outside
        clipped = np.where(member, np.clip(W, lower, upper), W)
        share = (W - clipped).sum(axis=0) / np.maximum(n_recv, 1)
        W = np.where(receivers & hit, clipped + share, clipped)
        if not strict:
            break
    return W


def trim_weights(design: Any, upper: float | None = None, lower: float | None = None,
                 strict: bool = False, maxit: int = 1000, survey_version: str = "4.5"):
    """Trim the weights to ``[lower, upper]`` and share the trimmed amount equally among the
    weights that were within the bounds, so the total weight is kept (R ``trimWeights``).

    A :class:`~surveysynth.SurveyDesign` keeps its sampling stages and every calibration
    adjustment of its linearization variance, as R's ``trimWeights.survey.design2`` keeps
    ``postStrata`` and only replaces ``prob``: the variance of a trimmed calibrated design is
    R's. ``strict=True`` repeats the trimming until the shares push no weight outside the
    bounds (R's recursion; at most ``maxit`` rounds). Bounds are weights, not ratios.
    ``survey_version``: ``"4.5"`` (default) shares each later ``strict`` round only among
    weights never trimmed, as R survey 4.5; where none is left R 4.5 warns "trimming
    failed" and loses the total, and we raise. ``"4.1"`` re-shares to weights trimmed in
    earlier rounds too, as R 4.1.1 (R's ?trimWeights example with ``strict=TRUE``: the
    smallest weight is 20.01 under 4.1.1 and 20 under 4.5).

    A :class:`~surveysynth.ReplicateDesign` gets its full-sample weights trimmed and every
    replicate's analysis weights trimmed the same way, column by column, each keeping its own
    total; rows a replicate leaves out (weight 0) stay at 0 and take no share. This is what
    R's ``trimWeights.svyrep.design`` sets out to do; R 4.1 (and survey 4.4) cannot: it leaves
    the full-sample weights untrimmed (``design$prob`` is set, ``pweights`` is what it uses)
    and adds a vector of the untrimmed weights to the replicate matrix with recycling (R
    warns "longer object length is not a multiple"), so its replicate weights are not
    trimmed weights. ``strict`` applies to the replicates too (R's method has no ``strict``).

    Errors name the fix: bounds with ``lower > upper``, a mean weight outside the bounds
    (no redistribution can meet them; for a replicate design, checked on each replicate),
    every weight outside, ``strict`` not settling, and a subset design (trim the full design,
    then subset).
    """
    kind = _kind(design)
    up = _trim_bound(upper, "upper", np.inf)
    lo = _trim_bound(lower, "lower", -np.inf)
    if lo > up:
        raise ValueError(f"trim_weights: lower={lo:g} is above upper={up:g}. Fix: swap them.")
    if not isinstance(maxit, (int, np.integer)) or maxit < 1:
        raise ValueError(f"trim_weights: maxit={maxit!r} must be a positive integer.")
    if survey_version not in ("4.5", "4.1"):
        raise ValueError(f"trim_weights: survey_version={survey_version!r}: choose '4.5' (R "
                         "survey 4.5, the default) or '4.1' (R survey 4.1.1).")
    frame = design.full_data
    w = np.asarray(design.full_weights, float)
    if kind == "taylor":
        W = _trim_matrix(w[:, None], lo, up, bool(strict), np.ones((w.shape[0], 1), bool),
                         ["design weights"], frame.index, int(maxit), survey_version)
        return _with_weights(design, W[:, 0])
    rep = _replicate_analysis(design)
    both = np.column_stack([w, rep])
    member = np.column_stack([np.ones(w.shape[0], bool), rep != 0])
    labels = ["full-sample weights"] + [f"replicate {r + 1} weights"
                                        for r in range(rep.shape[1])]
    W = _trim_matrix(both, lo, up, bool(strict), member, labels, frame.index, int(maxit),
                     survey_version)
    return _new_replicate(design, W[:, 0], W[:, 1:], f"trimmed to [{lo:g}, {up:g}]")


def _with_weights(design: Any, weights: np.ndarray):
    """A copy of a SurveyDesign with new weights and the same calibration adjustments (R's
    ``trimWeights`` replaces ``prob`` and keeps ``postStrata``)."""
    new = object.__new__(type(design))
    new.__dict__.update(design.__dict__)
    w = np.array(weights, dtype=float)
    w.setflags(write=False)
    new._w = w
    return new


trimWeights = trim_weights  # R's spelling
