"""Survey-weighted generalized linear models: R ``survey::svyglm`` on every design kind.

``svyglm(formula, design, family=...)`` fits a GLM with the sampling weights and gives
design-based standard errors, as R ``svyglm`` (survey 4.1) does:

* the point estimates are the weighted GLM fit (pseudo maximum likelihood), by R's ``glm.fit``
  iterations with the weights rescaled to mean 1 over the design's rows
  (:mod:`surveysynth.analysis.irls`);
* linearization designs (:class:`~surveysynth.SurveyDesign`): the sandwich
  ``A^{-1} B A^{-1}`` where ``B`` is the design variance of the total of the estimating
  functions ``x_i (y_i - mu_i) w_i mu'_i / V(mu_i)`` (R ``svy.varcoef``): the influence values
  ``estfun %*% A^{-1}`` go through the core's Taylor engine (``svyrecvar``), strata, clusters,
  fpc and lonely-PSU rules included;
* replicate designs (:class:`~surveysynth.ReplicateDesign`): the model is refitted with every
  replicate's analysis weights, starting from the full-sample coefficients, and the
  coefficients' replicate covariance is R's ``svrVar`` with the design's scale, rscales and mse;
* residual degrees of freedom ``degf(design) + 1 - p`` (the design df, not n - p); t and p
  values and intervals use them (R ``summary.svyglm``, ``confint.svyglm``);
* domains: a ``subset()`` design keeps its full design for the variance, as R's ``svyglm`` on
  ``subset(design, ...)``.

Families: ``gaussian``, ``binomial``, ``quasibinomial``, ``poisson``, ``quasipoisson`` (R gives
the same estimates, SEs and df for a family and its quasi version: the design-based variance
does not use the dispersion). Formulas are R-style through formulaic (``y ~ x + C(g)``,
``np.log(x)``, ``I(a - b)``, interactions ``a:b``, ``a*b``); an offset is a formula term
``offset(expr)`` or the ``offset=`` argument (a column, an expression, or an array).

Binomial responses may be R's two columns ``cbind(successes, failures)`` (proportions with
the trials in the prior weights and R's starting values, so R's numbers on linearization
designs); on replicate designs each replicate fit keeps the trials in its weights, where R's
``svyglm.svyrep.design`` leaves them out (it refits ``glm.fit`` on the proportions with the
replicate weights alone), so our replicate SEs are those of R's svyglm on the equivalent
0/1 data and differ from R's own.

Differences from R, on purpose: a missing value in a model variable is an error naming the rows
unless ``na_rm=True`` (R drops the rows silently); a rank-deficient model matrix is an error
naming the aliased terms (R reports NA coefficients); coefficient names are formulaic's
(``stype[T.H]`` for R's ``stypeH``); ``predict`` adds the offset (R's ``predict.svyglm`` leaves
it out).
"""

from __future__ import annotations

import html
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from .covariance import influence_covariance, replicate_covariance
from .families import Family, get_family
from .formulas import formula_columns, formula_matrix, quote_dotted
from .formulas import split_offset as _split_offset
from .irls import IRLSFit, check_rank, irls


def _check_formula(formula: Any) -> str:
    if not isinstance(formula, str) or "~" not in formula:
        raise ValueError(
            f"formula={formula!r}: give an R-style formula string with a response, e.g. "
            "'api00 ~ ell + meals'."
        )
    return formula


def _evaluate(expr: str, data: pd.DataFrame) -> np.ndarray:
    """Value of a numeric expression (a column or a formulaic expression) on ``data``."""
    if expr in data.columns:
        return data[expr].to_numpy(dtype=float, na_value=np.nan)
    mm = formula_matrix(f"0 + {expr}", data, "offset", na_action="ignore")
    if mm.shape[1] != 1:
        raise ValueError(f"offset {expr!r}: must give one numeric column, got {mm.shape[1]}.")
    return np.asarray(mm, dtype=float)[:, 0]


def _check_finite(values: np.ndarray, index: pd.Index, what: str) -> None:
    bad = ~np.isfinite(values)
    if bad.ndim > 1:
        bad = bad.any(axis=1)
    if bad.any():
        rows = index[bad][:5].tolist()
        raise ValueError(
            f"svyglm: {what} is not finite (NaN or infinite, e.g. log of 0) in rows {rows}"
            f"{' and more' if bad.sum() > 5 else ''}. Fix: transform or drop those rows."
        )


