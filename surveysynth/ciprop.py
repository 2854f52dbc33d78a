"""Confidence intervals for proportions: R ``svyciprop``'s seven methods.

``design.proportion(x, by=..., ci_method=...)`` gives, for the share of every level of ``x`` in
every domain, the interval R's ``svyciprop(~I(x == level), design, method=)`` gives (with
``svyby`` for domains). Read from R survey 4.1's ``svyciprop``, ``svyglm``, ``confint.svyglm``
and ``MASSprofile_glm``; p is the weighted share, v its design variance (``svymean``), t the
t quantile ``qt(1 - alpha/2, df)`` with ``df`` the domain's design df by default (R:
``df = degf(design)`` on the domain subset, counting rows with a missing value):

* ``"mean"``: p -+ t sqrt(v).
* ``"xlogit"``: expit(logit p -+ t sqrt(v) / (p (1 - p))) (delta method on the logit).
* ``"asin"``: sin(asin(sqrt p) -+ t sqrt(v) / (2 sqrt(p (1 - p))))^2.
* ``"beta"`` (Korn and Graubard): effective sample size n* = p (1 - p) / v, times
  (t_{n-1} / t_{degf})^2 with n the domain's rows and degf its design df (R uses these two
  whatever ``df`` is); limits qbeta(alpha/2, n* p, n* (1 - p) + 1) and
  qbeta(1 - alpha/2, n* p + 1, n* (1 - p)).
* ``"wilson"`` (R survey 4.5; absent from 4.1): the Wilson score interval with the effective
  sample size n* = p (1 - p) / v and t on ``df`` (R: ``degf(design)`` of the domain unless
  ``df=`` is given): (p + t^2/(2 n*) -+ t/(2 n*) sqrt(4 n* p (1 - p) + t^2)) / (1 + t^2/n*).
  Tested against stored output of R survey 4.5 (tests/reference/r_survey45/).
* ``"logit"`` (R's default): the design-based logistic regression on an intercept
  (``svyglm(y ~ 1, family=quasibinomial)``), Wald interval on its coefficient, back-transformed.
  Its coefficient is R's ``glm.fit`` iterate, reproduced here step by step (start from
  ``mustart = (W y + 0.5)/(W + 1)``, IRLS until the deviance changes by less than 1e-8
  relatively), so the limits equal R's to rounding rather than to glm's tolerance. Taylor
  designs: variance from the estimating function W (y - mu); replicate designs: the
  logistic fit is redone on each replicate from the full-sample coefficient, as
  ``svyglm.svyrep.design``, and the replicate variance taken of the coefficients (so it
  differs from ``"xlogit"`` there, as in R).
* ``"likelihood"``: the quasi-likelihood profile of that coefficient, Rao-Scott scaled:
  the limits solve (D(b) - D(b_hat)) / phi = lambda t^2 with D the binomial deviance, phi the
  design-weighted variance of the Pearson residuals (``summary.svyglm``'s ``svyvar``, with
  its n/(n-1)) and lambda the design
  variance of b_hat over its model variance. R finds them by profiling at a few points and
  interpolating a spline; here the equation is solved to 1e-14, so R's limits differ from
  these by R's interpolation error (observed below 1e-4 relative; tests allow 2e-3).
  Replicate designs (R survey 4.5): phi is ``summary.svrepglm``'s, sum(w r^2) / sum(w) with
  r the Pearson residuals scaled by the weights over their mean, i.e. 1 for this
  intercept-only fit (times the mean weight of the rows without a missing value over that
  of all the domain's rows, as R's residuals mix the two). R 4.1.1 scaled them by the
  weights over their sum (phi about n) and returned NA; ``survey_version="4.1"`` gives NaN
  limits there, as it did.

Degrees of freedom 0 give NaN limits, as R's ``qt``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from .results import Estimate
from .variance.replicate_weights import replicate_variance

CI_METHODS = ("logit", "likelihood", "asin", "beta", "mean", "xlogit", "wilson")
_EPS = 1e-8  # glm.control()$epsilon
_MAXIT = 25  # glm.control()$maxit


def _binomial_deviance(sy: np.ndarray, s: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """sum W dev.resids(y, mu) for 0/1 y with a constant mu: -2 (Sy log mu + (S-Sy) log(1-mu))."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(sy > 0, sy * np.log(mu), 0.0)
        b = np.where(s - sy > 0, (s - sy) * np.log1p(-mu), 0.0)
    return -2.0 * (a + b)


