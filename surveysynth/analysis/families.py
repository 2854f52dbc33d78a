"""GLM families and links exactly as R's ``stats`` computes them.

``svyglm`` fits by R's ``glm.fit`` iterations, so the families here reproduce R's functions
value for value: the clamped logit inverse (``C_logit_linkinv``), ``pmax(exp(eta), eps)`` for
the log link, the binomial and Poisson deviance residuals (``y log(y/mu)`` taken as 0 at
``y = 0``), the ``initialize`` starting values (``mustart``) and ``validmu``. Matching R's
iterations (not only its optimum) is what lets coefficients and standard errors agree to 1e-8:
R's working weights, and hence its variance, come from the last iteration it ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

EPS = np.finfo(float).eps
_THRESH = 30.0
_MTHRESH = -30.0
_INVEPS = 1.0 / EPS

Array = np.ndarray


@dataclass(frozen=True)
class Link:
    """A link function with its inverse and derivative d mu / d eta (R ``make.link``)."""

    name: str
    linkfun: Callable[[Array], Array]
    linkinv: Callable[[Array], Array]
    mu_eta: Callable[[Array], Array]
    valideta: Callable[[Array], bool] = lambda eta: True


def _logit_linkinv(eta: Array) -> Array:
    # R's C_logit_linkinv: tmp = exp(eta) clamped to [eps, 1/eps] outside +-30; tmp / (1 + tmp)
    tmp = np.exp(np.clip(eta, _MTHRESH, _THRESH))
    tmp = np.where(eta < _MTHRESH, EPS, np.where(eta > _THRESH, _INVEPS, tmp))
    return tmp / (1.0 + tmp)


def _logit_mu_eta(eta: Array) -> Array:
    opexp = np.exp(np.clip(eta, _MTHRESH, _THRESH))
    val = opexp / ((1.0 + opexp) * (1.0 + opexp))
    return np.where((eta > _THRESH) | (eta < _MTHRESH), EPS, val)


def _probit_linkinv(eta: Array) -> Array:
    thresh = -stats.norm.ppf(EPS)
    return stats.norm.cdf(np.clip(eta, -thresh, thresh))


def _cloglog_linkinv(eta: Array) -> Array:
    return np.clip(-np.expm1(-np.exp(eta)), EPS, 1 - EPS)


LINKS: dict[str, Link] = {
    "identity": Link("identity", lambda mu: mu, lambda eta: eta, lambda eta: np.ones_like(eta)),
    "log": Link("log", np.log, lambda eta: np.maximum(np.exp(eta), EPS),
                lambda eta: np.maximum(np.exp(eta), EPS)),
    "logit": Link("logit", special.logit, _logit_linkinv, _logit_mu_eta),
    "probit": Link("probit", stats.norm.ppf, _probit_linkinv,
                   lambda eta: np.maximum(stats.norm.pdf(eta), EPS)),
    "cloglog": Link("cloglog", lambda mu: np.log(-np.log1p(-mu)), _cloglog_linkinv,
                    lambda eta: np.maximum(np.exp(np.minimum(eta, 700.0) - np.exp(
                        np.minimum(eta, 700.0))), EPS)),
    "inverse": Link("inverse", lambda mu: 1.0 / mu, lambda eta: 1.0 / eta,
                    lambda eta: -1.0 / eta**2, lambda eta: bool(np.all(np.isfinite(eta))
                                                                 and np.all(eta != 0))),
    "sqrt": Link("sqrt", np.sqrt, lambda eta: eta**2, lambda eta: 2 * eta,
                 lambda eta: bool(np.all(np.isfinite(eta)) and np.all(eta > 0))),
}


def _ylogy(y: Array, mu: Array) -> Array:
    """R's ``y_log_y``: y log(y/mu), 0 where y = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y != 0, y * np.log(np.where(y != 0, y, 1.0) / mu), 0.0)


def _gaussian_dev(y: Array, mu: Array, wt: Array) -> Array:
    return wt * (y - mu) ** 2


def _binomial_dev(y: Array, mu: Array, wt: Array) -> Array:
    return 2 * wt * (_ylogy(y, mu) + _ylogy(1 - y, 1 - mu))


def _poisson_dev(y: Array, mu: Array, wt: Array) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(y > 0, wt * (y * np.log(np.where(y > 0, y, 1.0) / mu) - (y - mu)), mu * wt)
    return 2 * r