def _response(lhs: pd.DataFrame, family: Family) -> np.ndarray:
    """The response vector: numeric, or the indicator of the second level of a two-level
    factor for binomial families (R: ``y != levels(y)[1]``). A logical response (coded as a
    factor by :class:`~surveysynth.analysis.formulas.RMaterializer`) is its 0/1 values, as R's
    ``glm`` takes a logical ``y`` for any family."""
    names = list(map(str, lhs.columns))
    stems = {n.rsplit("[", 1)[0] for n in names}
    if len(stems) == 1 and set(names) <= {f"{next(iter(stems))}[{v}]" for v in (False, True)}:
        true = f"{next(iter(stems))}[True]"
        return (np.asarray(lhs[true], dtype=float) if true in names
                else np.zeros(lhs.shape[0]))
    if lhs.shape[1] == 1:
        return np.asarray(lhs, dtype=float)[:, 0]
    if lhs.shape[1] == 2 and family.kind == "binomial":
        return np.asarray(lhs, dtype=float)[:, 1]
    raise ValueError(
        f"svyglm: the response expands to {lhs.shape[1]} columns {list(lhs.columns)[:6]}; "
        f"family {family.name!r} needs a numeric response"
        + (" (or a two-level factor)." if family.kind == "binomial" else ".")
    )


@dataclass
class _Model:
    X: np.ndarray
    y: np.ndarray
    offset: np.ndarray
    names: list[str]
    fit_rows: np.ndarray  # bool over full_data
    na_rows: np.ndarray  # bool over full_data
    spec: Any
    offset_exprs: list[str] = field(default_factory=list)
    offset_array: bool = False
    trials: np.ndarray | None = None  # cbind(successes, failures): successes + failures


def _offset_values(offset, exprs, data, full_index, fit_rows, design) -> np.ndarray:
    total = np.zeros(data.shape[0])
    for e in exprs:
        total += _evaluate(e, data)
    if offset is None:
        return total
    if isinstance(offset, str):
        return total + _evaluate(offset, data)
    arr = np.asarray(offset, dtype=float).reshape(-1)
    if arr.shape[0] != design.n:
        raise ValueError(
            f"offset: {arr.shape[0]} values for {design.n} rows of the design's data; give one "
            "value per row of design.data (or a column name)."
        )
    full = np.full(full_index.shape[0], np.nan)
    full[np.asarray(design.in_subset)] = arr
    return total + full[fit_rows]


_CBIND = re.compile(r"^\s*cbind\s*\((?P<args>.*)\)\s*~(?P<rhs>.*)$", re.S)


def _split_cbind(text: str, family: Family) -> tuple[str, str | None]:
    """``cbind(s, f) ~ rhs`` -> (``s ~ rhs``, ``f``): R's two-column binomial response
    (successes, failures); other formulas unchanged."""
    m = _CBIND.match(text)
    if m is None:
        return text, None
    depth, cut = 0, None
    args = m.group("args")
    for k, ch in enumerate(args):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            if cut is not None:
                cut = -1
                break
            cut = k
    if cut is None or cut < 0:
        raise ValueError(f"formula {text!r}: cbind() needs two arguments, successes and "
                         "failures (R's two-column binomial response).")
    if family.kind != "binomial":
        raise ValueError(f"formula {text!r}: a cbind(successes, failures) response needs "
                         f"family='binomial' or 'quasibinomial' (got {family.name!r}).")
    succ, fail = args[:cut].strip(), args[cut + 1:].strip()
    # arithmetic as R evaluates it (cbind(s, n - s)): formulaic reads '-' as term removal
    def wrap(e: str) -> str:
        return e if re.fullmatch(r"[\w.]+", e) else f"I({e})"

    return f"{wrap(succ)} ~{m.group('rhs')}", wrap(fail)


