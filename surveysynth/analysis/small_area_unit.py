"""Unit-level small-area estimation: the Battese-Harter-Fuller nested-error model (R
``sae::eblupBHF``) with the Prasad-Rao-Datta MSE, and ``svysmoothUnit`` (issue 42).

The model for unit j of domain d: y_dj = x_dj'beta + v_d + e_dj, v_d ~ N(0, sigma_v^2),
e_dj ~ N(0, sigma_e^2). The variance components are fitted by REML (default) or ML: the
log-likelihood profiled over beta and sigma_e^2 is maximised in the ratio
lambda = sigma_v^2 / sigma_e^2 by solving its analytic score equation with Brent's method to
machine precision (sigma_v^2 = 0 when the score at 0 is not positive). R sae 1.3's ``eblupBHF``
fits the same model with ``lme4::lmer``, whose optimizer stops at xtol_abs = 1e-8 on
theta = sqrt(lambda); given sae's variance components our EBLUPs equal sae's to 1e-8, and the
components themselves equal sae's to lmer's tolerance (see docs/small_area.md).

The EBLUP of the mean mu_d = Xbar_d'beta + v_d (Xbar_d the population mean of the covariates) is
gamma_d ybar_d + (Xbar_d - gamma_d xbar_d)'beta_hat, gamma_d = sigma_v^2 / (sigma_v^2 +
sigma_e^2 / n_d); with population sizes N_d it is sae's EBLUP of the finite-population mean,
f_d ybar_d + (Xbar_d - f_d xbar_d)'beta_hat + (1 - f_d) v_d_hat, f_d = n_d / N_d. The MSE is the
second-order Prasad-Rao-Datta estimator g1 + g2 + 2 g3 (REML; ML subtracts Datta-Lahiri's bias
term), Rao & Molina (2015), section 7.2. ``weights=`` gives You and Rao's survey-weighted
pseudo-EBLUP (Rao & Molina 2015, section 7.6.2), design-consistent, with the variance components
of the unweighted fit (no MSE is given for it).

R survey 4.5's ``svysmoothUnit`` calls SUMMER's ``smoothUnit``, a Bayesian fit of the same model
with INLA (not on CRAN, cannot be built here); our :func:`svysmoothUnit` keeps its inputs (the
design's data, unit-level population covariates ``X_pop``, SUMMER's direct estimates) and fits
the frequentist model above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from .formulas import formula_columns, formula_matrix

__all__ = ["BatteseHarterFuller", "battese_harter_fuller", "eblupBHF", "svysmoothUnit",
           "svysmooth_unit"]

_METHODS = ("REML", "ML")


@dataclass
class BatteseHarterFuller:
    """A fitted Battese-Harter-Fuller model and its small-area estimates.

    ``estimates``: one row per target domain: ``domain``, ``n`` (sample size), ``estimate``
    (EBLUP; the synthetic Xbar'beta_hat where n = 0), ``mse`` (Prasad-Rao-Datta; NaN for the
    pseudo-EBLUP), ``gamma`` (shrinkage weight, NaN where n = 0), ``g1``, ``g2``, ``g3``.
    ``refvar`` is sigma_v^2, ``errorvar`` sigma_e^2 (sae's names), ``ratio`` their ratio;
    ``coef`` has ``beta`` and ``std_error`` per model-matrix column; ``random`` the predicted
    domain effects v_d of the sampled domains; ``vcov_sigma`` the asymptotic covariance of
    (sigma_v^2, sigma_e^2) used by g3.
    """

    estimates: pd.DataFrame
    refvar: float
    errorvar: float
    ratio: float
    coef: pd.DataFrame
    random: pd.Series
    loglike: float
    method: str
    vcov_beta: np.ndarray
    vcov_sigma: np.ndarray
    pseudo: bool = False
    x_names: list[str] = field(default_factory=list)

    @property
    def eblup(self) -> np.ndarray:
        """The estimates as an array (target-domain order)."""
        return self.estimates["estimate"].to_numpy(float)

    @property
    def mse(self) -> np.ndarray:
        """The MSEs as an array (target-domain order)."""
        return self.estimates["mse"].to_numpy(float)


def _err(what: str, msg: str) -> ValueError:
    return ValueError(f"{what}: {msg}")


def _bad_rows(mask: np.ndarray) -> list[int]:
    return np.flatnonzero(mask)[:5].tolist()


def _first(labels: Any) -> list[Any]:
    """The first five labels as plain Python values (for error messages)."""
    return [v.item() if isinstance(v, np.generic) else v for v in list(labels)[:5]]


class _Nested:
    """Domain sums of the sample for the nested-error model; H = V / sigma_e^2 = I + lam ZZ'."""

    def __init__(self, y: np.ndarray, X: np.ndarray, codes: np.ndarray, m: int, method: str):
        self.y, self.X, self.codes, self.method = y, X, codes, method
        self.n, self.p = X.shape
        self.nd = np.bincount(codes, minlength=m).astype(float)
        self.Sx = np.zeros((m, self.p))
        np.add.at(self.Sx, codes, X)
        self.Sy = np.bincount(codes, weights=y, minlength=m)
        self.XtX, self.Xty = X.T @ X, X.T @ y
        self.dfe = self.n - self.p if method == "REML" else self.n

    def parts(self, lam: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        g = lam / (1.0 + lam * self.nd)                     # H_d^-1 = I - g_d J
        M = self.XtX - self.Sx.T @ (g[:, None] * self.Sx)   # X'H^-1X
        beta = np.linalg.solve(M, self.Xty - self.Sx.T @ (g * self.Sy))
        r = self.y - self.X @ beta
        Sr = np.bincount(self.codes, weights=r, minlength=self.nd.size)
        rHr = float(r @ r - np.sum(g * Sr**2))
        return M, beta, Sr, rHr

    def loglike(self, lam: float) -> float:
        M, _, _, rHr = self.parts(lam)
        ld = np.sum(np.log1p(lam * self.nd))
        val = self.dfe * (1.0 + np.log(2 * np.pi * rHr / self.dfe)) + ld
        if self.method == "REML":
            val += np.linalg.slogdet(M)[1]
        return float(-0.5 * val)

    def score(self, lam: float) -> float:
        """d loglike / d lam: (dfe |Z'Py|^2 / y'Py - tr(Z'PZ)) / 2 (P with H^-1 for ML)."""
        M, _, Sr, rHr = self.parts(lam)
        a = 1.0 / (1.0 + lam * self.nd)
        tr = np.sum(self.nd * a)
        if self.method == "REML":
            tr -= np.trace(np.linalg.solve(M, self.Sx.T @ ((a**2)[:, None] * self.Sx)))
        return float(0.5 * (self.dfe * np.sum((a * Sr) ** 2) / rHr - tr))

    def solve_ratio(self, what: str) -> float:
        if self.score(0.0) <= 0:
            return 0.0  # the maximum is on the boundary sigma_v^2 = 0
        up = 1.0
        while self.score(up) > 0:
            up *= 10.0
            if up > 1e15:
                raise _err(what, "the variance ratio sigma_v^2 / sigma_e^2 diverges (the "
                           "domain effects explain the response exactly); check the data.")
        return float(brentq(self.score, 0.0, up, xtol=1e-300, rtol=4 * np.finfo(float).eps,
                            maxiter=500))


def _fit(nest: _Nested, sigma2: tuple[float, float] | None, what: str) -> dict[str, Any]:
    if sigma2 is None:
        lam = nest.solve_ratio(what)
        M, beta, _, rHr = nest.parts(lam)
        se2 = rHr / nest.dfe
        sv2 = lam * se2
    else:
        sv2, se2 = (float(s) for s in sigma2)
        if not (np.isfinite(sv2) and np.isfinite(se2) and sv2 >= 0 and se2 > 0):
            raise _err(what, f"sigma2={sigma2!r} must be (sigma_v^2 >= 0, sigma_e^2 > 0).")
        lam = sv2 / se2
        M, beta, _, _ = nest.parts(lam)
    nd = nest.nd
    Q = np.linalg.inv(M) * se2
    with np.errstate(invalid="ignore", divide="ignore"):
        xbar = nest.Sx / nd[:, None]
        ybar = nest.Sy / nd
        gam = sv2 / (sv2 + se2 / nd)
    u = gam * (ybar - xbar @ beta)
    # asymptotic covariance of (sigma_v^2, sigma_e^2): inverse Fisher information
    # (Rao & Molina 2015, section 7.2), alpha_d = sigma_e^2 + n_d sigma_v^2
    s = nd > 0
    al = se2 + nd[s] * sv2
    Iv = 0.5 * np.sum(nd[s] ** 2 / al**2)
    Ive = 0.5 * np.sum(nd[s] / al**2)
    Ie = 0.5 * np.sum((nd[s] - 1) / se2**2 + 1 / al**2)
    Vs = np.linalg.inv(np.array([[Iv, Ive], [Ive, Ie]]))
    g1 = np.full(nd.size, np.nan)
    g3 = np.full(nd.size, np.nan)
    dg1 = np.full((nd.size, 2), np.nan)
    g1[s] = gam[s] * se2 / nd[s]
    g3[s] = (se2**2 * Vs[0, 0] - 2 * se2 * sv2 * Vs[0, 1] + sv2**2 * Vs[1, 1]) / (
        nd[s] ** 2 * (sv2 + se2 / nd[s]) ** 3)
    dg1[s, 0] = se2**2 / al**2
    dg1[s, 1] = nd[s] * sv2**2 / al**2
    bias = np.zeros(2)
    if nest.method == "ML":  # ML bias of (sigma_v^2, sigma_e^2) for Datta-Lahiri's term
        a = 1.0 / al
        Mv = nest.Sx[s].T @ ((a**2)[:, None] * nest.Sx[s])
        cd = sv2 * (2 * se2 + nd[s] * sv2) / al**2
        Me = (nest.XtX - nest.Sx[s].T @ (cd[:, None] * nest.Sx[s])) / se2**2
        bias = 0.5 * Vs @ np.array([-np.trace(Q @ Mv), -np.trace(Q @ Me)])
    return {"lam": lam, "sv2": sv2, "se2": se2, "beta": beta, "Q": Q, "xbar": xbar,
            "ybar": ybar, "gamma": gam, "u": u, "g1": g1, "g3": g3, "dg1": dg1, "bias": bias,
            "Vs": Vs, "loglike": nest.loglike(lam)}


def _predict(fit: dict[str, Any], nd: np.ndarray, Xbar: np.ndarray,
             N: np.ndarray | None) -> dict[str, np.ndarray]:
    """EBLUPs and Prasad-Rao-Datta MSEs for target domains (rows of Xbar; nd their sample
    sizes, N their population sizes or None for mu_d)."""
    beta, Q, se2, sv2 = fit["beta"], fit["Q"], fit["se2"], fit["sv2"]
    est = Xbar @ beta
    mse = sv2 + np.einsum("ij,jk,ik->i", Xbar, Q, Xbar)
    if N is not None:
        mse = mse + se2 / N
    g2 = np.full(nd.size, np.nan)
    s = nd > 0
    if s.any():
        xb, gam, n_s = fit["xbar_t"][s], fit["gamma_t"][s], nd[s]
        if N is None:
            fr = np.zeros(n_s.size)
            xr = Xbar[s]
        else:
            fr = n_s / N[s]
            with np.errstate(invalid="ignore", divide="ignore"):
                xr = (Xbar[s] - fr[:, None] * xb) / (1 - fr)[:, None]
            xr[fr == 1] = 0.0
        est[s] = fr * fit["ybar_t"][s] + (1 - fr) * (xr @ beta + fit["u_t"][s])
        dd = xr - gam[:, None] * xb
        g2[s] = np.einsum("ij,jk,ik->i", dd, Q, dd)
        pr = (fit["g1_t"][s] + g2[s] + 2 * fit["g3_t"][s] - fit["dg1_t"][s] @ fit["bias"])
        extra = np.zeros(n_s.size)
        if N is not None:
            rest = N[s] - n_s
            with np.errstate(divide="ignore"):
                extra = np.where(rest > 0, (se2 - fit["bias"][1]) / rest, 0.0)
        mse[s] = (1 - fr) ** 2 * (pr + extra)
    return {"estimate": est, "mse": mse, "g2": g2}


def _pseudo(nest: _Nested, fit: dict[str, Any], w: np.ndarray, k: np.ndarray,
            Xbar: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """You-Rao pseudo-EBLUP gamma_dw ybar_dw + (Xbar_d - gamma_dw xbar_dw)'beta_w."""
    m = nest.nd.size
    sw = np.bincount(nest.codes, weights=w, minlength=m)
    sw2 = np.bincount(nest.codes, weights=w**2, minlength=m)
    s_all = sw > 0
    delta2 = np.where(s_all, sw2 / np.where(s_all, sw, 1) ** 2, np.nan)
    gw = fit["sv2"] / (fit["sv2"] + fit["se2"] * delta2)
    xw = np.zeros((m, nest.p))
    np.add.at(xw, nest.codes, w[:, None] * nest.X)
    with np.errstate(invalid="ignore", divide="ignore"):
        xw /= sw[:, None]
        yw = np.bincount(nest.codes, weights=w * nest.y, minlength=m) / sw
    Z = w[:, None] * (nest.X - gw[nest.codes][:, None] * xw[nest.codes])
    bw = np.linalg.solve(Z.T @ nest.X, Z.T @ nest.y)
    est = Xbar @ bw
    s = k >= 0
    kk = k[s]
    est[s] = gw[kk] * yw[kk] + np.einsum("ij,j->i", Xbar[s] - gw[kk][:, None] * xw[kk], bw)
    gam = np.full(k.size, np.nan)
    gam[s] = gw[kk]
    return est, bw, gam


def _mean_frame(pop_means: pd.DataFrame, domain: str, names: list[str], what: str,
                targets: np.ndarray) -> np.ndarray:
    """Rows of the population means (model-matrix columns, intercept 1) for the targets."""
    if domain not in pop_means.columns:
        raise _err(what, f"pop_means has no column {domain!r}; add the domain labels.")
    need = [c for c in names if c != "Intercept" and c != "(Intercept)"]
    missing = [c for c in need if c not in pop_means.columns]
    if missing:
        raise _err(what, f"pop_means has no column(s) {missing} (population means of the "
                   f"model-matrix columns {need}); name its columns after them.")
    pm = pop_means.drop_duplicates(subset=domain)
    if len(pm) != len(pop_means):
        raise _err(what, f"pop_means has more than one row for domains "
                   f"{_first(pop_means.loc[pop_means[domain].duplicated(), domain])}.")
    pm = pm.set_index(domain)
    absent = [t for t in targets if t not in pm.index]
    if absent:
        raise _err(what, f"pop_means has no row for domains {_first(absent)}.")
    out = np.ones((len(targets), len(names)))
    for j, c in enumerate(names):
        if c in need:
            col = pd.to_numeric(pm.loc[list(targets), c], errors="coerce").to_numpy(float)
            bad = ~np.isfinite(col)
            if bad.any():
                raise _err(what, f"pop_means column {c!r} has missing or non-numeric values "
                           f"for domains {_first(np.asarray(targets)[bad])}; fill them.")
            out[:, j] = col
    return out


def _sample_arrays(formula: str, data: pd.DataFrame, domain: str, weights: str | None,
                   what: str) -> tuple[Any, ...]:
    """Response, model matrix, its column names, sorted domain labels, row codes and weights
    of the unit-level sample; bad input is an error naming the column and rows."""
    if "~" not in formula:
        raise _err(what, f"formula {formula!r} needs a response: 'y ~ x'.")
    lhs, rhs = (t.strip() for t in formula.split("~", 1))
    for col, role in ((lhs, "response"), (domain, "domain")) + (
            ((weights, "weights"),) if weights else ()):
        if col not in data.columns:
            raise _err(what, f"data has no column {col!r} (the {role}); columns: "
                       f"{list(map(str, data.columns))[:12]}.")
    y = pd.to_numeric(data[lhs], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(y)
    if bad.any():
        raise _err(what, f"response column {lhs!r} has missing or non-numeric values at rows "
                   f"{_bad_rows(bad)}; drop those units.")
    dom = data[domain].to_numpy()
    bad = pd.isna(data[domain]).to_numpy()
    if bad.any():
        raise _err(what, f"domain column {domain!r} is missing at rows {_bad_rows(bad)}; "
                   "drop those units or give them a domain.")
    for c in formula_columns(rhs, data.columns):
        badc = data[c].isna().to_numpy()
        if badc.any():
            raise _err(what, f"covariate column {c!r} has missing values at rows "
                       f"{_bad_rows(badc)}; drop or impute those units.")
    Xdf = formula_matrix(rhs, data, what)
    X = np.asarray(Xdf, dtype=float)
    names = list(map(str, Xdf.columns))
    p = X.shape[1]
    labels = np.array(sorted(pd.unique(dom), key=lambda v: (str(type(v)), v)), dtype=object)
    codes = pd.Index(labels).get_indexer(dom)
    if labels.size <= p:
        raise _err(what, f"{labels.size} sampled domains cannot fit {p} coefficients and "
                   "sigma_v^2.")
    if np.linalg.matrix_rank(X) < p:
        raise _err(what, f"the model matrix of {rhs!r} is rank-deficient (columns {names}); "
                   "drop collinear terms.")
    w = None
    if weights is not None:
        w = pd.to_numeric(data[weights], errors="coerce").to_numpy(float)
        badw = ~(np.isfinite(w) & (w > 0))
        if badw.any():
            raise _err(what, f"weights column {weights!r} is missing or not positive at rows "
                       f"{_bad_rows(badw)}.")
    return y, X, names, labels, codes, w


def _sizes(pop_sizes: Any, targets: np.ndarray, nd_t: np.ndarray, what: str) -> Any:
    """Population sizes N_d of the targets (None without ``pop_sizes``)."""
    if pop_sizes is None:
        return None
    size = pop_sizes if isinstance(pop_sizes, pd.Series) else pd.Series(dict(pop_sizes))
    absent = [t for t in targets if t not in size.index]
    if absent:
        raise _err(what, f"pop_sizes has no size for domains {_first(absent)}.")
    N = pd.to_numeric(size.reindex(targets), errors="coerce").to_numpy(float)
    small = ~(N >= np.maximum(nd_t, 1))
    if small.any():
        raise _err(what, f"pop_sizes is missing or below the sample size for domains "
                   f"{_first(targets[small])}; give each domain's population count.")
    return N


def battese_harter_fuller(
    formula: str,
    data: pd.DataFrame,
    domain: str,
    pop_means: pd.DataFrame,
    pop_sizes: Mapping[Any, float] | pd.Series | None = None,
    method: str = "REML",
    weights: str | None = None,
    sigma2: tuple[float, float] | None = None,
    domains: Any = None,
) -> BatteseHarterFuller:
    """Fit the Battese-Harter-Fuller unit-level model and give EBLUPs with their MSEs.

    ``formula``: ``"y ~ x1 + x2"`` on the unit-level sample ``data`` (one row per sampled unit);
    ``domain``: the column of domain labels. ``pop_means``: one row per domain, a column
    ``domain`` and the population mean of every model-matrix column except the intercept,
    named as the model matrix names them (``x1``, ``x2``; for a factor its indicator columns).
    ``pop_sizes``: mapping domain -> population size N_d: then the target is the finite
    population mean (sae's ``eblupBHF``, with fpc); None (default) estimates
    mu_d = Xbar_d'beta + v_d (SUMMER's target, Rao & Molina's EBLUP). ``method``: ``"REML"``
    (default) or ``"ML"``. ``weights``: a column of survey weights: You and Rao's
    pseudo-EBLUP (MSE not given: NaN). ``sigma2``: fixed ``(sigma_v^2, sigma_e^2)`` instead of
    fitting them (e.g. sae's, to reproduce its EBLUPs). ``domains``: the target domains, in
    output order (default: the rows of ``pop_means``); unsampled ones get the synthetic
    estimate Xbar'beta_hat with MSE sigma_v^2 (+ sigma_e^2 / N_d) + Xbar'Var(beta_hat)Xbar.
    """
    what = "battese_harter_fuller"
    if method not in _METHODS:
        raise _err(what, f"method={method!r} must be one of {_METHODS}.")
    y, X, names, labels, codes, w = _sample_arrays(formula, data, domain, weights, what)
    m = labels.size
    nest = _Nested(y, X, codes, m, method)
    fit = _fit(nest, sigma2, what)

    targets = (pop_means[domain].to_numpy() if domains is None
               else np.asarray(list(domains) if not np.isscalar(domains) else [domains],
                               dtype=object))
    Xbar = _mean_frame(pop_means, domain, names, what, targets)
    k = pd.Index(labels).get_indexer(targets)
    nd_t = np.where(k >= 0, nest.nd[np.maximum(k, 0)], 0.0)
    for key in ("xbar", "ybar", "gamma", "u", "g1", "g3", "dg1"):
        arr = fit[key][np.maximum(k, 0)].copy()
        arr[k < 0] = np.nan
        fit[key + "_t"] = arr
    N = _sizes(pop_sizes, targets, nd_t, what)
    pred = _predict(fit, nd_t, Xbar, N)
    gamma = fit["gamma_t"]
    if w is not None:
        if N is not None:
            raise _err(what, "weights= (the pseudo-EBLUP of mu_d) cannot be combined with "
                       "pop_sizes=; drop one.")
        est, bw, gamma = _pseudo(nest, fit, w, k, Xbar)
        pred = {"estimate": est, "mse": np.full(est.size, np.nan), "g2": np.full(est.size,
                                                                               np.nan)}
        beta_out = bw
    else:
        beta_out = fit["beta"]
    est_tab = pd.DataFrame({"domain": targets, "n": nd_t.astype(int),
                            "estimate": pred["estimate"], "mse": pred["mse"], "gamma": gamma,
                            "g1": fit["g1_t"], "g2": pred["g2"], "g3": fit["g3_t"]})
    coef = pd.DataFrame({"beta": beta_out, "std_error": np.sqrt(np.diag(fit["Q"]))},
                        index=names)
    if weights is not None:
        coef["std_error"] = np.nan
    return BatteseHarterFuller(
        estimates=est_tab, refvar=float(fit["sv2"]), errorvar=float(fit["se2"]),
        ratio=float(fit["lam"]), coef=coef, random=pd.Series(fit["u"], index=labels),
        loglike=float(fit["loglike"]), method=method, vcov_beta=fit["Q"],
        vcov_sigma=fit["Vs"], pseudo=weights is not None, x_names=names)


def eblupBHF(
    formula: str,
    dom: str,
    meanxpop: pd.DataFrame,
    popnsize: pd.DataFrame,
    method: str = "REML",
    data: pd.DataFrame | None = None,
    selectdom: Any = None,
) -> BatteseHarterFuller:
    """R ``sae::eblupBHF`` with sae's arguments: ``meanxpop`` has the domain code in its first
    column and the population means of the model-matrix columns (intercept excluded) in the
    following columns, in model-matrix order; ``popnsize`` the domain code and N_d. The targets
    are ``selectdom`` (default: the sampled domains in order of appearance, as sae). See
    :func:`battese_harter_fuller` (this is it with ``pop_sizes``), and docs/small_area.md."""
    if data is None:
        raise _err("eblupBHF", "give data= (the unit-level sample).")
    lhs, rhs = (t.strip() for t in formula.split("~", 1)) if "~" in formula else ("", "")
    if not lhs:
        raise _err("eblupBHF", f"formula {formula!r} needs a response: 'y ~ x'.")
    names = [c for c in map(str, formula_matrix(rhs, data, "eblupBHF").columns)
             if c not in ("Intercept", "(Intercept)")]
    if meanxpop.shape[1] != len(names) + 1:
        raise _err("eblupBHF", f"meanxpop has {meanxpop.shape[1]} columns; it needs the domain "
                   f"code and one mean per model-matrix column {names}.")
    pm = pd.DataFrame(meanxpop.iloc[:, 1:].to_numpy(), columns=names)
    pm.insert(0, dom, meanxpop.iloc[:, 0].to_numpy())
    sizes = pd.Series(popnsize.iloc[:, 1].to_numpy(float), index=popnsize.iloc[:, 0].to_numpy())
    if selectdom is None:
        selectdom = pd.unique(data[dom]) if dom in data.columns else None
    return battese_harter_fuller(formula, data, dom, pm, pop_sizes=sizes, method=method,
                                 domains=selectdom)


def svysmoothUnit(
    formula: str,
    domain: str,
    design: Any,
    X_pop: pd.DataFrame,
    X_pop_weights: Any = None,
    domain_size: Any = None,
    method: str = "REML",
    pseudo: bool = False,
    level: float = 0.95,
) -> pd.DataFrame:
    """Unit-level small-area estimates (R survey 4.5's ``svysmoothUnit`` inputs, frequentist
    Battese-Harter-Fuller fit: see the module docstring and docs/small_area.md).

    ``design``: a ``SurveyDesign`` or ``ReplicateDesign``; the model is fitted to its rows.
    ``X_pop``: unit-level population covariates (one row per population unit, a column
    ``domain``); the target of each domain is mu_d = Xbar_d'beta + v_d with Xbar_d the mean of
    the model matrix over its rows, or the sum of the rows times ``X_pop_weights`` (one weight
    per row, SUMMER's ``X.pop.weights``). ``domain_size`` only changes the direct estimates
    (SUMMER's: total / size). ``pseudo=True``: You-Rao pseudo-EBLUP with the design's weights
    (no MSE). Returns one row per domain of ``X_pop`` (sorted): ``domain``, ``direct``,
    ``direct_var``, ``n``, ``estimate``, ``mse``, ``se``, ``ci_low``, ``ci_high``, ``gamma``;
    ``attrs["fit"]`` holds the :class:`BatteseHarterFuller` fit.
    """
    from scipy.stats import norm

    from .small_area import _direct_estimates

    what = "svysmoothUnit"
    if "~" not in formula:
        raise _err(what, f"formula {formula!r} needs a response: 'y ~ x'.")
    lhs, rhs = (t.strip() for t in formula.split("~", 1))
    if domain not in X_pop.columns:
        raise _err(what, f"X_pop has no column {domain!r}; add the domain labels.")
    data = design.data
    if domain not in data.columns:
        raise _err(what, f"the design's data has no column {domain!r} (the domain).")
    for c in formula_columns(rhs, X_pop.columns):
        badc = X_pop[c].isna().to_numpy()
        if badc.any():
            raise _err(what, f"X_pop column {c!r} has missing values at rows "
                       f"{_bad_rows(badc)}; drop or impute those units.")
    missing = [c for c in formula_columns(rhs, data.columns) if c not in X_pop.columns]
    if missing:
        raise _err(what, f"X_pop has no column(s) {missing} of the formula {formula!r}.")
    direct = _direct_estimates(lhs, domain, design, domain_size)
    spec = formula_matrix(rhs, data, what).model_spec
    Xp = np.asarray(spec.get_model_matrix(X_pop), dtype=float)
    names = list(map(str, formula_matrix(rhs, data, what).columns))
    pdom = X_pop[domain].to_numpy()
    labels = np.array(sorted(pd.unique(pdom), key=lambda v: (str(type(v)), v)), dtype=object)
    codes = pd.Index(labels).get_indexer(pdom)
    if X_pop_weights is None:
        wp = np.ones(len(X_pop)) / np.bincount(codes)[codes]
    else:
        wp = np.asarray(X_pop_weights, dtype=float).ravel()
        if wp.size != len(X_pop) or not np.isfinite(wp).all():
            raise _err(what, f"X_pop_weights needs one finite weight per row of X_pop "
                       f"({len(X_pop)}); it has {wp.size}.")
    Xbar = np.zeros((labels.size, Xp.shape[1]))
    np.add.at(Xbar, codes, wp[:, None] * Xp)
    unknown = sorted(set(pd.unique(data[domain].dropna())) - set(labels), key=str)
    if unknown:
        raise _err(what, f"X_pop has no units of the sampled domains {_first(unknown)}.")
    pm = pd.DataFrame(Xbar, columns=names)
    pm.insert(0, domain, labels)
    df = data.copy(deep=False)
    wcol = None
    if pseudo:
        wcol = "__svysmoothUnit_weight__"
        df = df.assign(**{wcol: np.asarray(design.weights, dtype=float)})
    fit = battese_harter_fuller(formula, df, domain, pm, method=method, weights=wcol)
    est = fit.estimates
    d = direct.set_index("domain").reindex(labels)
    z = norm.ppf(1 - (1 - level) / 2)
    se = np.sqrt(est["mse"].to_numpy(float))
    out = pd.DataFrame({domain: labels, "direct": d["direct"].to_numpy(float),
                        "direct_var": d["direct_var"].to_numpy(float),
                        "n": est["n"].to_numpy(), "estimate": est["estimate"].to_numpy(float),
                        "mse": est["mse"].to_numpy(float), "se": se,
                        "ci_low": est["estimate"].to_numpy(float) - z * se,
                        "ci_high": est["estimate"].to_numpy(float) + z * se,
                        "gamma": est["gamma"].to_numpy(float)})
    out.attrs["fit"] = fit
    return out


svysmooth_unit = svysmoothUnit