@dataclass(frozen=True)
class Family:
    """An exponential family for ``svyglm``: variance, deviance, starting values, link.

    ``name`` is R's family name (``gaussian``, ``binomial``, ``quasibinomial``, ``poisson``,
    ``quasipoisson``). The design-based variance of ``svyglm`` does not depend on whether the
    dispersion is free (quasi) or fixed: R gives identical coefficients, SEs and df for
    ``binomial`` and ``quasibinomial``; the name is kept for printing.
    """

    name: str
    link: Link
    variance: Callable[[Array], Array]
    dev_resids: Callable[[Array, Array, Array], Array]
    kind: str  # "gaussian", "binomial" or "poisson": the initialize/validmu rules

    def initialize(self, y: Array, weights: Array) -> Array:
        """R's ``family$initialize``: check y and return ``mustart``."""
        if self.kind.startswith("quasi:"):
            var = self.kind[len("quasi:"):]
            if var == "constant":
                return y.astype(float)
            if var == "mu(1-mu)":
                return np.maximum(0.001, np.minimum(0.999, y))
            return y + 0.1 * (y == 0)
        if self.kind == "binomial":
            if np.any((y < 0) | (y > 1)):
                raise ValueError(
                    f"family={self.name!r}: the response must be 0/1, a proportion in [0, 1], "
                    "a two-level factor or a boolean; found values outside [0, 1]."
                )
            return (weights * y + 0.5) / (weights + 1)
        if self.kind == "poisson":
            if np.any(y < 0):
                raise ValueError(
                    f"family={self.name!r}: negative values are not allowed for the response "
                    "(counts)."
                )
            return y + 0.1
        if self.link.name == "inverse" and np.any(y == 0) or self.link.name == "log" and np.any(
                y <= 0):
            raise ValueError(
                f"family gaussian with link {self.link.name!r}: cannot find valid starting "
                "values (the response has zeros or negative values)."
            )
        return y.astype(float)

    def validmu(self, mu: Array) -> bool:
        if not np.all(np.isfinite(mu)):
            return False
        if self.kind == "quasi:mu(1-mu)":
            return bool(np.all((mu > 0) & (mu < 1)))
        if self.kind.startswith("quasi:") and self.kind != "quasi:constant":
            return bool(np.all(mu > 0))
        if self.kind == "binomial":
            return bool(np.all((mu > 0) & (mu < 1)))
        if self.kind == "poisson":
            return bool(np.all(mu > 0))
        return True


_DEFAULT_LINK = {"gaussian": "identity", "binomial": "logit", "quasibinomial": "logit",
                 "poisson": "log", "quasipoisson": "log"}
_ALLOWED_LINKS = {
    "gaussian": ("identity", "log", "inverse"),
    "binomial": ("logit", "probit", "cloglog", "log"),
    "quasibinomial": ("logit", "probit", "cloglog", "log"),
    "poisson": ("log", "identity", "sqrt"),
    "quasipoisson": ("log", "identity", "sqrt"),
}


def get_family(family: str | Family, link: str | None = None) -> Family:
    """The :class:`Family` named ``family`` (R's names) with ``link`` (default: canonical)."""
    if isinstance(family, Family):
        return family
    if not isinstance(family, str) or family not in _DEFAULT_LINK:
        raise ValueError(
            f"family={family!r}: choose one of {tuple(_DEFAULT_LINK)} (R's family names)."
        )
    link = link or _DEFAULT_LINK[family]
    if link not in _ALLOWED_LINKS[family]:
        raise ValueError(
            f"link={link!r} for family {family!r}: choose one of {_ALLOWED_LINKS[family]}."
        )
    if family == "gaussian":
        return Family(family, LINKS[link], np.ones_like, _gaussian_dev, "gaussian")
    if family in ("binomial", "quasibinomial"):
        return Family(family, LINKS[link], lambda mu: mu * (1 - mu), _binomial_dev, "binomial")
    return Family(family, LINKS[link], lambda mu: mu, _poisson_dev, "poisson")


def _quasi_mu_dev(y: Array, mu: Array, wt: Array) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):
        return 2 * wt * (y * np.log(np.where(y == 0, 1.0, y / mu)) - (y - mu))


def _quasi_mu2_dev(y: Array, mu: Array, wt: Array) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.maximum(-2 * wt * (np.log(np.where(y == 0, 1.0, y) / mu) - (y - mu) / mu), 0)


def _quasi_mu3_dev(y: Array, mu: Array, wt: Array) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):
        return wt * ((y - mu) ** 2) / (y * mu**2)


_QUASI = {
    "constant": (np.ones_like, _gaussian_dev),
    "mu(1-mu)": (lambda mu: mu * (1 - mu), _binomial_dev),
    "mu": (lambda mu: mu, _quasi_mu_dev),
    "mu^2": (lambda mu: mu**2, _quasi_mu2_dev),
    "mu^3": (lambda mu: mu**3, _quasi_mu3_dev),
}


def quasi(link: str = "identity", variance: str = "constant") -> Family:
    """R's ``quasi(link=, variance=)`` family: any link of ``make.link`` with one of R's
    variance functions ``"constant"``, ``"mu(1-mu)"``, ``"mu"``, ``"mu^2"``, ``"mu^3"``, with
    R's starting values, deviance residuals (they drive ``glm.fit``'s convergence test) and
    ``validmu``. Pass it as ``family=`` to :func:`~surveysynth.analysis.svyglm`, e.g. R's
    ratio-estimator example ``svyglm("api.stu ~ enroll - 1", d, family=quasi("identity",
    "mu"))``."""
    var = str(variance).replace(" ", "")
    if var not in _QUASI:
        raise ValueError(
            f"quasi: variance={variance!r}: choose one of {tuple(_QUASI)} (R's quasi variances)."
        )
    if link not in LINKS:
        raise ValueError(f"quasi: link={link!r}: choose one of {tuple(LINKS)}.")
    varfun, dev = _QUASI[var]
    return Family("quasi", LINKS[link], varfun, dev, f"quasi:{var}")