def _build_model(formula: str, design: Any, family: Family, offset: Any, na_rm: bool) -> _Model:
    text, exprs = _split_offset(_check_formula(formula))
    text, failures = _split_cbind(text, family)
    full = design.full_data
    extra = [o for o in [offset] if isinstance(o, str)]
    cols = formula_columns(" ".join([text, *exprs, *extra, failures or ""]), full.columns)
    na = design.missing_rows(sorted(set(cols)), na_rm, "svyglm")
    text = quote_dotted(text, full.columns)
    exprs = [quote_dotted(e, full.columns) for e in exprs]
    extra = [o if o in full.columns else quote_dotted(o, full.columns) for o in extra]
    offset = extra[0] if extra else offset
    inside = np.asarray(design.in_subset, dtype=bool)
    na_rows = np.zeros(inside.shape[0], dtype=bool) if na is None else np.asarray(na, bool)
    fit_rows = inside & ~na_rows
    data = full.loc[fit_rows]
    mm = formula_matrix(text, data, "svyglm", na_action="raise")
    X = np.asarray(mm.rhs, dtype=float)
    trials = None
    if failures is not None:
        succ = np.asarray(mm.lhs, dtype=float)[:, 0]
        fail = _evaluate(quote_dotted(failures, full.columns), data)
        _check_finite(fail, data.index, "the failures of cbind()")
        if np.any(succ < 0) or np.any(fail < 0):
            raise ValueError("svyglm: cbind(successes, failures) needs non-negative counts.")
        trials = succ + fail
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.where(trials > 0, succ / np.where(trials > 0, trials, 1.0), 0.0)
    else:
        y = _response(mm.lhs, family)
    off = _offset_values(offset, exprs, data, full.index, fit_rows, design)
    _check_finite(X, data.index, "the model matrix")
    _check_finite(y, data.index, "the response")
    _check_finite(off, data.index, "the offset")
    return _Model(X, y, off, list(map(str, mm.rhs.columns)), fit_rows, na_rows,
                  mm.rhs.model_spec, exprs + extra,
                  offset is not None and not isinstance(offset, str), trials)


def svyglm(formula: str, design: Any, family: str | Family = "gaussian", link: str | None = None,
           offset: str | Sequence[float] | np.ndarray | None = None, na_rm: bool = False,
           maxit: int = 25, epsilon: float = 1e-8, std_errors: str = "linearized",
           degf: bool = False) -> GLMResults:
    """Fit a survey-weighted GLM with design-based standard errors (R ``svyglm``).

    Parameters
    ----------
    formula : R-style formula, e.g. ``"api00 ~ ell + meals + stype"``; ``offset(expr)`` terms
        allowed.
    design : a :class:`~surveysynth.SurveyDesign` (linearization) or
        :class:`~surveysynth.ReplicateDesign` (replicate refits), possibly a ``subset()``.
    family : ``"gaussian"``, ``"binomial"``, ``"quasibinomial"``, ``"poisson"`` or
        ``"quasipoisson"``; ``link`` overrides the canonical link.
    offset : a column name, an expression (``"np.log(enroll)"``) or one value per row of
        ``design.data``; added to any ``offset()`` terms of the formula.
    na_rm : drop rows with a missing model variable (kept in the design for the variance);
        without it a missing value is an error naming the rows.
    maxit, epsilon : R's ``glm.control``.
    std_errors : ``"linearized"`` (default) or R survey 4.5's ``"Bell-McCaffrey"`` /
        ``"Bell-McCaffrey-2"`` (linearization designs): each first-stage cluster's working
        residuals are multiplied by ``(I - P_c)^{-1/2}``, ``P_c = X_c (X'X)^{-1} X_c'`` with
        the unweighted model matrix (R's ``scale_bell_mcaffrey``), before the usual sandwich
        (bias-reduced linearization, Bell and McCaffrey 2002). The two give the same SEs.
    degf : with Bell-McCaffrey SEs, the Bell-McCaffrey degrees of freedom per coefficient
        (``df_coef``; ``df_resid`` their minimum, as R): ``tr(M)^2 / tr(M^2)`` with M built
        from the n x n residual projection, under a unit (``"Bell-McCaffrey"``) or
        exchangeable (``"-2"``) working covariance. R loops over ``unique(design$cluster)``'s
        first ``K`` rows (K the number of PSUs), so in a multistage design it treats some
        PSUs more than once and others not at all; we treat each PSU once (the same numbers
        for one-stage designs; tests/test_bell_mccaffrey.py shows R's loop gives R's).

    Returns
    -------
    GLMResults with ``params``, ``bse``, ``tvalues``, ``pvalues``, ``df_resid``, ``vcov()``,
    ``conf_int()``, ``summary()`` and ``predict()``.
    """
    fam = get_family(family, link)
    if std_errors not in ("linearized", "Bell-McCaffrey", "Bell-McCaffrey-2"):
        raise ValueError(f"svyglm: std_errors={std_errors!r}: choose 'linearized', "
                         "'Bell-McCaffrey' or 'Bell-McCaffrey-2'.")
    if std_errors != "linearized" and getattr(design, "design_kind", "taylor") == "replicate":
        raise ValueError("svyglm: Bell-McCaffrey standard errors are for linearization "
                         "designs (R: 'not applicable to replicate designs').")
    model = _build_model(formula, design, fam, offset, na_rm)
    inside = np.asarray(design.in_subset, dtype=bool)
    w_full = np.asarray(design.full_weights, dtype=float)
    prior = w_full[model.fit_rows] / w_full[inside].mean()
    mustart = None
    if model.trials is not None:  # R binomial()$initialize on a two-column response
        n = model.trials
        mustart = (n * model.y + 0.5) / (n + 1)
        prior = prior * n
    check_rank(model.X, prior, model.names)
    fit = irls(model.X, model.y, prior, model.offset, fam, maxit=maxit, epsilon=epsilon,
               mustart=mustart)
    replicates = None
    df_coef = None
    if getattr(design, "design_kind", "taylor") == "replicate":
        vcov, replicates = _replicate_vcov(design, model, fam, fit, maxit, epsilon)
        # R: degf of the design before rows with missing values are dropped
        codes = np.where(inside, 0, -1)
    else:
        resid = fit.resid_working
        if std_errors != "linearized":
            groups = _psu_groups(design, model.fit_rows)
            resid, df_coef = bell_mccaffrey(resid, model.X, groups, std_errors, degf)
        estfun = model.X * (resid * fit.weights)[:, None]
        infl = np.zeros((inside.shape[0], model.X.shape[1]))
        infl[model.fit_rows] = estfun @ fit.cov_unscaled
        codes = np.where(model.fit_rows, 0, -1)
        vcov = influence_covariance(design, infl, codes)
    design_degf = float(design.domain_df(codes, 1)[0])
    # what regTermTest(method="LRT"), anova and AIC refit a sub-model with (R: update())
    refit = {"design": design, "family": fam, "offset": offset, "na_rm": na_rm,
             "maxit": maxit, "epsilon": epsilon}
    out = GLMResults(formula=formula, family=fam, fit=fit, model=model, vcov_matrix=vcov,
                     design_df=design_degf, design_kind=getattr(design, "design_kind", "taylor"),
                     replicates=replicates, prior_weights=prior, refit=refit)
    if df_coef is not None:
        out.set_df_coef(df_coef)
    return out


