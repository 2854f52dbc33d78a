"""More design-based models and tests from R survey: ``svygofchisq`` (goodness of fit of one
factor to given probabilities), ``svyivreg`` (two-stage least squares), ``svynls`` (nonlinear
least squares) and ``svystandardize`` (direct standardization by post-stratification), as R
survey 4.1.1 and 4.5 compute them (the two agree).

* :func:`svygofchisq`: Pearson's X^2 of the estimated counts against ``N p`` (R's
  ``chisq.test`` of the totals), referred to the distribution of ``sum lambda_k chi^2_1`` with
  ``lambda`` the eigenvalues of the design covariance of ``(O_k - E_k) / sqrt(E_k)`` (delta
  method, ``N`` estimated), by Satterthwaite's approximation (R's ``pchisqsum`` default).
* :func:`svyivreg`: weighted 2SLS (R's ``AER::ivreg`` with the sampling weights); linearization
  designs: the design covariance of ``res_i w_i xhat_i (Xhat' W Xhat)^{-1}`` (R's
  ``estfun.ivreg``); replicate designs: a refit per replicate (R ``withReplicates``) and
  ``svrVar``. Residual df ``degf + 1 - p``, t tests on them (R's ``summary.svyivreg``).
* :func:`svynls`: R's ``nls`` Gauss-Newton iterations (step halving, the relative-offset
  convergence test at ``1e-5``, ``numericDeriv``'s forward-difference gradient with step
  ``|theta| sqrt(eps)``) replicated step by step, so that R's stopping point, not only the
  optimum, is reproduced; the design variance is R's formula, ``svyrecvar`` of ``w r g V0``
  with ``r`` nls's residuals, which carry ``sqrt(w)`` (R's influence therefore weighs each row
  by ``w^1.5``; kept so that the numbers are R's). Replicate designs: R's loop refits only the
  last replicate (``for (i in ncol(repwts))``, a bug); here every replicate is refitted, so
  the variance is the replicate variance R intends.
* :func:`svystandardize`: post-stratify (``partial=True``) to the cells ``by x over`` with
  counts ``population`` share of ``by`` times the estimated total of each ``over`` cell.
  ``excluding_missing`` rebuilds a plain design on the complete rows (R drops them, keeping
  the full design's PSU counts: refused when a whole PSU would go).

* :func:`svymle`: a user's log-likelihood with linear predictors per parameter; R's
  ``optim(method="BFGS")`` (``vmmin``) replicated step by step, so the estimate is where R's
  stops (R's defaults, Nelder-Mead and minqa's newuoa, are not replicated); R's numerical
  information (``optimhess``) and sandwich.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import linalg, stats

from .chisqsum import pchisqsum
from .covariance import influence_covariance, replicate_covariance
from .formulas import formula_columns, formula_matrix, quote_dotted
from .htest import TestResult


# ----------------------------------------------------------------------------- svygofchisq
def svygofchisq(x: str, p: Sequence[float] | Mapping[Any, float], design: Any,
                na_rm: bool = False) -> TestResult:
    """Design-based chi-squared test that a factor's population distribution is ``p`` (R
    ``svygofchisq``).

    Parameters
    ----------
    x : a categorical column (R ``~stype``).
    p : the hypothesized probabilities (or counts; rescaled to sum 1), in the order of the
        factor's levels, or a dict ``{level: p}``.
    design : any design kind.

    Returns
    -------
    A :class:`~surveysynth.analysis.TestResult`: ``statistic`` Pearson's X^2 of the estimated
    counts, ``parameter`` R's ``scale`` and ``df`` of the Satterthwaite approximation,
    ``p_value``; ``details["lambda"]`` the eigenvalues.
    """
    x = x[1:].strip() if isinstance(x, str) and x.startswith("~") else x
    tot = design.total(x, na_rm=na_rm, covmat=True)
    from ..contrasts import vcov

    V = vcov(tot).to_numpy()
    obs = tot["estimate"].to_numpy(float)
    levels = list(tot["level"]) if "level" in tot.columns else [None] * obs.shape[0]
    if isinstance(p, Mapping):
        missing = [lv for lv in levels if lv not in p and str(lv) not in p]
        if missing:
            raise ValueError(f"svygofchisq: p has no probability for levels {missing}.")
        pv = np.array([p[lv] if lv in p else p[str(lv)] for lv in levels], dtype=float)
    else:
        pv = np.asarray(p, dtype=float).reshape(-1)
    if pv.shape[0] != obs.shape[0]:
        raise ValueError(f"svygofchisq: p has {pv.shape[0]} values for {obs.shape[0]} levels "
                         f"{levels}.")
    pv = pv / pv.sum()
    N = obs.sum()
    E = pv * N
    stat = float(np.sum((obs - E) ** 2 / E))
    k = obs.shape[0]
    J = (np.eye(k) - pv[:, None]) / np.sqrt(E)[:, None] \
        - ((obs - E) * 0.5 * E**-1.5 * pv)[:, None] * np.ones((1, k))
    lam = np.sort(np.linalg.eigvalsh(J @ V @ J.T))[::-1]
    tr = lam.mean()
    tr2 = (lam**2).mean() / tr**2
    pval = pchisqsum(stat, np.ones(k), lam, lower_tail=False)
    return TestResult(method="Design-based chi-squared test for given probabilities",
                      statistic=stat, statistic_name="X-squared",
                      parameter={"scale": float(tr * tr2), "df": float(k / tr2)},
                      p_value=float(pval), details={"lambda": lam, "observed": obs,
                                                    "expected": E})


# ----------------------------------------------------------------------------- svyivreg
class RegressionResults:
    """Coefficients with design-based SEs and t tests (``svyivreg``, ``svynls``):
    ``params``, ``bse``, ``tvalues``, ``pvalues``, ``df_resid``, ``vcov()``, ``conf_int()``,
    ``naive_cov`` (model-based), ``replicates`` (replicate designs)."""

    def __init__(self, kind: str, formula: str, names: list[str], coef: np.ndarray,
                 vcov: np.ndarray, df_resid: float, naive_cov: np.ndarray | None = None,
                 replicates: np.ndarray | None = None, z: bool = False) -> None:
        self.kind, self.formula = kind, formula
        self.params = pd.Series(coef, index=names, name="estimate")
        self._vcov = pd.DataFrame(vcov, index=names, columns=names)
        self.bse = pd.Series(np.sqrt(np.diag(vcov)), index=names, name="se")
        self.df_resid = df_resid
        self.tvalues = pd.Series(self.params / self.bse, name="t")
        dist = stats.norm if z or not df_resid > 0 else stats.t(df_resid)
        self.pvalues = pd.Series(2 * dist.sf(np.abs(self.tvalues)), index=names, name="p")
        self.naive_cov = None if naive_cov is None else pd.DataFrame(naive_cov, index=names,
                                                                     columns=names)
        self.replicates = None if replicates is None else pd.DataFrame(replicates,
                                                                        columns=names)

    def vcov(self) -> pd.DataFrame:
        return self._vcov.copy()

    def conf_int(self, alpha: float = 0.05) -> pd.DataFrame:
        crit = stats.t.ppf(1 - alpha / 2, self.df_resid) if self.df_resid > 0 else np.nan
        return pd.DataFrame({"lower": self.params - crit * self.bse,
                             "upper": self.params + crit * self.bse})

    def coef_table(self, alpha: float = 0.05) -> pd.DataFrame:
        ci = self.conf_int(alpha)
        return pd.DataFrame({"estimate": self.params, "se": self.bse, "t": self.tvalues,
                             "p": self.pvalues, "lower": ci["lower"], "upper": ci["upper"]})

    def __repr__(self) -> str:
        return (f"{self.kind}: {self.formula}\n"
                + self.coef_table().to_string(float_format=lambda v: f"{v:.6g}")
                + f"\n(residual df {self.df_resid:g})")


def _r_names(names: list[str]) -> list[str]:
    return ["(Intercept)" if n == "Intercept" else n for n in names]


def _design_df(design: Any, scope: np.ndarray) -> float:
    inside = np.asarray(design.in_subset, dtype=bool)
    return float(design.domain_df(np.where(inside, 0, -1), 1)[0])


def _tsls(y, X, Z, w):
    """Weighted 2SLS: coefficients, projected regressors and (Xhat' W Xhat)^{-1}."""
    sw = np.sqrt(w)
    Q, R = linalg.qr(Z * sw[:, None], mode="economic")
    Xhat_w = Q @ (Q.T @ (X * sw[:, None]))  # sqrt(w) * Xhat
    coef, *_ = linalg.lstsq(Xhat_w, y * sw)
    cov_unscaled = linalg.inv(Xhat_w.T @ Xhat_w)
    with np.errstate(divide="ignore", invalid="ignore"):  # replicate weights may be 0
        Xhat = np.where(sw[:, None] > 0, Xhat_w / sw[:, None], 0.0)
    return coef, Xhat, cov_unscaled


def svyivreg(formula: str, design: Any) -> RegressionResults:
    """Two-stage least squares with design-based SEs (R ``svyivreg``).

    ``formula``: ``"y ~ x1 + x2 | z1 + z2 + z3"``: regressors before ``|``, instruments after
    (exogenous regressors must be listed as their own instruments, as in R; R's
    ``. - en + in`` update form is not supported). Linearization (possibly calibrated) and
    replicate designs. Rows with a missing value are refused (R's ``ivreg`` drops them, then
    its variance step fails).
    """
    if not isinstance(formula, str) or "~" not in formula or formula.count("|") != 1:
        raise ValueError(f"svyivreg: formula={formula!r}: give 'y ~ regressors | instruments'.")
    lhs, rhs = formula.split("~", 1)
    regs, inst = (part.strip() for part in rhs.split("|"))
    if re.match(r"^\.\s*[-+]", inst) or inst == ".":
        raise ValueError("svyivreg: the '. - en + in' instrument shorthand is not supported; "
                         "list the instruments.")
    data = design.full_data
    cols = formula_columns(formula, data.columns)
    inside = np.asarray(design.in_subset, dtype=bool)
    na = data[cols].isna().any(axis=1).to_numpy() & inside if cols else np.zeros_like(inside)
    if na.any():
        raise ValueError(f"svyivreg: missing values in {cols} (rows "
                         f"{data.index[na][:5].tolist()}). Fix: build the design on complete "
                         "rows.")
    sub = data.loc[inside]
    mm = formula_matrix(quote_dotted(f"{lhs} ~ {regs}", data.columns), sub, "svyivreg",
                        na_action="raise")
    y = np.asarray(mm.lhs, dtype=float)[:, 0]
    X = np.asarray(mm.rhs, dtype=float)
    names = _r_names([str(c) for c in mm.rhs.columns])
    Z = np.asarray(formula_matrix(quote_dotted(inst, data.columns), sub, "svyivreg",
                                  na_action="raise"), dtype=float)
    if Z.shape[1] < X.shape[1]:
        raise ValueError(f"svyivreg: {Z.shape[1]} instrument columns for {X.shape[1]} "
                         "regressors: the model is not identified.")
    w = np.asarray(design.full_weights, dtype=float)[inside]
    coef, Xhat, cov_unscaled = _tsls(y, X, Z, w)
    df_resid = _design_df(design, inside) + 1 - len(names)
    if getattr(design, "design_kind", "taylor") == "replicate":
        rep = np.asarray(design.replicate_weights("analysis"), dtype=float)
        betas = np.vstack([_tsls(y, X, Z, rep[:, r])[0] for r in range(rep.shape[1])])
        vcov = replicate_covariance(design, betas, coef)
        return RegressionResults("Survey-weighted 2SLS", formula, names, coef, vcov,
                                 df_resid, cov_unscaled, betas)
    res = y - X @ coef
    infl = np.zeros((data.shape[0], len(names)))
    infl[inside] = (w * res)[:, None] * Xhat @ cov_unscaled
    vcov = influence_covariance(design, infl, np.where(inside, 0, -1))
    return RegressionResults("Survey-weighted 2SLS", formula, names, coef, vcov, df_resid,
                             cov_unscaled)


# ----------------------------------------------------------------------------- svynls
_EPS_DERIV = float(np.finfo(float).eps ** 0.5)


class _NLSModel:
    """R's ``nlsModel`` for a weighted model: residuals ``sqrt(w) (y - f)``, the gradient by
    ``numericDeriv`` (forward differences), its QR, the relative-offset criterion."""

    def __init__(self, f, y, w, names):
        self.f, self.y, self.sw, self.names = f, y, np.sqrt(w), names

    def set_pars(self, theta: np.ndarray) -> None:
        self.theta = np.array(theta, dtype=float)
        self.fitted = self._eval(self.theta)
        G = np.empty((self.y.shape[0], self.theta.shape[0]))
        for j in range(self.theta.shape[0]):
            t = self.theta.copy()
            xx = abs(t[j])
            delta = _EPS_DERIV if xx == 0 else xx * _EPS_DERIV
            t[j] += delta
            G[:, j] = (self._eval(t) - self.fitted) / delta
        self.grad = G
        self.resid = self.sw * (self.y - self.fitted)
        self.dev = float(np.sum(self.resid**2))
        self.Q, self.R = linalg.qr(self.sw[:, None] * G, mode="economic")
        if np.min(np.abs(np.diag(self.R))) <= 1e-7 * np.max(np.abs(np.diag(self.R))):
            raise ValueError("svynls: singular gradient matrix at the parameters "
                             f"{dict(zip(self.names, self.theta.round(6), strict=True))}.")

    def _eval(self, theta: np.ndarray) -> np.ndarray:
        out = np.asarray(self.f(dict(zip(self.names, theta, strict=True))), dtype=float)
        out = np.broadcast_to(out, self.y.shape).astype(float)
        if not np.all(np.isfinite(out)):
            raise ValueError("svynls: missing value or an infinity produced when evaluating "
                             "the model (R's nls message).")
        return out

    def conv(self) -> float:
        p = self.theta.shape[0]
        qty = self.Q.T @ self.resid
        rest = float(self.resid @ self.resid - qty @ qty)  # sum of the rotated rest^2
        return float(np.sqrt(np.sum(qty[:p] ** 2) / max(rest, 0.0))) if rest > 0 else 0.0

    def incr(self) -> np.ndarray:
        return linalg.solve_triangular(self.R, self.Q.T @ self.resid)


def _nls(f, y, w, start, names, maxiter=50, tol=1e-5, min_factor=1 / 1024):
    """R's ``nls_iter`` (Gauss-Newton with step halving kept between iterations)."""
    m = _NLSModel(f, y, w, names)
    m.set_pars(np.asarray(start, dtype=float))
    dev, fac = m.dev, 1.0
    for _ in range(maxiter):
        if m.conv() <= tol:
            return m
        pars = m.theta.copy()
        inc = m.incr()
        while fac >= min_factor:
            m.set_pars(pars + fac * inc)
            if m.dev <= dev:
                dev = m.dev
                fac = min(2 * fac, 1.0)
                break
            fac /= 2
        else:
            raise ValueError(f"svynls: step factor {fac:g} reduced below minFactor of "
                             f"{min_factor:g} (R's nls error).")
    raise ValueError(f"svynls: number of iterations exceeded maximum of {maxiter} (R's nls "
                     "error). Fix: better start values.")


def _model_function(rhs: str, data: pd.DataFrame, names: list[str]):
    cols = formula_columns(rhs, data.columns)
    env = {c: data[c].to_numpy(dtype=float) for c in cols}
    code = compile(quote_dotted(rhs, data.columns).replace("`", ""), "<svynls>", "eval")
    safe = {"np": np, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "__builtins__": {}}

    def f(params: dict[str, float]) -> np.ndarray:
        return eval(code, safe, {**env, **params})  # noqa: S307 - the user's own model

    return f


def svynls(formula: str, design: Any, start: Mapping[str, float]) -> RegressionResults:
    """Nonlinear least squares with design-based SEs (R ``svynls``).

    Parameters
    ----------
    formula : ``"y ~ a * x / (b + x)"``: a column on the left, a numpy expression of columns
        and parameters on the right (``exp``, ``log``, ``sqrt`` or ``np.*``).
    design : a :class:`~surveysynth.SurveyDesign` (possibly calibrated) or a
        :class:`~surveysynth.ReplicateDesign`.
    start : starting values ``{"a": 15, "b": 5}``; their names are the parameters.

    Returns
    -------
    :class:`RegressionResults` with ``naive_cov`` R's ``vcov(fit$fit)`` (model-based), and
    design-based ``vcov()``; z tests (R's ``summary.svynls`` uses t on n - p df: ``df_resid``
    here is that n - p).

    Fit by R's own ``nls`` iterations (see the module docstring), with the sampling weights
    rescaled to mean 1.
    """
    if not isinstance(formula, str) or "~" not in formula:
        raise ValueError(f"svynls: formula={formula!r}: give 'y ~ model expression'.")
    if not isinstance(start, Mapping) or not start:
        raise ValueError("svynls: start must be a dict of parameter names and values.")
    lhs, rhs = (s.strip() for s in formula.split("~", 1))
    data = design.full_data
    inside = np.asarray(design.in_subset, dtype=bool)
    names = list(start)
    clash = [n for n in names if n in data.columns]
    if clash:
        raise ValueError(f"svynls: parameters {clash} are also column names; rename them.")
    cols = formula_columns(formula, data.columns)
    na = data[cols].isna().any(axis=1).to_numpy() & inside if cols else np.zeros_like(inside)
    if na.any():
        raise ValueError(f"svynls: missing values in {cols} (rows "
                         f"{data.index[na][:5].tolist()}). Fix: build the design on complete "
                         "rows.")
    sub = data.loc[inside]
    if lhs not in sub.columns:
        raise ValueError(f"svynls: the response {lhs!r} must be a column of the data.")
    y = sub[lhs].to_numpy(dtype=float)
    f = _model_function(rhs, sub, names)
    w_full = np.asarray(design.full_weights, dtype=float)
    pw = w_full[inside]
    meanweight = pw.mean()
    w = pw / meanweight
    m = _nls(f, y, w, [start[n] for n in names], names)
    theta = m.theta
    Rinv = linalg.solve_triangular(m.R, np.eye(theta.shape[0]))
    v0 = Rinv @ Rinv.T
    n_pos = int(np.sum(w > 0))
    naive = v0 * m.dev / (n_pos - theta.shape[0])
    df_resid = float(n_pos - theta.shape[0])
    if getattr(design, "design_kind", "taylor") == "replicate":
        rep = np.asarray(design.replicate_weights("analysis"), dtype=float)
        thetas = np.vstack([_nls(f, y, rep[:, r] / meanweight, theta, names).theta
                            for r in range(rep.shape[1])])
        vcov = replicate_covariance(design, thetas, theta)
        return RegressionResults("Nonlinear survey regression", formula, names, theta, vcov,
                                 df_resid, naive, thetas)
    # R: infl <- resids * grads %*% v0, with resids = sqrt(w) (y - f); svyrecvar(infl * w)
    infl = np.zeros((data.shape[0], theta.shape[0]))
    infl[inside] = (m.resid * w)[:, None] * (m.grad @ v0)
    vcov = influence_covariance(design, infl, np.where(inside, 0, -1))
    return RegressionResults("Nonlinear survey regression", formula, names, theta, vcov,
                             df_resid, naive)


# ----------------------------------------------------------------------------- svystandardize
def _columns(spec: Any, what: str) -> list[str]:
    if spec is None:
        return []
    if isinstance(spec, str):
        text = spec.strip().lstrip("~").strip()
        return [] if text in ("", "1") else [t.strip() for t in text.split("+")]
    return [str(c) for c in spec]


def _complete_rows_design(design: Any, cols: list[str]) -> Any:
    """R's ``design[-naa, ]`` for rows with a missing value in ``cols``: the design rebuilt
    on the complete rows (R drops them; its PSU counts per stratum stay those of the full
    design, so the rebuilt design must keep every PSU)."""
    data = design.full_data
    na = data[cols].isna().any(axis=1).to_numpy()
    if not na.any():
        return design
    kind = getattr(design, "design_kind", "taylor")
    if kind != "taylor" or design.is_subset or getattr(design, "_calibration", ()) or \
            getattr(design, "_pps", None) is not None:
        raise ValueError(
            f"svystandardize: excluding_missing drops {int(na.sum())} rows with missing "
            f"{cols}; that is supported for a plain SurveyDesign only. Fix: build the design "
            "(and its replicates or calibration) on the complete rows first.")
    from ..design import SurveyDesign

    keep = ~na
    new = SurveyDesign(data.loc[keep], ids=design.ids_vars or None, strata=design.strata_vars,
                       weights=np.asarray(design.full_weights, dtype=float)[keep],
                       fpc=design.fpc_vars, nest=design.nest, lonely_psu=design.lonely_psu,
                       adjust_domain_lonely=design.adjust_domain_lonely)
    for old_stage, new_stage in zip(design.stages, new.stages, strict=True):
        if not np.array_equal(np.asarray(old_stage.n_psu), np.asarray(new_stage.n_psu)):
            raise ValueError(
                "svystandardize: the rows with missing values of excluding_missing make whole "
                "PSUs disappear; R keeps the full design's PSU counts. Fix: build the design "
                "on the complete rows yourself if that is what you mean.")
    return new


def svystandardize(design: Any, by: str | Sequence[str], population: Any,
                   over: str | Sequence[str] | None = None,
                   excluding_missing: str | Sequence[str] | None = None) -> Any:
    """Direct standardization (R ``svystandardize``, as NCHS does it): a design whose
    weights give the distribution ``population`` over the levels of ``by`` within every cell
    of ``over``, by post-stratification (``partial=True``) to ``by x over`` cells with counts
    ``population share of the by level x estimated total of the over cell``.

    Parameters
    ----------
    design : a :class:`~surveysynth.SurveyDesign` or :class:`~surveysynth.ReplicateDesign`.
    by : the standardizing variable(s), e.g. ``"~agecat"``.
    population : the standard population's counts (or shares) of the ``by`` levels in R's
        level order (factor levels; sorted values), or a DataFrame with a ``Freq`` column.
    over : the cells within which to standardize (``"~race+RIAGENDR"``; default: the whole
        population, R's ``~1``).
    excluding_missing : variables whose missing rows leave the design first (R
        ``excluding.missing=~HI_CHOL``).

    Returns a post-stratified design of the same kind: estimate on it (``mean``, ``by=``,
    ``subset``) as on any design.
    """
    from ..calibration import post_stratify
    from ..estimate import category_levels

    by_cols, over_cols = _columns(by, "by"), _columns(over, "over")
    if not by_cols:
        raise ValueError("svystandardize: by= needs at least one variable, e.g. '~agecat'.")
    if excluding_missing is not None:
        design = _complete_rows_design(design, _columns(excluding_missing,
                                                        "excluding_missing"))
    data = design.full_data
    missing = [c for c in by_cols + over_cols if c not in data.columns]
    if missing:
        raise ValueError(f"svystandardize: columns {missing} are not in the design's data.")
    if isinstance(population, pd.DataFrame):
        population = population["Freq"].to_numpy()
    pop = np.asarray(population, dtype=float).reshape(-1)
    w = np.asarray(design.full_weights, dtype=float)
    inside = np.asarray(design.in_subset, dtype=bool)

    def grid(cols: list[str]) -> list[tuple]:
        combos: list[tuple] = [()]
        for c in cols:  # R's table order: the first variable varies fastest
            combos = [(*t, lv) for lv in category_levels(data.loc[inside, c]) for t in combos]
        return combos

    by_cells = grid(by_cols)
    if pop.shape[0] != len(by_cells):
        raise ValueError(f"svystandardize: population has {pop.shape[0]} counts for the "
                         f"{len(by_cells)} cells of {by_cols}: {by_cells[:6]}.")
    fixed = pop / pop.sum()
    if over_cols:
        over_cells = grid(over_cols)
        key = list(zip(*[data[c] for c in over_cols], strict=True))
        totals: dict[tuple, float] = {}
        for k, wi, ins in zip(key, w, inside, strict=True):
            if ins:
                totals[k] = totals.get(k, 0.0) + wi
        free = np.array([totals.get(cell, 0.0) for cell in over_cells])
    else:
        over_cells, free = [()], np.array([w[inside].sum()])
    rows = [(*b, *o) for o in over_cells for b in by_cells]
    freq = np.outer(fixed, free).reshape(-1, order="F")
    table = pd.DataFrame(rows, columns=by_cols + over_cols)
    table["Freq"] = freq
    return post_stratify(design, by_cols + over_cols, table, partial=True)


# ----------------------------------------------------------------------------- svymle
def _response_matrix(lhs: str, data: pd.DataFrame) -> np.ndarray:
    """The response: a column or expression, or ``cbind(a, b > 0)`` (R's matrix response)."""
    from .survival import _split_args, _values

    text = lhs.strip()
    m = re.match(r"^(?:I\()?\s*cbind\((.*)\)\s*\)?$", text, re.S)
    parts = _split_args(m.group(1)) if m else [text]
    cols = [pd.to_numeric(_values(p, data, "svymle").map(
        lambda v: float(v) if isinstance(v, (bool, np.bool_)) else v), errors="coerce")
        .to_numpy(float) for p in parts]
    return cols[0] if len(cols) == 1 else np.column_stack(cols)


def _optimhess(grad, theta: np.ndarray, ndeps: float = 1e-3) -> np.ndarray:
    """R's ``optimhess`` (as ``optim(hessian=TRUE)`` computes it): central differences of the
    gradient with step ``ndeps``, symmetrized."""
    p = theta.shape[0]
    H = np.empty((p, p))
    for i in range(p):
        up, dn = theta.copy(), theta.copy()
        up[i] += ndeps
        dn[i] -= ndeps
        H[i] = (grad(up) - grad(dn)) / (2 * ndeps)
    return (H + H.T) / 2


def _vmmin_search(fn, X, t, fmin, gradproj):
    """R's vmmin line search: backtrack by 0.2 from step 1 until the Armijo condition
    (``acctol = 1e-4``) or no parameter changes (``reltest = 10``)."""
    steplength, f = 1.0, None
    while True:
        b = X + steplength * t
        count = int(np.sum(10.0 + X == 10.0 + b))
        if count < X.shape[0]:
            f = fn(b)
            if np.isfinite(f) and f <= fmin + gradproj * steplength * 1e-4:
                return b, f, steplength, count
            steplength *= 0.2
        else:
            return b, f, steplength, count


def _vmmin(fn, gr, b0: np.ndarray, maxit: int = 100, abstol: float = -np.inf,
           reltol: float = 1.490116119384765625e-08) -> tuple[np.ndarray, float, int, bool]:
    """R's ``vmmin`` (``optim(method="BFGS")``), step for step: variable-metric updates of
    the inverse Hessian, the line search of :func:`_vmmin_search`, restarts when ``D1 <= 0``
    or every ``2n`` gradients, stop when the value changes by less than ``reltol`` relative.
    Returns the parameters, the value, the iterations and whether it converged."""
    b = np.array(b0, dtype=float)
    n = b.shape[0]
    f = fmin = fn(b)
    if not np.isfinite(f):
        raise ValueError("svymle: initial value in 'vmmin' is not finite (R's message).")
    g = gr(b)
    gradcount = it = ilast = 1
    B = np.eye(n)
    while True:
        if ilast == gradcount:
            B = np.eye(n)
        X, c = b.copy(), g.copy()
        t = -(B @ g)
        gradproj = float(t @ g)
        if gradproj < 0.0:
            b, fnew, steplength, count = _vmmin_search(fn, X, t, fmin, gradproj)
            f = f if fnew is None else fnew
            if not (f > abstol and abs(f - fmin) > reltol * (abs(fmin) + reltol)):
                count = n
                fmin = f
            if count < n:  # making progress: BFGS update of the inverse Hessian
                fmin = f
                g = gr(b)
                gradcount += 1
                it += 1
                t = steplength * t
                c = g - c
                D1 = float(t @ c)
                if D1 > 0:
                    X = B @ c
                    D2 = 1.0 + float(X @ c) / D1
                    B = B + (D2 * np.outer(t, t) - np.outer(X, t) - np.outer(t, X)) / D1
                else:
                    ilast = gradcount
            elif ilast < gradcount:
                count = 0
                ilast = gradcount
        else:  # uphill: reset unless just reset
            count = n if ilast == gradcount else 0
            ilast = gradcount
        if it >= maxit:
            return b, fmin, it, False
        if gradcount - ilast > 2 * n:
            ilast = gradcount
        if count == n and ilast == gradcount:
            return b, fmin, it, True


class MLEResults(RegressionResults):
    """A survey-weighted maximum likelihood fit (R ``svymle``): ``params`` named
    ``"<parameter>.<term>"`` as R, ``vcov()`` the design-based sandwich (needs ``gradient``)
    and ``vcov_model()`` R's ``vcov(m, stderr="model")``; z tests as R's summary."""

    def vcov_model(self) -> pd.DataFrame:
        return self.model_cov.copy()


def _mle_setup(design: Any, formulas: Mapping[str, str], start: Any):
    """Response, model matrices per parameter, R's parameter names, start, weights."""
    if getattr(design, "design_kind", "taylor") != "taylor":
        raise ValueError("svymle: replicate designs are not supported (R: 'design is not a "
                         "survey.design').")
    if not isinstance(formulas, Mapping) or not formulas:
        raise ValueError("svymle: formulas must be a dict {parameter: formula}.")
    names = list(formulas)
    with_resp = [k for k, f in formulas.items() if "~" in f and f.split("~", 1)[0].strip()]
    if len(with_resp) != 1:
        raise ValueError("svymle: exactly one formula must have a response (R: 'Need a "
                         "response variable').")
    data = design.full_data
    inside = np.asarray(design.in_subset, dtype=bool)
    sub = data.loc[inside]
    y = _response_matrix(formulas[with_resp[0]].split("~", 1)[0], sub)
    mats, parnames = [], []
    for k in names:
        rhs = formulas[k].split("~", 1)[1] if "~" in formulas[k] else formulas[k]
        mm = formula_matrix(quote_dotted(rhs.strip() or "1", data.columns), sub, "svymle",
                            na_action="raise")
        mats.append(np.asarray(mm, dtype=float))
        parnames += [f"{k}.{n}" for n in _r_names([str(c) for c in mm.columns])]
    if isinstance(start, Mapping):
        theta0 = np.concatenate([np.atleast_1d(np.asarray(start[k], dtype=float))
                                 for k in names])
    else:
        theta0 = np.concatenate([np.atleast_1d(np.asarray(v, dtype=float)) for v in start])
    if theta0.shape[0] != sum(m.shape[1] for m in mats):
        raise ValueError(f"svymle: starting values wrong length ({theta0.shape[0]} for the "
                         f"parameters {parnames}).")
    w = np.asarray(design.full_weights, dtype=float)[inside]
    return names, y, mats, parnames, theta0, w, inside


def _mle_optimum(objective, grad, theta0, fnscale):
    """The maximum: R's BFGS run to a 1e-15 relative change, then Newton steps (the information by
    :func:`_optimhess`) with step halving, until the step is below 1e-13 relative."""
    theta = _vmmin(lambda t: objective(t) / fnscale, lambda t: grad(t) / fnscale, theta0,
                   maxit=100000, reltol=1e-15)[0]
    best = objective(theta)
    for _ in range(100):
        H, g = _optimhess(grad, theta), grad(theta)
        if not (np.isfinite(H).all() and np.isfinite(g).all()):
            return theta, False
        try:
            step = linalg.solve(-H, g)
        except linalg.LinAlgError:
            return theta, False
        for _half in range(40):
            new = theta + step
            val = objective(new)
            if np.isfinite(val) and val >= best - 1e-12 * abs(best):
                break
            step = step / 2
        else:
            return theta, False
        theta, best = new, val
        if np.max(np.abs(step) / np.maximum(np.abs(theta), 1.0)) < 1e-13:
            return theta, True
    return theta, False


def svymle(loglike: Any, design: Any, formulas: Mapping[str, str],
           start: Mapping[str, Sequence[float]] | Sequence[Any], gradient: Any = None,
           method: str = "BFGS", control: Mapping[str, float] | None = None,
           **args: Any) -> MLEResults:
    """Maximum likelihood with design-based SEs for a user's likelihood (R ``svymle``).

    Parameters
    ----------
    loglike : ``loglike(y, **parameters, **args)`` -> per-row log-likelihood (numpy), with one
        keyword per entry of ``formulas`` holding that parameter's linear predictor; e.g.
        ``lambda x, mean, sd: scipy.stats.norm.logpdf(x, mean, sd)``.
    design : a :class:`~surveysynth.SurveyDesign` (R: linearization designs only).
    formulas : ``{"mean": "api00 ~ api99 + ell", "sd": "~1"}``: exactly one with a response
        (a column, an expression or ``cbind(time, status > 0)``), in the order of ``start``.
    start : starting values, a dict by parameter or a list of sequences (R's list).
    gradient : ``gradient(y, **parameters, **args)`` -> (n, k) derivatives of the per-row
        log-likelihood by each parameter's linear predictor, columns in the order of
        ``formulas``. Needed for the design-based (sandwich) variance, as in R; without it
        only the model-based ``vcov_model()`` is available (R: NA robust SEs).
    method : ``"BFGS"``: R's ``optim`` BFGS (``vmmin``) replicated step by step, with R's
        ``fnscale = -sum(w)/n``, ``maxit`` 100 and ``reltol`` sqrt(eps) unless ``control``
        says otherwise, so the estimate is where R's stops; ``"exact"``: the optimum (BFGS
        polished by Newton steps). R's defaults (Nelder-Mead without a gradient, minqa's
        newuoa with one) are not replicated: pass ``method="BFGS"`` in R to compare.
    control : ``{"maxit": ..., "reltol": ...}`` as R's ``control``.
    args : passed to ``loglike`` and ``gradient`` (R's ``...``).

    The information is R's ``optimhess`` (central differences of the gradient, step 1e-3, as
    ``optim(hessian=TRUE)``), so the SEs are R's at R's estimate.
    """
    if method not in ("BFGS", "exact"):
        raise ValueError(f"svymle: method={method!r}: choose 'BFGS' (R's optim BFGS) or "
                         "'exact'.")
    names, y, mats, parnames, theta0, w, inside = _mle_setup(design, formulas, start)
    bounds = np.cumsum([0] + [m.shape[1] for m in mats])

    def lps(theta):
        return {k: mats[i] @ theta[bounds[i]:bounds[i + 1]] for i, k in enumerate(names)}

    def objective(theta):
        return float(np.sum(np.asarray(loglike(y, **lps(theta), **args)) * w))

    def scores(theta):
        d = np.asarray(gradient(y, **lps(theta), **args), dtype=float).reshape(y.shape[0], -1)
        return np.column_stack([d[:, [i]] * w[:, None] * mats[i] for i in range(len(names))])

    def grad(theta):
        if gradient is not None:
            return scores(theta).sum(axis=0)
        g = np.empty(theta.shape[0])  # R's numerical gradient: central, step 1e-3
        for i in range(theta.shape[0]):
            up, dn = theta.copy(), theta.copy()
            up[i] += 1e-3
            dn[i] -= 1e-3
            g[i] = (objective(up) - objective(dn)) / 2e-3
        return g

    ctl = {"maxit": 100, "reltol": float(np.finfo(float).eps ** 0.5), **(control or {})}
    fnscale = -w.sum() / w.shape[0]
    if method == "BFGS":
        theta, _, _, converged = _vmmin(lambda t: objective(t) / fnscale,
                                        lambda t: grad(t) / fnscale, theta0,
                                        maxit=int(ctl["maxit"]), reltol=float(ctl["reltol"]))
    else:
        theta, converged = _mle_optimum(objective, grad, theta0, fnscale)
    invinf = linalg.inv(-_optimhess(grad, theta))
    if gradient is not None:
        infl = np.zeros((inside.shape[0], theta.shape[0]))
        infl[inside] = scores(theta) @ invinf
        vcov = influence_covariance(design, infl, np.where(inside, 0, -1))
    else:
        vcov = np.full((theta.shape[0], theta.shape[0]), np.nan)
    out = MLEResults("Survey-sampled mle", str(dict(formulas)), parnames, theta, vcov,
                     float("inf"), invinf, z=True)
    out.model_cov = pd.DataFrame(invinf * w.mean(), index=parnames, columns=parnames)
    out.loglik = objective(theta)
    out.converged = converged
    return out
