"""Small summaries R survey exports beside its models: ``psrsq`` (pseudo-R-squared of a
svyglm), ``svykappa`` (Cohen's kappa of two raters under the design) and ``make.formula``.

Each follows R survey 4.5's code (R/rsquared.R, R/svykappa.R, R/survey.R) step by step, so the
numbers are R's: ``psrsq`` reads the fitted model's deviances, ``svykappa`` is the delta
method on ``svymean``'s proportions and their design covariance (linearization or replicate,
the package's one variance engine through :func:`~surveysynth.analysis.covariance.mean_covariance`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..levels import category_levels
from ..results import Covariance, Estimate
from .covariance import mean_covariance
from .glm import GLMResults
from .irls import irls

__all__ = ["make_formula", "psrsq", "svykappa"]


def make_formula(names: Sequence[str] | str) -> str:
    """A one-sided additive formula of the given variable names (R ``make.formula``):
    ``make_formula(["a", "b"])`` is ``"~a + b"``, the string the package's ``formula``
    arguments take (R's ``formula(paste("~", paste(names, collapse = "+")))``, deparsed)."""
    if isinstance(names, str):
        names = [names]
    names = [str(n) for n in names]
    if not names:
        raise ValueError("make_formula: no names given. Fix: pass one or more column names.")
    return "~" + " + ".join(names)


def _null_deviance(model: GLMResults) -> float:
    """R ``glm``'s ``null.deviance``: the deviance of the intercept-only fit (with the offset,
    refitted by ``glm.fit`` as R does) or, without intercept, of ``mu = linkinv(offset)``."""
    fam = model.family_object
    y, prior = model.y, np.asarray(model.prior_weights, float)
    offset = np.asarray(model.offset, float)
    intercept = "Intercept" in model.params.index
    if not intercept:
        mu0 = fam.link.linkinv(offset)
    elif np.any(offset != 0):
        null_fit = irls(np.ones((y.shape[0], 1)), y, prior, offset, fam,
                        maxit=model.refit_arguments["maxit"] if model.refit_arguments else 25)
        return float(null_fit.deviance)
    else:
        mu0 = np.full(y.shape[0], np.sum(prior * y) / np.sum(prior))
    return float(np.sum(fam.dev_resids(y, mu0, prior)))


def psrsq(model: GLMResults, method: str = "Cox-Snell") -> float:
    """Pseudo-R-squared of a binomial or Poisson svyglm (R ``psrsq``; Lumley 2017).

    With N the sum of the sampling weights over the fitted rows and n the sum of the model's
    prior weights (rescaled to mean 1, so the number of rows), ``-2 l0 = null.deviance N / n``
    and ``-2 l1 = deviance N / n``; Cox-Snell's ``1 - exp((-2 l1 + 2 l0) / N)``, Nagelkerke's
    that divided by its maximum ``1 - exp(-(-2 l0) / N)`` (which assumes unscaled weights:
    with a weight below 1 a warning says so, as R's).
    """
    if method not in ("Cox-Snell", "Nagelkerke"):
        raise ValueError(f"psrsq: method={method!r}: choose 'Cox-Snell' or 'Nagelkerke'.")
    if model.family not in ("binomial", "quasibinomial", "poisson", "quasipoisson"):
        raise ValueError(f"psrsq: family {model.family!r}: only implemented for discrete data "
                         "(binomial, quasibinomial, poisson, quasipoisson), as R's.")
    design = model.refit_arguments["design"] if model.refit_arguments else None
    if design is None:
        raise ValueError("psrsq: the model does not record its design. Fix: fit it with "
                         "surveysynth.svyglm.")
    w = np.asarray(design.full_weights, float)[model.fit_rows]
    N = float(w.sum())
    n = float(np.sum(model.prior_weights))
    m2l0 = _null_deviance(model) * N / n
    m2l1 = float(model.deviance) * N / n
    r2cs = 1 - np.exp((m2l1 - m2l0) / N)
    if method == "Cox-Snell":
        return float(r2cs)
    if np.any(w < 1):
        warnings.warn("psrsq: weights appear to be scaled (some are below 1): the Nagelkerke "
                      "rsquared may be wrong (R's warning).", UserWarning, stacklevel=2)
    return float(r2cs / (1 - np.exp(-m2l0 / N)))


def _codes(design: Any, cols: list[str], na_rm: bool) -> np.ndarray:
    inside = np.asarray(design.in_subset, dtype=bool)
    frame = design.full_data
    na = frame[cols].isna().any(axis=1).to_numpy()
    bad = inside & na
    if bad.any() and not na_rm:
        rows = list(frame.index[bad][:5])
        raise ValueError(f"svykappa: missing values in {cols} at rows {rows}. Fix: "
                         "na_rm=True (R's svymean(na.rm=TRUE): rows dropped as a domain).")
    return np.where(inside & ~na, 0, -1)


def svykappa(x: Sequence[str] | str, design: Any, na_rm: bool = False,
             level: float = 0.95) -> Estimate:
    """Cohen's kappa for the agreement of two categorical variables (R ``svykappa``).

    ``x``: two columns (or R's formula ``"~a+b"``) with the same number of categories; the
    i-th level of one is paired with the i-th level of the other (levels in R's order: factor
    levels, else sorted values). With the design's proportions ``p_i.``, ``p_.j`` and
    ``p_ii`` (R's ``svymean`` of the two factors and their interaction),
    ``kappa = (sum p_ii - sum p_i. p_.i) / (1 - sum p_i. p_.i)``; its SE by the delta method
    on their design covariance (R's ``svycontrast``). Works on every design kind the
    estimators do (linearization, calibrated, replicate, subsets). Returns an
    :class:`~surveysynth.results.Estimate` with one row ``kappa`` (``estimate``, ``se``, normal
    interval at ``level``) and its 1 x 1 covariance.
    """
    if isinstance(x, str):
        cols = [c.strip() for c in x.strip().lstrip("~").split("+") if c.strip()]
    else:
        cols = [str(c) for c in x]
    if len(cols) != 2:
        raise ValueError(f"svykappa: kappa is only computed for two variables, got {cols} "
                         "(R's message). Fix: name two columns.")
    frame = design.full_data
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise ValueError(f"svykappa: no column {missing} in the design's data. Fix: check the "
                         f"names (columns: {list(frame.columns)[:10]} ...).")
    codes = _codes(design, cols, na_rm)
    a, b = frame[cols[0]], frame[cols[1]]
    la, lb = category_levels(a), category_levels(b)
    if len(la) != len(lb):
        raise ValueError(f"svykappa: number of categories is different ({cols[0]}: {la}, "
                         f"{cols[1]}: {lb}); kappa pairs the i-th levels. Fix: give both "
                         "variables the same categories (pd.Categorical with the same "
                         "categories).")
    k = len(la)
    av, bv = a.to_numpy(object), b.to_numpy(object)
    R = np.column_stack([(av == lev) for lev in la]).astype(float)
    C = np.column_stack([(bv == lev) for lev in lb]).astype(float)
    D = R * C
    Y = np.where((codes >= 0)[:, None], np.hstack([R, C, D]), 0.0)
    p, V = mean_covariance(design, Y, codes)
    pr, pc, pd_ = p[:k], p[k:2 * k], p[2 * k:]
    expect = float(pr @ pc)
    obs = float(pd_.sum())
    kappa = (obs - expect) / (1 - expect)
    dE = (obs - 1) / (1 - expect) ** 2  # d kappa / d expect
    grad = np.concatenate([dE * pc, dE * pr, np.full(k, 1 / (1 - expect))])
    var = max(float(grad @ V @ grad), 0.0)  # perfect agreement: 0 up to rounding (R: ~1e-17)
    se = np.sqrt(var)
    from scipy import stats
    crit = stats.norm.ppf((1 + level) / 2)
    out = pd.DataFrame({"contrast": ["kappa"], "estimate": [kappa], "se": [se],
                        "ci_low": [kappa - crit * se], "ci_high": [kappa + crit * se]})
    return Estimate.wrap(out, level, "normal",
                         Covariance(("kappa",), np.array([kappa]), np.array([[var]])))
