"""Survey-weighted cumulative-link (proportional odds) models: R ``survey::svyolr``.

``svyolr("mealcat ~ avg_ed + mobility", design)`` fits P(Y <= k | x) = F(zeta_k - x'beta)
for an ordered response with K levels by weighted maximum likelihood (pseudo likelihood,
the sampling weights as case weights), as R's ``svyolr`` (taken from ``MASS::polr``):

* the estimates are the optimum itself, found by Newton's method on the exact gradient and
  Hessian to about 1e-12; R stops ``optim(method="BFGS")`` at its relative tolerance
  (``reltol = 1e-8`` on the log likelihood), so R's coefficients are the optimum to about
  1e-5 by default (tests run R with ``control=list(reltol=1e-15)``, which ``svyolr`` passes
  on to ``optim``, and agree to 1e-8);
* linearization designs: influence values ``U_i H^{-1}`` (the weighted score contributions
  times the inverse information) through the package's Taylor engine (R: ``svyrecvar`` of
  ``gmini %*% solve(H)``). R's H is ``optim``'s finite-difference Hessian (central
  differences of the analytic gradient, step 1e-3, in the log-spacing parametrisation, then
  transformed back); ``hessian="optim"`` (default) computes the same thing, so the
  covariance is R's; ``hessian="exact"`` uses the analytic Hessian (differs from R's by the
  finite-difference error, up to 1e-3 relative on apiclus1);
* replicate designs: the model is refitted with every replicate's weights and the
  coefficients' covariance is R's ``svrVar`` (R: ``svyolr.svyrep.design``, ``MASS::polr``
  per replicate, from the full-sample estimates);
* links (``method=``): ``"logistic"`` (proportional odds), ``"probit"``, ``"cloglog"``
  (F(x) = 1 - exp(-exp(x)), ``MASS::polr``'s and R ``svyolr`` on replicate designs),
  ``"loglog"`` (F(x) = exp(-exp(-x))) and ``"cauchit"``. R's ``svyolr`` on a
  linearization design fits F(x) = exp(-exp(-x)) when asked for ``"cloglog"`` (its
  ``pgumbel``): that is our ``"loglog"``; tested so.

Output: ``params`` (the coefficients then the cut points ``zeta``, R's ``coef(m)``, named
``"a|b"`` as R), ``vcov()`` (R's ``vcov(m)``), ``bse``, ``tvalues``, ``df_resid`` (design
df minus the number of coefficients, as R), ``deviance`` (R: ``2 * -loglik / mean(w)``).
Differences, on purpose: a missing value is an error naming the rows unless ``na_rm=True``;
coefficient names are formulaic's (``stype[T.H]`` for R's ``stypeH``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import linalg, special, stats

from .covariance import influence_covariance, replicate_covariance
from .formulas import formula_columns, formula_matrix, quote_dotted

METHODS = ("logistic", "probit", "cloglog", "loglog", "cauchit")


def _logistic():
    def f(x):
        p = special.expit(x)
        return p * (1 - p)
    return special.expit, f, lambda x: f(x) * (1 - 2 * special.expit(x))


def _probit():
    return special.ndtr, stats.norm.pdf, lambda x: -x * stats.norm.pdf(x)


def _loglog():  # exp(-exp(-x)): R svyolr's "cloglog" (its pgumbel)
    def f(x):
        e = np.exp(-x)
        return e * np.exp(-e)
    return (lambda x: np.exp(-np.exp(-x))), f, lambda x: f(x) * (np.exp(-x) - 1)


def _cloglog():  # 1 - exp(-exp(x)): MASS::polr's pGumbel
    def f(x):
        e = np.exp(x)
        return e * np.exp(-e)
    return (lambda x: -np.expm1(-np.exp(x))), f, lambda x: f(x) * (1 - np.exp(x))


def _cauchit():
    return (stats.cauchy.cdf, lambda x: 1 / (np.pi * (1 + x * x)),
            lambda x: -2 * x / (np.pi * (1 + x * x) ** 2))


def _link(method: str):
    """(F, f, f') of the latent error distribution."""
    return {"logistic": _logistic, "probit": _probit, "loglog": _loglog,
            "cloglog": _cloglog, "cauchit": _cauchit}[method]()


class _Problem:
    """The weighted log likelihood of the cumulative-link model, its score contributions and
    Hessian, for parameters (beta, zeta)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, q: int, method: str) -> None:
        self.X, self.y, self.q = X, y, q  # y in 1..q+1
        self.p = X.shape[1]
        self.F, self.f, self.df = _link(method)
        n = X.shape[0]
        self.up = y <= q        # a = zeta_y - eta finite
        self.lo = y >= 2        # b = zeta_{y-1} - eta finite
        self.Ea = np.zeros((n, q))
        self.Ea[np.flatnonzero(self.up), y[self.up] - 1] = 1.0
        self.Eb = np.zeros((n, q))
        self.Eb[np.flatnonzero(self.lo), y[self.lo] - 2] = 1.0

    def _ab(self, par: np.ndarray):
        beta, zeta = par[: self.p], par[self.p:]
        eta = self.X @ beta
        z = np.concatenate([[-np.inf], zeta, [np.inf]])
        return z[self.y] - eta, z[self.y - 1] - eta

    def loglik_terms(self, par: np.ndarray) -> np.ndarray:
        a, b = self._ab(par)
        with np.errstate(invalid="ignore", divide="ignore"):
            # upper tail for the top category, lower for the bottom: no cancellation
            pr = np.where(self.up, self.F(a), 1.0) - np.where(self.lo, self.F(b), 0.0)
            return np.log(pr)

    def derivs(self, par: np.ndarray):
        """Per-row score contributions (n, k) of the log likelihood and the weighted
        Hessian building blocks."""
        a, b = self._ab(par)
        af = np.where(self.up, a, 0.0)
        bf = np.where(self.lo, b, 0.0)
        Fa = np.where(self.up, self.F(af), 1.0)
        Fb = np.where(self.lo, self.F(bf), 0.0)
        fa = np.where(self.up, self.f(af), 0.0)
        fb = np.where(self.lo, self.f(bf), 0.0)
        dfa = np.where(self.up, self.df(af), 0.0)
        dfb = np.where(self.lo, self.df(bf), 0.0)
        pr = Fa - Fb
        la, lb = fa / pr, -fb / pr
        laa = dfa / pr - la * la
        lbb = -dfb / pr - lb * lb
        lab = fa * fb / (pr * pr)
        Da = np.hstack([-self.X, self.Ea])
        Db = np.hstack([-self.X, self.Eb])
        Db[~self.lo] = 0.0
        Da[~self.up] = 0.0
        score = Da * la[:, None] + Db * lb[:, None]
        return score, Da, Db, laa, lbb, lab, pr

    def hessian(self, par: np.ndarray, w: np.ndarray) -> np.ndarray:
        _, Da, Db, laa, lbb, lab, _ = self.derivs(par)
        H = (Da * (w * laa)[:, None]).T @ Da + (Db * (w * lbb)[:, None]).T @ Db
        C = (Da * (w * lab)[:, None]).T @ Db
        return H + C + C.T


def _start(y: np.ndarray, w: np.ndarray, q: int, p: int, method: str) -> np.ndarray:
    """Cut points from the weighted cumulative shares, coefficients 0."""
    share = np.cumsum(np.bincount(y - 1, weights=w, minlength=q + 1))[:q] / w.sum()
    share = np.clip(share, 1e-6, 1 - 1e-6)
    inv = {"logistic": special.logit, "probit": special.ndtri,
           "loglog": lambda s: -np.log(-np.log(s)), "cloglog": lambda s: np.log(-np.log1p(-s)),
           "cauchit": lambda s: np.tan(np.pi * (s - 0.5))}[method]
    zeta = np.maximum.accumulate(inv(share) + np.arange(q) * 1e-6)
    return np.concatenate([np.zeros(p), zeta])


def _fit(prob: _Problem, w: np.ndarray, start: np.ndarray, maxit: int = 200) -> np.ndarray:
    """Newton's method with step halving (the likelihood is concave in (beta, zeta) for the
    log-concave links; the halving also keeps the cut points ordered)."""
    par = start.copy()
    ll = float(w @ prob.loglik_terms(par))
    for _ in range(maxit):
        score, *_ = prob.derivs(par)
        g = w @ score
        H = prob.hessian(par, w)
        try:
            step = -linalg.solve(H, g, assume_a="sym")
        except linalg.LinAlgError:
            step = g / max(np.abs(np.diag(H)).max(), 1.0)
        if not np.all(np.isfinite(step)):
            step = g * 1e-3
        t = 1.0
        while True:
            new = par + t * step
            ordered = np.all(np.diff(new[prob.p:]) > 0)
            new_ll = float(w @ prob.loglik_terms(new)) if ordered else -np.inf
            if np.isfinite(new_ll) and new_ll >= ll - 1e-12 * abs(ll):
                break
            t /= 2
            if t < 1e-12:
                raise ValueError("svyolr: the Newton iterations stalled (no step raises the "
                                 "likelihood); the model may not be identified (a category "
                                 "empty in the sample, or a perfectly separating term).")
        done = np.max(np.abs(t * step) / np.maximum(np.abs(par), 1.0)) < 1e-12
        par, ll = new, new_ll
        if done:
            return par
    raise ValueError(f"svyolr: no convergence in {maxit} Newton iterations.")


def _optim_hessian(prob: _Problem, w: np.ndarray, par: np.ndarray) -> np.ndarray:
    """R's Hessian of -loglik: ``optim(hessian=TRUE)``'s central differences (step 1e-3) of
    the analytic gradient in the parametrisation theta = (beta, zeta_1, log(diff(zeta))),
    symmetrised, inverted by ``MASS::ginv``, transformed to (beta, zeta) and inverted again."""
    p, q = prob.p, prob.q

    def to_par(theta):
        return np.concatenate([theta[:p], np.cumsum(np.r_[theta[p], np.exp(theta[p + 1:])])])

    def jac(theta):  # d zeta / d theta (R's jacobian())
        J = np.zeros((q, q))
        J[:, 0] = 1.0
        et = np.exp(theta[p:])
        for i in range(1, q):
            J[i:, i] = et[i]
        return J

    def grad(theta):  # R gmin: colSums(gmini(logdiff=TRUE)), the gradient of -loglik
        A = np.eye(p + q)
        A[p:, p:] = jac(theta)
        score, *_ = prob.derivs(to_par(theta))
        return -(w @ score) @ A

    zeta = par[p:]
    theta = np.concatenate([par[:p], [zeta[0]], np.log(np.diff(zeta))])
    k = p + q
    H = np.empty((k, k))
    for i in range(k):
        e = np.zeros(k)
        e[i] = 1e-3
        H[i] = (grad(theta + e) - grad(theta - e)) / 2e-3
    H = 0.5 * (H + H.T)
    A = np.eye(k)
    A[p:, p:] = jac(theta)
    Vm = A @ np.linalg.pinv(H) @ A.T
    return np.linalg.inv(Vm)


def _response_codes(series: pd.Series, name: str) -> tuple[np.ndarray, list[str]]:
    """Level codes 1..K (R's factor order: a pandas Categorical's categories, otherwise the
    sorted distinct values) and the level labels."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = list(series.cat.categories)
        codes = series.cat.codes.to_numpy() + 1
    else:
        cats = sorted(series.dropna().unique().tolist())
        codes = pd.Index(cats).get_indexer(series) + 1
    labels = [str(c) for c in cats]
    if len(labels) < 3:
        raise ValueError(f"svyolr: the response {name!r} has {len(labels)} levels; it needs 3 "
                         "or more (R: 'response must have 3 or more levels'); for two use "
                         "svyglm(family='quasibinomial').")
    return codes.astype(np.int64), labels


