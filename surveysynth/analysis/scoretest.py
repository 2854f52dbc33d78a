"""Score tests for terms of a survey-weighted GLM (R survey 4.5's ``svyscoretest``; Rao, Scott
and Skinner 1998), step for step as R's R/score.R.

The model is evaluated at ``beta~``: the model without the tested terms (``drop_terms``:
refitted without them; ``add_terms``: the fitted model, the added terms' coefficients 0). The
efficient score of the tested coefficients ``U_out - U_in A'`` (``A = I_oi I_ii^{-1}`` from the
weighted Fisher information at ``beta~``) is totalled over the design (R ``svytotal``:
linearization or replicate variance), then

* ``method="pseudoscore"``: ``X2 = t' V^{-1} t``, F on (k, ``ddf``) (chi-square with
  ``ddf=inf``): asymptotically the Wald test of ``regTermTest``;
* ``method="working"``: the naive score statistic ``t' (I_oo - I_oi I_ii^{-1} I_io)^{-1} t``
  referred to ``sum lambda_i chi^2_1`` (``lambda`` the eigenvalues of its
  misspecification matrix; R's ``pFsum``/``pchisqsum``, ``lrt_approximation``), reported as
  the Rao-Scott X^2 (the statistic over ``sum lambda``): asymptotically the working LRT;
* ``method="individual"``: the efficient scores themselves with their design covariance.

R divides the working statistic and the misspecification matrix by ``sigma(model)^2`` and the
mean weight; both cancel in what is reported (kept in ``details``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ..results import Covariance, Estimate
from .chisqsum import pchisqsum, pFsum
from .covariance import total_covariance
from .glm import GLMResults, _build_model
from .htest import TestResult
from .irls import irls
from .regtest import _index

__all__ = ["svyscoretest"]

_METHODS = ("working", "pseudoscore", "individual")


def _fisher(beta: np.ndarray, model: GLMResults, X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """R ``fisherinf``: ``D' diag(w / V) D`` with ``D = X dmu/deta`` at ``beta``."""
    fam = model.family_object
    eta = X @ beta + model.offset
    mu = fam.link.linkinv(eta)
    V = fam.variance(mu)
    d = fam.link.mu_eta(eta)
    D = X * d[:, None]
    return D.T @ (D * (w / V)[:, None])


def _independent_columns(U: np.ndarray, tol: float = 1e-7) -> np.ndarray:
    """Columns kept by R's ``qr()`` rank check (LINPACK's limited pivoting: a column nearly in
    the span of those before it is moved to the end and dropped)."""
    keep: list[int] = []
    for j in range(U.shape[1]):
        col = U[:, j]
        norm = np.linalg.norm(col)
        if keep:
            Q, _ = np.linalg.qr(U[:, keep])
            col = col - Q @ (Q.T @ col)
        if norm > 0 and np.linalg.norm(col) > tol * norm:
            keep.append(j)
    return np.asarray(keep, dtype=int)


def _scores(model: GLMResults, beta: np.ndarray, X: np.ndarray, names: list[str],
            fullrank: bool) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """R ``scores``: the totals of the efficient scores and their design covariance."""
    r = model.refit_arguments
    design = r["design"]
    rows = model.fit_rows
    w = np.asarray(design.full_weights, float)[rows]
    fam = model.family_object
    out = beta == 0
    eta = X @ beta + model.offset
    mu = fam.link.linkinv(eta)
    V = fam.variance(mu)
    d = fam.link.mu_eta(eta)
    resid = (d / V) * (model.y - mu)
    Uin, Uout = X[:, ~out] * resid[:, None], X[:, out] * resid[:, None]
    info = _fisher(beta, model, X, w)
    A = info[np.ix_(out, ~out)] @ np.linalg.inv(info[np.ix_(~out, ~out)])
    U = Uout - Uin @ A.T
    labels = [n for n, o in zip(names, out, strict=True) if o]
    if fullrank:
        keep = _independent_columns(U)
        if keep.shape[0] < U.shape[1]:
            warnings.warn(f"svyscoretest: {U.shape[1] - keep.shape[0]} linear dependency "
                          "removed (R's warning).", UserWarning, stacklevel=3)
            U, labels = U[:, keep], [labels[k] for k in keep]
    full = np.zeros((rows.shape[0], U.shape[1]))
    full[rows] = U
    inside = np.asarray(design.in_subset, dtype=bool)
    codes = np.where(inside, 0, -1)
    total = (w[:, None] * U).sum(axis=0)
    vcov = total_covariance(design, full, codes)
    return total, vcov, labels


