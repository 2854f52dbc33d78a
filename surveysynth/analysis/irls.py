"""R's ``glm.fit`` iterations (iteratively reweighted least squares), step for step.

``svyglm`` must reproduce R's iterates, not only the optimum: R stops when the relative change of
the deviance falls below ``epsilon`` and takes its working weights (hence the sandwich variance
and the model-based ``cov.unscaled``) from the last iteration's weights, computed at the
previous coefficients. The steps below follow ``stats::glm.fit`` (R 4.x): starting values from
``family$initialize`` or ``start``, rows with zero prior weight or zero d mu/d eta left out of
each least-squares step, step halving on a non-finite deviance or an invalid mu, and the
convergence test ``|dev - devold| / (|dev| + 0.1) < epsilon``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .families import Family


@dataclass(frozen=True)
class IRLSFit:
    """The state R's ``glm`` object keeps from ``glm.fit``.

    ``weights`` are the working weights of the last iteration (R ``glm$weights``), ``cov_unscaled``
    the inverse of X' W X for those weights (R ``summary(glm)$cov.unscaled``), ``resid_working``
    (y - mu) / (d mu / d eta) at the final coefficients.
    """

    coef: np.ndarray
    eta: np.ndarray
    mu: np.ndarray
    weights: np.ndarray
    cov_unscaled: np.ndarray
    resid_working: np.ndarray
    deviance: float
    iterations: int
    converged: bool
    y: np.ndarray


def check_rank(X: np.ndarray, prior: np.ndarray, names: list[str]) -> None:
    """Refuse a model matrix without full column rank (R would return NA coefficients)."""
    good = prior > 0
    Xw = X[good] * np.sqrt(prior[good])[:, None]
    if Xw.shape[0] < X.shape[1]:
        raise ValueError(
            f"svyglm: {X.shape[1]} coefficients but only {Xw.shape[0]} rows with positive weight."
        )
    # R's dqrdc2 keeps the column order and moves a column to the end when its norm
    # orthogonal to the earlier columns is below 1e-7 of its own norm: the later of two
    # collinear terms is the aliased one
    R = linalg.qr(Xw, mode="r")[0]
    norms = np.linalg.norm(Xw, axis=0)
    aliased_mask = np.abs(np.diag(R)) <= 1e-7 * np.where(norms > 0, norms, 1.0)
    rank = int((~aliased_mask).sum())
    if rank < X.shape[1]:
        aliased = [names[k] for k in np.flatnonzero(aliased_mask)]
        raise ValueError(
            f"svyglm: the model matrix is rank deficient ({rank} of {X.shape[1]} columns "
            f"independent); aliased terms {aliased}. Fix: drop those terms or merge the levels "
            "(R would report them as NA)."
        )


def _wls_step(X, z, w):
    """One weighted least-squares step: coefficients and R of the QR of X * w."""
    Q, R = linalg.qr(X * w[:, None], mode="economic")
    coef = linalg.solve_triangular(R, Q.T @ (z * w))
    return coef, R


def _halve(start, coefold, X, offset, family, y, prior, bad, maxit, what):
    """R's step halving towards the previous coefficients while ``bad(eta, mu, dev)``."""
    if coefold is None:
        raise ValueError(
            "svyglm: no valid set of coefficients has been found; supply start= values."
        )
    warnings.warn(f"glm.fit: step size truncated{what}", UserWarning, stacklevel=4)
    for _ in range(maxit):
        start = (start + coefold) / 2
        eta = X @ start + offset
        mu = family.link.linkinv(eta)
        dev = float(np.sum(family.dev_resids(y, mu, prior)))
        if not bad(eta, mu, dev):
            return start, eta, mu, dev
    raise ValueError(f"svyglm: cannot correct the step size{what}.")


def irls(X: np.ndarray, y: np.ndarray, prior: np.ndarray, offset: np.ndarray, family: Family,
         start: np.ndarray | None = None, maxit: int = 25, epsilon: float = 1e-8,
         mustart: np.ndarray | None = None) -> IRLSFit:
    """Fit a GLM by R's ``glm.fit``: X (n, p) full rank, prior weights, offset, family.
    ``mustart`` replaces ``family$initialize``'s (R's binomial with a two-column response
    starts from ``(n y + 0.5) / (n + 1)`` with n the trials, not the prior weights)."""
    link = family.link
    y = np.asarray(y, dtype=float).copy()
    if family.kind == "binomial":
        y[prior == 0] = 0.0  # binomial()$initialize
    init = family.initialize(y, prior)
    mustart = init if mustart is None else mustart
    coefold = None
    if start is not None:
        coefold = np.asarray(start, dtype=float).copy()
        eta = offset + X @ coefold
    else:
        eta = link.linkfun(mustart)
    mu = link.linkinv(eta)
    if not (family.validmu(mu) and link.valideta(eta)):
        raise ValueError("svyglm: cannot find valid starting values; supply start= values.")
    devold = float(np.sum(family.dev_resids(y, mu, prior)))
    coef = coefold
    p = X.shape[1]
    converged = False
    dev = devold
    R = np.eye(p)
    wgood = np.zeros(0)
    good = prior > 0
    iterations = 0
    for it in range(1, maxit + 1):
        iterations = it
        mu_eta = link.mu_eta(eta)
        varmu = family.variance(mu)
        good = (prior > 0) & (mu_eta != 0)
        if np.any(varmu[good] == 0) or not np.all(np.isfinite(varmu[good])):
            raise ValueError("svyglm: the variance function is zero or undefined at the fit.")
        z = (eta - offset)[good] + (y - mu)[good] / mu_eta[good]
        wgood = np.sqrt(prior[good] * mu_eta[good] ** 2 / varmu[good])
        new, R = _wls_step(X[good], z, wgood)
        if not np.all(np.isfinite(new)):
            warnings.warn("glm.fit: non-finite coefficients at an iteration", UserWarning,
                          stacklevel=2)
            break
        eta = X @ new + offset
        mu = link.linkinv(eta)
        dev = float(np.sum(family.dev_resids(y, mu, prior)))
        if not np.isfinite(dev):
            new, eta, mu, dev = _halve(new, coefold, X, offset, family, y, prior,
                                       lambda e, m, d: not np.isfinite(d), maxit,
                                       " due to divergence")
        if not (link.valideta(eta) and family.validmu(mu)):
            new, eta, mu, dev = _halve(new, coefold, X, offset, family, y, prior,
                                       lambda e, m, d: not (link.valideta(e) and family.validmu(m)),
                                       maxit, ": out of bounds")
        coef = new
        if abs(dev - devold) / (abs(dev) + 0.1) < epsilon:
            converged = True
            break
        devold = dev
        coefold = new
    if not converged:
        warnings.warn(f"glm.fit: algorithm did not converge in {maxit} iterations",
                      UserWarning, stacklevel=2)
    wt = np.zeros(X.shape[0])
    wt[good] = wgood**2
    Rinv = linalg.solve_triangular(R, np.eye(p))
    return IRLSFit(
        coef=coef, eta=eta, mu=mu, weights=wt, cov_unscaled=Rinv @ Rinv.T,
        resid_working=(y - mu) / link.mu_eta(eta), deviance=float(dev), iterations=iterations,
        converged=converged, y=y,
    )
