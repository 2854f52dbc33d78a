"""Area-level small-area estimation: the Fay-Herriot model (R ``sae::eblupFH``/``mseFH``) and
``svysmoothArea`` from a design's direct estimates (issue 42).

The Fay-Herriot model for m areas: the direct estimate y_d = x_d'beta + v_d + e_d, with
v_d ~ N(0, sigma_v^2) and e_d ~ N(0, psi_d), psi_d the (known) design variance of y_d. The
EBLUP is x_d'beta_hat + gamma_d (y_d - x_d'beta_hat), gamma_d = sigma_v^2 / (sigma_v^2 + psi_d).
sigma_v^2 is fitted by REML (default), ML or the Fay-Herriot moment method with Fisher scoring,
exactly as R ``sae`` 1.3's ``eblupFH`` (start at median(psi), stop when the relative change is
below ``precision``, then truncate at 0), so its numbers equal sae's also at sae's loose
default ``precision=1e-4``. The MSE is sae's ``mseFH``: the Prasad-Rao estimator
g1 + g2 + 2 g3 for REML (Datta-Lahiri's bias term added for ML and FH).

R survey 4.5's ``svysmoothArea`` calls SUMMER's ``smoothArea``, a Bayesian version of the same
model fitted with INLA (PC priors, posterior medians and variances from 250 posterior draws);
INLA is not on CRAN and cannot be built here, so our ``svysmoothArea`` computes SUMMER's direct
estimates (``svyby(svymean)``, or ``svytotal`` / domain size) exactly and then fits the
frequentist model above (see docs/small_area.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .formulas import formula_matrix

__all__ = ["FayHerriot", "fay_herriot", "eblupFH", "mseFH", "svysmoothArea", "svysmooth_area"]

_METHODS = ("REML", "ML", "FH")


@dataclass
class FayHerriot:
    """A fitted Fay-Herriot model (fields as sae's ``eblupFH``/``mseFH`` results).

    ``eblup``, ``mse``, ``g1``, ``g2``, ``g3`` are per area (the rows of the input);
    ``refvar`` is sigma_v^2; ``vcov_beta`` is (X'V^-1X)^-1; ``coef`` has ``beta``, ``std_error``, ``tvalue``, ``pvalue`` per
    column of the design matrix; ``goodness`` has ``loglike``, ``AIC``, ``BIC``, ``KIC``.
    """

    eblup: np.ndarray
    mse: np.ndarray
    refvar: float
    coef: pd.DataFrame
    goodness: dict[str, float]
    method: str
    iterations: int
    g1: np.ndarray
    g2: np.ndarray
    g3: np.ndarray
    gamma: np.ndarray
    vcov_beta: np.ndarray
    x_names: list[str] = field(default_factory=list)

    def predict(self, X: Any) -> pd.DataFrame:
        """Synthetic estimates x'beta for areas without a (usable) direct estimate, with their
        MSE sigma_v^2 + x'Var(beta)x (the EBLUP of an area with no data)."""
        Xn = np.atleast_2d(np.asarray(X, dtype=float))
        beta = self.coef["beta"].to_numpy()
        Q = self.vcov_beta
        est = Xn @ beta
        mse = self.refvar + np.einsum("ij,jk,ik->i", Xn, Q, Xn)
        return pd.DataFrame({"estimate": est, "mse": mse})


def _as_float(x: Any, what: str, m: int | None = None) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    bad = ~np.isfinite(a)
    if bad.any():
        raise ValueError(
            f"fay_herriot: {what} has missing or infinite values at rows "
            f"{np.flatnonzero(bad)[:5].tolist()}; drop those areas or fill them."
        )
    if m is not None and a.size != m:
        raise ValueError(f"fay_herriot: {what} has {a.size} values but there are {m} areas.")
    return a


def fay_herriot(
    y: Any,
    vardir: Any,
    X: Any = None,
    method: str = "REML",
    maxiter: int = 100,
    precision: float = 1e-4,
) -> FayHerriot:
    """Fit the Fay-Herriot area-level model and its MSE (R ``sae::eblupFH`` + ``mseFH``).

    ``y``: direct estimates (one per area); ``vardir``: their sampling variances psi_d;
    ``X``: the area-level design matrix (array or DataFrame, intercept included; None means an
    intercept only). ``method``: ``"REML"`` (default, Prasad-Rao MSE), ``"ML"`` or ``"FH"``
    (moment estimator; MSEs with the Datta-Lahiri bias term, as sae). ``maxiter`` and
    ``precision`` are sae's ``MAXITER`` and ``PRECISION`` (relative change of sigma_v^2); the
    iteration not converging is an error (sae returns NA with a warning).
    """
    if method not in _METHODS:
        raise ValueError(f"fay_herriot: method={method!r} must be one of {_METHODS}.")
    yv = _as_float(y, "y")
    m = yv.size
    psi = _as_float(vardir, "vardir", m)
    if (psi <= 0).any():
        raise ValueError(
            f"fay_herriot: vardir must be positive; rows {np.flatnonzero(psi <= 0)[:5].tolist()} "
            "are not (drop areas whose direct estimate has no variance, as svysmoothArea's "
            "var_tol does)."
        )
    if X is None:
        Xm = np.ones((m, 1))
        names = ["(Intercept)"]
    else:
        names = list(map(str, X.columns)) if isinstance(X, pd.DataFrame) else []
        Xm = np.asarray(X, dtype=float)
        if Xm.ndim == 1:
            Xm = Xm[:, None]
        if Xm.shape[0] != m:
            raise ValueError(f"fay_herriot: X has {Xm.shape[0]} rows but there are {m} areas.")
        if not np.isfinite(Xm).all():
            raise ValueError("fay_herriot: X has missing or infinite values.")
        if not names:
            names = [f"x{j + 1}" for j in range(Xm.shape[1])]
    p = Xm.shape[1]
    if m <= p:
        raise ValueError(f"fay_herriot: {m} areas cannot fit {p} coefficients plus sigma_v^2.")

    A = float(np.median(psi))
    k = 0
    diff = precision + 1.0
    F = np.nan
    while diff > precision and k < maxiter:
        k += 1
        Vi = 1.0 / (A + psi)
        XtVi = (Vi[:, None] * Xm).T
        Q = np.linalg.inv(XtVi @ Xm)
        if method == "FH":
            b = Q @ XtVi @ yv
            res = yv - Xm @ b
            s = np.sum(res**2 * Vi) - (m - p)
            F = np.sum(Vi)
        else:
            P = np.diag(Vi) - XtVi.T @ Q @ XtVi
            Py = P @ yv
            if method == "REML":
                s = -0.5 * np.trace(P) + 0.5 * Py @ Py
                F = 0.5 * np.sum(P * P.T)
            else:
                s = -0.5 * np.sum(Vi) + 0.5 * Py @ Py
                F = 0.5 * np.sum(Vi**2)
        A_new = A + s / F
        diff = abs((A_new - A) / A)
        A = A_new
    if k >= maxiter and diff >= precision:
        raise ValueError(
            f"fay_herriot: the {method} Fisher scoring did not converge in {maxiter} iterations "
            f"(relative change {diff:.3g}); raise maxiter or try method='FH'."
        )
    A = max(A, 0.0)
    Vi = 1.0 / (A + psi)
    XtVi = (Vi[:, None] * Xm).T
    Q = np.linalg.inv(XtVi @ Xm)
    beta = Q @ XtVi @ yv
    se = np.sqrt(np.diag(Q))
    from scipy.stats import norm

    tval = beta / se
    pval = 2 * norm.sf(np.abs(tval))
    xb = Xm @ beta
    resid = yv - xb
    loglike = -0.5 * np.sum(np.log(2 * np.pi * (A + psi)) + resid**2 / (A + psi))
    goodness = {"loglike": float(loglike), "AIC": float(-2 * loglike + 2 * (p + 1)),
                "BIC": float(-2 * loglike + (p + 1) * np.log(m)),
                "KIC": float(-2 * loglike + 3 * (p + 1))}
    eblup = xb + A * Vi * resid

    # MSE (sae::mseFH)
    Bd = psi / (A + psi)
    sum_ad2 = np.sum(Vi**2)
    g1 = psi * (1 - Bd)
    g2 = Bd**2 * np.einsum("ij,jk,ik->i", Xm, Q, Xm)
    if method == "FH":
        sum_ad = np.sum(Vi)
        var_a = 2 * m / sum_ad**2
        bias = 2 * (m * sum_ad2 - sum_ad**2) / sum_ad**3
    else:
        var_a = 2 / sum_ad2
        bias = (-np.trace(Q @ ((Vi**2)[:, None] * Xm).T @ Xm) / sum_ad2) if method == "ML" else 0.0
    g3 = Bd**2 * var_a / (A + psi)
    mse = g1 + g2 + 2 * g3 - bias * Bd**2
    coef = pd.DataFrame({"beta": beta, "std_error": se, "tvalue": tval, "pvalue": pval},
                        index=names)
    out = FayHerriot(eblup=eblup, mse=mse, refvar=A, coef=coef, goodness=goodness,
                     method=method, iterations=k, g1=g1, g2=g2, g3=g3, gamma=A * Vi,
                     vcov_beta=Q, x_names=names)
    return out


def eblupFH(y: Any, vardir: Any, X: Any = None, method: str = "REML", maxiter: int = 100,
            precision: float = 1e-4) -> FayHerriot:
    """R ``sae::eblupFH`` (and ``mseFH``: the result has ``mse``); see :func:`fay_herriot`."""
    return fay_herriot(y, vardir, X, method=method, maxiter=maxiter, precision=precision)


mseFH = eblupFH


def _direct_estimates(y: str, domain: str, design: Any, domain_size: Any) -> pd.DataFrame:
    """SUMMER's direct estimates: ``svyby(~y, ~domain, design, svymean)`` with variance se^2,
    or with ``domain_size`` the domain total over the size and variance (se / size)^2."""
    if domain_size is None:
        r = design.mean(y, by=domain)
        est, se = r["estimate"].to_numpy(float), r["se"].to_numpy(float)
    else:
        r = design.total(y, by=domain)
        size = pd.Series(domain_size) if not isinstance(domain_size, pd.Series) else domain_size
        missing = [lab for lab in r[domain] if lab not in size.index]
        if missing:
            raise ValueError(
                f"svysmoothArea: domain_size has no size for domains {missing[:5]}; give a "
                "size (population count) for every sampled domain."
            )
        s = size.reindex(r[domain]).to_numpy(float)
        est, se = r["estimate"].to_numpy(float) / s, r["se"].to_numpy(float) / s
    return pd.DataFrame({"domain": r[domain].to_numpy(), "direct": est, "direct_var": se**2})


def svysmoothArea(
    formula: str,
    domain: str,
    design: Any = None,
    X_domain: pd.DataFrame | None = None,
    direct_est: pd.DataFrame | None = None,
    domain_size: Any = None,
    method: str = "REML",
    level: float = 0.95,
    var_tol: float = 1e-10,
    maxiter: int = 100,
    precision: float = 1e-4,
) -> pd.DataFrame:
    """Fay-Herriot small-area estimates from a design's direct estimates (R survey 4.5's
    ``svysmoothArea`` inputs, frequentist fit: see the module docstring and docs/small_area.md).

    ``formula``: ``"y ~ 1"`` or ``"y ~ x1 + x2"``, the right-hand side read from ``X_domain``
    (one row per area, a column named ``domain``). ``design``: a ``SurveyDesign`` or
    ``ReplicateDesign`` (calibrated or not); or ``direct_est``, a DataFrame with columns
    domain, estimate, variance (SUMMER's order). ``domain_size``: mapping domain -> population
    size (direct estimate = total / size). Areas whose direct variance is <= ``var_tol`` (one
    sampled unit, say) are left out of the fit, as SUMMER does, and get the synthetic estimate
    x'beta with MSE sigma_v^2 + x'Var(beta)x, as do areas in ``X_domain`` not in the sample.

    Returns one row per area: ``domain``, ``direct``, ``direct_var``, ``estimate`` (EBLUP),
    ``mse``, ``se`` (sqrt mse), ``ci_low``, ``ci_high`` (normal, ``level``), ``gamma``
    (shrinkage weight; NaN for synthetic estimates), ``in_model``; ``attrs["fit"]`` holds the
    :class:`FayHerriot` fit.
    """
    if "~" not in formula:
        raise ValueError(f"svysmoothArea: formula {formula!r} needs a response: 'y ~ 1'.")
    lhs, rhs = (t.strip() for t in formula.split("~", 1))
    if direct_est is None:
        if design is None:
            raise ValueError("svysmoothArea: give a design or direct_est.")
        direct = _direct_estimates(lhs, domain, design, domain_size)
    else:
        if direct_est.shape[1] < 3:
            raise ValueError("svysmoothArea: direct_est needs columns domain, estimate, variance.")
        direct = pd.DataFrame({"domain": direct_est.iloc[:, 0].to_numpy(),
                               "direct": direct_est.iloc[:, 1].to_numpy(float),
                               "direct_var": direct_est.iloc[:, 2].to_numpy(float)})
    if X_domain is not None:
        if domain not in X_domain.columns:
            raise ValueError(
                f"svysmoothArea: X_domain has no column {domain!r}; add the domain labels.")
        extra = sorted(set(direct["domain"]) - set(X_domain[domain]), key=str)
        if extra:
            raise ValueError(f"svysmoothArea: X_domain has no row for domains {extra[:5]}.")
        areas = X_domain.rename(columns={domain: "domain"})
        tab = areas.merge(direct, on="domain", how="left")
    else:
        tab = direct.copy()
    tab = tab.sort_values("domain", kind="stable").reset_index(drop=True)
    in_model = tab["direct_var"].to_numpy(float) > var_tol  # NaN -> False
    Xall = np.asarray(formula_matrix(rhs, tab, "svysmoothArea", na_action="raise"),
                      dtype=float)
    Xdf = formula_matrix(rhs, tab.iloc[:1], "svysmoothArea")
    names = list(map(str, Xdf.columns))
    fit = fay_herriot(tab.loc[in_model, "direct"], tab.loc[in_model, "direct_var"],
                      pd.DataFrame(Xall[in_model], columns=names), method=method,
                      maxiter=maxiter, precision=precision)
    est = np.empty(len(tab))
    mse = np.empty(len(tab))
    gamma = np.full(len(tab), np.nan)
    est[in_model], mse[in_model], gamma[in_model] = fit.eblup, fit.mse, fit.gamma
    if (~in_model).any():
        syn = fit.predict(Xall[~in_model])
        est[~in_model], mse[~in_model] = syn["estimate"], syn["mse"]
    from scipy.stats import norm

    z = norm.ppf(1 - (1 - level) / 2)
    se = np.sqrt(mse)
    out = pd.DataFrame({"domain": tab["domain"], "direct": tab["direct"],
                        "direct_var": tab["direct_var"], "estimate": est, "mse": mse, "se": se,
                        "ci_low": est - z * se, "ci_high": est + z * se, "gamma": gamma,
                        "in_model": in_model})
    out = out.rename(columns={"domain": domain})
    out.attrs["fit"] = fit
    return out


svysmooth_area = svysmoothArea