def _psu_groups(design: Any, fit_rows: np.ndarray) -> list[np.ndarray]:
    """The fit's rows of each first-stage cluster, in order of first appearance (each once)."""
    psu = np.asarray(design.stages[0].cluster)[fit_rows]
    return [np.flatnonzero(psu == c) for c in pd.unique(psu)]


def _mihalf(M: np.ndarray) -> np.ndarray:
    """R's ``mihalf``: symmetric inverse square root by ``eigen`` (zero eigenvalues left 0)."""
    val, vec = np.linalg.eigh(M)
    inv = np.zeros_like(val)
    nz = val != 0
    inv[nz] = 1 / val[nz]
    return (vec * np.sqrt(inv)) @ vec.T


def bell_mccaffrey(resid: np.ndarray, X: np.ndarray, groups: list[np.ndarray],
                   std_errors: str = "Bell-McCaffrey", degf: bool = False
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """R survey 4.5's ``scale_bell_mcaffrey``: the working residuals with each group's (PSU's)
    block multiplied by ``(I - X_g (X'X)^{-1} X_g')^{-1/2}``, the groups taken in the order
    given (a group given twice is scaled twice, as R's loop does in multistage designs), and
    with ``degf`` the Bell-McCaffrey df of each coefficient (else None)."""
    r = np.array(resid, dtype=float)
    invXtX = np.linalg.inv(X.T @ X)
    n, p = X.shape
    G = []
    H = np.eye(n) - X @ invXtX @ X.T if degf else None
    for idx in groups:
        Xg = X[idx]
        A = _mihalf(np.eye(idx.shape[0]) - Xg @ invXtX @ Xg.T)
        r[idx] = A.T @ r[idx]
        if degf:
            G.append(H[idx].T @ A @ Xg @ invXtX)  # n x p (Theorem 4)
    if not degf:
        return r, None
    df = np.empty(p)
    if std_errors == "Bell-McCaffrey-2":
        sigma2 = float(np.mean(r * r))
        cross = sum(float(np.sum(np.outer(r[g], r[g]))) for g in groups)
        n_cross = sum(g.shape[0] ** 2 for g in groups)
        rho = (cross - float(np.sum(r * r))) / (n_cross - n)
    for j in range(p):
        Gj = np.column_stack([g[:, j] for g in G])  # n x K
        if std_errors == "Bell-McCaffrey":
            M = Gj.T @ Gj
        else:
            VG = sigma2 * Gj
            for g in groups:
                blk = Gj[g]
                VG[g] += rho * (blk.sum(axis=0)[None, :] - blk)
            M = Gj.T @ VG
        lam = np.linalg.eigvalsh((M + M.T) / 2)
        df[j] = lam.sum() ** 2 / np.sum(lam * lam)
    return r, df


def _replicate_vcov(design, model, fam, fit, maxit, epsilon):
    """R ``svyglm.svyrep.design``: refit with each replicate's weights from the full fit."""
    inside = np.asarray(design.in_subset, dtype=bool)
    keep = model.fit_rows[inside]
    rep = np.asarray(design.replicate_weights("analysis"), dtype=float)[keep]
    betas = np.empty((rep.shape[1], model.X.shape[1]))
    for r in range(rep.shape[1]):
        wi = rep[:, r]
        if model.trials is not None:  # the trials weight every replicate's fit too
            wi = wi * model.trials
        betas[r] = irls(model.X, model.y, wi / wi.sum(), model.offset, fam, start=fit.coef,
                        maxit=maxit, epsilon=epsilon).coef
    return replicate_covariance(design, betas, fit.coef), betas


def _level_from(level: float | None, alpha: float | None, what: str) -> float:
    """The confidence level of a GLM interval from ``level=`` or the deprecated ``alpha=``
    (1 - level; every other function of the package takes ``level=``)."""
    if alpha is not None:
        if level is not None:
            raise ValueError(f"{what}: give level= only (alpha= is its deprecated alias, "
                             "alpha = 1 - level).")
        warnings.warn(f"{what}(alpha=...) is deprecated: use level={1 - alpha:g} (alpha = "
                      "1 - level; every estimator takes level=).", DeprecationWarning,
                      stacklevel=3)
        if not 0 < alpha < 1:
            raise ValueError(f"alpha={alpha}: must be in (0, 1).")
        return 1.0 - alpha
    level = 0.95 if level is None else level
    if not 0 < level < 1:
        raise ValueError(f"level={level}: must be in (0, 1).")
    return float(level)


class GLMResults:
    """A fitted survey-weighted GLM (statsmodels-like attributes, R ``svyglm`` numbers).

    Attributes: ``params``, ``bse``, ``tvalues``, ``pvalues`` (pandas Series by term),
    ``df_resid`` (design df + 1 - p), ``design_df``, ``nobs``, ``family``, ``link``,
    ``converged``, ``iterations``, ``deviance``, ``naive_cov`` (model-based, unscaled),
    ``replicates`` (replicate coefficients, replicate designs only).

    Example (made by :func:`surveysynth.svyglm`):

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> fit = ss.svyglm("api00 ~ stype", ss.SurveyDesign(df, strata="stype", weights="pw"))
    >>> fit.params.round(2)
    Intercept     650.00
    stype[T.H]    -53.33
    Name: estimate, dtype: float64
    """

    def __init__(self, formula: str, family: Family, fit: IRLSFit, model: _Model,
                 vcov_matrix: np.ndarray, design_df: float, design_kind: str,
                 replicates: np.ndarray | None = None, prior_weights: np.ndarray | None = None,
                 refit: dict[str, Any] | None = None) -> None:
        names = model.names
        self.formula = formula
        self.family = family.name
        self.link = family.link.name
        self._family = family
        self._model = model
        self._fit = fit
        self.design_kind = design_kind
        self.design_df = design_df
        self.df_resid = design_df + 1 - len(names)
        self.nobs = int(model.X.shape[0])
        self.converged = fit.converged
        self.iterations = fit.iterations
        self.deviance = fit.deviance
        self.params = pd.Series(fit.coef, index=names, name="estimate")
        self._vcov = pd.DataFrame(vcov_matrix, index=names, columns=names)
        self.naive_cov = pd.DataFrame(fit.cov_unscaled, index=names, columns=names)
        self.bse = pd.Series(np.sqrt(np.diag(vcov_matrix)), index=names, name="se")
        self.tvalues = pd.Series(self.params / self.bse, name="t")
        with np.errstate(invalid="ignore"):
            p = 2 * stats.t.sf(np.abs(self.tvalues), self.df_resid) if self.df_resid > 0 else (
                np.full(len(names), np.nan))
        self.pvalues = pd.Series(p, index=names, name="p")
        self.replicates = None if replicates is None else pd.DataFrame(replicates, columns=names)
        self.fitted_values = fit.mu
        self.prior_weights = prior_weights  # R glm$prior.weights (rescaled to mean 1)
        self.refit_arguments = refit  # design, family, offset, na_rm, maxit, epsilon

    def set_df_coef(self, df_coef: np.ndarray) -> None:
        """Bell-McCaffrey degrees of freedom per coefficient (R ``svyglm(degf=TRUE)``'s
        ``df.coef``): ``df_resid`` becomes their minimum and the p-values use it (R's
        ``summary.svyglm``)."""
        self.df_coef = pd.Series(np.asarray(df_coef, float), index=self.params.index,
                                 name="df")
        self.df_resid = float(self.df_coef.min())
        with np.errstate(invalid="ignore"):
            self.pvalues = pd.Series(2 * stats.t.sf(np.abs(self.tvalues), self.df_resid),
                                     index=self.params.index, name="p")

    @property
    def family_object(self) -> Family:
        """The :class:`~surveysynth.analysis.families.Family` fitted (R ``family(glm)``)."""
        return self._family

    @property
    def y(self) -> np.ndarray:
        """The response used by the fit (R ``glm$y``)."""
        return self._fit.y.copy()

    @property
    def working_weights(self) -> np.ndarray:
        """The IRLS working weights of the last iteration (R ``glm$weights``)."""
        return self._fit.weights.copy()

    @property
    def working_residuals(self) -> np.ndarray:
        """``(y - mu) / (d mu / d eta)`` at the final fit (R ``resid(glm, "working")``)."""
        return self._fit.resid_working.copy()

    @property
    def linear_predictors(self) -> np.ndarray:
        """Linear predictor with the offset (R ``glm$linear.predictors``)."""
        return self._fit.eta.copy()

    @property
    def model_matrix(self) -> np.ndarray:
        """The fitted model matrix (R ``model.matrix(glm)``)."""
        return self._model.X.copy()

    @property
    def offset(self) -> np.ndarray:
        """The offset of the fit (zeros without one)."""
        return self._model.offset.copy()

    @property
    def fit_rows(self) -> np.ndarray:
        """Boolean over the design's ``full_data``: the rows of the fit."""
        return self._model.fit_rows.copy()

    @property
    def term_columns(self) -> dict[str, list[int]]:
        """Model terms (formulaic's labels, ``"1"`` the intercept) and their columns (R's
        ``assign``)."""
        return {str(t): list(c) for t, c in self._model.spec.term_indices.items()}

    @property
    def term_factors(self) -> dict[str, frozenset[str]]:
        """Model terms and the set of factors each is made of (``a:b`` and ``b:a`` alike)."""
        return {str(t): frozenset(str(f) for f in t.factors)
                for t in self._model.spec.term_indices}

    def model_column(self, k: int) -> np.ndarray:
        """Column ``k`` of the fitted model matrix (rows of the fit)."""
        return self._model.X[:, k].copy()

    def vcov(self) -> pd.DataFrame:
        """Design-based covariance matrix of the coefficients (R ``vcov(svyglm)``)."""
        return self._vcov.copy()

    def update(self, formula: str) -> GLMResults:
        """The model refitted on its design with another formula (R ``update``): the same
        family, offset, ``na_rm`` and iteration settings. For models made by :func:`svyglm`."""
        r = self.refit_arguments
        if r is None:
            raise ValueError("update: this model was not made by svyglm(); cannot refit it.")
        return svyglm(formula, r["design"], family=r["family"], offset=r["offset"],
                      na_rm=r["na_rm"], maxit=r["maxit"], epsilon=r["epsilon"])

    def regTermTest(self, test_terms: Any, null: Any = None, df: float | None = None,  # noqa: N802
                    method: str = "Wald", lrt_approximation: str = "saddlepoint"):
        """Wald or Rao-Scott working test of model terms (R ``regTermTest``); see
        :func:`surveysynth.analysis.regTermTest`."""
        from .regtest import regTermTest

        return regTermTest(self, test_terms, null=null, df=df, method=method,
                           lrt_approximation=lrt_approximation)

    reg_term_test = regTermTest

    def anova(self, other: GLMResults | None = None, test: str = "F", method: str = "LRT",
              force: bool = False):
        """R ``anova.svyglm``: nested models or sequential terms; see
        :func:`surveysynth.analysis.anova`."""
        from .regtest import anova

        return anova(self, other, test=test, method=method, force=force)

    def aic(self, k: float = 2.0, null_has_intercept: bool = True,
            survey_version: str = "4.5") -> pd.Series:
        """Design-based AIC (Lumley & Scott 2015; R ``AIC.svyglm``): ``eff.p``, ``AIC``,
        ``deltabar``; see :func:`surveysynth.analysis.AIC`."""
        from .regtest import AIC

        return AIC(self, k=k, null_has_intercept=null_has_intercept,
                   survey_version=survey_version)

    def bic(self, maximal: GLMResults) -> pd.Series:
        """Design-based BIC against a maximal model (R ``BIC.svyglm``): ``p``, ``BIC``,
        ``neff``; see :func:`surveysynth.analysis.BIC`."""
        from .regtest import BIC

        return BIC(self, maximal=maximal)

    cov_params = vcov

    def conf_int(self, alpha: float | None = None, *, level: float | None = None) -> pd.DataFrame:
        """Wald intervals with the t distribution on ``df_resid`` (R ``confint.svyglm``) at
        confidence ``level`` (default 0.95), as every estimator's ``level=``.

        ``alpha`` (1 - level; also the old first positional argument) is a deprecated alias,
        kept for one release: it warns (DeprecationWarning). ``level`` is keyword-only until
        then, so that an old ``conf_int(0.05)`` still means alpha = 0.05, never level = 0.05.
        """
        level = _level_from(level, alpha, "conf_int")
        if self.df_resid <= 0:
            crit = np.nan
        else:
            crit = stats.t.ppf(1 - (1 - level) / 2, self.df_resid)
        return pd.DataFrame({"lower": self.params - crit * self.bse,
                             "upper": self.params + crit * self.bse})

    def coef_table(self, alpha: float | None = None, *,
                   level: float | None = None) -> pd.DataFrame:
        """One row per term: estimate, se, t, p, lower, upper (``level`` as :meth:`conf_int`;
        ``alpha`` a deprecated alias)."""
        ci = self.conf_int(level=_level_from(level, alpha, "coef_table"))
        return pd.DataFrame({"estimate": self.params, "se": self.bse, "t": self.tvalues,
                             "p": self.pvalues, "lower": ci["lower"], "upper": ci["upper"]})

    def summary(self, alpha: float | None = None, *, level: float | None = None) -> GLMSummary:
        """The coefficient table with the model and design facts (``.text``, ``.html``);
        ``level`` as :meth:`conf_int` (``alpha`` a deprecated alias)."""
        level = _level_from(level, alpha, "summary")
        return GLMSummary(self, self.coef_table(level=level), 1 - level)

    def predict(self, newdata: pd.DataFrame | None = None, type: str = "link",  # noqa: A002
                offset: Sequence[float] | np.ndarray | None = None, total: float | None = None,
                vcov: bool = False) -> pd.DataFrame:
        """Predictions and their design-based SEs (R ``predict.svyglm``).

        ``type="link"`` gives the linear predictor, ``"response"`` the mean (SE by the delta
        method). Without ``newdata``, the rows of the fit. The offset is added: from the
        formula's ``offset()`` terms or column evaluated on ``newdata``, or ``offset=`` when the
        model was fitted with an array offset. ``total=N`` multiplies the intercept by N (R's
        regression estimator of a total), ``vcov=True`` keeps the predictions' covariance in
        ``attrs["vcov"]``; ``type="terms"``: each term's centred contribution over the rows of
        the fit with ``attrs["se"]`` and ``attrs["constant"]`` (R's ``predterms``); see
        :func:`surveysynth.analysis.predict_svyglm`.
        """
        if type == "terms":
            return self._predict_terms()
        if type not in ("link", "response"):
            raise ValueError(f"type={type!r}: choose 'link', 'response' or 'terms'.")
        if newdata is None:
            X, off, index = self._model.X, self._model.offset, None
        else:
            X, off, index = self._new_matrix(newdata, offset)
        X = np.array(X, dtype=float)
        k = self.term_columns.get("1")
        if total is not None and k is not None:  # R: only when the model has an intercept
            X[:, k[0]] *= float(total)
        V = self._vcov.to_numpy()
        eta = X @ self.params.to_numpy() + off
        cov = X @ V @ X.T if vcov else None
        var = np.einsum("ij,jk,ik->i", X, V, X)
        if type == "response":
            d = self._family.link.mu_eta(eta)
            eta = self._family.link.linkinv(eta)
            var = d * d * var
            if cov is not None:
                cov = d[:, None] * cov * d[None, :]
        out = pd.DataFrame({"fit": eta, "se": np.sqrt(var)}, index=index)
        if cov is not None:
            out.attrs["vcov"] = cov
        return out

    def _predict_terms(self) -> pd.DataFrame:
        """R's ``predict(type="terms")`` (``predterms``): each term's contribution
        ``(x - mean x)' beta`` over the rows of the fit (columns centred by their unweighted
        means when the model has an intercept), its SE from the term's block of the design
        covariance in ``attrs["se"]``, and ``attrs["constant"]`` (``mean x' beta``). As in R,
        for the rows of the fit only (R ignores ``newdata`` here)."""
        X = self._model.X.astype(float)
        beta = self.params.to_numpy()
        V = self._vcov.to_numpy()
        cols = self.term_columns
        has_int = "1" in cols
        avx = X.mean(axis=0)
        if has_int:
            X = X - avx
        fit, se = {}, {}
        for term, idx in cols.items():
            if term == "1":
                continue
            Xi = X[:, idx]
            fit[term] = Xi @ beta[idx]
            se[term] = np.sqrt(np.einsum("ij,jk,ik->i", Xi, V[np.ix_(idx, idx)], Xi))
        out = pd.DataFrame(fit)
        out.attrs["se"] = pd.DataFrame(se)
        out.attrs["constant"] = float(avx @ beta) if has_int else 0.0
        return out

    def new_model_matrix(self, newdata: pd.DataFrame,
                         offset: Sequence[float] | np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """The fit's model matrix and offset evaluated on ``newdata`` (R
        ``model.matrix(delete.response(terms(m)), newdata)``), coded as the fit was."""
        X, off, _ = self._new_matrix(newdata, offset)
        return X, off

    def _new_matrix(self, newdata: pd.DataFrame, offset):
        if not isinstance(newdata, pd.DataFrame):
            raise TypeError(f"newdata must be a pandas DataFrame, got {type(newdata).__name__}.")
        mm = self._model.spec.get_model_matrix(newdata, na_action="raise")
        X = np.asarray(mm, dtype=float)
        off = np.zeros(X.shape[0])
        for e in self._model.offset_exprs:
            off += _evaluate(e, newdata)
        if self._model.offset_array:
            if offset is None:
                raise ValueError(
                    "predict: the model was fitted with an array offset; pass offset= with one "
                    "value per row of newdata."
                )
            off += np.asarray(offset, dtype=float).reshape(-1)
        return X, off, newdata.index

    def __repr__(self) -> str:
        return self.summary().text


class GLMSummary:
    """Printable summary of :class:`GLMResults`: ``.text`` (str), ``.html``, ``.table``."""

    def __init__(self, res: GLMResults, table: pd.DataFrame, alpha: float) -> None:
        self.table = table
        kind = {"taylor": "linearization", "replicate": "replicate weights"}.get(
            res.design_kind, res.design_kind)
        lo, hi = f"[{alpha / 2:g}", f"{1 - alpha / 2:g}]"
        self.header = [
            f"Survey-weighted GLM: family {res.family}, link {res.link}",
            f"Formula: {res.formula}",
            f"Design: {kind}; n = {res.nobs}; design df = {res.design_df:g}; "
            f"residual df = {res.df_resid:g}",
        ]
        self.footer = (f"t and p values on {res.df_resid:g} df; intervals {lo}, {hi} Wald-t. "
                       f"IRLS iterations: {res.iterations}"
                       + ("" if res.converged else " (did not converge)"))
        shown = table.rename(columns={"lower": lo, "upper": hi})
        self._shown = shown

    @property
    def text(self) -> str:
        body = self._shown.to_string(float_format=lambda v: f"{v:.6g}")
        return "\n".join([*self.header, "", body, "", self.footer])

    @property
    def html(self) -> str:
        head = "".join(f"<p>{html.escape(h)}</p>" for h in self.header)
        return (f"<div>{head}{self._shown.to_html(float_format=lambda v: f'{v:.6g}')}"
                f"<p>{html.escape(self.footer)}</p></div>")

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__
