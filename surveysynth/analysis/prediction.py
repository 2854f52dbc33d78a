"""Predictions from survey-weighted GLMs: R ``predict.svyglm`` (with ``total=`` and the full
covariance), ``marginpred`` and ``svypredmeans`` (R survey 4.1.1 and 4.5 compute them alike).

* :func:`predict_svyglm` (also ``GLMResults.predict``): the linear predictor ``x'b`` or the mean
  ``g^{-1}(x'b)`` at new covariates, SE ``sqrt(x' V x)`` (times ``d mu / d eta`` for the mean,
  the delta method) from the design-based ``V``; ``total=N`` multiplies the intercept column by
  ``N`` (R's regression estimator of a population total from population totals of the
  covariates); ``vcov=True`` keeps the covariance of all the predictions.
* :func:`marginpred`: predictions "adjusted" for confounders that are not in the model (Lumley's
  marginal prediction): the weights are raked (R ``grake``, ``cal.raking``, bounds ``[0, Inf)``,
  ``epsilon=1e-4``, ``maxit=100``) so that every centred model covariate is uncorrelated with
  every centred adjustment variable, the model is refitted with those weights and predicted.
  As in R, the refit's design keeps the original design's variance structure with the new
  weights: R assigns the calibration's variance adjustment to a copy of the design it does not
  use, so its SEs do not include the raking step; they are reproduced here as R computes them.
  R refuses replicate designs (its ``weights()`` there is the replicate matrix), so does this.
* :func:`svypredmeans`: means of the outcome standardized over the population's covariates,
  for each level of a group factor (R ``svypredmeans``): the model plus the group is refitted,
  every row's prediction is made with the group set to each level, and the weighted mean of
  those predictions gets the design variance of the mean plus ``g' V g`` for the coefficients
  (``g`` the mean gradient of the predictions). Works on linearization, calibrated and replicate
  designs; the result carries its covariance, so :func:`surveysynth.contrast` gives R's
  ``svycontrast(means, quote(`1`/`2`))``.

Difference from R, on purpose: predictions add the model's offset (R's ``predict.svyglm``
leaves it out), as ``GLMResults.predict`` always has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..estimate import attach_vcov, estimate_frame
from .covariance import mean_covariance
from .formulas import formula_matrix, quote_dotted


def predict_svyglm(model: Any, newdata: pd.DataFrame | None = None, type: str = "link",  # noqa: A002
                   total: float | None = None, vcov: bool = False,
                   offset: Sequence[float] | np.ndarray | None = None) -> pd.DataFrame:
    """Predictions of a :func:`~surveysynth.analysis.svyglm` fit with design-based SEs (R
    ``predict.svyglm``).

    Parameters
    ----------
    model : a ``GLMResults``.
    newdata : covariates to predict at (default: the rows of the fit).
    type : ``"link"`` (linear predictor) or ``"response"`` (mean; SE by the delta method).
    total : a population size N: the intercept column is multiplied by N, so that with
        ``newdata`` holding population totals of the covariates the prediction is the
        regression estimator of the population total of the outcome (R ``total=``).
    vcov : keep the covariance matrix of all predictions in ``attrs["vcov"]`` (R
        ``vcov=TRUE``, ``vcov(predict(...))``).
    offset : with a model fitted with an array offset, one value per row of ``newdata``.

    Returns
    -------
    A DataFrame with ``fit`` and ``se`` (index: ``newdata``'s).
    """
    return model.predict(newdata, type=type, total=total, vcov=vcov, offset=offset)


def _refit(model: Any, formula: str, design: Any):
    from .glm import svyglm

    args = dict(model.refit_arguments)
    args.pop("design")
    return svyglm(formula, design, **args)


def _check_full_fit(model: Any, what: str, allow_na: bool = False) -> Any:
    design = model.refit_arguments["design"]
    if design.is_subset:
        raise ValueError(
            f"{what}: the model was fitted on a subset() design. Fix: build the design on the "
            "domain's rows, or fit on the full design with the domain as a covariate.")
    if not allow_na and not model.fit_rows.all():
        rows = design.full_data.index[~model.fit_rows][:5].tolist()
        raise ValueError(
            f"{what}: the model dropped rows with missing values ({rows}...). Fix: build the "
            "design on the complete rows (R drops them from the design first).")
    return design


def _independent_columns(A: np.ndarray, tol: float = 1e-7) -> list[int]:
    """Columns of A kept by R's ``qr`` (LINPACK ``dqrdc2``): in order, a column whose norm
    orthogonal to the columns kept before it is below ``tol`` times its own norm (or that is
    zero) is moved to the end, i.e. dropped."""
    kept: list[int] = []
    Q = np.zeros((A.shape[0], 0))
    for j in range(A.shape[1]):
        a = A[:, j]
        norm = np.linalg.norm(a)
        r = a - Q @ (Q.T @ a)
        rn = np.linalg.norm(r)
        if norm == 0 or rn < tol * norm:
            continue
        kept.append(j)
        Q = np.column_stack([Q, r / rn])
    return kept


def _rhs(formula: str) -> str:
    text = formula.strip()
    return text[1:].strip() if text.startswith("~") else text


def _rake_uncorrelated(mod: np.ndarray, adj: np.ndarray, w: np.ndarray, what: str,
                       adjustfor: str) -> np.ndarray:
    """R's marginpred raking: g-weights making the products of the (centred) model columns and
    the adjustment columns total ``total(adj) x mean(model)`` (R ``grake``, raking, bounds
    ``[0, Inf)``, epsilon 1e-4, maxit 100). Returns g and the product matrix."""
    from ..calibration import CalibrationError, grake

    if len(_independent_columns(mod)) < mod.shape[1]:
        raise ValueError(f"{what}: the model matrix is singular.")
    kept = _independent_columns(np.column_stack([mod, adj]))
    if len(kept) == mod.shape[1]:
        raise ValueError(
            f"{what}: the adjustment variables {adjustfor!r} are all in the model. Fix: "
            "adjust for variables the model does not contain.")
    adj = adj[:, [k - mod.shape[1] for k in kept[mod.shape[1]:]]]
    na, nm = adj.shape[1], mod.shape[1]
    mm = np.empty((mod.shape[0], na * nm))
    for i in range(nm):
        mm[:, i * na:(i + 1) * na] = adj * mod[:, [i]]
    pop = np.outer((adj * w[:, None]).sum(axis=0),
                   (mod * w[:, None]).sum(axis=0) / w.sum()).reshape(-1, order="F")
    g, info = grake(mm, w, pop, "raking", (0.0, np.inf), 1e-4, 100)
    if not info["converged"]:
        raise CalibrationError(
            f"{what}: raking did not converge in 100 iterations (relative misfit "
            f"{info['misfit']:.3g}, R: 'Calibration failed').")
    return g, mm


def _adjust_matrix(adjustfor: str, data: pd.DataFrame, what: str) -> np.ndarray:
    return np.asarray(formula_matrix(quote_dotted(_rhs(adjustfor), data.columns), data,
                                     f"{what} adjustfor", na_action="raise"), dtype=float)


def _calibrated(design: Any, g: np.ndarray, mm: np.ndarray) -> Any:
    """R's marginpred for svycoxph and svykm: ``prob / g`` and a ``greg_calibration`` entry in
    ``postStrata`` built from the new weights (``whalf = sqrt(weights(design))`` after the
    update), so the refit's variance includes the raking."""
    from ..calibration import GregAdjustment, _orthobasis

    w_new = np.asarray(design.full_weights, dtype=float) * g
    whalf = np.sqrt(w_new)
    return design.with_calibration(w_new, GregAdjustment(_orthobasis(mm * whalf[:, None]),
                                                         g * whalf))


def _marginpred_cox(model: Any, adjustfor: str, predictat: pd.DataFrame, se: bool):
    from .survival import predict_svycoxph, svycoxph

    fit = model.fit_data
    design = fit["design"]
    if fit.get("strata") is not None:
        raise ValueError("marginpred: stratified Cox models are not supported (R's curves "
                         "are not available for them).")
    if getattr(design, "design_kind", "taylor") == "replicate":
        raise ValueError("marginpred: replicate designs are not supported (R: its raking "
                         "uses design$prob). Fix: use the linearization design.")
    if design.is_subset or not fit["scope"].all():
        raise ValueError("marginpred: the Cox model must use every row of a full design (no "
                         "subset, missing value or zero weight).")
    w = np.asarray(design.full_weights, dtype=float)
    adj = _adjust_matrix(adjustfor, design.full_data, "marginpred")  # R: not centred
    mod = fit["X"] - fit["means"]  # R: sweep(model.matrix(model), 2, model$means)
    g, mm = _rake_uncorrelated(mod, adj, w, "marginpred", adjustfor)
    refit = svycoxph(model.formula, _calibrated(design, g, mm), ties=model.ties,
                     rescale=fit["rescale"])
    out = predict_svycoxph(refit, predictat, se=se)
    out.g_weights = g
    return out


def _marginpred_km(model: Any, adjustfor: str, se: bool):
    from .survival import svykm

    call = model.call
    design = call["design"]
    if getattr(design, "design_kind", "taylor") == "replicate":
        raise ValueError("marginpred: replicate designs are not supported (R: its raking "
                         "uses design$prob). Fix: use the linearization design.")
    if design.is_subset or not call["scope"].all():
        raise ValueError("marginpred: the curves must use every row of a full design (no "
                         "subset or missing value).")
    data = design.full_data
    w = np.asarray(design.full_weights, dtype=float)
    adj = _adjust_matrix(adjustfor, data, "marginpred")
    adj = adj - (adj * w[:, None]).sum(axis=0) / w.sum()
    mod = np.asarray(formula_matrix(quote_dotted(call["rhs"], data.columns), data,
                                    "marginpred", na_action="raise"), dtype=float)[:, 1:]
    mod = mod - (mod * w[:, None]).sum(axis=0) / w.sum()
    g, mm = _rake_uncorrelated(mod, adj, w, "marginpred", adjustfor)
    out = svykm(call["formula"], _calibrated(design, g, mm), se=se)
    out.g_weights = g
    return out


def marginpred(model: Any, adjustfor: str, predictat: pd.DataFrame, type: str = "link",  # noqa: A002
               total: float | None = None, vcov: bool = False, se: bool = False) -> Any:
    """Predictions from ``model`` adjusted for the variables of ``adjustfor`` (R
    ``marginpred``, for ``svyglm``, ``svycoxph`` and ``svykm`` results).

    The weights are raked so that, in the reweighted sample, the model's covariates (centred)
    are uncorrelated with the adjustment variables: the adjustment variables are balanced
    across the model's covariates as in a randomized comparison. The model is refitted with
    those weights and predicted at ``predictat``.

    Parameters
    ----------
    model : a ``GLMResults`` from :func:`~surveysynth.analysis.svyglm` (linearization design,
        possibly calibrated, with an intercept and no dropped rows), a ``CoxResults`` from
        :func:`~surveysynth.analysis.svycoxph` or the grouped curves (``KMCurves``) of
        :func:`~surveysynth.analysis.svykm`.
    adjustfor : formula of the adjustment variables, e.g. ``"~x"`` or ``"~ age + C(sex)"``.
    predictat : covariates of the model to predict at (for ``svykm`` only its row count
        matters, as in R).
    type, total, vcov : as :func:`predict_svyglm` (svyglm).
    se : curves with SEs (svycoxph, svykm; R's ``se=``).

    Returns
    -------
    svyglm: :func:`predict_svyglm`'s frame of the refitted model (``attrs["g_weights"]`` the
    raking factors); svycoxph: the refitted model's curves at ``predictat``
    (:func:`~surveysynth.analysis.predict_svycoxph`); svykm: the curves of the raked design.
    For svycoxph and svykm R adds the raking to the design's calibration, so their SEs include
    it; for svyglm R's refit does not (see the module docstring).
    """
    from .survival import CoxResults, KMCurves

    if not isinstance(predictat, pd.DataFrame) or predictat.shape[0] == 0:
        raise ValueError("marginpred: predictat must be a non-empty DataFrame of covariates.")
    if isinstance(model, CoxResults):
        return _marginpred_cox(model, adjustfor, predictat, se)
    if isinstance(model, KMCurves):
        if not hasattr(model, "call"):
            raise ValueError("marginpred: needs the grouped curves of svykm (formula with a "
                             "right-hand side).")
        return _marginpred_km(model, adjustfor, se)
    from ..calibration import _with_weights

    if getattr(model.refit_arguments["design"], "design_kind", "taylor") == "replicate":
        raise ValueError(
            "marginpred: replicate designs are not supported (R's marginpred fails on them "
            "too: it rakes weights(design), the replicate-weight matrix). Fix: use the "
            "linearization design.")
    design = _check_full_fit(model, "marginpred")
    if "1" not in model.term_columns or model.term_columns["1"] != [0]:
        raise ValueError(
            "marginpred: the model needs an intercept (R drops the model matrix's first "
            "column, assuming it is the intercept).")
    data = design.full_data
    w = np.asarray(design.full_weights, dtype=float)
    adj = _adjust_matrix(adjustfor, data, "marginpred")
    adj = adj - (adj * w[:, None]).sum(axis=0) / w.sum()
    mod = model.model_matrix[:, 1:]
    mod = mod - (mod * w[:, None]).sum(axis=0) / w.sum()
    g, _ = _rake_uncorrelated(mod, adj, w, "marginpred", adjustfor)
    refit = _refit(model, model.formula, _with_weights(design, w * g))
    out = predict_svyglm(refit, predictat, type=type, total=total, vcov=vcov)
    out.attrs["g_weights"] = g
    return out


_FACTOR = re.compile(r"^(?:factor|C|as\.factor)\((.+)\)$")


def _with_column(design: Any, name: str, values: Any) -> Any:
    """A copy of ``design`` with one more column in its data (R ``update(design, name=...)``)."""
    new = object.__new__(type(design))
    new.__dict__.update(design.__dict__)
    frame = design.full_data.copy()
    frame[name] = values
    new._frame = frame
    new._on_subset()
    return new


def _r_label(value: Any) -> str:
    """R's ``as.character`` of a group value (``2`` for 2.0, ``0.5``, a level's name)."""
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.15g}"
    return str(value)