def _irls_from(beta: np.ndarray, sy: np.ndarray, s: np.ndarray, devold: np.ndarray,
               done: np.ndarray, iters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R's glm.fit IRLS for an intercept-only logistic model once mu is constant over rows:
    beta <- beta + (Sy/S - mu) / (mu (1 - mu)), until |dev - devold| / (|dev| + 0.1) < 1e-8
    (vectorized over independent fits; ``done`` fits are left alone). Returns the final
    coefficients and the ones before the last step (glm's working weights, hence its
    ``cov.unscaled``, are those of the last step's starting point); NaN where no step."""
    beta = beta.copy()
    prev = np.full(beta.shape, np.nan)
    done = done.copy()
    ybar = sy / s
    while not done.all() and (iters < _MAXIT).any():
        act = ~done & (iters < _MAXIT)
        mu = special.expit(beta[act])
        prev[act] = beta[act]
        beta[act] = beta[act] + (ybar[act] - mu) / (mu * (1.0 - mu))
        dev = _binomial_deviance(sy[act], s[act], special.expit(beta[act]))
        conv = np.abs(dev - devold[act]) / (np.abs(dev) + 0.1) < _EPS
        idx = np.flatnonzero(act)
        done[idx[conv]] = True
        devold[idx] = dev
        iters[idx] += 1
        done |= iters >= _MAXIT
    return beta, prev


def glm_logit_intercept(y: np.ndarray, W: np.ndarray, dom: np.ndarray,
                        D: int) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients of R's ``glm(y ~ 1, weights=W, family=quasibinomial)`` per domain and
    column: y (n, V) 0/1 (rows with dom < 0 ignored), W the glm prior weights. Returns the
    (D, V) coefficients and the sums of glm's final working weights (1 / ``cov.unscaled``)."""
    sel = dom >= 0
    ds, Ws, ys = dom[sel], W[sel], y[sel]
    V = y.shape[1]
    beta = np.empty((D, V))
    sy = np.empty((D, V))
    wsum1 = np.empty((D, V))
    s = np.bincount(ds, weights=Ws, minlength=D)
    devold = np.empty((D, V))
    for v in range(V):  # columns (levels): few
        mu0 = (Ws * ys[:, v] + 0.5) / (Ws + 1.0)  # binomial()$initialize
        eta0 = special.logit(mu0)
        wt = Ws * mu0 * (1.0 - mu0)
        z = eta0 + (ys[:, v] - mu0) / (mu0 * (1.0 - mu0))
        dres = -2.0 * Ws * (ys[:, v] * np.log(mu0) + (1.0 - ys[:, v]) * np.log1p(-mu0))
        devold[:, v] = np.bincount(ds, weights=dres, minlength=D)
        wsum1[:, v] = np.bincount(ds, weights=wt, minlength=D)
        beta[:, v] = np.bincount(ds, weights=wt * z, minlength=D) / wsum1[:, v]
        sy[:, v] = np.bincount(ds, weights=Ws * ys[:, v], minlength=D)
    S = np.repeat(s[:, None], V, axis=1)
    # first iteration done (from the per-row mustart): its convergence test, then constant mu
    dev1 = _binomial_deviance(sy, S, special.expit(beta))
    done = (np.abs(dev1 - devold) / (np.abs(dev1) + 0.1) < _EPS).ravel()
    out, prev = _irls_from(beta.ravel(), sy.ravel(), S.ravel(), dev1.ravel(), done,
                           np.ones(D * V, dtype=np.int64))
    mu_prev = special.expit(prev.reshape(D, V))
    wsum = np.where(np.isnan(mu_prev), wsum1, S * mu_prev * (1.0 - mu_prev))
    return out.reshape(D, V), wsum


def _domain_facts(design: Any, by: Any, dom: np.ndarray, D: int) -> dict[str, np.ndarray]:
    """Per domain (after na_rm): its rows, design df and mean weight counting the rows with a
    missing value (R's svyciprop sees the domain design before svymean drops them)."""
    dom0, D0, _ = design.domains(by, None)
    rows = np.flatnonzero(dom >= 0)
    first = np.full(D, -1, dtype=np.int64)
    first[dom[rows][::-1]] = rows[::-1]
    m = dom0[first]
    w = design.full_weights
    sel0 = dom0 >= 0
    nrow0 = np.bincount(dom0[sel0], minlength=D0)[m]
    wmean0 = (np.bincount(dom0[sel0], weights=w[sel0], minlength=D0) / np.maximum(
        np.bincount(dom0[sel0], minlength=D0), 1))[m]
    return {"df0": np.asarray(design.domain_df(dom0, D0), float)[m], "nrow0": nrow0,
            "wmean0": wmean0}


def _logit_parts(design: Any, Y: np.ndarray, dom: np.ndarray, D: int, wmean0: np.ndarray,
                 survey_version: str = "4.5"):
    """beta_hat, its design variance, the naive (model) variance and the dispersion."""
    w = design.full_weights
    V = Y.shape[1]
    sel = dom >= 0
    W = np.zeros_like(w)
    W[sel] = w[sel] / wmean0[dom[sel]]  # svyglm's rescaled weights
    beta, wsum = glm_logit_intercept(Y, W, dom, D)
    mu = special.expit(beta)
    S = np.bincount(dom[sel], weights=W[sel], minlength=D)[:, None]
    Spw = np.bincount(dom[sel], weights=w[sel], minlength=D)[:, None]
    R = np.zeros_like(Y)
    R[sel] = Y[sel] - mu[dom[sel]]
    if design.design_kind == "replicate":
        _, thetas = design.replicate_estimates(Y, np.ones_like(Y), dom, D)  # replicate shares
        Rr = thetas.shape[0]
        sy = thetas.ravel()  # the replicate fits use W_r / sum(W_r): S = 1, Sy = share
        s = np.ones_like(sy)
        b0 = np.tile(beta.ravel(), Rr)
        dev0 = _binomial_deviance(sy, s, special.expit(b0))
        betas, _ = _irls_from(b0, sy, s, dev0, np.isnan(sy), np.zeros(sy.shape[0], np.int64))
        var, _ = replicate_variance(betas.reshape(Rr, D * V), beta.ravel(), design.scale,
                                    design.rscales, design.mse)
        var = var.reshape(D, V)
    else:
        _, vtot, _ = design.domain_ratios(R, None, dom, D)
        var = vtot / (mu * (1.0 - mu) * Spw) ** 2
    naive = 1.0 / wsum
    # summary.svyglm's dispersion: svyvar of the Pearson residuals (y - mu) sqrt(W / (mu(1-mu)))
    ds, ws = dom[sel], w[sel]
    # residuals.svyglm: (y - mu) sqrt(W / pw_n) / sqrt(mu (1 - mu)), pw_n the weights over
    # their mean among the rows kept (W is over the mean among all the domain's rows)
    n_rows = np.bincount(ds, minlength=D)
    ratio = (Spw[:, 0] / np.maximum(n_rows, 1)) / wmean0
    pres = R[sel] * np.sqrt(ratio[ds])[:, None] / np.sqrt(mu * (1.0 - mu))[ds]
    n_pos = np.bincount(ds, weights=(ws != 0).astype(float), minlength=D)[:, None]
    disp = np.empty((D, V))
    for v in range(V):
        m = np.bincount(ds, weights=ws * pres[:, v], minlength=D) / Spw[:, 0]
        ss = np.bincount(ds, weights=ws * (pres[:, v] - m[ds]) ** 2, minlength=D)
        disp[:, v] = ss / Spw[:, 0]
    disp = disp * n_pos / (n_pos - 1.0)
    if design.design_kind == "replicate":
        # summary.svrepglm: sum(pw * presid^2) / sum(pw) over the model's rows, its Pearson
        # residuals (y - mu) sqrt(W / (pw / mean(pw))) / sqrt(mu (1 - mu)) with the mean over
        # the model's rows and W's over all the domain's rows (R survey 4.5): 1 times that
        # ratio of means (R 4.1.1 divided by the sum, not the mean: a dispersion about n
        # times too large, whose profile never reached the cut-off, so NA)
        if survey_version == "4.1":
            disp = np.full((D, V), np.nan)
        else:
            r2 = R[sel] ** 2 / (mu * (1.0 - mu))[ds]
            disp = np.column_stack([np.bincount(ds, weights=ws * r2[:, v], minlength=D)
                                    for v in range(V)]) / Spw * ratio[:, None]
    sy = np.column_stack([np.bincount(dom[sel], weights=W[sel] * Y[sel, v], minlength=D)
                          for v in range(V)])
    return beta, var, naive, disp, sy, np.repeat(S, V, axis=1)


def _likelihood_limits(beta, var, naive, disp, sy, S, df, level):
    """Roots of (D(b) - D(b_hat)) / phi = lambda t^2 on each side of b_hat."""
    lam = var / naive
    with np.errstate(invalid="ignore"):
        tq = np.where(df > 0, stats.t.ppf((1 - level) / 2, np.where(df > 0, df, 1.0)), np.nan)
    target = tq**2 * lam
    lo = np.full(beta.shape, np.nan)
    hi = np.full(beta.shape, np.nan)
    for idx in zip(*np.nonzero(np.isfinite(target) & np.isfinite(beta)), strict=True):
        b0, c2 = beta[idx], target[idx]
        d0 = _binomial_deviance(sy[idx], S[idx], special.expit(b0))

        def g(b, b0=b0, c2=c2, d0=d0, idx=idx):
            return (_binomial_deviance(sy[idx], S[idx], special.expit(b)) - d0) / disp[idx] - c2

        step = max(np.sqrt(var[idx]), 1e-8)
        for sgn, out in ((-1.0, lo), (1.0, hi)):
            far = b0 + sgn * step
            k = 0
            while g(far) < 0 and k < 60:
                step_k = step * 2.0 ** (k + 1)
                far = b0 + sgn * step_k
                k += 1
            if g(far) >= 0:
                out[idx] = optimize.brentq(g, *sorted((b0, far)), xtol=1e-14, rtol=1e-15)
    return special.expit(lo), special.expit(hi)


def proportion_ci(design: Any, out: pd.DataFrame, Y: np.ndarray, cols: list[str], by: Any,
                  na_rm: bool, level: float, df: Any, method: str,
                  survey_version: str = "4.5") -> Estimate:
    """Replace the Wald limits of ``design.proportion``'s output ``out`` by ``method``'s."""
    if not 0 < level < 1:
        raise ValueError(f"level={level}: must be in (0, 1).")
    na_rows = design.missing_rows(cols, na_rm, "proportion")
    dom, D, _ = design.domains(by, na_rows)
    V = Y.shape[1]
    Yc = np.where(np.isnan(Y), 0.0, Y)
    facts = _domain_facts(design, by, dom, D)
    dfs = facts["df0"] if df is None else design.resolve_df(df, dom, D)
    p = out["estimate"].to_numpy(float).reshape(D, V)
    v = out["se"].to_numpy(float).reshape(D, V) ** 2
    dmat = np.repeat(dfs[:, None], V, axis=1)
    a = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        tq = np.where(dmat > 0, stats.t.ppf(1 - a, np.where(dmat > 0, dmat, 1.0)), np.nan)
        tq = np.where(np.isposinf(dmat), stats.norm.ppf(1 - a), tq)
        if method == "mean":
            lo, hi = p - tq * np.sqrt(v), p + tq * np.sqrt(v)
        elif method == "xlogit":
            x, sx = special.logit(p), np.sqrt(v) / (p * (1 - p))
            lo, hi = special.expit(x - tq * sx), special.expit(x + tq * sx)
        elif method == "asin":
            x, sx = np.arcsin(np.sqrt(p)), np.sqrt(v) / (2 * np.sqrt(p) * np.sqrt(1 - p))
            lo, hi = np.sin(x - tq * sx) ** 2, np.sin(x + tq * sx) ** 2
        elif method == "wilson":
            n_eff = p * (1 - p) / v
            t2 = tq * tq
            root = np.sqrt(4 * n_eff * p * (1 - p) + t2)
            denom = 1 + t2 / n_eff
            lo = (p + t2 / (2 * n_eff) - tq / (2 * n_eff) * root) / denom
            hi = (p + t2 / (2 * n_eff) + tq / (2 * n_eff) * root) / denom
        elif method == "beta":
            n_eff = p * (1 - p) / v
            n0 = facts["nrow0"][:, None].astype(float)
            df0 = facts["df0"][:, None]
            n_eff = n_eff * (stats.t.ppf(a, n0 - 1) / np.where(
                df0 > 0, stats.t.ppf(a, np.where(df0 > 0, df0, 1.0)), np.nan)) ** 2
            lo = stats.beta.ppf(a, n_eff * p, n_eff * (1 - p) + 1)
            hi = stats.beta.ppf(1 - a, n_eff * p + 1, n_eff * (1 - p))
        else:
            beta, var, naive, disp, sy, S = _logit_parts(design, Yc, dom, D, facts["wmean0"],
                                                         survey_version)
            if method == "logit":
                # confint.svyglm(method="Wald", ddf=df): the t level through the normal
                tlevel = 1 - 2 * stats.norm.cdf(stats.t.ppf(a, np.where(dmat > 0, dmat, 1.0)))
                crit = np.where(dmat > 0, stats.norm.ppf(1 - (1 - tlevel) / 2), np.nan)
                lo = special.expit(beta - crit * np.sqrt(var))
                hi = special.expit(beta + crit * np.sqrt(var))
            else:
                lo, hi = _likelihood_limits(beta, var, naive, disp, sy, S, dmat, level)
    res = out.copy()
    res["ci_low"] = np.asarray(lo, float).ravel()
    res["ci_high"] = np.asarray(hi, float).ravel()
    res["df"] = np.repeat(dfs, V)
    res.attrs = dict(out.attrs)
    return Estimate.wrap(res, level, method)