def svyolr(formula: str, design: Any, method: str = "logistic", na_rm: bool = False,
           hessian: str = "optim") -> OLRResults:
    """Fit a survey-weighted cumulative-link model with design-based standard errors (R
    ``svyolr``); see the module docstring for the model, variance and links.

    Parameters
    ----------
    formula : ``"response ~ terms"``; the response is an ordered categorical column (a pandas
        Categorical in its category order, or values sorted as R sorts factor levels) with
        3 or more levels; the intercept is absorbed by the cut points (as R).
    design : :class:`~surveysynth.SurveyDesign` or :class:`~surveysynth.ReplicateDesign`
        (calibrated, subsets included).
    method : ``"logistic"``, ``"probit"``, ``"cloglog"``, ``"loglog"`` or ``"cauchit"``.
    na_rm : drop rows with a missing model variable (they stay in the design).
    hessian : ``"optim"`` (R's finite-difference Hessian, default: R's variance) or
        ``"exact"`` (linearization designs only).
    """
    if method not in METHODS:
        raise ValueError(f"svyolr: method={method!r}: choose one of {METHODS}.")
    if hessian not in ("optim", "exact"):
        raise ValueError(f"svyolr: hessian={hessian!r}: choose 'optim' (R's) or 'exact'.")
    if not isinstance(formula, str) or "~" not in formula:
        raise ValueError(f"svyolr: formula={formula!r}: give 'response ~ terms'.")
    lhs, rhs = (s.strip() for s in formula.split("~", 1))
    full = design.full_data
    if lhs not in full.columns:
        raise ValueError(f"svyolr: the response {lhs!r} is not a column of the design's data "
                         f"(columns: {list(map(str, full.columns))[:12]}...).")
    cols = sorted(set([lhs] + formula_columns(rhs, full.columns)))
    na = design.missing_rows(cols, na_rm, "svyolr")
    inside = np.asarray(design.in_subset, dtype=bool)
    w_full = np.asarray(design.full_weights, dtype=float)
    fit_rows = inside.copy() if na is None else inside & ~np.asarray(na, bool)
    fit_rows &= w_full > 0  # a calibrated subset's zero weights take no part (R drops them)
    data = full.loc[fit_rows]
    mm = formula_matrix(f"~ {quote_dotted(rhs, full.columns)}", data, "svyolr",
                        na_action="raise")
    names = [str(c) for c in mm.columns]
    X = np.asarray(mm, dtype=float)
    if "Intercept" in names:
        k = names.index("Intercept")
        X = np.delete(X, k, axis=1)
        names.pop(k)
    y, levels = _response_codes(data[lhs], lhs)
    q = len(levels) - 1
    present = np.bincount(y - 1, minlength=q + 1)
    if (present == 0).any():
        empty = [levels[i] for i in np.flatnonzero(present == 0)]
        raise ValueError(f"svyolr: level(s) {empty} of {lhs!r} have no rows in the fit: the "
                         "cut points around them are not identified. Fix: drop the unused "
                         "levels (series.cat.remove_unused_categories()).")
    w = w_full[fit_rows]
    prob = _Problem(X, y, q, method)
    par = _fit(prob, w, _start(y, w, q, X.shape[1], method))
    zeta_names = [f"{a}|{b}" for a, b in zip(levels[:-1], levels[1:], strict=True)]
    all_names = names + zeta_names
    replicates = None
    if getattr(design, "design_kind", "taylor") == "replicate":
        if hessian != "optim":
            raise ValueError("svyolr: hessian='exact' is for linearization designs; "
                             "replicate designs refit the model.")
        rep = np.asarray(design.replicate_weights("analysis"), dtype=float)[fit_rows[inside]]
        betas = np.vstack([_fit(prob, rep[:, r], par) for r in range(rep.shape[1])])
        vcov = replicate_covariance(design, betas, par)
        replicates = betas
        codes = np.where(inside, 0, -1)
    else:
        score, *_ = prob.derivs(par)
        info = _optim_hessian(prob, w, par) if hessian == "optim" else -prob.hessian(par, w)
        infl = np.zeros((inside.shape[0], par.shape[0]))
        infl[fit_rows] = (score * w[:, None]) @ np.linalg.inv(info)
        codes = np.where(fit_rows, 0, -1)
        vcov = influence_covariance(design, infl, codes)
    degf = float(design.domain_df(codes, 1)[0])
    loglik = float(w @ prob.loglik_terms(par))
    return OLRResults(formula, method, levels, all_names, len(names), par, vcov, degf,
                      deviance=-2 * loglik / w.mean(), nobs=int(y.shape[0]),
                      replicates=replicates)