def svypredmeans(adjustmodel: Any, groupfactor: str,
                 predictat: Sequence[Any] | None = None, level: float = 0.95,
                 ci: str = "normal") -> pd.DataFrame:
    """Predictive-margin means of the outcome for each group (R ``svypredmeans``).

    Parameters
    ----------
    adjustmodel : a ``GLMResults`` of the outcome on the adjustment covariates (R
        ``agesexmodel``). The means are over the rows of its fit: a ``subset()`` design's
        domain, without the rows ``na_rm=True`` dropped (R's svyglm drops them from its
        design, so R's svypredmeans averages over the complete rows too). On a calibrated
        design with missing outcomes R keeps the incomplete rows with weight 0, and its
        ``model.matrix`` drops them while its weights do not: the rows of its gradient are
        misaligned (a bug; its SEs are wrong there, measured up to 146%); ours are aligned.
    groupfactor : the group: a column name (``"enroll"``: numeric as it is; a categorical
        column: a factor) or ``"factor(col)"`` / ``"C(col)"`` (a numeric column as a factor,
        R's ``~factor(race)``); a leading ``~`` is allowed.
    predictat : the group values to predict at (default: the distinct non-missing values of the
        group in order of appearance, as R's ``unique``).
    level, ci : the interval (``"normal"``, R's ``confint``, or ``"t"`` on the design df).

    Returns
    -------
    An estimate frame, one row per group value (``variable`` its label), with ``estimate``,
    ``se``, ``ci_low``, ``ci_high``, ``df``; :func:`surveysynth.vcov` gives the covariance and
    :func:`surveysynth.contrast` ratios of the means.
    """
    design = adjustmodel.refit_arguments["design"]
    # R: the model's design is the design without the rows svyglm dropped for missing values
    # (R's design[nas == 0, ], a domain for the variance), or the subset it was fitted on
    scope = np.asarray(adjustmodel.fit_rows, dtype=bool)
    data = design.full_data
    expr = _rhs(str(groupfactor))
    m = _FACTOR.match(expr)
    col = m.group(1).strip() if m else expr
    if col not in data.columns:
        raise ValueError(
            f"svypredmeans: groupfactor={groupfactor!r}: {col!r} is not a column of the "
            f"design's data. Fix: one of {list(map(str, data.columns))[:12]}...")
    raw = data[col]
    as_factor = bool(m) or isinstance(raw.dtype, pd.CategoricalDtype) or raw.dtype == object \
        or raw.dtype == bool
    name = "svypredmeans_group_"
    if as_factor:
        values = raw.astype("category") if not isinstance(raw.dtype, pd.CategoricalDtype) \
            else raw
        term = f"C({name})"
    else:
        values = raw.astype(float)
        term = name
    if predictat is None:
        seen = pd.unique(pd.Series(np.asarray(raw)[scope]))
        groups = [v for v in seen if not pd.isna(v)]
    else:
        groups = list(predictat) if not np.isscalar(predictat) else [predictat]
    gdesign = _with_column(design, name, values)
    inside = np.asarray(design.in_subset, dtype=bool)
    if (scope != inside).any() and not getattr(design, "_calibration", ()):
        # R refits on its design without the incomplete rows: rows removed (not weighted 0,
        # as R does on calibrated designs), so the refit's prior weights are scaled to mean 1
        # over the complete rows; glm.fit's stopping point, hence the SEs at 1e-7, depend on it
        gdesign = gdesign.subset(scope[inside])
    model = _refit(adjustmodel, f"{adjustmodel.formula} + {term}", gdesign)
    w = np.asarray(design.full_weights, dtype=float)
    fam = model.family_object
    V = model.vcov().to_numpy()
    fits = np.zeros((data.shape[0], len(groups)))
    grad = np.empty((V.shape[0], len(groups)))
    frame = gdesign.full_data.loc[scope]
    w = w[scope]
    for i, gval in enumerate(groups):
        nd = frame.copy()
        if as_factor:
            nd[name] = pd.Categorical([gval] * nd.shape[0], categories=values.cat.categories)
        else:
            nd[name] = float(gval)
        X, off = model.new_model_matrix(nd)
        eta = X @ model.params.to_numpy() + off
        fits[scope, i] = fam.link.linkinv(eta)
        grad[:, i] = (X * (w * fam.link.mu_eta(eta))[:, None]).sum(axis=0) / w.sum()
    codes = np.where(scope, 0, -1)
    est, cond = mean_covariance(design, fits, codes)
    cov = grad.T @ V @ grad + cond
    labels = [(_r_label(g), None) for g in groups]
    df = float(design.domain_df(codes, 1)[0])
    out = estimate_frame(None, 1, labels, np.asarray(est, dtype=float),
                         np.sqrt(np.diag(cov)), [df], level, ci)
    attach_vcov(out, [lab[0] for lab in labels], cov)
    out.attrs["parts"] = {"coefficients": grad.T @ V @ grad, "design": cond}
    return out