def _dispersion(model: GLMResults) -> float:
    """R ``sigma(model)`` for svyglm (``coef(summary(model)$dispersion)``: svyvar of the
    Pearson residuals; replicate designs: their sampling-weighted mean square)."""
    from .variance_matrix import _svyvar_values

    design = model.refit_arguments["design"]
    fam = model.family_object
    rows = model.fit_rows
    r = (model.y - model.fitted_values) / np.sqrt(fam.variance(model.fitted_values))
    if getattr(design, "design_kind", "taylor") == "replicate":
        pw = np.asarray(design.full_weights, float)[rows]
        return float(np.sum(pw * r**2) / np.sum(pw))
    vals = np.full(rows.shape[0], np.nan)
    vals[rows] = r
    return float(_svyvar_values(vals[:, None], design, na_rm=True, survey_version="4.5")[0][0])


def svyscoretest(model: GLMResults, drop_terms: Any = None, add_terms: Any = None,
                 method: str = "working", ddf: float | None = None,
                 lrt_approximation: str = "satterthwaite",
                 fullrank: bool = True) -> TestResult | Estimate:
    """Score test of terms of a :func:`~surveysynth.analysis.svyglm` fit (R ``svyscoretest``).

    Exactly one of ``drop_terms`` (terms of the model, as ``regTermTest`` names them:
    ``"~stype"``, ``["ell", "stype"]``; ``"~1 + x"`` tests the intercept too) and
    ``add_terms`` (terms to add, a formula's right-hand side: ``"~mobility + api99"``).
    ``method``: ``"working"`` (default), ``"pseudoscore"`` or ``"individual"``; ``ddf``: the
    denominator df (default the model's residual df; ``math.inf`` for chi-square; <= 0 is
    set to 1 with a warning, as R); ``lrt_approximation``: ``"satterthwaite"`` (R's default
    here) or ``"saddlepoint"``. ``fullrank=False`` keeps linearly dependent score columns
    (``method="individual"`` only, as R).

    Returns a :class:`~surveysynth.analysis.TestResult` (working: ``statistic`` the Rao-Scott
    X^2, ``parameter={"ddf": ...}``; pseudoscore: ``X2`` with ``{"df", "ddf"}``); for
    ``"individual"`` an :class:`~surveysynth.results.Estimate` of the efficient scores.
    Linearization, calibrated and replicate designs (tested against R survey 4.5).
    """
    if (drop_terms is None) == (add_terms is None):
        raise ValueError("svyscoretest: one of drop_terms and add_terms must be given (R: "
                         "\"One of 'drop.terms' and 'add.terms' must be non-NULL\").")
    if method == "pseudo":
        method = "pseudoscore"  # R's match.arg takes a prefix
    if method not in _METHODS:
        raise ValueError(f"svyscoretest: method={method!r}: choose one of {_METHODS}.")
    if model.refit_arguments is None:
        raise ValueError("svyscoretest: the model was not made by svyglm(); cannot refit it.")
    r = model.refit_arguments
    if drop_terms is not None:
        index, _, _ = _index(model, drop_terms)
        X = model.model_matrix
        names = list(model.params.index)
        keep = np.setdiff1d(np.arange(X.shape[1]), index)
        beta = np.zeros(X.shape[1])
        if keep.shape[0]:
            fit0 = irls(X[:, keep], model.y, model.prior_weights, model.offset,
                        model.family_object, maxit=r["maxit"], epsilon=r["epsilon"])
            beta[keep] = fit0.coef
    else:
        if not fullrank and method != "individual":
            warnings.warn("svyscoretest: fullrank=False only applies to method='individual' "
                          "(R's warning).", UserWarning, stacklevel=2)
        add = str(add_terms).strip().lstrip("~")
        lhs, rhs = model.formula.split("~", 1)
        # R: model.matrix of the bigger formula (not fitted: it may be rank deficient, as
        # ?svyscoretest's factor(Age) beside a function of Age)
        big = _build_model(f"{lhs.strip()} ~ {rhs.strip()} + {add}", r["design"],
                           model.family_object, r["offset"], r["na_rm"])
        if not np.array_equal(big.fit_rows, model.fit_rows):
            raise ValueError("svyscoretest: the added terms have missing values on rows of "
                             "the model. Fix: drop those rows from the design first.")
        X = big.X
        names = list(big.names)
        beta = np.zeros(X.shape[1])
        idx = [names.index(n) for n in model.params.index]
        beta[idx] = model.params.to_numpy()
    if method == "individual":
        total, vcov, labels = _scores(model, beta, X, names, fullrank)
        se = np.sqrt(np.diag(vcov))
        crit = stats.norm.ppf(0.975)
        frame = pd.DataFrame({"term": labels, "estimate": total, "se": se,
                              "ci_low": total - crit * se, "ci_high": total + crit * se})
        return Estimate.wrap(frame, 0.95, "normal", Covariance(tuple(labels), total, vcov))
    total, vcov, _ = _scores(model, beta, X, names, True)
    if ddf is None:
        ddf = model.df_resid
    if ddf <= 0:
        warnings.warn("svyscoretest: negative or zero ddf set to 1 (R's warning).",
                      UserWarning, stacklevel=2)
        ddf = 1.0
    k = total.shape[0]
    if method == "pseudoscore":
        Q = float(total @ np.linalg.solve(vcov, total))
        p = (stats.f.sf(Q / k, k, ddf) if math.isfinite(ddf) else stats.chi2.sf(Q, k))
        return TestResult("Pseudoscore test (Rao, Scott and Skinner 1998)", Q, "X2",
                          {"df": float(k), "ddf": float(ddf)}, float(p))
    w = np.asarray(r["design"].full_weights, float)
    info = _fisher(beta, model, X, w[model.fit_rows])
    out = beta == 0
    # the columns the rank check kept (the same for working and pseudoscore)
    Vn = info[np.ix_(out, out)] - info[np.ix_(out, ~out)] @ np.linalg.solve(
        info[np.ix_(~out, ~out)], info[np.ix_(~out, out)])
    if Vn.shape[0] != k:
        raise ValueError("svyscoretest(method='working'): the efficient scores are linearly "
                         "dependent (R fails here too: 'b must be compatible with a'). Fix: "
                         "method='pseudoscore'.")
    phi = _dispersion(model) ** 2  # R: sigma(model)^2, sigma.svyglm being the dispersion
    mwt = _mean_weight(r["design"])
    Q = float(total @ np.linalg.solve(Vn, total)) / phi / mwt
    Vmis = np.linalg.solve(Vn, vcov) / phi / mwt
    lam = np.linalg.eigvals(Vmis).real
    ones = np.ones(k)
    if math.isfinite(ddf):
        p = pFsum(Q, ones, lam, ddf=ddf, lower_tail=False, method=lrt_approximation)
    else:
        p = pchisqsum(Q, ones, lam, lower_tail=False, method=lrt_approximation)
    return TestResult("Working score test (Rao, Scott and Skinner 1998)",
                      Q / float(np.trace(Vmis)), "Rao-Scott X^2", {"ddf": float(ddf)},
                      float(p), details={"score_statistic": Q, "eigenvalues": lam,
                                         "sigma2": phi, "mean_weight": mwt})


def _mean_weight(design: Any) -> float:
    """R ``mean(weights(model$survey.design))``: the sampling weights of a linearization
    design; a replicate design's stored replicate columns (R's default ``type``)."""
    if getattr(design, "design_kind", "taylor") == "replicate":
        return float(np.mean(design.replicate_weights("replication")))
    return float(np.mean(np.asarray(design.full_weights, float)))