class OLRResults:
    """A fitted survey-weighted cumulative-link model (R ``svyolr`` numbers).

    Attributes: ``params`` (coefficients, then the cut points, R ``coef(m)``),
    ``coefficients`` and ``zeta`` separately, ``bse``, ``tvalues`` (R ``summary``'s
    t values), ``df_resid`` (design df minus the number of coefficients, R's), ``deviance``,
    ``method``, ``levels``, ``nobs``, ``replicates`` (replicate designs).
    """

    def __init__(self, formula: str, method: str, levels: list[str], names: list[str],
                 n_coef: int, par: np.ndarray, vcov: np.ndarray, design_df: float,
                 deviance: float, nobs: int, replicates: np.ndarray | None = None) -> None:
        self.formula = formula
        self.method = method
        self.levels = levels
        self.params = pd.Series(par, index=names, name="estimate")
        self.coefficients = self.params.iloc[:n_coef].copy()
        self.zeta = self.params.iloc[n_coef:].copy()
        self._vcov = pd.DataFrame(vcov, index=names, columns=names)
        self.bse = pd.Series(np.sqrt(np.diag(vcov)), index=names, name="se")
        self.tvalues = pd.Series(self.params / self.bse, name="t")
        self.design_df = design_df
        self.df_resid = design_df - n_coef
        self.deviance = deviance
        self.nobs = nobs
        self.replicates = None if replicates is None else pd.DataFrame(replicates,
                                                                       columns=names)

    def vcov(self) -> pd.DataFrame:
        """Design-based covariance of the coefficients and cut points (R ``vcov(svyolr)``)."""
        return self._vcov.copy()

    def summary(self) -> pd.DataFrame:
        """R ``summary(svyolr)``'s table: value, SE, t value."""
        return pd.DataFrame({"estimate": self.params, "se": self.bse, "t": self.tvalues})

    def __repr__(self) -> str:
        return (f"svyolr({self.formula!r}, method={self.method!r}): {len(self.coefficients)} "
                f"coefficients, {len(self.zeta)} cut points, df {self.df_resid:g}\n"
                f"{self.summary().to_string()}")
